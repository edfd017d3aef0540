//! The named things: regions (with their failover chains), countries,
//! entities and overrides.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{closest, health_checks, is_name, own_timeouts, MAX_REGIONS};
use crate::config::model::{Balance, Country, Entity, Override, Region};
use crate::config::report::{Ctx, NameKind};
use crate::config::schema::{File, RegionUpstream};
use crate::config::settings::UpstreamPolicy;
use crate::config::show;
use crate::config::yaml::YamlPath;

/// Methods a route may list.
pub const METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];

/// The file's region names and their positions, for resolving references.
#[derive(Debug)]
pub(super) struct Names<'f> {
    file: &'f File,
    regions: HashMap<&'f str, usize>,
}

impl<'f> Names<'f> {
    pub(super) fn new(file: &'f File) -> Names<'f> {
        Names { file, regions: file.regions.keys().enumerate().map(|(i, n)| (n.as_str(), i)).collect() }
    }

    /// The region `name` refers to; an unknown one is reported at `path`
    /// (unless it is defined but failed to parse, which was reported already).
    /// How many regions the file defines.
    pub(super) fn region_count(&self) -> usize {
        self.file.regions.len()
    }

    pub(super) fn region(&self, ctx: &mut Ctx<'_>, path: &YamlPath, name: &str) -> Option<usize> {
        if let Some(&i) = self.regions.get(name) {
            return Some(i);
        }
        if !ctx.is_defined(NameKind::Region, name) {
            let hint = match closest(name, self.file.regions.keys().map(String::as_str)) {
                Some(c) => format!("did you mean `{c}`? regions are defined under `regions`"),
                None => "define it under `regions` or use one that is".to_owned(),
            };
            ctx.at(path, format!("unknown region {}", show(name)), Some(&hint));
        }
        None
    }

    /// The country `name` refers to; an unknown one is reported at `path`.
    pub(super) fn country(
        &self,
        ctx: &mut Ctx<'_>,
        path: &YamlPath,
        countries: &[Country],
        name: &str,
        hint: Option<&str>,
    ) -> Option<u8> {
        if let Some(c) = countries.iter().find(|c| c.name == name) {
            return Some(c.id);
        }
        if !self.file.countries.contains_key(name) && !ctx.is_defined(NameKind::Country, name) {
            let hint = match (hint, closest(name, self.file.countries.keys().map(String::as_str))) {
                (Some(h), _) => h.to_owned(),
                (None, Some(c)) => format!("did you mean `{c}`?"),
                (None, None) => "define it under `countries`".to_owned(),
            };
            ctx.at(path, format!("unknown country {}", show(name)), Some(&hint));
        }
        None
    }

    /// The entity `name` refers to; an unknown one is reported at `path`.
    pub(super) fn entity(&self, ctx: &mut Ctx<'_>, path: &YamlPath, entities: &[Entity], name: &str) -> Option<u8> {
        if let Some(e) = entities.iter().find(|e| e.name == name) {
            return Some(e.code);
        }
        if !self.file.entities.contains_key(name) && !ctx.is_defined(NameKind::Entity, name) {
            let hint = match closest(name, self.file.entities.keys().map(String::as_str)) {
                Some(c) => format!("did you mean `{c}`?"),
                None => "define it under `entities`".to_owned(),
            };
            ctx.at(path, format!("unknown entity {}", show(name)), Some(&hint));
        }
        None
    }
}

/// `regions`: names, endpoints, failover references and cycles.
pub(super) fn regions(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<Region> {
    let root = YamlPath::root();
    if file.regions.is_empty() && !ctx.errors.iter().any(|e| e.path.starts_with("regions")) {
        ctx.at(&root.k("regions"), "no regions are defined".into(), Some("add `regions:` with at least one region"));
    }
    if file.regions.len() > MAX_REGIONS {
        ctx.at(
            &root.k("regions"),
            format!("{} regions defined, more than the limit of {MAX_REGIONS}", file.regions.len()),
            None,
        );
    }
    let mut out = Vec::with_capacity(file.regions.len());
    for (name, region) in &file.regions {
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
        let failover = match &region.failover {
            Some(f) if f == name => {
                ctx.at(
                    &p.k("failover"),
                    format!("region {} fails over to itself", show(name)),
                    Some("name a different region or remove `failover`"),
                );
                None
            }
            Some(f) => names.region(ctx, &p.k("failover"), f),
            None => None,
        };
        let balance = match Balance::ALL.iter().find(|(n, _)| *n == region.balance) {
            Some(&(_, b)) => b,
            None => {
                let hint = format!("use one of {}", Balance::ALL.map(|(n, _)| n).join(", "));
                ctx.at(&p.k("balance"), format!("unknown balance {}", show(&region.balance)), Some(&hint));
                Balance::RoundRobin
            }
        };
        let mut weights = Vec::with_capacity(region.upstreams.len());
        for (i, e) in region.upstreams.iter().enumerate() {
            let (_, weight) = e.parts();
            let at = p.k("upstreams").i(i).k("weight");
            if weight == 0 || weight > MAX_WEIGHT {
                ctx.at(&at, format!("weight {weight} is outside 1-{MAX_WEIGHT}"), Some("a whole number such as 3"));
            } else if weight != 1 && balance != Balance::Weighted {
                ctx.at(&at, "a weight counts only with `balance: weighted`".into(), Some("set `balance: weighted`"));
            }
            weights.push(weight.clamp(1, MAX_WEIGHT));
        }
        if let Some(up) = &region.upstream {
            region_upstream(file, up, &p.k("upstream"), ctx);
        }
        out.push(Region {
            name: name.clone(),
            upstreams: region.upstreams.iter().map(|e| e.parts().0.clone()).collect(),
            weights,
            balance,
            peer: region.peer.clone(),
            failover,
            // Filled in once `upstream` is typed ([`region_policies`]).
            upstream: None,
        });
    }
    failover_cycles(file, ctx);
    out
}

/// Largest endpoint weight.
const MAX_WEIGHT: u32 = 1000;

/// `regions.<name>.upstream`: positive limits and timeouts, an attempt that
/// fits in the request (the region's or `upstream`'s), health checks that
/// can run.
fn region_upstream(file: &File, up: &RegionUpstream, at: &YamlPath, ctx: &mut Ctx<'_>) {
    if up.max_connections == Some(0) {
        let hint = Some("a positive whole number, e.g. 512");
        ctx.at(&at.k("max_connections"), "max_connections must be positive".into(), hint);
    }
    own_timeouts(file, up.attempt_timeout, up.request_timeout, at, ctx);
    if let Some(h) = &up.health {
        health_checks(h.timeout, h.path.as_deref(), &at.k("health"), ctx);
        match h.interval {
            Some(d) if d.0.is_zero() => {
                let hint = Some("checks are on or off for the whole table: upstream.health.interval");
                ctx.at(&at.k("health").k("interval"), "a region's check interval must be positive".into(), hint);
            }
            Some(_) if file.upstream.health.interval.0.is_zero() => {
                let hint =
                    Some("set upstream.health.interval to turn checks on; a region may then check at its own pace");
                ctx.at(&at.k("health").k("interval"), "health checks are off in this table".into(), hint);
            }
            _ => {}
        }
    }
}

/// Gives each region with `upstream` keys its own settings: the table's,
/// with the region's keys in their place.
pub(super) fn region_policies(file: &File, regions: &mut [Region], table: &UpstreamPolicy) {
    for region in regions {
        let Some(up) = file.regions.get(&region.name).and_then(|r| r.upstream.as_ref()) else { continue };
        let mut own = table.clone();
        if let Some(n) = up.max_connections {
            own.limits.max_connections = n;
            own.limits.max_uploads = ((n as f64 * file.upstream.upload_share) as usize).max(1);
        }
        if let Some(n) = up.max_pending {
            own.limits.max_pending = n;
        }
        if let Some(d) = up.attempt_timeout {
            own.attempt_timeout = d.0;
        }
        if let Some(d) = up.request_timeout {
            own.request_timeout = d.0;
        }
        if let Some(h) = &up.health {
            let health = &mut own.health;
            health.interval = h.interval.map_or(health.interval, |d| d.0);
            health.timeout = h.timeout.map_or(health.timeout, |d| d.0);
            health.path = h.path.clone().unwrap_or_else(|| health.path.clone());
            health.rise = h.rise.unwrap_or(health.rise);
            health.fall = h.fall.unwrap_or(health.fall);
            health.grpc = h.grpc.unwrap_or(health.grpc);
        }
        region.upstream = Some(Box::new(own));
    }
}

/// Failover chains that come back to where they started (longer than one;
/// a region failing over to itself is reported with the region).
fn failover_cycles(file: &File, ctx: &mut Ctx<'_>) {
    let mut reported: HashSet<&str> = HashSet::new();
    for start in file.regions.keys() {
        let mut chain: Vec<&str> = vec![start.as_str()];
        let mut cur = start.as_str();
        while let Some(next) = file.regions.get(cur).and_then(|r| r.failover.as_deref()) {
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
                        &YamlPath::root().k("regions").k(start).k("failover"),
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
}

/// `countries`: names (unique even ignoring case), 8-bit ids, owning regions.
pub(super) fn countries(file: &File, names: &Names<'_>, ctx: &mut Ctx<'_>) -> Vec<Country> {
    let mut by_id: BTreeMap<i64, &str> = BTreeMap::new();
    // Requests name countries case-insensitively (`X-Country: kz`), so two
    // names that differ only in case would be ambiguous.
    let mut by_folded: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(file.countries.len());
    for (name, c) in &file.countries {
        let p = YamlPath::root().k("countries").k(name);
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
        let id = match u8::try_from(c.id) {
            Err(_) => {
                ctx.at(
                    &p.k("id"),
                    format!("country id {} of {} is out of range 0-255", c.id, show(name)),
                    Some("iuids store the country in 8 bits"),
                );
                None
            }
            Ok(_) if by_id.contains_key(&c.id) => {
                let other = by_id.get(&c.id).copied().unwrap_or_default();
                ctx.at(
                    &p.k("id"),
                    format!("country id {} of {} is already used by {}", c.id, show(name), show(other)),
                    Some("each country needs its own id"),
                );
                None
            }
            Ok(id) => {
                by_id.insert(c.id, name);
                Some(id)
            }
        };
        let region = names.region(ctx, &p.k("region"), &c.region);
        if let (Some(id), Some(region)) = (id, region) {
            out.push(Country { name: name.clone(), id, region });
        }
    }
    out
}

/// `entities`: names and unique 8-bit codes.
pub(super) fn entities(file: &File, ctx: &mut Ctx<'_>) -> Vec<Entity> {
    let mut by_code: BTreeMap<i64, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(file.entities.len());
    for (name, &code) in &file.entities {
        let p = YamlPath::root().k("entities").k(name);
        if !is_name(name) {
            ctx.at_key(
                &p,
                format!("invalid entity name {}", show(name)),
                Some("use letters, digits, `-` and `_` only"),
            );
        }
        match u8::try_from(code) {
            Err(_) => ctx.at(
                &p,
                format!("entity code {code} of {} is out of range 0-255", show(name)),
                Some("iuids store the service entity in 8 bits"),
            ),
            Ok(_) if by_code.contains_key(&code) => {
                let other = by_code.get(&code).copied().unwrap_or_default();
                ctx.at(
                    &p,
                    format!("entity code {code} of {} is already used by {}", show(name), show(other)),
                    Some("each entity needs its own code"),
                );
            }
            Ok(c) => {
                by_code.insert(code, name);
                out.push(Entity { name: name.clone(), code: c });
            }
        }
    }
    out
}

/// `overrides`: known names, one per (country, entity) pair.
pub(super) fn overrides(
    file: &File,
    names: &Names<'_>,
    countries: &[Country],
    entities: &[Entity],
    ctx: &mut Ctx<'_>,
) -> Vec<Override> {
    let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
    let mut out = Vec::with_capacity(file.overrides.len());
    for o in &file.overrides {
        let p = YamlPath::root().k("overrides").i(o.index);
        let country = names.country(ctx, &p.k("country"), countries, &o.country, None);
        let entity = names.entity(ctx, &p.k("entity"), entities, &o.entity);
        let region = names.region(ctx, &p.k("region"), &o.region);
        if let Some(first) = pairs.get(&(o.country.as_str(), o.entity.as_str())) {
            ctx.at(
                &p,
                format!("override for {}/{} repeats overrides[{first}]", show(&o.country), show(&o.entity)),
                Some("keep one override per (country, entity) pair"),
            );
            continue;
        }
        pairs.insert((&o.country, &o.entity), o.index);
        if let (Some(country), Some(entity), Some(region)) = (country, entity, region) {
            out.push(Override { country, entity, region });
        }
    }
    out
}
