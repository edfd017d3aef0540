//! `regions` and `upstream`: where requests go and how they get there:
//! each region's backends, peer, balance and own settings, and the
//! table's upstream timeouts, limits, retries, health checks, TLS and DNS.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::duration::Dur;
use crate::config::values::Upstream;

/// `regions.<name>`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a region mapping such as { upstreams: [\"http://10.0.0.1:8080\"] }")]
pub struct Region {
    /// The region's backends.
    #[serde(default)]
    pub upstreams: Vec<EndpointSpec>,
    /// The region's shardgate (mesh peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Upstream>,
    /// Region to use when this one is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<String>,
    /// How a request picks among the backends: `round_robin`,
    /// `least_request` (the less busy of two picked at random) or `weighted`.
    #[serde(default = "round_robin")]
    pub balance: String,
    /// The region's own `upstream` settings, each key in place of the table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<RegionUpstream>,
}

fn round_robin() -> String {
    "round_robin".to_owned()
}

/// `regions.<name>.upstreams[i]`: a URL, or a URL with a weight.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged, expecting = "an upstream URL, or a mapping `{ url: URL, weight: N }`")]
pub enum EndpointSpec {
    /// A URL (weight 1).
    Url(Upstream),
    /// A URL with its weight.
    Weighted(WeightedEndpoint),
}

impl EndpointSpec {
    /// The endpoint and its weight.
    pub fn parts(&self) -> (&Upstream, u32) {
        match self {
            EndpointSpec::Url(u) => (u, 1),
            EndpointSpec::Weighted(w) => (&w.url, w.weight),
        }
    }
}

/// `{ url, weight }`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedEndpoint {
    /// The backend.
    pub url: Upstream,
    /// Its share of the region's requests under `balance: weighted`.
    pub weight: u32,
}

/// `regions.<name>.upstream`: the keys of `upstream` a region may set for
/// its own endpoints.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegionUpstream {
    /// Most connections open to one of its endpoints at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Most requests waiting for a connection to one of its endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<usize>,
    /// One attempt, until the response head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout: Option<Dur>,
    /// The whole request, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<Dur>,
    /// Active health checks of its endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthOverrides>,
}

/// `regions.<name>.upstream.health`: each key in place of `upstream.health`'s.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HealthOverrides {
    /// Time between checks of one endpoint; `0s` disables the region's checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Dur>,
    /// Timeout of one check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// Path requested with GET.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Consecutive successes that bring a down endpoint back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<u32>,
    /// Consecutive failures that take an endpoint down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fall: Option<u32>,
    /// HTTP/2 endpoints asked `grpc.health.v1.Health/Check` instead of the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<bool>,
}

/// `upstream.tls`: how the proxy connects to `https://` upstreams and peers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamTls {
    /// PEM file of the CAs trusted for upstream and peer certificates; when
    /// absent, the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// PEM client certificate chain presented to upstreams and peers (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// PEM private key of `cert`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `upstream`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamSettings {
    /// TCP connect timeout.
    pub connect_timeout: Dur,
    /// Timeout of one attempt (until response headers).
    pub attempt_timeout: Dur,
    /// Timeout of the whole request, retries included.
    pub request_timeout: Dur,
    /// How long idle pooled connections are kept: below the upstreams' own
    /// keep-alive wait (a shardgate peer's is its `server.header_read_timeout`).
    pub pool_idle_timeout: Dur,
    /// Retries after the first attempt (safe cases only).
    pub retries: u32,
    /// Retry budget.
    pub retry_budget: RetryBudget,
    /// Active health checks of every upstream endpoint and peer.
    pub health: HealthChecks,
    /// Most connections open to one endpoint at once.
    pub max_connections: usize,
    /// Most requests waiting for a connection to one endpoint at its
    /// `max_connections`; beyond it: 503 `upstream_saturated`.
    pub max_pending: usize,
    /// Longest a request waits for a connection; then 503 `upstream_saturated`.
    pub queue_timeout: Dur,
    /// Share of `max_connections` that requests whose body is still arriving
    /// from the client may hold at once; the rest stay for requests in hand.
    pub upload_share: f64,
    /// Most upgraded connections (tunnels) open to one endpoint, counted apart from `max_connections`.
    pub max_tunnels: usize,
    /// Consecutive failures of an endpoint's own making (refused, reset
    /// before the response head, timed out once the request was sent, an
    /// invalid response, a 5xx) after which it is ejected (passive health);
    /// 0 disables passive ejection.
    pub eject_after: u32,
    /// How long an ejected endpoint receives no traffic.
    pub eject_for: Dur,
    /// TLS to `https://` upstreams and peers (restart-only).
    pub tls: UpstreamTls,
    /// How named upstreams and peers are re-resolved.
    pub dns: Dns,
}

/// `upstream.dns`: the resolver of named endpoints and how long an answer holds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Dns {
    /// Name servers (`ip:port`); empty: the system's (`/etc/resolv.conf`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<std::net::SocketAddr>,
    /// Shortest time an answer is kept (a lower TTL counts as this; also the retry after a failure).
    pub min_ttl: Dur,
    /// Longest time an answer is kept (a higher TTL counts as this).
    pub max_ttl: Dur,
}

impl Default for Dns {
    fn default() -> Self {
        Dns { servers: Vec::new(), min_ttl: Dur(Duration::from_secs(1)), max_ttl: Dur(Duration::from_secs(300)) }
    }
}

/// `upstream.health`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthChecks {
    /// Time between checks of one endpoint; `0s` disables active checks.
    pub interval: Dur,
    /// Timeout of one check.
    pub timeout: Dur,
    /// Path requested with GET; any 2xx or 3xx answer is a success.
    pub path: String,
    /// Consecutive successes that bring a down endpoint back.
    pub rise: u32,
    /// Consecutive failures that take an endpoint down.
    pub fall: u32,
    /// HTTP/2 endpoints (`h2c://`, `h2://`) are asked
    /// `grpc.health.v1.Health/Check` instead of the path.
    pub grpc: bool,
}

impl Default for HealthChecks {
    fn default() -> Self {
        HealthChecks {
            interval: Dur(Duration::from_secs(5)),
            timeout: Dur(Duration::from_secs(1)),
            path: "/healthz".to_string(),
            rise: 2,
            fall: 3,
            grpc: false,
        }
    }
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        UpstreamSettings {
            connect_timeout: Dur(Duration::from_secs(2)),
            attempt_timeout: Dur(Duration::from_secs(10)),
            request_timeout: Dur(Duration::from_secs(15)),
            pool_idle_timeout: Dur(Duration::from_secs(8)),
            retries: 1,
            retry_budget: RetryBudget::default(),
            health: HealthChecks::default(),
            max_connections: 512,
            max_pending: 1024,
            queue_timeout: Dur(Duration::from_secs(5)),
            upload_share: 0.5,
            max_tunnels: 1024,
            eject_after: 5,
            eject_for: Dur(Duration::from_secs(10)),
            tls: UpstreamTls::default(),
            dns: Dns::default(),
        }
    }
}

/// `upstream.retry_budget`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBudget {
    /// Retries allowed as a fraction of requests (0-1).
    pub ratio: f64,
    /// Retries always allowed per second.
    pub min_per_second: u32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget { ratio: 0.2, min_per_second: 10 }
    }
}
