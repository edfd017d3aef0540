//! The validated routing table: what validation makes of a
//! [`File`](super::File), every name resolved, every value typed. The table compiler
//! ([`crate::routing::Table::compile`]) lays it out for lookups without
//! parsing or skipping anything.
//!
//! Regions are referred to by their position in [`Config::regions`] (file
//! order of the names, which are sorted).

use std::fmt;

use http::{HeaderName, Method};

pub use super::fields::{FieldValue, ValuePiece, Var};
use super::settings::Settings;
use super::values::{is_h2, Upstream};
use crate::ids::{Format, Params};

/// A loaded and validated routing table.
#[derive(Clone, Debug)]
pub struct Config {
    /// The settings, typed (listeners, limits, timeouts, the restart-only values apart).
    pub settings: Settings,
    /// The region this instance serves (mesh peer).
    pub local_region: Option<usize>,
    /// Owner when a strategy finds none.
    pub default_region: Option<usize>,
    /// Regions, by name order.
    pub regions: Vec<Region>,
    /// Countries.
    pub countries: Vec<Country>,
    /// Service entities.
    pub entities: Vec<Entity>,
    /// (country, entity) → region overrides.
    pub overrides: Vec<Override>,
    /// Shard ranges.
    pub shards: Option<Shards>,
    /// Node tables.
    pub nodes: Nodes,
    /// Key-range split points (start, region), ascending.
    pub key_ranges: Vec<(u64, usize)>,
    /// Rendezvous hashing candidates (region, weight).
    pub hash: Vec<(usize, f64)>,
    /// Time ranges (exclusive end in Unix ms, `None` for the open last one; region), ascending.
    pub time_ranges: Vec<(Option<u64>, usize)>,
    /// Placement units being re-homed.
    pub moves: Vec<MoveRule>,
    /// Per-format parsing parameters.
    pub ids: Params,
    /// Routes, in file order.
    pub routes: Vec<Route>,
    /// The environment variables the text read (`${VAR}`), in order.
    pub variables: Vec<String>,
}

impl Config {
    /// What is valid but likely not what was meant, for `check` and the log.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let fixed = &self.settings.restart;
        let client_certs = fixed.server_tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        let peers = self.regions.iter().any(|r| r.peer.is_some());
        if fixed.region.is_some() && peers && self.settings.mesh.trusted_peers.is_empty() && !client_certs {
            out.push(
                "mesh.trusted_peers is empty and server.tls.client_ca is unset: this mesh peer trusts no peer, so \
                 the ids its peers mint are minted again here and their failover chains are placed again \
                 (set mesh.trusted_peers to the peers' networks)"
                    .to_string(),
            );
        }
        // Peers over HTTP/2 keep their connections in no pool of these.
        let pooled_peers = self.regions.iter().filter_map(|r| r.peer.as_ref()).any(|p| !is_h2(p.uri.scheme_str()));
        if pooled_peers && fixed.pool_idle_timeout >= fixed.header_read_timeout {
            out.push(format!(
                "upstream.pool_idle_timeout ({:?}) is not below server.header_read_timeout ({:?}): a peer with \
                 these settings closes a kept connection first, and a request that reuses it as it closes \
                 can fail (keep pool_idle_timeout below the peers' header_read_timeout)",
                fixed.pool_idle_timeout, fixed.header_read_timeout
            ));
        }
        for route in &self.routes {
            if let Some(warning) = search_of_many_paths(route) {
                out.push(warning);
            }
            let Some(f) = &route.fanout else { continue };
            let rounds = f.regions.len().div_ceil(f.concurrency.max(1));
            let needed = f.leg_timeout.saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX));
            if f.deadline < needed {
                out.push(format!(
                    "route {}: fanout.deadline ({:?}) is shorter than the {rounds} rounds of leg_timeout ({:?}) its \
                     {} regions take at concurrency {}: regions that do not answer can keep the ones after them \
                     in the list from being asked at all (raise deadline to {needed:?}, or concurrency)",
                    route.name,
                    f.deadline,
                    f.leg_timeout,
                    f.regions.len(),
                    f.concurrency
                ));
            }
            if f.max_leg_bytes > fixed.fanout_buffer_bytes {
                out.push(format!(
                    "route {}: fanout.max_leg_bytes ({}) is above server.fanout_buffer_bytes ({}), the room all \
                     fan-outs' answers share: a region's answer larger than the room fails as too_large",
                    route.name, f.max_leg_bytes, fixed.fanout_buffer_bytes
                ));
            }
        }
        out
    }
}

