//! Locate: the pure part of routing one request. Match the route, read its
//! id (or mint one on a create route), decode it and place it in its owner's
//! region. No I/O and no allocation on the lookup path; the `request` group
//! of `benches/routing.rs` measures exactly this function.

use http::request::Parts;

use crate::ids::{self, Decoded};
use crate::routing::{Placement, Route, Table};

use super::error::ProxyError;
use super::{extract, mint, Decision};

/// Where a request goes, as far as the table can tell without I/O.
#[derive(Debug)]
pub struct Located<'t> {
    /// The matched route.
    pub route: &'t Route,
    /// The id the request is routed by (decoded, or minted on a create route).
    pub id: Decoded,
    /// The owner's region and the rule that chose it.
    pub placement: Placement,
}

/// Matches, extracts, decodes (or mints) and places. What it learns along
/// the way goes into `decision`, so the access log names the route even when
/// the id is rejected. `relayed`: the request comes from an authenticated
/// peer shardgate, whose minted id a create route keeps ([`mint::mint`]).
pub fn locate<'t>(
    table: &'t Table,
    parts: &Parts,
    minters: &mint::Minters,
    relayed: bool,
    decision: &mut Decision<'t>,
) -> Result<Located<'t>, ProxyError> {
    let m = table.match_route(&parts.method, parts.uri.path()).ok_or(ProxyError::NoRoute)?;
    // The match borrows the path too; the route itself lives as long as the table.
    let route = table.routes().get(m.route.index).ok_or(ProxyError::NoRoute)?;
    decision.route = Some(route.name.as_str());
    let id = match (&route.id, &route.mint) {
        (Some(rule), _) => {
            let raw = extract::extract(&rule.source, &m.params, &parts.headers, parts.uri.query())?;
            ids::parse_any(&rule.formats, &raw, table.id_params()).map_err(|error| ProxyError::BadId {
                param: extract::describe(&rule.source),
                error,
                input: raw.to_string(),
            })?
        }
        (None, Some(rule)) => {
            let id = mint::mint(rule, parts, table, minters, relayed)?;
            decision.minted = true;
            id
        }
        (None, None) => return Err(ProxyError::NoRoute),
    };
    decision.format = Some(id.format());
    if table.settings().log.ids {
        decision.id = Some(id.to_string());
    }
    let placement = table.place(&id, route.strategy).map_err(|e| ProxyError::NoOwner { detail: e.to_string() })?;
    decision.rule = Some(placement.rule);
    Ok(Located { route, id, placement })
}
