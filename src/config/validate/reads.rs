//! `routes[i].fanout`, `routes[i].search` and `search_cache`: the global
//! reads. Regions that exist (each once), a merge rule that names its
//! fields, page sizes, timeouts and caps that make sense together.

use super::names::Names;
use super::{format_list, header_name};
use crate::config::model::{FanoutRule, ListSource, SearchRule};
use crate::config::report::Ctx;
use crate::config::schema::{self, CountryList, FanoutSpec, SortSpec};
use crate::config::show;
use crate::config::template::PathTemplate;
use crate::config::yaml::YamlPath;
use crate::ids::Format;
use crate::merge::{SortKey, Spec};

/// Largest `max_leg_bytes` (the answers of every region are held at once).
const MAX_LEG_BYTES: u64 = 64 << 20;
/// Largest `fanout.concurrency`.
const MAX_CONCURRENCY: u32 = 256;
/// Largest `limit.max`.
const MAX_PAGE: u32 = 100_000;
/// Largest `search_cache.capacity`.
const MAX_CACHE: usize = 10_000_000;

/// A route's region list: every region when `None`; each named one once.
fn region_list(names: &Names<'_>, list: Option<&[String]>, p: &YamlPath, ctx: &mut Ctx<'_>) -> Vec<usize> {
    let Some(list) = list else { return (0..names.region_count()).collect() };
    if list.is_empty() {
        ctx.at(
            p,
            "regions list is empty".into(),
            Some("name at least one region, or remove `regions` to ask every region"),
        );
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, name) in list.iter().enumerate() {
        let Some(r) = names.region(ctx, &p.i(i), name) else { continue };
        if out.contains(&r) {
            ctx.at(&p.i(i), format!("region {} is listed twice", show(name)), Some("remove the repeat"));
        } else {
            out.push(r);
        }
    }
    out
}

/// `fanout`: the typed rule, or `None` after reporting what is wrong.
pub(super) fn fanout_rule(names: &Names<'_>, f: &FanoutSpec, fp: &YamlPath, ctx: &mut Ctx<'_>) -> Option<FanoutRule> {
    let regions = region_list(names, f.regions.as_deref(), &fp.k("regions"), ctx);
    let countries = f.countries.as_ref().and_then(|c| list_source(c, &fp.k("countries"), ctx));
    if f.items.as_deref() == Some("") {
        ctx.at(
            &fp.k("items"),
            "empty field name".into(),
            Some("name the field that holds the array, or remove `items`"),
        );
    }
    let sort = sort_key(&f.sort, &fp.k("sort"), ctx);
    let descending = match f.order.as_str() {
        "desc" => true,
        "asc" => false,
        other => {
            ctx.at(&fp.k("order"), format!("unknown order {}", show(other)), Some("use desc or asc"));
            true
        }
    };
    let require_all = match f.partial.as_str() {
        "allow" => false,
        "fail" => true,
        other => {
            ctx.at(
                &fp.k("partial"),
                format!("unknown partial-result policy {}", show(other)),
                Some("use allow or fail"),
            );
            false
        }
    };
    let lp = fp.k("limit");
    if f.limit.max == 0 || f.limit.max > MAX_PAGE {
        ctx.at(
            &lp.k("max"),
            format!("limit.max {} is out of range", f.limit.max),
            Some(&format!("use 1 to {MAX_PAGE}")),
        );
    }
    if f.limit.default == 0 || f.limit.default > f.limit.max {
        let hint = format!("use 1 to limit.max ({})", f.limit.max);
        ctx.at(&lp.k("default"), format!("limit.default {} is out of range", f.limit.default), Some(&hint));
    }
    if f.leg_timeout.0.is_zero() {
        ctx.at(&fp.k("leg_timeout"), "leg_timeout is zero".into(), Some("e.g. 2s"));
    }
    if f.deadline.0 < f.leg_timeout.0 {
        ctx.at(
            &fp.k("deadline"),
            format!("deadline {} is shorter than leg_timeout {}", f.deadline, f.leg_timeout),
            Some("the deadline bounds the whole fan-out; make it at least leg_timeout"),
        );
    }
    if f.max_leg_bytes == 0 || f.max_leg_bytes > MAX_LEG_BYTES {
        let hint = format!("use 1 to {MAX_LEG_BYTES} bytes");
        ctx.at(&fp.k("max_leg_bytes"), format!("max_leg_bytes {} is out of range", f.max_leg_bytes), Some(&hint));
    }
    if f.concurrency == 0 || f.concurrency > MAX_CONCURRENCY {
        let hint = format!("use 1 to {MAX_CONCURRENCY}");
        ctx.at(&fp.k("concurrency"), format!("concurrency {} is out of range", f.concurrency), Some(&hint));
    }
    Some(FanoutRule {
        regions,
        countries,
        merge: Spec { items: f.items.clone(), sort: sort?, descending },
        limit_default: f.limit.default,
        limit_max: f.limit.max,
        leg_timeout: f.leg_timeout.0,
        deadline: f.deadline.0,
        require_all,
        max_leg_bytes: usize::try_from(f.max_leg_bytes).unwrap_or(usize::MAX),
        concurrency: f.concurrency as usize,
    })
}

