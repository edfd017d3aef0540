//! A connection's timer that is polled only when it needs to be: the idle
//! timeout (`server::until_idle`) and the head-read deadline (`h1`).
//!
//! Such a timer lives across many wake-ups of its task (two a request),
//! and polling it on each, as a `select!` does, is a timer-wheel lookup a
//! time. Once polled it holds the task's waker and wakes the
//! task when due, so between polls whether it fired is an atomic load.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer polled when new, when it has fired, or for a waker it does not
/// hold.
pub(crate) struct Deadline {
    sleep: Pin<Box<Sleep>>,
    /// The waker of its last poll; a different one makes it poll again.
    waker: Option<Waker>,
}

impl Deadline {
    /// A deadline `after` from now.
    pub(crate) fn after(after: Duration) -> Deadline {
        Deadline { sleep: Box::pin(tokio::time::sleep(after)), waker: None }
    }

    /// Moves the deadline to `deadline`. A timer that fired has given its
    /// waker away, so it is polled again; whether it fired is judged by the
    /// clock after the reset, since it may fire on another thread between a
    /// check and the reset (never before its deadline).
    pub(crate) fn reset(&mut self, deadline: Instant) {
        let old = self.sleep.deadline();
        self.sleep.as_mut().reset(deadline);
        if Instant::now() >= old {
            self.waker = None;
        }
    }

    /// Ready once the deadline has passed.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let current = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if current && !self.sleep.is_elapsed() {
            return Poll::Pending;
        }
        if poll_unbudgeted(self.sleep.as_mut(), cx).is_ready() {
            return Poll::Ready(());
        }
        self.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Polls `f` outside the task's cooperative budget. For a wait that is
/// polled once and then only checked: refused for want of budget (when
/// the connection used it up in the same poll), a timer would register
/// neither its waker nor its entry, and not being polled again it would
/// never fire. tokio's own `timeout` polls its timer this way for the same
/// reason.
pub(crate) fn poll_unbudgeted<F: Future + ?Sized>(f: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(&mut tokio::task::unconstrained(f)).poll(cx)
}

/// Spends what is left of the task's cooperative budget (tests of waits
/// whose first poll finds none).
#[cfg(test)]
pub(crate) fn spend_budget(cx: &mut Context<'_>) {
    while let Poll::Ready(restore) = tokio::task::coop::poll_proceed(cx) {
        restore.made_progress();
    }
}
