//! Fan-out: a list route answered by several regions at once, their JSON
//! arrays merged into one page ([`crate::merge`]).
//!
//! ```text
//!  page request (limit, cursor, countries) ─► regions ─► legs, at most `concurrency` at a time,
//!  each within `leg_timeout`, all within `deadline` ─► merge ─► page + next cursor + failures
//! ```
//!
//! Each region answers the request as the client sent it (GET, without
//! `limit` and `cursor`, which are the proxy's), with its whole list; the
//! proxy orders, pages and bounds it (`max_leg_bytes` per region). A region
//! that fails (an error, a timeout, a status other than 2xx, an answer that
//! is not a JSON array of elements with their sort key) is named in the
//! answer's `failed` list and the `X-Shardgate-Partial` header, never merged
//! in part; with `partial: fail`, or when every region failed, the request
//! fails (502, or 504 when every failure was a timeout).

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::request::Parts;
use http::{header, HeaderValue, Method, Response};
use http_body_util::{Either, Full};

use super::ctx::{Ctx, Legs};
use super::error::{LegFailure, ProxyError};
use super::extract::{percent_decode, query_param};
use super::forward::{Leg, Reach};
use super::legs::{self, Asking};
use crate::config::model::{FanoutRule, ListSource};
use crate::merge::{self, Cursor};
use crate::outcome::Outcome;
use crate::routing::{RegionId, Route, Table};
use crate::server::AnswerBody;

/// The header naming the regions a partial answer lacks.
const PARTIAL: &str = "x-shardgate-partial";

/// The room one parsed element takes as it waits to be merged, beside
/// its text (counted as its answer arrived): its [`merge::Item`], its
/// place in the splitter's list and in the merge's sort, about as much
/// again. A list of small elements takes several times its text.
const ITEM_BYTES: usize = 2 * std::mem::size_of::<merge::Item<'static>>() + 32;

/// What the client asked of the merged list.
#[derive(Debug)]
struct PageRequest {
    limit: usize,
    after: Option<Cursor>,
    regions: Vec<RegionId>,
}

/// Answers a fan-out route.
pub(super) async fn fanout<'t>(
    reach: Reach<'_>,
    ctx: &mut Ctx<'t>,
    route: &'t Route,
    rule: &'t FanoutRule,
    parts: &Parts,
) -> Result<Response<AnswerBody>, ProxyError> {
    let table = ctx.table;
    let page = read_page(table, rule, parts)?;
    let leg = leg_request(parts)?;
    ctx.journal.upstream_started = Some(Instant::now());
    let asking = Asking {
        kind: "fanout",
        timeout: rule.leg_timeout,
        parent: ctx.journal.trace.as_deref(),
        rewrite: route.rewrite.as_ref(),
    };
    let answers = gather(reach, table, rule, &page.regions, &leg, (ctx.hops, asking)).await;
    let mut all = Vec::new();
    let mut failed = Vec::new();
    let mut answered = Vec::new();
    let mut not_found = Vec::new();
    let mut legs = Legs { kind: "fanout", answers: Vec::with_capacity(answers.len()) };
    let mut elements_room = Vec::with_capacity(answers.len());
    for (region, answer) in &answers {
        let name = table.region(*region).name.as_str();
        let said = match answer {
            Ok(Answer::List { body, .. }) => match merge::items(&rule.merge, table.id_params(), name, body) {
                Ok(items) => match room_for(reach.room, name, items.len()) {
                    Ok(taken) => {
                        elements_room.push(taken);
                        answered.push((name, items.len()));
                        all.extend(items);
                        "ok"
                    }
                    Err(f) => {
                        let reason = f.reason;
                        failed.push(f);
                        reason
                    }
                },
                Err(e) => {
                    failed.push(LegFailure { region: name.to_string(), reason: e.reason(), detail: e.to_string() });
                    e.reason()
                }
            },
            // The region has no list for this request: an empty one.
            Ok(Answer::NotFound) => {
                answered.push((name, 0));
                not_found.push(name.to_string());
                "not_found"
            }
            Err(f) => {
                failed.push(f.clone());
                f.reason
            }
        };
        legs.answers.push((*region, said));
    }
    legs.answers.sort_by_key(|(r, _)| page.regions.iter().position(|p| p == r));
    ctx.journal.legs = Some(legs);
    if !answers.is_empty() && not_found.len() == answers.len() {
        return Err(ProxyError::NotFoundAnywhere { asked: not_found });
    }
    if !failed.is_empty() && (rule.require_all || answered.is_empty()) {
        return Err(ProxyError::LegsFailed { what: "fan-out", asked: page.regions.len(), failed });
    }
    ctx.journal.outcome = Some(if failed.is_empty() { Outcome::Fanout } else { Outcome::FanoutPartial });
    let page_items = merge::page(&rule.merge, all, page.after.as_ref(), page.limit);
    let body = write_answer(rule, &page_items, &answered, &failed);
    Ok(answer(body, &failed))
}

