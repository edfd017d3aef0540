//! When a request may be sent again: only idempotent methods once something
//! was sent, and only within a retry budget.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use http::Method;

use crate::config::validate::MAX_REGIONS;
use crate::routing::RegionId;

/// RFC 9110 §9.2.1 safe methods that a proxy may send to a region that
/// does not own the entity (a failover region): reads. Every write (POST,
/// PUT, PATCH, DELETE) would put data where it does not belong.
pub fn is_safe(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

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

/// A [`RetryBudget`] per region, by its place in the table: the retries a
/// failing region spends are its own, never another region's. One for
/// every place a table may have ([`MAX_REGIONS`], 128 KiB), made at start,
/// so that a request reaches its region's with an index, no lock. A reload
/// that moves regions around moves their budgets with the places, which
/// only lends one region another's recent balance.
#[derive(Debug)]
pub(super) struct RegionBudgets(Box<[RetryBudget]>);

impl Default for RegionBudgets {
    fn default() -> Self {
        RegionBudgets((0..MAX_REGIONS).map(|_| RetryBudget::new()).collect())
    }
}

impl RegionBudgets {
    /// `region`'s budget (a place past the last, which validation never
    /// lets a table have, shares the last).
    pub(super) fn of(&self, region: RegionId) -> &RetryBudget {
        let last = self.0.len() - 1;
        &self.0[usize::from(region.0).min(last)]
    }

    /// Retries refused, every region's.
    pub(super) fn exhausted(&self) -> u64 {
        self.0.iter().map(|b| b.exhausted.load(Ordering::Relaxed)).sum()
    }
}

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
        self.withdraw_at(min_per_second, crate::ids::SystemClock.unix_secs())
    }

    /// [`Self::withdraw`] in the second `now` (Unix seconds).
    fn withdraw_at(&self, min_per_second: u32, now: u64) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotent_methods_are_those_of_rfc_9110() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE] {
            assert!(is_idempotent(&m), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!is_idempotent(&m), "{m}");
        }
    }

    #[test]
    fn the_budget_allows_a_ratio_of_requests_plus_a_reserve_per_second() {
        let b = RetryBudget::new();
        // No reserve and nothing deposited: refused, and counted.
        assert!(!b.withdraw(0));
        assert_eq!(b.exhausted.load(Ordering::Relaxed), 1);
        // Ten requests at 0.2 deposit two retries.
        for _ in 0..10 {
            b.deposit(0.2);
        }
        assert!(b.withdraw(0) && b.withdraw(0));
        assert!(!b.withdraw(0), "a third retry is over the ratio");
        // The reserve allows three a second whatever the balance.
        let b = RetryBudget::new();
        assert!((0..3).all(|_| b.withdraw_at(3, 100)));
        assert!(!b.withdraw_at(3, 100), "a fourth in the same second");
        assert!(b.withdraw_at(3, 101), "a new second, a new reserve");
        // Deposits are capped: a long quiet spell banks at most 1000 retries.
        for _ in 0..20_000 {
            b.deposit(1.0);
        }
        let banked = (0..2000).take_while(|_| b.withdraw(0)).count();
        assert!((1000..=1001).contains(&banked), "{banked}");
        // Ratios outside 0-1 are clamped.
        b.deposit(-5.0);
        assert!(!b.withdraw(0));
    }

    #[test]
    fn each_region_spends_its_own_retries() {
        let budgets = RegionBudgets::default();
        let (eu, kz) = (RegionId(0), RegionId(3));
        for _ in 0..10 {
            budgets.of(eu).deposit(0.2);
        }
        // kz's failures find nothing of eu's to spend.
        assert!(!budgets.of(kz).withdraw(0));
        assert!(budgets.of(eu).withdraw(0) && budgets.of(eu).withdraw(0));
        assert!(!budgets.of(eu).withdraw(0));
        assert_eq!(budgets.exhausted(), 2, "one refusal in each region");
    }
}
