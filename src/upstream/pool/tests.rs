use super::*;
use crate::http1::write::Added;
use crate::upstream::connect::{connector, ClientSettings};
use crate::upstream::exchange::{exchange, ResponseBody};
use crate::upstream::outgoing::Outgoing;
use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Empty};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A backend that counts the connections it accepts; with `keep_alive`
/// off it answers one request per connection and closes it.
async fn backend_with(keep_alive: bool) -> std::io::Result<(std::net::SocketAddr, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // The body arrives 50 ms after the head, so the
                // connection stays busy while the client waits for it.
                let svc = hyper::service::service_fn(|_req| async {
                    let body = Delayed(Some(Box::pin(tokio::time::sleep(Duration::from_millis(50)))));
                    Ok::<_, std::convert::Infallible>(Response::new(body))
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ =
                    hyper::server::conn::http1::Builder::new().keep_alive(keep_alive).serve_connection(io, svc).await;
            });
        }
    });
    Ok((addr, accepted))
}

async fn backend() -> std::io::Result<(std::net::SocketAddr, Arc<AtomicUsize>)> {
    backend_with(true).await
}

/// A body of "ok" that comes after a pause.
struct Delayed(Option<std::pin::Pin<Box<tokio::time::Sleep>>>);

impl hyper::body::Body for Delayed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let Some(sleep) = self.0.as_mut() else { return std::task::Poll::Ready(None) };
        std::task::ready!(sleep.as_mut().poll(cx));
        self.0 = None;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from("ok")))))
    }
}

const LIMITS: Limits = Limits::new(512, 1024);

/// A connection for a plain request, waiting as long as it takes (the tests bound it).
pub(crate) async fn plain(pool: &Pool, up: &Upstream, limits: Limits) -> Result<Conn, PoolError> {
    pool.connection(up, limits, Use::Plain, Instant::now() + Duration::from_secs(60)).await
}

/// `GET /x` on a connection from `pool`: the response, its body still to read.
async fn send(pool: &Pool, up: &Upstream, limits: Limits) -> Result<Response<ResponseBody>, String> {
    let conn = plain(pool, up, limits).await.map_err(|e| format!("{e:?}"))?;
    let headers = http::HeaderMap::new();
    let target = http::uri::PathAndQuery::from_static("/x");
    let out = outgoing(&http::Method::GET, &target, up, &headers);
    exchange(conn, &out, &mut Empty::<Bytes>::new()).await.map_err(|e| e.to_string())
}

/// No fields added by a proxy: the tests send the client's alone.
static NO_FIELDS: Added = Added::new();

/// `method target` to `up` with `headers` and nothing added (shared with
/// the exchange tests).
pub(crate) fn outgoing<'a>(
    method: &'a http::Method,
    target: &'a http::uri::PathAndQuery,
    up: &'a Upstream,
    headers: &'a http::HeaderMap,
) -> Outgoing<'a> {
    Outgoing { method, target, host: &up.host, headers, added: &NO_FIELDS }
}

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The pool entry for a backend at `addr` (shared with the exchange tests).
pub(crate) fn endpoint(addr: std::net::SocketAddr) -> Result<Upstream, Box<dyn std::error::Error>> {
    Ok(Upstream::parse(&format!("http://{addr}"))?)
}

/// One request through `pool`, its whole body read.
async fn fetch(pool: &Pool, up: &Upstream) -> Result<Bytes, Box<dyn std::error::Error>> {
    let resp = send(pool, up, LIMITS).await?;
    Ok(resp.into_body().collect().await?.to_bytes())
}

/// A pool keeping 4 idle connections per endpoint (shared with the exchange tests).
pub(crate) fn pool() -> Pool {
    let settings = ClientSettings {
        connect_timeout: Duration::from_secs(1),
        pool_idle_timeout: Duration::from_secs(30),
        tls: None,
    };
    Pool::new(connector(&settings), Duration::from_secs(30), 4)
}