/// A region.
#[derive(Clone, Debug)]
pub struct Region {
    /// Its name.
    pub name: String,
    /// Its backends.
    pub upstreams: Vec<Upstream>,
    /// Each backend's weight (`balance: weighted`), in `upstreams`' order.
    pub weights: Vec<u32>,
    /// How a request picks among the backends.
    pub balance: Balance,
    /// Its shardgate (mesh peer).
    pub peer: Option<Upstream>,
    /// The region it fails over to.
    pub failover: Option<usize>,
    /// Its own `upstream` settings (the table's, with the region's keys in
    /// their place), when it has any.
    pub upstream: Option<Box<super::settings::UpstreamPolicy>>,
}

/// How a request picks among a region's backends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// Each in turn.
    #[default]
    RoundRobin,
    /// The one with fewer requests waiting for an answer, of two picked at random.
    LeastRequest,
    /// Each in turn, as many times in a row as its weight.
    Weighted,
}

impl Balance {
    /// Every policy, with its name in the table.
    pub const ALL: [(&'static str, Balance); 3] = [
        ("round_robin", Balance::RoundRobin),
        ("least_request", Balance::LeastRequest),
        ("weighted", Balance::Weighted),
    ];
}

/// A country: its name, its 8-bit id and its owning region.
#[derive(Clone, Debug)]
pub struct Country {
    /// Name (`KZ`).
    pub name: String,
    /// The id stored in iUIDs.
    pub id: u8,
    /// Owning region.
    pub region: usize,
}

/// A placement unit being re-homed (`moves[i]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveRule {
    /// The unit, named as [`crate::routing::Units`] names it.
    pub unit: String,
    /// The region it moves to.
    pub to: usize,
    /// Where the move stands.
    pub phase: crate::config::schema::MovePhase,
    /// The unit's epoch.
    pub epoch: u64,
    /// Hold reads too, not only writes.
    pub hold_all: bool,
    /// Most requests held at once on one instance.
    pub max_requests: usize,
    /// Longest a request is held.
    pub max_time: std::time::Duration,
    /// Held requests released per second.
    pub release_rate: u32,
}

/// A service entity: its name and 8-bit code.
#[derive(Clone, Debug)]
pub struct Entity {
    /// Name (`IntercityOrder`).
    pub name: String,
    /// The code stored in iUIDs.
    pub code: u8,
}

/// A (country, entity) override.
#[derive(Clone, Copy, Debug)]
pub struct Override {
    /// Country id.
    pub country: u8,
    /// Entity code.
    pub entity: u8,
    /// Owning region.
    pub region: usize,
}

/// uniqid shards: how many, and which region owns each range.
#[derive(Clone, Debug)]
pub struct Shards {
    /// Shards are `0..count`.
    pub count: u32,
    /// Inclusive ranges and their region; together they cover every shard once.
    pub ranges: Vec<(u32, u32, usize)>,
}

/// The node tables, key → region.
#[derive(Clone, Debug, Default)]
pub struct Nodes {
    /// Locality MAC fragment.
    pub locality_mac: Vec<(u32, usize)>,
    /// Locality pid.
    pub locality_pid: Vec<(u16, usize)>,
    /// Snowflake datacenter id.
    pub snowflake_datacenter: Vec<(u64, usize)>,
    /// Snowflake worker id.
    pub snowflake_worker: Vec<(u64, usize)>,
    /// Sonyflake machine id.
    pub sonyflake_machine: Vec<(u16, usize)>,
    /// Instagram logical shard ranges (inclusive).
    pub instagram_shard: Vec<(u16, u16, usize)>,
}

/// A search route whose id is not in its path, on a route that matches
/// many paths, and no `search.exists`: every read of any of its paths is
/// asked of the regions as a read of the entity itself.
fn search_of_many_paths(route: &Route) -> Option<String> {
    let (search, id) = (route.search.as_ref()?, route.id.as_ref()?);
    let many_paths = route.matches.len() > 1 || route.template.contains('{');
    let in_path = matches!(id.source, IdSource::PathParam(_));
    (search.exists.is_none() && !in_path && many_paths).then(|| {
        format!(
            "route {}: placement search reads its id outside the path, on a route of many paths, without \
             search.exists: a read of any of its paths counts as a read of the entity itself, so a region \
             that answers one (a list, 200 []) without holding the entity is remembered as its owner (set \
             search.exists to the entity's own path)",
            route.name
        )
    })
}

