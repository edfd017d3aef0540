//! The schema of the routing table file (serde structs) and its assembly.
//!
//! Each struct rejects unknown fields; key names and meanings are documented
//! in `docs/config.md`. Values that have a syntax of their own (durations,
//! upstream URLs, shard ranges, key-range starts, times, CIDRs) are parsed by
//! their own `Deserialize` so a bad one is reported at its exact path; names
//! that refer to other parts of the file (regions, countries, entities,
//! formats, methods) stay strings here and are checked by `validate`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use yaml_serde::Value;

use super::duration::Dur;
use super::show;
use super::spans::{Seg, YamlPath};
use super::validate::Ctx;

/// A loaded and validated routing table file, defaults filled in.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
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
    /// Routes, in file order.
    pub routes: Vec<Route>,
}

/// Default proxy listener.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default admin listener.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9901";

/// `regions.<name>`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a region mapping such as { upstreams: [\"http://10.0.0.1:8080\"] }")]
pub struct Region {
    /// The region's backends.
    #[serde(default)]
    pub upstreams: Vec<UpstreamUrl>,
    /// The region's shardgate (mesh peer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<UpstreamUrl>,
    /// Region to use when this one is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<String>,
}

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
#[derive(Clone, Debug, Serialize)]
pub struct Shards {
    /// Number of shards; shards are `0..count`.
    pub count: u32,
    /// Shard ranges per region.
    pub regions: BTreeMap<String, RangeList>,
}

/// Inclusive ranges written as `N`, `"A-B"` or a list of those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeList(pub Vec<(u64, u64)>);

/// Parses `N` or `A-B` (decimal, no spaces, `A <= B`).
pub fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (num(a), num(b)),
        None => {
            let n = num(text);
            (n, n)
        }
    };
    match (a, b) {
        (Some(a), Some(b)) if a <= b => Ok((a, b)),
        (Some(_), Some(_)) => Err(format!("invalid range {}: start is after end", show(text))),
        _ => Err(format!("invalid range {}: expected N or A-B with decimal numbers", show(text))),
    }
}

