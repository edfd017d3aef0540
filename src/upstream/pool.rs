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
use crate::routing::Upstream;

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

/// Why no connection was had.
#[derive(Debug)]
pub enum PoolError {
    /// No connection could be opened (TCP or TLS); the whole story in one line.
    Connect(String),
    /// The endpoint has `max_connections` open and `max_pending` requests
    /// already waiting for one.
    Saturated,
}

/// Read buffer of a connection: most responses fit at once.
const READ_BUFFER: usize = 8 * 1024;

/// One open upstream connection, owned by the request using it or kept in
/// its endpoint's list. Dropping it closes it and frees its place under the
/// endpoint's cap.
///
/// One pointer wide: a connection moves on every request (out of its list,
/// into the exchange, into the response body, back), and moved inline its
/// state was a share of the bytes each request copies (callgrind,
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

/// A connection's place under its endpoint's cap, and the way home.
#[derive(Debug)]
struct Place {
    endpoint: Arc<Counters>,
    key: Arc<str>,
    home: Arc<Shared>,
}

/// An endpoint's connection count, kept outside the lists' lock so that a
/// connection can be dropped anywhere, the lock held or not.
#[derive(Debug, Default)]
struct Counters {
    open: AtomicUsize,
    /// Woken when a connection is given back or closes.
    freed: Notify,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.endpoint.open.fetch_sub(1, Ordering::AcqRel);
        self.endpoint.freed.notify_one();
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

/// Endpoints by key (`scheme://authority`).
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
    /// Open a new one; its place under the cap is taken already.
    Open(Arc<Counters>, Arc<str>),
    /// Wait for one to free up (counted as waiting already).
    Wait(Arc<Counters>),
    Saturated,
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

    /// A connection to `endpoint`: a kept one, or a new one while the
    /// endpoint is below `limits.max_connections`, else one freed while this
    /// waits (the caller bounds the wait with its timeout); with
    /// `limits.max_pending` requests waiting already, none.
    pub async fn connection(&self, endpoint: &Upstream, limits: Limits) -> Result<Conn, PoolError> {
        let key = endpoint.pool_key.as_ref();
        loop {
            match self.checkout(key, limits) {
                Checkout::Kept(conn) => return Ok(conn),
                Checkout::Saturated => return Err(PoolError::Saturated),
                Checkout::Open(counters, key) => {
                    let place = Place { endpoint: counters, key, home: Arc::clone(&self.shared) };
                    self.connects.fetch_add(1, Ordering::Relaxed);
                    // Boxed: a connect (TLS handshake included) is a large
                    // future (about 1.3 KiB), and held inline it would be room in
                    // every connection's task, though most requests take a
                    // kept connection.
                    let connect = Box::pin(self.connector.connect(&endpoint.uri));
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
                Checkout::Wait(counters) => {
                    let waiting = Waiting { shared: &self.shared, key };
                    let _ = tokio::time::timeout(WAIT_RECHECK, counters.freed.notified()).await;
                    drop(waiting);
                }
            }
        }
    }

    /// A kept connection that is still good, or what to do without one.
    fn checkout(&self, key: &str, limits: Limits) -> Checkout {
        let mut stale = Vec::new();
        let Ok(mut lists) = self.shared.lists.lock() else { return Checkout::Saturated };
        let e = match lists.by_endpoint.get_mut(key) {
            Some(e) => e,
            None => {
                let e = Endpoint { key: Arc::from(key), ..Endpoint::default() };
                lists.by_endpoint.entry(Box::from(key)).or_insert(e)
            }
        };
        let now = Instant::now();
        let mut found = None;
        while let Some(mut conn) = e.kept.pop() {
            if now.duration_since(conn.since) < self.shared.idle_timeout && conn.is_idle_and_open() {
                found = Some(conn);
                break;
            }
            stale.push(conn);
        }
        let out = match found {
            Some(conn) => Checkout::Kept(conn),
            None if e.counters.open.load(Ordering::Acquire) < limits.max_connections.max(1) => {
                e.counters.open.fetch_add(1, Ordering::AcqRel);
                Checkout::Open(Arc::clone(&e.counters), Arc::clone(&e.key))
            }
            None if e.waiting >= limits.max_pending => Checkout::Saturated,
            None => {
                e.waiting += 1;
                Checkout::Wait(Arc::clone(&e.counters))
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
    /// Gives the connection back for another request (its response read to
    /// the end, nothing else received). Beyond the endpoint's `max_kept` it
    /// is closed.
    pub(crate) fn release(mut self) {
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
                !e.kept.is_empty() || e.counters.open.load(Ordering::Acquire) > 0 || e.waiting > 0
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
