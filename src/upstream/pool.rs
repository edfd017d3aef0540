//! Upstream connections: HTTP/1.1 keep-alive connections per endpoint,
//! opened through the proxy's connector (`http://` and `https://`) and
//! reused.
//!
//! Written for the proxy's one pattern instead of using hyper-util's general
//! pooled client, which on the routed workload cost about a fifth of the
//! proxy's user-space instructions per request: a SipHash-keyed pool map
//! (authorities hashed character by character), boxed futures, and a task
//! spawned per request to wait until the connection was idle again. Here a
//! connection goes back to its endpoint's list as soon as the response head
//! arrives, and a checkout takes the first one whose connection task is
//! waiting for a request (`SendRequest::is_ready`); busy ones stay listed.
//! A request that was not written (the connection closed or was busy) comes
//! back from `try_send_request` and goes to the next connection, so reuse
//! never costs a request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use rustc_hash::FxHashMap;
use tokio::sync::Notify;
use tower_service::Service;

use super::body::UpstreamBody;
use super::connect::Connector;
use crate::routing::Upstream;

/// Why an upstream request failed.
#[derive(Debug)]
pub enum PoolError {
    /// No connection could be opened (TCP or TLS): nothing was sent, and the
    /// request comes back for another endpoint.
    Connect(String, Box<Request<UpstreamBody>>),
    /// The endpoint has `max_connections` open and `max_pending` requests
    /// already waiting for one: nothing was sent.
    Saturated(Box<Request<UpstreamBody>>),
    /// The request was sent, or may have been, and failed.
    Failed(hyper::Error),
}

/// How many connections one endpoint may have, and how many requests may
/// wait for one of them (from the table, so they reload live).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open to one endpoint at once.
    pub max_connections: usize,
    /// Most requests waiting for a connection to one endpoint; beyond it a
    /// request is refused at once ([`PoolError::Saturated`]).
    pub max_pending: usize,
}

/// One kept-open connection.
struct Kept {
    sender: SendRequest<UpstreamBody>,
    /// When it was last put back.
    since: Instant,
}

/// One endpoint's connections: those kept for reuse, and the count of
/// every open one (kept or busy), which the connection cap bounds.
#[derive(Default)]
struct Endpoint {
    kept: Vec<Kept>,
    open: usize,
    waiting: usize,
    /// Woken when a connection closes or finishes a response.
    freed: Arc<Notify>,
}

/// Endpoints by key (`scheme://authority`).
#[derive(Default)]
struct Lists {
    by_endpoint: FxHashMap<Box<str>, Endpoint>,
    /// When every list was last swept of closed and expired connections.
    swept: Option<Instant>,
}

/// Connections per endpoint, for every endpoint the proxy has sent to.
pub struct Pool {
    connector: Connector,
    idle_timeout: Duration,
    max_kept: usize,
    lists: Arc<Mutex<Lists>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints = self.lists.lock().map(|k| k.by_endpoint.len()).unwrap_or(0);
        f.debug_struct("Pool").field("endpoints", &endpoints).field("idle_timeout", &self.idle_timeout).finish()
    }
}

/// What a request does when it finds no free connection.
enum Slot {
    /// Open a new connection (counted as open already).
    Open,
    /// Wait for one to free up (counted as waiting already).
    Wait(Arc<Notify>),
}

/// How often a request waiting for a connection looks again even without a
/// wake-up: a connection whose response just finished becomes ready for
/// another request a moment after the wake-up, in its own task, so the woken
/// request may find it still busy.
const WAIT_RECHECK: Duration = Duration::from_millis(20);

/// An upstream response body that frees its connection for a waiting
/// request when it ends or is dropped.
#[derive(Debug)]
pub struct PoolBody {
    inner: Incoming,
    freed: Option<Arc<Notify>>,
}

impl PoolBody {
    fn release(&mut self) {
        if let Some(freed) = self.freed.take() {
            freed.notify_one();
        }
    }
}

impl hyper::body::Body for PoolBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None | Some(Err(_)))) {
            self.release();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PoolBody {
    fn drop(&mut self) {
        self.release();
    }
}

impl Pool {
    /// A pool that opens connections with `connector`, keeps at most
    /// `max_kept` idle per endpoint and closes those unused for `idle_timeout`.
    pub fn new(connector: Connector, idle_timeout: Duration, max_kept: usize) -> Pool {
        Pool { connector, idle_timeout, max_kept, lists: Arc::new(Mutex::new(Lists::default())) }
    }

