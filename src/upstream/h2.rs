//! HTTP/2 to `h2c://` (prior knowledge) and `h2://` (TLS, ALPN `h2`)
//! endpoints: a few
//! multiplexed connections per endpoint, each driven by hyper's HTTP/2
//! client on a task of its own. A request takes the open connection with
//! the fewest streams, a new one being opened when every open one carries
//! [`STREAMS`] already, up to the endpoint's connection cap; the streams
//! beyond that wait in the connection for the server's stream limit, as
//! HTTP/2 has them. Bodies and trailers go both ways as frames, so gRPC's
//! streaming calls and its status in trailers pass as they are.
//!
//! Why hyper's client here and not the proxy's own exchange
//! ([`super::exchange`]): HTTP/2's framing, flow control and stream states
//! are what hyper's `h2` is made for; the HTTP/1 leg stays as it is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::body::UpstreamBody;
use super::connect::Connector;
use super::outgoing::Outgoing;
use crate::routing::Upstream;

/// Streams one connection carries before another is opened beside it.
pub const STREAMS: usize = 100;

/// Most connections to one endpoint (fewer when its region's
/// `max_connections` is lower).
pub const CONNECTIONS: usize = 4;

/// How often an idle connection is pinged, and how long its answer may take.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The HTTP/2 connections to every `h2c://` and `h2://` endpoint.
#[derive(Debug)]
pub struct H2 {
    connector: Connector,
    endpoints: Mutex<HashMap<Box<str>, Endpoint>>,
    opened: AtomicU64,
}

/// One endpoint's connections, and the lock its openings take turns on:
/// the many calls that find none open wait for one opening, not each open
/// their own.
#[derive(Debug, Default)]
struct Endpoint {
    links: Vec<Link>,
    opening: Arc<tokio::sync::Mutex<()>>,
    /// When and why the last opening failed (until one succeeds).
    failed: Option<(Instant, String)>,
}

/// One connection and the streams open on it.
#[derive(Clone, Debug)]
struct Link {
    send: SendRequest<UpstreamBody>,
    streams: Arc<AtomicUsize>,
}

