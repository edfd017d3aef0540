//! Upstream connections: HTTP/1.1 keep-alive connections per endpoint,
//! shared by every runtime thread, capped per endpoint with a bounded wait
//! queue.
//!
//! A request's task checks a connection out, owns it for the exchange
//! ([`super::exchange`]) and gives it back when the response has been read
//! to its end and the connection can carry another one; there is no task
//! per connection and no channel to one. Kept connections are taken most
//! recently used first, after a check that costs no system call (the
//! socket's readiness, which the runtime already tracks) that the server
//! has not closed them or sent something unasked. One pool serves every
//! thread, so a connection one thread opened serves the others' requests
//! too (per-worker pools multiply connections; see Pingora's write-up).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tokio::io::AsyncRead;
use tokio::sync::Notify;

use super::connect::{Connector, Stream};
pub use crate::config::settings::Limits;
use crate::routing::Upstream;

/// What a connection is taken for: each use has its own limit beside the
/// endpoint's connection cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A request whose body, if it has one, is in hand.
    Plain,
    /// A request whose body is still arriving from its client: at most
    /// [`Limits::max_uploads`] at once, until the body has gone.
    Upload,
    /// A request asking to upgrade: at most [`Limits::max_tunnels`] at once,
    /// and a tunnel, once switched, no longer counts under the connection cap.
    Tunnel,
}

/// Which limit left a request without a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Every connection busy and `max_pending` requests waiting already.
    Queue,
    /// Waited for a connection as long as the request may (`upstream.queue_timeout`).
    Waited,
    /// `max_uploads` connections carry bodies still arriving.
    Uploads,
    /// `max_tunnels` tunnels are open.
    Tunnels,
    /// An HTTP/2 server took no more streams within `upstream.queue_timeout`.
    Streams,
}

impl Full {
    /// The limit a request was blocked by (`holds`), after waiting for it or not.
    fn of(holds: u8, waited: bool) -> Full {
        match holds {
            HOLDS_UPLOAD => Full::Uploads,
            HOLDS_TUNNEL => Full::Tunnels,
            _ if waited => Full::Waited,
            _ => Full::Queue,
        }
    }

    /// Which settings the limit is, for people.
    pub fn explain(self) -> &'static str {
        match self {
            Full::Queue => {
                "every connection is busy and the wait queue is full (upstream.max_connections, upstream.max_pending)"
            }
            Full::Waited => "no connection freed within upstream.queue_timeout (upstream.max_connections)",
            Full::Uploads => "its share of connections for bodies still arriving is taken (upstream.upload_share)",
            Full::Tunnels => "it has upstream.max_tunnels tunnels open",
            Full::Streams => "its server took no more streams within upstream.queue_timeout (its own stream limit)",
        }
    }
}

/// Why no connection was had.
#[derive(Debug)]
pub enum PoolError {
    /// No connection could be opened (TCP or TLS); the whole story in one line.
    Connect(String),
    /// A limit of the endpoint's (never a failure of the endpoint itself).
    Saturated(Full),
}

/// Read buffer of a connection: most responses fit at once.
const READ_BUFFER: usize = 8 * 1024;

/// One open upstream connection, owned by the request using it or kept in
/// its endpoint's list. Dropping it closes it and frees its place under the
/// endpoint's cap.
///
/// One pointer wide: a connection moves on every request (out of its list,
/// into the exchange, into the response body, back), and moved inline its
/// state is a share of the bytes each request copies (measured with
/// `benches/load/instructions.py --cache-sim`). Boxed once when opened.
#[derive(Debug)]
pub struct Conn(Box<ConnState>);

/// An open connection's socket, buffers and bookkeeping (behind [`Conn`]).
#[derive(Debug)]
pub struct ConnState {
    /// The socket.
    pub(crate) io: Stream,
    /// Bytes read and not yet consumed (the start of a response).
    pub(crate) read: BytesMut,
    /// Bytes to write (a request head, body framing).
    pub(crate) write: Vec<u8>,
    /// Whether it carried a request before: a failure before any answer may
    /// then be the server closing a kept connection as it was reused.
    pub(crate) reused: bool,
    /// When it was last given back.
    since: Instant,
    place: Place,
}