/// A route.
#[derive(Clone, Debug)]
pub struct Route {
    /// Position in the file's `routes` list.
    pub index: usize,
    /// Route name (metrics label, logs).
    pub name: String,
    /// Its path template as shown (a prefix route's is its catch-all template).
    pub template: String,
    /// The matchit templates it is matched by: its path template, or a
    /// prefix's (`/static`, `/static/`, `/static/{*rest}`).
    pub matches: Vec<String>,
    /// Allowed methods; `None` = all. A route that allows GET also matches HEAD.
    pub methods: Option<Vec<Method>>,
    /// Where the id is (lookup routes).
    pub id: Option<IdRule>,
    /// How to mint (create routes).
    pub mint: Option<MintRule>,
    /// How to fan out and merge (list routes).
    pub fanout: Option<FanoutRule>,
    /// Which regions to ask (`placement: search`).
    pub search: Option<SearchRule>,
    /// Placement strategy.
    pub strategy: Strategy,
    /// Whether writes (POST, PUT, PATCH, DELETE) may be sent to a failover region.
    pub allow_failover_writes: bool,
    /// Whether reads (GET, HEAD, OPTIONS) may be sent to a failover region.
    pub allow_failover_reads: bool,
    /// The route's timeouts, retries and retry budget in each region (by
    /// position), when it has its own: the region's settings (else
    /// `upstream`'s), with the route's `policy` keys in their place.
    pub policy: Option<Box<[super::settings::UpstreamPolicy]>>,
    /// Protocols `Upgrade` may switch to through this route, lowercase.
    pub upgrades: Vec<String>,
    /// Whether the route carries gRPC calls only (`protocol: grpc`).
    pub grpc_only: bool,
    /// How long a tunnel through this route may sit idle.
    pub tunnel_idle_timeout: std::time::Duration,
    /// Where a route without an id sends every request.
    pub to: Option<To>,
    /// The path and query the upstream is asked for, when not the client's.
    pub rewrite: Option<Rewrite>,
    /// Field edits of the request and the answer: the table's, then the route's.
    pub headers: HeaderRules,
}

/// The field edits of a route, in the order they apply: the table's
/// `headers`, then the route's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderRules {
    /// Of the request going to the backends.
    pub request: Vec<HeaderEdit>,
    /// Of the answer going to the client.
    pub response: Vec<HeaderEdit>,
    /// `request`, made once against the table's names when the table is
    /// built; `None` without edits.
    pub request_rules: Option<std::sync::Arc<crate::http1::rules::Rules>>,
    /// `response`, likewise.
    pub response_rules: Option<std::sync::Arc<crate::http1::rules::Rules>>,
}

/// One set of field edits: removed, then set, then added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderEdit {
    /// Fields removed.
    pub remove: Vec<HeaderName>,
    /// Fields set, replacing the message's.
    pub set: Vec<(HeaderName, FieldValue)>,
    /// Fields added beside the message's.
    pub add: Vec<(HeaderName, FieldValue)>,
}

/// A route's rewrite of the request target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The path.
    pub path: RewritePath,
    /// Whether the client's query goes on.
    pub keep_query: bool,
}

/// How a rewrite makes the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RewritePath {
    /// The client's path, as it is.
    Same,
    /// The client's path without this leading path (whole segments, no trailing `/`).
    StripPrefix(String),
    /// This template, filled with the route's parameters.
    Template(crate::config::template::PathTemplate),
}

/// Where a route without an id sends its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// This region (position in [`Config::regions`]).
    Region(usize),
    /// The instance's own region (`region:`), else `default_region`.
    Local,
}

impl Route {
    /// What the route routes by, as the dashboard and `/explain` name it:
    /// `local` or `region` (by its path alone), `fanout`, `create`, or the
    /// placement strategy of the id it reads.
    pub fn kind(&self) -> &'static str {
        match (&self.to, &self.fanout, &self.mint) {
            (Some(To::Local), _, _) => "local",
            (Some(To::Region(_)), _, _) => "region",
            (None, Some(_), _) => "fanout",
            (None, None, Some(_)) => "create",
            (None, None, None) => self.strategy.name(),
        }
    }

    /// Whether the route accepts `method` (GET routes also accept HEAD).
    pub fn allows(&self, method: &Method) -> bool {
        match &self.methods {
            None => true,
            Some(list) => list.contains(method) || (method == Method::HEAD && list.contains(&Method::GET)),
        }
    }
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
    Header(HeaderName),
    /// A query parameter.
    Query(String),
    /// A field of a gRPC call's first message, by field numbers (`2.1`).
    GrpcField(crate::grpc::field::FieldPath),
}

