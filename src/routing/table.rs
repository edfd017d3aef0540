//! The compiled routing table: immutable, indexed for placement and matching.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use crate::config::model::{
    Balance, CountrySource, FieldValue, HeaderEdit, HeaderRules, IdRule, IdSource, MintRule, Region, Rewrite,
    RewritePath, Route, To, ValuePiece, Var,
};
use crate::config::model::{Config, MoveRule};
use crate::config::schema::MovePhase;
pub use crate::config::settings::{Settings, UpstreamPolicy};
use crate::config::template::insert_template;
pub use crate::config::values::Upstream;
use crate::http1::rules::Lists;
use crate::ids;

use super::resolved::Resolved;
use super::rule::{RegionId, Rule};

/// Sentinel for "no region" in the flat arrays.
pub(crate) const NONE: u16 = u16::MAX;
/// Set on country×entity cells that come from an override.
pub(crate) const OVERRIDE_FLAG: u16 = 0x8000;

/// A route matched by method and path.
#[derive(Debug)]
pub struct RouteMatch<'a> {
    /// The route.
    pub route: &'a Route,
    /// Path parameters.
    pub params: matchit::Params<'a, 'a>,
}

/// Multiply-shift hasher for integer keys of the node tables.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
    }
}

pub(crate) type IntMap = HashMap<u64, u16, BuildHasherDefault<IntHasher>>;

#[derive(Clone, Copy, Debug)]
pub(crate) struct HashCandidate {
    pub(crate) region: u16,
    pub(crate) seed: u64,
    pub(crate) weight: f64,
}

/// The compiled, immutable routing table.
#[derive(Debug)]
pub struct Table {
    pub(crate) regions: Vec<Region>,
    /// Each region's [`Table::endpoints_hash`].
    endpoints_hashes: Vec<u64>,
    /// Requests waiting for an answer at each backend of each region
    /// (`balance: least_request`), in `upstreams`' order; shared with the
    /// table this one replaced for each backend both have ([`Table::carry`]).
    loads: Vec<Box<[Arc<AtomicUsize>]>>,
    /// Each region's round-robin turn: its backends', then its peers'.
    turns: Box<[AtomicUsize]>,
    /// Each region's peer shardgate: one endpoint per address of its name.
    peers: Vec<Box<[Upstream]>>,
    /// The host names of the endpoints as written, for DNS discovery.
    names: Vec<String>,
    region_index: HashMap<String, RegionId>,
    pub(crate) local_region: Option<RegionId>,
    pub(crate) default_region: Option<RegionId>,
    /// `(country << 8) | entity` → region (| OVERRIDE_FLAG), NONE when unowned.
    pub(crate) country_entity: Box<[u16]>,
    pub(crate) shards: Box<[u16]>,
    pub(crate) locality_mac: IntMap,
    pub(crate) locality_pid: IntMap,
    pub(crate) snowflake_dc: IntMap,
    pub(crate) snowflake_worker: IntMap,
    pub(crate) sonyflake_machine: IntMap,
    pub(crate) instagram_shard: Box<[u16]>,
    pub(crate) key_starts: Box<[u64]>,
    pub(crate) key_regions: Box<[u16]>,
    pub(crate) hash: Box<[HashCandidate]>,
    pub(crate) hash_weighted: bool,
    pub(crate) time_until: Box<[u64]>,
    pub(crate) time_regions: Box<[u16]>,
    routes: Vec<Route>,
    router: matchit::Router<Box<[usize]>>,
    params: ids::Params,
    countries: HashMap<String, u8>,
    country_names: Vec<Option<String>>,
    /// Country id → its owning region (overrides aside), NONE when undefined.
    country_regions: Box<[u16]>,
    entities: HashMap<String, u8>,
    entity_names: Vec<Option<String>>,
    settings: Settings,
    counts: Counts,
    /// The placement units and the requests each placed.
    units: super::units::Units,
    /// Units being re-homed, each with its unit's index in `units`.
    moves: Box<[(u32, MoveRule)]>,
    /// Whether some move is in `hold`.
    holding: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    overrides: usize,
    node_entries: usize,
}