impl<'de> Deserialize<'de> for RangeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RangeList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a range such as \"0-7\", a number, or a list of those")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RangeList, E> {
                Ok(RangeList(vec![(v, v)]))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RangeList, E> {
                parse_range(v).map(|r| RangeList(vec![r])).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RangeList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<RangeList>()? {
                    out.extend(item.0);
                }
                Ok(RangeList(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for RangeList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let texts: Vec<String> =
            self.0.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        texts.serialize(s)
    }
}

/// `nodes`: node tables, key text → region name (keys checked by validation).
#[derive(Clone, Debug, Default, Serialize)]
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

/// A key-hash split point written as exactly 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeyStart(pub u64);

impl<'de> Deserialize<'de> for KeyStart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = KeyStart;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quoted string of 16 hex digits")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<KeyStart, E> {
                Err(E::custom(format!("key range start {v} is a number; write it as a quoted string of 16 hex digits")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<KeyStart, E> {
                Err(E::custom(format!("key range start {v} is a number; write it as a quoted string of 16 hex digits")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyStart, E> {
                if v.len() != 16 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(E::custom(format!("invalid key range start {}: expected 16 hex digits", show(v))));
                }
                u64::from_str_radix(v, 16).map(KeyStart).map_err(|_| E::custom("invalid key range start"))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for KeyStart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:016x}", self.0))
    }
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

/// A point in time: RFC 3339 (`2024-01-01T00:00:00Z`, offsets allowed) or Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeSpec(pub u64);

/// Parses an RFC 3339 timestamp into Unix milliseconds (years 1970-9999).
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = b.get(r)?;
        if !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        s.iter().try_fold(0i64, |acc, d| Some(acc * 10 + i64::from(d - b'0')))
    };
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, min, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        let n = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        for k in 0..3 {
            millis = millis * 10 + if k < n { i64::from(b[start + k] - b'0') } else { 0 };
        }
        i = start + n;
    }
    let offset_min = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let oh = digits(i + 1..i + 3)?;
            let om = digits(i + 4..i + 6)?;
            let _ = (h1, h2, m1, m2);
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 60 + om;
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset_min * 60;
    let ms = secs.checked_mul(1000)?.checked_add(millis)?;
    u64::try_from(ms).ok()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl<'de> Deserialize<'de> for TimeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TimeSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time such as \"2024-01-01T00:00:00Z\" or Unix milliseconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TimeSpec, E> {
                Ok(TimeSpec(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TimeSpec, E> {
                parse_rfc3339(v).map(TimeSpec).ok_or_else(|| {
                    E::custom(format!("invalid time {}: expected RFC 3339 such as 2024-01-01T00:00:00Z", show(v)))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for TimeSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// `ids`: per-format parameters.
#[derive(Clone, Debug, Default, Serialize)]
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
    /// TLS on the proxy listener (restart-only; the certificate and key
    /// files themselves are reloaded when they change on disk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTls>,
}

/// `server.tls`: TLS (and optionally client certificates) on the proxy listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
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
}

impl Default for Log {
    fn default() -> Self {
        Log { access: true, ids: false }
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
    /// How long idle pooled connections are kept.
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
    /// Consecutive failures of an endpoint's own making (refused, reset
    /// before the response head, timed out once the request was sent, an
    /// invalid response, a 5xx) after which it is ejected (passive health);
    /// 0 disables passive ejection.
    pub eject_after: u32,
    /// How long an ejected endpoint receives no traffic.
    pub eject_for: Dur,
    /// TLS to `https://` upstreams and peers (restart-only).
    pub tls: UpstreamTls,
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
}

impl Default for HealthChecks {
    fn default() -> Self {
        HealthChecks {
            interval: Dur(Duration::from_secs(5)),
            timeout: Dur(Duration::from_secs(1)),
            path: "/healthz".to_string(),
            rise: 2,
            fall: 3,
        }
    }
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        UpstreamSettings {
            connect_timeout: Dur(Duration::from_secs(2)),
            attempt_timeout: Dur(Duration::from_secs(10)),
            request_timeout: Dur(Duration::from_secs(15)),
            pool_idle_timeout: Dur(Duration::from_secs(90)),
            retries: 1,
            retry_budget: RetryBudget::default(),
            health: HealthChecks::default(),
            max_connections: 512,
            max_pending: 1024,
            eject_after: 5,
            eject_for: Dur(Duration::from_secs(10)),
            tls: UpstreamTls::default(),
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

/// `routes[i]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a route mapping with name, match and id or mint")]
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
    /// Whether non-idempotent requests may go to a failover region.
    #[serde(default)]
    pub allow_failover_writes: bool,
    /// Protocols an `Upgrade` request may switch to through this route
    /// (the connection then becomes a tunnel); `h2c` is never allowed.
    #[serde(default = "default_upgrades")]
    pub upgrades: Vec<String>,
    /// Mint rule (create routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mint: Option<MintSpec>,
    /// Position in the file's list.
    #[serde(skip)]
    pub index: usize,
}

fn auto() -> String {
    "auto".to_owned()
}

fn default_upgrades() -> Vec<String> {
    vec!["websocket".to_owned()]
}

/// `routes[i].match`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// matchit path template.
    pub path: String,
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

/// An upstream or peer URL: `http(s)://host:port`, no path, query or userinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamUrl(pub http::Uri);

/// Parses an upstream URL.
pub fn parse_upstream_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text.parse().map_err(|_| format!("invalid upstream url {}: not a url", show(text)))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("invalid upstream url {}: scheme must be http or https", show(text))),
    }
    let Some(auth) = uri.authority() else {
        return Err(format!("invalid upstream url {}: missing host", show(text)));
    };
    if auth.as_str().contains('@') {
        return Err(format!("invalid upstream url {}: credentials are not allowed", show(text)));
    }
    if auth.host().is_empty() {
        return Err(format!("invalid upstream url {}: missing host", show(text)));
    }
    if auth.port_u16().is_none() {
        return Err(format!("invalid upstream url {}: missing port", show(text)));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!("invalid upstream url {}: path and query are not allowed", show(text)));
    }
    Ok(uri)
}

impl<'de> Deserialize<'de> for UpstreamUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_upstream_url(&text).map(UpstreamUrl).map_err(serde::de::Error::custom)
    }
}

impl Serialize for UpstreamUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let scheme = self.0.scheme_str().unwrap_or("http");
        let auth = self.0.authority().map(|a| a.as_str()).unwrap_or("");
        s.collect_str(&format_args!("{scheme}://{auth}"))
    }
}

