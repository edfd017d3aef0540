//! Settings: the top-level scalars, per-format parameters, the server and
//! upstream limits and timeouts, TLS, the mesh and the batch mint endpoint.

use super::names::Names;
use crate::config::report::Ctx;
use std::time::Duration;

use crate::config::schema::{File, Flavor, LocalityModeName, ServerTls, Telemetry};
use crate::config::settings::{
    DnsPolicy, HealthChecks, Limits, Locality, LogPolicy, MeshPolicy, MintBatchPolicy, RestartOnly, ServerPolicy,
    Settings, UpstreamPolicy,
};
use crate::config::show;
use crate::config::tls::TlsVersion;
use crate::config::yaml::YamlPath;
use crate::ids::{self, parse_mac_fragment, LocalityMode, NodeIdentity, Params};

/// What the top-level scalars resolve to.
pub(super) struct TopLevel {
    pub(super) instance: String,
    pub(super) local_region: Option<usize>,
    pub(super) default_region: Option<usize>,
}

/// `listen`, `admin`, `region`, `default_region`, `instance`, `mesh` and `mint_batch`.
pub(super) fn top_level(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> TopLevel {
    let root = YamlPath::root();
    if file.listen == file.admin {
        ctx.at(
            &root.k("admin"),
            format!("admin address {} is the same as listen", file.admin),
            Some("give the admin listener its own port"),
        );
    }
    let local_region = file.region.as_ref().and_then(|r| names.region(ctx, &root.k("region"), r));
    let default_region = file.default_region.as_ref().and_then(|r| names.region(ctx, &root.k("default_region"), r));
    if let Some(i) = &file.instance {
        if i.is_empty() || !i.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            ctx.at(
                &root.k("instance"),
                format!("invalid instance name {}", show(i)),
                Some("use letters, digits, `-`, `_` and `.` only"),
            );
        }
    }
    let instance = match (&file.instance, &file.region) {
        (Some(name), _) => name.clone(),
        (None, Some(region)) => format!("shardgate-{region}"),
        (None, None) => "shardgate".to_owned(),
    };
    if file.mesh.max_hops == 0 || file.mesh.max_hops > 255 {
        ctx.at(
            &root.k("mesh").k("max_hops"),
            format!("max_hops {} is outside 1-255", file.mesh.max_hops),
            Some("3 covers a front door, the owner and two failover regions"),
        );
    }
    let mb = &file.mint_batch;
    if let Some(p) = &mb.path {
        if !p.starts_with('/') || p.contains(['?', '#', ' ']) {
            ctx.at(
                &root.k("mint_batch").k("path"),
                format!("batch mint path {} is not an absolute path", show(p)),
                Some("e.g. `/_shardgate/ids`"),
            );
        }
    }
    if mb.max_count == 0 {
        let path = root.k("mint_batch").k("max_count");
        ctx.at(&path, "batch mint max_count must be at least 1".into(), Some("e.g. `max_count: 10000`"));
    }
    TopLevel { instance, local_region, default_region }
}

/// What `ids` resolves to.
pub(super) struct IdSettings {
    pub(super) params: Params,
    pub(super) locality_node: Option<NodeIdentity>,
    pub(super) locality_mode: LocalityMode,
    pub(super) uniqid_mint_shards: Option<u32>,
}

