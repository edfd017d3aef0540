//! Server: the accept loop, one path for plain and TLS connections.
//! HTTP/1.1 and h2c (prior knowledge) on one port, or TLS with ALPN h2 and
//! http/1.1 (`server.tls`), upgrades allowed, every connection watched for
//! graceful shutdown and idleness. A connection whose first bytes are the
//! HTTP/2 preface is served by hyper; any other by the proxy's own
//! HTTP/1.1 server (`h1`). Each request reaches [`Proxy::handle`]
//! with its connection's [`ConnInfo`]. The listener and the shutdown signal
//! are passed in, so tests bind port 0. The `Acceptor` (limit, refusal,
//! back-off) is shared with the admin listener.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::BytesMut;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

pub use super::conn::{ConnInfo, ServerOptions};
use super::error::ProxyError;
pub(crate) use super::idle::{until_idle, Activity, Watched};
use super::upgrade::{ClientIo, Rewound};
use super::Proxy;
use crate::tls::ServerTls;
use crate::upstream::RequestBody;

/// The first byte of a TLS handshake record (RFC 8446 §5.1); a plain
/// HTTP request on a TLS port starts with a method's letter instead.
const TLS_HANDSHAKE: u8 = 0x16;

/// The first byte the client sent, left in the socket (`None`: it closed, or failed).
async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Refusals being written at once; past it a refused connection is just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;
/// How long writing a refusal (and draining the client's first bytes) may take.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(500);

/// Serves `proxy` on `listener` until `shutdown` resolves: HTTP/1.1 and h2c
/// (prior knowledge), or, with `tls`, TLS with ALPN h2 and http/1.1 (the
/// handshake bounded by `header_read_timeout`, the certificate files checked
/// for changes every [`crate::tls::RELOAD_CHECK_INTERVAL`]). Then it stops
/// accepting and lets in-flight requests finish for the grace period the
/// shutdown future yields (read when the drain ends, so
/// `server.shutdown_timeout` reloads live). Returns `true` when every
/// connection finished within it.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    opts: ServerOptions,
    tls: Option<Arc<ServerTls>>,
    shutdown: impl Future<Output = Duration>,
) -> io::Result<bool> {
    let _cert_watch = tls.as_ref().map(|t| t.watch(crate::tls::RELOAD_CHECK_INTERVAL));
    let builder = builder(&opts);
    let graceful = GracefulShutdown::new();
    // The HTTP/1.1 connections' shutdown signal; they finish the request in
    // flight, close when idle, and drop their receiver when they end.
    let (stop_tx, stop) = watch::channel(false);
    let metrics = Arc::clone(&proxy.shared().metrics);
    let refused = ProxyError::TooManyConnections { limit: opts.max_connections, listener: "proxy" };
    let refusal: Arc<[u8]> = crate::problem::http1_answer(&refused, proxy.name()).into();
    let mut acceptor = Acceptor::new(listener, "proxy", opts.max_connections, refusal, Arc::clone(&metrics));
    tokio::pin!(shutdown);
    let grace = loop {
        let (stream, peer, slot) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            grace = &mut shutdown => break grace,
        };
        let conn = Connection {
            proxy: Arc::clone(&proxy),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            stop: stop.clone(),
            opts,
            peer,
            _open: metrics.connection_opened("proxy"),
            _slot: slot,
        };
        tokio::spawn(conn.run(stream, tls.as_ref().map(|t| (t.acceptor(), t.client_auth()))));
    };
    // From here on new connections are refused by the kernel.
    drop(acceptor);
    drop(stop);
    stop_tx.send_replace(true);
    let finished =
        tokio::time::timeout(grace, async { tokio::join!(graceful.shutdown(), stop_tx.closed()) }).await.is_ok();
    if !finished {
        tracing::warn!(timeout = ?grace, "in-flight requests did not finish before the shutdown timeout");
    }
    Ok(finished)
}