/// An IP network such as `10.0.0.0/8` or `::1/128` (a bare address means a single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Whether `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(text: &str) -> Result<Cidr, String> {
        let bad = || format!("invalid network {}: expected an address or address/prefix", show(text));
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
        };
        if prefix > max {
            return Err(format!("invalid network {}: prefix longer than {max}", show(text)));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}/{}", self.addr, self.prefix))
    }
}

// ---------------------------------------------------------------------------
// Assembly: one section, map entry or list item at a time.

/// Builds a [`Config`] from the walked tree, reporting type errors per item
/// into `ctx` and using defaults for items that failed.
pub(crate) fn from_value(root: &Value, ctx: &mut Ctx<'_>) -> Config {
    let top = YamlPath::root();
    let empty = yaml_serde::Mapping::new();
    let map = match root {
        Value::Mapping(m) => m,
        other => {
            ctx.at(
                &top,
                format!("the routing table must be a yaml mapping, found {}", kind(other)),
                Some("start the file with `version: 1`"),
            );
            &empty
        }
    };
    for k in map.keys() {
        if let Value::String(k) = k {
            ctx.section(k);
        }
    }
    let get = |k: &str| map.get(k);

    let version = match get("version") {
        None => {
            if matches!(root, Value::Mapping(_)) {
                ctx.at(&top, "missing required key `version`".into(), Some("add `version: 1` at the top of the file"));
            }
            1
        }
        Some(v) => match item::<u32>(ctx, v, &top.k("version")) {
            Some(1) => 1,
            Some(n) => {
                ctx.at(
                    &top.k("version"),
                    format!("unsupported version {n}"),
                    Some("this shardgate reads `version: 1`"),
                );
                1
            }
            None => 1,
        },
    };
    let addr = |ctx: &mut Ctx<'_>, key: &str, default: &str| -> SocketAddr {
        let fallback = default.parse().unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let Some(v) = get(key) else { return fallback };
        let Some(text) = item::<String>(ctx, v, &top.k(key)) else { return fallback };
        match text.parse() {
            Ok(a) => a,
            Err(_) => {
                ctx.at(
                    &top.k(key),
                    format!("invalid {key} address {}: expected ip:port", show(&text)),
                    Some("write an address such as 127.0.0.1:8080 or [::1]:8080"),
                );
                fallback
            }
        }
    };
    let listen = addr(ctx, "listen", DEFAULT_LISTEN);
    let admin = addr(ctx, "admin", DEFAULT_ADMIN);
    let opt_string = |ctx: &mut Ctx<'_>, key: &str| get(key).and_then(|v| item::<String>(ctx, v, &top.k(key)));
    let region = opt_string(ctx, "region");
    let instance = opt_string(ctx, "instance");
    let default_region = opt_string(ctx, "default_region");

    let regions = map_items::<Region>(ctx, get("regions"), &top.k("regions"), NameKind::Region);
    let countries = map_items::<Country>(ctx, get("countries"), &top.k("countries"), NameKind::Country);
    let entities = map_items::<i64>(ctx, get("entities"), &top.k("entities"), NameKind::Entity);
    let overrides = seq_items::<Override>(ctx, get("overrides"), &top.k("overrides"))
        .into_iter()
        .map(|(i, mut o)| {
            o.index = i;
            o
        })
        .collect();

    let shards = get("shards").and_then(|v| {
        let p = top.k("shards");
        let Value::Mapping(m) = v else {
            ctx.at(
                &p,
                format!("expected a mapping such as {{ count: 16, regions: {{ eu: \"0-15\" }} }}, found {}", kind(v)),
                None,
            );
            return None;
        };
        let count = match m.get("count") {
            Some(c) => item::<u32>(ctx, c, &p.k("count"))?,
            None => {
                ctx.at(&p, "missing required key `count`".into(), Some("add `count: N` (shards are 0..N-1)"));
                return None;
            }
        };
        let regions = map_items::<RangeList>(ctx, m.get("regions"), &p.k("regions"), NameKind::Other);
        Some(Shards { count, regions })
    });

    let mut nodes = Nodes::default();
    if let Some(v) = get("nodes") {
        let p = top.k("nodes");
        if let Value::Mapping(m) = v {
            for (key, table) in [
                ("locality_mac", &mut nodes.locality_mac),
                ("locality_pid", &mut nodes.locality_pid),
                ("snowflake_datacenter", &mut nodes.snowflake_datacenter),
                ("snowflake_worker", &mut nodes.snowflake_worker),
                ("sonyflake_machine", &mut nodes.sonyflake_machine),
                ("instagram_shard", &mut nodes.instagram_shard),
            ] {
                *table = map_items::<String>(ctx, m.get(key), &p.k(key), NameKind::Other);
            }
        } else {
            ctx.at(&p, format!("expected a mapping of node tables, found {}", kind(v)), None);
        }
    }

    let key_ranges = seq_items::<KeyRange>(ctx, get("key_ranges"), &top.k("key_ranges"))
        .into_iter()
        .map(|(i, mut r)| {
            r.index = i;
            r
        })
        .collect();
    let hash = get("hash").and_then(|v| item::<Hash>(ctx, v, &top.k("hash")));
    let time_ranges = seq_items::<TimeRange>(ctx, get("time_ranges"), &top.k("time_ranges"))
        .into_iter()
        .map(|(i, mut r)| {
            r.index = i;
            r
        })
        .collect();

    let mut ids = Ids::default();
    if let Some(v) = get("ids") {
        let p = top.k("ids");
        if let Value::Mapping(m) = v {
            if let Some(v) = m.get("uniqid") {
                ids.uniqid = item(ctx, v, &p.k("uniqid")).unwrap_or_default();
            }
            if let Some(v) = m.get("snowflake") {
                ids.snowflake = item(ctx, v, &p.k("snowflake")).unwrap_or_default();
            }
            if let Some(v) = m.get("sonyflake") {
                ids.sonyflake = item(ctx, v, &p.k("sonyflake")).unwrap_or_default();
            }
            if let Some(v) = m.get("instagram") {
                ids.instagram = item(ctx, v, &p.k("instagram")).unwrap_or_default();
            }
            if let Some(v) = m.get("locality") {
                ids.locality = item(ctx, v, &p.k("locality")).unwrap_or_default();
            }
        } else {
            ctx.at(&p, format!("expected a mapping of per-format parameters, found {}", kind(v)), None);
        }
    }
    let server = get("server").and_then(|v| item(ctx, v, &top.k("server"))).unwrap_or_default();
    let upstream = get("upstream").and_then(|v| item(ctx, v, &top.k("upstream"))).unwrap_or_default();
    let mesh = get("mesh").and_then(|v| item(ctx, v, &top.k("mesh"))).unwrap_or_default();
    let log = get("log").and_then(|v| item(ctx, v, &top.k("log"))).unwrap_or_default();
    let mint_batch = get("mint_batch").and_then(|v| item(ctx, v, &top.k("mint_batch"))).unwrap_or_default();
    let routes = seq_items::<Route>(ctx, get("routes"), &top.k("routes"))
        .into_iter()
        .map(|(i, mut r)| {
            r.index = i;
            r
        })
        .collect();

    Config {
        version,
        listen,
        admin,
        region,
        instance,
        default_region,
        regions,
        countries,
        entities,
        overrides,
        shards,
        nodes,
        key_ranges,
        hash,
        time_ranges,
        ids,
        server,
        upstream,
        mesh,
        log,
        mint_batch,
        routes,
    }
}

