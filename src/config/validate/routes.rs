//! `routes`: names, methods, path templates (conflicts and unreachable
//! routes), where the id is or how it is minted, where a route without one
//! goes (`to`), and placements that can read the formats they are given.

use std::collections::{BTreeSet, HashMap};

use http::{HeaderName, Method};

use super::headers;
use super::names::{Names, METHODS};
use super::paths::{matched, rewrite, MethodSet, Templates};
use super::reads;
use super::{format_list, header_name, own_timeouts};
use crate::config::model::{Country, CountrySource, Entity, IdRule, IdSource, MintRule, Route, Strategy, To};
use crate::config::report::Ctx;
use crate::config::schema::{self, File, IdSpec, MintSpec, ToSpec};
use crate::config::show;
use crate::config::yaml::YamlPath;
use crate::ids::Format;

/// What checking routes needs besides the file.
pub(super) struct Refs<'a> {
    pub(super) file: &'a File,
    pub(super) names: &'a Names<'a>,
    countries: &'a [Country],
    entities: &'a [Entity],
}

/// Every route, checked and typed.
pub(super) fn routes(
    file: &File,
    names: &Names<'_>,
    countries: &[Country],
    entities: &[Entity],
    ctx: &mut Ctx<'_>,
) -> Vec<Route> {
    let refs = Refs { file, names, countries, entities };
    let defaults =
        file.headers.as_ref().map(|h| headers::rules(h, &YamlPath::root().k("headers"), ctx)).unwrap_or_default();
    let mut names_seen: HashMap<&str, usize> = HashMap::new();
    let mut templates = Templates::default();
    let mut out = Vec::with_capacity(file.routes.len());
    for r in &file.routes {
        let p = YamlPath::root().k("routes").i(r.index);
        if r.name.is_empty() || !r.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            ctx.at(
                &p.k("name"),
                format!("invalid route name {}", show(&r.name)),
                Some("use letters, digits, `-`, `_` and `.` only"),
            );
        }
        if let Some(first) = names_seen.get(r.name.as_str()) {
            ctx.at(
                &p.k("name"),
                format!("route name {} is already used by routes[{first}]", show(&r.name)),
                Some("route names label metrics and must be unique"),
            );
        } else {
            names_seen.insert(&r.name, r.index);
        }
        let upgrades = upgrades(r, &p, ctx);
        let grpc_only = match r.protocol.as_deref() {
            None | Some("http") => false,
            Some("grpc") => true,
            Some(other) => {
                let m = format!("unknown protocol {}", show(other));
                ctx.at(&p.k("protocol"), m, Some("`http` (any request) or `grpc` (gRPC calls only)"));
                false
            }
        };
        if grpc_only && (r.fanout.is_some() || r.placement == Strategy::Search.name()) {
            let kind = if r.fanout.is_some() { "fan-out" } else { "search" };
            let m = format!("route {} is a {kind} route and carries HTTP only", show(&r.name));
            ctx.at(&p.k("protocol"), m, Some("remove `protocol: grpc`, or route the calls by an id of their own"));
        }
        if r.tunnel_idle_timeout.is_some_and(|d| d.0.is_zero()) {
            let hint = Some("durations look like 30s or 5m");
            ctx.at(&p.k("tunnel_idle_timeout"), "tunnel_idle_timeout must be positive".into(), hint);
        }
        let (mut method_set, mut methods) = methods(r, &p, ctx);
        if r.fanout.is_some() {
            (method_set, methods) = fanout_methods(r, method_set, methods, &p, ctx);
        }
        let (template, matches) = matched(r, &p, ctx);
        for tpl in &matches {
            templates.add(r, tpl, &method_set, &p, ctx);
        }
        let strategy = Strategy::from_name(&r.placement);
        if strategy.is_none() {
            let hint = format!("use one of {}", Strategy::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "));
            ctx.at(&p.k("placement"), format!("unknown placement {}", show(&r.placement)), Some(&hint));
        }
        let fanout = r.fanout.as_ref().and_then(|f| fanout_parts(refs.names, r, f, &p, ctx));
        let search = search_parts(refs.names, r, strategy, &p, ctx);
        let to = r.to.as_ref().and_then(|to| target(&refs, r, to, &p, ctx));
        if let Some(policy) = &r.policy {
            check_policy(file, policy, &p.k("policy"), ctx);
        }
        let rewrite = r.rewrite.as_ref().and_then(|rw| rewrite(r, rw, strategy, &p.k("rewrite"), ctx));
        let own_headers = r.headers.as_ref().map(|h| headers::rules(h, &p.k("headers"), ctx)).unwrap_or_default();
        match (&r.id, &r.mint) {
            _ if r.fanout.is_some() || r.to.is_some() => {}
            (None, None) => ctx.at(
                &p,
                format!("route {} has no `id`, `mint`, `fanout` or `to`: it names nothing to route by", show(&r.name)),
                Some("add `id: { path_param: id, formats: [iuid] }`, a `mint:` or `fanout:` rule, or `to: local`"),
            ),
            (Some(_), Some(_)) => ctx.at(
                &p.k("mint"),
                format!("route {} has both `id` and `mint`", show(&r.name)),
                Some("a route either reads an id or mints one; split it in two"),
            ),
            _ => {}
        }
        let at = Routed { refs: &refs, route: r, strategy };
        let id = r.id.as_ref().and_then(|id| id_rule(at, id, &p.k("id"), ctx));
        let mint = r.mint.as_ref().and_then(|m| mint_rule(at, m, &p.k("mint"), ctx));
        if let Some(strategy) = strategy {
            out.push(Route {
                index: r.index,
                name: r.name.clone(),
                template,
                matches,
                methods,
                id,
                mint,
                fanout,
                search,
                strategy,
                allow_failover_writes: r.allow_failover_writes,
                allow_failover_reads: r.allow_failover_reads,
                // Filled in once `upstream` is typed ([`policies`]).
                policy: None,
                // A fan-out or search leg is one of several requests: none may open a tunnel.
                upgrades: if r.fanout.is_some() || strategy == Strategy::Search { Vec::new() } else { upgrades },
                grpc_only,
                tunnel_idle_timeout: r.tunnel_idle_timeout.unwrap_or(file.server.tunnel_idle_timeout).0,
                to,
                rewrite,
                headers: headers::then(&defaults, own_headers, &r.name, &p.k("headers"), ctx),
            });
        }
    }
    out
}

