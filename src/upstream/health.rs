//! Health of every upstream endpoint and peer: active checks (a GET of a
//! path at an interval, with rise/fall thresholds) and passive ejection
//! (consecutive failures of the upstream's own making take an endpoint out
//! for `eject_for`). An endpoint that is down or ejected receives no traffic.
//!
//! An ejected endpoint does not come back on a timer alone: once `eject_for`
//! has passed it is re-admitted by a successful active check or, with active
//! checks off (`interval: 0s`), by one successful trial request (half-open);
//! a failed trial ejects it again. Turning active checks off also brings
//! back the endpoints they held down, since nothing would check them again.
//!
//! State is keyed by the endpoint's connection key ([`Upstream::pool_key`]:
//! its URL, and for an address found by DNS the name it was found by), so
//! two names on one address (two virtual hosts behind one balancer, each
//! region's) keep health apart: one failing leaves the other in service.
//! It survives table reloads; the map is replaced (never locked) when the
//! table names new endpoints or no longer names old ones (a reload, an
//! address DNS dropped). An endpoint no table names is forgotten at once
//! when it is healthy (it has nothing to keep),
//! else [`FORGET_AFTER`] later: an address that comes back within that
//! time (a DNS answer that named only some of a name's addresses) keeps
//! the state it went with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::connect::Connector;
use crate::routing::shared::SharedTable;
use crate::routing::{RegionId, Upstream};

/// One endpoint's health.
#[derive(Debug)]
pub struct EndpointState {
    /// Region name (for reports), as of the table that added the endpoint.
    pub region: String,
    /// The endpoint, as reports name it ([`Upstream::shown`]).
    pub endpoint: String,
    up: AtomicBool,
    streak_ok: AtomicU32,
    streak_fail: AtomicU32,
    passive_failures: AtomicU32,
    ejected_until_ms: AtomicU64,
    /// Ejected and not yet re-admitted (by a check or a trial request).
    held: AtomicBool,
    /// A half-open trial request is in flight.
    trial: AtomicBool,
}

impl EndpointState {
    fn new(region: &str, endpoint: String) -> Self {
        EndpointState {
            region: region.to_string(),
            endpoint,
            up: AtomicBool::new(true),
            streak_ok: AtomicU32::new(0),
            streak_fail: AtomicU32::new(0),
            passive_failures: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            held: AtomicBool::new(false),
            trial: AtomicBool::new(false),
        }
    }

    /// Whether passive ejection holds it out (ejected and not re-admitted yet).
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether the active checks say up.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether passive ejection holds it out at `now_ms` (milliseconds on
    /// this module's monotonic clock, from the process's first reading).
    pub fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms
    }

    /// Up, not held, no passive failure and no failed check counted:
    /// nothing worth keeping.
    fn is_clean(&self) -> bool {
        self.is_up()
            && !self.is_held()
            && self.passive_failures.load(Ordering::Relaxed) == 0
            && self.streak_fail.load(Ordering::Relaxed) == 0
    }
}

/// How long the state of an endpoint that is down, ejected or failing is
/// kept after the table stopped naming it.
pub const FORGET_AFTER: Duration = Duration::from_secs(300);

/// Endpoint states by [`Upstream::pool_key`]. Looked up several times per
/// request, so hashed with FxHash (the keys come from the operator's table
/// and its names' DNS answers, not from clients).
type EndpointMap = HashMap<Arc<str>, Arc<EndpointState>, rustc_hash::FxBuildHasher>;

