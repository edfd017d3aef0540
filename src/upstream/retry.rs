//! When a request may be sent again: only idempotent methods once something
//! was sent, and only within a retry budget.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use http::Method;

/// RFC 9110 §9.2.2 idempotent methods.
pub fn is_idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

/// A retry budget in the style of Finagle and Linkerd: every request
/// deposits `ratio` of a retry, every retry withdraws one; in addition
/// `min_per_second` retries are always allowed each second. It keeps
/// retries from multiplying load when an upstream is failing.
#[derive(Debug)]
pub(super) struct RetryBudget {
    /// Balance in thousandths of a retry, capped.
    milli_tokens: AtomicI64,
    /// The current second (Unix) and retries spent from its free reserve.
    second: AtomicU64,
    reserve_used: AtomicU64,
    pub(super) exhausted: AtomicU64,
}

const BUDGET_CAP: i64 = 1_000_000; // at most 1000 banked retries

impl RetryBudget {
    pub(super) fn new() -> Self {
        RetryBudget {
            milli_tokens: AtomicI64::new(0),
            second: AtomicU64::new(0),
            reserve_used: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    pub(super) fn deposit(&self, ratio: f64) {
        let add = (ratio.clamp(0.0, 1.0) * 1000.0) as i64;
        if add > 0 && self.milli_tokens.load(Ordering::Relaxed) < BUDGET_CAP {
            self.milli_tokens.fetch_add(add, Ordering::Relaxed);
        }
    }

    pub(super) fn withdraw(&self, min_per_second: u32) -> bool {
        let now = crate::ids::SystemClock.unix_secs();
        if self.second.swap(now, Ordering::Relaxed) != now {
            self.reserve_used.store(0, Ordering::Relaxed);
        }
        if self.reserve_used.fetch_add(1, Ordering::Relaxed) < u64::from(min_per_second) {
            return true;
        }
        if self.milli_tokens.fetch_sub(1000, Ordering::Relaxed) >= 1000 {
            return true;
        }
        self.milli_tokens.fetch_add(1000, Ordering::Relaxed);
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        false
    }
}
