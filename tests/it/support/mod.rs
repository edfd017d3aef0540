//! Test helpers: real backends and a real proxy on 127.0.0.1 port 0, and a
//! small HTTP client. Everything stops when its handle is dropped.

#![allow(dead_code, unreachable_pub)]

pub mod binary;
pub mod ops;
pub mod reload;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A running server that stops when dropped.
pub struct Running {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// Requests the server has received.
    pub hits: Arc<AtomicUsize>,
    /// The proxy, when this is one.
    pub proxy: Option<Arc<shardgate::proxy::Proxy>>,
}

impl Running {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn stop_signal(rx: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// A backend for `region`. Paths starting `/t/<mode>/` select a behaviour:
/// `slow` (answers after 2 s), `chunked` (5 chunks), `status204`,
/// `status304`, `truncated` (promises 1000 bytes, sends 10, then fails),
/// `ws` (101 upgrade, then echoes bytes); anything else echoes the request
/// as JSON (shardgate's demo backend).
pub async fn backend(region: &str) -> Result<Running, BoxError> {
    backend_on(TcpListener::bind("127.0.0.1:0").await?, region).await
}

/// Like [`backend`], on a given listener (to bring a backend back on the
/// same address). Stopping it closes the listener and every open connection.
/// Health-check requests (`user-agent: shardgate-health`) are not counted.
pub async fn backend_on(listener: TcpListener, region: &str) -> Result<Running, BoxError> {
    let addr = listener.local_addr()?;
    let (stop, rx) = watch::channel(false);
    let hits = Arc::new(AtomicUsize::new(0));
    let region: Arc<str> = region.into();
    let h = Arc::clone(&hits);
    let mut shutdown = rx.clone();
    tokio::spawn(async move {
        let builder = auto::Builder::new(TokioExecutor::new());
        // Dropped when this task ends: aborts every connection.
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (stream, _) = tokio::select! {
                r = listener.accept() => match r { Ok(p) => p, Err(_) => continue },
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let region = Arc::clone(&region);
            let h = Arc::clone(&h);
            let svc = service_fn(move |req: Request<Incoming>| {
                let probe = req.headers().get("user-agent").is_some_and(|v| v.as_bytes() == b"shardgate-health");
                if !probe {
                    h.fetch_add(1, Ordering::SeqCst);
                }
                let region = Arc::clone(&region);
                async move { Ok::<_, Infallible>(behave(&region, req).await) }
            });
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
            conns.spawn(conn);
        }
    });
    Ok(Running { addr, stop, hits, proxy: None })
}

pub type TestBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

pub fn full(b: impl Into<Bytes>) -> TestBody {
    Full::new(b.into()).map_err(|e: Infallible| -> BoxError { match e {} }).boxed()
}

async fn behave(region: &str, mut req: Request<Incoming>) -> Response<TestBody> {
    let path = req.uri().path().to_string();
    let mode = path.strip_prefix("/t/").and_then(|p| p.split('/').next()).unwrap_or("");
    let mut resp = match mode {
        "slow" => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Response::new(full("slow"))
        }
        "chunked" => {
            let chunks = (0..5).map(|i| Ok::<_, BoxError>(Frame::data(Bytes::from(format!("chunk{i};")))));
            let stream = futures_stream(chunks.collect());
            Response::new(StreamBody::new(stream).boxed())
        }
        "status204" => {
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        "status304" => {
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            r.headers_mut().insert("etag", http::HeaderValue::from_static("\"v1\""));
            r
        }
        "truncated" => {
            let frames: Vec<Result<Frame<Bytes>, BoxError>> =
                vec![Ok(Frame::data(Bytes::from_static(b"0123456789"))), Err("backend gave up".into())];
            let mut r = Response::new(StreamBody::new(futures_stream(frames)).boxed());
            r.headers_mut().insert("content-length", http::HeaderValue::from_static("1000"));
            r
        }
        "ws" => {
            let on_upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(up) = on_upgrade.await {
                    let mut io = TokioIo::new(up);
                    let (mut r, mut w) = tokio::io::split(&mut io);
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                }
            });
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            r.headers_mut().insert("upgrade", http::HeaderValue::from_static("websocket"));
            r.headers_mut().insert("connection", http::HeaderValue::from_static("upgrade"));
            // Its own id and `Via`: the proxy replaces the one, follows the other.
            r.headers_mut().insert("x-request-id", http::HeaderValue::from_static("from-upstream"));
            r.headers_mut().insert("via", http::HeaderValue::from_static("1.1 ws-backend"));
            r
        }
        _ => shardgate::cli::backend::answer(region, req).await.map(|b| b.map_err(|e| match e {}).boxed()),
    };
    if let Ok(v) = http::HeaderValue::from_str(region) {
        resp.headers_mut().insert("x-backend-region", v);
    }
    resp
}