/// Room for `region`'s `n` parsed elements as they wait to be merged; or
/// the region's failure: `proxy_full` when the fan-outs in flight hold the
/// rest, `too_large` when they could never fit.
fn room_for(room: &super::room::Room, region: &str, n: usize) -> Result<super::room::Taken, LegFailure> {
    let need = n.saturating_mul(ITEM_BYTES);
    room.take_now(need).ok_or_else(|| {
        let size = room.size();
        let (reason, detail) = if need > size {
            ("too_large", format!("its {n} elements, parsed, need more than server.fanout_buffer_bytes ({size})"))
        } else {
            let held = "beside what the fan-outs in flight hold";
            (
                LegFailure::PROXY_FULL,
                format!("its {n} elements do not fit in server.fanout_buffer_bytes ({size}) {held}"),
            )
        };
        LegFailure { region: region.to_string(), reason, detail }
    })
}

/// `limit`, `cursor` and the country list, checked; the regions to ask.
fn read_page(table: &Table, rule: &FanoutRule, parts: &Parts) -> Result<PageRequest, ProxyError> {
    let query = parts.uri.query().unwrap_or("");
    let limit = match query_param(query, "limit") {
        None => rule.limit_default,
        Some(text) => match crate::ids::parse_canonical_u64(text).and_then(|n| u32::try_from(n).ok()) {
            Some(n) if (1..=rule.limit_max).contains(&n) => n,
            _ => {
                let shown = super::error::quote(text);
                return Err(ProxyError::BadPage {
                    detail: format!("limit {shown} is not a whole number from 1 to {}", rule.limit_max),
                });
            }
        },
    };
    // An empty cursor is the first page.
    let after = match query_param(query, "cursor").filter(|c| !c.is_empty()).map(percent_decode) {
        None => None,
        Some(text) => Some(
            Cursor::decode(&rule.merge, &text)
                .map_err(|e| ProxyError::BadPage { detail: format!("cursor {}: {e}", super::error::quote(&text)) })?,
        ),
    };
    let regions = match countries(rule, parts) {
        None => RegionId::list(&rule.regions).collect(),
        Some((param, list)) => {
            let mut wanted = Vec::new();
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let Some(country) = table.country_by_name(name) else {
                    return Err(ProxyError::UnknownCountry { param, value: name.to_string() });
                };
                if let Some(r) = table.country_owner(country) {
                    if !wanted.contains(&r) && rule.regions.contains(&usize::from(r.0)) {
                        wanted.push(r);
                    }
                }
            }
            if wanted.is_empty() {
                return Err(ProxyError::BadPage {
                    detail: format!("{param} names no country owned by a region of this route"),
                });
            }
            wanted
        }
    };
    Ok(PageRequest { limit: limit as usize, after, regions })
}

/// The country list the request gives, with where it was read.
fn countries<'p>(rule: &FanoutRule, parts: &'p Parts) -> Option<(String, Cow<'p, str>)> {
    match rule.countries.as_ref()? {
        ListSource::Header(h) => {
            let v = parts.headers.get(h)?;
            Some((format!("header '{h}'"), String::from_utf8_lossy(v.as_bytes())))
        }
        ListSource::Query(q) => {
            Some((format!("query parameter '{q}'"), percent_decode(query_param(parts.uri.query()?, q)?)))
        }
    }
}

/// The request each region is sent: a GET (a HEAD's answer would carry no
/// list to merge), without the proxy's own `limit` and `cursor`, asking for
/// the whole list as plain JSON.
fn leg_request(parts: &Parts) -> Result<Parts, ProxyError> {
    let path = parts.uri.path();
    let kept: Vec<&str> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(k, _)| k);
            !pair.is_empty() && name != "limit" && name != "cursor"
        })
        .collect();
    let target = if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) };
    let uri = target.parse::<http::Uri>().map_err(|_| ProxyError::NoRoute)?;
    Ok(legs::leg_head(parts, Method::GET, uri, true))
}

