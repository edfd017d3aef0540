//! `routes`: what each route matches, and how it reads, mints, fans out or searches.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::duration::Dur;

/// `routes[i]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a route mapping with name, match and id, mint, fanout or to")]
pub struct Route {
    /// Route name (metrics label, logs).
    pub name: String,
    /// What requests it matches.
    #[serde(rename = "match")]
    pub matcher: Match,
    /// Where the id is (lookup routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<IdSpec>,
    /// Placement strategy name (default `auto`).
    #[serde(default = "auto")]
    pub placement: String,
    /// Whether writes (POST, PUT, PATCH, DELETE) may go to a failover region.
    #[serde(default)]
    pub allow_failover_writes: bool,
    /// Whether reads (GET, HEAD, OPTIONS) may go to a failover region.
    #[serde(default = "yes")]
    pub allow_failover_reads: bool,
    /// The route's own attempt and request timeouts, retries and retry
    /// budget, instead of `upstream`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicySpec>,
    /// Protocols an `Upgrade` request may switch to through this route
    /// (the connection then becomes a tunnel); `h2c` is never allowed.
    #[serde(default = "default_upgrades")]
    pub upgrades: Vec<String>,
    /// How long a tunnel through this route may sit idle (default `server.tunnel_idle_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_idle_timeout: Option<Dur>,
    /// `http` (any request) or `grpc` (gRPC calls only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Mint rule (create routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mint: Option<MintSpec>,
    /// Fan-out rule (list routes answered from every region, merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<FanoutSpec>,
    /// Which regions `placement: search` asks, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchSpec>,
    /// Where a route without an id sends its requests: `local`, or `{ region: NAME }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<ToSpec>,
    /// The path (and query) the upstream is asked for, when not the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<RewriteSpec>,
    /// Fields set, added and removed on the request and the answer (after
    /// the table's `headers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeaderRulesSpec>,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

/// `routes[i].to`: `local` (this instance's region, else `default_region`),
/// or a mapping naming a region.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged, expecting = "`local`, or a mapping `{ region: NAME }`")]
pub enum ToSpec {
    /// A word: `local` is the one there is.
    Word(String),
    /// `{ region: NAME }`.
    Region(ToRegion),
}

/// `routes[i].to` as a mapping.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToRegion {
    /// The region every request of the route goes to.
    pub region: String,
}

/// `routes[i].policy`: each key, when set, replaces `upstream`'s for the route.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// One attempt, until the response head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout: Option<Dur>,
    /// The whole request, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Dur>,
    /// Retries after the first attempt (safe cases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// How much the route's requests put in the retry budget, and take out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<super::RetryBudget>,
}

pub(super) fn yes() -> bool {
    true
}

fn auto() -> String {
    "auto".to_owned()
}

fn default_upgrades() -> Vec<String> {
    vec!["websocket".to_owned()]
}

/// `headers` (every route's) and `routes[i].headers`: what is done to the
/// fields of the request going up and of the answer coming down.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRulesSpec {
    /// The request's fields, as it goes to the backends.
    #[serde(default, skip_serializing_if = "HeaderEditSpec::is_empty")]
    pub request: HeaderEditSpec,
    /// The answer's fields, as it goes to the client.
    #[serde(default, skip_serializing_if = "HeaderEditSpec::is_empty")]
    pub response: HeaderEditSpec,
}

/// One direction's field edits: removed, then set (replacing), then added.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderEditSpec {
    /// Fields removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Fields set to a value, replacing any the message has.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub set: std::collections::BTreeMap<String, String>,
    /// Fields added beside any the message has.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub add: std::collections::BTreeMap<String, String>,
}

impl HeaderEditSpec {
    /// Whether it edits nothing.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }
}

/// `routes[i].rewrite`: at most one of `strip_prefix` and `path`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RewriteSpec {
    /// A leading path to remove, in whole segments (`/api` makes `/api/v1/x` `/v1/x`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix: Option<String>,
    /// The path to ask for instead, with the route's `{param}`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `keep` (the client's query goes on) or `drop`.
    #[serde(default = "keep")]
    pub query: String,
}

fn keep() -> String {
    "keep".to_owned()
}

