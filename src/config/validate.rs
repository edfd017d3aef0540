//! Semantic checks: everything the types cannot say.
//!
//! Every check records its problem and carries on, so one run reports all of
//! them. Names that are defined but failed to parse (a region with a bad URL,
//! say) still count as defined, so one mistake is reported once, not again
//! at every reference.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::raw::{parse_range, Config, NameKind, Route};
use super::show;
use super::spans::{edit_distance, SpanIndex, YamlPath};
use super::ConfigError;
use crate::ids::Format;
use crate::routing::{insert_template, Strategy, TemplateError, MAX_TEMPLATE_PARAMS};

/// Most regions a table may define.
pub const MAX_REGIONS: usize = 4096;
/// Largest `shards.count`.
pub const MAX_SHARDS: u32 = 1 << 20;
/// Most key ranges.
pub const MAX_KEY_RANGES: usize = 1 << 20;

/// Error collector with access to node positions.
#[derive(Debug)]
pub struct Ctx<'a> {
    index: &'a SpanIndex,
    /// Problems found so far.
    pub errors: Vec<ConfigError>,
    defined: HashSet<(u8, String)>,
    sections: HashSet<String>,
}

impl<'a> Ctx<'a> {
    /// A collector over `index`.
    pub fn new(index: &'a SpanIndex) -> Self {
        Ctx { index, errors: Vec::new(), defined: HashSet::new(), sections: HashSet::new() }
    }

    /// Records a problem at the value at `path`.
    pub fn at(&mut self, path: &YamlPath, message: String, hint: Option<&str>) {
        let pos = self.index.value_pos(path);
        self.push(path, pos, message, hint);
    }

    /// Records a problem at the key that introduced `path`.
    pub fn at_key(&mut self, path: &YamlPath, message: String, hint: Option<&str>) {
        let pos = self.index.key_pos(path);
        self.push(path, pos, message, hint);
    }

    fn push(&mut self, path: &YamlPath, pos: super::spans::Pos, message: String, hint: Option<&str>) {
        self.errors.push(ConfigError {
            path: path.to_string(),
            line: pos.line,
            col: pos.col,
            message,
            hint: Some(hint.unwrap_or("see docs/config.md").to_owned()),
        });
    }

    pub(crate) fn defined(&mut self, kind: NameKind, name: &str) {
        self.defined.insert((kind as u8, name.to_owned()));
    }

    /// Records that the file has this top-level section (even if it failed to parse).
    pub(crate) fn section(&mut self, key: &str) {
        self.sections.insert(key.to_owned());
    }

    fn has_section(&self, key: &str) -> bool {
        self.sections.contains(key)
    }

    fn is_defined(&self, kind: NameKind, name: &str) -> bool {
        self.defined.contains(&(kind as u8, name.to_owned()))
    }
}

/// Parses a 7-hex-digit Locality MAC fragment.
pub use crate::ids::parse_mac_fragment;

/// Parses a canonical decimal integer no larger than `max`.
pub fn parse_decimal(text: &str, max: u64) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if text.len() > 1 && text.starts_with('0') {
        return None;
    }
    text.parse::<u64>().ok().filter(|v| *v <= max)
}

/// The standard methods a route may list.
pub const METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];