/// Health of all endpoints.
///
/// Most of the time every endpoint is fine, so three counters, changed only
/// on state transitions, let [`Health::usable`] and [`Health::record`] skip
/// the per-endpoint lookup (hashing its key) until something goes wrong. They
/// are exact, not estimates: each counter moves on the atomic transition it
/// counts, and a state leaves the map only after its transitions back to
/// clean are counted (`Health::settle`).
pub struct Health {
    states: ArcSwap<EndpointMap>,
    /// Endpoints kept after the table stopped naming them, and since when.
    unnamed: std::sync::Mutex<HashMap<Arc<str>, Instant>>,
    /// Endpoints the active checks hold down.
    down: AtomicU32,
    /// Endpoints with passive failures counted and not yet cleared.
    failing: AtomicU32,
    /// Endpoints ejected and not yet re-admitted.
    held: AtomicU32,
    /// Whether active checks run (set by the checker every round): held
    /// endpoints then wait for a successful check; without them, for a
    /// successful trial request.
    active: AtomicBool,
}

/// Whether a request may go to an endpoint now ([`Health::admit`]).
#[derive(Debug)]
pub enum Admit {
    /// No: it is down, ejected, or another trial request is in flight.
    No,
    /// Yes.
    Yes,
    /// Yes, as the one trial request of a half-open endpoint; its outcome
    /// ([`Health::record`]) re-admits or ejects it again. Dropping the
    /// guard without a verdict frees the trial for another request.
    Trial(TrialGuard),
}

/// The half-open trial slot of one endpoint, held while its trial request runs.
#[derive(Debug)]
pub struct TrialGuard(Arc<EndpointState>);

impl Drop for TrialGuard {
    fn drop(&mut self) {
        self.0.trial.store(false, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("endpoints", &self.states.load().len()).finish()
    }
}

impl Default for Health {
    fn default() -> Self {
        Health {
            states: ArcSwap::from_pointee(EndpointMap::default()),
            unnamed: std::sync::Mutex::default(),
            down: AtomicU32::new(0),
            failing: AtomicU32::new(0),
            held: AtomicU32::new(0),
            active: AtomicBool::new(true),
        }
    }
}

/// Milliseconds on a clock that never steps back (from this process's
/// first call, never 0): an ejection lasts its `eject_for` whatever is done
/// to the wall clock meanwhile.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
}

impl Health {
    /// No endpoint is down or ejected right now, so every one is usable.
    fn all_clear(&self) -> bool {
        self.down.load(Ordering::Relaxed) == 0 && self.held.load(Ordering::Relaxed) == 0
    }

    /// Whether the endpoint `key` ([`Upstream::pool_key`]) may receive
    /// traffic now: up and not ejected, or a half-open endpoint whose trial
    /// slot is free. Unknown endpoints are usable.
    pub fn usable(&self, key: &str) -> bool {
        if self.all_clear() {
            return true;
        }
        match self.states.load().get(key) {
            Some(s) => s.is_up() && (!s.is_held() || self.half_open(s) && !s.trial.load(Ordering::Relaxed)),
            None => true,
        }
    }

    /// Whether a held endpoint may take a trial request: its ejection has
    /// run out and no active check will re-admit it.
    fn half_open(&self, s: &EndpointState) -> bool {
        !self.active.load(Ordering::Relaxed) && !s.is_ejected(now_ms())
    }

    /// Claims the endpoint `key` for one request: [`Admit::Trial`] when it
    /// is the trial request of a half-open endpoint (only one at a time).
    pub fn admit(&self, key: &str) -> Admit {
        if self.all_clear() {
            return Admit::Yes;
        }
        let states = self.states.load();
        let Some(s) = states.get(key) else { return Admit::Yes };
        if !s.is_up() {
            return Admit::No;
        }
        if !s.is_held() {
            return Admit::Yes;
        }
        if self.half_open(s) && !s.trial.swap(true, Ordering::Relaxed) {
            return Admit::Trial(TrialGuard(Arc::clone(s)));
        }
        Admit::No
    }

    /// Every known endpoint: (region, endpoint, up, ejected).
    pub fn report(&self) -> Vec<(String, String, bool, bool)> {
        let mut out: Vec<_> = self
            .states
            .load()
            .values()
            .map(|s| (s.region.clone(), s.endpoint.clone(), s.is_up(), s.is_held()))
            .collect();
        out.sort();
        out
    }