    /// The connector new connections are opened with.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Sends `req` (origin-form URI, `Host` set) to `endpoint` on a kept
    /// connection, or on a new one when none is free and the endpoint is
    /// below `limits.max_connections`; else waits for one (the caller bounds
    /// the wait with its timeout), or, with `limits.max_pending` requests
    /// waiting already, gives the request back as [`PoolError::Saturated`].
    pub async fn send(
        &self,
        endpoint: &Upstream,
        mut req: Request<UpstreamBody>,
        limits: Limits,
    ) -> Result<Response<PoolBody>, PoolError> {
        let key = endpoint.pool_key.as_ref();
        loop {
            while let Some(mut sender) = self.checkout(key) {
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        self.put_back(key, sender);
                        return Ok(self.watch_response(key, resp));
                    }
                    Err(mut e) => match e.take_message() {
                        // Not written: the connection closed or was busy; try the next.
                        Some(back) => req = back,
                        None => return Err(PoolError::Failed(e.into_error())),
                    },
                }
            }
            match self.slot(key, limits) {
                None => return Err(PoolError::Saturated(Box::new(req))),
                Some(Slot::Open) => return self.open_and_send(endpoint, req).await,
                Some(Slot::Wait(freed)) => {
                    let waiting = Waiting { lists: &self.lists, key };
                    let _ = tokio::time::timeout(WAIT_RECHECK, freed.notified()).await;
                    drop(waiting);
                }
            }
        }
    }

    /// Opens a connection (already counted as open) and sends `req` on it.
    async fn open_and_send(
        &self,
        endpoint: &Upstream,
        req: Request<UpstreamBody>,
    ) -> Result<Response<PoolBody>, PoolError> {
        let key = endpoint.pool_key.as_ref();
        let closed = Closed { lists: Arc::clone(&self.lists), key: Box::from(key) };
        let mut connector = self.connector.clone();
        let io = match std::future::poll_fn(|cx| connector.poll_ready(cx)).await {
            Ok(()) => connector.call(endpoint.uri.clone()).await,
            Err(e) => Err(e),
        };
        let io = match io {
            Ok(io) => io,
            Err(e) => return Err(PoolError::Connect(e.to_string(), Box::new(req))),
        };
        let (mut sender, conn) = match http1::Builder::new().handshake(io).await {
            Ok(pair) => pair,
            Err(e) => return Err(PoolError::Connect(e.to_string(), Box::new(req))),
        };
        // Runs until the connection closes; `with_upgrades` lets a 101
        // response hand the connection over to a tunnel. The connection
        // stops counting against the endpoint's cap when it ends.
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
            drop(closed);
        });
        let resp = sender.send_request(req).await.map_err(PoolError::Failed)?;
        self.put_back(key, sender);
        Ok(self.watch_response(key, resp))
    }

    /// `resp` with a body that wakes a request waiting for a connection of
    /// `key` when it ends or is dropped (its connection is then free again).
    fn watch_response(&self, key: &str, resp: Response<Incoming>) -> Response<PoolBody> {
        let freed = self.lists.lock().ok().and_then(|l| l.by_endpoint.get(key).map(|e| Arc::clone(&e.freed)));
        resp.map(|inner| PoolBody { inner, freed })
    }

    /// With no free kept connection: may this request open one, must it
    /// wait, or is it refused (`None`)?
    fn slot(&self, key: &str, limits: Limits) -> Option<Slot> {
        let Ok(mut lists) = self.lists.lock() else { return Some(Slot::Open) };
        let e = match lists.by_endpoint.get_mut(key) {
            Some(e) => e,
            None => lists.by_endpoint.entry(Box::from(key)).or_default(),
        };
        if e.open < limits.max_connections.max(1) {
            e.open += 1;
            return Some(Slot::Open);
        }
        if e.waiting >= limits.max_pending {
            return None;
        }
        e.waiting += 1;
        Some(Slot::Wait(Arc::clone(&e.freed)))
    }

    /// The first kept connection ready for a request; closed and expired
    /// ones are dropped on the way.
    fn checkout(&self, key: &str) -> Option<SendRequest<UpstreamBody>> {
        let mut lists = self.lists.lock().ok()?;
        let list = &mut lists.by_endpoint.get_mut(key)?.kept;
        let now = Instant::now();
        list.retain(|k| self.keep(k, now));
        let i = list.iter().position(|k| k.sender.is_ready())?;
        Some(list.remove(i).sender)
    }

    /// Lists a connection again (its response may still be streaming: it is
    /// taken only once ready). Beyond `max_kept` it is dropped, which closes
    /// it once its response is done.
    fn put_back(&self, key: &str, sender: SendRequest<UpstreamBody>) {
        if sender.is_closed() {
            return;
        }
        let Ok(mut lists) = self.lists.lock() else { return };
        let now = Instant::now();
        // Endpoints no longer used (a reload removed them) would keep their
        // connections open: every idle timeout, all lists are swept.
        if lists.swept.is_none_or(|t| now.duration_since(t) >= self.idle_timeout) {
            lists.swept = Some(now);
            let (idle, max_kept) = (self.idle_timeout, self.max_kept);
            lists.by_endpoint.retain(|_, e| {
                e.kept.retain(|k| keep(k, now, idle));
                e.kept.truncate(max_kept);
                !e.kept.is_empty() || e.open > 0 || e.waiting > 0
            });
        }
        let e = match lists.by_endpoint.get_mut(key) {
            Some(e) => e,
            None => lists.by_endpoint.entry(Box::from(key)).or_default(),
        };
        if e.kept.len() < self.max_kept {
            e.kept.push(Kept { sender, since: now });
        }
    }

    /// Whether a listed connection stays listed: open and not idle too long.
    fn keep(&self, k: &Kept, now: Instant) -> bool {
        keep(k, now, self.idle_timeout)
    }

    /// Connections kept for `key` (tests).
    #[cfg(test)]
    fn kept(&self, key: &str) -> usize {
        self.lists.lock().map(|k| k.by_endpoint.get(key).map_or(0, |e| e.kept.len())).unwrap_or(0)
    }

    /// Connections open to `key` (tests).
    #[cfg(test)]
    fn open(&self, key: &str) -> usize {
        self.lists.lock().map(|k| k.by_endpoint.get(key).map_or(0, |e| e.open)).unwrap_or(0)
    }
}

