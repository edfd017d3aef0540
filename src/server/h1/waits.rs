//! The waits a client connection's head read races besides the socket:
//! the head-read deadline, and shutdown while the connection is idle.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::watch;

use crate::server::deadline::{poll_unbudgeted, Deadline};

/// What ends a wait for a request head other than its bytes: the
/// head-read deadline, and shutdown while the connection is idle. Both
/// are made once per connection and, once polled, hold the task's waker,
/// so that between requests they cost a flag read, not a timer poll and a
/// shutdown waiter listed and removed for every head.
pub(super) struct HeadWaits {
    /// One timer per connection, moved forward for each head (moving a
    /// timer later does not touch the timer wheel).
    deadline: Deadline,
    /// Resolves once shutdown has begun (or its sender is gone); `None`
    /// once it has resolved.
    stopping: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The waker `stopping` was last polled with; a different one polls it
    /// again.
    waker: Option<Waker>,
}

/// Why a wait for head bytes ended without any.
pub(super) enum Ended {
    TimedOut,
    Stopping,
}

impl HeadWaits {
    pub(super) fn new(header_read_timeout: Duration, shutdown: &watch::Receiver<bool>) -> HeadWaits {
        let mut rx = shutdown.clone();
        let stopping = async move {
            let _ = rx.wait_for(|stopping| *stopping).await;
        };
        HeadWaits { deadline: Deadline::after(header_read_timeout), stopping: Some(Box::pin(stopping)), waker: None }
    }

    /// Moves the head-read deadline to `deadline`.
    pub(super) fn arm(&mut self, deadline: tokio::time::Instant) {
        self.deadline.reset(deadline);
    }

    /// Whether the deadline has passed, or (`idle`: no byte of a head yet)
    /// shutdown has begun. The shutdown wait is polled when the flag or the
    /// sender says so, or for a waker it does not hold; outside the task's
    /// budget, so that a poll always registers.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>, idle: bool, shutdown: &watch::Receiver<bool>) -> Poll<Ended> {
        if self.deadline.poll(cx).is_ready() {
            return Poll::Ready(Ended::TimedOut);
        }
        let current = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        // The flag is read without polling; a sender that is gone is a stop too.
        if !current || *shutdown.borrow() || shutdown.has_changed().is_err() {
            if let Some(stopping) = self.stopping.as_mut() {
                if poll_unbudgeted(stopping.as_mut(), cx).is_ready() {
                    self.stopping = None;
                }
            }
        }
        if !current {
            self.waker = Some(cx.waker().clone());
        }
        if idle && self.stopping.is_none() {
            return Poll::Ready(Ended::Stopping);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::{timeout, Instant};

    use super::{Ended, HeadWaits};
    use crate::server::deadline::spend_budget;

    /// An idle head wait with a `deadline` away, whose first poll finds
    /// the task's budget spent; ended within 2 s or not at all (`None`).
    async fn wait_polled_first_without_budget(rx: &watch::Receiver<bool>, deadline: Duration) -> Option<Ended> {
        let mut waits = HeadWaits::new(deadline, rx);
        waits.arm(Instant::now() + deadline);
        let mut first = true;
        let wait = std::future::poll_fn(|cx| {
            if std::mem::take(&mut first) {
                spend_budget(cx);
            }
            waits.poll(cx, true, rx)
        });
        timeout(Duration::from_secs(2), wait).await.ok()
    }

    #[tokio::test]
    async fn a_first_wait_polled_without_budget_still_times_out() {
        let (_tx, rx) = watch::channel(false);
        let started = Instant::now();
        let ended = wait_polled_first_without_budget(&rx, Duration::from_millis(50)).await;
        // Woken by the deadline itself, not found fired when something
        // else (here the outer timeout) happens to wake the task.
        assert!(matches!(ended, Some(Ended::TimedOut)), "the head deadline never fired");
        assert!(started.elapsed() < Duration::from_secs(1), "woken late: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn shutdown_ends_an_idle_wait_registered_without_budget() {
        let (tx, rx) = watch::channel(false);
        let wait = wait_polled_first_without_budget(&rx, Duration::from_secs(60));
        let stop = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(true);
        };
        let started = Instant::now();
        let (ended, ()) = tokio::join!(wait, stop);
        assert!(matches!(ended, Some(Ended::Stopping)), "shutdown did not end the wait");
        assert!(started.elapsed() < Duration::from_secs(1), "woken late: {:?}", started.elapsed());
    }
}