/// `fanout.countries`: exactly one of header or query.
fn list_source(c: &CountryList, p: &YamlPath, ctx: &mut Ctx<'_>) -> Option<ListSource> {
    match (&c.header, &c.query) {
        (Some(h), None) => header_name(ctx, &p.k("header"), h, "X-Countries").map(ListSource::Header),
        (None, Some(q)) if !q.is_empty() => Some(ListSource::Query(q.clone())),
        (None, Some(_)) => {
            ctx.at(&p.k("query"), "empty query parameter name".into(), Some("e.g. `query: countries`"));
            None
        }
        _ => {
            ctx.at(
                p,
                "countries needs exactly one of header or query".into(),
                Some("e.g. `countries: { header: X-Countries }`"),
            );
            None
        }
    }
}

/// `fanout.sort`: the id's time (default field `id`, every format) or a field's value.
fn sort_key(s: &SortSpec, p: &YamlPath, ctx: &mut Ctx<'_>) -> Option<SortKey> {
    if let Some(field) = &s.field {
        if s.id_field.is_some() || s.formats.is_some() {
            ctx.at(p, "sort by `field` or by `id_field`, not both".into(), Some("`formats` belongs to `id_field`"));
            return None;
        }
        if field.is_empty() {
            ctx.at(&p.k("field"), "empty field name".into(), Some("e.g. `field: created_at`"));
        }
        return Some(SortKey::Field(field.clone()));
    }
    let field = s.id_field.clone().unwrap_or_else(|| "id".to_owned());
    if field.is_empty() {
        ctx.at(&p.k("id_field"), "empty field name".into(), Some("e.g. `id_field: id`"));
    }
    let Some(names) = &s.formats else { return Some(SortKey::IdTime { field, formats: Format::ALL.to_vec() }) };
    let formats = format_list(names, &p.k("formats"), "list the formats the ids are in, e.g. [iuid]", ctx);
    let formats = formats.into_iter().map(|(_, f)| f).collect();
    Some(SortKey::IdTime { field, formats })
}

/// The search rule of a `placement: search` route (`search:` or its defaults).
pub(super) fn search_rule(r: &schema::Route, names: &Names<'_>, sp: &YamlPath, ctx: &mut Ctx<'_>) -> SearchRule {
    let s = r.search.as_ref();
    let regions = region_list(names, s.and_then(|s| s.regions.as_deref()), &sp.k("regions"), ctx);
    let leg_timeout = s.map_or(std::time::Duration::from_secs(5), |s| s.leg_timeout.0);
    if leg_timeout.is_zero() {
        ctx.at(&sp.k("leg_timeout"), "leg_timeout is zero".into(), Some("e.g. 2s"));
    }
    SearchRule { regions, sequential: s.is_some_and(|s| s.sequential), leg_timeout, exists: exists(r, sp, ctx) }
}

/// A search route's existence path: `search.exists`, its parameters the
/// route's own; else the route's path up to its id's segment, when the id
/// is a path parameter.
fn exists(r: &schema::Route, sp: &YamlPath, ctx: &mut Ctx<'_>) -> Option<PathTemplate> {
    // A prefix route has no path template, and no parameters.
    let route = PathTemplate::parse(&r.matcher.path).ok();
    let Some(text) = r.search.as_ref().and_then(|s| s.exists.as_deref()) else {
        let param = r.id.as_ref()?.path_param.as_deref()?;
        return route?.through(param);
    };
    let p = sp.k("exists");
    let params: Vec<&str> = route.iter().flat_map(|t| t.params()).collect();
    match PathTemplate::parse(text) {
        Ok(t) => {
            let mut ok = true;
            for name in t.params().filter(|n| !params.contains(n)) {
                ok = false;
                let hint = if params.is_empty() {
                    "the route's path has no parameters".to_string()
                } else {
                    format!("the route's path has {}", params.join(", "))
                };
                ctx.at(&p, format!("exists names {{{name}}}, which match.path does not have"), Some(&hint));
            }
            ok.then_some(t)
        }
        Err(e) => {
            ctx.at(&p, format!("invalid exists path {}: {e}", show(text)), Some("e.g. `exists: \"/v1/users/{id}\"`"));
            None
        }
    }
}

/// `search_cache`: a capacity that fits in memory, a positive time to live.
pub(super) fn search_cache(c: &schema::SearchCache, ctx: &mut Ctx<'_>) {
    let p = YamlPath::root().k("search_cache");
    if c.capacity == 0 || c.capacity > MAX_CACHE {
        let hint = format!("use 1 to {MAX_CACHE}");
        ctx.at(&p.k("capacity"), format!("capacity {} is out of range", c.capacity), Some(&hint));
    }
    if c.ttl.0.is_zero() {
        ctx.at(&p.k("ttl"), "ttl is zero".into(), Some("e.g. 10m"));
    }
}
