//! Hold: the requests of a placement unit being re-homed, parked before
//! their body is read.
//!
//! While a move of the table (`moves:`) is in `hold`, the writes of its unit
//! (every request with `hold: { requests: all }`) wait here, before the
//! request path reads anything of them: an HTTP/1 body stays in the
//! client's socket, an HTTP/2 one behind flow control. Nothing else waits:
//! a request is located first (the same pure [`locate`] the path runs), and
//! only one whose unit is held is parked.
//!
//! A held request goes on when a table is published that no longer holds
//! its move (the switch, which gives the unit its new owner with a higher
//! epoch; an abort; the move removed), placed by that table, at most
//! `release_rate` a second per move. Bounds, per instance: `max_requests`
//! of a move held at once, and of all moves together at most half the
//! listener's `max_connections` (a held request keeps its client's
//! connection: the rest stay for every other request); more are answered
//! 503 with `Retry-After` ([`ProxyError::HoldFull`]). And `max_time`
//! each: past it this instance gives the move up on its own (the held and
//! every later request of it go to the owner of the running table, still
//! the source) until a table with a new epoch for the unit holds again.
//! A given-up write goes to the source only through the source's
//! gateway, whose table fences it when the unit switched meanwhile; one
//! this instance would hand to the source's backends itself is refused
//! (`Passed::GivenUp`, [`ProxyError::HoldExpired`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::request::Parts;

use super::error::ProxyError;
use super::locate::{self, Plan};
use super::mint::Minters;
use crate::config::schema::MovePhase;
use crate::metrics::Metrics;
use crate::routing::{Loaded, SharedTable};

/// One move on this instance, by unit and epoch.
#[derive(Debug)]
struct Held {
    /// Requests parked now.
    now: usize,
    /// `max_time` passed: this instance gave the move up.
    expired: bool,
    /// When the next released request may go.
    next_release: Instant,
}

/// The moves this instance holds requests for.
#[derive(Debug)]
pub struct Holds {
    moves: Mutex<HashMap<(String, u64), Held>>,
    /// The connections the proxy listener takes (0: the table's
    /// `max_connections`, before the listener has said).
    connections: std::sync::atomic::AtomicUsize,
    /// Told when a move is given up, so every request it holds goes at once.
    given_up: tokio::sync::watch::Sender<u64>,
}

impl Default for Holds {
    fn default() -> Self {
        Holds {
            moves: Mutex::default(),
            connections: std::sync::atomic::AtomicUsize::new(0),
            given_up: tokio::sync::watch::channel(0).0,
        }
    }
}

/// A place among a move's held requests, given back when dropped (also
/// when the client goes away while it waits).
struct Place<'h> {
    holds: &'h Holds,
    key: (String, u64),
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.holds.lock().get_mut(&self.key) {
            held.now = held.now.saturating_sub(1);
        }
    }
}

/// What a request of a held unit finds.
enum Entry {
    /// A place: it waits.
    Held,
    /// This instance gave the move up: it goes on.
    GivenUp,
    /// The move holds `max_requests` already, or all moves together hold
    /// this many: refused.
    Full(usize),
}

/// How a request passed the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Passed {
    /// Its unit was not held, or it waited in no hold.
    Free,
    /// It waited, and goes on placed by the newest table, which no longer
    /// holds its move.
    Released,
    /// This instance gave its unit's move up: the running table, which
    /// still holds the move, places it. Its writes may reach the source
    /// only through a gateway that can fence them.
    GivenUp,
}

/// How a held request's wait ended.
enum Ended {
    /// A table that no longer holds the move: go, placed by it.
    Released(Arc<Loaded>),
    /// `max_time` passed: go to the owner of the running table.
    Expired,
}

