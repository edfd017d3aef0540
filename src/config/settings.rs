//! The settings half of a table, typed: what the proxy reads, built once
//! by validation ([`super::validate`]) from the file as written
//! ([`super::schema`]): durations as `Duration`s, shares resolved to
//! counts, the restart-only values apart ([`RestartOnly`]). Nothing on the
//! request path reads the serde structs.

use std::time::Duration;

pub use super::restart::{Locality, RestartOnly};
pub use super::schema::{ServerTls, Telemetry, UpstreamTls};
use super::values::Cidr;

/// A table's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// What only a restart changes (a reload keeps the running values).
    pub restart: RestartOnly,
    /// The client side: limits, trust, debug answers, drain, bodies.
    pub server: ServerPolicy,
    /// The upstream side: attempts, retries, limits, passive and active health.
    pub upstream: UpstreamPolicy,
    /// Mesh forwarding.
    pub mesh: MeshPolicy,
    /// What the access log carries.
    pub log: LogPolicy,
    /// The batch mint endpoint.
    pub mint_batch: MintBatchPolicy,
    /// How long a region found by a search is trusted.
    pub search_ttl: Duration,
    /// How named upstreams and peers are re-resolved.
    pub dns: DnsPolicy,
    /// Shard count for minting uniqid ids (`ids.uniqid.total_shards` or `shards.count`).
    pub uniqid_mint_shards: Option<u32>,
}

/// `upstream.dns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsPolicy {
    /// Name servers; empty: the system's.
    pub servers: Vec<std::net::SocketAddr>,
    /// Shortest an answer is kept, and the retry after a failure.
    pub min_ttl: Duration,
    /// Longest an answer is kept.
    pub max_ttl: Duration,
}

/// `server`, the keys that reload.
#[derive(Clone, Debug)]
pub struct ServerPolicy {
    /// Longest request target.
    pub max_uri_bytes: usize,
    /// Proxies in front whose `X-Forwarded-*` and `Forwarded` are kept.
    pub trusted_hops: Vec<Cidr>,
    /// Add `X-Shardgate-*` explanation headers to answers.
    pub debug_headers: bool,
    /// After the drain starts, how long the listener keeps accepting.
    pub drain_delay: Duration,
    /// After the listener closes, how long in-flight requests may take.
    pub shutdown_timeout: Duration,
    /// Bodies up to this size are read whole before a connection is taken.
    pub request_buffer_bytes: usize,
    /// Time a client has for its body before `body_min_rate` counts.
    pub body_timeout: Duration,
    /// Bytes a second a body must average after `body_timeout`; 0: no limit.
    pub body_min_rate: u64,
}

/// `upstream`, the keys that reload.
#[derive(Clone, Debug)]
pub struct UpstreamPolicy {
    /// One attempt, until the response head.
    pub attempt_timeout: Duration,
    /// The whole request, retries included.
    pub request_timeout: Duration,
    /// Longest wait for a connection.
    pub queue_timeout: Duration,
    /// Retries after the first attempt, when safe.
    pub retries: u32,
    /// Retries as a fraction of requests.
    pub budget_ratio: f64,
    /// Retries always allowed per second.
    pub budget_min_per_second: u32,
    /// Failures in a row of an endpoint's own making that eject it (0: never).
    pub eject_after: u32,
    /// How long an ejected endpoint gets no traffic.
    pub eject_for: Duration,
    /// Connections per endpoint, their uses, and requests waiting.
    pub limits: Limits,
    /// Active health checks.
    pub health: HealthChecks,
}

/// How many connections one endpoint may have, how many of them may carry
/// bodies still arriving from their clients or tunnels, and how many
/// requests may wait for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open to one endpoint at once (tunnels aside).
    pub max_connections: usize,
    /// Most requests waiting for a connection to one endpoint; beyond it a
    /// request is refused at once.
    pub max_pending: usize,
    /// Most of those connections carrying a body its client is still
    /// sending: the rest stay for requests in hand, so slow uploads cannot
    /// take an endpoint.
    pub max_uploads: usize,
    /// Most tunnels (upgraded connections) open to one endpoint, counted
    /// apart from `max_connections` once switched.
    pub max_tunnels: usize,
}

impl Limits {
    /// `max_connections` and `max_pending`, with uploads and tunnels
    /// bounded by the connection cap alone.
    pub const fn new(max_connections: usize, max_pending: usize) -> Limits {
        Limits { max_connections, max_pending, max_uploads: max_connections, max_tunnels: max_connections }
    }
}

/// `upstream.health`.
#[derive(Clone, Debug)]
pub struct HealthChecks {
    /// Time between checks of one endpoint; zero disables them.
    pub interval: Duration,
    /// Timeout of one check.
    pub timeout: Duration,
    /// Path requested with GET.
    pub path: String,
    /// Successes in a row that bring an endpoint back.
    pub rise: u32,
    /// Failures in a row that take it down.
    pub fall: u32,
    /// HTTP/2 endpoints are asked `grpc.health.v1.Health/Check` instead.
    pub grpc: bool,
}

/// `mesh`.
#[derive(Clone, Debug)]
pub struct MeshPolicy {
    /// Most shardgate hops a request may take.
    pub max_hops: u32,
    /// Peers whose mesh headers are honoured on connections without client certificates.
    pub trusted_peers: Vec<Cidr>,
}

/// `log`.
#[derive(Clone, Debug)]
pub struct LogPolicy {
    /// One line per request.
    pub access: bool,
    /// The entity id in it.
    pub ids: bool,
    /// The file it is appended to (else standard error).
    pub access_file: Option<std::sync::Arc<std::path::Path>>,
}

/// `mint_batch`.
#[derive(Clone, Debug)]
pub struct MintBatchPolicy {
    /// Where it answers `POST`; `None`: off.
    pub path: Option<String>,
    /// Most ids one request may ask for.
    pub max_count: u32,
}