/// The HTTP/2 server settings for `opts`.
fn builder(opts: &ServerOptions) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder.timer(TokioTimer::new()).max_header_list_size(u32::try_from(opts.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// One accepted client connection, with its places under the limits
/// (given up when it ends).
struct Connection {
    proxy: Arc<Proxy>,
    builder: http2::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    stop: watch::Receiver<bool>,
    opts: ServerOptions,
    peer: SocketAddr,
    _open: crate::metrics::ConnectionGuard,
    _slot: Slot,
}

impl Connection {
    /// Serves the connection to its end: plain, or after the TLS handshake.
    async fn run(self, mut stream: TcpStream, tls: Option<(tokio_rustls::TlsAcceptor, bool)>) {
        let peer = self.peer;
        if tls.is_some() {
            let first = tokio::time::timeout(self.opts.header_read_timeout, first_byte(&stream)).await;
            if let Ok(Some(b)) = first {
                if b != TLS_HANDSHAKE && b.is_ascii_alphabetic() {
                    tracing::debug!(%peer, "plain HTTP on the TLS listener; answered 400");
                    let answer = crate::problem::http1_answer(&ProxyError::PlainHttpToTls, self.proxy.name());
                    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, stream.write_all(&answer)).await;
                    return;
                }
            }
        }
        let stream = Watched::new(stream);
        let activity = Arc::clone(&stream.activity);
        let Some((acceptor, client_auth)) = tls else {
            let info = ConnInfo::plain(self.peer);
            return self.serve(stream, info, &activity).await;
        };
        let stream = match tokio::time::timeout(self.opts.header_read_timeout, acceptor.accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return tracing::debug!(error = %e, %peer, "tls handshake failed"),
            Err(_) => return tracing::debug!(%peer, "tls handshake timed out (server.header_read_timeout)"),
        };
        let verified = client_auth && stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
        let info = ConnInfo { peer, tls: true, client_auth, client_verified: verified };
        self.serve(stream, info, &activity).await;
    }

    /// Serves HTTP on `io` until it ends or idles out: HTTP/2 (hyper) when
    /// the client's first bytes are its preface, else HTTP/1.1 (the proxy's
    /// own server); each request reaches [`Proxy::handle`] with `info`.
    async fn serve<S: ClientIo + 'static>(self, mut io: S, info: ConnInfo, activity: &Activity) {
        let Connection { proxy, builder, watcher, mut stop, opts, peer, _open, _slot } = self;
        let conn = async move {
            let mut buf = BytesMut::with_capacity(8 * 1024);
            loop {
                // A connection that has sent nothing yet ends when shutdown begins.
                let read = tokio::select! {
                    read = io.read_buf(&mut buf) => read.map_err(|e| e.to_string())?,
                    _ = stop.wait_for(|stopping| *stopping), if buf.is_empty() => return Ok(()),
                };
                if read == 0 {
                    return Ok(());
                }
                let sniffed = buf.len().min(PREFACE.len());
                if buf[..sniffed] != PREFACE[..sniffed] {
                    let wire = super::h1::Wire::new(Box::new(io), buf);
                    super::h1::serve(proxy, wire, info, opts, stop).await;
                    return Ok(());
                }
                if sniffed == PREFACE.len() {
                    break;
                }
            }
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let proxy = Arc::clone(&proxy);
                async move {
                    let (mut head, body) = req.into_parts();
                    let mut request_id = None;
                    let mut resp = proxy.handle(&mut head, RequestBody::from(body), info, &mut request_id).await;
                    proxy.stamp(&mut resp, request_id);
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = builder.serve_connection(TokioIo::new(Rewound::new(buf, io)), service);
            watcher.watch(conn).await.map_err(|e| e.to_string())
        };
        until_idle(conn, activity, opts, peer).await;
    }
}

/// A listener with its connection limit, the answer for connections beyond
/// it, and a back-off for failing accepts: what the proxy and admin
/// listeners share.
#[derive(Debug)]
pub(crate) struct Acceptor {
    listener: TcpListener,
    limit: Limit,
    refusal: Arc<[u8]>,
    /// Accepts that failed in a row, and the pause before the next try.
    failures: u32,
    pause: Duration,
}

/// The first pause after a failed accept, doubled on each failure in a row up to [`MAX_ACCEPT_PAUSE`].
const FIRST_ACCEPT_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between failing accepts.
const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);

impl Acceptor {
    /// Accepts on `listener` (named `name` in logs and metrics) at most `max`
    /// connections at once; beyond it a connection is answered `refusal`
    /// and closed.
    pub(crate) fn new(
        listener: TcpListener,
        name: &'static str,
        max: usize,
        refusal: Arc<[u8]>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Acceptor {
        Acceptor { listener, limit: Limit::new(name, max, metrics), refusal, failures: 0, pause: FIRST_ACCEPT_PAUSE }
    }

    /// At the limit, closes the oldest connection that has sent nothing
    /// instead of refusing the new one (the admin listener: probes must
    /// get through sockets opened and left silent). Each connection then
    /// registers its activity ([`Slot::watch`]) and ends when told
    /// ([`Slot::closed_for_room`]).
    pub(crate) fn making_room(mut self) -> Acceptor {
        self.limit.open_list = Some(Mutex::new(VecDeque::new()));
        self
    }

    /// The next connection under the limit, with its place under it (those
    /// beyond it are refused on the way). A failing accept (EMFILE, ENFILE,
    /// ENOBUFS) is logged once per episode and retried after a pause that
    /// doubles up to a second, so it neither spins nor floods the log.
    pub(crate) async fn accept(&mut self) -> (TcpStream, SocketAddr, Slot) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    if self.failures > 0 {
                        tracing::info!(listener = self.limit.name, failures = self.failures, "accepting again");
                        self.failures = 0;
                        self.pause = FIRST_ACCEPT_PAUSE;
                    }
                    let _ = stream.set_nodelay(true);
                    match self.limit.try_acquire() {
                        Some(slot) => return (stream, peer, slot),
                        None => self.limit.refuse(stream, Arc::clone(&self.refusal)),
                    }
                }
                Err(e) => {
                    self.failures += 1;
                    if self.failures == 1 {
                        tracing::warn!(listener = self.limit.name, error = %e, "accept failed; backing off until it succeeds again");
                    }
                    tokio::time::sleep(self.pause).await;
                    self.pause = (self.pause * 2).min(MAX_ACCEPT_PAUSE);
                }
            }
        }
    }
}