impl Holds {
    /// The listener takes `n` connections at once (its `max_connections`,
    /// lowered at start to what the open-file limit allows).
    pub fn listener_takes(&self, n: usize) {
        self.connections.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Most requests all moves hold at once: half the listener's connections.
    fn most(&self, configured: usize) -> usize {
        let taken = self.connections.load(std::sync::atomic::Ordering::Relaxed);
        (if taken == 0 { configured } else { taken } / 2).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), Held>> {
        self.moves.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a place among the move's held requests, unless this instance
    /// gave the move up, it holds `max` already, or all moves together
    /// hold `all`. Moves `table` no longer holds, with nothing held, are
    /// forgotten: one entry per move ever made would pile up.
    fn enter(&self, key: &(String, u64), (max, all): (usize, usize), table: &crate::routing::Table) -> Entry {
        let mut moves = self.lock();
        let holds =
            |k: &(String, u64)| table.moves().any(|m| m.unit == k.0 && m.epoch == k.1 && m.phase == MovePhase::Hold);
        moves.retain(|k, h| h.now > 0 || k == key || holds(k));
        let total: usize = moves.values().map(|h| h.now).sum();
        let held = moves.entry(key.clone()).or_insert(Held { now: 0, expired: false, next_release: Instant::now() });
        if held.expired {
            return Entry::GivenUp;
        }
        if held.now >= max {
            return Entry::Full(max);
        }
        if total >= all {
            return Entry::Full(all);
        }
        held.now += 1;
        Entry::Held
    }

    /// Gives the move up on this instance: its held requests go at once.
    fn give_up(&self, key: &(String, u64)) {
        if let Some(held) = self.lock().get_mut(key) {
            held.expired = true;
        }
        self.given_up.send_modify(|n| *n += 1);
    }

    fn is_given_up(&self, key: &(String, u64)) -> bool {
        self.lock().get(key).is_some_and(|h| h.expired)
    }

    /// When a released request of the move may go, at `rate` a second.
    fn release_at(&self, key: &(String, u64), rate: u32) -> Instant {
        let now = Instant::now();
        let gap = Duration::from_secs(1) / rate.max(1);
        let mut moves = self.lock();
        let Some(held) = moves.get_mut(key) else { return now };
        let at = held.next_release.max(now);
        held.next_release = at + gap;
        at
    }
}

/// A request as a hold sees it: its head, and a gRPC call's first message
/// when its route reads the id there.
pub(super) struct Asked<'a> {
    pub(super) head: &'a Parts,
    pub(super) message: Option<&'a [u8]>,
}

/// Holds `asked`'s request while its unit's move holds it: the table to
/// route it with (`loaded` itself when it is not held) and how it passed,
/// or why it is refused. A request released into a table that holds its
/// unit again (another move of it) waits again.
pub(super) async fn hold(
    table: &SharedTable,
    holds: &Holds,
    metrics: &Metrics,
    minters: &Minters,
    asked: Asked<'_>,
    mut loaded: Arc<Loaded>,
) -> Result<(Arc<Loaded>, Passed), ProxyError> {
    let mut passed = Passed::Free;
    let head = asked.head;
    loop {
        let Ok(Plan::One(located)) = locate::locate(&loaded.table, head, asked.message, minters, false) else {
            return Ok((loaded, passed));
        };
        let (rule, region) = (located.placement.rule, located.placement.region);
        let upgrading = crate::server::upgrade::ClientUpgrade::asked(&head.extensions);
        let writes = !super::only_reads(&head.method, upgrading);
        let held = loaded.table.move_of(rule, region).filter(|m| m.phase == MovePhase::Hold && (m.hold_all || writes));
        let Some(m) = held else { return Ok((loaded, passed)) };
        let key = (m.unit.clone(), m.epoch);
        let (max_time, rate) = (m.max_time, m.release_rate);
        let all = holds.most(loaded.table.settings().restart.max_connections);
        let place = match holds.enter(&key, (m.max_requests, all), &loaded.table) {
            Entry::Held => Place { holds, key },
            Entry::GivenUp => return Ok((loaded, Passed::GivenUp)),
            Entry::Full(max) => {
                metrics.moved(&key.0, "refused");
                return Err(ProxyError::HoldFull { unit: key.0, max });
            }
        };
        metrics.moved(&place.key.0, "held");
        let started = Instant::now();
        let ended = wait(table, holds, &place.key, started + max_time).await;
        metrics.held_for(&place.key.0, started.elapsed());
        match ended {
            Ended::Released(next) => {
                tokio::time::sleep_until(holds.release_at(&place.key, rate).into()).await;
                let key = &place.key;
                let switched =
                    next.table.moves().any(|n| n.unit == key.0 && n.epoch > key.1 && n.phase == MovePhase::Switch);
                metrics.moved(&key.0, if switched { "released" } else { "aborted" });
            }
            Ended::Expired => {
                metrics.moved(&place.key.0, "expired");
                if !holds.is_given_up(&place.key) {
                    tracing::warn!(unit = %place.key.0, epoch = place.key.1, ?max_time,
                        "a held request waited max_time: this instance gives the move up");
                    holds.give_up(&place.key);
                }
            }
        }
        drop(place);
        passed = Passed::Released;
        // The newest table: a release paced behind others may find a later one.
        loaded = table.snapshot();
    }
}

/// Waits for a table that does not hold the move `key`, for the move to
/// be given up on this instance, or for `deadline`. Both receivers are
/// subscribed before the first look, so no change falls between.
async fn wait(table: &SharedTable, holds: &Holds, key: &(String, u64), deadline: Instant) -> Ended {
    let (mut changes, mut given_up) = (table.changes(), holds.given_up.subscribe());
    loop {
        if holds.is_given_up(key) {
            return Ended::Expired;
        }
        let now = table.snapshot();
        let still = now.table.moves().any(|m| m.unit == key.0 && m.epoch == key.1 && m.phase == MovePhase::Hold);
        if !still {
            return Ended::Released(now);
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return Ended::Expired },
            _ = given_up.changed() => {}
            () = tokio::time::sleep_until(deadline.into()) => return Ended::Expired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(epoch: u64) -> Result<crate::routing::Table, crate::config::ConfigErrors> {
        let text = format!(
            "version: 1\nregions:\n  eu: {{ upstreams: [\"http://10.0.0.1:80\"] }}\n  kz: {{ upstreams: [\"http://10.0.0.2:80\"] }}\n\
             countries:\n  KZ: {{ id: 7, region: kz }}\n\
             moves:\n  - {{ unit: \"country KZ\", to: eu, phase: hold, epoch: {epoch} }}\nroutes: []\n"
        );
        Ok(crate::routing::Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    #[test]
    fn moves_no_table_holds_are_forgotten_once_nothing_of_them_is_held() -> Result<(), crate::config::ConfigErrors> {
        let holds = Holds::default();
        let (first, second) = (("country KZ".to_string(), 1), ("country KZ".to_string(), 2));
        assert!(matches!(holds.enter(&first, (10, 10), &holding(1)?), Entry::Held));
        // Still holding a request: kept, though the table moved on.
        assert!(matches!(holds.enter(&second, (10, 10), &holding(2)?), Entry::Held));
        assert_eq!(holds.lock().len(), 2);
        if let Some(h) = holds.lock().get_mut(&first) {
            h.now = 0;
        }
        assert!(matches!(holds.enter(&second, (10, 10), &holding(2)?), Entry::Held));
        assert_eq!(holds.lock().keys().collect::<Vec<_>>(), [&second]);
        Ok(())
    }
}