/// A connection's places under its endpoint's limits, and the way home.
#[derive(Debug)]
struct Place {
    endpoint: Arc<Counters>,
    key: Arc<str>,
    home: Arc<Shared>,
    /// Which counts it is in ([`HOLDS_OPEN`], [`HOLDS_UPLOAD`], [`HOLDS_TUNNEL`]).
    holds: u8,
}

/// Counted under `max_connections`.
const HOLDS_OPEN: u8 = 1;
/// Counted under `max_uploads`.
const HOLDS_UPLOAD: u8 = 2;
/// Counted under `max_tunnels`.
const HOLDS_TUNNEL: u8 = 4;

/// An endpoint's connection counts, kept outside the lists' lock so that a
/// connection can be dropped anywhere, the lock held or not.
#[derive(Debug, Default)]
struct Counters {
    open: AtomicUsize,
    uploads: AtomicUsize,
    tunnels: AtomicUsize,
    /// Woken when a connection is given back or closes.
    freed: Notify,
    /// Woken when an upload's body has gone or its connection closes.
    uploads_freed: Notify,
    /// Woken when a tunnel (or an upgrade request that got no tunnel) ends.
    tunnels_freed: Notify,
}

impl Counters {
    /// Whether any connection is counted: its endpoint must stay, or its
    /// caps would start again from zero (tunnels and uploads included).
    fn in_use(&self) -> bool {
        [&self.open, &self.uploads, &self.tunnels].iter().any(|n| n.load(Ordering::Acquire) > 0)
    }

    /// The count and the wake-up of one of the limits.
    fn of(&self, holds: u8) -> (&AtomicUsize, &Notify) {
        match holds {
            HOLDS_UPLOAD => (&self.uploads, &self.uploads_freed),
            HOLDS_TUNNEL => (&self.tunnels, &self.tunnels_freed),
            _ => (&self.open, &self.freed),
        }
    }
}