/// Runs every semantic check on `cfg`.
pub fn check(cfg: &Config, ctx: &mut Ctx<'_>) {
    let root = YamlPath::root();
    let region_ok =
        |ctx: &Ctx<'_>, name: &str| cfg.regions.contains_key(name) || ctx.is_defined(NameKind::Region, name);
    let region_hint = |name: &str| -> String {
        match closest(name, cfg.regions.keys().map(String::as_str)) {
            Some(c) => format!("did you mean `{c}`? regions are defined under `regions`"),
            None => "define it under `regions` or use one that is".to_owned(),
        }
    };
    let mb = &cfg.mint_batch;
    if let Some(p) = &mb.path {
        if !p.starts_with('/') || p.contains(['?', '#', ' ']) {
            let path = root.k("mint_batch").k("path");
            ctx.at(
                &path,
                format!("batch mint path {} is not an absolute path", show(p)),
                Some("e.g. `/_shardgate/ids`"),
            );
        }
    }
    if mb.max_count == 0 {
        let path = root.k("mint_batch").k("max_count");
        ctx.at(&path, "batch mint max_count must be at least 1".into(), Some("e.g. `max_count: 10000`"));
    }
    let check_region = |ctx: &mut Ctx<'_>, path: &YamlPath, name: &str| {
        if !region_ok(ctx, name) {
            ctx.at(path, format!("unknown region {}", show(name)), Some(&region_hint(name)));
        }
    };

    // Top-level scalars.
    if cfg.listen == cfg.admin {
        ctx.at(
            &root.k("admin"),
            format!("admin address {} is the same as listen", cfg.admin),
            Some("give the admin listener its own port"),
        );
    }
    if let Some(r) = &cfg.region {
        check_region(ctx, &root.k("region"), r);
    }
    if let Some(r) = &cfg.default_region {
        check_region(ctx, &root.k("default_region"), r);
    }
    if let Some(i) = &cfg.instance {
        if i.is_empty() || !i.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            ctx.at(
                &root.k("instance"),
                format!("invalid instance name {}", show(i)),
                Some("use letters, digits, `-`, `_` and `.` only"),
            );
        }
    }

    // Regions.
    if cfg.regions.is_empty() && !ctx.errors.iter().any(|e| e.path.starts_with("regions")) {
        ctx.at(&root, "no regions are defined".into(), Some("add `regions:` with at least one region"));
    }
    if cfg.regions.len() > MAX_REGIONS {
        ctx.at(
            &root.k("regions"),
            format!("{} regions defined, more than the limit of {MAX_REGIONS}", cfg.regions.len()),
            None,
        );
    }
    for (name, region) in &cfg.regions {
        let p = root.k("regions").k(name);
        if !is_name(name) {
            ctx.at_key(
                &p,
                format!("invalid region name {}", show(name)),
                Some("use letters, digits, `-` and `_` only"),
            );
        }
        if region.upstreams.is_empty() && region.peer.is_none() {
            ctx.at_key(
                &p,
                format!("region {} has neither upstreams nor peer", show(name)),
                Some("add `upstreams: [\"http://host:port\"]` or `peer: \"http://gateway:port\"`"),
            );
        }
        if let Some(f) = &region.failover {
            if f == name {
                ctx.at(
                    &p.k("failover"),
                    format!("region {} fails over to itself", show(name)),
                    Some("name a different region or remove `failover`"),
                );
            } else {
                check_region(ctx, &p.k("failover"), f);
            }
        }
    }
    // Failover cycles (longer than one; self-loops are reported above).
    let mut reported: HashSet<&str> = HashSet::new();
    for start in cfg.regions.keys() {
        let mut chain: Vec<&str> = vec![start.as_str()];
        let mut cur = start.as_str();
        while let Some(next) = cfg.regions.get(cur).and_then(|r| r.failover.as_deref()) {
            if next == cur {
                break;
            }
            if let Some(pos) = chain.iter().position(|c| *c == next) {
                let cycle = &chain[pos..];
                if pos == 0 && !cycle.iter().any(|c| reported.contains(c)) {
                    reported.extend(cycle.iter().copied());
                    let mut text = cycle.join(" -> ");
                    text.push_str(" -> ");
                    text.push_str(next);
                    ctx.at(
                        &root.k("regions").k(start).k("failover"),
                        format!("failover cycle: {text}"),
                        Some("failover chains must end in a region without `failover`"),
                    );
                }
                break;
            }
            chain.push(next);
            cur = next;
        }
    }

    // Countries and entities.
    let mut by_id: BTreeMap<i64, &str> = BTreeMap::new();
    // Requests name countries case-insensitively (`X-Country: kz`), so two
    // names that differ only in case would be ambiguous.
    let mut by_folded: BTreeMap<String, &str> = BTreeMap::new();
    for (name, c) in &cfg.countries {
        let p = root.k("countries").k(name);
        if !is_name(name) {
            ctx.at_key(
                &p,
                format!("invalid country name {}", show(name)),
                Some("use letters, digits, `-` and `_` only, e.g. KZ"),
            );
        }
        if let Some(other) = by_folded.insert(name.to_ascii_lowercase(), name) {
            ctx.at_key(
                &p,
                format!("country name {} differs from {} only in case", show(name), show(other)),
                Some("country names are matched case-insensitively; rename one"),
            );
        }
        if !(0..=255).contains(&c.id) {
            ctx.at(
                &p.k("id"),
                format!("country id {} of {} is out of range 0-255", c.id, show(name)),
                Some("iuids store the country in 8 bits"),
            );
        } else if let Some(other) = by_id.get(&c.id) {
            ctx.at(
                &p.k("id"),
                format!("country id {} of {} is already used by {}", c.id, show(name), show(other)),
                Some("each country needs its own id"),
            );
        } else {
            by_id.insert(c.id, name);
        }
        check_region(ctx, &p.k("region"), &c.region);
    }
    let mut by_code: BTreeMap<i64, &str> = BTreeMap::new();
    for (name, code) in &cfg.entities {
        let p = root.k("entities").k(name);
        if !is_name(name) {
            ctx.at_key(
                &p,
                format!("invalid entity name {}", show(name)),
                Some("use letters, digits, `-` and `_` only"),
            );
        }
        if !(0..=255).contains(code) {
            ctx.at(
                &p,
                format!("entity code {code} of {} is out of range 0-255", show(name)),
                Some("iuids store the service entity in 8 bits"),
            );
        } else if let Some(other) = by_code.get(code) {
            ctx.at(
                &p,
                format!("entity code {code} of {} is already used by {}", show(name), show(other)),
                Some("each entity needs its own code"),
            );
        } else {
            by_code.insert(*code, name);
        }
    }
    let check_country = |ctx: &mut Ctx<'_>, path: &YamlPath, name: &str| {
        if !cfg.countries.contains_key(name) && !ctx.is_defined(NameKind::Country, name) {
            let hint = match closest(name, cfg.countries.keys().map(String::as_str)) {
                Some(c) => format!("did you mean `{c}`?"),
                None => "define it under `countries`".to_owned(),
            };
            ctx.at(path, format!("unknown country {}", show(name)), Some(&hint));
        }
    };
    let check_entity = |ctx: &mut Ctx<'_>, path: &YamlPath, name: &str| {
        if !cfg.entities.contains_key(name) && !ctx.is_defined(NameKind::Entity, name) {
            let hint = match closest(name, cfg.entities.keys().map(String::as_str)) {
                Some(c) => format!("did you mean `{c}`?"),
                None => "define it under `entities`".to_owned(),
            };
            ctx.at(path, format!("unknown entity {}", show(name)), Some(&hint));
        }
    };

    // Overrides.
    let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
    for o in &cfg.overrides {
        let p = root.k("overrides").i(o.index);
        check_country(ctx, &p.k("country"), &o.country);
        check_entity(ctx, &p.k("entity"), &o.entity);
        check_region(ctx, &p.k("region"), &o.region);
        if let Some(first) = pairs.get(&(o.country.as_str(), o.entity.as_str())) {
            ctx.at(
                &p,
                format!("override for {}/{} repeats overrides[{first}]", show(&o.country), show(&o.entity)),
                Some("keep one override per (country, entity) pair"),
            );
        } else {
            pairs.insert((&o.country, &o.entity), o.index);
        }
    }

    // Shards.
    if let Some(sh) = &cfg.shards {
        let p = root.k("shards");
        if sh.count == 0 || sh.count > MAX_SHARDS {
            ctx.at(
                &p.k("count"),
                format!("shard count {} is out of range 1-{MAX_SHARDS}", sh.count),
                Some("a positive whole number"),
            );
        } else {
            let mut owner: Vec<Option<&str>> = vec![None; sh.count as usize];
            for (region, ranges) in &sh.regions {
                let rp = p.k("regions").k(region);
                check_region(ctx, &rp, region);
                for &(a, b) in &ranges.0 {
                    if b >= u64::from(sh.count) {
                        ctx.at(
                            &rp,
                            format!("shard range {a}-{b} of {} is outside 0-{}", show(region), sh.count - 1),
                            Some("shards are numbered 0..count-1"),
                        );
                        continue;
                    }
                    let mut clash: BTreeSet<&str> = BTreeSet::new();
                    for slot in &mut owner[a as usize..=b as usize] {
                        match slot {
                            Some(o) => {
                                clash.insert(o);
                            }
                            None => *slot = Some(region),
                        }
                    }
                    if !clash.is_empty() {
                        let names: Vec<&str> = clash.into_iter().collect();
                        ctx.at(
                            &rp,
                            format!("shard range {a}-{b} of {} overlaps shards of {}", show(region), names.join(", ")),
                            Some("each shard must belong to exactly one region"),
                        );
                    }
                }
            }
            let mut gaps = Vec::new();
            let mut i = 0usize;
            while i < owner.len() {
                if owner[i].is_none() {
                    let start = i;
                    while i < owner.len() && owner[i].is_none() {
                        i += 1;
                    }
                    gaps.push(if i - 1 == start { format!("{start}") } else { format!("{start}-{}", i - 1) });
                } else {
                    i += 1;
                }
            }
            let ranges_broken = ctx.errors.iter().any(|e| e.path.starts_with("shards.regions."));
            if !gaps.is_empty() && !ranges_broken {
                let mut list = gaps.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
                if gaps.len() > 8 {
                    list.push_str(", ...");
                }
                ctx.at(
                    &p.k("regions"),
                    format!("shards {list} are not assigned to any region"),
                    Some("extend a region's range to cover them, or lower `shards.count`"),
                );
            }
        }
    }

    // Node tables.
    let np = root.k("nodes");
    let sf = &cfg.ids.snowflake;
    let node_key_checks: [NodeKeyCheck<'_>; 5] = [
        (
            "locality_mac",
            &cfg.nodes.locality_mac,
            Box::new(|k| parse_mac_fragment(k).map(u64::from)),
            "use the 7 hex digits of the mac fragment, e.g. \"c110002\"".to_owned(),
        ),
        (
            "locality_pid",
            &cfg.nodes.locality_pid,
            Box::new(|k| parse_decimal(k, 65_535)),
            "use a pid 0-65535".to_owned(),
        ),
        (
            "snowflake_datacenter",
            &cfg.nodes.snowflake_datacenter,
            Box::new(move |k| parse_decimal(k, max_for_bits(sf.datacenter_bits))),
            format!("use a datacenter id 0-{}", max_for_bits(sf.datacenter_bits)),
        ),
        (
            "snowflake_worker",
            &cfg.nodes.snowflake_worker,
            Box::new(move |k| parse_decimal(k, max_for_bits(sf.worker_bits))),
            format!("use a worker id 0-{}", max_for_bits(sf.worker_bits)),
        ),
        (
            "sonyflake_machine",
            &cfg.nodes.sonyflake_machine,
            Box::new(|k| parse_decimal(k, 65_535)),
            "use a machine id 0-65535".to_owned(),
        ),
    ];
    for (table, entries, parse, hint) in &node_key_checks {
        for (key, region) in entries.iter() {
            let p = np.k(table).k(key);
            if parse(key).is_none() {
                ctx.at_key(&p, format!("invalid {} key {}", table.replace('_', " "), show(key)), Some(hint));
            }
            check_region(ctx, &p, region);
        }
    }
    let mut ig_owner: BTreeMap<u64, (u64, &str)> = BTreeMap::new();
    for (key, region) in &cfg.nodes.instagram_shard {
        let p = np.k("instagram_shard").k(key);
        check_region(ctx, &p, region);
        match parse_range(key) {
            Ok((a, b)) if b <= 8191 => {
                let overlap = ig_owner.range(..=b).next_back().filter(|(_, (end, _))| *end >= a);
                if let Some((s, (e, other))) = overlap {
                    ctx.at_key(
                        &p,
                        format!("instagram shard range {} overlaps {s}-{e} of {}", show(key), show(other)),
                        Some("each shard must belong to one region"),
                    );
                } else {
                    ig_owner.insert(a, (b, region));
                }
            }
            Ok(_) => ctx.at_key(
                &p,
                format!("instagram shard range {} is outside 0-8191", show(key)),
                Some("instagram logical shards are 13 bits"),
            ),
            Err(m) => ctx.at_key(&p, m, Some("write a shard or range such as \"0-4095\"")),
        }
    }

    // Key ranges.
    if cfg.key_ranges.len() > MAX_KEY_RANGES {
        ctx.at(
            &root.k("key_ranges"),
            format!("{} key ranges, more than the limit of {MAX_KEY_RANGES}", cfg.key_ranges.len()),
            None,
        );
    }
    let mut prev: Option<u64> = None;
    for (n, r) in cfg.key_ranges.iter().enumerate() {
        let p = root.k("key_ranges").i(r.index);
        check_region(ctx, &p.k("region"), &r.region);
        if n == 0 && r.index == 0 && r.start.0 != 0 {
            ctx.at(
                &p.k("start"),
                format!("first key range starts at {:016x}, not 0000000000000000", r.start.0),
                Some("start the first range at \"0000000000000000\" so every key has an owner"),
            );
        }
        if let Some(prev) = prev {
            if r.start.0 <= prev {
                ctx.at(
                    &p.k("start"),
                    format!("key range start {:016x} is not after the previous start {prev:016x}", r.start.0),
                    Some("list key ranges in strictly ascending order of start"),
                );
            }
        }
        prev = Some(r.start.0);
    }

    // Hash.
    if let Some(h) = &cfg.hash {
        let p = root.k("hash");
        if h.regions.is_empty() {
            ctx.at(&p.k("regions"), "hash has no regions".into(), Some("list at least one region"));
        }
        let mut seen = HashSet::new();
        for (i, r) in h.regions.iter().enumerate() {
            check_region(ctx, &p.k("regions").i(i), r);
            if !seen.insert(r) {
                ctx.at(
                    &p.k("regions").i(i),
                    format!("region {} is listed twice", show(r)),
                    Some("use `weights` to give a region more keys"),
                );
            }
        }
        for (r, w) in &h.weights {
            if !h.regions.contains(r) {
                ctx.at_key(
                    &p.k("weights").k(r),
                    format!("weight for {} which is not in hash.regions", show(r)),
                    Some("add the region to `hash.regions` or remove the weight"),
                );
            }
            if !(w.is_finite() && *w > 0.0) {
                ctx.at(
                    &p.k("weights").k(r),
                    format!("weight {w} of {} is not a positive number", show(r)),
                    Some("weights are positive numbers, default 1"),
                );
            }
        }
    }

    // Time ranges.
    let mut prev: Option<u64> = None;
    let last = cfg.time_ranges.len().saturating_sub(1);
    for (n, t) in cfg.time_ranges.iter().enumerate() {
        let p = root.k("time_ranges").i(t.index);
        check_region(ctx, &p.k("region"), &t.region);
        match t.until {
            None if n != last => ctx.at(
                &p,
                "only the last time range may omit `until`".into(),
                Some("add `until:` or move this range to the end"),
            ),
            None => {}
            Some(u) => {
                if let Some(prev) = prev {
                    if u.0 <= prev {
                        ctx.at(
                            &p.k("until"),
                            format!("time range until {} is not after the previous until {prev}", u.0),
                            Some("list time ranges in ascending order of `until`"),
                        );
                    }
                }
                prev = Some(u.0);
            }
        }
    }

    // Per-format parameters.
    let ip = root.k("ids");
    let layout = crate::ids::SnowflakeLayout {
        epoch_ms: sf.epoch_ms,
        datacenter_bits: sf.datacenter_bits,
        worker_bits: sf.worker_bits,
        sequence_bits: sf.sequence_bits,
    };
    if !layout.is_valid() {
        ctx.at(
            &ip.k("snowflake"),
            format!(
                "snowflake fields use {} bits; they must leave timestamp bits below bit 63",
                u32::from(sf.datacenter_bits) + u32::from(sf.worker_bits) + u32::from(sf.sequence_bits)
            ),
            Some("datacenter_bits + worker_bits + sequence_bits must be below 63"),
        );
    }
    if cfg.ids.uniqid.total_shards == Some(0) {
        ctx.at(
            &ip.k("uniqid").k("total_shards"),
            "total_shards must be at least 1".into(),
            Some("a positive whole number"),
        );
    }
    if cfg.ids.uniqid.strict && cfg.ids.uniqid.total_shards.is_none() && cfg.shards.is_none() {
        ctx.at(
            &ip.k("uniqid").k("strict"),
            "strict uniqid checks need a shard count".into(),
            Some("set `ids.uniqid.total_shards` or `shards.count`"),
        );
    }
    if let Some(m) = &cfg.ids.locality.mac_fragment {
        if parse_mac_fragment(m).is_none() {
            ctx.at(
                &ip.k("locality").k("mac_fragment"),
                format!("invalid mac fragment {}", show(m)),
                Some("use 7 hex digits, e.g. \"c110002\""),
            );
        }
    }

    // Settings.
    for (key, d) in [("header_read_timeout", cfg.server.header_read_timeout), ("idle_timeout", cfg.server.idle_timeout)]
    {
        if d.0.is_zero() {
            ctx.at(
                &root.k("server").k(key),
                format!("{key} must be positive"),
                Some("durations look like 250ms, 15s or 2m"),
            );
        }
    }
    for (key, v) in [
        ("max_header_bytes", cfg.server.max_header_bytes),
        ("max_headers", cfg.server.max_headers),
        ("max_uri_bytes", cfg.server.max_uri_bytes),
        ("max_connections", cfg.server.max_connections),
        ("admin_max_connections", cfg.server.admin_max_connections),
    ] {
        if v == 0 {
            ctx.at(&root.k("server").k(key), format!("{key} must be positive"), Some("a positive whole number"));
        }
    }
    let up = &cfg.upstream;
    for (key, d) in [
        ("connect_timeout", up.connect_timeout),
        ("attempt_timeout", up.attempt_timeout),
        ("request_timeout", up.request_timeout),
    ] {
        if d.0.is_zero() {
            ctx.at(
                &root.k("upstream").k(key),
                format!("{key} must be positive"),
                Some("durations look like 250ms, 15s or 2m"),
            );
        }
    }
    if up.max_connections == 0 {
        ctx.at(
            &root.k("upstream").k("max_connections"),
            "max_connections must be positive".into(),
            Some("a positive whole number, e.g. 512"),
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
    check_tls(cfg, ctx);
    if cfg.mesh.max_hops == 0 || cfg.mesh.max_hops > 255 {
        ctx.at(
            &root.k("mesh").k("max_hops"),
            format!("max_hops {} is outside 1-255", cfg.mesh.max_hops),
            Some("3 covers a front door, the owner and two failover regions"),
        );
    }

    check_routes(cfg, ctx);
}

/// `server.tls` and `upstream.tls`: paths present and non-empty, options
/// that need each other set together. The files themselves are read when
/// the proxy starts (`check` may run where the keys are not installed).
fn check_tls(cfg: &Config, ctx: &mut Ctx<'_>) {
    let root = YamlPath::root();
    let hint = Some("a path to a PEM file, e.g. /etc/shardgate/tls/cert.pem");
    if let Some(tls) = &cfg.server.tls {
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
    }
    let t = &cfg.upstream.tls;
    let p = root.k("upstream").k("tls");
    for (key, v) in [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)] {
        if v.as_ref().is_some_and(|v| v.trim().is_empty()) {
            ctx.at(&p.k(key), format!("upstream.tls.{key} is an empty path"), hint);
        }
    }
    match (&t.cert, &t.key) {
        (Some(_), None) => ctx.at(
            &p.k("cert"),
            "upstream.tls.cert needs upstream.tls.key".into(),
            Some("set both `cert` and `key` for a client certificate, or neither"),
        ),
        (None, Some(_)) => ctx.at(
            &p.k("key"),
            "upstream.tls.key needs upstream.tls.cert".into(),
            Some("set both `cert` and `key` for a client certificate, or neither"),
        ),
        _ => {}
    }
}