/// `region` with each backend standing for its addresses, each with the
/// weight its name has.
fn expand(region: &Region, resolved: &Resolved) -> Region {
    let (mut upstreams, mut weights) = (Vec::new(), Vec::new());
    for (i, e) in region.upstreams.iter().enumerate() {
        for at in resolved.expand(e) {
            upstreams.push(at);
            weights.push(region.weights.get(i).copied().unwrap_or(1));
        }
    }
    Region { upstreams, weights, ..region.clone() }
}

/// FNV-1a of a region name: the stable rendezvous seed of the region.
fn name_seed(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    crate::ids::mix64(h)
}

impl Table {
    /// Compiles a validated config: lays its typed tables out as flat arrays
    /// and small maps for lookups. Endpoints named by host stay one each.
    pub fn compile(cfg: &Config) -> Table {
        Table::compile_with(cfg, &Resolved::none())
    }

    /// [`Table::compile`], each named backend and peer standing for every
    /// address `resolved` holds for its name.
    pub fn compile_with(cfg: &Config, resolved: &Resolved) -> Table {
        let rid = |i: usize| RegionId(u16::try_from(i).unwrap_or(OVERRIDE_FLAG - 1).min(OVERRIDE_FLAG - 1));
        // What was learnt of a region is dropped when its endpoints as
        // written change, not when their addresses do.
        let endpoints_hashes = cfg
            .regions
            .iter()
            .map(|r| {
                let keys = r.upstreams.iter().chain(&r.peer).map(|u| &*u.pool_key).collect::<Vec<_>>().join(" ");
                name_seed(&format!("{} {}", r.name, keys))
            })
            .collect();
        let mut names: Vec<String> = Vec::new();
        for e in cfg.regions.iter().flat_map(|r| r.upstreams.iter().chain(&r.peer)).filter(|e| e.is_named()) {
            if !names.iter().any(|n| n == e.bare_host()) {
                names.push(e.bare_host().to_string());
            }
        }
        let peers = cfg.regions.iter().map(|r| r.peer.iter().flat_map(|p| resolved.expand(p)).collect()).collect();
        let regions: Vec<Region> = cfg.regions.iter().map(|r| expand(r, resolved)).collect();
        let region_index = regions.iter().enumerate().map(|(i, r)| (r.name.clone(), rid(i))).collect();

        let mut countries = HashMap::with_capacity(cfg.countries.len());
        let mut country_names = vec![None; 256];
        let mut country_regions = vec![NONE; 256].into_boxed_slice();
        let mut country_entity = vec![NONE; 1 << 16].into_boxed_slice();
        for c in &cfg.countries {
            countries.insert(c.name.clone(), c.id);
            country_names[usize::from(c.id)] = Some(c.name.clone());
            country_regions[usize::from(c.id)] = rid(c.region).0;
            let base = usize::from(c.id) << 8;
            country_entity[base..base + 256].fill(rid(c.region).0);
        }
        let mut entities = HashMap::with_capacity(cfg.entities.len());
        let mut entity_names = vec![None; 256];
        for e in &cfg.entities {
            entities.insert(e.name.clone(), e.code);
            entity_names[usize::from(e.code)] = Some(e.name.clone());
        }
        for o in &cfg.overrides {
            country_entity[(usize::from(o.country) << 8) | usize::from(o.entity)] = rid(o.region).0 | OVERRIDE_FLAG;
        }
        let mut shards = vec![NONE; cfg.shards.as_ref().map_or(0, |s| s.count as usize)];
        for &(a, b, r) in cfg.shards.iter().flat_map(|s| &s.ranges) {
            shards[a as usize..=b as usize].fill(rid(r).0);
        }
        let int_map = |entries: &mut dyn Iterator<Item = (u64, usize)>| -> IntMap {
            entries.map(|(k, r)| (k, rid(r).0)).collect()
        };
        let n = &cfg.nodes;
        let locality_mac = int_map(&mut n.locality_mac.iter().map(|&(k, r)| (u64::from(k), r)));
        let locality_pid = int_map(&mut n.locality_pid.iter().map(|&(k, r)| (u64::from(k), r)));
        let snowflake_dc = int_map(&mut n.snowflake_datacenter.iter().copied());
        let snowflake_worker = int_map(&mut n.snowflake_worker.iter().copied());
        let sonyflake_machine = int_map(&mut n.sonyflake_machine.iter().map(|&(k, r)| (u64::from(k), r)));
        let mut instagram_shard = vec![NONE; 8192].into_boxed_slice();
        for &(a, b, r) in &n.instagram_shard {
            instagram_shard[usize::from(a)..=usize::from(b)].fill(rid(r).0);
        }
        let hash: Box<[HashCandidate]> = cfg
            .hash
            .iter()
            .map(|&(r, weight)| HashCandidate { region: rid(r).0, seed: name_seed(&cfg.regions[r].name), weight })
            .collect();
        let names_lists = Arc::new(super::rules::names(&regions, &country_names, &entity_names));
        let units = super::units::Units::compile(cfg);
        // Validation checked that each move names a unit of the table.
        let moves = cfg.moves.iter().filter_map(|m| Some((units.index_of(&m.unit)?, m.clone()))).collect();
        let (routes, router) = compile_routes(&cfg.routes, &names_lists);
        // One counter a backend address, however many regions list it.
        let mut by_address: HashMap<&str, Arc<AtomicUsize>> = HashMap::new();
        let loads = regions
            .iter()
            .map(|r| r.upstreams.iter().map(|u| Arc::clone(by_address.entry(&u.pool_key).or_default())).collect())
            .collect();
        Table {
            loads,
            turns: (0..regions.len() * 2).map(|_| AtomicUsize::new(0)).collect(),
            regions,
            peers,
            names,
            endpoints_hashes,
            region_index,
            local_region: cfg.local_region.map(rid),
            default_region: cfg.default_region.map(rid),
            country_entity,
            shards: shards.into_boxed_slice(),
            locality_mac,
            locality_pid,
            snowflake_dc,
            snowflake_worker,
            sonyflake_machine,
            instagram_shard,
            key_starts: cfg.key_ranges.iter().map(|&(s, _)| s).collect(),
            key_regions: cfg.key_ranges.iter().map(|&(_, r)| rid(r).0).collect(),
            hash_weighted: hash.iter().any(|c| c.weight != 1.0),
            hash,
            time_until: cfg.time_ranges.iter().map(|&(u, _)| u.unwrap_or(u64::MAX)).collect(),
            time_regions: cfg.time_ranges.iter().map(|&(_, r)| rid(r).0).collect(),
            routes,
            router,
            params: cfg.ids,
            countries,
            country_names,
            country_regions,
            entities,
            entity_names,
            settings: cfg.settings.clone(),
            units,
            holding: cfg.moves.iter().any(|m| m.phase == MovePhase::Hold),
            moves,
            counts: Counts {
                overrides: cfg.overrides.len(),
                node_entries: n.locality_mac.len()
                    + n.locality_pid.len()
                    + n.snowflake_datacenter.len()
                    + n.snowflake_worker.len()
                    + n.sonyflake_machine.len()
                    + n.instagram_shard.len(),
            },
        }
    }

