//! Legs: one request to one region, for a fan-out or a search. The region
//! serves it alone (its backends, or its shardgate marked to serve it from
//! its own backends): no failover, since another region's answer would
//! count twice in a merge, or answer for an entity it does not hold.

use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderName, Method, Response};
use http_body_util::BodyExt;

use super::ctx::Journal;
use super::error::{LegFailure, ProxyError};
use super::forward::{forward, Leg, Reach};
use super::room::{Gathered, Room, Short, Taken};
use crate::http1::write::Added;
use crate::routing::Rewrite;
use crate::telemetry::traces::{self, TraceSpan};
use crate::upstream::{RequestBody, ResponseBody};

/// How a fan-out or search asks each region: within `timeout`, its span
/// (named `kind`) a child of `parent` when traces are on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asking<'a> {
    /// `fanout` or `search`.
    pub(super) kind: &'static str,
    /// Each leg's time limit.
    pub(super) timeout: Duration,
    /// The request's span.
    pub(super) parent: Option<&'a TraceSpan>,
    /// The route's rewrite of what the backends are asked for.
    pub(super) rewrite: Option<&'a Rewrite>,
}

/// Sends `parts` (no body) on `leg`, one region alone.
pub(super) async fn ask<'t>(
    reach: Reach<'_>,
    leg: Leg<'t>,
    parts: &Parts,
    asking: Asking<'t>,
) -> Result<Response<ResponseBody>, LegFailure> {
    let leg = Leg { rewrite: asking.rewrite, ..leg };
    let table = leg.table;
    let name = leg.chain.first().map_or("", |&r| table.region(r).name.as_str());
    let timeout = asking.timeout;
    let mut journal = Journal::default();
    if let (Some(parent), Some(traces)) = (asking.parent, reach.traces) {
        journal.trace = Some(Box::new(traces.leg(parent, asking.kind, name)));
    }
    // The head's map holds the added fields already (fan-out and search
    // move them there, since every leg copies the map).
    let none = Added::default();
    let sent = forward(reach, leg, parts, &none, RequestBody::Empty, &mut journal);
    let answer = match tokio::time::timeout(timeout, sent).await {
        Ok(Ok(mut resp)) => {
            // A leg's answer is read (or sent on whole), its fields looked up.
            crate::upstream::fields_into_map(&mut resp);
            if proxy_made_404(&resp) {
                Err(proxy_404(name))
            } else {
                Ok(resp)
            }
        }
        Ok(Err(e)) => Err(failure(name, &e)),
        Err(_) => Err(LegFailure {
            region: name.to_string(),
            reason: "leg_timeout",
            detail: format!("no answer within {}", crate::config::duration::Dur(timeout)),
        }),
    };
    if let Some(span) = journal.trace.as_deref() {
        match &answer {
            Ok(resp) => traces::set(span, "http.response.status_code", i64::from(resp.status().as_u16())),
            Err(f) => traces::failed(span, f.reason),
        }
    }
    answer
}

/// Fields of the client's request no leg carries: legs send no body (so
/// no framing or `Expect`), and a fan-out's legs must answer whole, plain
/// JSON lists (so no compression, ranges or conditions).
const BODY_FIELDS: [HeaderName; 3] = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::EXPECT];
const WHOLE_ANSWER_FIELDS: [HeaderName; 7] = [
    header::ACCEPT_ENCODING,
    header::RANGE,
    header::IF_RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
];

/// The head a leg sends: `parts`' target and fields with `method`, without
/// a body's fields, and, when `whole` (a fan-out leg, or a write's probe),
/// without the fields that make an answer partial, conditional or encoded.
pub(super) fn leg_head(parts: &Parts, method: Method, uri: http::Uri, whole: bool) -> Parts {
    let mut req = http::Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = parts.version;
    let mut headers = parts.headers.clone();
    for name in BODY_FIELDS.iter().chain(if whole { &WHOLE_ANSWER_FIELDS[..] } else { &[] }) {
        headers.remove(name);
    }
    *req.headers_mut() = headers;
    req.into_parts().0
}

/// The failure of a leg that `error` ended.
pub(super) fn failure(region: &str, error: &ProxyError) -> LegFailure {
    LegFailure { region: region.to_string(), reason: error.reason(), detail: error.to_string() }
}

/// Whether `resp` is a 404 a proxy on the way made itself (its
/// `Proxy-Status` names an error, RFC 9209): a peer gateway whose table has
/// no such route, say. It says nothing of whether the region holds the
/// entity, so it is a leg's failure, never a "none here".
/// The answer's fields may still be the bytes it came with (a request's
/// answer sent on as it is) or already in its map (a leg's).
pub(super) fn proxy_made_404(resp: &Response<ResponseBody>) -> bool {
    let names_an_error = |v: &[u8]| v.split(|&b| b == b';').skip(1).any(|p| p.trim_ascii().starts_with(b"error="));
    resp.status() == http::StatusCode::NOT_FOUND
        && (resp.headers().get_all("proxy-status").iter().any(|v| names_an_error(v.as_bytes()))
            || resp.body().fields().get("proxy-status").is_some_and(names_an_error))
}

/// The failure of `region`'s leg whose 404 a proxy made ([`proxy_made_404`]).
pub(super) fn proxy_404(region: &str) -> LegFailure {
    LegFailure {
        region: region.to_string(),
        reason: "status",
        detail: "answered 404 from a proxy on the way (Proxy-Status), not from the region's backends".into(),
    }
}

/// A leg that answered with a status it should not have.
pub(super) fn status_failure(region: &str, status: http::StatusCode) -> LegFailure {
    LegFailure { region: region.to_string(), reason: "status", detail: format!("answered {}", status.as_u16()) }
}

/// The whole body of a leg's answer, at most `max` bytes (a longer one is
/// the leg's failure, found from `Content-Length` before reading when it is
/// sent), each byte held in `room` (none left is the leg's failure,
/// `proxy_full`; an answer larger than the whole room is `too_large`); the
/// room is held until the answer is dropped.
pub(super) async fn read_body(
    region: &str,
    resp: Response<ResponseBody>,
    max: usize,
    room: &Room,
) -> Result<(Bytes, Taken), LegFailure> {
    let fail = |reason, detail| LegFailure { region: region.to_string(), reason, detail };
    // An answer larger than the whole room could never be held.
    let (max, limit) =
        if room.size() < max { (room.size(), "server.fanout_buffer_bytes") } else { (max, "max_leg_bytes") };
    let too_large = || fail("too_large", format!("the answer is larger than {limit} ({max})"));
    if let Some(coding) = resp.headers().get(header::CONTENT_ENCODING).filter(|v| v.as_bytes() != b"identity") {
        let coding = String::from_utf8_lossy(coding.as_bytes());
        return Err(fail("invalid_json", format!("the answer is encoded ({coding}); legs ask for plain JSON")));
    }
    let declared = resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut body = resp.into_body();
    let mut gathered = Gathered::new(declared.and_then(|n| usize::try_from(n).ok()).unwrap_or(0), max);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| fail("upstream_failed", format!("the answer broke off: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        match gathered.push(room, &data) {
            Ok(()) => {}
            Err(Short::Max) => return Err(too_large()),
            Err(Short::Room) => {
                let detail =
                    format!("the fan-outs in flight hold server.fanout_buffer_bytes ({}) already", room.size());
                return Err(fail(LegFailure::PROXY_FULL, detail));
            }
        }
    }
    Ok(gathered.into_parts())
}
