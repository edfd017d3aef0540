//! The idle watch of a connection: whether bytes have moved on it
//! (`Watched`, `Activity`), and a connection driven until it ends, sits
//! idle too long, or takes what is sent to it too slowly (`until_idle`).
//! The accept loop, the admin listener and the tunnels share it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::conn::ServerOptions;
use super::deadline::Deadline;

/// How many times per idle period [`until_idle`] looks at a connection:
/// one bytes moved on is closed at most this fraction of the period late.
const LOOKS_PER_IDLE: u32 = 8;

/// Drives `conn` to its end, or until no byte has moved for
/// `opts.idle_timeout` (noticed within an eighth of it: every connection
/// is looked at eight times per period, before its first byte per the
/// shorter of the two timeouts), or, on a connection that has sent nothing
/// yet, for `opts.header_read_timeout` (a socket that never speaks is a
/// slowloris too), or until it has taken less than `opts.answer_min_rate`
/// ([`Behind`]) over a whole `idle_timeout` while a write to it waited.
pub(crate) async fn until_idle<E: std::fmt::Display>(
    conn: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    opts: ServerOptions,
    peer: SocketAddr,
) {
    tokio::pin!(conn);
    // When bytes last moved, as far as the looks tell: at most one look late.
    let mut quiet_since = tokio::time::Instant::now();
    let mut behind = Behind::default();
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
        if behind.look(activity, now, opts) {
            tracing::debug!(%peer, rate = opts.answer_min_rate, "closing a connection that takes what is sent to it too slowly (server.answer_min_rate)");
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

/// What the looks of [`until_idle`] saw of a client that a write waits for:
/// since when a write waited at every look, and how many bytes the client
/// had taken by then.
#[derive(Debug, Default)]
struct Behind {
    since: Option<(tokio::time::Instant, u64)>,
}

impl Behind {
    /// Whether the client is behind: over a whole `idle_timeout` (or up to
    /// a look more) a write to it waited at every look, and it took fewer
    /// bytes than `answer_min_rate` a second of it. A client waiting on the
    /// proxy (an upstream still answering) has no write waiting, and is
    /// never behind. What the client sends does not count: an HTTP/2
    /// client could send frames at the rate while it reads nothing, and
    /// the HTTP/1.1 server reads nothing while it writes an answer.
    fn look(&mut self, activity: &Activity, now: tokio::time::Instant, opts: ServerOptions) -> bool {
        if opts.answer_min_rate == 0 || !activity.write_waits.load(Ordering::Relaxed) {
            self.since = None;
            return false;
        }
        let taken = activity.written.load(Ordering::Relaxed);
        let Some((since, then)) = self.since else {
            self.since = Some((now, taken));
            return false;
        };
        let over = now.saturating_duration_since(since);
        if over < opts.idle_timeout {
            return false;
        }
        let owed = opts.answer_min_rate as f64 * over.as_secs_f64();
        if (taken.saturating_sub(then) as f64) < owed {
            return true;
        }
        self.since = Some((now, taken));
        false
    }
}

/// Whether bytes have moved on a connection since the idle watch
/// ([`until_idle`]) last looked, whether the client has sent any yet, how
/// many it has taken, and whether a write to it waits.
///
/// A flag, not a time: the socket is read and written several times a
/// request, and a clock read on each was two of the thirteen a proxied
/// request made (~25 ns each on this VM's clock). The watch reads the
/// clock itself, when it wakes.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    moved: AtomicBool,
    read_any: AtomicBool,
    /// Bytes written to the client.
    written: AtomicU64,
    /// Whether the last write found the client's socket full.
    write_waits: AtomicBool,
}

impl Activity {
    fn touch(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// What a write to the client came to.
    fn wrote(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) => {
                if *n > 0 {
                    self.touch();
                    self.written.fetch_add(*n as u64, Ordering::Relaxed);
                }
                self.write_waits.store(false, Ordering::Relaxed);
            }
            Poll::Ready(Err(_)) => self.write_waits.store(false, Ordering::Relaxed),
            Poll::Pending => self.write_waits.store(true, Ordering::Relaxed),
        }
    }

    /// Whether bytes moved since the last call.
    fn take_moved(&self) -> bool {
        self.moved.swap(false, Ordering::Relaxed)
    }

    /// Whether the client has sent a byte.
    pub(crate) fn has_read(&self) -> bool {
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
        self.activity.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.activity.wrote(&polled);
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

    use super::{until_idle, Activity, Behind, ServerOptions, Watched};
    use crate::server::deadline::spend_budget;

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

    #[test]
    fn a_client_is_behind_only_when_a_write_waited_a_whole_period_and_too_few_bytes_moved() {
        let opts = ServerOptions { idle_timeout: Duration::from_secs(8), answer_min_rate: 1000, ..Default::default() };
        let (activity, mut behind) = (Activity::default(), Behind::default());
        let start = tokio::time::Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        // No write waits (the client waits on an upstream): never behind.
        assert!(!behind.look(&activity, at(100), opts));
        activity.write_waits.store(true, Ordering::Relaxed);
        // It takes 2,000 bytes a second: not behind.
        for s in 0..=16 {
            assert!(!behind.look(&activity, at(100 + s), opts), "behind at {s} s");
            activity.written.fetch_add(2000, Ordering::Relaxed);
        }
        // 500 a second: behind once a whole period has passed.
        let behind_at = (17..40).find(|&s| {
            activity.written.fetch_add(500, Ordering::Relaxed);
            behind.look(&activity, at(100 + s), opts)
        });
        assert!(behind_at.is_some_and(|s| (24..=26).contains(&s)), "behind at {behind_at:?}");
        // A write that stops waiting starts the count again.
        activity.write_waits.store(false, Ordering::Relaxed);
        assert!(!behind.look(&activity, at(200), opts));
        activity.write_waits.store(true, Ordering::Relaxed);
        assert!(!behind.look(&activity, at(201), opts));
    }
}