/// Open connections of a backend: now, and the most at once.
#[derive(Debug, Default)]
pub struct Conns {
    pub open: AtomicUsize,
    pub most: AtomicUsize,
}

/// Whether a request is one of shardgate's health checks.
pub fn is_health_check<B>(req: &Request<B>) -> bool {
    req.headers().get("user-agent").is_some_and(|v| v.as_bytes() == b"shardgate-health")
}

/// A backend whose every answer (health checks included) comes from
/// `answer`; counts requests other than health checks in `hits`, and its
/// connections in the returned [`Conns`].
pub async fn backend_with<F, Fut>(answer: F) -> Result<(Running, Arc<Conns>), BoxError>
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<TestBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, rx) = watch::channel(false);
    let hits = Arc::new(AtomicUsize::new(0));
    let conns = Arc::new(Conns::default());
    let (h, c) = (Arc::clone(&hits), Arc::clone(&conns));
    let answer = Arc::new(answer);
    let mut shutdown = rx.clone();
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let (stream, _) = tokio::select! {
                r = listener.accept() => match r { Ok(p) => p, Err(_) => continue },
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let open = c.open.fetch_add(1, Ordering::SeqCst) + 1;
            c.most.fetch_max(open, Ordering::SeqCst);
            let (h, c, answer) = (Arc::clone(&h), Arc::clone(&c), Arc::clone(&answer));
            tasks.spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    if !is_health_check(&req) {
                        h.fetch_add(1, Ordering::SeqCst);
                    }
                    let answer = Arc::clone(&answer);
                    async move { Ok::<_, Infallible>(answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                c.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok((Running { addr, stop, hits, proxy: None }, conns))
}

/// A stream over ready items, yielding each after a short pause (so chunks
/// really travel separately).
fn futures_stream<T: Send + 'static>(items: Vec<T>) -> impl futures_core::Stream<Item = T> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for item in items {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream(rx)
}

struct ReceiverStream<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// Backends for the regions eu, kz and us, in that order.
pub async fn three_backends() -> Result<[Running; 3], BoxError> {
    Ok([backend("eu").await?, backend("kz").await?, backend("us").await?])
}

/// Three listeners on 127.0.0.1 port 0 and their addresses, so the tables
/// of three instances can name each other before any of them serves.
pub async fn three_listeners() -> Result<([TcpListener; 3], [SocketAddr; 3]), BoxError> {
    let listeners = [
        TcpListener::bind("127.0.0.1:0").await?,
        TcpListener::bind("127.0.0.1:0").await?,
        TcpListener::bind("127.0.0.1:0").await?,
    ];
    let addrs = [listeners[0].local_addr()?, listeners[1].local_addr()?, listeners[2].local_addr()?];
    Ok((listeners, addrs))
}

/// A proxy serving `yaml` (a routing table) on 127.0.0.1 port 0.
pub async fn proxy(yaml: &str) -> Result<Running, BoxError> {
    proxy_on(TcpListener::bind("127.0.0.1:0").await?, yaml).await
}

/// A proxy serving `yaml` on an already bound listener (to know peers'
/// addresses before their tables are written), started as `demo` starts
/// one ([`shardgate::app::spawn_proxy`]).
pub async fn proxy_on(listener: TcpListener, yaml: &str) -> Result<Running, BoxError> {
    let cfg = shardgate::config::load_str(yaml, "test.yaml").map_err(|e| format!("test table invalid:\n{e}"))?;
    let addr = listener.local_addr()?;
    let (stop, rx) = watch::channel(false);
    let (proxy, _serving) = shardgate::app::spawn_proxy(&cfg, yaml, listener, None, stop_signal(&rx))?;
    Ok(Running { addr, stop, hits: Arc::new(AtomicUsize::new(0)), proxy: Some(proxy) })
}

impl Running {
    /// Requests the proxy has handled (0 for backends).
    pub fn handled(&self) -> u64 {
        self.proxy.as_ref().map_or(0, |p| p.handled())
    }
}

/// A response read to the end.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn json(&self) -> Result<serde_json::Value, BoxError> {
        Ok(serde_json::from_slice(&self.body)?)
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends `req` and reads the whole response (with a 10 s safety limit).
pub async fn send(req: Request<Full<Bytes>>) -> Result<Got, BoxError> {
    send_with(&client(), req).await
}

/// Sends `req` from the loopback address `from` (e.g. `127.0.0.9`, a
/// client that is not a trusted peer of a table trusting 127.0.0.1).
pub async fn send_from(from: std::net::IpAddr, req: Request<Full<Bytes>>) -> Result<Got, BoxError> {
    let mut http = HttpConnector::new();
    http.set_local_address(Some(from));
    send_with(&Client::builder(TokioExecutor::new()).build(http), req).await
}

async fn send_with(client: &Client<HttpConnector, Full<Bytes>>, req: Request<Full<Bytes>>) -> Result<Got, BoxError> {
    let fut = async {
        let resp = client.request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, BoxError>(Got { status: parts.status, headers: parts.headers, body })
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await.map_err(|_| "request timed out")?
}

pub async fn get(url: &str) -> Result<Got, BoxError> {
    send(Request::get(url).body(Full::new(Bytes::new()))?).await
}

/// GET that must finish within 5 s.
pub async fn bounded(url: &str) -> Result<Got, BoxError> {
    tokio::time::timeout(Duration::from_secs(5), get(url)).await.map_err(|_| format!("{url}: request hung"))?
}

/// A fixed table of three regions whose upstreams are the given backends.
pub fn table(eu: SocketAddr, kz: SocketAddr, us: SocketAddr, extra: &str) -> String {
    format!(
        r#"version: 1
listen: 127.0.0.1:18080
admin: 127.0.0.1:19901
regions:
  eu: {{ upstreams: ["http://{eu}"] }}
  kz: {{ upstreams: ["http://{kz}"] }}
  us: {{ upstreams: ["http://{us}"] }}
countries:
  KZ: {{ id: 7, region: kz }}
  DE: {{ id: 49, region: eu }}
  US: {{ id: 1, region: us }}
entities: {{ IntercityOrder: 3, WalletAccount: 4 }}
overrides:
  - {{ country: KZ, entity: WalletAccount, region: eu }}
shards: {{ count: 16, regions: {{ eu: "0-5", kz: "6-10", us: "11-15" }} }}
nodes:
  locality_mac: {{ "c110002": eu, "d537a50": kz, "0000001": us }}
  snowflake_datacenter: {{ 1: eu, 2: kz, 3: us }}
  sonyflake_machine: {{ 258: kz }}
  instagram_shard: {{ "0-99": us }}
hash: {{ regions: [eu, kz, us] }}
{extra}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}" }}
    id: {{ path_param: id, formats: [iuid, uniqid] }}
  - name: by-header
    match: {{ path: "/v1/wallet" }}
    id: {{ header: X-Entity-Id, formats: [iuid] }}
  - name: by-query
    match: {{ path: "/v1/search" }}
    id: {{ query: id, formats: [iuid] }}
  - name: sessions
    match: {{ path: "/v1/sessions/{{id}}" }}
    id: {{ path_param: id, formats: [locality] }}
  - name: events
    match: {{ path: "/v1/events/{{id}}" }}
    id: {{ path_param: id, formats: [uuidv7] }}
    placement: hash
  - name: tweets
    match: {{ path: "/v1/tweets/{{id}}" }}
    id: {{ path_param: id, formats: [snowflake] }}
  - name: flakes
    match: {{ path: "/v1/flakes/{{id}}" }}
    id: {{ path_param: id, formats: [sonyflake] }}
  - name: media
    match: {{ path: "/v1/media/{{id}}" }}
    id: {{ path_param: id, formats: [instagram] }}
  - name: behaviours
    match: {{ path: "/t/{{mode}}/{{id}}" }}
    id: {{ path_param: id, formats: [iuid] }}
"#
    )
}

/// What a raw exchange on a socket produced.
#[derive(Debug)]
pub struct Raw {
    /// Every byte read before the connection ended (or the wait ran out).
    pub bytes: Vec<u8>,
    /// Whether the peer closed (EOF or reset) within the wait.
    pub closed: bool,
}

impl Raw {
    /// The status of the first response, if one arrived.
    pub fn status(&self) -> Option<u16> {
        let text = std::str::from_utf8(self.bytes.get(..12)?).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.parse().ok()
    }
    /// Statuses of every response in the bytes (pipelined answers).
    pub fn statuses(&self) -> Vec<u16> {
        let text = String::from_utf8_lossy(&self.bytes);
        text.match_indices("HTTP/1.1 ").filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok()).collect()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
    /// The first response's body (its `content-length` bytes), when it is problem+json.
    pub fn problem(&self) -> Option<serde_json::Value> {
        let text = self.text();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let len: usize = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
            .and_then(|(_, v)| v.trim().parse().ok())?;
        serde_json::from_str(body.get(..len)?).ok()
    }
}

/// Writes `bytes` to `addr` and reads until the peer closes or `wait` passes.
pub async fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Result<Raw, BoxError> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    // A write may fail once the peer has rejected and closed: keep reading.
    let _ = tokio::time::timeout(wait, tokio::io::AsyncWriteExt::write_all(&mut s, bytes)).await;
    read_until_closed(&mut s, wait).await
}

