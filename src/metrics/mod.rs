//! Prometheus metrics (prometheus-client, typed label sets).
//!
//! Labels carry route *names* and region names from the table, HTTP methods
//! from a fixed list, status codes, and fixed outcome and reason tokens;
//! never raw paths, ids or client addresses, so the number of series is
//! bounded by the table, not by the traffic.
//!
//! Hot-path cost: the label values for routes and regions are `Arc<str>`s
//! cached once per table version ([`TableLabels`]), so recording a request
//! clones two reference counts and allocates nothing once its series exists.
//!
//! Values that other parts already count (reloads, retries, the retry
//! budget, endpoint health, the active table) are copied into the registry
//! when `/metrics` is scraped ([`Metrics::refresh`]), so they cannot drift.

use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::Method;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use rustc_hash::FxHashMap;

use crate::outcome::Outcome;
use crate::routing::shared::Loaded;
use labels::*;

mod labels;

pub use labels::Label;

/// The metric name prefix.
pub const PREFIX: &str = "shardgate";

/// Content type of the `/metrics` response (OpenMetrics text 1.0.0; Prometheus reads it natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Histogram buckets for request and upstream durations, in seconds.
const DURATION_BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Builds histograms with [`DURATION_BUCKETS`].
#[derive(Clone, Copy, Debug)]
struct DurationHistogram;

impl MetricConstructor<Histogram> for DurationHistogram {
    fn new_metric(&self) -> Histogram {
        Histogram::new(DURATION_BUCKETS.iter().copied())
    }
}

/// Label values for one table version's routes and regions, and the handles
/// of the series its requests have recorded into so far.
///
/// A request's series is found with one FxHash lookup of a small key (name
/// positions, status, method and outcome tokens) under an uncontended read
/// lock; `Family::get_or_create` would hash every label value with SipHash,
/// per family, per request. The cached handles share their series with the
/// families (prometheus-client metrics are reference counted), and these
/// families are never cleared, so a handle never goes stale; a new table
/// version starts a new cache.
#[derive(Debug)]
pub struct TableLabels {
    version: u64,
    routes: FxHashMap<Box<str>, (u16, Label)>,
    regions: FxHashMap<Box<str>, (u16, Label)>,
    none: Label,
    series: RwLock<FxHashMap<SeriesKey, Series>>,
}

/// What selects a request's series: positions of the route and region names
/// in the table (`u16::MAX`: none), and the fixed tokens.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct SeriesKey {
    method: Token,
    route: u16,
    region: u16,
    status: u16,
    outcome: Token,
    upstream: bool,
    /// The id's format, and whether it was minted.
    id: Option<(Token, bool)>,
}

/// A label value from a fixed set of literals (method, outcome, format),
/// compared and hashed by its address and length, so each request's lookup
/// compares addresses, not text. Were one text compiled in twice, its copies
/// would be two cache entries for one series: a duplicate, never a mix-up.
#[derive(Clone, Copy, Debug, Eq)]
struct Token(&'static str);

impl PartialEq for Token {
    fn eq(&self, other: &Token) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Hash for Token {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.0.as_ptr().addr(), self.0.len()).hash(state);
    }
}

/// Handles of the series one kind of request records into.
#[derive(Clone, Debug)]
struct Series {
    request: Histogram,
    upstream: Option<Histogram>,
    id: Option<Counter>,
}

/// Series cached per table version at most; beyond it (a flood of odd
/// statuses), requests record through the families without caching.
const MAX_CACHED_SERIES: usize = 4096;

type NameIndex = FxHashMap<Box<str>, (u16, Label)>;

impl TableLabels {
    fn build(version: u64, routes: &[&str], regions: &[&str]) -> TableLabels {
        let index = |names: &[&str]| -> NameIndex {
            let position = |i: usize| u16::try_from(i).unwrap_or(u16::MAX);
            names.iter().enumerate().map(|(i, n)| (Box::from(*n), (position(i), Label::new(n)))).collect()
        };
        TableLabels {
            version,
            routes: index(routes),
            regions: index(regions),
            none: Label::new(""),
            series: RwLock::new(FxHashMap::default()),
        }
    }

    fn from_loaded(loaded: &Loaded) -> TableLabels {
        let t = &loaded.table;
        let routes: Vec<&str> = t.routes().iter().map(|r| r.name.as_str()).collect();
        let regions: Vec<&str> = t.regions().iter().map(|r| r.name.as_str()).collect();
        TableLabels::build(loaded.version, &routes, &regions)
    }