    /// Finds the route for a request: matchit picks the path template (the
    /// most specific one; conflicting templates are rejected at load), then
    /// the first listed route on that template whose methods allow `method`.
    pub fn match_route<'a>(&'a self, method: &http::Method, path: &'a str) -> Option<RouteMatch<'a>> {
        let m = self.router.at(path).ok()?;
        let i = m.value.iter().copied().find(|&i| self.routes.get(i).is_some_and(|r| r.allows(method)))?;
        Some(RouteMatch { route: self.routes.get(i)?, params: m.params })
    }

    /// The methods a path takes when it matches a template but a request's
    /// method matched none of its routes: the `Allow` of a 405 (`GET` brings
    /// `HEAD`); `None` when no template matches the path.
    pub fn methods_at(&self, path: &str) -> Option<String> {
        let m = self.router.at(path).ok()?;
        let mut allow: Vec<&str> = Vec::new();
        for route in m.value.iter().filter_map(|&i| self.routes.get(i)) {
            for method in route.methods.iter().flatten() {
                let also_head = (*method == http::Method::GET).then_some("HEAD");
                for name in std::iter::once(method.as_str()).chain(also_head) {
                    if !allow.contains(&name) {
                        allow.push(name);
                    }
                }
            }
        }
        Some(allow.join(", "))
    }