#[tokio::test]
async fn connections_are_reused_and_capped() -> TestResult {
    let (addr, accepted) = backend().await?;
    let up = endpoint(addr)?;
    let pool = pool();
    // One after the other: one connection serves them all.
    for _ in 0..5 {
        assert_eq!(fetch(&pool, &up).await?, "ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(pool.kept(&up.pool_key), 1);

    // Ten at once: new connections while the kept ones are busy, at most 4 kept.
    let mut inflight = Vec::new();
    for _ in 0..10 {
        inflight.push(send(&pool, &up, LIMITS).await?);
    }
    assert!(accepted.load(Ordering::SeqCst) > 1);
    for resp in inflight {
        resp.into_body().collect().await?;
    }
    assert!(pool.kept(&up.pool_key) <= 4);
    Ok(())
}

#[tokio::test]
async fn the_cap_bounds_connections_and_the_queue_bounds_waiters() -> TestResult {
    let (addr, accepted) = backend().await?;
    let up = endpoint(addr)?;
    let pool = Arc::new(pool());
    let limits = Limits::new(2, 1);
    // Two responses stream for 50 ms each: their connections are busy.
    let a = send(&pool, &up, limits).await?;
    let b = send(&pool, &up, limits).await?;
    assert_eq!(pool.open(&up.pool_key), 2);
    // A third waits for one of them; a fourth finds the queue full.
    let (p, u) = (Arc::clone(&pool), up.clone());
    let waiting = tokio::spawn(async move {
        let resp = send(&p, &u, limits).await?;
        Ok::<_, String>(resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    match plain(&pool, &up, limits).await {
        Err(PoolError::Saturated(Full::Queue)) => {}
        other => return Err(format!("expected saturation, got {other:?}").into()),
    }
    a.into_body().collect().await?;
    b.into_body().collect().await?;
    assert_eq!(waiting.await??, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "never more than the cap");
    assert_eq!(pool.open(&up.pool_key), 2);
    Ok(())
}

#[tokio::test]
async fn connections_the_backend_closes_are_not_reused() -> TestResult {
    let (addr, accepted) = backend_with(false).await?;
    let up = endpoint(addr)?;
    let pool = pool();
    for _ in 0..5 {
        assert_eq!(fetch(&pool, &up).await?, "ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 5);
    Ok(())
}

#[tokio::test]
async fn idle_connections_expire() -> TestResult {
    let (addr, accepted) = backend().await?;
    let up = endpoint(addr)?;
    let settings =
        ClientSettings { connect_timeout: Duration::from_secs(1), pool_idle_timeout: Duration::ZERO, tls: None };
    let pool = Pool::new(connector(&settings), Duration::from_millis(400), 4);
    for pause in [0, 0, 900] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        fetch(&pool, &up).await?;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "the third request, after the idle timeout, reconnects");
    Ok(())
}

#[tokio::test]
async fn a_refused_endpoint_is_a_connect_error() -> TestResult {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    drop(listener);
    let up = endpoint(addr)?;
    match plain(&pool(), &up, LIMITS).await {
        Err(PoolError::Connect(_)) => Ok(()),
        other => Err(format!("expected a connect error, got {other:?}").into()),
    }
}

#[tokio::test]
async fn open_tunnels_keep_their_endpoints_cap_across_a_sweep() -> TestResult {
    let ((a, _), (b, _)) = (backend().await?, backend().await?);
    let (a, b) = (endpoint(a)?, endpoint(b)?);
    let settings =
        ClientSettings { connect_timeout: Duration::from_secs(1), pool_idle_timeout: Duration::ZERO, tls: None };
    let pool = Pool::new(connector(&settings), Duration::from_millis(100), 4);
    let limits = Limits { max_tunnels: 1, ..LIMITS };
    let soon = || Instant::now() + Duration::from_millis(200);
    let tunnel = pool.connection(&a, limits, Use::Tunnel, soon()).await.map_err(|e| format!("{e:?}"))?.into_tunnel();
    // Past the idle timeout, a connection given back to another endpoint sweeps the lists.
    tokio::time::sleep(Duration::from_millis(150)).await;
    fetch(&pool, &b).await?;
    match pool.connection(&a, limits, Use::Tunnel, soon()).await {
        Err(PoolError::Saturated(Full::Tunnels)) => {}
        other => return Err(format!("a second tunnel past max_tunnels 1: {other:?}").into()),
    }
    drop(tunnel);
    Ok(())
}

#[tokio::test]
async fn two_names_on_one_address_keep_their_connections_apart() -> TestResult {
    let (addr, accepted) = backend().await?;
    let named = |name: &str| -> Result<Upstream, Box<dyn std::error::Error>> {
        Upstream::parse(&format!("http://{name}:{}", addr.port()))?.at(addr.ip()).ok_or_else(|| "no address".into())
    };
    let (a, b) = (named("a.example")?, named("b.example")?);
    assert_eq!(a.uri, b.uri, "one address");
    let pool = pool();
    fetch(&pool, &a).await?;
    fetch(&pool, &b).await?;
    fetch(&pool, &a).await?;
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "b.example's request went on a.example's connection");
    Ok(())
}