    /// The label value for route `name` ("" for none).
    pub fn route(&self, name: Option<&str>) -> Label {
        Self::find(&self.routes, &self.none, name)
    }

    /// The label value for region `name` ("" for none).
    pub fn region(&self, name: Option<&str>) -> Label {
        Self::find(&self.regions, &self.none, name)
    }

    /// Where `name` is in the table: `Some(u16::MAX)` for none, `None` for
    /// a name the table does not know (never cached: it has no position).
    fn position(map: &NameIndex, name: Option<&str>) -> Option<u16> {
        match name {
            None => Some(u16::MAX),
            Some(n) => map.get(n).map(|(i, _)| *i),
        }
    }

    fn find(map: &NameIndex, none: &Label, name: Option<&str>) -> Label {
        match name {
            None => none.clone(),
            Some(n) => map.get(n).map(|(_, l)| l.clone()).unwrap_or_else(|| Label::new(n)),
        }
    }
}

/// One finished request, as the proxy saw it.
#[derive(Debug)]
pub struct RequestRecord<'a> {
    /// Request method.
    pub method: &'a Method,
    /// Matched route name.
    pub route: Option<&'a str>,
    /// Region the request was sent to.
    pub region: Option<&'a str>,
    /// Response status.
    pub status: u16,
    /// How it ended.
    pub outcome: Outcome,
    /// The id the request was routed by: its format, and whether it was minted.
    pub id: Option<(&'static str, bool)>,
    /// Whole request, until the response head was ready.
    pub duration: Duration,
    /// Upstream leg, when one answered.
    pub upstream: Option<Duration>,
}

/// Values counted elsewhere, copied into the registry at scrape time.
#[derive(Debug, Default)]
pub struct ScrapeInputs {
    /// Successful and rejected reloads (from `Reloader`), when the table comes from a file.
    pub reloads: Option<(u64, u64)>,
    /// Retries sent upstream.
    pub retries: u64,
    /// Retries refused by the retry budget.
    pub budget_exhausted: u64,
    /// Upstream connections opened.
    pub connects: u64,
    /// Every known endpoint: (region, endpoint, usable).
    pub endpoints: Option<Vec<(String, String, bool)>>,
    /// The counters of the search cache.
    pub found: crate::routing::FoundStats,
    /// Trace spans exported, dropped (queue full) and failed, when traces are on.
    pub spans: Option<(u64, u64, u64)>,
    /// Log lines dropped because the log's reader did not keep up.
    pub log_dropped: u64,
    /// DNS lookups of named endpoints: answered, failed, changed addresses.
    pub dns: (u64, u64, u64),
    /// A followed table source: the applied revision, seconds since it was
    /// last seen current (`None`: never), seconds from the last revision's
    /// arrival to its swap.
    pub source: Option<(i64, Option<f64>, f64)>,
}