    /// All routes, in file order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// A region by id.
    ///
    /// Ids come from this table; an id from another table that is out of
    /// range yields an empty placeholder region rather than a panic.
    pub fn region(&self, id: RegionId) -> &Region {
        static UNKNOWN: Region = Region {
            name: String::new(),
            upstreams: Vec::new(),
            weights: Vec::new(),
            balance: Balance::RoundRobin,
            peer: None,
            failover: None,
            upstream: None,
        };
        self.regions.get(usize::from(id.0)).unwrap_or(&UNKNOWN)
    }

    /// Region `id`'s peer shardgate, one endpoint per address of its name.
    pub fn peers(&self, id: RegionId) -> &[Upstream] {
        self.peers.get(usize::from(id.0)).map_or(&[], |p| &p[..])
    }

    /// The host names of the table's endpoints as written (DNS discovery).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Requests waiting for an answer at each of region `id`'s backends.
    pub fn loads(&self, id: RegionId) -> &[Arc<AtomicUsize>] {
        self.loads.get(usize::from(id.0)).map_or(&[], |l| &l[..])
    }

    /// Region `id`'s round-robin turn: among its backends, or (`via_peer`)
    /// its peer shardgate's addresses. Each region keeps its own, so one
    /// region's traffic never sets where another's goes.
    pub fn turn(&self, id: RegionId, via_peer: bool) -> &AtomicUsize {
        static NONE: AtomicUsize = AtomicUsize::new(0);
        self.turns.get(usize::from(id.0) * 2 + usize::from(via_peer)).unwrap_or(&NONE)
    }

    /// The `upstream` settings of region `id`'s endpoints: its own, else the table's.
    pub fn upstream_of(&self, id: RegionId) -> &UpstreamPolicy {
        self.region(id).upstream.as_deref().unwrap_or(&self.settings.upstream)
    }

    /// The timeouts, retries and budget of `route`'s requests owned by
    /// region `id`: the route's own there, else the region's, else the table's.
    pub fn policy<'a>(&'a self, route: &'a Route, id: RegionId) -> &'a UpstreamPolicy {
        match route.policy.as_deref().and_then(|p| p.get(usize::from(id.0))) {
            Some(own) => own,
            None => self.upstream_of(id),
        }
    }

    /// The region `id` fails over to.
    pub fn failover(&self, id: RegionId) -> Option<RegionId> {
        let to = self.region(id).failover?;
        u16::try_from(to).ok().filter(|&i| usize::from(i) < self.regions.len()).map(RegionId)
    }

    /// A hash of region `id`'s endpoints (backends and peer): when a reload
    /// changes it, what was learnt about the region ([`super::found`]) is dropped.
    pub fn endpoints_hash(&self, id: RegionId) -> u64 {
        self.endpoints_hashes.get(usize::from(id.0)).copied().unwrap_or(0)
    }

