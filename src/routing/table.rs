//! The compiled routing table: immutable, indexed for placement and matching.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;

use crate::config::raw::{Config, Flavor, LocalityModeName};
pub use crate::config::raw::{Log as LogSettings, Server as ServerSettings, UpstreamSettings};
use crate::config::validate::{parse_decimal, parse_mac_fragment};
use crate::ids::{self, Format, LocalityMode, NodeIdentity};

use super::rule::{Rule, Strategy};

/// Sentinel for "no region" in the flat arrays.
pub(crate) const NONE: u16 = u16::MAX;
/// Set on country×entity cells that come from an override.
pub(crate) const OVERRIDE_FLAG: u16 = 0x8000;

/// An interned region: an index into [`Table::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u16);

/// Most `{parameters}` a route's path template may have. matchit (0.8)
/// panics when a template has more than 26, so [`insert_template`] counts
/// them before a template reaches it; no real route needs more than a handful.
pub const MAX_TEMPLATE_PARAMS: usize = 16;

/// Why a path template cannot go into the router.
#[derive(Debug)]
pub enum TemplateError {
    /// More than [`MAX_TEMPLATE_PARAMS`] parameters (at most this many).
    TooManyParams(usize),
    /// matchit refused it (a conflict or a malformed parameter).
    Router(matchit::InsertError),
}

/// Inserts `template` into `router`: the one place templates reach matchit,
/// for validation and for the compiled table alike.
pub fn insert_template<T>(router: &mut matchit::Router<T>, template: &str, value: T) -> Result<(), TemplateError> {
    let params = template_params(template);
    if params > MAX_TEMPLATE_PARAMS {
        return Err(TemplateError::TooManyParams(params));
    }
    router.insert(template, value).map_err(TemplateError::Router)
}

/// An upper bound of the parameters in a path template: every `{` that is
/// not an escaped `{{` (matchit pairs escapes the same way, left to right).
fn template_params(template: &str) -> usize {
    let b = template.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] == b'{' {
            if b.get(i + 1) == Some(&b'{') {
                i += 2;
                continue;
            }
            n += 1;
        }
        i += 1;
    }
    n
}

/// A region, compiled.
#[derive(Clone, Debug)]
pub struct Region {
    /// Name from the file.
    pub name: String,
    /// Backends.
    pub upstreams: Vec<Upstream>,
    /// Mesh peer (another shardgate).
    pub peer: Option<Upstream>,
    /// Failover region.
    pub failover: Option<RegionId>,
}

/// One upstream endpoint.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// The full URI as written (`http://host:port`).
    pub uri: http::Uri,
    /// `http` or `https`.
    pub scheme: http::uri::Scheme,
    /// `host:port`.
    pub authority: http::uri::Authority,
    /// The `Host` header sent to it: the host, and the port unless it is
    /// the scheme's default (what an HTTP client would send). Built once
    /// here rather than formatted per request.
    pub host: http::HeaderValue,
    /// `scheme://authority`: the key its kept connections are listed under.
    pub pool_key: Box<str>,
}

impl Upstream {
    /// The endpoint at `uri`; `None` without a scheme and an authority.
    pub fn new(uri: &http::Uri) -> Option<Upstream> {
        let scheme = uri.scheme()?.clone();
        let authority = uri.authority()?.clone();
        let default_port = if scheme == http::uri::Scheme::HTTPS { 443 } else { 80 };
        let host = match authority.port_u16() {
            Some(port) if port != default_port => format!("{}:{port}", authority.host()),
            _ => authority.host().to_string(),
        };
        let host = http::HeaderValue::from_str(&host).ok()?;
        let pool_key = format!("{scheme}://{authority}").into_boxed_str();
        Some(Upstream { uri: uri.clone(), scheme, authority, host, pool_key })
    }
}

/// A compiled route.
#[derive(Clone, Debug)]
pub struct Route {
    /// Position in the file's `routes` list.
    pub index: usize,
    /// Route name.
    pub name: String,
    /// matchit path template.
    pub template: String,
    /// Allowed methods; `None` = all. A route that allows GET also matches HEAD.
    pub methods: Option<Vec<http::Method>>,
    /// Where the id is (lookup routes).
    pub id: Option<IdRule>,
    /// How to mint (create routes).
    pub mint: Option<MintRule>,
    /// Placement strategy.
    pub strategy: Strategy,
    /// Whether non-idempotent requests may be sent to a failover region.
    pub allow_failover_writes: bool,
    /// Protocols `Upgrade` may switch to through this route, lowercase.
    pub upgrades: Vec<String>,
}

