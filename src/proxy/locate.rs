//! Locate: the pure part of routing one request. Match the route, read its
//! id (or mint one on a create route), decode it and place it in its owner's
//! region. No I/O and no allocation on the lookup path; the `request` group
//! of `benches/routing.rs` measures exactly this function. What it decides,
//! the caller writes into the request's journal (`Journal::located`).

use http::request::Parts;

use crate::config::model::{FanoutRule, SearchRule};
use crate::ids::{self, Decoded};

use crate::routing::{IdSource, Placement, Route, Rule, Strategy, Table, To};

use super::error::ProxyError;
use super::{extract, mint};

/// What routing a request takes, as far as the table can tell without I/O.
#[derive(Debug)]
pub enum Plan<'t> {
    /// One id, placed in its owner's region.
    One(Located<'t>),
    /// A fan-out route: every region of its rule.
    Fanout(&'t Route, &'t FanoutRule),
    /// An id that carries no region: search for it (`placement: search`).
    Search(Search<'t>),
}

/// A request for an id that carries no region.
#[derive(Debug)]
pub struct Search<'t> {
    /// The matched route.
    pub route: &'t Route,
    /// Its regions, and how they are asked.
    pub rule: &'t SearchRule,
    /// The id.
    pub id: Decoded,
    /// The entity's own path, whose `HEAD` says whether a region has it
    /// (with the id's query parameter, when the id is read from the query).
    pub exists: String,
}

impl<'t> Plan<'t> {
    /// The matched route.
    pub fn route(&self) -> &'t Route {
        match self {
            Plan::One(l) => l.route,
            Plan::Fanout(r, _) => r,
            Plan::Search(s) => s.route,
        }
    }
}

/// Where a request goes, as far as the table can tell without I/O.
#[derive(Debug)]
pub struct Located<'t> {
    /// The matched route.
    pub route: &'t Route,
    /// The id the request is routed by (decoded, or minted on a create
    /// route); none on a route that routes by its path alone (`to`).
    pub id: Option<Decoded>,
    /// Whether the id was minted here (a create route).
    pub minted: bool,
    /// The owner's region and the rule that chose it.
    pub placement: Placement,
}

/// A request `locate` refused: why, and the route it matched, if one did
/// (the access log names it even then).
#[derive(Debug)]
pub struct Rejected<'t> {
    /// The matched route.
    pub route: Option<&'t Route>,
    /// Why.
    pub error: ProxyError,
}

/// The route `parts` match, for what must be known before [`locate`]
/// runs: whether a gRPC call's route reads its id from the call's first
/// message (which the caller then reads, `message`).
pub fn matched<'t>(table: &'t Table, parts: &Parts) -> Option<&'t Route> {
    let m = table.match_route(&parts.method, parts.uri.path())?;
    table.routes().get(m.route.index)
}

/// Whether `route` reads its id from a gRPC call's first message.
pub fn reads_message(route: &Route) -> bool {
    route.id.as_ref().is_some_and(|id| matches!(id.source, IdSource::GrpcField(_)))
}

