//! The schema of the routing table file: one serde struct per section, as
//! the file is written, defaults filled in ([`File`]).
//!
//! Each struct rejects unknown fields; key names and meanings are documented
//! in `docs/config.md`. Values that have a syntax of their own are parsed by
//! their own `Deserialize` ([`super::values`]) so a bad one is reported at its
//! exact path; names that refer to other parts of the file (regions,
//! countries, entities, formats, methods) stay strings here: validation
//! resolves them into the typed [`super::Config`].
//!
//! Routes, the longest section, are in `routes.rs`; regions and `upstream`
//! in `upstream.rs`.
//!
//! The key lists the YAML walker checks unknown keys against
//! ([`super::keys::shape`]) are taken from these types themselves, so the
//! two cannot drift.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::Dur;
use super::values::{Cidr, KeyStart, RangeList, TimeSpec};

mod routes;
mod upstream;

pub use routes::*;
pub use upstream::*;

/// A routing table file as written, defaults filled in (not yet validated:
/// names are strings, references unresolved).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Schema version; only `1` exists.
    pub version: u32,
    /// Proxy listener address (restart-only).
    pub listen: SocketAddr,
    /// Admin listener address (restart-only).
    pub admin: SocketAddr,
    /// The region this instance serves, when it runs as a mesh peer (restart-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Name used in `Forwarded: by=`; `None` means the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Region used when a strategy finds no owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_region: Option<String>,
    /// Regions by name.
    pub regions: BTreeMap<String, Region>,
    /// Countries by name.
    pub countries: BTreeMap<String, Country>,
    /// Service entity codes by name (0-255, checked by validation).
    pub entities: BTreeMap<String, i64>,
    /// (country, entity) → region overrides.
    pub overrides: Vec<Override>,
    /// Shard count and ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<Shards>,
    /// Node tables.
    pub nodes: Nodes,
    /// Key-range split points.
    pub key_ranges: Vec<KeyRange>,
    /// Rendezvous hashing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<Hash>,
    /// Time ranges.
    pub time_ranges: Vec<TimeRange>,
    /// Per-format parameters.
    pub ids: Ids,
    /// Inbound server settings.
    pub server: Server,
    /// Upstream client settings.
    pub upstream: UpstreamSettings,
    /// Mesh settings.
    pub mesh: Mesh,
    /// Access-log settings.
    pub log: Log,
    /// The batch mint endpoint (disabled unless `path` is set).
    pub mint_batch: MintBatch,
    /// Where `placement: search` routes remember the regions ids were found in.
    pub search_cache: SearchCache,
    /// OpenTelemetry traces (off unless an OTLP endpoint is set here or in `OTEL_*`).
    pub telemetry: Telemetry,
    /// Placement units being re-homed, and the phase each is in.
    pub moves: Vec<Move>,
    /// Field edits of every route's requests and answers (before the route's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeaderRulesSpec>,
    /// Routes, in file order.
    pub routes: Vec<Route>,
}

/// Default proxy listener.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default admin listener.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9901";

/// `countries.<name>`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a country mapping such as { id: 7, region: kz }")]
pub struct Country {
    /// The 8-bit country id stored in iUIDs (0-255, checked by validation).
    pub id: i64,
    /// Owning region.
    pub region: String,
}

/// `overrides[i]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "an override such as { country: KZ, entity: WalletAccount, region: eu }")]
pub struct Override {
    /// Country name.
    pub country: String,
    /// Entity name.
    pub entity: String,
    /// Owning region for this pair.
    pub region: String,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

/// `shards`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Shards {
    /// Number of shards; shards are `0..count`.
    pub count: u32,
    /// Shard ranges per region.
    pub regions: BTreeMap<String, RangeList>,
}

/// `nodes`: node tables, key text → region name (keys checked by validation).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Nodes {
    /// Locality UUID MAC fragment (7 hex digits) → region.
    pub locality_mac: BTreeMap<String, String>,
    /// Locality UUID pid (0-65535) → region.
    pub locality_pid: BTreeMap<String, String>,
    /// Snowflake datacenter id → region.
    pub snowflake_datacenter: BTreeMap<String, String>,
    /// Snowflake worker id → region.
    pub snowflake_worker: BTreeMap<String, String>,
    /// Sonyflake machine id (0-65535) → region.
    pub sonyflake_machine: BTreeMap<String, String>,
    /// Instagram logical shard (`N` or `A-B`, 0-8191) → region.
    pub instagram_shard: BTreeMap<String, String>,
}

