//! Health of every upstream endpoint and peer: active checks (a GET of a
//! path at an interval, with rise/fall thresholds) and passive ejection
//! (consecutive connection failures or 5xx answers take an endpoint out for
//! a while). An endpoint that is down or ejected receives no traffic.
//!
//! State is keyed by endpoint URI and survives table reloads; the map is
//! replaced (never locked) when the table names new endpoints.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::ids::{Clock, SystemClock};
use crate::proxy::forward::Connector;
use crate::routing::shared::SharedTable;

/// One endpoint's health.
#[derive(Debug)]
pub struct EndpointState {
    /// Region name (for reports), as of the table that added the endpoint.
    pub region: String,
    up: AtomicBool,
    streak_ok: AtomicU32,
    streak_fail: AtomicU32,
    passive_failures: AtomicU32,
    ejected_until_ms: AtomicU64,
}

impl EndpointState {
    fn new(region: &str) -> Self {
        EndpointState {
            region: region.to_string(),
            up: AtomicBool::new(true),
            streak_ok: AtomicU32::new(0),
            streak_fail: AtomicU32::new(0),
            passive_failures: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
        }
    }

    /// Whether the active checks say up.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether passive ejection holds it out at `now_ms`.
    pub fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms
    }
}

/// Endpoint states by URI. Looked up several times per request, so hashed
/// with FxHash (the keys come from the operator's table, not from clients).
type EndpointMap = HashMap<Uri, Arc<EndpointState>, rustc_hash::FxBuildHasher>;

/// A change of an endpoint's state, reported to the observer.
pub type Observer = Arc<dyn Fn(&str, &Uri, bool) + Send + Sync>;

/// Health of all endpoints.
///
/// Most of the time every endpoint is fine, so three counters, changed only
/// on state transitions, let [`Health::usable`] and [`Health::record`] skip
/// the per-endpoint lookup (hashing a URI) until something goes wrong. They
/// are exact, not estimates: the map only grows, and each counter moves on
/// the atomic transition it counts.
pub struct Health {
    states: ArcSwap<EndpointMap>,
    observer: Option<Observer>,
    /// Endpoints the active checks hold down.
    down: AtomicU32,
    /// Endpoints with passive failures counted and not yet cleared.
    failing: AtomicU32,
    /// The latest ejection deadline ever set (0: none yet).
    ejected_until_max_ms: AtomicU64,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("endpoints", &self.states.load().len()).finish()
    }
}

impl Default for Health {
    fn default() -> Self {
        Health::new(None)
    }
}

impl Health {
    /// Health state with an observer called on every up/down change
    /// (region, endpoint, up) — the metrics hook.
    pub fn with_observer(observer: Observer) -> Self {
        Health::new(Some(observer))
    }

    fn new(observer: Option<Observer>) -> Self {
        Health {
            states: ArcSwap::from_pointee(EndpointMap::default()),
            observer,
            down: AtomicU32::new(0),
            failing: AtomicU32::new(0),
            ejected_until_max_ms: AtomicU64::new(0),
        }
    }

    /// No endpoint is down or ejected right now, so every one is usable.
    fn all_clear(&self) -> bool {
        if self.down.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let until = self.ejected_until_max_ms.load(Ordering::Relaxed);
        until == 0 || until <= SystemClock.unix_millis()
    }

    /// Whether `uri` may receive traffic now. Unknown endpoints are usable.
    pub fn usable(&self, uri: &Uri) -> bool {
        if self.all_clear() {
            return true;
        }
        match self.states.load().get(uri) {
            Some(s) => s.is_up() && !s.is_ejected(SystemClock.unix_millis()),
            None => true,
        }
    }

    /// Every known endpoint: (region, uri, up, ejected).
    pub fn report(&self) -> Vec<(String, String, bool, bool)> {
        let now = SystemClock.unix_millis();
        let mut out: Vec<_> = self
            .states
            .load()
            .iter()
            .map(|(uri, s)| (s.region.clone(), uri.to_string(), s.is_up(), s.is_ejected(now)))
            .collect();
        out.sort();
        out
    }