/// Reads from `s` until EOF or reset (closed) or until `wait` passes.
pub async fn read_until_closed(s: &mut tokio::net::TcpStream, wait: Duration) -> Result<Raw, BoxError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(s, &mut buf)).await {
            Err(_) => return Ok(Raw { bytes, closed: false }),
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(Raw { bytes, closed: true }),
            Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
        }
    }
}

/// How long a raw exchange waits for the peer's next bytes.
pub const WAIT: Duration = Duration::from_secs(5);

/// A header field's value in a lowercased head.
pub fn field(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| *k == name).map(|(_, v)| v.trim().to_string()))
}

/// Reads one message head (through its blank line).
pub async fn read_head(s: &mut tokio::net::TcpStream) -> Result<String, BoxError> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tokio::time::timeout(WAIT, tokio::io::AsyncReadExt::read(s, &mut byte)).await?? == 0 {
            return Err(format!("closed after {:?}", String::from_utf8_lossy(&head)).into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Reads one message with a `Content-Length` body: its head (lowercased) and body.
pub async fn read_sized(s: &mut tokio::net::TcpStream) -> Result<(String, Vec<u8>), BoxError> {
    let head = read_head(s).await?.to_ascii_lowercase();
    let mut body = vec![0u8; field(&head, "content-length").ok_or("no length")?.parse()?];
    tokio::io::AsyncReadExt::read_exact(s, &mut body).await?;
    Ok((head, body))
}

/// A fake upstream on raw TCP, for faults hyper would not produce: for
/// every connection it reads the request head, counts a hit (health checks
/// excepted), then runs `behaviour` on the socket.
pub async fn raw_backend<F, Fut>(behaviour: F) -> Result<Running, BoxError>
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, rx) = watch::channel(false);
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    let behaviour = Arc::new(behaviour);
    let mut shutdown = rx.clone();
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let (mut stream, _) = tokio::select! {
                r = listener.accept() => match r { Ok(p) => p, Err(_) => continue },
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let h = Arc::clone(&h);
            let behaviour = Arc::clone(&behaviour);
            conns.spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                // Health checks get the same behaviour but are not counted.
                if !String::from_utf8_lossy(&head).to_ascii_lowercase().contains("user-agent: shardgate-health") {
                    h.fetch_add(1, Ordering::SeqCst);
                }
                behaviour(stream).await;
            });
        }
    });
    Ok(Running { addr, stop, hits, proxy: None })
}