/// `key_ranges[i]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a key range such as { start: \"8000000000000000\", region: kz }")]
pub struct KeyRange {
    /// First key hash of the range.
    pub start: KeyStart,
    /// Owning region.
    pub region: String,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

/// `hash`: rendezvous hashing over the id's key hash.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a mapping such as { regions: [eu, kz] }")]
pub struct Hash {
    /// Candidate regions.
    pub regions: Vec<String>,
    /// Optional weights (default 1 each).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, f64>,
}

/// `time_ranges[i]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a time range such as { until: \"2024-01-01T00:00:00Z\", region: eu }")]
pub struct TimeRange {
    /// Exclusive end of the range; `None` only for the last (open) range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<TimeSpec>,
    /// Owning region.
    pub region: String,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

/// `moves[i]`: one placement unit being re-homed.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a move such as { unit: \"country KZ\", to: eu, phase: hold, epoch: 1 }")]
pub struct Move {
    /// The unit, named as `plan` and `shardgate_placement_requests_total` name it.
    pub unit: String,
    /// The region it moves to.
    pub to: String,
    /// `hold`, `switch` or `abort`.
    pub phase: MovePhase,
    /// The unit's epoch: raised by the tool for each move of the unit, carried by forwards.
    pub epoch: u64,
    /// What is held and for how long.
    #[serde(default)]
    pub hold: MoveHold,
    /// Held requests released per second after the switch (or the abort).
    #[serde(default = "default_release_rate")]
    pub release_rate: u32,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

fn default_release_rate() -> u32 {
    500
}

/// A move's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MovePhase {
    /// Requests for the unit are parked before their body is read.
    Hold,
    /// The unit has its new owner (in this table); held requests go there.
    Switch,
    /// The move is called off; held requests go to the owner in this table.
    Abort,
}

impl MovePhase {
    /// Its name in the table (`phase: hold`).
    pub fn name(self) -> &'static str {
        match self {
            MovePhase::Hold => "hold",
            MovePhase::Switch => "switch",
            MovePhase::Abort => "abort",
        }
    }
}

/// `moves[i].hold`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a mapping such as { requests: writes, max_requests: 1000, max_time: 5s }")]
pub struct MoveHold {
    /// `writes` (POST, PUT, PATCH, DELETE: the default) or `all`.
    #[serde(default = "default_hold_requests")]
    pub requests: String,
    /// Most requests held at once on one instance; more are answered 503 with `Retry-After`.
    #[serde(default = "default_max_held")]
    pub max_requests: usize,
    /// Longest a request is held; then the instance aborts the move and sends held requests to the owner.
    #[serde(default = "default_max_hold")]
    pub max_time: Dur,
}

impl Default for MoveHold {
    fn default() -> Self {
        MoveHold { requests: default_hold_requests(), max_requests: default_max_held(), max_time: default_max_hold() }
    }
}

fn default_hold_requests() -> String {
    "writes".to_string()
}

fn default_max_held() -> usize {
    10_000
}

fn default_max_hold() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}

/// `ids`: per-format parameters.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ids {
    /// uniqid.
    pub uniqid: UniqidParams,
    /// Snowflake layout.
    pub snowflake: SnowflakeParams,
    /// Sonyflake flavour.
    pub sonyflake: SonyflakeParams,
    /// Instagram epoch.
    pub instagram: InstagramParams,
    /// Locality UUID node identity for minting.
    pub locality: LocalityParams,
}

/// `ids.uniqid`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UniqidParams {
    /// Historical shard count for strict checks and minting (default: `shards.count`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_shards: Option<u32>,
    /// Reject ids whose prefix is not `microseconds % total_shards`.
    pub strict: bool,
}

/// `ids.snowflake`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnowflakeParams {
    /// Epoch in Unix ms.
    pub epoch_ms: u64,
    /// Datacenter field width.
    pub datacenter_bits: u8,
    /// Worker field width.
    pub worker_bits: u8,
    /// Sequence field width.
    pub sequence_bits: u8,
}

impl Default for SnowflakeParams {
    fn default() -> Self {
        let l = crate::ids::SnowflakeLayout::default();
        SnowflakeParams {
            epoch_ms: l.epoch_ms,
            datacenter_bits: l.datacenter_bits,
            worker_bits: l.worker_bits,
            sequence_bits: l.sequence_bits,
        }
    }
}

/// `ids.sonyflake`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SonyflakeParams {
    /// `v1` or `v2`.
    pub flavor: Flavor,
}