/// Every metric shardgate exports, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Histogram, DurationHistogram>,
    upstream: Family<UpstreamLabels, Histogram, DurationHistogram>,
    decoded: Family<FormatLabels, Counter>,
    decode_failures: Family<DecodeFailureLabels, Counter>,
    minted: Family<MintLabels, Counter>,
    retries: Counter,
    budget_exhausted: Counter,
    log_dropped: Counter,
    connects: Counter,
    upstream_health: Family<HealthLabels, Gauge>,
    open_connections: Family<ListenerLabels, Gauge>,
    refused_connections: Family<ListenerLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    last_reload_success: Gauge<f64, AtomicU64>,
    table_info: Family<TableInfoLabels, Gauge>,
    placement: Family<UnitLabels, Counter>,
    source_revision: Gauge,
    source_stale: Gauge<f64, AtomicU64>,
    source_apply: Gauge<f64, AtomicU64>,
    legs: Family<LegLabels, Counter>,
    moves: Family<MoveLabels, Counter>,
    held: Family<UnitLabels, Histogram, DurationHistogram>,
    search_cache: Family<ResultLabels, Counter>,
    search_cache_evictions: Counter,
    search_cache_entries: Gauge,
    trace_spans: Family<ResultLabels, Counter>,
    dns_lookups: Family<ResultLabels, Counter>,
    labels: ArcSwap<TableLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered (and build info set).
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::new_with_constructor(DurationHistogram);
        registry.register_with_unit(
            "http_server_request_duration",
            "Requests by method, route name, status, region and outcome, until the response head",
            Unit::Seconds,
            requests.clone(),
        );
        let upstream = Family::new_with_constructor(DurationHistogram);
        registry.register_with_unit(
            "http_client_request_duration",
            "Upstream leg of proxied requests (all attempts, until response head) by region and status",
            Unit::Seconds,
            upstream.clone(),
        );
        let decoded = Family::default();
        registry.register("ids_decoded", "Ids decoded from requests, by format", decoded.clone());
        let decode_failures = Family::default();
        registry.register(
            "id_decode_failures",
            "Ids rejected, by the route's first format and the reason",
            decode_failures.clone(),
        );
        let minted = Family::default();
        registry.register("ids_minted", "Ids minted for create routes, by format and region", minted.clone());
        let retries = Counter::default();
        registry.register("retries", "Upstream retries sent", retries.clone());
        let connects = Counter::default();
        registry.register("upstream_connects", "Upstream connections opened", connects.clone());
        let budget_exhausted = Counter::default();
        registry.register("retry_budget_exhausted", "Retries refused by the retry budget", budget_exhausted.clone());
        let log_dropped = Counter::default();
        registry.register(
            "log_lines_dropped",
            "Log lines (access lines among them) dropped because the log's reader did not keep up",
            log_dropped.clone(),
        );
        let upstream_health = Family::default();
        registry.register(
            "upstream_health",
            "Whether an endpoint receives traffic (1) or is down or ejected (0)",
            upstream_health.clone(),
        );
        let open_connections = Family::default();
        registry.register("open_connections", "Open client connections, by listener", open_connections.clone());
        let refused_connections = Family::default();
        registry.register(
            "connections_refused",
            "Client connections refused at server.max_connections, by listener",
            refused_connections.clone(),
        );
        let reloads = Family::default();
        registry.register("config_reloads", "Routing table reloads, by result", reloads.clone());
        let last_reload_success = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "config_last_reload_success_timestamp",
            "When the active routing table was published (Unix time)",
            Unit::Seconds,
            last_reload_success.clone(),
        );
        let table_info = Family::default();
        registry.register("config_info", "The active routing table: version counter and sha256", table_info.clone());
        let placement = Family::default();
        registry.register(
            "placement_requests",
            "Requests placed by each placement unit of the table (a country, an override, a shard range, ...)",
            placement.clone(),
        );
        let source_revision = Gauge::default();
        registry.register(
            "table_source_revision",
            "The source revision of the running table (etcd's mod_revision of the key)",
            source_revision.clone(),
        );
        let source_stale = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "table_source_staleness",
            "Time since the table source was last seen current (grows while etcd is unreachable)",
            Unit::Seconds,
            source_stale.clone(),
        );
        let source_apply = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "table_source_apply_delay",
            "Time from the last revision's arrival from the source to its table being swapped in",
            Unit::Seconds,
            source_apply.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register("build_info", "Build information", build);
        // Both results exist from the start, so rate() sees the first failure.
        for result in ["success", "failure"] {
            let _ = reloads.get_or_create(&ResultLabels { result });
        }
        let moves = Family::default();
        registry.register(
            "move_requests",
            "Requests of a placement unit being re-homed: held, released, aborted, expired, refused",
            moves.clone(),
        );
        let held = Family::new_with_constructor(DurationHistogram);
        registry.register_with_unit(
            "move_hold_duration",
            "How long requests of a moving unit were held",
            Unit::Seconds,
            held.clone(),
        );
        let legs = Family::default();
        registry.register(
            "legs",
            "Fan-out and search requests to one region, by kind, route, region and outcome",
            legs.clone(),
        );
        let search_cache = Family::default();
        registry.register(
            "search_cache_lookups",
            "Search cache lookups, by result (hit, miss, stale)",
            search_cache.clone(),
        );
        let search_cache_evictions = Counter::default();
        registry.register(
            "search_cache_evictions",
            "Search cache entries evicted to make room",
            search_cache_evictions.clone(),
        );
        let search_cache_entries = Gauge::default();
        registry.register("search_cache_entries", "Ids the search cache holds", search_cache_entries.clone());
        let dns_lookups = Family::default();
        registry.register(
            "dns_lookups",
            "DNS lookups of named upstreams and peers: answered, failed (the last addresses kept), changed (new addresses)",
            dns_lookups.clone(),
        );
        let trace_spans = Family::default();
        registry.register(
            "trace_spans",
            "Trace spans by what became of them: exported, dropped (export queue full), failed (collector refused or unreachable)",
            trace_spans.clone(),
        );
        let empty = TableLabels::build(0, &[], &[]);
        Metrics {
            trace_spans,
            dns_lookups,
            legs,
            moves,
            held,
            search_cache,
            search_cache_evictions,
            search_cache_entries,
            registry,
            requests,
            upstream,
            decoded,
            decode_failures,
            minted,
            retries,
            connects,
            budget_exhausted,
            log_dropped,
            upstream_health,
            open_connections,
            refused_connections,
            reloads,
            last_reload_success,
            table_info,
            placement,
            source_revision,
            source_stale,
            source_apply,
            labels: ArcSwap::from_pointee(empty),
        }
    }

    /// Label values for `loaded`'s routes and regions, rebuilt once per table version.
    pub fn labels(&self, loaded: &Loaded) -> arc_swap::Guard<Arc<TableLabels>> {
        let current = self.labels.load();
        if current.version == loaded.version {
            return current;
        }
        self.labels.store(Arc::new(TableLabels::from_loaded(loaded)));
        self.labels.load()
    }

    /// Records one finished request: its duration, its upstream leg, and
    /// the id it was routed by (decoded or minted).
    pub fn observe_request(&self, labels: &TableLabels, r: &RequestRecord<'_>) {
        let key =
            match (TableLabels::position(&labels.routes, r.route), TableLabels::position(&labels.regions, r.region)) {
                (Some(route), Some(region)) => Some(SeriesKey {
                    method: Token(method_label(r.method)),
                    route,
                    region,
                    status: r.status,
                    outcome: Token(r.outcome.as_str()),
                    upstream: r.upstream.is_some(),
                    id: r.id.map(|(format, minted)| (Token(format), minted)),
                }),
                _ => None,
            };
        if let (Some(key), Ok(cache)) = (&key, labels.series.read()) {
            if let Some(series) = cache.get(key) {
                Self::record(series, r);
                return;
            }
        }
        let series = self.series(labels, r);
        Self::record(&series, r);
        if let (Some(key), Ok(mut cache)) = (key, labels.series.write()) {
            if cache.len() < MAX_CACHED_SERIES {
                cache.insert(key, series);
            }
        }
    }

    fn record(series: &Series, r: &RequestRecord<'_>) {
        series.request.observe(r.duration.as_secs_f64());
        if let (Some(h), Some(up)) = (&series.upstream, r.upstream) {
            h.observe(up.as_secs_f64());
        }
        if let Some(c) = &series.id {
            c.inc();
        }
    }

    /// The handles of a request's series, from the families.
    fn series(&self, labels: &TableLabels, r: &RequestRecord<'_>) -> Series {
        let region = labels.region(r.region);
        let upstream = r.upstream.map(|_| {
            let key = UpstreamLabels { region: region.clone(), http_response_status_code: r.status };
            self.upstream.get_or_create(&key).clone()
        });
        let id = r.id.map(|(format, minted)| {
            if minted {
                self.minted.get_or_create(&MintLabels { format, region: region.clone() }).clone()
            } else {
                self.decoded.get_or_create(&FormatLabels { format }).clone()
            }
        });
        let key = RequestLabels {
            http_request_method: method_label(r.method),
            http_route: labels.route(r.route),
            http_response_status_code: r.status,
            region,
            outcome: r.outcome.as_str(),
        };
        Series { request: self.requests.get_or_create(&key).clone(), upstream, id }
    }

    /// Counts an id rejected by `format` for `reason` (both stable tokens).
    pub fn id_decode_failed(&self, format: &'static str, reason: &'static str) {
        self.decode_failures.get_or_create(&DecodeFailureLabels { format, reason }).inc();
    }

    /// The health hook: sets `shardgate_upstream_health{region, endpoint}` to 1 (up) or 0.
    pub fn set_upstream_health(&self, region: &str, endpoint: &str, up: bool) {
        let key = HealthLabels { region: region.to_owned(), endpoint: endpoint.to_owned() };
        self.upstream_health.get_or_create(&key).set(i64::from(up));
    }

    /// A connection opened on `listener` (`proxy` or `admin`); the gauge goes
    /// down when the returned guard is dropped.
    pub fn connection_opened(self: &Arc<Self>, listener: &'static str) -> ConnectionGuard {
        let gauge = self.open_connections.get_or_create(&ListenerLabels { listener }).clone();
        gauge.inc();
        ConnectionGuard { gauge }
    }

    /// Current open connections on `listener`.
    pub fn open_connections(&self, listener: &'static str) -> i64 {
        self.open_connections.get_or_create(&ListenerLabels { listener }).get()
    }

    /// A connection refused on `listener` because of the connection limit.
    pub fn connection_refused(&self, listener: &'static str) {
        self.refused_connections.get_or_create(&ListenerLabels { listener }).inc();
    }

    /// Connections refused on `listener` so far.
    pub fn connections_refused(&self, listener: &'static str) -> u64 {
        self.refused_connections.get_or_create(&ListenerLabels { listener }).get()
    }

    /// Copies values counted elsewhere (and the active table) into the registry.
    pub fn refresh(&self, loaded: &Loaded, inputs: &ScrapeInputs) {
        if let Some((ok, failed)) = inputs.reloads {
            self.reloads.get_or_create(&ResultLabels { result: "success" }).inner().store(ok, Relaxed);
            self.reloads.get_or_create(&ResultLabels { result: "failure" }).inner().store(failed, Relaxed);
        }
        self.retries.inner().store(inputs.retries, Relaxed);
        self.connects.inner().store(inputs.connects, Relaxed);
        self.budget_exhausted.inner().store(inputs.budget_exhausted, Relaxed);
        self.log_dropped.inner().store(inputs.log_dropped, Relaxed);
        let f = &inputs.found;
        for (result, n) in [("hit", f.hits), ("miss", f.misses), ("stale", f.stale)] {
            self.search_cache.get_or_create(&ResultLabels { result }).inner().store(n, Relaxed);
        }
        self.search_cache_evictions.inner().store(f.evictions, Relaxed);
        self.search_cache_entries.set(i64::try_from(f.entries).unwrap_or(i64::MAX));
        let (answered, failed, changed) = inputs.dns;
        for (result, n) in [("answered", answered), ("failed", failed), ("changed", changed)] {
            self.dns_lookups.get_or_create(&ResultLabels { result }).inner().store(n, Relaxed);
        }
        if let Some((exported, dropped, failed)) = inputs.spans {
            for (result, n) in [("exported", exported), ("dropped", dropped), ("failed", failed)] {
                self.trace_spans.get_or_create(&ResultLabels { result }).inner().store(n, Relaxed);
            }
        }
        self.last_reload_success.set(unix_seconds(loaded.loaded_at));
        let info = TableInfoLabels { version: loaded.version, sha256: loaded.sha256.clone() };
        if self.table_info.get(&info).is_none() {
            self.table_info.clear();
            self.table_info.get_or_create(&info).set(1);
        }
        if let Some((revision, stale, apply)) = inputs.source {
            self.source_revision.set(revision);
            self.source_stale.set(stale.unwrap_or(f64::INFINITY));
            self.source_apply.set(apply);
        }
        // Units a reload removed go; the others' counts were carried over.
        self.placement.clear();
        for (unit, n) in loaded.table.units().counts() {
            self.placement.get_or_create(&UnitLabels { unit: unit.to_string() }).inner().store(n, Relaxed);
        }
        if let Some(endpoints) = &inputs.endpoints {
            self.upstream_health.clear();
            for (region, endpoint, up) in endpoints {
                self.set_upstream_health(region, endpoint, *up);
            }
        }
    }

    /// One leg of a fan-out or search (`kind`) of `route` to `region`, and
    /// what came of it (`ok`, `found`, `not_found`, a failure's reason).
    pub fn leg(&self, kind: &'static str, route: &str, region: &str, outcome: &'static str) {
        let labels = LegLabels { kind, route: route.to_string(), region: region.to_string(), outcome };
        self.legs.get_or_create(&labels).inc();
    }

    /// A request of moving `unit`: `held`, then `released`, `aborted` or
    /// `expired`; or `refused` (the hold was full).
    pub fn moved(&self, unit: &str, result: &'static str) {
        self.moves.get_or_create(&MoveLabels { unit: unit.to_string(), result }).inc();
    }

    /// A request of moving `unit` held for `d`.
    pub fn held_for(&self, unit: &str, d: std::time::Duration) {
        self.held.get_or_create(&UnitLabels { unit: unit.to_string() }).observe(d.as_secs_f64());
    }

    /// The whole registry in OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
            out.push_str("# EOF\n");
        }
        out
    }
}

/// Decrements the open-connections gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard {
    gauge: Gauge<i64, AtomicI64>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The method label: the registered methods as themselves, anything else
/// `_OTHER` (OpenTelemetry's convention), so clients cannot add series.
pub fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

/// Seconds since the Unix epoch of `t` (0 before 1970).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

#[cfg(test)]
mod tests;
