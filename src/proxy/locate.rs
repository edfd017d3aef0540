//! Locate: the pure part of routing one request. Match the route, read its
//! id (or mint one on a create route), decode it and place it in its owner's
//! region. No I/O and no allocation on the lookup path; the `request` group
//! of `benches/routing.rs` measures exactly this function.

use std::time::Instant;

use http::request::Parts;

use crate::ids::{self, Decoded, Format};
use crate::routing::{Placement, Route, Rule, Table};

use super::error::ProxyError;
use super::{extract, mint};

/// What routing decided for one request, recorded as it goes: for the
/// access log, the metrics and the debug headers, even when it failed.
#[derive(Debug, Default)]
pub struct Decision<'t> {
    /// Route name, when one matched (borrowed from the request's table snapshot).
    pub route: Option<&'t str>,
    /// Name of the region that served the request.
    pub region: Option<&'t str>,
    /// Why the owner was chosen (the table's rule).
    pub rule: Option<Rule>,
    /// When the owner's region was down: the owner, whose failover region served.
    pub failover_from: Option<&'t str>,
    /// Upstream attempts made.
    pub attempts: u32,
    /// Whether the request went to another region's shardgate.
    pub peer: bool,
    /// Format of the id the request was routed by (decoded or minted).
    pub format: Option<Format>,
    /// Whether that id was minted by a create route.
    pub minted: bool,
    /// The id in canonical form, kept only when `log.ids` is on.
    pub id: Option<String>,
    /// When the first upstream attempt started.
    pub upstream_started: Option<Instant>,
}

impl Decision<'_> {
    /// The placement rule as text with the table's names (`country 7 (KZ)`,
    /// `override KZ/WalletAccount; failover from kz`), built only when a log
    /// line or debug header needs it.
    pub fn rule_text(&self, table: &Table) -> Option<String> {
        self.rule.map(|rule| match self.failover_from {
            Some(from) => format!("{}; failover from {from}", table.explain(rule)),
            None => table.explain(rule).to_string(),
        })
    }
}

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