/// `ids`: a snowflake layout with timestamp bits left, shard counts, the Locality node.
pub(super) fn ids(file: &File, ctx: &mut Ctx<'_>) -> IdSettings {
    let ip = YamlPath::root().k("ids");
    let (sf, u) = (&file.ids.snowflake, &file.ids.uniqid);
    let snowflake = ids::SnowflakeLayout {
        epoch_ms: sf.epoch_ms,
        datacenter_bits: sf.datacenter_bits,
        worker_bits: sf.worker_bits,
        sequence_bits: sf.sequence_bits,
    };
    if !snowflake.is_valid() {
        ctx.at(
            &ip.k("snowflake"),
            format!(
                "snowflake fields use {} bits; they must leave timestamp bits below bit 63",
                u32::from(sf.datacenter_bits) + u32::from(sf.worker_bits) + u32::from(sf.sequence_bits)
            ),
            Some("datacenter_bits + worker_bits + sequence_bits must be below 63"),
        );
    }
    if u.total_shards == Some(0) {
        ctx.at(
            &ip.k("uniqid").k("total_shards"),
            "total_shards must be at least 1".into(),
            Some("a positive whole number"),
        );
    }
    let shard_count = file.shards.as_ref().map(|s| s.count);
    if u.strict && u.total_shards.is_none() && shard_count.is_none() {
        ctx.at(
            &ip.k("uniqid").k("strict"),
            "strict uniqid checks need a shard count".into(),
            Some("set `ids.uniqid.total_shards` or `shards.count`"),
        );
    }
    let loc = &file.ids.locality;
    let mac = loc.mac_fragment.as_deref().map(|m| (m, parse_mac_fragment(m)));
    if let Some((m, None)) = mac {
        ctx.at(
            &ip.k("locality").k("mac_fragment"),
            format!("invalid mac fragment {}", show(m)),
            Some("use 7 hex digits, e.g. \"c110002\""),
        );
    }
    let locality_node = match (mac, loc.pid) {
        (None, None) => None,
        (mac, pid) => Some(NodeIdentity { pid: pid.unwrap_or(0), mac_fragment: mac.and_then(|(_, m)| m).unwrap_or(0) }),
    };
    let params = Params {
        uniqid_total_shards: if u.strict { u.total_shards.or(shard_count) } else { None },
        snowflake,
        sonyflake: match file.ids.sonyflake.flavor {
            Flavor::V1 => ids::SonyflakeFlavor::V1,
            Flavor::V2 => ids::SonyflakeFlavor::V2,
        },
        instagram: ids::InstagramLayout { epoch_ms: file.ids.instagram.epoch_ms },
    };
    IdSettings {
        params,
        locality_node,
        locality_mode: match loc.mode {
            LocalityModeName::Variable => LocalityMode::Variable,
            LocalityModeName::Sequential => LocalityMode::Sequential,
        },
        uniqid_mint_shards: u.total_shards.or(shard_count),
    }
}

/// The typed settings of a valid `file` ([`crate::config::settings`]).
pub(super) fn typed(file: &File, top: &TopLevel, ids: &IdSettings) -> Settings {
    let (server, up) = (&file.server, &file.upstream);
    let restart = RestartOnly {
        listen: file.listen,
        admin: file.admin,
        region: file.region.clone(),
        instance: top.instance.clone(),
        locality: Locality { node: ids.locality_node, mode: ids.locality_mode },
        server_tls: server.tls.clone(),
        header_read_timeout: server.header_read_timeout.0,
        idle_timeout: server.idle_timeout.0,
        answer_min_rate: server.answer_min_rate,
        max_header_bytes: server.max_header_bytes,
        max_headers: server.max_headers,
        max_connections: server.max_connections,
        admin_max_connections: server.admin_max_connections,
        backlog: server.backlog,
        upstream_tls: up.tls.clone(),
        connect_timeout: up.connect_timeout.0,
        pool_idle_timeout: up.pool_idle_timeout.0,
        fanout_buffer_bytes: server.fanout_buffer_bytes,
        search_cache_capacity: file.search_cache.capacity,
        telemetry: file.telemetry.clone(),
    };
    let h = &up.health;
    Settings {
        restart,
        server: ServerPolicy {
            max_uri_bytes: server.max_uri_bytes,
            trusted_hops: server.trusted_hops.clone(),
            debug_headers: server.debug_headers,
            drain_delay: server.drain_delay.0,
            shutdown_timeout: server.shutdown_timeout.0,
            request_buffer_bytes: server.request_buffer_bytes,
            body_timeout: server.body_timeout.0,
            body_min_rate: server.body_min_rate,
        },
        upstream: UpstreamPolicy {
            attempt_timeout: up.attempt_timeout.0,
            request_timeout: up.request_timeout.0,
            queue_timeout: up.queue_timeout.0,
            retries: up.retries,
            budget_ratio: up.retry_budget.ratio,
            budget_min_per_second: up.retry_budget.min_per_second,
            eject_after: up.eject_after,
            eject_for: up.eject_for.0,
            limits: Limits {
                max_connections: up.max_connections,
                max_pending: up.max_pending,
                // At least one upload, or none could ever go.
                max_uploads: ((up.max_connections as f64 * up.upload_share) as usize).max(1),
                max_tunnels: up.max_tunnels,
            },
            health: HealthChecks {
                interval: h.interval.0,
                timeout: h.timeout.0,
                path: h.path.clone(),
                rise: h.rise,
                fall: h.fall,
                grpc: h.grpc,
            },
        },
        mesh: MeshPolicy { max_hops: file.mesh.max_hops, trusted_peers: file.mesh.trusted_peers.clone() },
        log: LogPolicy {
            access: file.log.access,
            ids: file.log.ids,
            access_file: file.log.access_file.as_deref().map(|p| std::sync::Arc::from(std::path::Path::new(p))),
        },
        mint_batch: MintBatchPolicy { path: file.mint_batch.path.clone(), max_count: file.mint_batch.max_count },
        search_ttl: file.search_cache.ttl.0,
        dns: DnsPolicy {
            servers: file.upstream.dns.servers.clone(),
            min_ttl: file.upstream.dns.min_ttl.0,
            max_ttl: file.upstream.dns.max_ttl.0,
        },
        uniqid_mint_shards: ids.uniqid_mint_shards,
    }
}

