//! The waits a client connection's head read races besides the socket:
//! the head-read deadline, and shutdown while the connection is idle.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::watch;

/// What ends a wait for a request head other than its bytes: the
/// head-read deadline, and shutdown while the connection is idle. Both
/// are made once per connection and stay registered with the task's
/// waker, so that between requests they cost a clock-free check, not a
/// timer poll and a shutdown waiter listed and removed for every head
/// (~500 instructions a request: callgrind).
pub(super) struct HeadWaits {
    /// One timer per connection, moved forward for each head (moving a
    /// timer later does not touch the timer wheel).
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Resolves once shutdown has begun (or its sender is gone); `None`
    /// once it has.
    stopping: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The waker both were last polled with; another one polls them again.
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
        HeadWaits {
            timer: Box::pin(tokio::time::sleep(header_read_timeout)),
            stopping: Some(Box::pin(stopping)),
            waker: None,
        }
    }

    /// Moves the deadline to `deadline`. A timer that fired has given its
    /// waker away: it is polled again.
    pub(super) fn arm(&mut self, deadline: tokio::time::Instant) {
        if self.timer.is_elapsed() {
            self.waker = None;
        }
        self.timer.as_mut().reset(deadline);
    }

    /// Whether the deadline has passed, or (`idle`: no byte of a head yet)
    /// shutdown has begun. Each is polled only when it fired or when the
    /// task's waker is not the one it holds.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>, idle: bool, shutdown: &watch::Receiver<bool>) -> Poll<Ended> {
        let current = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if (!current || self.timer.is_elapsed()) && self.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::TimedOut);
        }
        // The flag is read without polling; a sender that is gone is a stop too.
        if !current || *shutdown.borrow() || shutdown.has_changed().is_err() {
            if let Some(stopping) = self.stopping.as_mut() {
                if stopping.as_mut().poll(cx).is_ready() {
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