/// What one region answered: its list (and the room it takes until the
/// request ends), or 404 (no list there: nothing to merge).
#[derive(Debug)]
enum Answer {
    List { body: Bytes, _room: super::room::Taken },
    NotFound,
}

/// Every region's answer body, or why there is none: legs run at most
/// `concurrency` at a time, each within `leg_timeout`; those still running
/// (or not started) at the `deadline` are failures.
async fn gather(
    reach: Reach<'_>,
    table: &Table,
    rule: &FanoutRule,
    regions: &[RegionId],
    leg: &Parts,
    (hops, asking): (u32, Asking<'_>),
) -> Vec<(RegionId, Result<Answer, LegFailure>)> {
    let deadline = tokio::time::Instant::now() + rule.deadline;
    let fetch = |region: RegionId| async move {
        let name = table.region(region).name.as_str();
        // One leg_timeout from the request to the body's last byte.
        let ends = tokio::time::Instant::now() + rule.leg_timeout;
        let result = match legs::ask(reach, Leg::alone(table, region, hops), leg, asking).await {
            Ok(resp) if resp.status().is_success() => {
                let read = legs::read_body(name, resp, rule.max_leg_bytes, reach.room);
                match tokio::time::timeout_at(ends, read).await {
                    Ok(r) => r.map(|(body, taken)| Answer::List { body, _room: taken }),
                    Err(_) => Err(LegFailure {
                        region: name.to_string(),
                        reason: "leg_timeout",
                        detail: "the answer's body did not arrive in time".into(),
                    }),
                }
            }
            Ok(resp) if resp.status() == http::StatusCode::NOT_FOUND => Ok(Answer::NotFound),
            Ok(resp) => Err(legs::status_failure(name, resp.status())),
            Err(f) => Err(f),
        };
        (region, result)
    };
    let mut waiting = regions.iter().copied();
    let mut running = FuturesUnordered::new();
    let mut out = Vec::with_capacity(regions.len());
    loop {
        while running.len() < rule.concurrency {
            match waiting.next() {
                Some(r) => running.push(fetch(r)),
                None => break,
            }
        }
        match tokio::time::timeout_at(deadline, running.next()).await {
            Ok(Some(done)) => out.push(done),
            Ok(None) => break,
            Err(_) => {
                let late: Vec<RegionId> =
                    regions.iter().copied().filter(|r| !out.iter().any(|(d, _)| d == r)).collect();
                for r in late {
                    let detail =
                        format!("no answer within the deadline ({})", crate::config::duration::Dur(rule.deadline));
                    out.push((r, Err(LegFailure { region: table.region(r).name.clone(), reason: "deadline", detail })));
                }
                break;
            }
        }
    }
    out
}

/// The answer's JSON: `{<items>: [...], "next_cursor", "regions", "failed"}`.
fn write_answer(
    rule: &FanoutRule,
    page: &merge::Page<'_>,
    answered: &[(&str, usize)],
    failed: &[LegFailure],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    json_into(&mut out, rule.merge.items.as_deref().unwrap_or("items"));
    out.push(b':');
    merge::write_array(&page.items, &mut out);
    let next = page.next.as_ref().map(|c| c.encode(&rule.merge));
    let regions: Vec<Answered<'_>> = answered.iter().map(|&(region, items)| Answered { items, region }).collect();
    let failed: Vec<serde_json::Value> = failed.iter().map(LegFailure::to_json).collect();
    out.extend_from_slice(b",\"next_cursor\":");
    json_into(&mut out, &next);
    out.extend_from_slice(b",\"regions\":");
    json_into(&mut out, &regions);
    out.extend_from_slice(b",\"failed\":");
    json_into(&mut out, &failed);
    out.push(b'}');
    out
}

/// One region's count in an answer's `regions`; the fields go out in
/// this order (`{"items":3,"region":"eu"}`).
#[derive(serde::Serialize)]
struct Answered<'a> {
    items: usize,
    region: &'a str,
}

/// Appends `value` as JSON.
fn json_into(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Into a Vec, of strings, numbers and maps with string keys: it cannot fail.
    let written = serde_json::to_writer(out, value);
    debug_assert!(written.is_ok(), "{written:?}");
}

/// The response: JSON, and the failed regions named in a header.
fn answer(body: Vec<u8>, failed: &[LegFailure]) -> Response<AnswerBody> {
    let mut resp = Response::new(Either::Right(Full::new(Bytes::from(body))));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|f| f.region.as_str()).collect();
        if let Ok(v) = HeaderValue::from_str(&names.join(", ")) {
            h.insert(PARTIAL, v);
        }
    }
    resp
}