/// Largest `server.request_buffer_bytes`: a body that size is held in memory.
const MAX_REQUEST_BUFFER: usize = 16 * 1024 * 1024;
/// The largest `server.max_header_bytes`: a head is held whole while it is read.
const MAX_HEAD_BYTES: usize = 1024 * 1024;
/// The most `server.max_headers`: every head is parsed into that many slots.
const MAX_HEADERS: usize = 10_000;

/// `server` and `upstream`: positive limits and timeouts, an attempt that
/// fits in the request, a retry ratio that is a fraction.
pub(super) fn limits_and_timeouts(file: &File, ctx: &mut Ctx<'_>) {
    let root = YamlPath::root();
    let duration_hint = Some("durations look like 250ms, 15s or 2m");
    let (server, up) = (&file.server, &file.upstream);
    for (key, d) in [
        ("header_read_timeout", server.header_read_timeout),
        ("idle_timeout", server.idle_timeout),
        ("tunnel_idle_timeout", server.tunnel_idle_timeout),
    ] {
        if d.0.is_zero() {
            ctx.at(&root.k("server").k(key), format!("{key} must be positive"), duration_hint);
        }
    }
    for (key, v) in [
        ("max_header_bytes", server.max_header_bytes),
        ("max_headers", server.max_headers),
        ("max_uri_bytes", server.max_uri_bytes),
        ("max_connections", server.max_connections),
        ("admin_max_connections", server.admin_max_connections),
        ("backlog", server.backlog as usize),
        ("fanout_buffer_bytes", server.fanout_buffer_bytes),
    ] {
        if v == 0 {
            ctx.at(&root.k("server").k(key), format!("{key} must be positive"), Some("a positive whole number"));
        }
    }
    if server.backlog > u32::from(u16::MAX) {
        ctx.at(
            &root.k("server").k("backlog"),
            format!("backlog {} is above 65535", server.backlog),
            Some("the kernel caps it at net.core.somaxconn (4096 by default)"),
        );
    }
    for (key, v, max) in [
        ("max_header_bytes", server.max_header_bytes, MAX_HEAD_BYTES),
        ("max_headers", server.max_headers, MAX_HEADERS),
    ] {
        if v > max {
            let hint = "each request's head is read and parsed within this limit; the default is far below it";
            ctx.at(&root.k("server").k(key), format!("{key} {v} is above {max}"), Some(hint));
        }
    }
    if server.request_buffer_bytes > MAX_REQUEST_BUFFER {
        ctx.at(
            &root.k("server").k("request_buffer_bytes"),
            format!("request_buffer_bytes {} is above {MAX_REQUEST_BUFFER}", server.request_buffer_bytes),
            Some("bodies this size are held in memory whole; 65536 is the default"),
        );
    }
    for (key, d) in [
        ("connect_timeout", up.connect_timeout),
        ("attempt_timeout", up.attempt_timeout),
        ("request_timeout", up.request_timeout),
        ("queue_timeout", up.queue_timeout),
    ] {
        if d.0.is_zero() {
            ctx.at(&root.k("upstream").k(key), format!("{key} must be positive"), duration_hint);
        }
    }
    for (key, v) in [("max_connections", up.max_connections), ("max_tunnels", up.max_tunnels)] {
        if v == 0 {
            ctx.at(
                &root.k("upstream").k(key),
                format!("{key} must be positive"),
                Some("a positive whole number, e.g. 512"),
            );
        }
    }
    if !(up.upload_share > 0.0 && up.upload_share <= 1.0) {
        ctx.at(
            &root.k("upstream").k("upload_share"),
            format!("upload_share {} is outside 0-1 (0 excluded)", up.upload_share),
            Some("a fraction such as 0.5: the rest of an endpoint's connections stay for requests in hand"),
        );
    }
    if up.attempt_timeout > up.request_timeout {
        ctx.at(
            &root.k("upstream").k("attempt_timeout"),
            format!("attempt_timeout {} is longer than request_timeout {}", up.attempt_timeout, up.request_timeout),
            Some("one attempt must fit in the whole request"),
        );
    }
    if !(0.0..=1.0).contains(&up.retry_budget.ratio) {
        ctx.at(
            &root.k("upstream").k("retry_budget").k("ratio"),
            format!("retry budget ratio {} is outside 0-1", up.retry_budget.ratio),
            Some("a fraction such as 0.2"),
        );
    }
    let health = &up.health;
    super::health_checks(Some(health.timeout), Some(&health.path), &root.k("upstream").k("health"), ctx);
    let dns = &up.dns;
    if dns.min_ttl.0.is_zero() || dns.min_ttl > dns.max_ttl {
        let m = format!("dns.min_ttl {} is zero or longer than dns.max_ttl {}", dns.min_ttl, dns.max_ttl);
        ctx.at(&root.k("upstream").k("dns").k("min_ttl"), m, Some("e.g. min_ttl: 1s, max_ttl: 5m"));
    }
    if file.log.access_file.as_deref().is_some_and(str::is_empty) {
        let hint = Some("a path such as /var/log/shardgate/access.log, or remove the key for standard error");
        ctx.at(&root.k("log").k("access_file"), "access_file is empty".into(), hint);
    }
}