/// How a create route mints its id.
#[derive(Clone, Debug)]
pub struct MintRule {
    /// Format to mint (always mintable).
    pub format: Format,
    /// Service entity code (iUID).
    pub entity: Option<u8>,
    /// Where the country comes from (iUID, uniqid).
    pub country: Option<CountrySource>,
    /// Header carrying the minted id to the upstream.
    pub header: HeaderName,
    /// `Location` template with `{id}`.
    pub location: Option<String>,
    /// Whether a client-supplied id that is valid for this rule is kept.
    pub accept_client_id: bool,
}

/// Where a mint rule's country comes from.
#[derive(Clone, Debug)]
pub enum CountrySource {
    /// Country name in this request header.
    Header(HeaderName),
    /// Country name in this query parameter.
    Query(String),
    /// A fixed country id.
    Fixed(u8),
    /// The local region's first country.
    Local(u8),
}

/// A fan-out route: which regions are asked and how their answers merge.
#[derive(Clone, Debug)]
pub struct FanoutRule {
    /// Regions asked, by position (every region unless the route names some).
    pub regions: Vec<usize>,
    /// Where the request may name countries, narrowing `regions` to their owners.
    pub countries: Option<ListSource>,
    /// How answers merge.
    pub merge: crate::merge::Spec,
    /// Page size without a `limit` parameter.
    pub limit_default: u32,
    /// Largest `limit`.
    pub limit_max: u32,
    /// Time one region may take.
    pub leg_timeout: std::time::Duration,
    /// Time the whole fan-out may take.
    pub deadline: std::time::Duration,
    /// Whether every region must answer (`partial: fail`).
    pub require_all: bool,
    /// Largest answer body read from one region.
    pub max_leg_bytes: usize,
    /// Most regions asked at once.
    pub concurrency: usize,
}

/// Where a list of comma-separated names is read from.
#[derive(Clone, Debug)]
pub enum ListSource {
    /// A request header.
    Header(HeaderName),
    /// A query parameter.
    Query(String),
}

/// A `placement: search` route: which regions are asked, and how.
#[derive(Clone, Debug)]
pub struct SearchRule {
    /// Regions asked, by position, in order.
    pub regions: Vec<usize>,
    /// One region at a time, in order, instead of all at once.
    pub sequential: bool,
    /// Time one region may take.
    pub leg_timeout: std::time::Duration,
    /// The entity's own path, whose `HEAD` says whether a region has it;
    /// `None`: the request's own path is the entity's.
    pub exists: Option<super::template::PathTemplate>,
}

/// How a route places its ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The natural strategy of the decoded id's format.
    Auto,
    /// iUID country × entity table (overrides first).
    Country,
    /// uniqid shard ranges.
    Shard,
    /// Node tables (Locality MAC/pid, Snowflake datacenter/worker, Sonyflake machine, Instagram shard).
    Node,
    /// HBase-style split points over the key hash.
    KeyRange,
    /// Rendezvous hashing over the key hash.
    Hash,
    /// Time ranges over the embedded timestamp.
    TimeRange,
    /// No table: ask the regions, remember where the id was found.
    Search,
}

impl Strategy {
    /// Every strategy, in documentation order.
    pub const ALL: [Strategy; 8] = [
        Strategy::Auto,
        Strategy::Country,
        Strategy::Shard,
        Strategy::Node,
        Strategy::KeyRange,
        Strategy::Hash,
        Strategy::TimeRange,
        Strategy::Search,
    ];

    /// The configuration name (`auto`, `country`, `shard`, `node`, `key_range`, `hash`, `time_range`, `search`).
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Country => "country",
            Strategy::Shard => "shard",
            Strategy::Node => "node",
            Strategy::KeyRange => "key_range",
            Strategy::Hash => "hash",
            Strategy::TimeRange => "time_range",
            Strategy::Search => "search",
        }
    }

    /// Looks a strategy up by its configuration name.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