/// A fan-out route's methods: reads only (GET, and HEAD with it); GET when none are listed.
fn fanout_methods(
    r: &schema::Route,
    set: MethodSet,
    typed: Option<Vec<Method>>,
    p: &YamlPath,
    ctx: &mut Ctx<'_>,
) -> (MethodSet, Option<Vec<Method>>) {
    match (set, typed) {
        (Some(set), Some(typed)) => {
            if let Some(m) = set.iter().find(|m| *m != "GET" && *m != "HEAD") {
                ctx.at(
                    &p.k("match").k("methods"),
                    format!("fan-out route {} cannot take {m}: it sends the request to every region", show(&r.name)),
                    Some("fan-out routes are reads: list GET (HEAD comes with it)"),
                );
            }
            (Some(set), Some(typed))
        }
        _ => (Some(BTreeSet::from(["GET".to_owned()])), Some(vec![Method::GET])),
    }
}

/// `fanout`: checked with what it excludes (an id, a mint rule, a placement).
fn fanout_parts(
    names: &Names<'_>,
    r: &schema::Route,
    f: &schema::FanoutSpec,
    p: &YamlPath,
    ctx: &mut Ctx<'_>,
) -> Option<crate::config::model::FanoutRule> {
    let hint = Some("a fan-out route asks its regions without reading or minting an id; split it in two");
    if r.id.is_some() {
        ctx.at(&p.k("id"), format!("fan-out route {} reads no id", show(&r.name)), hint);
    }
    if r.mint.is_some() {
        ctx.at(&p.k("mint"), format!("fan-out route {} mints no id", show(&r.name)), hint);
    }
    if r.placement != "auto" {
        ctx.at(
            &p.k("placement"),
            format!("fan-out route {} places nothing", show(&r.name)),
            Some("remove `placement`"),
        );
    }
    reads::fanout_rule(names, f, &p.k("fanout"), ctx)
}