/// `routes[i].match`: a path template or a prefix (exactly one).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// matchit path template.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// A path prefix, in whole segments: `/static/` matches `/static`,
    /// `/static/` and everything below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Allowed methods; `None` = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
}

/// `routes[i].id`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IdSpec {
    /// Path parameter name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_param: Option<String>,
    /// Header name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// A gRPC call's metadata key (carried as a header field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    /// A field of a gRPC call's first message, by field numbers (`"2.1"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_field: Option<String>,
    /// Query parameter name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Accepted formats, tried in order.
    pub formats: Vec<String>,
}

/// `routes[i].mint`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MintSpec {
    /// Format to mint.
    pub format: String,
    /// Entity name (iUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Where the country comes from (iUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<CountrySource>,
    /// Request header that carries the minted id to the upstream (default `X-Entity-Id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// `Location` template for the response, with `{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Accept an id the client sends in `header` (idempotent retries of a
    /// create) when it is valid for this rule: the rule's format, the
    /// requested country and the rule's entity. Off: the client's id is
    /// dropped and a fresh one minted.
    #[serde(default)]
    pub accept_client_id: bool,
}

/// `routes[i].mint.country`: exactly one key.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CountrySource {
    /// Country name from this request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Country name from this query parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Always this country.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<String>,
    /// The first country (lowest id) owned by this instance's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
}

/// `routes[i].fanout`: the request goes to several regions and their JSON
/// arrays are merged into one, in order, a page at a time.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FanoutSpec {
    /// Regions asked (default: every region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<String>>,
    /// A header or query parameter naming countries (comma-separated):
    /// when the request has it, only the regions owning them are asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub countries: Option<CountryList>,
    /// The field of each answer that holds the array (default: the answer is the array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<String>,
    /// What the merged order is by (default: the time in each element's `id`).
    #[serde(default)]
    pub sort: SortSpec,
    /// `desc` (newest first, the default) or `asc`.
    #[serde(default = "desc")]
    pub order: String,
    /// Page sizes (the `limit` query parameter).
    #[serde(default)]
    pub limit: PageLimit,
    /// How long one region may take (connect to last byte).
    #[serde(default = "leg_timeout")]
    pub leg_timeout: Dur,
    /// How long the whole fan-out may take; legs still running then are failures.
    #[serde(default = "deadline")]
    pub deadline: Dur,
    /// `allow`: answer with the regions that answered and name the others;
    /// `fail`: any failed region fails the request (502, or 504 when all were timeouts).
    #[serde(default = "allow")]
    pub partial: String,
    /// Largest answer body read from one region; a larger one is that region's failure.
    #[serde(default = "max_leg_bytes")]
    pub max_leg_bytes: u64,
    /// Most regions asked at once.
    #[serde(default = "concurrency")]
    pub concurrency: u32,
}

fn desc() -> String {
    "desc".to_owned()
}

fn allow() -> String {
    "allow".to_owned()
}

fn leg_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

fn deadline() -> Dur {
    Dur(Duration::from_secs(10))
}

fn max_leg_bytes() -> u64 {
    1 << 20
}

fn concurrency() -> u32 {
    8
}

/// `routes[i].fanout.countries`: exactly one key.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CountryList {
    /// Country names from this request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Country names from this query parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// `routes[i].fanout.sort`: at most one of `id_field` and `field`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SortSpec {
    /// Order by the time embedded in the id held in this field (the default, `id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    /// Formats that id may be in (default: every format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formats: Option<Vec<String>>,
    /// Order by this field's value instead (numbers, or strings such as RFC 3339 times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// `routes[i].fanout.limit`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PageLimit {
    /// Page size when the request gives no `limit`.
    pub default: u32,
    /// Largest `limit` a request may ask for.
    pub max: u32,
}

impl Default for PageLimit {
    fn default() -> Self {
        PageLimit { default: 50, max: 1000 }
    }
}

/// `routes[i].search`: which regions `placement: search` asks.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    /// Regions asked, in this order when `sequential` (default: every region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<String>>,
    /// Ask one region at a time, in order, instead of all at once.
    #[serde(default)]
    pub sequential: bool,
    /// How long one region may take to answer.
    #[serde(default = "leg_timeout")]
    pub leg_timeout: Dur,
    /// The entity's own path (with the route's `{param}`s), whose `HEAD` says
    /// whether a region has it (default: the route's path up to its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<String>,
}