/// Where a route's id is and which formats it may be in.
#[derive(Clone, Debug)]
pub struct IdRule {
    /// Where to read it.
    pub source: IdSource,
    /// Accepted formats, tried in order.
    pub formats: Vec<Format>,
}

/// Where an id is read from.
#[derive(Clone, Debug)]
pub enum IdSource {
    /// A path parameter of the template.
    PathParam(String),
    /// A request header.
    Header(http::HeaderName),
    /// A query parameter.
    Query(String),
}

/// How a create route mints its id.
#[derive(Clone, Debug)]
pub struct MintRule {
    /// Format to mint (always mintable).
    pub format: Format,
    /// Service entity code (iUID).
    pub entity: Option<u8>,
    /// Where the country comes from (iUID).
    pub country: Option<CountrySource>,
    /// Header carrying the minted id to the upstream.
    pub header: http::HeaderName,
    /// `Location` template with `{id}`.
    pub location: Option<String>,
    /// Whether a client-supplied id that is valid for this rule is kept.
    pub accept_client_id: bool,
}

/// Where a mint rule's country comes from.
#[derive(Clone, Debug)]
pub enum CountrySource {
    /// Country name in this request header.
    Header(http::HeaderName),
    /// Country name in this query parameter.
    Query(String),
    /// A fixed country id.
    Fixed(u8),
    /// The local region's first country (resolved at compile time).
    Local(u8),
}

/// A route matched by method and path.
#[derive(Debug)]
pub struct RouteMatch<'a> {
    /// The route.
    pub route: &'a Route,
    /// Path parameters.
    pub params: matchit::Params<'a, 'a>,
}

