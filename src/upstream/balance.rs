//! Which of a region's backends a request goes to (`balance`):
//!
//! * `round_robin`: each in turn;
//! * `weighted`: each in turn, as many times in a row as its weight, so
//!   over any whole turn each gets exactly its share;
//! * `least_request`: two picked at random, the one with fewer requests
//!   waiting for their answer's head taken (the power of two choices: close
//!   to the least loaded at the cost of two reads, and never every request
//!   piling onto one that just went idle).
//!
//! Whatever the policy, an endpoint the request tried already or that
//! health does not admit is passed over for the next in turn.
//!
//! Why not tower's `balance`: it balances `Service`s, each polled ready
//! before a request is sent, with its own load measure; here an attempt
//! picks an endpoint from the table's slice, takes a pooled connection and
//! runs the exchange on the request's own task. Counted with the same
//! endpoints and the same policy (`benches/balance_instructions.sh`), a
//! decision here is about 185 instructions, through tower's `p2c::Balance`
//! over `PendingRequests` about 1,400: some 5% of a whole proxied request
//! more, for the same choice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::Rng;

use super::health::{Admit, Health};
use crate::config::model::Balance;
use crate::routing::Upstream;

/// A region's backends as a request may pick among them.
#[derive(Clone, Copy, Debug)]
pub struct Candidates<'e> {
    /// The endpoints.
    pub endpoints: &'e [Upstream],
    /// Their weights (`weighted`); empty: 1 each.
    pub weights: &'e [u32],
    /// Requests each has waiting for an answer (`least_request`); empty: not counted.
    pub loads: &'e [Arc<AtomicUsize>],
    /// The policy.
    pub balance: Balance,
    /// The region's round-robin turn (`round_robin`, `weighted`).
    pub turn: &'e AtomicUsize,
}

/// The endpoint a request goes to, with its position and its admission;
/// `None` when every one was tried or is not admitted.
pub fn pick<'e>(c: Candidates<'e>, tried: &[&str], health: &Health) -> Option<(usize, &'e Upstream, Admit)> {
    let n = c.endpoints.len();
    if n == 0 {
        return None;
    }
    let admit = |i: usize| -> Option<(usize, &'e Upstream, Admit)> {
        let e = &c.endpoints[i];
        if tried.contains(&&*e.pool_key) {
            return None;
        }
        match health.admit(&e.pool_key) {
            Admit::No => None,
            admit => Some((i, e, admit)),
        }
    };
    let start = match c.balance {
        Balance::RoundRobin => c.turn.fetch_add(1, Ordering::Relaxed) % n,
        Balance::Weighted => weighted_start(c.weights, c.turn.fetch_add(1, Ordering::Relaxed)).min(n - 1),
        Balance::LeastRequest if n > 1 && c.loads.len() == n => {
            let mut rng = rand::rng();
            let a = rng.random_range(0..n);
            let b = (a + 1 + rng.random_range(0..n - 1)) % n;
            let load = |i: usize| c.loads[i].load(Ordering::Relaxed);
            let (first, second) = if load(b) < load(a) { (b, a) } else { (a, b) };
            if let Some(found) = admit(first).or_else(|| admit(second)) {
                return Some(found);
            }
            first
        }
        Balance::LeastRequest => 0,
    };
    (0..n).find_map(|i| admit((start + i) % n))
}

/// The position turn `turn` starts at under `weights`: each endpoint as
/// many turns in a row as its weight.
fn weighted_start(weights: &[u32], turn: usize) -> usize {
    let total: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    if total == 0 {
        return 0;
    }
    let mut at = turn as u64 % total;
    for (i, &w) in weights.iter().enumerate() {
        let w = u64::from(w.max(1));
        if at < w {
            return i;
        }
        at -= w;
    }
    0
}

/// One request waiting on an endpoint's answer, counted in its load while held.
#[derive(Debug)]
pub struct Waiting<'e>(Option<&'e AtomicUsize>);

impl<'e> Waiting<'e> {
    /// Counts one more request at `load` (nothing when `None`).
    pub fn on(load: Option<&'e AtomicUsize>) -> Waiting<'e> {
        if let Some(l) = load {
            l.fetch_add(1, Ordering::Relaxed);
        }
        Waiting(load)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.0 {
            l.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_turns_give_each_endpoint_its_weight() {
        let weights = [3, 1, 2];
        let mut counts = [0; 3];
        for turn in 0..600 {
            counts[weighted_start(&weights, turn)] += 1;
        }
        assert_eq!(counts, [300, 100, 200]);
    }
}