/// Matches, extracts, decodes (or mints) and places: a pure function of
/// the table and the head (a mint reads the clock), and for a route that
/// reads a gRPC call's message field, of its first `message`. `relayed`: the request
/// comes from an authenticated peer shardgate, whose minted id a create
/// route keeps ([`mint::mint`]).
pub fn locate<'t>(
    table: &'t Table,
    parts: &Parts,
    message: Option<&[u8]>,
    minters: &mint::Minters,
    relayed: bool,
) -> Result<Plan<'t>, Rejected<'t>> {
    let Some(m) = table.match_route(&parts.method, parts.uri.path()) else {
        let error = match table.methods_at(parts.uri.path()) {
            Some(allow) => ProxyError::MethodNotAllowed { method: parts.method.to_string(), allow },
            None => ProxyError::NoRoute,
        };
        return Err(Rejected { route: None, error });
    };
    // The match borrows the path too; the route itself lives as long as the table.
    let route = table.routes().get(m.route.index).ok_or(Rejected { route: None, error: ProxyError::NoRoute })?;
    let rejected = |error| Rejected { route: Some(route), error };
    // A route for gRPC calls only refuses anything else, before reading its id.
    if route.grpc_only && !crate::grpc::status::is_call(parts) {
        return Err(rejected(ProxyError::NotGrpc));
    }
    if let Some(rule) = &route.fanout {
        return Ok(Plan::Fanout(route, rule));
    }
    if let Some(to) = route.to {
        let rule = if to == To::Local { Rule::Local } else { Rule::Route };
        let placement = table.region_of(to).map(|region| Placement { region, rule }).ok_or_else(|| {
            rejected(ProxyError::NoOwner { detail: format!("route {} names no region this table has", route.name) })
        })?;
        return Ok(Plan::One(Located { route, id: None, minted: false, placement }));
    }
    let (id, minted) = match (&route.id, &route.mint) {
        (Some(rule), _) => {
            let raw = extract::extract(&rule.source, &m.params, &parts.headers, parts.uri.query(), message)
                .map_err(rejected)?;
            let id = ids::parse_any(&rule.formats, &raw, table.id_params()).map_err(|_| {
                rejected(ProxyError::BadId {
                    param: extract::describe(&rule.source),
                    // Each format's own reason (a bad id is the cold path: parsed again, one by one).
                    errors: rule
                        .formats
                        .iter()
                        .filter_map(|&f| ids::parse_any(&[f], &raw, table.id_params()).err())
                        .collect(),
                    input: raw.to_string(),
                })
            })?;
            (id, false)
        }
        (None, Some(rule)) => (mint::mint(rule, parts, table, minters, relayed).map_err(rejected)?, true),
        (None, None) => return Err(rejected(ProxyError::NoRoute)),
    };
    if let (Strategy::Search, Some(rule)) = (route.strategy, &route.search) {
        let mut exists = match &rule.exists {
            Some(t) => t.fill(|name| m.params.get(name)),
            None => parts.uri.path().to_string(),
        };
        // An id read from the query is asked for in the query, as the client
        // sent it: without it, the path names no entity, and a region that
        // answers for the path would be taken for the entity's.
        if let Some(IdSource::Query(name)) = route.id.as_ref().map(|r| &r.source) {
            if let Some(value) = extract::query_param(parts.uri.query().unwrap_or(""), name) {
                let and = if exists.contains('?') { '&' } else { '?' };
                exists = format!("{exists}{and}{name}={value}");
            }
        }
        return Ok(Plan::Search(Search { route, rule, id, exists }));
    }
    let placement =
        table.place(&id, route.strategy).map_err(|e| rejected(ProxyError::NoOwner { detail: e.to_string() }))?;
    Ok(Plan::One(Located { route, id: Some(id), minted, placement }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Iuid;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn table() -> Result<Table, crate::config::ConfigErrors> {
        let text = r#"version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:1"] }
  kz: { upstreams: ["http://127.0.0.1:2"] }
countries: { KZ: { id: 7, region: kz }, DE: { id: 49, region: eu } }
entities: { Order: 3 }
log: { ids: true }
routes:
  - { name: orders, match: { path: "/v1/orders/{id}" }, id: { path_param: id, formats: [iuid] } }
  - { name: wallet, match: { path: "/v1/wallet" }, id: { header: X-Entity-Id, formats: [iuid] } }
  - { name: search, match: { path: "/v1/search" }, id: { query: id, formats: [iuid] } }
  - name: create
    match: { path: "/v1/orders", methods: [POST] }
    mint: { format: iuid, entity: Order, country: { header: X-Country } }
"#;
        Ok(Table::compile(&crate::config::load_str(text, "t.yaml")?))
    }

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Result<Parts, http::Error> {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        Ok(b.body(())?.into_parts().0)
    }

    fn region<'t>(t: &'t Table, located: &Located<'_>) -> &'t str {
        &t.region(located.placement.region).name
    }

    #[test]
    fn reads_the_id_where_the_route_says_and_places_it() -> TestResult {
        let t = table()?;
        let minters = mint::Minters::new(None, crate::ids::LocalityMode::Variable);
        let kz = Iuid::from_fields(1_700_000_000_000, 7, 3, 1).to_string();
        for p in [
            parts("GET", &format!("/v1/orders/{kz}"), &[])?,
            parts("GET", "/v1/wallet", &[("x-entity-id", &kz)])?,
            parts("GET", &format!("/v1/search?q=1&id={}", kz.replacen('-', "%2D", 1)), &[])?,
        ] {
            let Plan::One(located) = locate(&t, &p, None, &minters, false).map_err(|r| r.error)? else {
                return Err("not one id".into());
            };
            assert_eq!(region(&t, &located), "kz", "{}", p.uri);
            assert_eq!((located.id.map(|id| id.to_string()), located.minted), (Some(kz.clone()), false));
            assert_eq!(located.placement.rule, Rule::Country { country: 7 });
        }
        Ok(())
    }

    #[test]
    fn a_create_route_mints_in_the_asked_country() -> TestResult {
        let t = table()?;
        let minters = mint::Minters::new(None, crate::ids::LocalityMode::Variable);
        let plan = locate(&t, &parts("POST", "/v1/orders", &[("x-country", "de")])?, None, &minters, false);
        let Plan::One(located) = plan.map_err(|r| r.error)? else { return Err("not one id".into()) };
        assert_eq!((region(&t, &located), located.minted, located.route.name.as_str()), ("eu", true, "create"));
        let Some(Decoded::Iuid(id)) = located.id else { return Err("not an iuid".into()) };
        assert_eq!((id.country(), id.service_entity()), (49, 3));
        Ok(())
    }

    #[test]
    fn a_search_asks_for_the_entity_where_its_id_is() -> TestResult {
        let text = r#"version: 1
regions: { eu: { upstreams: ["http://127.0.0.1:1"] }, kz: { upstreams: ["http://127.0.0.1:2"] } }
routes:
  - { name: path, match: { path: "/p/{id}/{*rest}" }, id: { path_param: id, formats: [uuidv7] }, placement: search }
  - { name: query, match: { path: "/q" }, id: { query: id, formats: [uuidv7] }, placement: search }
  - name: full
    match: { path: "/f" }
    id: { query: id, formats: [uuidv7] }
    placement: search
    search: { exists: "/f?full=1" }
"#;
        let t = Table::compile(&crate::config::load_str(text, "t.yaml")?);
        let minters = mint::Minters::new(None, crate::ids::LocalityMode::Variable);
        let x = "017491bb-3800-74cf-8cf4-000000000001";
        for (method, uri, exists) in [
            ("GET", format!("/p/{x}/comments"), format!("/p/{x}")),
            ("PUT", format!("/q?a=1&id={x}"), format!("/q?id={x}")),
            ("GET", format!("/f?id={x}&view=all"), format!("/f?full=1&id={x}")),
        ] {
            let plan = locate(&t, &parts(method, &uri, &[])?, None, &minters, false).map_err(|r| r.error)?;
            let Plan::Search(search) = plan else { return Err(format!("{uri}: not a search").into()) };
            assert_eq!(search.exists, exists, "{uri}");
        }
        Ok(())
    }

    #[test]
    fn failures_are_typed_and_the_route_is_still_recorded() -> TestResult {
        let t = table()?;
        let minters = mint::Minters::new(None, crate::ids::LocalityMode::Variable);
        let cases: [(Parts, &str, Option<&str>); 5] = [
            (parts("GET", "/nowhere", &[])?, "no_route", None),
            (parts("GET", "/v1/orders/nope", &[])?, "bad_length", Some("orders")),
            (parts("GET", "/v1/wallet", &[])?, "missing_id", Some("wallet")),
            (parts("GET", "/v1/search?id=a&id=b", &[])?, "ambiguous_id", Some("search")),
            (parts("POST", "/v1/orders", &[("x-country", "XX")])?, "unknown_country", Some("create")),
        ];
        for (p, reason, route) in cases {
            let rejected = locate(&t, &p, None, &minters, false).err().ok_or("accepted")?;
            let matched = rejected.route.map(|r| r.name.as_str());
            assert_eq!((rejected.error.reason(), matched), (reason, route), "{}", p.uri);
        }
        // An id whose country has no owner: a configuration gap, 502.
        let unowned = format!("/v1/orders/{}", Iuid::from_fields(0, 99, 3, 1));
        let err = locate(&t, &parts("GET", &unowned, &[])?, None, &minters, false).err().ok_or("accepted")?.error;
        assert_eq!((err.reason(), err.status().as_u16()), ("no_owner", 502));
        Ok(())
    }
}
