//! HTTP/2 to `h2c://` (prior knowledge) and `h2://` (TLS, ALPN `h2`)
//! endpoints: a few multiplexed connections per endpoint, each driven by
//! the `h2` crate on a task of its own. A request takes the open connection
//! with the fewest streams, a new one being opened when every open one
//! carries [`STREAMS`] already, up to the endpoint's connection cap; the
//! streams beyond that, or beyond the server's stream limit, wait at the
//! connection's gate (`Gate`) before `h2` is given them. Bodies and
//! trailers go both ways as frames, so gRPC's streaming calls and its
//! status in trailers pass as they are.
//!
//! Why `h2` here and not the proxy's own exchange ([`super::exchange`]):
//! HTTP/2's framing, flow control and stream states are what `h2` is made
//! for. Why `h2` itself and not hyper's client on it: hyper hands each
//! request to the connection's task over a channel and spawns a task for
//! each answer (and one more for a body still arriving), where here the
//! request's own task opens the stream, sends a body it has whole, and
//! reads the answer; only a body still arriving gets a task, to send it as
//! the server's flow control allows while the answer is read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use http::uri::Scheme;
use http::{header, HeaderValue, Request, Response};
use hyper::body::Body;

use super::body::UpstreamBody;
use super::connect::Connector;
use super::outgoing::Outgoing;
use super::pipe::{send_body, Piping};
use super::recv::{RecvBody, TakeIn};
use crate::cork::{self, Corked};
use crate::http1::HOP_BY_HOP;
use crate::routing::Upstream;

/// Streams one connection carries before another is opened beside it.
pub const STREAMS: usize = 100;

/// Most connections to one endpoint (fewer when its region's
/// `max_connections` is lower).
pub const CONNECTIONS: usize = 4;

/// How often a connection is pinged, and how long its answer may take.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The HTTP/2 connections to every `h2c://` and `h2://` endpoint.
#[derive(Debug)]
pub struct H2 {
    connector: Connector,
    endpoints: Mutex<HashMap<Arc<str>, Endpoint>>,
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

/// A stream's flow-control window: what one answer may hold at the proxy
/// while its client does not read (and as much again on its way out).
const STREAM_WINDOW: u32 = 1024 * 1024;

/// The connection's flow-control window: every stream's window (its gate
/// lets at most [`STREAMS`] be open), so that streams whose clients do not
/// read hold only their own windows, never the connection's other streams.
const CONNECTION_WINDOW: u32 = STREAMS as u32 * STREAM_WINDOW;

/// One connection and the streams open on it.
#[derive(Clone, Debug)]
struct Link {
    send: SendRequest<Bytes>,
    /// Streams reserved on it, open or waiting at its gate.
    streams: Arc<AtomicUsize>,
    gate: Arc<Gate>,
    /// Set by the connection's task when the connection has ended.
    closed: Arc<AtomicBool>,
}

impl Link {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// A stream counted on its connection while its answer is read (and at
/// its gate once it has passed).
#[derive(Debug)]
pub struct Stream {
    reserved: Arc<AtomicUsize>,
    passed: Option<Arc<Gate>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reserved.fetch_sub(1, Ordering::Relaxed);
        if let Some(gate) = self.passed.take() {
            gate.leave();
        }
    }
}

/// How often a stream waiting at a gate looks at the server's limit again
/// without being woken: a SETTINGS frame that raises it wakes no one.
const RELOOK: Duration = Duration::from_millis(100);

/// The streams of one connection given to `h2`: at most the server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` and [`STREAMS`]. The rest wait here,
/// not in `h2`: a stream `h2` holds back still reaches the server after it
/// is given up (its head, then a reset; hyperium/h2#125), and the
/// connection's window is sized for [`STREAMS`] open streams. (A burst
/// sent before the server's SETTINGS arrive may still wait in `h2`, as may
/// a stream passed when `h2` still counts one the proxy let go, its last
/// frames not yet sent.)
#[derive(Debug, Default)]
struct Gate {
    open: AtomicUsize,
    /// Calls waiting for a place.
    waiting: AtomicUsize,
    freed: tokio::sync::Notify,
}

impl Gate {
    /// A place among `send`'s open streams, waited for within `limit`;
    /// `false`: none came. Calls that find others waiting wait behind them.
    async fn pass(&self, send: &SendRequest<Bytes>, limit: &mut Limit) -> bool {
        if self.waiting.load(Ordering::Acquire) == 0 && self.take(send) {
            return true;
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        // Counted out however the wait ends, its call dropped included.
        let _waiting = Waiting(&self.waiting);
        self.wait(send, limit).await
    }

    /// Waits for a place. A call looks for one only once woken (a place
    /// freed wakes the longest waiting call first; every call looks again
    /// each [`RELOOK`]), so a call that arrives while others wait does not
    /// take the place freed for one of them. A place freed between the
    /// fast path's look and this wait leaves its wake-up stored, and it
    /// comes at once.
    async fn wait(&self, send: &SendRequest<Bytes>, limit: &mut Limit) -> bool {
        let mut woken = false;
        loop {
            // Listening before looking: a place freed in between wakes it.
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if woken && self.take(send) {
                return true;
            }
            let until = limit.end();
            let now = Instant::now();
            if now >= until {
                return false;
            }
            let _ = tokio::time::timeout_at((now + RELOOK).min(until).into(), freed).await;
            woken = true;
        }
    }

    /// A place, when one is free now.
    fn take(&self, send: &SendRequest<Bytes>) -> bool {
        let allowed = send.current_max_send_streams().min(STREAMS);
        self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < allowed).then_some(n + 1)).is_ok()
    }

