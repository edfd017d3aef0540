//! The placement tables: shard ranges, node tables, key ranges, rendezvous
//! hashing and time ranges.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::names::Names;
use super::{parse_decimal, MAX_KEY_RANGES, MAX_SHARDS};
use crate::config::model::{Nodes, Shards};
use crate::config::report::Ctx;
use crate::config::schema::File;
use crate::config::show;
use crate::config::values::parse_range;
use crate::config::yaml::YamlPath;
use crate::ids::parse_mac_fragment;

/// `shards`: a count, and ranges that cover every shard exactly once.
pub(super) fn shards(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Option<Shards> {
    let sh = file.shards.as_ref()?;
    let p = YamlPath::root().k("shards");
    if sh.count == 0 || sh.count > MAX_SHARDS {
        ctx.at(
            &p.k("count"),
            format!("shard count {} is out of range 1-{MAX_SHARDS}", sh.count),
            Some("a positive whole number"),
        );
        return None;
    }
    let mut owner: Vec<Option<&str>> = vec![None; sh.count as usize];
    let mut ranges = Vec::new();
    for (region, list) in &sh.regions {
        let rp = p.k("regions").k(region);
        let id = names.region(ctx, &rp, region);
        for &(a, b) in &list.0 {
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
            // `b` is below `count`, a u32.
            if let (Some(id), Ok(a), Ok(b)) = (id, u32::try_from(a), u32::try_from(b)) {
                ranges.push((a, b, id));
            }
        }
    }
    let gaps = gaps(&owner);
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
    Some(Shards { count: sh.count, ranges })
}

/// The unowned stretches of `owner`, as `N` or `A-B`.
fn gaps(owner: &[Option<&str>]) -> Vec<String> {
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
    gaps
}

/// The largest value that fits in `bits`.
fn max_for_bits(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// One node table: its keys parsed by `parse` (a bad key reported with
/// `hint`), its regions resolved.
fn node_table<K>(
    names: &Names<'_>,
    ctx: &mut Ctx<'_>,
    table: &str,
    entries: &BTreeMap<String, String>,
    parse: impl Fn(&str) -> Option<K>,
    hint: &str,
) -> Vec<(K, usize)> {
    let mut out = Vec::with_capacity(entries.len());
    for (key, region) in entries {
        let p = YamlPath::root().k("nodes").k(table).k(key);
        let parsed = parse(key);
        if parsed.is_none() {
            ctx.at_key(&p, format!("invalid {} key {}", table.replace('_', " "), show(key)), Some(hint));
        }
        if let (Some(k), Some(r)) = (parsed, names.region(ctx, &p, region)) {
            out.push((k, r));
        }
    }
    out
}

/// `nodes`: every table's keys in range for its format, no overlapping Instagram shards.
pub(super) fn nodes(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Nodes {
    let n = &file.nodes;
    let sf = &file.ids.snowflake;
    let (dc, worker) = (max_for_bits(sf.datacenter_bits), max_for_bits(sf.worker_bits));
    let u16_key = |k: &str| parse_decimal(k, 65_535).and_then(|v| u16::try_from(v).ok());
    Nodes {
        locality_mac: node_table(
            names,
            ctx,
            "locality_mac",
            &n.locality_mac,
            parse_mac_fragment,
            "use the 7 hex digits of the mac fragment, e.g. \"c110002\"",
        ),
        locality_pid: node_table(names, ctx, "locality_pid", &n.locality_pid, u16_key, "use a pid 0-65535"),
        snowflake_datacenter: node_table(
            names,
            ctx,
            "snowflake_datacenter",
            &n.snowflake_datacenter,
            |k| parse_decimal(k, dc),
            &format!("use a datacenter id 0-{dc}"),
        ),
        snowflake_worker: node_table(
            names,
            ctx,
            "snowflake_worker",
            &n.snowflake_worker,
            |k| parse_decimal(k, worker),
            &format!("use a worker id 0-{worker}"),
        ),
        sonyflake_machine: node_table(
            names,
            ctx,
            "sonyflake_machine",
            &n.sonyflake_machine,
            u16_key,
            "use a machine id 0-65535",
        ),
        instagram_shard: instagram_shards(file, names, ctx),
    }
}

/// `nodes.instagram_shard`: ranges within 0-8191 that do not overlap.
fn instagram_shards(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<(u16, u16, usize)> {
    let mut owner: BTreeMap<u64, (u64, &str)> = BTreeMap::new();
    let mut out = Vec::new();
    for (key, region) in &file.nodes.instagram_shard {
        let p = YamlPath::root().k("nodes").k("instagram_shard").k(key);
        let id = names.region(ctx, &p, region);
        match parse_range(key) {
            Ok((a, b)) if b <= 8191 => {
                let overlap = owner.range(..=b).next_back().filter(|(_, (end, _))| *end >= a);
                if let Some((s, (e, other))) = overlap {
                    ctx.at_key(
                        &p,
                        format!("instagram shard range {} overlaps {s}-{e} of {}", show(key), show(other)),
                        Some("each shard must belong to one region"),
                    );
                } else {
                    owner.insert(a, (b, region));
                    if let (Some(id), Ok(a), Ok(b)) = (id, u16::try_from(a), u16::try_from(b)) {
                        out.push((a, b, id));
                    }
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
    out
}

/// `key_ranges`: strictly ascending starts, the first at zero.
pub(super) fn key_ranges(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<(u64, usize)> {
    let root = YamlPath::root();
    if file.key_ranges.len() > MAX_KEY_RANGES {
        ctx.at(
            &root.k("key_ranges"),
            format!("{} key ranges, more than the limit of {MAX_KEY_RANGES}", file.key_ranges.len()),
            None,
        );
    }
    let mut prev: Option<u64> = None;
    let mut out = Vec::with_capacity(file.key_ranges.len());
    for (n, r) in file.key_ranges.iter().enumerate() {
        let p = root.k("key_ranges").i(r.index);
        if let Some(region) = names.region(ctx, &p.k("region"), &r.region) {
            out.push((r.start.0, region));
        }
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
    out
}

/// `hash`: regions listed once, positive weights for listed regions.
pub(super) fn hash(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<(usize, f64)> {
    let Some(h) = &file.hash else { return Vec::new() };
    let p = YamlPath::root().k("hash");
    if h.regions.is_empty() {
        ctx.at(&p.k("regions"), "hash has no regions".into(), Some("list at least one region"));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(h.regions.len());
    for (i, r) in h.regions.iter().enumerate() {
        let id = names.region(ctx, &p.k("regions").i(i), r);
        if !seen.insert(r) {
            ctx.at(
                &p.k("regions").i(i),
                format!("region {} is listed twice", show(r)),
                Some("use `weights` to give a region more keys"),
            );
        } else if let Some(id) = id {
            out.push((id, h.weights.get(r).copied().unwrap_or(1.0)));
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
    out
}

/// `time_ranges`: ascending ends, only the last one open.
pub(super) fn time_ranges(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<(Option<u64>, usize)> {
    let mut prev: Option<u64> = None;
    let last = file.time_ranges.len().saturating_sub(1);
    let mut out = Vec::with_capacity(file.time_ranges.len());
    for (n, t) in file.time_ranges.iter().enumerate() {
        let p = YamlPath::root().k("time_ranges").i(t.index);
        if let Some(region) = names.region(ctx, &p.k("region"), &t.region) {
            out.push((t.until.map(|u| u.0), region));
        }
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
    out
}
