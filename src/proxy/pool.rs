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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use rustc_hash::FxHashMap;
use tower_service::Service;

use super::forward::{Connector, UpstreamBody};
use crate::routing::Upstream;

/// Why an upstream request failed.
#[derive(Debug)]
pub enum PoolError {
    /// No connection could be opened (TCP or TLS): nothing was sent.
    Connect(String),
    /// The request was sent, or may have been, and failed.
    Failed(hyper::Error),
}

/// One kept-open connection.
struct Kept {
    sender: SendRequest<UpstreamBody>,
    /// When it was last put back.
    since: Instant,
}

/// Kept connections by endpoint (`scheme://authority`).
#[derive(Default)]
struct Lists {
    by_endpoint: FxHashMap<Box<str>, Vec<Kept>>,
    /// When every list was last swept of closed and expired connections.
    swept: Option<Instant>,
}

/// Connections per endpoint, for every endpoint the proxy has sent to.
pub struct Pool {
    connector: Connector,
    idle_timeout: Duration,
    max_per_endpoint: usize,
    kept: Mutex<Lists>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints = self.kept.lock().map(|k| k.by_endpoint.len()).unwrap_or(0);
        f.debug_struct("Pool").field("endpoints", &endpoints).field("idle_timeout", &self.idle_timeout).finish()
    }
}

impl Pool {
    /// A pool that opens connections with `connector`, keeps at most
    /// `max_per_endpoint` per endpoint and closes those unused for `idle_timeout`.
    pub fn new(connector: Connector, idle_timeout: Duration, max_per_endpoint: usize) -> Pool {
        Pool { connector, idle_timeout, max_per_endpoint, kept: Mutex::new(Lists::default()) }
    }

    /// The connector new connections are opened with.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Sends `req` (origin-form URI, `Host` set) to `endpoint` on a kept
    /// connection, or on a new one when none is free.
    pub async fn send(
        &self,
        endpoint: &Upstream,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, PoolError> {
        let key = endpoint.pool_key.as_ref();
        while let Some(mut sender) = self.checkout(key) {
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.put_back(key, sender);
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    // Not written: the connection closed or was busy; try the next.
                    Some(back) => req = back,
                    None => return Err(PoolError::Failed(e.into_error())),
                },
            }
        }
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await.map_err(|e| PoolError::Connect(e.to_string()))?;
        let io = connector.call(endpoint.uri.clone()).await.map_err(|e| PoolError::Connect(e.to_string()))?;
        let (mut sender, conn) =
            http1::Builder::new().handshake(io).await.map_err(|e| PoolError::Connect(e.to_string()))?;
        // Runs until the connection closes; `with_upgrades` lets a 101
        // response hand the connection over to a tunnel.
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        let resp = sender.send_request(req).await.map_err(PoolError::Failed)?;
        self.put_back(key, sender);
        Ok(resp)
    }

    /// The first kept connection ready for a request; closed and expired
    /// ones are dropped on the way.
    fn checkout(&self, key: &str) -> Option<SendRequest<UpstreamBody>> {
        let mut kept = self.kept.lock().ok()?;
        let list = kept.by_endpoint.get_mut(key)?;
        let now = Instant::now();
        list.retain(|k| self.keep(k, now));
        let i = list.iter().position(|k| k.sender.is_ready())?;
        Some(list.remove(i).sender)
    }

    /// Lists a connection again (its response may still be streaming: it is
    /// taken only once ready). Beyond the limit it is dropped, which closes
    /// it once its response is done.
    fn put_back(&self, key: &str, sender: SendRequest<UpstreamBody>) {
        if sender.is_closed() {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else { return };
        let now = Instant::now();
        // Endpoints no longer used (a reload removed them) would keep their
        // connections open: every idle timeout, all lists are swept.
        if kept.swept.is_none_or(|t| now.duration_since(t) >= self.idle_timeout) {
            kept.swept = Some(now);
            kept.by_endpoint.retain(|_, list| {
                list.retain(|k| self.keep(k, now));
                !list.is_empty()
            });
        }
        let list = match kept.by_endpoint.get_mut(key) {
            Some(list) => list,
            None => kept.by_endpoint.entry(Box::from(key)).or_default(),
        };
        if list.len() < self.max_per_endpoint {
            list.push(Kept { sender, since: now });
        }
    }

    /// Whether a listed connection stays listed: open and not idle too long.
    fn keep(&self, k: &Kept, now: Instant) -> bool {
        !k.sender.is_closed() && now.duration_since(k.since) < self.idle_timeout
    }

    /// Connections kept for `key` (tests).
    #[cfg(test)]
    fn kept(&self, key: &str) -> usize {
        self.kept.lock().map(|k| k.by_endpoint.get(key).map_or(0, Vec::len)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::forward::{connector, ClientSettings};
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

    fn request(up: &Upstream) -> Request<UpstreamBody> {
        let mut req = Request::new(Either::Right(Empty::<Bytes>::new()));
        *req.uri_mut() = http::Uri::from_static("/x");
        req.headers_mut().insert(http::header::HOST, up.host.clone());
        req
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn endpoint(addr: std::net::SocketAddr) -> Result<Upstream, Box<dyn std::error::Error>> {
        Ok(Upstream::new(&format!("http://{addr}").parse()?).ok_or("endpoint")?)
    }

    /// One request through `pool`, its whole body read.
    async fn fetch(pool: &Pool, up: &Upstream) -> Result<Bytes, Box<dyn std::error::Error>> {
        let resp = pool.send(up, request(up)).await.map_err(|e| format!("{e:?}"))?;
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
            inflight.push(pool.send(&up, request(&up)).await.map_err(|e| format!("{e:?}"))?);
        }
        assert!(accepted.load(Ordering::SeqCst) > 1);
        for resp in inflight {
            resp.into_body().collect().await?;
        }
        assert!(pool.kept(&up.pool_key) <= 4);
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
        match pool().send(&up, request(&up)).await {
            Err(PoolError::Connect(_)) => Ok(()),
            other => Err(format!("expected a connect error, got {other:?}").into()),
        }
    }
}