    fn leave(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.freed.notify_one();
    }
}

/// One limit for all of a call's waits: `queue` from when the first of them
/// begins (the clock is read only when a call must wait), never past
/// `deadline`.
#[derive(Debug)]
struct Limit {
    queue: Duration,
    deadline: Instant,
    end: Option<Instant>,
}

impl Limit {
    fn end(&mut self) -> Instant {
        let (queue, deadline) = (self.queue, self.deadline);
        *self.end.get_or_insert_with(|| (Instant::now() + queue).min(deadline))
    }
}

/// A call counted among a gate's waiting ones until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body and trailers ([`RecvBody`]), its stream counted on its
/// connection until dropped. Dropped before its end, the stream is reset;
/// dropped at its end (read to it, or found there by
/// [`Body::is_end_stream`], where readers stop), the rest of the request's
/// body still goes, and the stream stays counted until it has.
#[derive(Debug)]
pub struct Answer {
    body: RecvBody,
    /// `None` once handed to the piping.
    stream: Option<Stream>,
    /// The request body's piping, stopped if the answer is dropped before its end.
    piping: Piping<Stream>,
}

impl Answer {
    /// `resp`'s body, on the stream `stream` counts, the request's body
    /// sent by the task `piping` holds when there is one.
    fn new(resp: Response<RecvStream>, stream: Stream, piping: Piping<Stream>) -> Response<Answer> {
        let (parts, recv) = resp.into_parts();
        let body = RecvBody::new(recv, &parts.headers);
        Response::from_parts(parts, Answer { body, stream: Some(stream), piping })
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, h2::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl TakeIn for Answer {
    fn take_in(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) {
        std::pin::Pin::new(&mut self.get_mut().body).take_in(cx);
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let (true, Some(stream)) = (self.is_end_stream(), self.stream.take()) {
            self.piping.let_go(stream);
        }
    }
}

/// Why no stream could be reserved: nothing was sent.
#[derive(Debug)]
pub enum Unready {
    /// No connection could be opened: by this call, or (`waited`) by the
    /// one it waited for, whose failure is that call's to count.
    Connect {
        /// Why.
        error: String,
        /// Whether another call's opening failed, not this one's.
        waited: bool,
    },
    /// Every connection carries [`STREAMS`] and `max_pending` more.
    Saturated,
}

/// Why an HTTP/2 exchange failed.
#[derive(Debug)]
pub enum H2Error {
    /// The connection did not take the stream (closed, or the server's
    /// GOAWAY left it out): the server never saw it; the body is given back.
    Closed(String, UpstreamBody),
    /// The stream failed after the request went (or may have gone).
    Failed(String),
    /// The server's GOAWAY left the stream out, but part of its body,
    /// streamed, is gone and cannot go again; the server is going away,
    /// not failing.
    GoneAway(String),
}

/// Why a stream was not opened ([`H2::start`]).
#[derive(Debug)]
pub enum Unopened {
    /// The connection did not take the stream (closed, or going away).
    Closed(String, UpstreamBody),
    /// The server's concurrent-stream limit kept it waiting past the
    /// queue's time: the endpoint is busy, not failing. The body is given
    /// back when it waited at the gate (nothing went); not when `h2` held
    /// it back, whose head may still reach the server (then reset).
    Pending(Option<UpstreamBody>),
    /// The request's head could not be made.
    Failed(String),
}

/// A stream the server took, its request head sent; its body not yet.
#[derive(Debug)]
pub struct Opened {
    link: Link,
    stream: Stream,
    answer: ResponseFuture,
    tx: SendStream<Bytes>,
    body: UpstreamBody,
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
                        Some(error) => return Err(Unready::Connect { error, waited: true }),
                        None => self.open(endpoint).await.map_err(|error| Unready::Connect { error, waited: false })?,
                    },
                }
            }
        };
        let limit = STREAMS + max_pending;
        let taken = link.streams.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            return Err(Unready::Saturated);
        }
        let stream = Stream { reserved: Arc::clone(&link.streams), passed: None };
        Ok(Reserved { link, stream })
    }

    /// Waits, up to `queue` (and not past `deadline`), for a place among
    /// the connection's open streams (its `Gate`), then sends `out`'s head on
    /// the reserved stream: a wait for the endpoint's capacity (as for an
    /// HTTP/1 connection from the pool), not the attempt's time, and never
    /// held against the endpoint. A stream that `h2` still holds back (a
    /// burst before the server's SETTINGS) is waited for the same way.
    pub async fn start(
        &self,
        endpoint: &Upstream,
        reserved: Reserved,
        out: &Outgoing<'_>,
        (body, queue, deadline): (UpstreamBody, Duration, Instant),
    ) -> Result<Opened, Unopened> {
        use futures_util::FutureExt;
        let Reserved { link, mut stream } = reserved;
        let req = match request(endpoint, out, body.size_hint().exact()) {
            Ok(head) => head,
            Err(e) => return Err(Unopened::Failed(e)),
        };
        let mut limit = Limit { queue, deadline, end: None };
        if !link.gate.pass(&link.send, &mut limit).await {
            return Err(Unopened::Pending(Some(body)));
        }
        stream.passed = Some(Arc::clone(&link.gate));
        // A clone holds no stream of its own yet: ready at once, or the
        // connection's error.
        let mut send = match link.send.clone().ready().await {
            Ok(send) => send,
            Err(e) => {
                self.forget(endpoint, &link);
                return Err(Unopened::Closed(e.to_string(), body));
            }
        };
        let (answer, tx) = match send.send_request(req, body.is_end_stream()) {
            Ok(sent) => sent,
            // The connection is going or gone: the head did not go.
            Err(e) if e.is_go_away() || e.is_io() => {
                self.forget(endpoint, &link);
                return Err(Unopened::Closed(e.to_string(), body));
            }
            Err(e) => return Err(Unopened::Failed(e.to_string())),
        };
        // Ready again once this stream is open; at once unless it waits. A
        // connection error meanwhile is the answer's to tell (a GOAWAY may
        // or may not have left the stream out).
        let mut taken = std::pin::pin!(send.ready());
        if taken.as_mut().now_or_never().is_none() && tokio::time::timeout_at(limit.end().into(), taken).await.is_err()
        {
            // Dropped, `h2` still sends its head once a stream ends, then
            // resets it: the server may see it, and nothing sends it again.
            return Err(Unopened::Pending(None));
        }
        Ok(Opened { link, stream, answer, tx, body })
    }

    /// The opened stream's body sent (the rest of it at most `linger` past
    /// the answer's end) and the answer's head read; its body and trailers
    /// follow as frames.
    pub async fn answer(
        &self,
        endpoint: &Upstream,
        opened: Opened,
        linger: Duration,
    ) -> Result<Response<Answer>, H2Error> {
        let Opened { link, stream, answer, tx, body } = opened;
        // A GOAWAY that leaves this stream out says the server never took it
        // (RFC 9113 §6.8): a body held whole (a count, not a copy) goes again.
        let again = body.again();
        let piping = send_body(body, tx, linger);
        match answer.await {
            Ok(resp) => Ok(Answer::new(resp, stream, piping)),
            Err(e) if e.is_go_away() && e.is_remote() => {
                self.forget(endpoint, &link);
                match again {
                    Some(body) => Err(H2Error::Closed(e.to_string(), body)),
                    None => Err(H2Error::GoneAway(e.to_string())),
                }
            }
            Err(e) => Err(H2Error::Failed(e.to_string())),
        }
    }

    /// Drops the connections of every endpoint `table` does not name (a
    /// reload took it out, DNS no longer returns its address): a call in
    /// flight on one keeps it until the call ends; no new call finds it.
    pub fn keep_only(&self, table: &crate::routing::Table) {
        let named: std::collections::HashSet<&str> = (0..table.regions().len())
            .filter_map(|i| u16::try_from(i).ok().map(crate::routing::RegionId))
            .flat_map(|id| table.region(id).upstreams.iter().chain(table.peers(id)))
            .map(|u| &*u.pool_key)
            .collect();
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.retain(|key, _| named.contains(&**key));
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
        let e = all.entry(Arc::clone(&endpoint.pool_key)).or_default();
        e.links.retain(|l| !l.is_closed());
        let room = max_connections == 0 || e.links.len() < max_connections;
        match e.links.iter().min_by_key(|l| l.streams.load(Ordering::Relaxed)) {
            Some(least) if !(room && least.streams.load(Ordering::Relaxed) >= STREAMS) => Ok(least.clone()),
            _ => Err(Arc::clone(&e.opening)),
        }
    }

    async fn open(&self, endpoint: &Upstream) -> Result<Link, String> {
        let opened = self.handshake(endpoint).await;
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = all.entry(Arc::clone(&endpoint.pool_key)).or_default();
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
        // The preface and SETTINGS are held until the connection's task
        // first polls it, and every poll's frames go out together.
        let (stream, held) = cork::cork(stream);
        let (send, conn) = h2::client::Builder::new()
            // Streams opened before the server's SETTINGS say how many it
            // takes: past a limit it has not yet told, they would be refused.
            .initial_max_send_streams(STREAMS)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // hyper's client's limits too: 16 KiB of answer fields, 1 MiB
            // buffered a stream before its sender waits for the window.
            .max_header_list_size(16 * 1024)
            .max_send_buffer_size(1024 * 1024)
            .enable_push(false)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(|e| format!("http2 handshake error: {e}"))?;
        let closed = Arc::new(AtomicBool::new(false));
        tokio::spawn(cork::uncorked(held, drive(conn, endpoint.uri.clone(), Arc::clone(&closed))));
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Link { send, streams: Arc::new(AtomicUsize::new(0)), gate: Arc::default(), closed })
    }

    fn forget(&self, endpoint: &Upstream, link: &Link) {
        let mut all = self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = all.get_mut(&endpoint.pool_key) {
            e.links.retain(|l| !Arc::ptr_eq(&l.streams, &link.streams));
        }
    }
}

