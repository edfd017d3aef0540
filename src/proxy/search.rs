//! Search: a request for an id that carries no region (`placement:
//! search`: legacy UUIDv4/UUIDv7, Snowflakes without a datacenter map).
//!
//! ```text
//!  id ─► found before? ─yes─► that region ─► (a read answered 404: forget it, search again)
//!            └─no─► ask the rule's regions (at once, or in order) ─► first 2xx wins, the rest cancelled
//!                   ─► remember the region ─► a read: that answer; a write: now sent there
//! ```
//!
//! Reads (GET, HEAD) are asked as they are, and the first 2xx is the
//! answer. A write is never sent to several regions: its regions are asked
//! with `HEAD` first, and the write goes to the one that has the entity. 404
//! from every region is a 404; other failures make a 502 (504 when all were
//! timeouts) naming each region and what it answered.

use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use http::request::Parts;
use http::{Method, Response, StatusCode};

use super::error::{LegFailure, ProxyError};
use super::forward::{forward, Leg};
use super::locate::Decision;
use super::{legs, Proxy};
use crate::config::model::SearchRule;
use crate::ids::Decoded;
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
}

/// Serves a request on a `placement: search` route.
#[allow(clippy::too_many_arguments)]
pub(super) async fn search<'t>(
    proxy: &Proxy,
    table: &'t Table,
    route: &'t Route,
    rule: &'t SearchRule,
    id: &Decoded,
    parts: &Parts,
    body: RequestBody,
    hops: u32,
    decision: &mut Decision<'t>,
) -> Result<Response<ResponseBody>, ProxyError> {
    let found = &proxy.shared.found;
    let id = id.to_string();
    let read = parts.method == Method::GET || parts.method == Method::HEAD;
    let mut body = Some(body);
    if let Lookup::Hit(region) = found.lookup(&route.name, &id, table, Instant::now()) {
        decision.outcome = Some("search_cached");
        let body = body.take().unwrap_or(RequestBody::Empty);
        let resp = send(proxy, table, region, parts, body, hops, decision).await?;
        if !(read && resp.status() == StatusCode::NOT_FOUND) {
            return Ok(resp);
        }
        // It has gone from there (moved, or deleted): search again.
        found.forget(&route.name, &id);
    }
    decision.outcome = Some("searched");
    decision.upstream_started = Some(Instant::now());
    let probe = if read { None } else { Some(head_of(parts)) };
    let asked = ask(proxy, table, rule, probe.as_ref().unwrap_or(parts), hops).await;
    record(proxy, table, route, rule, &asked, decision);
    let Some((region, resp)) = asked.found else {
        let names = rule.regions.iter().filter_map(|&i| u16::try_from(i).ok()).map(|i| &table.region(RegionId(i)).name);
        return Err(if asked.failed.is_empty() {
            ProxyError::NotFoundAnywhere { asked: names.cloned().collect() }
        } else {
            ProxyError::LegsFailed { what: "search", asked: rule.regions.len(), failed: asked.failed }
        });
    };
    found.remember(&route.name, &id, table, region, Instant::now());
    decision.region = Some(table.region(region).name.as_str());
    if read {
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
    let leg = Leg { chain: vec![region], can_fail_over: false, hops, table, serve_only: true };
    forward(proxy, leg, parts, body, Instant::now(), decision).await
}

/// Asks the rule's regions for `parts` until one answers 2xx: all at once
/// (the others are cancelled when one does), or one after another in order.
async fn ask(proxy: &Proxy, table: &Table, rule: &SearchRule, parts: &Parts, hops: u32) -> Asked {
    let regions = rule.regions.iter().filter_map(|&i| u16::try_from(i).ok()).map(RegionId);
    let one = |region: RegionId| async move {
        (region, legs::ask(proxy, table, region, parts, hops, rule.leg_timeout).await)
    };
    let mut asked = Asked::default();
    if rule.sequential {
        for region in regions {
            let (region, result) = one(region).await;
            if take(table, &mut asked, region, result) {
                break;
            }
        }
        return asked;
    }
    let mut running: FuturesUnordered<_> = regions.map(one).collect();
    while let Some((region, result)) = running.next().await {
        if take(table, &mut asked, region, result) {
            break;
        }
    }
    asked
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
        Ok(resp) if resp.status().is_success() => {
            asked.found = Some((region, resp));
            return true;
        }
        Ok(resp) if resp.status() == StatusCode::NOT_FOUND => asked.not_found.push(name.clone()),
        Ok(resp) => asked.failed.push(legs::status_failure(name, resp.status())),
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
    let names: Vec<&str> = rule
        .regions
        .iter()
        .filter_map(|&i| u16::try_from(i).ok())
        .map(|i| table.region(RegionId(i)).name.as_str())
        .collect();
    decision.legs = Some(legs::summary(names.iter().map(|n| (*n, outcome(n)))));
    for name in names {
        proxy.shared.metrics.leg("search", &route.name, name, outcome(name));
    }
}

/// A `HEAD` of the same target and fields: how a write finds its region.
fn head_of(parts: &Parts) -> Parts {
    let mut req = http::Request::new(());
    *req.method_mut() = Method::HEAD;
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    let mut head = req.into_parts().0;
    head.headers.remove(http::header::CONTENT_LENGTH);
    head.headers.remove(http::header::TRANSFER_ENCODING);
    head
}