/// Sonyflake flavour name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// sony/sonyflake v1.
    #[default]
    V1,
    /// sony/sonyflake v2.
    V2,
}

/// `ids.instagram`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstagramParams {
    /// Epoch in Unix ms.
    pub epoch_ms: u64,
}

impl Default for InstagramParams {
    fn default() -> Self {
        InstagramParams { epoch_ms: crate::ids::InstagramLayout::default().epoch_ms }
    }
}

/// `ids.locality`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalityParams {
    /// Counter mode for minting.
    pub mode: LocalityModeName,
    /// Pid field written into minted ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u16>,
    /// MAC fragment (7 hex digits) written into minted ids; checked by validation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_fragment: Option<String>,
}

/// Locality minting mode name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalityModeName {
    /// Nibble-reversed prime-increment counter.
    #[default]
    Variable,
    /// Window-seeded sequential counter.
    Sequential,
}

/// `server`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// Time allowed to receive request headers.
    pub header_read_timeout: Dur,
    /// Idle keep-alive connection timeout.
    pub idle_timeout: Dur,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// Most request header fields.
    pub max_headers: usize,
    /// Longest request target.
    pub max_uri_bytes: usize,
    /// Most client connections open at once (beyond it: 503 and close).
    pub max_connections: usize,
    /// Most connections open at once on the admin listener (beyond it: 503 and close).
    pub admin_max_connections: usize,
    /// Peers whose `X-Forwarded-*`/`Forwarded` headers are trusted.
    pub trusted_hops: Vec<Cidr>,
    /// Add `X-Shardgate-*` explanation headers to responses.
    pub debug_headers: bool,
    /// After SIGTERM or `POST /drain`: how long to keep accepting new
    /// connections (with `/ready` answering 503) before closing the listener.
    pub drain_delay: Dur,
    /// After the listener closes: how long in-flight requests may take to finish.
    pub shutdown_timeout: Dur,
    /// Request bodies up to this size are read whole before an upstream
    /// connection is taken; larger ones are passed on as they arrive.
    pub request_buffer_bytes: usize,
    /// Bytes of regions' answers that the fan-outs in flight may hold, all
    /// requests together (restart-only).
    pub fanout_buffer_bytes: usize,
    /// Time a client has to send its request body before `body_min_rate` counts.
    pub body_timeout: Dur,
    /// Bytes a second a request body must average after `body_timeout`; 0: no limit.
    pub body_min_rate: u64,
    /// Bytes a second a client must take, on average over `idle_timeout`,
    /// of what waits to be sent to it; 0: no limit.
    pub answer_min_rate: u64,
    /// An upgraded connection (WebSocket tunnel) on which no byte moves
    /// either way for this long is closed (routes may set their own).
    pub tunnel_idle_timeout: Dur,
    /// Pending-connection queue of the proxy listener (`listen(2)` backlog).
    pub backlog: u32,
    /// TLS on the proxy listener (restart-only; the certificate and key
    /// files themselves are reloaded when they change on disk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

/// `server.tls`: TLS (and optionally client certificates) on the proxy listener.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain file, leaf first.
    pub cert: String,
    /// PEM private key file (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
    /// PEM file of the CAs whose client certificates are trusted. When set,
    /// mesh headers are honoured only from connections with a verified
    /// client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// Refuse TLS handshakes without a trusted client certificate (needs `client_ca`).
    #[serde(default)]
    pub require_client_cert: bool,
    /// The lowest protocol version accepted.
    #[serde(default)]
    pub min_version: crate::config::tls::TlsVersion,
    /// Cipher suites by IANA name, most preferred first (empty: the provider's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<String>,
    /// Key-exchange groups by name, most preferred first (empty: the provider's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// ALPN protocols offered, most preferred first.
    #[serde(default = "default_alpn")]
    pub alpn: Vec<String>,
    /// Sessions remembered for resumption by session id (0: none).
    #[serde(default = "default_session_cache")]
    pub session_cache: usize,
    /// Issue stateless session tickets (resumption without server state).
    #[serde(default = "routes::yes")]
    pub session_tickets: bool,
    /// How long one ticket key encrypts new tickets; the previous key still
    /// decrypts, so a ticket is accepted for at most twice this.
    #[serde(default = "default_ticket_key_rotation")]
    pub ticket_key_rotation: Dur,
}

fn default_alpn() -> Vec<String> {
    crate::config::tls::ALPN.iter().map(|p| (*p).to_string()).collect()
}