/// Drives one connection until it ends (the server closes it, it fails,
/// or, once the pool has forgotten it, its last stream is done), pinging it every
/// [`KEEP_ALIVE`]: a connection that died without a word (a half-open TCP
/// connection) would otherwise take calls until they time out. No pong
/// within [`KEEP_ALIVE`] ends it.
async fn drive(
    mut conn: h2::client::Connection<Corked<super::connect::Stream>, Bytes>,
    at: http::Uri,
    closed: Arc<AtomicBool>,
) {
    let mut pings = conn.ping_pong();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let ended = loop {
        tokio::select! {
            ended = &mut conn => break ended,
            _ = tick.tick() => {
                let Some(pings) = pings.as_mut() else { continue };
                let pong = tokio::time::timeout(KEEP_ALIVE, pings.ping(h2::Ping::opaque()));
                tokio::select! {
                    ended = &mut conn => break ended,
                    answered = pong => if !matches!(answered, Ok(Ok(_))) {
                        tracing::debug!(endpoint = %at, "http2 upstream connection did not answer a ping; closed");
                        break Ok(());
                    },
                }
            }
        }
    };
    closed.store(true, Ordering::Release);
    if let Err(e) = ended {
        tracing::debug!(endpoint = %at, error = %e, "http2 upstream connection closed with an error");
    }
}