/// A node table, its key parser and the hint for a bad key.
type NodeKeyCheck<'a> = (&'static str, &'a BTreeMap<String, String>, Box<dyn Fn(&str) -> Option<u64> + 'a>, String);

/// A route's methods; `None` means all.
type MethodSet = Option<BTreeSet<String>>;

fn max_for_bits(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn closest<'n>(name: &str, candidates: impl Iterator<Item = &'n str>) -> Option<&'n str> {
    candidates
        .map(|c| (edit_distance(&name.to_ascii_lowercase(), &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

/// Whether the table has what the natural strategy of `format` needs.
fn natural_configured(cfg: &Config, ctx: &Ctx<'_>, format: Format) -> Option<&'static str> {
    let n = &cfg.nodes;
    // A section that is present but failed to parse was reported already.
    let broken = |key: &str| ctx.has_section(key) && ctx.errors.iter().any(|e| e.path.starts_with(key));
    let ok = match format {
        Format::Iuid => !cfg.countries.is_empty() || broken("countries"),
        Format::Uniqid => cfg.shards.is_some() || broken("shards"),
        Format::Locality => !n.locality_mac.is_empty() || !n.locality_pid.is_empty(),
        Format::Snowflake => !n.snowflake_datacenter.is_empty() || !n.snowflake_worker.is_empty(),
        Format::Sonyflake => !n.sonyflake_machine.is_empty(),
        Format::Instagram => !n.instagram_shard.is_empty(),
        Format::Uuidv7 => !cfg.time_ranges.is_empty() || !cfg.key_ranges.is_empty() || cfg.hash.is_some(),
    } || (format != Format::Iuid && format != Format::Uniqid && format != Format::Uuidv7 && broken("nodes"));
    if ok {
        return None;
    }
    Some(match format {
        Format::Iuid => "`countries`",
        Format::Uniqid => "`shards`",
        Format::Locality => "`nodes.locality_mac` or `nodes.locality_pid`",
        Format::Snowflake => "`nodes.snowflake_datacenter` or `nodes.snowflake_worker`",
        Format::Sonyflake => "`nodes.sonyflake_machine`",
        Format::Instagram => "`nodes.instagram_shard`",
        Format::Uuidv7 => "`time_ranges`, `key_ranges` or `hash`",
    })
}

fn check_routes(cfg: &Config, ctx: &mut Ctx<'_>) {
    let root = YamlPath::root();
    let mut names: HashMap<&str, usize> = HashMap::new();
    // template -> (route index, methods or None for all)
    let mut by_template: HashMap<&str, Vec<(&Route, MethodSet)>> = HashMap::new();
    let mut router: matchit::Router<usize> = matchit::Router::new();
    let mut template_owner: HashMap<String, &Route> = HashMap::new();

    for r in &cfg.routes {
        let p = root.k("routes").i(r.index);
        if r.name.is_empty() || !r.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            ctx.at(
                &p.k("name"),
                format!("invalid route name {}", show(&r.name)),
                Some("use letters, digits, `-`, `_` and `.` only"),
            );
        }
        if let Some(first) = names.get(r.name.as_str()) {
            ctx.at(
                &p.k("name"),
                format!("route name {} is already used by routes[{first}]", show(&r.name)),
                Some("route names label metrics and must be unique"),
            );
        } else {
            names.insert(&r.name, r.index);
        }

        // Upgrades: a tunnel of HTTP/2 (h2c) would carry requests the proxy
        // never routed.
        for (i, proto) in r.upgrades.iter().enumerate() {
            let valid = !proto.is_empty() && proto.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if proto.eq_ignore_ascii_case("h2c") {
                ctx.at(
                    &p.k("upgrades").i(i),
                    "h2c cannot be tunnelled: requests inside it would bypass routing".into(),
                    Some("remove it; clients reach shardgate over HTTP/2 directly (prior knowledge or ALPN)"),
                );
            } else if !valid {
                ctx.at(
                    &p.k("upgrades").i(i),
                    format!("invalid upgrade protocol {}", show(proto)),
                    Some("a protocol token such as websocket"),
                );
            }
        }

        // Methods.
        let mut methods: Option<BTreeSet<String>> = None;
        if let Some(list) = &r.matcher.methods {
            let mut set = BTreeSet::new();
            if list.is_empty() {
                ctx.at(
                    &p.k("match").k("methods"),
                    "methods list is empty".into(),
                    Some("remove `methods` to match every method"),
                );
            }
            for (i, m) in list.iter().enumerate() {
                if !METHODS.contains(&m.as_str()) {
                    let hint = if METHODS.contains(&m.to_ascii_uppercase().as_str()) {
                        format!("methods are upper case: {}", m.to_ascii_uppercase())
                    } else {
                        format!("use one of {}", METHODS.join(", "))
                    };
                    ctx.at(&p.k("match").k("methods").i(i), format!("unknown method {}", show(m)), Some(&hint));
                } else if !set.insert(m.clone()) {
                    ctx.at(
                        &p.k("match").k("methods").i(i),
                        format!("method {} is listed twice", show(m)),
                        Some("remove the repeat"),
                    );
                }
            }
            methods = Some(set);
        }

        // Path template.
        let tpl = r.matcher.path.as_str();
        let path_ok = tpl.starts_with('/');
        if !path_ok {
            ctx.at(
                &p.k("match").k("path"),
                format!("path template {} does not start with `/`", show(tpl)),
                Some("write templates such as \"/v1/orders/{id}\""),
            );
        } else if let Some(list) = by_template.get_mut(tpl) {
            let mut unreachable_by = None;
            for (earlier, their) in list.iter() {
                let overlap = match (&methods, their) {
                    (None, _) | (_, None) => true,
                    (Some(a), Some(b)) => a.intersection(b).next().is_some(),
                };
                if overlap {
                    unreachable_by = Some(*earlier);
                    break;
                }
            }
            if let Some(earlier) = unreachable_by {
                let at = if r.matcher.methods.is_some() { p.k("match").k("methods") } else { p.k("match").k("path") };
                ctx.at(
                    &at,
                    format!(
                        "route {} is unreachable: route {} (routes[{}]) already matches these methods on {}",
                        show(&r.name),
                        show(&earlier.name),
                        earlier.index,
                        show(tpl)
                    ),
                    Some("give the routes disjoint `methods`, or remove one"),
                );
            }
            list.push((r, methods.clone()));
        } else {
            by_template.insert(tpl, vec![(r, methods.clone())]);
            match insert_template(&mut router, tpl, r.index) {
                Ok(()) => {
                    template_owner.insert(tpl.to_owned(), r);
                }
                Err(TemplateError::TooManyParams(n)) => ctx.at(
                    &p.k("match").k("path"),
                    format!(
                        "path template {} has {n} parameters; at most {MAX_TEMPLATE_PARAMS} are allowed",
                        show(tpl)
                    ),
                    Some("match fewer segments as parameters, or end with a catch-all {*rest}"),
                ),
                Err(TemplateError::Router(e)) => {
                    let msg = match &e {
                        matchit::InsertError::Conflict { with } => match template_owner.get(with) {
                            Some(o) => format!(
                                "path template {} conflicts with {} of route {} (routes[{}])",
                                show(tpl),
                                show(with),
                                show(&o.name),
                                o.index
                            ),
                            None => format!("path template {} conflicts with {}", show(tpl), show(with)),
                        },
                        other => format!("invalid path template {}: {}", show(tpl), other.to_string().to_lowercase()),
                    };
                    ctx.at(&p.k("match").k("path"), msg, Some("parameters are whole segments like {id} or a trailing {*rest}; two templates may not differ only in parameter names"));
                }
            }
        }

        let strategy = Strategy::from_name(&r.placement);
        if strategy.is_none() {
            let hint = format!("use one of {}", Strategy::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "));
            ctx.at(&p.k("placement"), format!("unknown placement {}", show(&r.placement)), Some(&hint));
        }

        match (&r.id, &r.mint) {
            (None, None) => ctx.at(
                &p,
                format!("route {} has neither `id` nor `mint`", show(&r.name)),
                Some("add `id: { path_param: id, formats: [iuid] }` or a `mint:` rule"),
            ),
            (Some(_), Some(_)) => ctx.at(
                &p.k("mint"),
                format!("route {} has both `id` and `mint`", show(&r.name)),
                Some("a route either reads an id or mints one; split it in two"),
            ),
            _ => {}
        }

        if let Some(id) = &r.id {
            let ip = p.k("id");
            let sources =
                [id.path_param.is_some(), id.header.is_some(), id.query.is_some()].iter().filter(|b| **b).count();
            if sources != 1 {
                ctx.at(
                    &ip,
                    format!(
                        "id of route {} needs exactly one of path_param, header or query (found {sources})",
                        show(&r.name)
                    ),
                    Some("e.g. `path_param: id`"),
                );
            }
            if let Some(pp) = &id.path_param {
                let has = tpl.contains(&format!("{{{pp}}}")) || tpl.contains(&format!("{{*{pp}}}"));
                if !has {
                    ctx.at(
                        &ip.k("path_param"),
                        format!("path parameter {} does not appear in {}", show(pp), show(tpl)),
                        Some("name a `{param}` of the route's path"),
                    );
                }
            }
            if let Some(h) = &id.header {
                if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    ctx.at(
                        &ip.k("header"),
                        format!("invalid header name {}", show(h)),
                        Some("header names are tokens such as X-Entity-Id"),
                    );
                }
            }
            if let Some(q) = &id.query {
                if q.is_empty() {
                    ctx.at(&ip.k("query"), "empty query parameter name".into(), Some("e.g. `query: id`"));
                }
            }
            if id.formats.is_empty() {
                ctx.at(
                    &ip.k("formats"),
                    "formats list is empty".into(),
                    Some("list the accepted formats, e.g. [iuid]"),
                );
            }
            let mut seen = HashSet::new();
            for (i, f) in id.formats.iter().enumerate() {
                let fp = ip.k("formats").i(i);
                let Some(format) = Format::from_name(f) else {
                    let hint = match closest(f, Format::ALL.iter().map(|f| f.name())) {
                        Some(c) => format!("did you mean `{c}`?"),
                        None => format!("use one of {}", Format::ALL.map(|f| f.name()).join(", ")),
                    };
                    ctx.at(&fp, format!("unknown id format {}", show(f)), Some(&hint));
                    continue;
                };
                if !seen.insert(format) {
                    ctx.at(&fp, format!("format {} is listed twice", show(f)), Some("remove the repeat"));
                    continue;
                }
                if let Some(s) = strategy {
                    check_strategy(cfg, ctx, &fp, &r.name, format, s);
                }
            }
        }

        if let Some(m) = &r.mint {
            let mp = p.k("mint");
            match Format::from_name(&m.format) {
                None => ctx.at(
                    &mp.k("format"),
                    format!("unknown id format {}", show(&m.format)),
                    Some("mintable formats: iuid, locality, uniqid, uuidv7"),
                ),
                Some(f) if !f.can_mint() => ctx.at(
                    &mp.k("format"),
                    format!("format {} cannot be minted", show(&m.format)),
                    Some("mintable formats: iuid, locality, uniqid, uuidv7"),
                ),
                Some(f) => {
                    if let Some(s) = strategy {
                        check_strategy(cfg, ctx, &mp.k("format"), &r.name, f, s);
                    }
                    check_mint(cfg, ctx, &mp, m, f);
                }
            }
            if let Some(h) = &m.header {
                if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    ctx.at(
                        &mp.k("header"),
                        format!("invalid header name {}", show(h)),
                        Some("header names are tokens such as X-Entity-Id"),
                    );
                }
            }
            if let Some(l) = &m.location {
                if !l.contains("{id}") {
                    ctx.at(
                        &mp.k("location"),
                        format!("location template {} has no {{id}}", show(l)),
                        Some("e.g. \"/v1/orders/{id}\""),
                    );
                }
            }
        }
    }
}

fn check_strategy(cfg: &Config, ctx: &mut Ctx<'_>, path: &YamlPath, route: &str, format: Format, s: Strategy) {
    let fits = match s {
        Strategy::Auto => {
            if let Some(missing) = natural_configured(cfg, ctx, format) {
                if cfg.default_region.is_none() {
                    ctx.at(
                        path,
                        format!("route {} accepts {} ids but {missing} is not configured", show(route), format),
                        Some("configure it, set `default_region`, or choose another `placement`"),
                    );
                }
            }
            return;
        }
        Strategy::Country => format == Format::Iuid,
        Strategy::Shard => format == Format::Uniqid,
        Strategy::Node => {
            matches!(format, Format::Locality | Format::Snowflake | Format::Sonyflake | Format::Instagram)
        }
        Strategy::KeyRange | Strategy::Hash | Strategy::TimeRange => true,
    };
    if !fits {
        ctx.at(
            path,
            format!("placement {} cannot place {} ids (route {})", s.name(), format, show(route)),
            Some("use `placement: auto` or a strategy that reads this format"),
        );
        return;
    }
    let missing = match s {
        Strategy::KeyRange if cfg.key_ranges.is_empty() && !ctx.has_section("key_ranges") => Some("`key_ranges`"),
        Strategy::Hash if cfg.hash.is_none() && !ctx.has_section("hash") => Some("`hash`"),
        Strategy::TimeRange if cfg.time_ranges.is_empty() && !ctx.has_section("time_ranges") => Some("`time_ranges`"),
        Strategy::Country | Strategy::Shard | Strategy::Node => natural_configured(cfg, ctx, format),
        _ => None,
    };
    if let (Some(m), None) = (missing, &cfg.default_region) {
        ctx.at(
            path,
            format!("route {} uses placement {} but {m} is not configured", show(route), s.name()),
            Some("configure it or set `default_region`"),
        );
    }
}

fn check_country_source(cfg: &Config, ctx: &mut Ctx<'_>, mp: &YamlPath, c: &super::raw::CountrySource) {
    let cp = mp.k("country");
    let n =
        [c.header.is_some(), c.query.is_some(), c.fixed.is_some(), c.local.is_some()].iter().filter(|b| **b).count();
    if n != 1 {
        ctx.at(
            &cp,
            format!("country source needs exactly one of header, query, fixed or local (found {n})"),
            Some("e.g. `country: { header: X-Country }`"),
        );
    }
    if let Some(h) = &c.header {
        if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
            ctx.at(
                &cp.k("header"),
                format!("invalid header name {}", show(h)),
                Some("header names are tokens such as X-Country"),
            );
        }
    }
    if let Some(fx) = &c.fixed {
        if !cfg.countries.contains_key(fx) && !ctx.is_defined(NameKind::Country, fx) {
            ctx.at(&cp.k("fixed"), format!("unknown country {}", show(fx)), Some("define it under `countries`"));
        }
    }
    match c.local {
        Some(false) => ctx.at(
            &cp.k("local"),
            "`local: false` is not a country source".into(),
            Some("write `local: true` or use header, query or fixed"),
        ),
        Some(true) => match &cfg.region {
            None => ctx.at(
                &cp.k("local"),
                "`local: true` needs this instance's `region`".into(),
                Some("set the top-level `region:`"),
            ),
            Some(r) if !cfg.countries.values().any(|c| &c.region == r) => ctx.at(
                &cp.k("local"),
                format!("no country is owned by the local region {}", show(r)),
                Some("assign a country to this region or use another source"),
            ),
            _ => {}
        },
        None => {}
    }
}

fn check_mint(cfg: &Config, ctx: &mut Ctx<'_>, mp: &YamlPath, m: &super::raw::MintSpec, f: Format) {
    if f == Format::Iuid {
        match &m.entity {
            None => ctx.at(mp, "iuid mint rule needs `entity`".into(), Some("add `entity: <name from entities>`")),
            Some(e) => {
                if !cfg.entities.contains_key(e) && !ctx.is_defined(NameKind::Entity, e) {
                    let hint = match closest(e, cfg.entities.keys().map(String::as_str)) {
                        Some(c) => format!("did you mean `{c}`?"),
                        None => "define it under `entities`".to_owned(),
                    };
                    ctx.at(&mp.k("entity"), format!("unknown entity {}", show(e)), Some(&hint));
                }
            }
        }
        match &m.country {
            None => ctx.at(
                mp,
                "iuid mint rule needs `country`".into(),
                Some("add `country: { header: X-Country }`, `{ query: q }`, `{ fixed: KZ }` or `{ local: true }`"),
            ),
            Some(c) => check_country_source(cfg, ctx, mp, c),
        }
    } else {
        if m.entity.is_some() {
            ctx.at(&mp.k("entity"), format!("`entity` only applies to iuid, not {f}"), Some("remove it"));
        }
        match &m.country {
            // A uniqid create lands on a shard owned by the country's region.
            Some(c) if f == Format::Uniqid => check_country_source(cfg, ctx, mp, c),
            Some(_) => ctx.at(
                &mp.k("country"),
                format!("`country` only applies to iuid and uniqid, not {f}"),
                Some("remove it"),
            ),
            None => {}
        }
        if f == Format::Uniqid && cfg.ids.uniqid.total_shards.is_none() && cfg.shards.is_none() {
            ctx.at(
                mp,
                "minting uniqid ids needs a shard count".into(),
                Some("set `ids.uniqid.total_shards` or `shards.count`"),
            );
        }
    }
}