    /// Makes sure every endpoint of the current table has a state.
    pub fn track(&self, shared: &SharedTable) {
        self.track_table(&shared.snapshot().table);
    }

    /// Makes sure every endpoint of `table` has a state, and forgets those
    /// it does not name (see the module doc).
    pub fn track_table(&self, table: &crate::routing::Table) {
        self.track_at(table, Instant::now());
    }

    /// [`Health::track_table`] at `now`.
    fn track_at(&self, table: &crate::routing::Table, now: Instant) {
        let current = self.states.load();
        let mut named: HashMap<&str, (&Upstream, &str)> = HashMap::new();
        for (i, region) in table.regions().iter().enumerate() {
            let peers = table.peers(RegionId(u16::try_from(i).unwrap_or(u16::MAX)));
            for up in region.upstreams.iter().chain(peers) {
                named.entry(&up.pool_key).or_insert((up, &region.name));
            }
        }
        let missing: Vec<_> = named.iter().filter(|(key, _)| !current.contains_key(**key)).map(|(_, v)| v).collect();
        let mut unnamed = self.unnamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        unnamed.retain(|key, _| !named.contains_key(&**key));
        let mut forget = Vec::new();
        for (key, s) in current.iter().filter(|(key, _)| !named.contains_key(&***key)) {
            let since = *unnamed.entry(Arc::clone(key)).or_insert(now);
            if s.is_clean() || now.saturating_duration_since(since) >= FORGET_AFTER {
                forget.push(key);
            }
        }
        if missing.is_empty() && forget.is_empty() {
            return;
        }
        let mut next: EndpointMap = (**current).clone();
        let mut gone = Vec::new();
        for key in forget {
            unnamed.remove(key);
            gone.extend(next.remove(key));
        }
        for (up, region) in missing {
            let state = || Arc::new(EndpointState::new(region, up.shown()));
            next.entry(Arc::clone(&up.pool_key)).or_insert_with(state);
        }
        self.states.store(Arc::new(next));
        // Settled once no new lookup finds them.
        for s in gone {
            self.settle(&s);
        }
    }