/// The URI of an HTTP/2 request to the endpoint `at` names: `https` over
/// TLS (`h2://`), else `http`, with `authority` (the endpoint's `Host`) and
/// `target`.
pub fn uri(at: &http::Uri, authority: &str, target: &str) -> String {
    format!("{}://{authority}{target}", scheme(at))
}

/// The scheme of an HTTP/2 request to the endpoint `at` names: `https` over
/// TLS (`h2://`), else `http` (`h2c://`).
fn scheme(at: &http::Uri) -> Scheme {
    if at.scheme_str() == Some("h2") {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    }
}

/// The request head for `endpoint`: `:authority` is the endpoint's `Host`
/// (the client's does not go), the fields are the client's, then the
/// header rules' and the proxy's; `te: trailers` says that trailers are
/// read (gRPC servers require it, and it is the only `TE` HTTP/2 allows);
/// `content-length` says a body's `length` when it is known and the
/// client's did not (a body read whole from a chunked HTTP/1.1 request).
fn request(endpoint: &Upstream, out: &Outgoing<'_>, length: Option<u64>) -> Result<Request<()>, String> {
    // Made of parts already parsed: the endpoint's `Host` as its authority
    // (its name, for one DNS found by address) and the target.
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(scheme(&endpoint.uri));
    uri.authority = Some(endpoint.authority.clone());
    uri.path_and_query = Some(out.target.clone());
    let mut req = Request::new(());
    *req.method_mut() = out.method.clone();
    *req.uri_mut() = http::Uri::from_parts(uri).map_err(|e| e.to_string())?;
    *req.version_mut() = http::Version::HTTP_2;
    let headers = req.headers_mut();
    headers.reserve(out.headers.len() + 6);
    // The fields of one connection stay behind (the request's framing on an
    // HTTP/1.1 leg among them): HTTP/2 has none (RFC 9113, 8.2.2), and `h2`
    // refuses a head that carries one; `te` comes back as the one value
    // HTTP/2 allows.
    for (name, value) in out.headers {
        if name != header::HOST && !HOP_BY_HOP.contains(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    out.added.clone().move_into(headers);
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    if let Some(n) = length.filter(|&n| n > 0) {
        headers.entry(header::CONTENT_LENGTH).or_insert_with(|| HeaderValue::from(n));
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::connect::{connector, ClientSettings};

    #[tokio::test]
    async fn one_failed_opening_is_counted_by_the_call_that_made_it_alone() -> Result<(), Box<dyn std::error::Error>> {
        // A port no one listens on: every connection is refused.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let endpoint = Upstream::parse(&format!("h2c://{closed}"))?;
        let settings = ClientSettings {
            connect_timeout: std::time::Duration::from_secs(1),
            pool_idle_timeout: std::time::Duration::from_secs(30),
            tls: None,
        };
        let h2 = H2::new(connector(&settings));
        let calls = (0..5).map(|_| h2.reserve(&endpoint, (1, 0)));
        let waited: Vec<Option<bool>> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .map(|r| match r {
                Err(Unready::Connect { waited, .. }) => Some(waited),
                _ => None,
            })
            .collect();
        assert_eq!(waited, [Some(false), Some(true), Some(true), Some(true), Some(true)]);
        Ok(())
    }
}
