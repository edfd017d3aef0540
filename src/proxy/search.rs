//! Search: a request for an id that carries no region (`placement:
//! search`: legacy UUIDv4/UUIDv7, Snowflakes without a datacenter map).
//!
//! ```text
//!  id ─► found before? ─yes─► that region ─► (a read answered 404: forget it, search again)
//!            └─no─► a read of the entity itself: ask the regions with it ─► first 2xx is the answer
//!                   anything else: HEAD the entity's path at the regions ─► first 2xx ─► the request, there
//!                   ─► either way, the region remembered
//! ```
//!
//! What is remembered comes only from the entity itself answering: its
//! own path (`search.exists`, by default the route's path up to its id)
//! asked with `HEAD`, or read with `GET`. A region that answers a request
//! about something else of the id's (`/users/X/comments` answered `200 []`)
//! teaches nothing, so no client's read can send another client's write to
//! a region that does not hold the entity. Regions are asked at once (the
//! first 2xx wins and the rest are cancelled) or in order. A write is never
//! sent to several regions. 404 from every region is a 404; other failures
//! make a 502 (504 when all were timeouts) naming each region and what it
//! answered.

use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use hyper::body::Body;

use super::ctx::{Ctx, Legs};
use super::error::{LegFailure, ProxyError};
use super::forward::{forward, Leg, Reach};
use super::legs::{self, Asking};
use super::locate::Search;
use crate::config::model::SearchRule;
use crate::http1::write::Added;
use crate::outcome::Outcome;
use crate::routing::{Found, Lookup, RegionId, Table};
use crate::upstream::{RequestBody, ResponseBody};

/// What asking the regions gave.
#[derive(Debug, Default)]
struct Asked {
    /// The region that has the entity, and its answer.
    found: Option<(RegionId, Response<ResponseBody>)>,
    /// Regions that answered 404.
    not_found: Vec<String>,
    /// Regions that failed.
    failed: Vec<LegFailure>,
    /// When every region answered the same 4xx other than 404, one of
    /// those answers (the client's request, not the search, is refused).
    refused: Option<Response<ResponseBody>>,
}

/// Serves a request on a `placement: search` route.
pub(super) async fn search<'t>(
    reach: Reach<'_>,
    found: &Found,
    ctx: &mut Ctx<'t>,
    asked: &Search<'t>,
    parts: &Parts,
    body: RequestBody,
) -> Result<Response<ResponseBody>, ProxyError> {
    let (route, rule, table) = (asked.route, asked.rule, ctx.table);
    let id = asked.id.to_string();
    let read = parts.method == Method::GET || parts.method == Method::HEAD;
    // A read that carries a body is not asked again after the remembered
    // region's 404: its body went there, and its head says it has one.
    let again = read && (body.is_end_stream() || body.size_hint().exact() == Some(0));
    let mut body = Some(body);
    let cached = match found.lookup(&route.name, &id, table, Instant::now()) {
        // A region the route no longer asks (the table changed) is not trusted.
        Lookup::Hit(region) if rule.regions.contains(&usize::from(region.0)) => Some(region),
        Lookup::Hit(_) => {
            found.forget(&route.name, &id);
            None
        }
        Lookup::Miss | Lookup::Stale => None,
    };
    if let Some(region) = cached {
        ctx.journal.outcome = Some(Outcome::SearchCached);
        let body = body.take().unwrap_or(RequestBody::Empty);
        let resp = send(reach, ctx, region, parts, body).await?;
        if resp.status() != StatusCode::NOT_FOUND {
            return Ok(resp);
        }
        // A proxy on the way made that 404 (a peer without the route): the
        // entity may well be there still; the region failed, and stays remembered.
        if legs::proxy_made_404(&resp) {
            let failed = vec![legs::proxy_404(&table.region(region).name)];
            return Err(ProxyError::LegsFailed { what: "search", asked: 1, failed });
        }
        // It has gone from there (moved, or deleted): forget it; a read searches again.
        found.forget(&route.name, &id);
        if !again {
            return Ok(resp);
        }
    }
    ctx.journal.outcome = Some(Outcome::Searched);
    ctx.journal.upstream_started = Some(Instant::now());
    // A read of the entity itself is asked as it is (a 304 from the owner
    // is its answer); anything else first asks plainly where the entity is.
    let itself = read && is_itself(&parts.uri, &asked.exists);
    let probe = if itself {
        legs::leg_head(parts, parts.method.clone(), parts.uri.clone(), false)
    } else {
        let uri = http::Uri::try_from(asked.exists.as_str()).map_err(|_| ProxyError::NoRoute)?;
        legs::leg_head(parts, Method::HEAD, uri, true)
    };
    let parent = ctx.journal.trace.as_deref();
    let asking = Asking { kind: "search", timeout: rule.leg_timeout, parent, rewrite: None };
    let answers = ask(reach, (table, ctx.hops), rule, &probe, asking).await;
    ctx.journal.legs = Some(record(table, rule, &answers));
    if let (None, Some(resp)) = (&answers.found, answers.refused) {
        // Every region refused alike (401, 403, …): that is the answer.
        return Ok(resp);
    }
    let Some((region, resp)) = answers.found else {
        let names = RegionId::list(&rule.regions).map(|r| &table.region(r).name);
        return Err(if answers.failed.is_empty() {
            ProxyError::NotFoundAnywhere { asked: names.cloned().collect() }
        } else {
            ProxyError::LegsFailed { what: "search", asked: rule.regions.len(), failed: answers.failed }
        });
    };
    found.remember(&route.name, &id, table, region, Instant::now());
    ctx.journal.region = Some(region);
    if itself {
        return Ok(resp);
    }
    drop(resp);
    send(reach, ctx, region, parts, body.take().unwrap_or(RequestBody::Empty)).await
}