fn default_session_cache() -> usize {
    20_000
}

fn default_ticket_key_rotation() -> Dur {
    Dur(Duration::from_secs(3600))
}

impl Default for ServerTls {
    fn default() -> Self {
        ServerTls {
            cert: String::new(),
            key: String::new(),
            client_ca: None,
            require_client_cert: false,
            min_version: crate::config::tls::TlsVersion::default(),
            cipher_suites: Vec::new(),
            groups: Vec::new(),
            alpn: default_alpn(),
            session_cache: default_session_cache(),
            session_tickets: true,
            ticket_key_rotation: default_ticket_key_rotation(),
        }
    }
}

impl Default for Server {
    fn default() -> Self {
        Server {
            header_read_timeout: Dur(Duration::from_secs(10)),
            idle_timeout: Dur(Duration::from_secs(60)),
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_uri_bytes: 8 * 1024,
            max_connections: 10_000,
            admin_max_connections: 64,
            trusted_hops: Vec::new(),
            debug_headers: false,
            drain_delay: Dur(Duration::from_secs(5)),
            shutdown_timeout: Dur(Duration::from_secs(30)),
            request_buffer_bytes: 64 * 1024,
            fanout_buffer_bytes: 256 * 1024 * 1024,
            body_timeout: Dur(Duration::from_secs(10)),
            body_min_rate: 1024,
            answer_min_rate: 1024,
            tunnel_idle_timeout: Dur(Duration::from_secs(300)),
            backlog: 4096,
            tls: None,
        }
    }
}

/// `log`: what the access log contains.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// One structured line per request (target `shardgate::access`).
    pub access: bool,
    /// Include the entity id (canonical form) in access-log lines; ids can be personal data.
    pub ids: bool,
    /// A file the access log is appended to, one JSON object per line
    /// (reopened on SIGUSR1); unset: standard error, with the rest of the log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_file: Option<String>,
}

impl Default for Log {
    fn default() -> Self {
        Log { access: true, ids: false, access_file: None }
    }
}

/// `mint_batch`: an endpoint that returns fresh ids as JSON, for services
/// that mint their own. Disabled while `path` is unset.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MintBatch {
    /// Path answered with `POST` (e.g. `/_shardgate/ids`); `None` disables the endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Most ids one request may ask for.
    pub max_count: u32,
}

impl Default for MintBatch {
    fn default() -> Self {
        MintBatch { path: None, max_count: 10_000 }
    }
}

/// `search_cache`: the bounded, time-limited memory of where `placement:
/// search` routes found their ids.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchCache {
    /// Most ids remembered (restart-only); beyond it the least useful are evicted.
    pub capacity: usize,
    /// How long a found region is trusted before the id is searched for again.
    pub ttl: Dur,
}

impl Default for SearchCache {
    fn default() -> Self {
        SearchCache { capacity: 100_000, ttl: Dur(Duration::from_secs(600)) }
    }
}

/// `telemetry`: OpenTelemetry traces, exported over OTLP/HTTP (protobuf).
/// Each key left out falls back to the standard `OTEL_*` variable
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_SAMPLER_ARG`,
/// `OTEL_SERVICE_NAME`); with no endpoint anywhere, traces are off.
/// Restart-only.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Telemetry {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to `<it>/v1/traces`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Share of new traces recorded, 0.0 to 1.0 (default 1.0); a mesh peer's or
    /// trusted hop's sampled flag is followed, anyone else's trace sampled at this ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans (default `shardgate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
}

/// `mesh`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Mesh {
    /// Most shardgate hops a request may take.
    pub max_hops: u32,
    /// Source networks of the peer shardgates on a mesh without client
    /// certificates: only requests from them have their mesh headers
    /// honoured. On a listener with `server.tls.client_ca` a verified client
    /// certificate is required instead.
    pub trusted_peers: Vec<Cidr>,
}

impl Default for Mesh {
    fn default() -> Self {
        // Front door → owner → failover region → its failover region.
        Mesh { max_hops: 3, trusted_peers: Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::MovePhase;

    #[test]
    fn a_phase_is_named_as_the_table_writes_it() -> Result<(), serde_json::Error> {
        for phase in [MovePhase::Hold, MovePhase::Switch, MovePhase::Abort] {
            assert_eq!(serde_json::to_value(phase)?, phase.name());
            assert_eq!(serde_json::from_value::<MovePhase>(phase.name().into())?, phase);
        }
        Ok(())
    }
}
