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

use super::error::{LegFailure, ProxyError};
use super::forward::{forward, Leg};
use super::locate::{Decision, Search};
use super::{legs, Proxy};
use crate::config::model::SearchRule;
use crate::http1::write::Added;
use crate::routing::{Lookup, RegionId, Route, Table};
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
    proxy: &Proxy,
    table: &'t Table,
    asked: &Search<'t>,
    parts: &Parts,
    body: RequestBody,
    hops: u32,
    decision: &mut Decision<'t>,
) -> Result<Response<ResponseBody>, ProxyError> {
    let (route, rule) = (asked.route, asked.rule);
    let found = &proxy.shared.found;
    let id = asked.id.to_string();
    let read = parts.method == Method::GET || parts.method == Method::HEAD;
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
        decision.outcome = Some("search_cached");
        let body = body.take().unwrap_or(RequestBody::Empty);
        let resp = send(proxy, table, region, parts, body, hops, decision).await?;
        if resp.status() != StatusCode::NOT_FOUND {
            return Ok(resp);
        }
        // It has gone from there (moved, or deleted): forget it; a read searches again.
        found.forget(&route.name, &id);
        if !read {
            return Ok(resp);
        }
    }
    decision.outcome = Some("searched");
    decision.upstream_started = Some(Instant::now());
    // A read of the entity itself is asked as it is (a 304 from the owner
    // is its answer); anything else first asks plainly where the entity is.
    let itself = read && parts.uri.path() == asked.exists;
    let probe = if itself {
        legs::leg_head(parts, parts.method.clone(), parts.uri.clone(), false)
    } else {
        let uri = http::Uri::try_from(asked.exists.as_str()).map_err(|_| ProxyError::NoRoute)?;
        legs::leg_head(parts, Method::HEAD, uri, true)
    };
    let answers = ask(proxy, table, rule, &probe, hops, decision.trace.as_deref()).await;
    record(proxy, table, route, rule, &answers, decision);
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
    decision.region = Some(table.region(region).name.as_str());
    if itself {
        return Ok(resp);
    }
    drop(resp);
    send(proxy, table, region, parts, body.take().unwrap_or(RequestBody::Empty), hops, decision).await
}

/// The request, with its body, to `region` alone.
async fn send<'t>(
    proxy: &Proxy,
    table: &'t Table,
    region: RegionId,
    parts: &Parts,
    body: RequestBody,
    hops: u32,
    decision: &mut Decision<'t>,
) -> Result<Response<ResponseBody>, ProxyError> {
    let leg = Leg::alone(table, region, hops);
    // The added fields are in the head's map already (see `Proxy::route`).
    forward(proxy, leg, parts, &Added::default(), body, Instant::now(), decision).await
}

/// Asks the rule's regions for `parts` until one answers 2xx: all at once
/// (the others are cancelled when one does), or one after another in order.
async fn ask(
    proxy: &Proxy,
    table: &Table,
    rule: &SearchRule,
    parts: &Parts,
    hops: u32,
    trace: Option<&crate::telemetry::traces::TraceSpan>,
) -> Asked {
    let regions = RegionId::list(&rule.regions);
    let one = |region: RegionId| async move {
        (region, legs::ask(proxy, table, region, parts, hops, rule.leg_timeout, trace.map(|t| (t, "search"))).await)
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
fn record(proxy: &Proxy, table: &Table, route: &Route, rule: &SearchRule, asked: &Asked, decision: &mut Decision<'_>) {
    let winner = asked.found.as_ref().map(|(r, _)| table.region(*r).name.as_str());
    let outcome = |name: &str| -> &'static str {
        if Some(name) == winner {
            "found"
        } else if asked.not_found.iter().any(|n| n == name) {
            "not_found"
        } else {
            asked.failed.iter().find(|f| f.region == name).map_or("cancelled", |f| f.reason)
        }
    };
    let names: Vec<&str> = RegionId::list(&rule.regions).map(|r| table.region(r).name.as_str()).collect();
    decision.legs = Some(legs::summary(names.iter().map(|n| (*n, outcome(n)))));
    for name in names {
        proxy.shared.metrics.leg("search", &route.name, name, outcome(name));
    }
}
