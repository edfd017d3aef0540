//! Assembly of a [`File`] from the walked YAML tree, one section, map entry
//! or list item at a time, so one bad item does not hide the others: each
//! is deserialized on its own, its type error reported at its exact inner
//! path, and a default used in its place.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::de::DeserializeOwned;
use yaml_serde::Value;

use super::report::{Ctx, NameKind};
use super::schema::*;
use super::show;
use super::values::RangeList;
use super::yaml::{Seg, YamlPath};

/// Builds a [`File`] from the walked tree, reporting type errors per item
/// into `ctx` and using defaults for items that failed.
pub(crate) fn from_value(root: &Value, ctx: &mut Ctx<'_>) -> File {
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
    let moves = seq_items::<Move>(ctx, get("moves"), &top.k("moves"))
        .into_iter()
        .map(|(i, mut m)| {
            m.index = i;
            m
        })
        .collect();
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
    let search_cache = get("search_cache").and_then(|v| item(ctx, v, &top.k("search_cache"))).unwrap_or_default();
    let telemetry = get("telemetry").and_then(|v| item(ctx, v, &top.k("telemetry"))).unwrap_or_default();
    let headers = get("headers").and_then(|v| item(ctx, v, &top.k("headers")));
    let routes = seq_items::<Route>(ctx, get("routes"), &top.k("routes"))
        .into_iter()
        .map(|(i, mut r)| {
            r.index = i;
            r
        })
        .collect();

    File {
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
        moves,
        ids,
        server,
        upstream,
        mesh,
        log,
        mint_batch,
        search_cache,
        telemetry,
        headers,
        routes,
    }
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