/// `search` with `placement: search` (its defaults when absent); refused elsewhere.
fn search_parts(
    names: &Names<'_>,
    r: &schema::Route,
    strategy: Option<Strategy>,
    p: &YamlPath,
    ctx: &mut Ctx<'_>,
) -> Option<crate::config::model::SearchRule> {
    if strategy != Some(Strategy::Search) {
        if r.search.is_some() {
            ctx.at(
                &p.k("search"),
                "`search` applies to `placement: search` only".into(),
                Some("set `placement: search` or remove `search`"),
            );
        }
        return None;
    }
    if r.mint.is_some() {
        ctx.at(
            &p.k("placement"),
            format!("create route {} places the id it mints; it has nothing to search for", show(&r.name)),
            Some("use `placement: auto` on create routes"),
        );
    }
    Some(reads::search_rule(r, names, &p.k("search"), ctx))
}

/// `upgrades`: protocol tokens, never h2c (a tunnel of HTTP/2 would carry
/// requests the proxy never routed).
fn upgrades(r: &schema::Route, p: &YamlPath, ctx: &mut Ctx<'_>) -> Vec<String> {
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
    r.upgrades.iter().map(|u| u.to_ascii_lowercase()).collect()
}

/// `match.methods`: known, upper case, not repeated, not empty.
fn methods(r: &schema::Route, p: &YamlPath, ctx: &mut Ctx<'_>) -> (MethodSet, Option<Vec<Method>>) {
    let Some(list) = &r.matcher.methods else { return (None, None) };
    let mp = p.k("match").k("methods");
    if list.is_empty() {
        ctx.at(&mp, "methods list is empty".into(), Some("remove `methods` to match every method"));
    }
    let mut set = BTreeSet::new();
    let mut typed = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        if !METHODS.contains(&m.as_str()) {
            let hint = if METHODS.contains(&m.to_ascii_uppercase().as_str()) {
                format!("methods are upper case: {}", m.to_ascii_uppercase())
            } else {
                format!("use one of {}", METHODS.join(", "))
            };
            ctx.at(&mp.i(i), format!("unknown method {}", show(m)), Some(&hint));
        } else if !set.insert(m.clone()) {
            ctx.at(&mp.i(i), format!("method {} is listed twice", show(m)), Some("remove the repeat"));
        } else if let Ok(method) = Method::from_bytes(m.as_bytes()) {
            typed.push(method);
        }
    }
    (Some(set), Some(typed))
}

/// `policy`: positive timeouts, an attempt that fits in the request (the
/// route's or `upstream`'s), a budget ratio that is a fraction.
fn check_policy(file: &File, policy: &schema::PolicySpec, pp: &YamlPath, ctx: &mut Ctx<'_>) {
    own_timeouts(file, policy.attempt_timeout, policy.request_timeout, pp, ctx);
    if let Some(b) = &policy.retry_budget {
        if !(0.0..=1.0).contains(&b.ratio) {
            let m = format!("retry budget ratio {} is outside 0-1", b.ratio);
            ctx.at(&pp.k("retry_budget").k("ratio"), m, Some("a fraction such as 0.2"));
        }
    }
}

/// Gives each route with a `policy` its own in each region: the region's
/// settings (else `upstream`'s), with the route's keys in their place.
pub(super) fn policies(
    file: &File,
    routes: &mut [Route],
    regions: &[crate::config::model::Region],
    upstream: &crate::config::settings::UpstreamPolicy,
) {
    for route in routes {
        let Some(spec) = file.routes.get(route.index).and_then(|r| r.policy.as_ref()) else { continue };
        let own = regions.iter().map(|region| with_route_keys(spec, region.upstream.as_deref().unwrap_or(upstream)));
        route.policy = Some(own.collect());
    }
}

/// `base` with the keys `spec` sets in their place.
fn with_route_keys(
    spec: &schema::PolicySpec,
    base: &crate::config::settings::UpstreamPolicy,
) -> crate::config::settings::UpstreamPolicy {
    {
        let mut own = base.clone();
        if let Some(d) = spec.attempt_timeout {
            own.attempt_timeout = d.0;
        }
        if let Some(d) = spec.request_timeout {
            own.request_timeout = d.0;
        }
        if let Some(n) = spec.retries {
            own.retries = n;
        }
        if let Some(b) = &spec.retry_budget {
            (own.budget_ratio, own.budget_min_per_second) = (b.ratio, b.min_per_second);
        }
        own
    }
}