/// The proxy for `yaml` served on port 0 until `begin` fires, then given
/// 20 s to finish; its task yields whether every connection finished in time.
pub struct Draining {
    pub addr: SocketAddr,
    pub begin: tokio::sync::oneshot::Sender<()>,
    pub server: tokio::task::JoinHandle<std::io::Result<bool>>,
}

/// See [`Draining`].
pub async fn draining_proxy(yaml: &str) -> Result<Draining, BoxError> {
    let cfg = shardgate::config::load_str(yaml, "test.yaml").map_err(|e| e.to_string())?;
    let proxy = shardgate::app::build_proxy(&cfg, yaml);
    let opts = shardgate::app::server_options(&cfg);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (begin, shutdown) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::clone(&proxy.shared().metrics);
    let server = tokio::spawn(shardgate::server::serve(listener, proxy, metrics, opts, None, async move {
        let _ = shutdown.await;
        Duration::from_secs(20)
    }));
    Ok(Draining { addr, begin, server })
}

/// An iUID of `country`, entity 3 (IntercityOrder in [`table`]).
pub fn iuid(country: u8) -> String {
    shardgate::ids::Iuid::from_fields(1_700_000_000_000, country, 3, 12345).to_string()
}

/// eu, kz and us backends and a proxy over them with `extra` in its table;
/// `kz_failover` adds `failover: eu` to kz.
pub async fn world(extra: &str, kz_failover: bool) -> Result<(Running, [Running; 3]), BoxError> {
    let backends = three_backends().await?;
    let mut yaml = table(backends[0].addr, backends[1].addr, backends[2].addr, extra);
    if kz_failover {
        let kz = format!("kz: {{ upstreams: [\"http://{}\"] }}", backends[1].addr);
        yaml = yaml.replace(&kz, &format!("kz: {{ upstreams: [\"http://{}\"], failover: eu }}", backends[1].addr));
    }
    Ok((proxy(&yaml).await?, backends))
}

/// The proxy's health report for `region`: (endpoint, up, ejected) each.
pub fn health_of(p: &Running, region: &str) -> Result<Vec<(String, bool, bool)>, BoxError> {
    let health = &p.proxy.as_ref().ok_or("not a proxy")?.shared().health;
    Ok(health.report().into_iter().filter(|(r, ..)| r == region).map(|(_, e, up, ej)| (e, up, ej)).collect())
}

/// Whether every endpoint of `region` is up and not ejected.
pub fn all_up(p: &Running, region: &str) -> Result<bool, BoxError> {
    Ok(health_of(p, region)?.iter().all(|(_, up, ejected)| *up && !ejected))
}