/// A stream counted on its connection while its answer is read.
#[derive(Debug)]
pub struct Stream(Arc<AtomicUsize>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why no stream could be reserved: nothing was sent.
#[derive(Debug)]
pub enum Unready {
    /// No connection could be opened (by this call, or by the one it waited for).
    Connect(String),
    /// Every connection carries [`STREAMS`] and `max_pending` more.
    Saturated,
}

/// Why an HTTP/2 exchange failed.
#[derive(Debug)]
pub enum H2Error {
    /// The connection closed before it took the stream (the server's
    /// GOAWAY, an idle close): nothing was sent; the body is given back.
    Closed(String, UpstreamBody),
    /// The stream failed after the request went (or may have gone).
    Failed(String),
    /// The server's GOAWAY came as the request was handed to the
    /// connection: it may not have gone, but its body did; the server is
    /// going away, not failing.
    GoneAway(String),
}

/// A stream reserved on a connection, counted there from now on.
#[derive(Debug)]
pub struct Reserved {
    link: Link,
    stream: Stream,
}

impl H2 {
    /// Connections opened with `connector`.
    pub fn new(connector: Connector) -> H2 {
        H2 { connector, endpoints: Mutex::new(HashMap::new()), opened: AtomicU64::new(0) }
    }

    /// Connections opened so far.
    pub fn connects(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// A stream on one of `endpoint`'s connections, at most
    /// `max_connections` of them (0: no cap), with at most `max_pending`
    /// streams beyond [`STREAMS`] on each. Calls that find none open wait
    /// for one opening; when it fails, they fail with it.
    pub async fn reserve(
        &self,
        endpoint: &Upstream,
        (max_connections, max_pending): (usize, usize),
    ) -> Result<Reserved, Unready> {
        let link = match self.pick(endpoint, max_connections) {
            Ok(link) => link,
            Err(opening) => {
                let asked = Instant::now();
                let _turn = opening.lock().await;
                // Another call may have opened one, or failed to, while this one waited.
                match self.pick(endpoint, max_connections) {
                    Ok(link) => link,
                    Err(_) => match self.failed_since(endpoint, asked) {
                        Some(e) => return Err(Unready::Connect(e)),
                        None => self.open(endpoint).await.map_err(Unready::Connect)?,
                    },
                }
            }
        };
        let limit = STREAMS + max_pending;
        let taken = link.streams.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            return Err(Unready::Saturated);
        }
        let stream = Stream(Arc::clone(&link.streams));
        Ok(Reserved { link, stream })
    }

    /// Sends `out` with `body` on the reserved stream and reads the
    /// answer's head; the answer's body and trailers follow as frames.
    pub async fn send(
        &self,
        endpoint: &Upstream,
        reserved: Reserved,
        out: &Outgoing<'_>,
        body: UpstreamBody,
    ) -> Result<(Response<Incoming>, Stream), H2Error> {
        let Reserved { mut link, stream } = reserved;
        let req = match request(endpoint, out) {
            Ok(head) => head,
            Err(e) => return Err(H2Error::Failed(e)),
        };
        if link.send.ready().await.is_err() {
            self.forget(endpoint, &link);
            return Err(H2Error::Closed("the connection closed".into(), body));
        }
        match link.send.try_send_request(req.map(|()| body)).await {
            Ok(resp) => Ok((resp, stream)),
            Err(mut e) => {
                if link.send.is_closed() {
                    self.forget(endpoint, &link);
                }
                // A request hyper gives back never went.
                match e.take_message() {
                    Some(req) => Err(H2Error::Closed(e.error().to_string(), req.into_body())),
                    None if gone_away(e.error()) => {
                        self.forget(endpoint, &link);
                        Err(H2Error::GoneAway(e.error().to_string()))
                    }
                    None => Err(H2Error::Failed(e.error().to_string())),
                }
            }
        }
    }

    /// Why `endpoint`'s last opening failed, when it failed after `since`.
    fn failed_since(&self, endpoint: &Upstream, since: Instant) -> Option<String> {
        let all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, why) = all.get(&endpoint.pool_key)?.failed.as_ref()?;
        (*at >= since).then(|| why.clone())
    }

    /// The open connection with the fewest streams; else (none is open,
    /// or all carry [`STREAMS`] and another may be opened) the lock to
    /// take before opening one.
    fn pick(&self, endpoint: &Upstream, max_connections: usize) -> Result<Link, Arc<tokio::sync::Mutex<()>>> {
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = all.entry(endpoint.pool_key.clone()).or_default();
        e.links.retain(|l| !l.send.is_closed());
        let room = max_connections == 0 || e.links.len() < max_connections;
        match e.links.iter().min_by_key(|l| l.streams.load(Ordering::Relaxed)) {
            Some(least) if !(room && least.streams.load(Ordering::Relaxed) >= STREAMS) => Ok(least.clone()),
            _ => Err(Arc::clone(&e.opening)),
        }
    }

    async fn open(&self, endpoint: &Upstream) -> Result<Link, String> {
        let opened = self.handshake(endpoint).await;
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = all.entry(endpoint.pool_key.clone()).or_default();
        match opened {
            Ok(link) => {
                e.failed = None;
                e.links.push(link.clone());
                Ok(link)
            }
            Err(why) => {
                e.failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    async fn handshake(&self, endpoint: &Upstream) -> Result<Link, String> {
        let stream = self.connector.connect(&endpoint.uri, endpoint.server_name.as_deref()).await?;
        // Pings find a connection that died without a word (a half-open TCP
        // connection would otherwise take calls until they time out).
        let (send, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(KEEP_ALIVE)
            .keep_alive_timeout(KEEP_ALIVE)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("http2 handshake error: {e}"))?;
        let at = endpoint.uri.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(endpoint = %at, error = %e, "http2 upstream connection closed with an error");
            }
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Link { send, streams: Arc::new(AtomicUsize::new(0)) })
    }

    fn forget(&self, endpoint: &Upstream, link: &Link) {
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = all.get_mut(&endpoint.pool_key) {
            e.links.retain(|l| !Arc::ptr_eq(&l.streams, &link.streams));
        }
    }
}

/// Whether `e` is the server's GOAWAY (rather than a reset or a broken connection).
fn gone_away(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.is_go_away() && h2.is_remote();
        }
        source = s.source();
    }
    false
}

/// The URI of an HTTP/2 request to the endpoint `at` names: `https` over
/// TLS (`h2://`), else `http`, with `authority` (the endpoint's `Host`) and
/// `target`.
pub fn uri(at: &http::Uri, authority: &str, target: &str) -> String {
    let scheme = if at.scheme_str() == Some("h2") { "https" } else { "http" };
    format!("{scheme}://{authority}{target}")
}

/// The request head for `endpoint`: `:authority` is the endpoint's `Host`
/// (the client's does not go), the fields are the client's, then the
/// header rules' and the proxy's; `te: trailers` says that trailers are
/// read (gRPC servers require it, and it is the only `TE` HTTP/2 allows).
fn request(endpoint: &Upstream, out: &Outgoing<'_>) -> Result<Request<()>, String> {
    // The endpoint's `Host` (its name, for one DNS found by address).
    let authority = out.host.to_str().map_err(|e| e.to_string())?;
    let uri = uri(&endpoint.uri, authority, out.target);
    let mut req = Request::builder().method(out.method.clone()).uri(uri).body(()).map_err(|e| e.to_string())?;
    *req.version_mut() = http::Version::HTTP_2;
    let headers = req.headers_mut();
    headers.reserve(out.headers.len() + 6);
    for (name, value) in out.headers {
        if name != header::HOST {
            headers.append(name.clone(), value.clone());
        }
    }
    out.added.clone().move_into(headers);
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    Ok(req)
}