/// The route whose `id` or `mint` rule is checked, with its placement.
#[derive(Clone, Copy)]
struct Routed<'a> {
    refs: &'a Refs<'a>,
    route: &'a schema::Route,
    strategy: Option<Strategy>,
}

/// `id`: exactly one source, known formats (each once), a placement that reads them.
fn id_rule(at: Routed<'_>, id: &IdSpec, ip: &YamlPath, ctx: &mut Ctx<'_>) -> Option<IdRule> {
    let Routed { refs, route: r, strategy } = at;
    let tpl = r.matcher.path.as_str();
    let sources = [
        id.path_param.is_some(),
        id.header.is_some(),
        id.metadata.is_some(),
        id.grpc_field.is_some(),
        id.query.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if sources != 1 {
        ctx.at(
            ip,
            format!(
                "id of route {} needs exactly one of path_param, header, metadata, grpc_field or query (found {sources})",
                show(&r.name)
            ),
            Some("e.g. `path_param: id`"),
        );
    }
    let mut source = None;
    if let Some(pp) = &id.path_param {
        if !tpl.contains(&format!("{{{pp}}}")) && !tpl.contains(&format!("{{*{pp}}}")) {
            ctx.at(
                &ip.k("path_param"),
                format!("path parameter {} does not appear in {}", show(pp), show(tpl)),
                Some("name a `{param}` of the route's path"),
            );
        }
        source = Some(IdSource::PathParam(pp.clone()));
    }
    if let Some(h) = &id.header {
        source = header_name(ctx, &ip.k("header"), h, "X-Entity-Id").map(IdSource::Header);
    }
    // gRPC metadata travels as header fields.
    if let Some(m) = &id.metadata {
        source = header_name(ctx, &ip.k("metadata"), m, "x-entity-id").map(IdSource::Header);
    }
    if let Some(f) = &id.grpc_field {
        match crate::grpc::field::FieldPath::parse(f) {
            Ok(_) if strategy == Some(Strategy::Search) => ctx.at(
                &ip.k("grpc_field"),
                format!(
                    "route {} searches the regions for its id, which a gRPC message field cannot be",
                    show(&r.name)
                ),
                Some("search routes are HTTP routes: read the id from the path, a header or the query"),
            ),
            Ok(path) => source = Some(IdSource::GrpcField(path)),
            Err(e) => ctx.at(
                &ip.k("grpc_field"),
                format!("invalid field path {}: {e}", show(f)),
                Some("field numbers from the outermost message in, e.g. \"1\" or \"2.1\""),
            ),
        }
    }
    if let Some(q) = &id.query {
        if q.is_empty() {
            ctx.at(&ip.k("query"), "empty query parameter name".into(), Some("e.g. `query: id`"));
        }
        source = Some(IdSource::Query(q.clone()));
    }
    let formats = format_list(&id.formats, &ip.k("formats"), "list the accepted formats, e.g. [iuid]", ctx);
    if let Some(s) = strategy {
        for &(i, format) in &formats {
            check_strategy(refs, ctx, &ip.k("formats").i(i), &r.name, format, s);
        }
    }
    let formats = formats.into_iter().map(|(_, f)| f).collect();
    Some(IdRule { source: source?, formats })
}

/// `mint`: a mintable format, what that format needs, a valid header and `Location`.
fn mint_rule(at: Routed<'_>, m: &MintSpec, mp: &YamlPath, ctx: &mut Ctx<'_>) -> Option<MintRule> {
    let Routed { refs, route: r, strategy } = at;
    let mintable = Some("mintable formats: iuid, locality, uniqid, uuidv7");
    let format = match Format::from_name(&m.format) {
        None => {
            ctx.at(&mp.k("format"), format!("unknown id format {}", show(&m.format)), mintable);
            None
        }
        Some(f) if !f.can_mint() => {
            ctx.at(&mp.k("format"), format!("format {} cannot be minted", show(&m.format)), mintable);
            None
        }
        Some(f) => {
            if let Some(s) = strategy {
                check_strategy(refs, ctx, &mp.k("format"), &r.name, f, s);
            }
            Some(f)
        }
    };
    let (entity, country) = match format {
        Some(f) => mint_needs(refs, ctx, mp, m, f),
        None => (None, None),
    };
    let header = match &m.header {
        Some(h) => header_name(ctx, &mp.k("header"), h, "X-Entity-Id"),
        None => Some(HeaderName::from_static("x-entity-id")),
    };
    if let Some(l) = &m.location {
        if !l.contains("{id}") {
            ctx.at(
                &mp.k("location"),
                format!("location template {} has no {{id}}", show(l)),
                Some("e.g. \"/v1/orders/{id}\""),
            );
        }
    }
    Some(MintRule {
        format: format?,
        entity,
        country,
        header: header?,
        location: m.location.clone(),
        accept_client_id: m.accept_client_id,
    })
}

/// What minting `f` needs: an entity and a country for iUID, a country (or
/// none) and a shard count for uniqid, neither for the others.
fn mint_needs(
    refs: &Refs<'_>,
    ctx: &mut Ctx<'_>,
    mp: &YamlPath,
    m: &MintSpec,
    f: Format,
) -> (Option<u8>, Option<CountrySource>) {
    if f == Format::Iuid {
        let entity = match &m.entity {
            None => {
                ctx.at(mp, "iuid mint rule needs `entity`".into(), Some("add `entity: <name from entities>`"));
                None
            }
            Some(e) => refs.names.entity(ctx, &mp.k("entity"), refs.entities, e),
        };
        let country = match &m.country {
            None => {
                ctx.at(
                    mp,
                    "iuid mint rule needs `country`".into(),
                    Some("add `country: { header: X-Country }`, `{ query: q }`, `{ fixed: KZ }` or `{ local: true }`"),
                );
                None
            }
            Some(c) => country_source(refs, ctx, mp, c),
        };
        return (entity, country);
    }
    if m.entity.is_some() {
        ctx.at(&mp.k("entity"), format!("`entity` only applies to iuid, not {f}"), Some("remove it"));
    }
    let country = match &m.country {
        // A uniqid create lands on a shard owned by the country's region.
        Some(c) if f == Format::Uniqid => country_source(refs, ctx, mp, c),
        Some(_) => {
            ctx.at(&mp.k("country"), format!("`country` only applies to iuid and uniqid, not {f}"), Some("remove it"));
            None
        }
        None => None,
    };
    let file = refs.file;
    if f == Format::Uniqid && file.ids.uniqid.total_shards.is_none() && file.shards.is_none() {
        ctx.at(
            mp,
            "minting uniqid ids needs a shard count".into(),
            Some("set `ids.uniqid.total_shards` or `shards.count`"),
        );
    }
    (None, country)
}

/// `mint.country`: exactly one of header, query, fixed or local.
fn country_source(
    refs: &Refs<'_>,
    ctx: &mut Ctx<'_>,
    mp: &YamlPath,
    c: &schema::CountrySource,
) -> Option<CountrySource> {
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
    let mut source = None;
    if let Some(h) = &c.header {
        source = header_name(ctx, &cp.k("header"), h, "X-Country").map(CountrySource::Header);
    }
    if let Some(q) = &c.query {
        source = Some(CountrySource::Query(q.clone()));
    }
    if let Some(fx) = &c.fixed {
        let hint = Some("define it under `countries`");
        source = refs.names.country(ctx, &cp.k("fixed"), refs.countries, fx, hint).map(CountrySource::Fixed);
    }
    match c.local {
        Some(false) => ctx.at(
            &cp.k("local"),
            "`local: false` is not a country source".into(),
            Some("write `local: true` or use header, query or fixed"),
        ),
        Some(true) => match &refs.file.region {
            None => ctx.at(
                &cp.k("local"),
                "`local: true` needs this instance's `region`".into(),
                Some("set the top-level `region:`"),
            ),
            Some(r) => {
                // The lowest-id country of the local region.
                let local = refs.file.regions.keys().position(|name| name == r);
                let first = refs.countries.iter().filter(|c| Some(c.region) == local).map(|c| c.id).min();
                if !refs.file.countries.values().any(|c| &c.region == r) {
                    ctx.at(
                        &cp.k("local"),
                        format!("no country is owned by the local region {}", show(r)),
                        Some("assign a country to this region or use another source"),
                    );
                }
                source = first.map(CountrySource::Local);
            }
        },
        None => {}
    }
    source
}

/// Whether placement `s` can read `format`, and the table it reads is configured.
fn check_strategy(refs: &Refs<'_>, ctx: &mut Ctx<'_>, path: &YamlPath, route: &str, format: Format, s: Strategy) {
    let file = refs.file;
    let fits = match s {
        Strategy::Auto => {
            if let Some(missing) = natural_configured(file, ctx, format) {
                if file.default_region.is_none() {
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
        Strategy::KeyRange | Strategy::Hash | Strategy::TimeRange | Strategy::Search => true,
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
        Strategy::KeyRange if file.key_ranges.is_empty() && !ctx.has_section("key_ranges") => Some("`key_ranges`"),
        Strategy::Hash if file.hash.is_none() && !ctx.has_section("hash") => Some("`hash`"),
        Strategy::TimeRange if file.time_ranges.is_empty() && !ctx.has_section("time_ranges") => Some("`time_ranges`"),
        Strategy::Country | Strategy::Shard | Strategy::Node => natural_configured(file, ctx, format),
        _ => None,
    };
    if let (Some(m), None) = (missing, &file.default_region) {
        ctx.at(
            path,
            format!("route {} uses placement {} but {m} is not configured", show(route), s.name()),
            Some("configure it or set `default_region`"),
        );
    }
}

/// Whether the table has what the natural strategy of `format` needs;
/// `None` when it does, else the keys it lacks.
fn natural_configured(file: &File, ctx: &Ctx<'_>, format: Format) -> Option<&'static str> {
    let n = &file.nodes;
    // A section that is present but failed to parse was reported already.
    let broken = |key: &str| ctx.has_section(key) && ctx.errors.iter().any(|e| e.path.starts_with(key));
    let ok = match format {
        Format::Iuid => !file.countries.is_empty() || broken("countries"),
        Format::Uniqid => file.shards.is_some() || broken("shards"),
        Format::Locality => !n.locality_mac.is_empty() || !n.locality_pid.is_empty(),
        Format::Snowflake => !n.snowflake_datacenter.is_empty() || !n.snowflake_worker.is_empty(),
        Format::Sonyflake => !n.sonyflake_machine.is_empty(),
        Format::Instagram => !n.instagram_shard.is_empty(),
        Format::Uuidv7 => !file.time_ranges.is_empty() || !file.key_ranges.is_empty() || file.hash.is_some(),
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

/// `to`: `local` (the instance's region, else `default_region`) or a
/// region of the table; alone, without `id`, `mint`, `fanout` or a placement.
pub(super) fn target(refs: &Refs<'_>, r: &schema::Route, to: &ToSpec, p: &YamlPath, ctx: &mut Ctx<'_>) -> Option<To> {
    let tp = p.k("to");
    let others = [("id", r.id.is_some()), ("mint", r.mint.is_some()), ("fanout", r.fanout.is_some())];
    if let Some((key, _)) = others.iter().find(|(_, set)| *set) {
        let m = format!("route {} has both `to` and `{key}`", show(&r.name));
        ctx.at(&tp, m, Some("a route with `to` routes by its path alone: remove one of them"));
        return None;
    }
    if r.placement != "auto" {
        let m = format!("route {} has `to` and `placement`: it places no id", show(&r.name));
        ctx.at(&p.k("placement"), m, Some("remove `placement`"));
    }
    match to {
        ToSpec::Word(w) if w == "local" => {
            if refs.file.region.is_none() && refs.file.default_region.is_none() {
                let m = format!("route {} sends to the local region, and this table names none", show(&r.name));
                ctx.at(&tp, m, Some("set `region:` (the region this instance serves) or `default_region:`"));
                return None;
            }
            Some(To::Local)
        }
        ToSpec::Word(w) => {
            ctx.at(&tp, format!("unknown target {}", show(w)), Some("use `local`, or `{ region: NAME }`"));
            None
        }
        ToSpec::Region(to) => refs.names.region(ctx, &tp.k("region"), &to.region).map(To::Region),
    }
}