    /// Takes a forgotten endpoint's state out of the counters, by the same
    /// transitions that count it back. A request that looked the endpoint
    /// up before it was forgotten may still count a failure on it: the
    /// counter then stays above the truth, which costs lookups, never a
    /// request sent to an endpoint that is out.
    fn settle(&self, s: &EndpointState) {
        if !s.up.swap(true, Ordering::Relaxed) {
            self.down.fetch_sub(1, Ordering::Relaxed);
        }
        if s.held.swap(false, Ordering::Relaxed) {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
        self.clear_failures(s);
    }

    /// Passive health: the outcome of a real request to the endpoint `key`,
    /// judged by what the upstream did (the caller never counts a client's
    /// fault). A failure counts against it; `eject_after` in a row eject it for
    /// `eject_for` (0 disables ejection). The outcome of a half-open trial
    /// (`trial`: the request was admitted as one) re-admits the endpoint or
    /// ejects it again; an ejected endpoint's other requests, sent before it
    /// was ejected, decide nothing.
    pub fn record(&self, key: &str, failed: bool, trial: bool, eject_after: u32, eject_for: Duration) {
        if !failed && self.failing.load(Ordering::Relaxed) == 0 && self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let states = self.states.load();
        let Some(s) = states.get(key) else { return };
        if s.is_held() {
            match (trial, failed) {
                (true, true) => self.eject(s, eject_for, "trial request failed"),
                (true, false) => self.readmit(s, "trial request succeeded"),
                (false, _) => {}
            }
            return;
        }
        if !failed {
            self.clear_failures(s);
            return;
        }
        let n = s.passive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 {
            self.failing.fetch_add(1, Ordering::Relaxed);
        }
        if eject_after > 0 && n >= eject_after {
            self.clear_failures(s);
            self.eject(s, eject_for, "consecutive failures");
        }
    }

    /// Holds `s` out for `eject_for`, and until a check or trial re-admits it.
    fn eject(&self, s: &EndpointState, eject_for: Duration, why: &'static str) {
        let until = now_ms().saturating_add(u64::try_from(eject_for.as_millis()).unwrap_or(u64::MAX));
        s.ejected_until_ms.store(until, Ordering::Relaxed);
        if !s.held.swap(true, Ordering::Relaxed) {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(endpoint = %s.endpoint, region = %s.region, ?eject_for, why, "endpoint ejected");
    }

    /// Lets a held endpoint receive traffic again.
    fn readmit(&self, s: &EndpointState, why: &'static str) {
        if s.held.swap(false, Ordering::Relaxed) {
            self.held.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(endpoint = %s.endpoint, region = %s.region, why, "ejected endpoint re-admitted");
        }
    }

    /// Active checks are off (`interval: 0s`): no check will bring back
    /// what they hold down, so it comes back now (passive ejection and
    /// half-open trials still guard it), and held endpoints wait for a trial
    /// request instead of a check.
    fn checks_off(&self) {
        if !self.active.swap(false, Ordering::Relaxed) {
            return;
        }
        for s in self.states.load().values() {
            s.streak_fail.store(0, Ordering::Relaxed);
            if !s.up.swap(true, Ordering::Relaxed) {
                self.down.fetch_sub(1, Ordering::Relaxed);
                tracing::info!(endpoint = %s.endpoint, region = %s.region, "active checks turned off: endpoint back in service");
            }
        }
    }

    /// Resets an endpoint's passive failure streak.
    fn clear_failures(&self, s: &EndpointState) {
        if s.passive_failures.swap(0, Ordering::Relaxed) != 0 {
            self.failing.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Applies one active check result with rise/fall thresholds. A
    /// successful check re-admits an ejected endpoint whose `eject_for` has
    /// run out.
    fn apply_check(&self, key: &str, ok: bool, rise: u32, fall: u32) {
        let states = self.states.load();
        let Some(s) = states.get(key) else { return };
        if ok && s.is_held() && !s.is_ejected(now_ms()) {
            self.readmit(s, "active check succeeded");
        }
        let changed = if ok {
            s.streak_fail.store(0, Ordering::Relaxed);
            let n = s.streak_ok.fetch_add(1, Ordering::Relaxed) + 1;
            n >= rise.max(1) && !s.up.swap(true, Ordering::Relaxed)
        } else {
            s.streak_ok.store(0, Ordering::Relaxed);
            let n = s.streak_fail.fetch_add(1, Ordering::Relaxed) + 1;
            n >= fall.max(1) && s.up.swap(false, Ordering::Relaxed)
        };
        if changed {
            let up = s.is_up();
            if up {
                self.down.fetch_sub(1, Ordering::Relaxed);
            } else {
                self.down.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(endpoint = %s.endpoint, region = %s.region, up, "endpoint health changed");
        }
    }
}

/// Runs active checks until `health` is dropped, connecting through
/// `connector` (the proxy's own, so `https://` endpoints are checked with
/// the same roots and client certificate). Backends are asked for their
/// region's `health.path`, peers for [`crate::mesh::READY_PATH`]; a 2xx or
/// 3xx answer is a success. Each region is checked at its own interval,
/// with its own timeout and thresholds (`upstream.health`, or the region's
/// `upstream.health`), read from the current table every round, so they
/// reload live; an interval of 0 turns checking off. Each check's result
/// is applied as it comes: a region whose checks wait out a long timeout
/// delays no other region's (an endpoint is not asked again while its last
/// check is still out). A table published (a reload, a name's new addresses)
/// is tracked at once, so its new endpoints' first failures count.
pub fn spawn_checker(health: Weak<Health>, shared: Weak<SharedTable>, connector: Connector) {
    let Some(mut published) = shared.upgrade().map(|s| s.changes()) else { return };
    tokio::spawn(async move {
        // When each region (by name) was last checked.
        let mut last: HashMap<String, Instant> = HashMap::new();
        let mut checks = tokio::task::JoinSet::new();
        // The endpoints with a check out, and each check's, by its task.
        let mut busy = std::collections::HashSet::new();
        let mut out: HashMap<tokio::task::Id, Arc<str>> = HashMap::new();
        loop {
            let (Some(h), Some(shared)) = (health.upgrade(), shared.upgrade()) else { return };
            h.track(&shared);
            let snapshot = shared.snapshot();
            drop(shared);
            let table = &snapshot.table;
            if table.settings().upstream.health.interval.is_zero() {
                // Dropped, the set aborts its checks: none applies after this.
                checks = tokio::task::JoinSet::new();
                busy.clear();
                out.clear();
                h.checks_off();
                drop(h);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = published.changed() => {}
                }
                continue;
            }
            h.active.store(true, Ordering::Relaxed);
            drop(h);
            let now = Instant::now();
            let mut next = now + Duration::from_secs(1);
            for (i, region) in table.regions().iter().enumerate() {
                let id = RegionId(u16::try_from(i).unwrap_or(u16::MAX));
                let cfg = &table.upstream_of(id).health;
                let due = last.get(&region.name).map_or(now, |t| *t + cfg.interval);
                if due > now {
                    next = next.min(due);
                    continue;
                }
                last.insert(region.name.clone(), now);
                next = next.min(now + cfg.interval);
                let peers = table.peers(id).iter().map(|p| (p, crate::mesh::READY_PATH, false));
                let backends = region.upstreams.iter().map(|u| (u, cfg.path.as_str(), cfg.grpc));
                for (up, path, grpc) in backends.chain(peers) {
                    if busy.insert(Arc::clone(&up.pool_key)) {
                        let task =
                            checks.spawn(check(connector.clone(), up, path, grpc, (cfg.timeout, cfg.rise, cfg.fall)));
                        out.insert(task.id(), Arc::clone(&up.pool_key));
                    }
                }
            }
            drop(snapshot);
            // Until the next region is due, each result as it comes.
            let due = tokio::time::sleep_until(next.into());
            tokio::pin!(due);
            loop {
                tokio::select! {
                    () = &mut due => break,
                    Ok(()) = published.changed() => break,
                    Some(done) = checks.join_next_with_id() => {
                        let id = done.as_ref().map_or_else(|e| e.id(), |(id, _)| *id);
                        if let Some(key) = out.remove(&id) {
                            busy.remove(&key);
                        }
                        let Ok((_, (key, ok, rise, fall))) = done else { continue };
                        let Some(h) = health.upgrade() else { return };
                        h.apply_check(&key, ok, rise, fall);
                    }
                }
            }
        }
    });
}

/// One active check of `up` (GET `path`, or the gRPC health service):
/// its key, whether it passed, and the thresholds to apply it with.
fn check(
    connector: Connector,
    up: &Upstream,
    path: &str,
    grpc: bool,
    (timeout, rise, fall): (Duration, u32, u32),
) -> impl std::future::Future<Output = (Arc<str>, bool, u32, u32)> + Send + 'static {
    let key = Arc::clone(&up.pool_key);
    let target = super::connect::upstream_uri(&up.uri, path).ok().map(|uri| super::client::Get {
        uri,
        host: Some(up.host.clone()),
        server_name: up.server_name.clone(),
        grpc,
    });
    async move {
        let ok = match target {
            Some(t) => super::client::get(&connector, t, USER_AGENT, timeout)
                .await
                .is_ok_and(|s| s.is_success() || s.is_redirection()),
            None => false,
        };
        (key, ok, rise, fall)
    }
}

/// The `User-Agent` of health checks (backends may leave them out of their logs).
pub const USER_AGENT: &str = "shardgate-health";

#[cfg(test)]
mod tests {
    use super::*;

    fn health_with(keys: &[&str]) -> Health {
        let h = Health::default();
        let map: EndpointMap =
            keys.iter().map(|k| (Arc::from(*k), Arc::new(EndpointState::new("r", (*k).to_string())))).collect();
        h.states.store(Arc::new(map));
        h
    }

    #[test]
    fn the_fast_path_follows_every_transition() {
        let (a, b) = ("http://10.0.0.1:1", "http://10.0.0.2:1");
        let h = health_with(&[a, b]);
        assert!(h.all_clear() && h.usable(a) && h.usable(b));

        // Down by active checks (fall 2): only `a` is out, and only while down.
        h.apply_check(a, false, 1, 2);
        assert!(h.all_clear(), "one failed check is below the fall threshold");
        h.apply_check(a, false, 1, 2);
        assert!(!h.all_clear() && !h.usable(a) && h.usable(b));
        h.apply_check(a, false, 1, 2);
        assert_eq!(h.down.load(Ordering::Relaxed), 1, "a further failed check changes nothing");
        h.apply_check(a, true, 1, 2);
        assert!(h.all_clear() && h.usable(a));

        // Passive failures: counted once per streak, cleared by a success.
        h.record(b, true, false, 3, Duration::from_secs(60));
        h.record(b, true, false, 3, Duration::from_secs(60));
        assert_eq!(h.failing.load(Ordering::Relaxed), 1);
        h.record(b, false, false, 3, Duration::from_secs(60));
        assert_eq!(h.failing.load(Ordering::Relaxed), 0);

        // Ejection: out for eject_for, the streak cleared.
        for _ in 0..3 {
            h.record(b, true, false, 3, Duration::from_secs(60));
        }
        assert_eq!(h.failing.load(Ordering::Relaxed), 0);
        assert!(!h.all_clear() && !h.usable(b) && h.usable(a));
        // Once the ejection has run out it stays out until a check succeeds.
        expire(&h, b);
        assert!(!h.usable(b) && matches!(h.admit(b), Admit::No), "no re-admission on a timer alone");
        h.apply_check(b, true, 1, 2);
        assert!(h.all_clear() && h.usable(b));
    }

    /// Ends `key`'s ejection period now.
    fn expire(h: &Health, key: &str) {
        if let Some(s) = h.states.load().get(key) {
            s.ejected_until_ms.store(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn without_active_checks_one_trial_request_decides() {
        let a = "http://10.0.0.1:1";
        let h = health_with(&[a]);
        h.checks_off();
        h.record(a, true, false, 1, Duration::from_secs(60));
        assert!(matches!(h.admit(a), Admit::No), "ejected");
        expire(&h, a);
        // One trial at a time.
        let trial = h.admit(a);
        assert!(matches!(trial, Admit::Trial(_)));
        assert!(matches!(h.admit(a), Admit::No) && !h.usable(a));
        // A failed trial ejects it again; a trial dropped without a verdict frees the slot.
        h.record(a, true, true, 1, Duration::from_secs(60));
        drop(trial);
        assert!(matches!(h.admit(a), Admit::No), "ejected again");
        expire(&h, a);
        drop(h.admit(a));
        let trial = h.admit(a);
        assert!(matches!(trial, Admit::Trial(_)));
        // A request sent before the ejection, answered now, decides nothing.
        h.record(a, false, false, 1, Duration::from_secs(60));
        assert!(matches!(h.admit(a), Admit::No) && !h.usable(a), "still out while the trial runs");
        h.record(a, false, true, 1, Duration::from_secs(60));
        drop(trial);
        assert!(h.all_clear() && matches!(h.admit(a), Admit::Yes));
    }

    #[test]
    fn an_ejected_endpoints_requests_sent_before_its_ejection_decide_nothing() {
        let a = "http://10.0.0.1:1";
        let h = health_with(&[a]);
        h.checks_off();
        h.record(a, true, false, 1, Duration::from_secs(60));
        let until = |h: &Health| h.states.load().get(a).map(|s| s.ejected_until_ms.load(Ordering::Relaxed));
        let ejected_until = until(&h);
        // Answered after the ejection: neither back in at once, nor out longer.
        h.record(a, false, false, 1, Duration::from_secs(60));
        assert!(matches!(h.admit(a), Admit::No), "a success that was no trial re-admitted it");
        h.record(a, true, false, 1, Duration::from_secs(3600));
        assert_eq!(until(&h), ejected_until, "a failure that was no trial ejected it again");
        expire(&h, a);
        assert!(matches!(h.admit(a), Admit::Trial(_)));
    }

    #[test]
    fn turning_active_checks_off_brings_endpoints_back() {
        let a = "http://10.0.0.1:1";
        let h = health_with(&[a]);
        h.apply_check(a, false, 1, 1);
        assert!(!h.usable(a));
        h.checks_off();
        assert!(h.all_clear() && h.usable(a), "nothing would ever check it again");
    }

    fn table_of(upstreams: &[&str]) -> Result<crate::routing::Table, crate::config::ConfigErrors> {
        let list = upstreams.iter().map(|u| format!("\"{u}\"")).collect::<Vec<_>>().join(", ");
        let text = format!("version: 1\nregions:\n  eu: {{ upstreams: [{list}] }}\nroutes: []\n");
        Ok(crate::routing::Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    #[test]
    fn endpoints_the_table_stops_naming_are_forgotten_healthy_at_once_else_later(
    ) -> Result<(), crate::config::ConfigErrors> {
        let (a, b, c, d) = ("http://10.0.0.1:80", "http://10.0.0.2:80", "http://10.0.0.3:80", "http://10.0.0.4:80");
        let h = Health::default();
        let t0 = Instant::now();
        h.track_at(&table_of(&[a, b, c, d])?, t0);
        assert_eq!(h.report().len(), 4);
        // a down, b ejected, c one passive failure; then the table names d
        // alone (DNS dropped the others).
        h.apply_check(a, false, 1, 1);
        h.record(b, true, false, 1, Duration::from_secs(60));
        h.record(c, true, false, 3, Duration::from_secs(60));
        let counts = |h: &Health| {
            let n = |c: &AtomicU32| c.load(Ordering::Relaxed);
            (n(&h.down), n(&h.held), n(&h.failing))
        };
        assert_eq!(counts(&h), (1, 1, 1));
        let only_d = table_of(&[d])?;
        h.track_at(&only_d, t0);
        let names = |h: &Health| h.report().into_iter().map(|r| r.1).collect::<Vec<_>>();
        assert_eq!(names(&h).len(), 4, "kept while out");
        // Named again within FORGET_AFTER: the state it went with.
        h.track_at(&table_of(&[a, d])?, t0 + Duration::from_secs(10));
        assert!(!h.usable(a), "a came back healthy");
        h.track_at(&only_d, t0 + Duration::from_secs(20));
        // FORGET_AFTER after they went: b and c are gone, and the counters
        // with them; a, which went again later, is kept a while longer.
        h.track_at(&only_d, t0 + FORGET_AFTER);
        assert_eq!(names(&h), [format!("{a}/"), format!("{d}/")]);
        assert_eq!(counts(&h), (1, 0, 0));
        h.track_at(&only_d, t0 + Duration::from_secs(20) + FORGET_AFTER);
        assert_eq!(names(&h), [format!("{d}/")]);
        assert!(h.all_clear(), "a forgotten endpoint still counts as out");
        // A healthy endpoint the table drops is forgotten at once; one with
        // a failed check below the fall threshold is kept.
        h.track_at(&table_of(&[a, b])?, t0 + Duration::from_secs(400));
        h.apply_check(b, false, 1, 3);
        h.track_at(&table_of(&[a])?, t0 + Duration::from_secs(401));
        assert_eq!(names(&h), [format!("{a}/"), format!("{b}/")]);
        assert!(h.all_clear() && h.usable(a));
        Ok(())
    }
}