/// Whether `uri` asks for the entity itself: its `exists` target exactly
/// (path, and query when `exists` has one). A query of the client's own
/// is not: its answer, remembered for every client's later writes, must
/// say where the entity is, not what a backend makes of the query.
fn is_itself(uri: &http::Uri, exists: &str) -> bool {
    uri.path_and_query().is_some_and(|pq| pq.as_str() == exists)
}

/// The request, with its body, to `region` alone.
async fn send<'t>(
    reach: Reach<'_>,
    ctx: &mut Ctx<'t>,
    region: RegionId,
    parts: &Parts,
    body: RequestBody,
) -> Result<Response<ResponseBody>, ProxyError> {
    let leg = Leg::alone(ctx.table, region, ctx.hops);
    // The added fields are in the head's map already (see `Proxy::route`).
    forward(reach, leg, parts, &Added::default(), body, &mut ctx.journal).await
}

/// Asks the rule's regions for `parts` until one answers 2xx: all at once
/// (the others are cancelled when one does), or one after another in order.
async fn ask(
    reach: Reach<'_>,
    (table, hops): (&Table, u32),
    rule: &SearchRule,
    parts: &Parts,
    asking: Asking<'_>,
) -> Asked {
    let regions = RegionId::list(&rule.regions);
    let one = |region: RegionId| async move {
        (region, legs::ask(reach, Leg::alone(table, region, hops), parts, asking).await)
    };
    let mut asked = Asked::default();
    if rule.sequential {
        for region in regions {
            let (region, result) = one(region).await;
            if take(table, &mut asked, region, result) {
                break;
            }
        }
        refused_alike(&mut asked, rule.regions.len());
        return asked;
    }
    let mut running: FuturesUnordered<_> = regions.map(one).collect();
    while let Some((region, result)) = running.next().await {
        if take(table, &mut asked, region, result) {
            break;
        }
    }
    refused_alike(&mut asked, rule.regions.len());
    asked
}

/// Keeps a refusal as the answer when every region gave the same 4xx (not
/// 404); otherwise drops it, and the refusals stay failures.
fn refused_alike(asked: &mut Asked, regions: usize) {
    let first = asked.failed.first().map(|f| f.detail.clone());
    let alike = asked.found.is_none()
        && asked.not_found.is_empty()
        && asked.failed.len() == regions
        && asked.failed.iter().all(|f| f.reason == "status" && Some(&f.detail) == first.as_ref());
    if !alike {
        asked.refused = None;
    }
}

/// Files one region's answer; whether it is the one (2xx).
fn take(
    table: &Table,
    asked: &mut Asked,
    region: RegionId,
    result: Result<Response<ResponseBody>, LegFailure>,
) -> bool {
    let name = &table.region(region).name;
    match result {
        Ok(resp) if resp.status().is_success() || resp.status() == StatusCode::NOT_MODIFIED => {
            asked.found = Some((region, resp));
            return true;
        }
        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => asked.not_found.push(name.clone()),
        Ok(resp) => {
            asked.failed.push(legs::status_failure(name, resp.status()));
            if resp.status().is_client_error() && asked.refused.is_none() {
                asked.refused = Some(resp);
            }
        }
        Err(f) => asked.failed.push(f),
    }
    false
}

/// The access log's and the metrics' account of a search: each region
/// asked, and what it answered (`found`, `not_found`, a failure's reason,
/// or `cancelled` when another region answered first).
fn record(table: &Table, rule: &SearchRule, asked: &Asked) -> Legs {
    let winner = asked.found.as_ref().map(|(r, _)| *r);
    let answers = RegionId::list(&rule.regions)
        .map(|region| {
            let name = table.region(region).name.as_str();
            let said = if Some(region) == winner {
                "found"
            } else if asked.not_found.iter().any(|n| n == name) {
                "not_found"
            } else {
                asked.failed.iter().find(|f| f.region == name).map_or("cancelled", |f| f.reason)
            };
            (region, said)
        })
        .collect();
    Legs { kind: "search", answers }
}