/// The connection limit: a count of open client connections, and the
/// refusals written past it.
#[derive(Debug)]
struct Limit {
    /// The listener's name (`proxy`, `admin`).
    name: &'static str,
    max: usize,
    open: Arc<AtomicUsize>,
    refusing: Arc<AtomicUsize>,
    /// Set while at the limit, so the warning is logged once per episode.
    at_limit: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
    /// The open connections, oldest first, when the listener closes the
    /// oldest one that has sent nothing to make room for a new one.
    open_list: Option<Mutex<VecDeque<Weak<Held>>>>,
}

/// One open connection's place under the limit; released when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    count: Arc<AtomicUsize>,
    held: Option<Arc<Held>>,
}

/// What the listener knows of an open connection it may close to make
/// room: whether it has sent anything, and how to tell it to close.
#[derive(Debug, Default)]
struct Held {
    activity: OnceLock<Arc<Activity>>,
    close: Notify,
}

impl Slot {
    fn counted(count: &Arc<AtomicUsize>, held: Option<Arc<Held>>) -> Slot {
        count.fetch_add(1, Ordering::AcqRel);
        Slot { count: Arc::clone(count), held }
    }

    /// Lets the listener see whether the connection has sent anything.
    pub(crate) fn watch(&self, activity: &Arc<Activity>) {
        if let Some(h) = &self.held {
            let _ = h.activity.set(Arc::clone(activity));
        }
    }

    /// Resolves when the listener closes the connection to make room for a
    /// new one (never, on a listener that refuses instead).
    pub(crate) async fn closed_for_room(&self) {
        match &self.held {
            Some(h) => h.close.notified().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Limit {
    fn new(name: &'static str, max: usize, metrics: Arc<crate::metrics::Metrics>) -> Limit {
        Limit {
            name,
            max,
            open: Arc::new(AtomicUsize::new(0)),
            refusing: Arc::new(AtomicUsize::new(0)),
            at_limit: AtomicBool::new(false),
            metrics,
            open_list: None,
        }
    }

    /// A slot, or `None` at the limit (unless the oldest connection that
    /// has sent nothing is closed to make room). Only the accept loop
    /// acquires, so load-then-add cannot overshoot (but for the one a
    /// closing connection still holds).
    fn try_acquire(&self) -> Option<Slot> {
        if self.open.load(Ordering::Acquire) >= self.max && !self.close_oldest_silent() {
            return None;
        }
        if self.at_limit.swap(false, Ordering::Relaxed) {
            tracing::info!(listener = self.name, limit = self.max, "below the connection limit again; accepting");
        }
        let Some(list) = &self.open_list else { return Some(Slot::counted(&self.open, None)) };
        let held = Arc::new(Held::default());
        if let Ok(mut list) = list.lock() {
            list.push_back(Arc::downgrade(&held));
        }
        Some(Slot::counted(&self.open, Some(held)))
    }

    /// Tells the oldest open connection that has sent nothing to close;
    /// whether there was one.
    fn close_oldest_silent(&self) -> bool {
        let Some(Ok(mut list)) = self.open_list.as_ref().map(Mutex::lock) else { return false };
        list.retain(|w| w.strong_count() > 0);
        let silent =
            list.iter().position(|w| w.upgrade().is_some_and(|h| h.activity.get().is_some_and(|a| !a.has_read())));
        let Some(held) = silent.and_then(|i| list.remove(i)).and_then(|w| w.upgrade()) else { return false };
        held.close.notify_one();
        tracing::debug!(listener = self.name, "closing the oldest connection that has sent nothing, to make room");
        true
    }

    /// Answers `stream` with the prepared 503 and closes it, in the
    /// background and bounded in time; counts and logs the refusal.
    fn refuse(&self, mut stream: TcpStream, answer: Arc<[u8]>) {
        self.metrics.connection_refused(self.name);
        if !self.at_limit.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                listener = self.name,
                limit = self.max,
                "connection limit reached; refusing new connections with 503"
            );
        }
        if self.refusing.load(Ordering::Acquire) >= MAX_REFUSALS_IN_FLIGHT {
            return; // dropping the stream closes it
        }
        let refusing = Slot::counted(&self.refusing, None);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
                stream.write_all(&answer).await?;
                stream.shutdown().await?;
                // Read what the client sent until it closes, so closing does
                // not reset the connection before it has read the answer.
                let mut sink = [0u8; 4096];
                while stream.read(&mut sink).await? > 0 {}
                Ok::<_, io::Error>(())
            })
            .await;
            drop(refusing);
        });
    }
}