/// Settings with defaults filled in, typed.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Proxy listener (restart-only).
    pub listen: SocketAddr,
    /// Admin listener (restart-only).
    pub admin: SocketAddr,
    /// Name for `Forwarded: by=`.
    pub instance: String,
    /// Inbound server limits and timeouts (`server:`, defaults filled in).
    pub server: ServerSettings,
    /// Upstream client policy (`upstream:`, defaults filled in).
    pub upstream: UpstreamSettings,
    /// Most shardgate hops a request may take.
    pub max_hops: u32,
    /// Peers whose mesh headers are honoured on connections without client certificates.
    pub trusted_peers: Vec<crate::config::raw::Cidr>,
    /// Node identity for minting Locality UUIDs, when configured.
    pub locality_node: Option<NodeIdentity>,
    /// Locality minting mode.
    pub locality_mode: LocalityMode,
    /// Shard count for minting uniqid ids (`ids.uniqid.total_shards` or `shards.count`).
    pub uniqid_mint_shards: Option<u32>,
    /// Access-log settings (`log:`, defaults filled in).
    pub log: LogSettings,
    /// The batch mint endpoint (`mint_batch:`).
    pub mint_batch: crate::config::raw::MintBatch,
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
    entities: HashMap<String, u8>,
    entity_names: Vec<Option<String>>,
    settings: Settings,
    counts: Counts,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    overrides: usize,
    node_entries: usize,
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
    /// Compiles a validated config. Never fails: anything a validated config
    /// cannot contain is skipped.
    pub fn compile(cfg: &Config) -> Table {
        let mut region_index = HashMap::with_capacity(cfg.regions.len());
        for (i, name) in cfg.regions.keys().enumerate() {
            let id = u16::try_from(i).unwrap_or(NONE - 1).min(OVERRIDE_FLAG - 1);
            region_index.insert(name.clone(), RegionId(id));
        }
        let rid = |name: &str| region_index.get(name).copied();
        let raw_id = |name: &str| rid(name).map_or(NONE, |r| r.0);
        let regions = cfg
            .regions
            .iter()
            .map(|(name, r)| Region {
                name: name.clone(),
                upstreams: r.upstreams.iter().filter_map(|u| Upstream::new(&u.0)).collect(),
                peer: r.peer.as_ref().and_then(|u| Upstream::new(&u.0)),
                failover: r.failover.as_deref().and_then(rid),
            })
            .collect();

        let mut countries = HashMap::new();
        let mut country_names = vec![None; 256];
        let mut country_entity = vec![NONE; 1 << 16].into_boxed_slice();
        for (name, c) in &cfg.countries {
            let Ok(id) = u8::try_from(c.id) else { continue };
            countries.insert(name.clone(), id);
            country_names[usize::from(id)] = Some(name.clone());
            let r = raw_id(&c.region);
            let base = usize::from(id) << 8;
            country_entity[base..base + 256].fill(r);
        }
        let mut entities = HashMap::new();
        let mut entity_names = vec![None; 256];
        for (name, code) in &cfg.entities {
            let Ok(code) = u8::try_from(*code) else { continue };
            entities.insert(name.clone(), code);
            entity_names[usize::from(code)] = Some(name.clone());
        }
        for o in &cfg.overrides {
            let (Some(&c), Some(&e), Some(r)) = (countries.get(&o.country), entities.get(&o.entity), rid(&o.region))
            else {
                continue;
            };
            country_entity[(usize::from(c) << 8) | usize::from(e)] = r.0 | OVERRIDE_FLAG;
        }

        let mut shards = Vec::new().into_boxed_slice();
        if let Some(sh) = &cfg.shards {
            let mut v = vec![NONE; sh.count as usize];
            for (region, ranges) in &sh.regions {
                let r = raw_id(region);
                for &(a, b) in &ranges.0 {
                    if let Some(slice) = v.get_mut(a as usize..=b as usize) {
                        slice.fill(r);
                    }
                }
            }
            shards = v.into_boxed_slice();
        }

        let node_map = |entries: &std::collections::BTreeMap<String, String>, parse: &dyn Fn(&str) -> Option<u64>| {
            let mut m = IntMap::default();
            for (k, region) in entries {
                if let (Some(k), Some(r)) = (parse(k), rid(region)) {
                    m.insert(k, r.0);
                }
            }
            m
        };
        let n = &cfg.nodes;
        let locality_mac = node_map(&n.locality_mac, &|k| parse_mac_fragment(k).map(u64::from));
        let locality_pid = node_map(&n.locality_pid, &|k| parse_decimal(k, 65_535));
        let snowflake_dc = node_map(&n.snowflake_datacenter, &|k| parse_decimal(k, u64::MAX));
        let snowflake_worker = node_map(&n.snowflake_worker, &|k| parse_decimal(k, u64::MAX));
        let sonyflake_machine = node_map(&n.sonyflake_machine, &|k| parse_decimal(k, 65_535));
        let mut instagram_shard = vec![NONE; 8192].into_boxed_slice();
        for (k, region) in &n.instagram_shard {
            if let Ok((a, b)) = crate::config::raw::parse_range(k) {
                if let Some(s) = instagram_shard.get_mut(a as usize..=b as usize) {
                    s.fill(raw_id(region));
                }
            }
        }

        let key_starts = cfg.key_ranges.iter().map(|r| r.start.0).collect();
        let key_regions = cfg.key_ranges.iter().map(|r| raw_id(&r.region)).collect();
        let mut hash = Vec::new();
        let mut hash_weighted = false;
        if let Some(h) = &cfg.hash {
            for name in &h.regions {
                if let Some(r) = rid(name) {
                    let weight = h.weights.get(name).copied().unwrap_or(1.0);
                    hash_weighted |= weight != 1.0;
                    hash.push(HashCandidate { region: r.0, seed: name_seed(name), weight });
                }
            }
        }
        let time_until = cfg.time_ranges.iter().map(|t| t.until.map_or(u64::MAX, |u| u.0)).collect();
        let time_regions = cfg.time_ranges.iter().map(|t| raw_id(&t.region)).collect();

        let local_region = cfg.region.as_deref().and_then(rid);
        let default_region = cfg.default_region.as_deref().and_then(rid);
        let (routes, router) = compile_routes(cfg, &countries, &entities, local_region);

        let ip = &cfg.ids;
        let shard_count = cfg.shards.as_ref().map(|s| s.count);
        let params = ids::Params {
            uniqid_total_shards: if ip.uniqid.strict { ip.uniqid.total_shards.or(shard_count) } else { None },
            snowflake: ids::SnowflakeLayout {
                epoch_ms: ip.snowflake.epoch_ms,
                datacenter_bits: ip.snowflake.datacenter_bits,
                worker_bits: ip.snowflake.worker_bits,
                sequence_bits: ip.snowflake.sequence_bits,
            },
            sonyflake: match ip.sonyflake.flavor {
                Flavor::V1 => ids::SonyflakeFlavor::V1,
                Flavor::V2 => ids::SonyflakeFlavor::V2,
            },
            instagram: ids::InstagramLayout { epoch_ms: ip.instagram.epoch_ms },
        };
        let locality_node = match (&ip.locality.mac_fragment, ip.locality.pid) {
            (None, None) => None,
            (mac, pid) => Some(NodeIdentity {
                pid: pid.unwrap_or(0),
                mac_fragment: mac.as_deref().and_then(parse_mac_fragment).unwrap_or(0),
            }),
        };
        let instance = cfg.instance.clone().unwrap_or_else(|| match &cfg.region {
            Some(r) => format!("shardgate-{r}"),
            None => "shardgate".to_owned(),
        });
        let settings = Settings {
            listen: cfg.listen,
            admin: cfg.admin,
            instance,
            server: cfg.server.clone(),
            upstream: cfg.upstream.clone(),
            max_hops: cfg.mesh.max_hops,
            trusted_peers: cfg.mesh.trusted_peers.clone(),
            locality_node,
            locality_mode: match ip.locality.mode {
                LocalityModeName::Variable => LocalityMode::Variable,
                LocalityModeName::Sequential => LocalityMode::Sequential,
            },
            uniqid_mint_shards: ip.uniqid.total_shards.or(shard_count),
            log: cfg.log.clone(),
            mint_batch: cfg.mint_batch.clone(),
        };
        let counts = Counts {
            overrides: cfg.overrides.len(),
            node_entries: n.locality_mac.len()
                + n.locality_pid.len()
                + n.snowflake_datacenter.len()
                + n.snowflake_worker.len()
                + n.sonyflake_machine.len()
                + n.instagram_shard.len(),
        };

        Table {
            regions,
            region_index,
            local_region,
            default_region,
            country_entity,
            shards,
            locality_mac,
            locality_pid,
            snowflake_dc,
            snowflake_worker,
            sonyflake_machine,
            instagram_shard,
            key_starts,
            key_regions,
            hash: hash.into_boxed_slice(),
            hash_weighted,
            time_until,
            time_regions,
            routes,
            router,
            params,
            countries,
            country_names,
            entities,
            entity_names,
            settings,
            counts,
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

    /// All routes, in file order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// A region by id.
    ///
    /// Ids come from this table; an id from another table that is out of
    /// range yields an empty placeholder region rather than a panic.
    pub fn region(&self, id: RegionId) -> &Region {
        static UNKNOWN: Region = Region { name: String::new(), upstreams: Vec::new(), peer: None, failover: None };
        self.regions.get(usize::from(id.0)).unwrap_or(&UNKNOWN)
    }

    /// All regions; `RegionId(i)` is `regions()[i]`.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// A region by name.
    pub fn region_by_name(&self, name: &str) -> Option<RegionId> {
        self.region_index.get(name).copied()
    }

    /// The region this instance serves (`region:`), if any.
    pub fn local_region(&self) -> Option<RegionId> {
        self.local_region
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
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A human explanation of a rule with names, e.g. `override KZ/WalletAccount`
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

    /// Keeps the restart-only settings of `running` (listen, admin, region,
    /// server.tls, upstream.tls)
    /// and returns the names of those that differ in this table.
    pub fn keep_restart_only(&mut self, running: &Table) -> Result<Vec<&'static str>, String> {
        let mut changed = Vec::new();
        if self.settings.listen != running.settings.listen {
            changed.push("listen");
            self.settings.listen = running.settings.listen;
        }
        if self.settings.admin != running.settings.admin {
            changed.push("admin");
            self.settings.admin = running.settings.admin;
        }
        if self.settings.server.tls != running.settings.server.tls {
            changed.push("server.tls");
            self.settings.server.tls = running.settings.server.tls.clone();
        }
        if self.settings.upstream.tls != running.settings.upstream.tls {
            changed.push("upstream.tls");
            self.settings.upstream.tls = running.settings.upstream.tls.clone();
        }
        let old = running.local_region.map(|r| running.region(r).name.as_str());
        let new = self.local_region.map(|r| self.region(r).name.as_str());
        if old != new {
            changed.push("region");
            self.local_region = match old {
                None => None,
                Some(name) => Some(self.region_by_name(name).ok_or_else(|| {
                    format!("region {name:?} served by this instance is not in the new table; restart to change it")
                })?),
            };
        }
        Ok(changed)
    }
}

impl Route {
    /// Whether the route accepts `method` (GET routes also accept HEAD).
    pub fn allows(&self, method: &http::Method) -> bool {
        match &self.methods {
            None => true,
            Some(list) => list.contains(method) || (method == http::Method::HEAD && list.contains(&http::Method::GET)),
        }
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

fn compile_routes(
    cfg: &Config,
    countries: &HashMap<String, u8>,
    entities: &HashMap<String, u8>,
    local_region: Option<RegionId>,
) -> (Vec<Route>, matchit::Router<Box<[usize]>>) {
    let local_country = local_region.and_then(|_| {
        let local = cfg.region.as_deref()?;
        cfg.countries.values().filter(|c| c.region == local).filter_map(|c| u8::try_from(c.id).ok()).min()
    });
    let mut routes = Vec::with_capacity(cfg.routes.len());
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for r in &cfg.routes {
        let methods = r
            .matcher
            .methods
            .as_ref()
            .map(|ms| ms.iter().filter_map(|m| http::Method::from_bytes(m.as_bytes()).ok()).collect::<Vec<_>>());
        let id = r.id.as_ref().and_then(|id| {
            let source = if let Some(p) = &id.path_param {
                IdSource::PathParam(p.clone())
            } else if let Some(h) = &id.header {
                IdSource::Header(http::HeaderName::from_bytes(h.as_bytes()).ok()?)
            } else {
                IdSource::Query(id.query.clone()?)
            };
            Some(IdRule { source, formats: id.formats.iter().filter_map(|f| Format::from_name(f)).collect() })
        });
        let mint = r.mint.as_ref().and_then(|m| {
            let country = m.country.as_ref().and_then(|c| {
                if let Some(h) = &c.header {
                    http::HeaderName::from_bytes(h.as_bytes()).ok().map(CountrySource::Header)
                } else if let Some(q) = &c.query {
                    Some(CountrySource::Query(q.clone()))
                } else if let Some(fx) = &c.fixed {
                    countries.get(fx).copied().map(CountrySource::Fixed)
                } else {
                    local_country.map(CountrySource::Local)
                }
            });
            Some(MintRule {
                format: Format::from_name(&m.format)?,
                entity: m.entity.as_ref().and_then(|e| entities.get(e).copied()),
                country,
                header: m
                    .header
                    .as_deref()
                    .and_then(|h| http::HeaderName::from_bytes(h.as_bytes()).ok())
                    .unwrap_or(http::HeaderName::from_static("x-entity-id")),
                location: m.location.clone(),
                accept_client_id: m.accept_client_id,
            })
        });
        let pos = routes.len();
        routes.push(Route {
            index: r.index,
            name: r.name.clone(),
            template: r.matcher.path.clone(),
            methods,
            id,
            mint,
            strategy: Strategy::from_name(&r.placement).unwrap_or(Strategy::Auto),
            allow_failover_writes: r.allow_failover_writes,
            upgrades: r.upgrades.iter().map(|u| u.to_ascii_lowercase()).collect(),
        });
        match groups.iter_mut().find(|(t, _)| *t == r.matcher.path) {
            Some((_, list)) => list.push(pos),
            None => groups.push((r.matcher.path.clone(), vec![pos])),
        }
    }
    let mut router = matchit::Router::new();
    for (template, list) in groups {
        // Validation rejected conflicts and oversized templates; a failure
        // here only drops the template.
        let _ = insert_template(&mut router, &template, list.into_boxed_slice());
    }
    (routes, router)
}

#[cfg(test)]
mod tests {
    use super::{insert_template, template_params, TemplateError, Upstream, MAX_TEMPLATE_PARAMS};

    #[test]
    fn template_parameters_are_counted_before_matchit_sees_them() {
        assert_eq!(template_params("/v1/orders/{id}"), 1);
        assert_eq!(template_params("/v1/{a}/{b}/{*rest}"), 3);
        assert_eq!(template_params("/v1/{{literal}}/{id}"), 1);
        assert_eq!(template_params("/{{{id}"), 1);
        // Past matchit's limit: refused before matchit (which would panic) sees it.
        let params = |n: usize| -> String { (0..n).map(|i| format!("/{{p{i}}}")).collect() };
        let mut router = matchit::Router::new();
        assert!(matches!(insert_template(&mut router, &params(30), 0usize), Err(TemplateError::TooManyParams(30))));
        assert!(router.at("/x").is_err());
        assert!(insert_template(&mut router, &params(MAX_TEMPLATE_PARAMS), 1).is_ok());
        assert!(matches!(insert_template(&mut router, "/{}", 2), Err(TemplateError::Router(_))));
    }

    #[test]
    fn host_header_leaves_out_the_default_port() {
        for (uri, host) in [
            ("http://a.example:80", "a.example"),
            ("http://a.example", "a.example"),
            ("https://a.example:443", "a.example"),
            ("http://a.example:443", "a.example:443"),
            ("http://127.0.0.1:8080", "127.0.0.1:8080"),
            ("https://[::1]:8443", "[::1]:8443"),
        ] {
            let up = Upstream::new(&http::Uri::from_static(uri));
            assert_eq!(up.map(|u| u.host), Some(http::HeaderValue::from_static(host)), "{uri}");
        }
    }
}