    /// Makes sure every endpoint of the current table has a state.
    pub fn track(&self, shared: &SharedTable) {
        let snapshot = shared.snapshot();
        let current = self.states.load();
        let mut missing = Vec::new();
        for region in snapshot.table.regions() {
            for up in region.upstreams.iter().chain(region.peer.iter()) {
                if !current.contains_key(&up.uri) {
                    missing.push((up.uri.clone(), region.name.clone()));
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        let mut next: EndpointMap = (**current).clone();
        for (uri, region) in missing {
            if let Some(o) = &self.observer {
                o(&region, &uri, true);
            }
            next.entry(uri).or_insert_with(|| Arc::new(EndpointState::new(&region)));
        }
        self.states.store(Arc::new(next));
    }

    /// Passive health: the outcome of a real request to `uri`. A connection
    /// failure or a 5xx counts against it; `eject_after` in a row eject it
    /// for `eject_for` (0 disables ejection).
    pub fn record(&self, uri: &Uri, failed: bool, eject_after: u32, eject_for: Duration) {
        if !failed && self.failing.load(Ordering::Relaxed) == 0 {
            return;
        }
        let states = self.states.load();
        let Some(s) = states.get(uri) else { return };
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
            let until = SystemClock.unix_millis() + eject_for.as_millis() as u64;
            s.ejected_until_ms.store(until, Ordering::Relaxed);
            self.ejected_until_max_ms.fetch_max(until, Ordering::Relaxed);
            tracing::warn!(endpoint = %uri, region = %s.region, failures = n, ?eject_for, "endpoint ejected");
        }
    }

    /// Resets an endpoint's passive failure streak.
    fn clear_failures(&self, s: &EndpointState) {
        if s.passive_failures.swap(0, Ordering::Relaxed) != 0 {
            self.failing.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Applies one active check result with rise/fall thresholds.
    fn apply_check(&self, uri: &Uri, ok: bool, rise: u32, fall: u32) {
        let states = self.states.load();
        let Some(s) = states.get(uri) else { return };
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
            tracing::warn!(endpoint = %uri, region = %s.region, up, "endpoint health changed");
            if let Some(o) = &self.observer {
                o(&s.region, uri, up);
            }
        }
    }
}

/// Runs active checks until `health` is dropped. Interval, timeout, path
/// and thresholds are read from the current table on every round, so they
/// reload live; an interval of 0 pauses checking.
pub fn spawn_checker(health: Weak<Health>, shared: Weak<SharedTable>) {
    let settings = crate::proxy::forward::ClientSettings {
        connect_timeout: Duration::from_secs(1),
        pool_idle_timeout: Duration::from_secs(30),
        tls: None,
    };
    spawn_checker_with(health, shared, crate::proxy::forward::connector(&settings));
}

/// [`spawn_checker`] connecting through `connector` (the proxy's own, so
/// `https://` endpoints are checked with the same roots and client certificate).
pub fn spawn_checker_with(health: Weak<Health>, shared: Weak<SharedTable>, connector: Connector) {
    tokio::spawn(async move {
        let client: Client<Connector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .build(connector);
        loop {
            let (Some(h), Some(shared)) = (health.upgrade(), shared.upgrade()) else { return };
            h.track(&shared);
            let snapshot = shared.snapshot();
            let cfg = &snapshot.table.settings().upstream.health;
            let (interval, timeout, rise, fall) = (cfg.interval.0, cfg.timeout.0, cfg.rise, cfg.fall);
            let path = cfg.path.clone();
            drop(shared);
            if interval.is_zero() {
                drop(h);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let mut checks = tokio::task::JoinSet::new();
            let mut seen = std::collections::HashSet::new();
            for region in snapshot.table.regions() {
                let peers = region.peer.iter().map(|p| (p, super::READY_PATH));
                for (up, path) in region.upstreams.iter().map(|u| (u, path.as_str())).chain(peers) {
                    if !seen.insert(up.uri.clone()) {
                        continue;
                    }
                    let client = client.clone();
                    let uri = up.uri.clone();
                    let target = crate::proxy::forward::upstream_uri(&uri, path).ok();
                    checks.spawn(async move {
                        let ok = match target {
                            Some(t) => probe(&client, t, timeout).await,
                            None => false,
                        };
                        (uri, ok)
                    });
                }
            }
            drop(snapshot);
            while let Some(Ok((uri, ok))) = checks.join_next().await {
                h.apply_check(&uri, ok, rise, fall);
            }
            drop(h);
            tokio::time::sleep(interval).await;
        }
    });
}

async fn probe(client: &Client<Connector, Empty<Bytes>>, uri: Uri, timeout: Duration) -> bool {
    let Ok(req) = Request::get(uri).header("user-agent", "shardgate-health").body(Empty::new()) else {
        return false;
    };
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(resp)) => resp.status().is_success() || resp.status().is_redirection(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health_with(uris: &[&Uri]) -> Health {
        let h = Health::default();
        let map: EndpointMap = uris.iter().map(|u| ((*u).clone(), Arc::new(EndpointState::new("r")))).collect();
        h.states.store(Arc::new(map));
        h
    }

    #[test]
    fn the_fast_path_follows_every_transition() {
        let (a, b) = (Uri::from_static("http://10.0.0.1:1"), Uri::from_static("http://10.0.0.2:1"));
        let h = health_with(&[&a, &b]);
        assert!(h.all_clear() && h.usable(&a) && h.usable(&b));

        // Down by active checks (fall 2): only `a` is out, and only while down.
        h.apply_check(&a, false, 1, 2);
        assert!(h.all_clear(), "one failed check is below the fall threshold");
        h.apply_check(&a, false, 1, 2);
        assert!(!h.all_clear() && !h.usable(&a) && h.usable(&b));
        h.apply_check(&a, false, 1, 2);
        assert_eq!(h.down.load(Ordering::Relaxed), 1, "a further failed check changes nothing");
        h.apply_check(&a, true, 1, 2);
        assert!(h.all_clear() && h.usable(&a));

        // Passive failures: counted once per streak, cleared by a success.
        h.record(&b, true, 3, Duration::from_secs(60));
        h.record(&b, true, 3, Duration::from_secs(60));
        assert_eq!(h.failing.load(Ordering::Relaxed), 1);
        h.record(&b, false, 3, Duration::from_secs(60));
        assert_eq!(h.failing.load(Ordering::Relaxed), 0);

        // Ejection: out for eject_for, the streak cleared.
        for _ in 0..3 {
            h.record(&b, true, 3, Duration::from_secs(60));
        }
        assert_eq!(h.failing.load(Ordering::Relaxed), 0);
        assert!(!h.all_clear() && !h.usable(&b) && h.usable(&a));
        // An ejection that has run out no longer blocks the fast path.
        h.ejected_until_max_ms.store(1, Ordering::Relaxed);
        if let Some(s) = h.states.load().get(&b) {
            s.ejected_until_ms.store(1, Ordering::Relaxed);
        }
        assert!(h.all_clear() && h.usable(&b));
    }
}