fn keep(k: &Kept, now: Instant, idle_timeout: Duration) -> bool {
    !k.sender.is_closed() && now.duration_since(k.since) < idle_timeout
}

/// One request's place in an endpoint's wait queue, given up when dropped.
struct Waiting<'a> {
    lists: &'a Mutex<Lists>,
    key: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Ok(mut lists) = self.lists.lock() {
            if let Some(e) = lists.by_endpoint.get_mut(self.key) {
                e.waiting = e.waiting.saturating_sub(1);
            }
        }
    }
}

/// One open connection's place under its endpoint's cap, given up (and a
/// waiting request woken) when the connection ends or never opens.
struct Closed {
    lists: Arc<Mutex<Lists>>,
    key: Box<str>,
}

impl Drop for Closed {
    fn drop(&mut self) {
        if let Ok(mut lists) = self.lists.lock() {
            if let Some(e) = lists.by_endpoint.get_mut(&self.key) {
                e.open = e.open.saturating_sub(1);
                e.freed.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::connect::{connector, ClientSettings};
    use bytes::Bytes;
    use http_body_util::{BodyExt, Either, Empty};
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
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(io, svc)
                        .await;
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

    const LIMITS: Limits = Limits { max_connections: 512, max_pending: 1024 };

    fn request(up: &Upstream) -> Request<UpstreamBody> {
        let mut req = Request::new(Either::Right(Empty::<Bytes>::new()));
        *req.uri_mut() = http::Uri::from_static("/x");
        req.headers_mut().insert(http::header::HOST, up.host.clone());
        req
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn endpoint(addr: std::net::SocketAddr) -> Result<Upstream, Box<dyn std::error::Error>> {
        Ok(Upstream::from_url(&crate::config::values::UpstreamUrl::parse(&format!("http://{addr}"))?))
    }

    /// One request through `pool`, its whole body read.
    async fn fetch(pool: &Pool, up: &Upstream) -> Result<Bytes, Box<dyn std::error::Error>> {
        let resp = pool.send(up, request(up), LIMITS).await.map_err(|e| format!("{e:?}"))?;
        Ok(resp.into_body().collect().await?.to_bytes())
    }

    fn pool() -> Pool {
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
            inflight.push(pool.send(&up, request(&up), LIMITS).await.map_err(|e| format!("{e:?}"))?);
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
        let limits = Limits { max_connections: 2, max_pending: 1 };
        // Two responses stream for 50 ms each: their connections are busy.
        let a = pool.send(&up, request(&up), limits).await.map_err(|e| format!("{e:?}"))?;
        let b = pool.send(&up, request(&up), limits).await.map_err(|e| format!("{e:?}"))?;
        assert_eq!(pool.open(&up.pool_key), 2);
        // A third waits for one of them; a fourth finds the queue full.
        let (p, u) = (Arc::clone(&pool), up.clone());
        let waiting = tokio::spawn(async move {
            let resp = p.send(&u, request(&u), limits).await.map_err(|e| format!("{e:?}"))?;
            Ok::<_, String>(resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes())
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        match pool.send(&up, request(&up), limits).await {
            Err(PoolError::Saturated(_)) => {}
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
        match pool().send(&up, request(&up), LIMITS).await {
            Err(PoolError::Connect(..)) => Ok(()),
            other => Err(format!("expected a connect error, got {other:?}").into()),
        }
    }
}
