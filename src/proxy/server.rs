//! Server: the accept loop, one path for plain and TLS connections.
//! HTTP/1.1 and h2c (prior knowledge) on one port, or TLS with ALPN h2 and
//! http/1.1 (`server.tls`), upgrades allowed, every connection watched for
//! graceful shutdown and idleness. A connection whose first bytes are the
//! HTTP/2 preface is served by hyper; any other by the proxy's own
//! HTTP/1.1 server (`h1`). Each request reaches [`Proxy::handle`]
//! with its connection's [`ConnInfo`]. The listener and the shutdown signal
//! are passed in, so tests bind port 0. The `Acceptor` (limit, refusal,
//! back-off) is shared with the admin listener.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub use super::conn::{ConnInfo, ServerOptions};
use super::deadline::Deadline;
use super::error::ProxyError;
use super::upgrade::{ClientIo, Rewound};
use super::Proxy;
use crate::tls::ServerTls;
use crate::upstream::RequestBody;

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
    let refusal: Arc<[u8]> = super::error::problem_http1_bytes(&refused, proxy.name()).into();
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
    async fn run(self, stream: TcpStream, tls: Option<(tokio_rustls::TlsAcceptor, bool)>) {
        let stream = Watched::new(stream);
        let activity = Arc::clone(&stream.activity);
        let Some((acceptor, client_auth)) = tls else {
            let info = ConnInfo::plain(self.peer);
            return self.serve(stream, info, &activity).await;
        };
        let peer = self.peer;
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

/// How many times per idle period [`until_idle`] looks at a connection:
/// one bytes moved on is closed at most this fraction of the period late.
const LOOKS_PER_IDLE: u32 = 8;

/// Drives `conn` to its end, or until no byte has moved for
/// `opts.idle_timeout` (noticed within an eighth of it: every connection
/// is looked at eight times per period, before its first byte per the
/// shorter of the two timeouts), or, on a connection that has sent nothing
/// yet, for `opts.header_read_timeout` (a socket that never speaks is a
/// slowloris too).
pub(crate) async fn until_idle<E: std::fmt::Display>(
    conn: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    opts: ServerOptions,
    peer: SocketAddr,
) {
    tokio::pin!(conn);
    // When bytes last moved, as far as the looks tell: at most one look late.
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        if activity.take_moved() {
            quiet_since = now;
        }
        let quiet = now.saturating_duration_since(quiet_since);
        let idle = if activity.has_read() { opts.idle_timeout } else { opts.header_read_timeout };
        if quiet >= idle {
            tracing::debug!(%peer, ?idle, "closing an idle connection (server.idle_timeout, or header_read_timeout before any byte)");
            return;
        }
        // Before the first byte too at most an eighth of `idle_timeout`
        // apart, so that a first byte is seen that soon after it came.
        let look = (idle.min(opts.idle_timeout) / LOOKS_PER_IDLE).max(Duration::from_millis(1));
        let mut deadline = Deadline::after((idle - quiet).min(look));
        let ended = std::future::poll_fn(|cx| {
            if let Poll::Ready(ended) = conn.as_mut().poll(cx) {
                return Poll::Ready(Some(ended));
            }
            deadline.poll(cx).map(|()| None)
        })
        .await;
        if let Some(ended) = ended {
            if let Err(e) = ended {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            return;
        }
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
}

/// One open connection's place under the limit; released when dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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
        }
    }

    /// A slot, or `None` at the limit. Only the accept loop acquires, so
    /// load-then-add cannot overshoot.
    fn try_acquire(&self) -> Option<Slot> {
        if self.open.load(Ordering::Acquire) >= self.max {
            return None;
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        if self.at_limit.swap(false, Ordering::Relaxed) {
            tracing::info!(listener = self.name, limit = self.max, "below the connection limit again; accepting");
        }
        Some(Slot(Arc::clone(&self.open)))
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
        let refusing = Slot({
            self.refusing.fetch_add(1, Ordering::AcqRel);
            Arc::clone(&self.refusing)
        });
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

/// Whether bytes have moved on a connection since the idle watch
/// ([`until_idle`]) last looked, and whether the client has sent any yet.
///
/// A flag, not a time: the socket is read and written several times a
/// request, and a clock read on each was two of the thirteen a proxied
/// request made (~25 ns each on this VM's clock). The watch reads the
/// clock itself, when it wakes.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    moved: AtomicBool,
    read_any: AtomicBool,
}

impl Activity {
    fn touch(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// Whether bytes moved since the last call.
    fn take_moved(&self) -> bool {
        self.moved.swap(false, Ordering::Relaxed)
    }

    /// Whether the client has sent a byte.
    fn has_read(&self) -> bool {
        self.read_any.load(Ordering::Relaxed)
    }
}

/// A client socket that records its activity (bytes read or written) for
/// the idle timeout.
#[derive(Debug)]
pub(crate) struct Watched<S> {
    io: S,
    pub(crate) activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(crate) fn new(io: S) -> Watched<S> {
        Watched { io, activity: Arc::new(Activity::default()) }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
            self.activity.read_any.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::Ordering;
    use std::task::Poll;
    use std::time::{Duration, Instant};

    use super::{until_idle, ServerOptions, Watched};
    use crate::proxy::deadline::spend_budget;

    #[tokio::test]
    async fn the_idle_timer_fires_when_its_first_poll_had_no_budget() {
        let activity = Watched::new(()).activity;
        let opts = ServerOptions { header_read_timeout: Duration::from_millis(50), ..ServerOptions::default() };
        // A connection that, on its first poll, uses up the task's budget.
        let mut first = true;
        let conn = std::future::poll_fn(|cx| {
            if std::mem::take(&mut first) {
                spend_budget(cx);
            }
            Poll::<Result<(), String>>::Pending
        });
        let started = Instant::now();
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let ended = tokio::time::timeout(Duration::from_secs(2), until_idle(conn, &activity, opts, peer)).await;
        assert!(ended.is_ok(), "the connection was never closed as idle");
        assert!(started.elapsed() < Duration::from_secs(1), "closed late: {:?}", started.elapsed());
    }

    /// On tokio's paused clock: when `until_idle` closes a connection whose
    /// client sends a byte at each of `bytes_at` (from the start) and then
    /// nothing; asserted to be no earlier than `idle_timeout` after the
    /// last byte and at most one look later.
    async fn closed_after(opts: ServerOptions, bytes_at: &[Duration]) -> Duration {
        let activity = Watched::new(()).activity;
        let start = tokio::time::Instant::now();
        let conn = async {
            for at in bytes_at {
                tokio::time::sleep_until(start + *at).await;
                activity.touch();
                activity.read_any.store(true, Ordering::Relaxed);
            }
            std::future::pending::<Result<(), String>>().await
        };
        until_idle(conn, &activity, opts, SocketAddr::from(([127, 0, 0, 1], 1))).await;
        let closed = start.elapsed();
        let (idle, last) = (opts.idle_timeout, bytes_at.last().copied().unwrap_or_default());
        assert!(closed >= last + idle, "closed {closed:?} in, before idle_timeout of quiet");
        assert!(closed <= last + idle + idle / super::LOOKS_PER_IDLE, "closed {closed:?} in, more than a look late");
        closed
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_closed_idle_timeout_after_its_last_bytes_at_most_a_look_late() {
        // Bytes every 300 ms for 3 s (the last at 2.7 s), then never.
        let opts = ServerOptions { idle_timeout: Duration::from_millis(800), ..ServerOptions::default() };
        let bytes: Vec<Duration> = (0..10).map(|i| Duration::from_millis(300 * i)).collect();
        closed_after(opts, &bytes).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_byte_is_seen_within_a_look_of_idle_timeout_when_it_is_the_shorter() {
        // One byte at 100 ms, then nothing; idle_timeout the shorter timeout.
        let idle = Duration::from_secs(1);
        let opts =
            ServerOptions { idle_timeout: idle, header_read_timeout: Duration::from_secs(10), ..Default::default() };
        closed_after(opts, &[Duration::from_millis(100)]).await;
    }
}