    /// All regions; `RegionId(i)` is `regions()[i]`.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The route named `name`.
    pub fn route_by_name(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.name == name)
    }

    /// A region by name.
    pub fn region_by_name(&self, name: &str) -> Option<RegionId> {
        self.region_index.get(name).copied()
    }

    /// The region this instance serves (`region:`), if any.
    pub fn local_region(&self) -> Option<RegionId> {
        self.local_region
    }

    /// The region a route without an id sends to (`to:`): its own, or the
    /// instance's (else `default_region`) for `to: local`.
    pub fn region_of(&self, to: To) -> Option<RegionId> {
        match to {
            To::Region(i) => u16::try_from(i).ok().filter(|&i| usize::from(i) < self.regions.len()).map(RegionId),
            To::Local => self.local_region.or(self.default_region),
        }
    }

    /// The fallback region (`default_region:`), if any.
    pub fn default_region(&self) -> Option<RegionId> {
        self.default_region
    }

    /// Parameters for `ids::parse_any`.
    pub fn id_params(&self) -> &ids::Params {
        &self.params
    }

    /// A country id by name, case-insensitively (`KZ`, `kz`); validation
    /// rejects names that differ only in case.
    pub fn country_by_name(&self, name: &str) -> Option<u8> {
        if let Some(&id) = self.countries.get(name) {
            return Some(id);
        }
        self.countries.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, &id)| id)
    }

    /// A country name by id.
    pub fn country_name(&self, id: u8) -> Option<&str> {
        self.country_names.get(usize::from(id)).and_then(|n| n.as_deref())
    }

    /// The region that owns country `id` (its `countries` entry; overrides,
    /// which are per entity, aside): where a fan-out for it goes.
    pub fn country_owner(&self, id: u8) -> Option<RegionId> {
        self.country_regions.get(usize::from(id)).copied().filter(|&r| r != NONE).map(RegionId)
    }

    /// An entity code by name.
    pub fn entity_by_name(&self, name: &str) -> Option<u8> {
        self.entities.get(name).copied()
    }

    /// An entity name by code.
    pub fn entity_name(&self, code: u8) -> Option<&str> {
        self.entity_names.get(usize::from(code)).and_then(|n| n.as_deref())
    }

    /// The region owning uniqid `shard`, if any (used to mint into a region).
    pub fn shard_owner(&self, shard: u32) -> Option<RegionId> {
        match self.shards.get(shard as usize) {
            Some(&r) if r != NONE => Some(RegionId(r)),
            _ => None,
        }
    }

    /// Settings with defaults filled in.
    /// Whether some move holds requests.
    #[inline]
    pub fn is_holding(&self) -> bool {
        self.holding
    }

    /// The move of the unit that placed a request by `rule` in `region`, if one is under way.
    pub fn move_of(&self, rule: Rule, region: RegionId) -> Option<&MoveRule> {
        if self.moves.is_empty() {
            return None;
        }
        self.move_at(self.units.unit_of(rule, region))
    }

    /// The move of unit `unit` (by its index in [`Table::units`]), if one is under way.
    pub(crate) fn move_at(&self, unit: u32) -> Option<&MoveRule> {
        self.moves.iter().find(|(u, _)| *u == unit).map(|(_, m)| m)
    }

    /// The moves under way.
    pub fn moves(&self) -> impl Iterator<Item = &MoveRule> {
        self.moves.iter().map(|(_, m)| m)
    }

    /// A move as `/fleet`, `/explain` and the audit trail show it: its
    /// unit, the region it goes to (by name), its phase and epoch.
    pub fn move_json(&self, m: &MoveRule) -> serde_json::Value {
        let to = self.region_of(To::Region(m.to)).map_or("", |r| self.region(r).name.as_str());
        serde_json::json!({ "unit": m.unit, "to": to, "phase": m.phase, "epoch": m.epoch })
    }

    /// The placement units and the requests each placed.
    pub fn units(&self) -> &super::units::Units {
        &self.units
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A human explanation of a rule with names, e.g. `override KZ:WalletAccount`
    /// or `country 7 (KZ)`.
    pub fn explain(&self, rule: Rule) -> Explain<'_> {
        Explain { table: self, rule }
    }

    /// A one-line summary: counts of regions, countries, shards, routes.
    pub fn summary(&self) -> String {
        let shards = self.shards.len();
        format!(
            "{} regions, {} countries, {} entities, {} overrides, {} shards, {} node entries, {} key ranges, {} time ranges, {} routes",
            self.regions.len(),
            self.countries.len(),
            self.entities.len(),
            self.counts.overrides,
            shards,
            self.counts.node_entries,
            self.key_starts.len(),
            self.time_until.len(),
            self.routes.len()
        )
    }

    /// Goes on from `running`'s counts, as the table about to replace it,
    /// sharing them (the requests under way on `running` end on the
    /// counter they started on, which this table now reads): each unit's
    /// requests, by name ([`super::Units::carry`]), and each backend's
    /// requests waiting for an answer, by address (`least_request` still
    /// sees them); and each region's round-robin turns, by name (copied).
    pub fn carry(&mut self, running: &Table) {
        self.units.carry(&running.units);
        let mut waiting: HashMap<&str, &Arc<AtomicUsize>> = HashMap::new();
        for (region, loads) in running.regions.iter().zip(&running.loads) {
            for (u, load) in region.upstreams.iter().zip(loads.iter()) {
                waiting.entry(&u.pool_key).or_insert(load);
            }
        }
        for (region, loads) in self.regions.iter().zip(self.loads.iter_mut()) {
            for (u, load) in region.upstreams.iter().zip(loads.iter_mut()) {
                if let Some(&running) = waiting.get(&*u.pool_key) {
                    *load = Arc::clone(running);
                }
            }
        }
        // Each region's turns go on from the running table's, by name: a
        // reload (or a DNS refresh) never sends a region back to its first backend.
        for (i, region) in self.regions.iter().enumerate() {
            let (Some(before), Ok(i)) = (running.region_by_name(&region.name), u16::try_from(i)) else { continue };
            for via_peer in [false, true] {
                let at = running.turn(before, via_peer).load(Ordering::Relaxed);
                self.turn(RegionId(i), via_peer).store(at, Ordering::Relaxed);
            }
        }
    }

    /// Keeps the running values of the restart-only keys
    /// ([`crate::config::restart`]) that changed in this table, and returns
    /// their names. Fails when the region this instance serves is not in
    /// this table at all.
    pub fn keep_restart_only(&mut self, running: &Table) -> Result<Vec<&'static str>, String> {
        let (kept, new) = (&running.settings.restart, &self.settings.restart);
        let changed = kept.changed(new);
        if kept.region != new.region {
            // The served region is kept by name; its place in this table is this table's.
            self.local_region = match kept.region.as_deref() {
                None => None,
                Some(name) => Some(self.region_by_name(name).ok_or_else(|| {
                    format!("region {name:?} served by this instance is not in the new table; restart to change it")
                })?),
            };
        }
        self.settings.restart = kept.clone();
        Ok(changed)
    }
}