/// `server.tls` and `upstream.tls`: paths present and non-empty, options
/// that need each other set together. The files themselves are read when
/// the proxy starts (`check` may run where the keys are not installed).
pub(super) fn tls(file: &File, ctx: &mut Ctx<'_>) {
    let root = YamlPath::root();
    let hint = Some("a path to a PEM file, e.g. /etc/shardgate/tls/cert.pem");
    if let Some(tls) = &file.server.tls {
        let p = root.k("server").k("tls");
        for (key, v) in [("cert", Some(&tls.cert)), ("key", Some(&tls.key)), ("client_ca", tls.client_ca.as_ref())] {
            if v.is_some_and(|v| v.trim().is_empty()) {
                ctx.at(&p.k(key), format!("server.tls.{key} is an empty path"), hint);
            }
        }
        if tls.require_client_cert && tls.client_ca.is_none() {
            ctx.at(
                &p.k("require_client_cert"),
                "require_client_cert needs server.tls.client_ca".into(),
                Some("set `client_ca` to the PEM file of the CAs that sign client certificates"),
            );
        }
        listener_tls(tls, &p, ctx);
    }
    let t = &file.upstream.tls;
    let p = root.k("upstream").k("tls");
    for (key, v) in [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)] {
        if v.as_ref().is_some_and(|v| v.trim().is_empty()) {
            ctx.at(&p.k(key), format!("upstream.tls.{key} is an empty path"), hint);
        }
    }
    let both = Some("set both `cert` and `key` for a client certificate, or neither");
    match (&t.cert, &t.key) {
        (Some(_), None) => ctx.at(&p.k("cert"), "upstream.tls.cert needs upstream.tls.key".into(), both),
        (None, Some(_)) => ctx.at(&p.k("key"), "upstream.tls.key needs upstream.tls.cert".into(), both),
        _ => {}
    }
}