/// Which kind of name a map section defines (for suppressing follow-on errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameKind {
    Region,
    Country,
    Entity,
    Other,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Deserializes one node, reporting a failure at its exact inner path.
pub(crate) fn item<T: DeserializeOwned>(ctx: &mut Ctx<'_>, v: &Value, path: &YamlPath) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(v.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            let mut p = path.clone();
            for seg in e.path().iter() {
                match seg {
                    serde_path_to_error::Segment::Seq { index } => p.0.push(Seg::Index(*index)),
                    serde_path_to_error::Segment::Map { key } => p.0.push(Seg::Key(key.clone())),
                    serde_path_to_error::Segment::Enum { variant } => p.0.push(Seg::Key(variant.clone())),
                    serde_path_to_error::Segment::Unknown => {}
                }
            }
            let message = e.into_inner().to_string();
            let hint = hint_for(&p, &message);
            ctx.at(&p, message, hint.as_deref());
            None
        }
    }
}

fn map_items<T: DeserializeOwned>(
    ctx: &mut Ctx<'_>,
    v: Option<&Value>,
    path: &YamlPath,
    names: NameKind,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let Some(v) = v else { return out };
    let m = match v {
        Value::Mapping(m) => m,
        Value::Null => return out,
        other => {
            ctx.at(
                path,
                format!("expected a mapping, found {}", kind(other)),
                Some("write `name: value` entries under this key"),
            );
            return out;
        }
    };
    for (k, v) in m {
        let Value::String(name) = k else { continue };
        if names != NameKind::Other {
            ctx.defined(names, name);
        }
        if let Some(t) = item::<T>(ctx, v, &path.k(name)) {
            out.insert(name.clone(), t);
        }
    }
    out
}