/// [`Rule`] with names from a table; see [`Table::explain`].
#[derive(Debug)]
pub struct Explain<'a> {
    table: &'a Table,
    rule: Rule,
}

impl fmt::Display for Explain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.table;
        match self.rule {
            Rule::Override { country, entity } => {
                f.write_str("override ")?;
                match t.country_name(country) {
                    Some(c) => f.write_str(c)?,
                    None => write!(f, "{country}")?,
                }
                f.write_str("/")?;
                match t.entity_name(entity) {
                    Some(e) => f.write_str(e),
                    None => write!(f, "{entity}"),
                }
            }
            Rule::Country { country } => match t.country_name(country) {
                Some(name) => write!(f, "country {country} ({name})"),
                None => write!(f, "country {country}"),
            },
            Rule::KeyRange { index } => match t.key_starts.get(index) {
                Some(s) => write!(f, "key range {index} (from {s:016x})"),
                None => write!(f, "key range {index}"),
            },
            Rule::TimeRange { index } => match t.time_until.get(index) {
                Some(&u) if u != u64::MAX => write!(f, "time range {index} (until unix ms {u})"),
                _ => write!(f, "time range {index} (open-ended)"),
            },
            other => other.fmt(f),
        }
    }
}

/// The routes and the router over their templates: each template maps to
/// its routes in file order (validation rejected conflicting templates).
fn compile_routes(routes: &[Route], names: &Arc<Lists>) -> (Vec<Route>, matchit::Router<Box<[usize]>>) {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (pos, r) in routes.iter().enumerate() {
        for template in &r.matches {
            match groups.iter_mut().find(|(t, _)| t == template) {
                Some((_, list)) => list.push(pos),
                None => groups.push((template.as_str(), vec![pos])),
            }
        }
    }
    let mut router = matchit::Router::new();
    for (template, list) in groups {
        // Validation inserted every template into a router of its own with
        // the same function, so this cannot fail.
        let _ = insert_template(&mut router, template, list.into_boxed_slice());
    }
    (routes.iter().map(|r| super::rules::compile(r.clone(), names)).collect(), router)
}