impl Place {
    /// Leaves the counts in `holds` (those it is in), waking one waiter of each.
    fn leave(&mut self, holds: u8) {
        for one in [HOLDS_OPEN, HOLDS_UPLOAD, HOLDS_TUNNEL] {
            if self.holds & holds & one != 0 {
                self.holds &= !one;
                let (count, freed) = self.endpoint.of(one);
                count.fetch_sub(1, Ordering::AcqRel);
                freed.notify_one();
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.leave(HOLDS_OPEN | HOLDS_UPLOAD | HOLDS_TUNNEL);
    }
}

/// One endpoint's kept connections and waiting requests.
#[derive(Debug, Default)]
struct Endpoint {
    kept: Vec<Conn>,
    waiting: usize,
    counters: Arc<Counters>,
    key: Arc<str>,
}

/// Endpoints by key ([`Upstream::pool_key`]).
#[derive(Debug, Default)]
struct Lists {
    by_endpoint: FxHashMap<Box<str>, Endpoint>,
    /// When every list was last swept of closed and expired connections.
    swept: Option<Instant>,
}

#[derive(Debug)]
struct Shared {
    lists: Mutex<Lists>,
    idle_timeout: Duration,
    max_kept: usize,
}

/// Connections per endpoint, for every endpoint the proxy has sent to.
#[derive(Debug)]
pub struct Pool {
    connector: Connector,
    shared: Arc<Shared>,
    /// Connections opened so far (successfully or not).
    connects: AtomicU64,
}

/// What a request gets when it asks for a connection.
enum Checkout {
    Kept(Conn),
    /// Open a new one; its places under the limits (`holds`) are taken already.
    Open(Arc<Counters>, Arc<str>, u8),
    /// Wait for the limit `holds` names to free up (counted as waiting already).
    Wait(Arc<Counters>, u8),
    Saturated(Full),
}

/// How often a request waiting for a connection looks again even without a
/// wake-up (a safety net; a given-back connection wakes one waiter).
const WAIT_RECHECK: Duration = Duration::from_millis(20);

impl Pool {
    /// A pool that opens connections with `connector`, keeps at most
    /// `max_kept` idle per endpoint and closes those unused for `idle_timeout`.
    pub fn new(connector: Connector, idle_timeout: Duration, max_kept: usize) -> Pool {
        let shared = Shared { lists: Mutex::new(Lists::default()), idle_timeout, max_kept };
        Pool { connector, shared: Arc::new(shared), connects: AtomicU64::new(0) }
    }

    /// Connections opened so far.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// The connector new connections are opened with.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A connection to `endpoint` for `use_`: a kept one, or a new one while
    /// the endpoint is below `limits.max_connections` (and the use below its
    /// own limit), else one freed while this waits, until `until`; with
    /// `limits.max_pending` requests waiting already, or at `until`, none.
    pub async fn connection(
        &self,
        endpoint: &Upstream,
        limits: Limits,
        use_: Use,
        until: Instant,
    ) -> Result<Conn, PoolError> {
        let key = endpoint.pool_key.as_ref();
        loop {
            match self.checkout(key, limits, use_) {
                Checkout::Kept(conn) => return Ok(conn),
                Checkout::Saturated(full) => return Err(PoolError::Saturated(full)),
                Checkout::Open(counters, key, holds) => {
                    let place = Place { endpoint: counters, key, home: Arc::clone(&self.shared), holds };
                    self.connects.fetch_add(1, Ordering::Relaxed);
                    // Boxed: a connect (TLS handshake included) is a large
                    // future (about 1.3 KiB), and held inline it would be room in
                    // every connection's task, though most requests take a
                    // kept connection.
                    let connect = Box::pin(self.connector.connect(&endpoint.uri, endpoint.server_name.as_deref()));
                    let io = connect.await.map_err(PoolError::Connect)?;
                    return Ok(Conn(Box::new(ConnState {
                        io,
                        read: BytesMut::with_capacity(READ_BUFFER),
                        write: Vec::new(),
                        reused: false,
                        since: Instant::now(),
                        place,
                    })));
                }
                Checkout::Wait(counters, blocked) => {
                    let waiting = Waiting { shared: &self.shared, key };
                    let now = Instant::now();
                    if now >= until {
                        return Err(PoolError::Saturated(Full::of(blocked, true)));
                    }
                    let wake = (now + WAIT_RECHECK).min(until);
                    let _ = tokio::time::timeout_at(wake.into(), counters.of(blocked).1.notified()).await;
                    drop(waiting);
                }
            }
        }
    }

    /// A kept connection that is still good, or what to do without one.
    fn checkout(&self, key: &str, limits: Limits, use_: Use) -> Checkout {
        let mut stale = Vec::new();
        let Ok(mut lists) = self.shared.lists.lock() else { return Checkout::Saturated(Full::Queue) };
        let e = match lists.by_endpoint.get_mut(key) {
            Some(e) => e,
            None => {
                let e = Endpoint { key: Arc::from(key), ..Endpoint::default() };
                lists.by_endpoint.entry(Box::from(key)).or_insert(e)
            }
        };
        // The use's own limit first: a kept connection does not lift it.
        let (extra, cap) = match use_ {
            Use::Plain => (0, usize::MAX),
            Use::Upload => (HOLDS_UPLOAD, limits.max_uploads.max(1)),
            Use::Tunnel => (HOLDS_TUNNEL, limits.max_tunnels.max(1)),
        };
        let room = extra == 0 || e.counters.of(extra).0.load(Ordering::Acquire) < cap;
        let mut found = None;
        if room {
            let now = Instant::now();
            while let Some(mut conn) = e.kept.pop() {
                if now.duration_since(conn.since) < self.shared.idle_timeout && conn.is_idle_and_open() {
                    found = Some(conn);
                    break;
                }
                stale.push(conn);
            }
        }
        let take = |counters: &Counters| {
            if extra != 0 {
                counters.of(extra).0.fetch_add(1, Ordering::AcqRel);
            }
        };
        let out = match found {
            Some(mut conn) => {
                take(&e.counters);
                conn.place.holds |= extra;
                Checkout::Kept(conn)
            }
            None if room && e.counters.open.load(Ordering::Acquire) < limits.max_connections.max(1) => {
                e.counters.open.fetch_add(1, Ordering::AcqRel);
                take(&e.counters);
                Checkout::Open(Arc::clone(&e.counters), Arc::clone(&e.key), HOLDS_OPEN | extra)
            }
            None => {
                let blocked = if room { HOLDS_OPEN } else { extra };
                if e.waiting >= limits.max_pending {
                    Checkout::Saturated(Full::of(blocked, false))
                } else {
                    e.waiting += 1;
                    Checkout::Wait(Arc::clone(&e.counters), blocked)
                }
            }
        };
        drop(lists);
        // Closed here, outside the lock.
        drop(stale);
        out
    }

    /// Connections kept for `key` (tests).
    #[cfg(test)]
    pub(crate) fn kept(&self, key: &str) -> usize {
        self.shared.lists.lock().map(|l| l.by_endpoint.get(key).map_or(0, |e| e.kept.len())).unwrap_or(0)
    }

    /// Connections open to `key` (tests).
    #[cfg(test)]
    fn open(&self, key: &str) -> usize {
        self.shared
            .lists
            .lock()
            .map(|l| l.by_endpoint.get(key).map_or(0, |e| e.counters.open.load(Ordering::Acquire)))
            .unwrap_or(0)
    }
}

impl std::ops::Deref for Conn {
    type Target = ConnState;

    fn deref(&self) -> &ConnState {
        &self.0
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut ConnState {
        &mut self.0
    }
}

impl Conn {
    /// The body it carried has gone: it no longer counts as an upload.
    pub(crate) fn upload_done(&mut self) {
        self.place.leave(HOLDS_UPLOAD);
    }

    /// It has switched protocols: a tunnel now, out of the endpoint's
    /// connection cap, under its tunnel cap until it closes.
    pub(crate) fn into_tunnel(mut self) -> Conn {
        self.place.leave(HOLDS_OPEN | HOLDS_UPLOAD);
        self
    }

    /// Gives the connection back for another request (its response read to
    /// the end, nothing else received). Beyond the endpoint's `max_kept` it
    /// is closed.
    pub(crate) fn release(mut self) {
        // Kept, it is just a connection again.
        self.place.leave(HOLDS_UPLOAD | HOLDS_TUNNEL);
        self.reused = true;
        self.since = Instant::now();
        self.write.clear();
        let shared = Arc::clone(&self.place.home);
        let mut closed = Vec::new();
        let Ok(mut lists) = shared.lists.lock() else { return };
        // Endpoints no longer used (a reload removed them) would keep their
        // connections open: every idle timeout, all lists are swept.
        let now = self.since;
        if lists.swept.is_none_or(|t| now.duration_since(t) >= shared.idle_timeout) {
            lists.swept = Some(now);
            let (idle, max_kept) = (shared.idle_timeout, shared.max_kept);
            lists.by_endpoint.retain(|_, e| {
                let (keep, old): (Vec<Conn>, Vec<Conn>) =
                    std::mem::take(&mut e.kept).into_iter().partition(|c| now.duration_since(c.since) < idle);
                e.kept = keep;
                closed.extend(old);
                if e.kept.len() > max_kept {
                    closed.extend(e.kept.drain(..e.kept.len() - max_kept));
                }
                !e.kept.is_empty() || e.counters.in_use() || e.waiting > 0
            });
        }
        let freed = match lists.by_endpoint.get_mut(self.place.key.as_ref()) {
            Some(e) if e.kept.len() < shared.max_kept => {
                let counters = Arc::clone(&e.counters);
                e.kept.push(self);
                Some(counters)
            }
            _ => {
                closed.push(self);
                None
            }
        };
        drop(lists);
        drop(closed);
        if let Some(counters) = freed {
            counters.freed.notify_one();
        }
    }

    /// Whether a kept connection can carry a request: nothing unread, and
    /// the socket neither closed nor holding bytes nobody asked for. A read
    /// with a waker that does nothing: while the runtime has seen no
    /// readiness it returns at once without a system call.
    fn is_idle_and_open(&mut self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut probe);
        // Ready means closed (0 bytes), an error, or bytes nobody asked for.
        std::pin::Pin::new(&mut self.io).poll_read(&mut cx, &mut buf).is_pending()
    }
}

/// One request's place in an endpoint's wait queue, given up when dropped.
struct Waiting<'a> {
    shared: &'a Shared,
    key: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Ok(mut lists) = self.shared.lists.lock() {
            if let Some(e) = lists.by_endpoint.get_mut(self.key) {
                e.waiting = e.waiting.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