/// The listener's protocol choices: known cipher suites and groups (with a
/// TLS 1.3 suite when 1.3 is the minimum), ALPN protocols the listener
/// serves, each named once, a ticket key rotation rustls can express.
fn listener_tls(tls: &ServerTls, p: &YamlPath, ctx: &mut Ctx<'_>) {
    use crate::config::tls as names;
    let mut suites = Vec::new();
    for (i, name) in tls.cipher_suites.iter().enumerate() {
        match names::cipher_suite(name) {
            Some(s) => suites.push(s),
            None => {
                let hint = format!("one of {}", names::cipher_suite_names().join(", "));
                ctx.at(&p.k("cipher_suites").i(i), format!("unknown cipher suite {name:?}"), Some(&hint));
            }
        }
    }
    if tls.min_version == TlsVersion::V1_3 && !suites.is_empty() && !suites.iter().any(|s| names::is_tls13(*s)) {
        ctx.at(
            &p.k("cipher_suites"),
            "min_version is 1.3 but cipher_suites has no TLS 1.3 suite".into(),
            Some("add TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384 or TLS13_CHACHA20_POLY1305_SHA256"),
        );
    }
    for (i, name) in tls.groups.iter().enumerate() {
        if names::kx_group(name).is_none() {
            let hint = format!("one of {}", names::kx_group_names().join(", "));
            ctx.at(&p.k("groups").i(i), format!("unknown key exchange group {name:?}"), Some(&hint));
        }
    }
    let alpn_hint = Some("h2 and http/1.1, in the order of preference");
    if tls.alpn.is_empty() {
        ctx.at(&p.k("alpn"), "alpn is empty".into(), alpn_hint);
    }
    for (i, proto) in tls.alpn.iter().enumerate() {
        if !names::ALPN.contains(&proto.as_str()) {
            ctx.at(&p.k("alpn").i(i), format!("unknown ALPN protocol {proto:?}"), alpn_hint);
        } else if tls.alpn[..i].contains(proto) {
            ctx.at(&p.k("alpn").i(i), format!("ALPN protocol {proto:?} is listed twice"), alpn_hint);
        }
    }
    if tls.session_cache > MAX_SESSION_CACHE {
        let m = format!("session_cache {} is above {MAX_SESSION_CACHE}", tls.session_cache);
        ctx.at(&p.k("session_cache"), m, Some("each entry is a few hundred bytes; 20000 is the default"));
    }
    let rotation = tls.ticket_key_rotation.0;
    if rotation < Duration::from_secs(1) || rotation > MAX_TICKET_KEY_ROTATION {
        ctx.at(
            &p.k("ticket_key_rotation"),
            format!("ticket_key_rotation {} is not between 1s and 24h", tls.ticket_key_rotation),
            Some("e.g. 1h (the default): a ticket is accepted for at most twice this"),
        );
    }
}

/// Most sessions `server.tls.session_cache` may remember.
const MAX_SESSION_CACHE: usize = 1_000_000;
/// Longest `server.tls.ticket_key_rotation`: a ticket key must not outlive a day.
const MAX_TICKET_KEY_ROTATION: Duration = Duration::from_secs(24 * 3600);

/// `telemetry`: an `http://` collector URL (the exporter speaks plain
/// OTLP/HTTP; a local collector forwards over TLS), a ratio between 0 and
/// 1, a service name that is printable text.
pub(super) fn telemetry(t: &Telemetry, ctx: &mut Ctx<'_>) {
    let p = YamlPath::root().k("telemetry");
    if let Some(url) = &t.otlp_endpoint {
        let hint = Some("the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318");
        match url.parse::<http::Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.authority().is_some() && u.query().is_none() => {}
            Ok(u) if u.scheme_str() == Some("https") => ctx.at(
                &p.k("otlp_endpoint"),
                format!("otlp_endpoint {} uses https, which the exporter does not speak", show(url)),
                Some("send to a collector on the same host or pod over http; it forwards over TLS"),
            ),
            _ => ctx.at(&p.k("otlp_endpoint"), format!("otlp_endpoint {} is not an http:// URL", show(url)), hint),
        }
    }
    if let Some(r) = t.sample_ratio {
        if !(0.0..=1.0).contains(&r) {
            ctx.at(&p.k("sample_ratio"), format!("sample_ratio {r} is out of range"), Some("use 0.0 to 1.0"));
        }
    }
    if let Some(name) = &t.service_name {
        if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
            ctx.at(
                &p.k("service_name"),
                format!("service_name {} is not 1 to 255 printable characters", show(name)),
                Some("e.g. shardgate-eu"),
            );
        }
    }
}
