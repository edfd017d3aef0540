//! The accept loop's half that every listener shares: a connection limit,
//! the answer for connections beyond it (or, for the admin listener, the
//! oldest silent connection closed to make room), and a back-off for
//! failing accepts.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::idle::Activity;

/// Refusals being written at once; past it a refused connection is just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;
/// How long writing a refusal (and draining the client's first bytes) may take.
pub(crate) const REFUSAL_TIMEOUT: Duration = Duration::from_millis(500);

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
            // Closed connections leave the list as they are met, and all
            // at once when they outnumber the limit: it stays near it.
            while list.front().is_some_and(|w| w.strong_count() == 0) {
                list.pop_front();
            }
            if list.len() >= 2 * self.max {
                list.retain(|w| w.strong_count() > 0);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_of_open_connections_forgets_closed_ones() {
        let mut limit = Limit::new("admin", 4, Arc::new(crate::metrics::Metrics::new()));
        limit.open_list = Some(Mutex::new(VecDeque::new()));
        let len = |l: &Limit| l.open_list.as_ref().and_then(|m| m.lock().ok()).map_or(0, |l| l.len());
        // A connection that stays open while thousands come and go.
        let kept = limit.try_acquire();
        assert!(kept.is_some());
        for _ in 0..10_000 {
            drop(limit.try_acquire());
        }
        assert!(len(&limit) <= 2 * 4 + 1, "{} entries for one open connection", len(&limit));
        drop(kept);
    }
}
