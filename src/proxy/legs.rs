//! Legs: one request to one region, for a fan-out or a search. The region
//! serves it alone (its backends, or its shardgate marked to serve it from
//! its own backends): no failover, since another region's answer would
//! count twice in a merge, or answer for an entity it does not hold.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{header, Response};
use http_body_util::{BodyExt, Limited};

use super::error::{LegFailure, ProxyError};
use super::forward::{forward, Leg};
use super::locate::Decision;
use super::Proxy;
use crate::routing::{RegionId, Table};
use crate::upstream::{RequestBody, ResponseBody};

/// Sends `parts` (no body) to `region` within `timeout`.
pub(super) async fn ask(
    proxy: &Proxy,
    table: &Table,
    region: RegionId,
    parts: &Parts,
    hops: u32,
    timeout: Duration,
) -> Result<Response<ResponseBody>, LegFailure> {
    let name = &table.region(region).name;
    let leg = Leg { chain: vec![region], can_fail_over: false, hops, table, serve_only: true };
    let mut decision = Decision::default();
    let sent = forward(proxy, leg, parts, RequestBody::Empty, Instant::now(), &mut decision);
    match tokio::time::timeout(timeout, sent).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) => Err(failure(name, &e)),
        Err(_) => Err(LegFailure {
            region: name.clone(),
            reason: "leg_timeout",
            detail: format!("no answer within {}", crate::config::duration::Dur(timeout)),
        }),
    }
}

/// The failure of a leg that `error` ended.
pub(super) fn failure(region: &str, error: &ProxyError) -> LegFailure {
    LegFailure { region: region.to_string(), reason: error.reason(), detail: error.to_string() }
}

/// A leg that answered with a status it should not have.
pub(super) fn status_failure(region: &str, status: http::StatusCode) -> LegFailure {
    LegFailure { region: region.to_string(), reason: "status", detail: format!("answered {}", status.as_u16()) }
}

/// The whole body of a leg's answer, at most `max` bytes (a longer one is
/// the leg's failure, found from `Content-Length` before reading when it is
/// sent).
pub(super) async fn read_body(region: &str, resp: Response<ResponseBody>, max: usize) -> Result<Bytes, LegFailure> {
    let too_large = || LegFailure {
        region: region.to_string(),
        reason: "too_large",
        detail: format!("the answer is larger than max_leg_bytes ({max})"),
    };
    let declared = resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    match Limited::new(resp.into_body(), max).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(LegFailure {
            region: region.to_string(),
            reason: "upstream_failed",
            detail: format!("the answer broke off: {e}"),
        }),
    }
}

/// `eu=ok us=leg_timeout`: what each region answered, for the access log
/// and the debug header.
pub(super) fn summary<'a, 'b>(legs: impl IntoIterator<Item = (&'a str, &'b str)>) -> String {
    let mut out = String::new();
    for (region, outcome) in legs {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(region);
        out.push('=');
        out.push_str(outcome);
    }
    out
}