fn seq_items<T: DeserializeOwned>(ctx: &mut Ctx<'_>, v: Option<&Value>, path: &YamlPath) -> Vec<(usize, T)> {
    let Some(v) = v else { return Vec::new() };
    let s = match v {
        Value::Sequence(s) => s,
        Value::Null => return Vec::new(),
        other => {
            ctx.at(
                path,
                format!("expected a list, found {}", kind(other)),
                Some("write one `- item` per line under this key"),
            );
            return Vec::new();
        }
    };
    s.iter().enumerate().filter_map(|(i, v)| item::<T>(ctx, v, &path.i(i)).map(|t| (i, t))).collect()
}

/// A one-line fix hint for a type error, by the key it happened at.
fn hint_for(path: &YamlPath, message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or("");
        return Some(format!("add `{field}:` to this entry"));
    }
    let last = path.0.iter().rev().find_map(|s| match s {
        Seg::Key(k) => Some(k.as_str()),
        Seg::Index(_) => None,
    });
    let hint = match last? {
        "upstreams" | "peer" => "write urls as http://host:port or https://host:port",
        k if k.ends_with("_timeout") || k.ends_with("_delay") => "durations look like 250ms, 15s or 2m",
        "id" => "use the 8-bit id stored in iuids, 0-255",
        "region" | "failover" | "default_region" => "use the name of a region defined under `regions`",
        "start" => "write 16 hex digits in quotes, e.g. \"8000000000000000\"",
        "until" => "use RFC 3339 UTC such as \"2024-01-01T00:00:00Z\" or Unix milliseconds",
        "count" | "total_shards" => "a positive whole number",
        "formats" => "a list of format names: iuid, locality, uniqid, uuidv7, snowflake, sonyflake, instagram",
        "methods" => "a list of methods such as [GET, PUT]",
        "trusted_hops" => "a list of networks such as [\"10.0.0.0/8\", \"127.0.0.1/32\"]",
        "flavor" => "use v1 or v2",
        "mode" => "use variable or sequential",
        "version" => "write `version: 1`",
        _ => "see docs/config.md for the expected value",
    };
    Some(hint.to_owned())
}
