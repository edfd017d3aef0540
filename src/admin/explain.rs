//! `GET /explain?id=…[&route=…]`: an id's fields in every format it is
//! valid in, and, for the named route (or every route whose formats accept
//! it), the format it decodes as, the strategy, the region and the rule. On
//! a search route, the regions it asks and where the id was found, if it
//! was; on a fan-out route (named), the regions it asks and how it merges.

use http::{Response, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};

use super::AdminError;
use super::{json_response, problem, AdminBody};
use crate::config::model::IdSource;
use crate::ids::{self, Format};
use crate::proxy::extract::{percent_decode, query_param};
use crate::routing::{Found, Loaded, RegionId, Route, Strategy, Table};

/// `GET /explain?id=…[&route=…]`.
pub(super) fn explain(snap: &Loaded, found: &Found, query: &str) -> Response<AdminBody> {
    let Some(id) = query_param(query, "id").map(percent_decode).filter(|s| !s.is_empty()) else {
        return problem(&AdminError::ExplainWithoutId, "/explain");
    };
    let route_name = query_param(query, "route").map(percent_decode);
    let table = &snap.table;
    let routes: Vec<&Route> = match &route_name {
        Some(name) => match table.route_by_name(name) {
            Some(r) => vec![r],
            None => return problem(&AdminError::UnknownRoute { name: name.to_string() }, "/explain"),
        },
        None => table.routes().iter().filter(|r| r.id.is_some()).collect(),
    };
    let mut valid_as = Vec::new();
    let mut invalid_as = Map::new();
    let mut rejected = Vec::new();
    for format in Format::ALL {
        match ids::parse(format, &id, table.id_params()) {
            Ok(d) => valid_as.push(decoded_json(&d)),
            Err(e) => {
                invalid_as.insert(format.name().into(), e.reason.code().into());
                let why = json!({ "format": format.name(), "reason": e.reason.code(), "detail": e.reason.explain() });
                rejected.push(why);
            }
        }
    }
    let mut placed = Vec::new();
    for route in routes {
        if let Some(entry) = explain_route(table, found, route, &id, route_name.is_some()) {
            placed.push(entry);
        }
    }
    json_response(
        StatusCode::OK,
        &json!({
            "input": ids::escape_for_display(&id, 128),
            "table_version": snap.version,
            "valid_as": valid_as,
            "invalid_as": invalid_as,
            "rejected": rejected,
            "routes": placed,
        }),
    )
}

/// How `route` would place `id`; `None` when the route does not accept it
/// and was not asked for by name.
fn explain_route(table: &Table, found: &Found, route: &Route, id: &str, named: bool) -> Option<Value> {
    let mut entry = Map::new();
    entry.insert("route".into(), route.name.clone().into());
    entry.insert("template".into(), route.template.clone().into());
    entry.insert("placement".into(), route.kind().into());
    if let Some(to) = route.to {
        entry.insert("region".into(), table.region_of(to).map(|r| table.region(r).name.clone()).into());
        entry.insert("error".into(), "this route routes by its path alone; it reads no id".into());
        return named.then_some(Value::Object(entry));
    }
    let names =
        |list: &[usize]| -> Vec<String> { RegionId::list(list).map(|r| table.region(r).name.clone()).collect() };
    if let Some(f) = &route.fanout {
        let sort = match &f.merge.sort {
            crate::merge::SortKey::IdTime { field, .. } => json!({ "id_field": field }),
            crate::merge::SortKey::Field(field) => json!({ "field": field }),
        };
        let order = if f.merge.descending { "desc" } else { "asc" };
        let partial = if f.require_all { "fail" } else { "allow" };
        entry.insert(
            "fanout".into(),
            json!({ "regions": names(&f.regions), "sort": sort, "order": order, "partial": partial }),
        );
        return named.then_some(Value::Object(entry));
    }
    let Some(rule) = &route.id else {
        entry.insert("error".into(), "this route mints its ids; it does not read one".into());
        return named.then_some(Value::Object(entry));
    };
    entry.insert("formats".into(), rule.formats.iter().map(|f| f.name()).collect::<Vec<_>>().into());
    let decoded = match ids::parse_any(&rule.formats, id, table.id_params()) {
        Ok(d) => d,
        Err(e) => {
            if !named {
                return None;
            }
            entry.insert("error".into(), e.to_string().into());
            entry.insert("reason".into(), e.reason.code().into());
            return Some(Value::Object(entry));
        }
    };
    entry.insert("decoded_as".into(), decoded.format().name().into());
    let (id_in, link) = link(route, &rule.source, id);
    entry.insert("id_in".into(), id_in.into());
    entry.insert("link".into(), link.map_or(Value::Null, Value::from));
    if let (Strategy::Search, Some(search)) = (route.strategy, &route.search) {
        let cached = found.peek(&route.name, &decoded.to_string(), std::time::Instant::now());
        let cached = cached.map(|(region, age)| json!({ "region": region, "found_seconds_ago": age.as_secs() }));
        entry.insert(
            "search".into(),
            json!({ "regions": names(&search.regions), "sequential": search.sequential, "found": cached }),
        );
        if let Some(region) = cached.as_ref().and_then(|c| c["region"].as_str()) {
            entry.insert("region".into(), region.into());
        }
        return Some(Value::Object(entry));
    }
    let strategy = match route.strategy {
        crate::routing::Strategy::Auto => table.natural_strategy(decoded.format()),
        s => s,
    };
    entry.insert("strategy".into(), strategy.name().into());
    match table.place(&decoded, route.strategy) {
        Ok(p) => {
            entry.insert("region".into(), table.region(p.region).name.clone().into());
            entry.insert("rule".into(), table.explain(p.rule).to_string().into());
            entry.insert("rule_kind".into(), p.rule.kind().into());
            if let Some(name) = table.units().name(p.rule, p.region) {
                entry.insert("unit".into(), name.into());
            }
            if let Some(m) = table.move_of(p.rule, p.region) {
                entry.insert("move".into(), table.move_json(m));
            }
        }
        Err(e) => {
            entry.insert("error".into(), e.to_string().into());
            entry.insert("reason".into(), "no_owner".into());
        }
    }
    Some(Value::Object(entry))
}

/// Where `route` reads its id (`path parameter id`, `header X-Entity-Id`,
/// `query id`), and the path and query that fetch `id` through it with a
/// GET (none for a header, a route without GET or a template with other
/// parameters).
fn link(route: &Route, source: &IdSource, id: &str) -> (String, Option<String>) {
    let gets = route.methods.as_ref().is_none_or(|m| m.contains(&http::Method::GET));
    let encoded = utf8_percent_encode(id, UNRESERVED).to_string();
    let (id_in, target) = match source {
        IdSource::PathParam(name) => {
            (format!("path parameter {name}"), route.template.replace(&format!("{{{name}}}"), &encoded))
        }
        IdSource::Query(name) => (format!("query {name}"), format!("{}?{name}={encoded}", route.template)),
        IdSource::Header(name) => return (format!("header {name}"), None),
        IdSource::GrpcField(path) => return (format!("gRPC message field {path}"), None),
    };
    let whole = !target.split('?').next().unwrap_or("").contains(['{', '}']);
    (id_in, (gets && whole).then_some(target))
}

/// What a link's id keeps as it is: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `{format, canonical, fields: {…}}` of a decoded id (the same field
/// values `shardgate decode --json` prints).
fn decoded_json(d: &ids::Decoded) -> Value {
    let mut text = Vec::with_capacity(256);
    match ids::json::write_object(d, &mut text) {
        Ok(()) => serde_json::from_slice(&text).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}
