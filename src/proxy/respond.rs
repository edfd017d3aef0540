//! Respond: the end of every request. An error becomes its problem+json
//! answer ([`super::error`]); while draining every HTTP/1.x answer gets
//! `Connection: close` (its request id is its server's to write, beside
//! the map); the debug headers, the request metrics and
//! the access-log line are written here, once. Also what the proxy
//! listener answers itself: the peers' readiness check and the batch mint
//! endpoint.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderValue, Method, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};

use super::error::ProxyError;
use super::locate::Decision;
use super::{mint, Proxy, ProxyBody};
use crate::ids::Format;
use crate::metrics::RequestRecord;
use crate::problem::response as problem_response;
use crate::routing::{Loaded, Table};
use crate::telemetry::traces;

/// What is kept of a request for its answer and its log line.
#[derive(Debug)]
pub(super) struct Arrival {
    /// When it arrived.
    pub(super) started: Instant,
    /// Its request id (the client's, if acceptable, else a fresh UUIDv7).
    pub(super) request_id: HeaderValue,
    /// Whether the id is a fresh one: then it goes upstream among the
    /// fields the upstream head writer adds (and into the map only of a
    /// fan-out's or a search's request, whose legs copy it).
    pub(super) fresh_request_id: bool,
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) version: Version,
}

impl Arrival {
    /// The request id the upstream leg adds to the request, when the
    /// client sent none (or one not acceptable).
    pub(super) fn id_to_add(&self) -> Option<&HeaderValue> {
        self.fresh_request_id.then_some(&self.request_id)
    }
}

/// The answer to a request the proxy listener answers itself, if it is one:
/// `GET /.shardgate/ready` (peers' health checks: 503 while draining) and
/// `POST <mint_batch.path>`.
pub(super) fn own_answer(proxy: &Proxy, head: &Parts, loaded: &Loaded) -> Option<Response<ProxyBody>> {
    let path = head.uri.path();
    if path == crate::mesh::READY_PATH {
        let (status, body) = if proxy.shared.drain.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, &b"draining\n"[..])
        } else {
            (StatusCode::OK, &b"ready\n"[..])
        };
        return Some(plain(status, "text/plain", Bytes::from_static(body)));
    }
    let table = &loaded.table;
    if head.method != Method::POST || table.settings().mint_batch.path.as_deref() != Some(path) {
        return None;
    }
    Some(match mint::batch(head.uri.query(), table, &proxy.minters) {
        Ok(body) => plain(StatusCode::OK, "application/json", Bytes::from(body)),
        Err(err) => problem_response(&err, path, "-", &proxy.me.name).map(Either::Right),
    })
}

fn plain(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<ProxyBody> {
    let mut resp = Response::new(Either::Right(Full::new(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The answer to a routed request, recorded: its response (or problem),
/// `Connection: close` while draining, the debug headers, the metrics and
/// the access-log line. (The request id is its server's to write.)
pub(super) fn finish(
    proxy: &Proxy,
    loaded: &Loaded,
    arrival: &Arrival,
    decision: &Decision<'_>,
    result: Result<Response<ProxyBody>, ProxyError>,
) -> Response<ProxyBody> {
    let table = &loaded.table;
    // One clock read for both durations.
    let now = Instant::now();
    let upstream = decision.upstream_started.map(|t| now.saturating_duration_since(t));
    let duration = now.saturating_duration_since(arrival.started);
    let (mut resp, error) = match result {
        Ok(resp) => (resp, None),
        Err(err) => {
            if let Some((format, reason)) = err.rejected_id() {
                proxy.shared.metrics.id_decode_failed(format.name(), reason);
            }
            tracing::debug!(error = %err, reason = err.reason(), "proxy error");
            let id = arrival.request_id.to_str().unwrap_or("-");
            let resp = problem_response(&err, arrival.uri.path(), id, &proxy.me.name).map(Either::Right);
            (resp, Some(err))
        }
    };
    let h = resp.headers_mut();
    if proxy.shared.drain.is_draining() && arrival.version <= Version::HTTP_11 {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let settings = table.settings();
    if settings.server.debug_headers {
        let rule = decision.rule_text(table);
        for (name, value) in [
            ("x-shardgate-route", decision.route),
            ("x-shardgate-region", decision.region),
            ("x-shardgate-rule", rule.as_deref()),
            ("x-shardgate-legs", decision.legs.as_deref()),
        ] {
            if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                h.insert(name, v);
            }
        }
    }
    let outcome = match (&error, decision.outcome) {
        (Some(err), _) => err.spec().outcome,
        (None, Some(outcome)) => outcome,
        (None, None) if decision.peer => "forwarded_to_peer",
        (None, None) if decision.minted => "minted",
        (None, None) => "proxied",
    };
    let record = Record { status: resp.status().as_u16(), outcome, error: error.as_ref(), duration, upstream };
    record.write(proxy, loaded, arrival, decision);
    if let Some(span) = &decision.trace {
        record.trace(span, table, arrival, decision);
    }
    resp
}

/// The metrics and the access-log line of one answered request.
struct Record<'a> {
    status: u16,
    outcome: &'static str,
    error: Option<&'a ProxyError>,
    duration: Duration,
    upstream: Option<Duration>,
}

impl Record<'_> {
    /// The server span's attributes: what the access log says, without the
    /// raw id unless `log.ids` is on (then `decision.id` holds it).
    fn trace(
        &self,
        span: &crate::telemetry::traces::TraceSpan,
        table: &Table,
        arrival: &Arrival,
        decision: &Decision<'_>,
    ) {
        let route = decision.route.and_then(|name| table.route_by_name(name));
        if let Some(route) = route {
            traces::rename(span, format!("{} {}", arrival.method, route.template));
            traces::set(span, "http.route", route.template.clone());
            traces::set(span, "shardgate.route", route.name.clone());
        }
        let texts = [
            ("shardgate.region", decision.region.map(str::to_string)),
            ("shardgate.rule", decision.rule_text(table)),
            ("shardgate.id.format", decision.format.map(|f| f.name().to_string())),
            ("shardgate.id", decision.id.clone()),
            ("shardgate.legs", decision.legs.clone()),
            ("shardgate.reason", self.error.map(|e| e.reason().to_string())),
        ];
        for (key, value) in texts {
            if let Some(v) = value {
                traces::set(span, key, v);
            }
        }
        traces::set(span, "shardgate.outcome", self.outcome);
        traces::set(span, "shardgate.attempts", i64::from(decision.attempts));
        traces::set(span, "shardgate.peer_forwarded", decision.peer);
        traces::answered(span, self.status);
    }

    fn write(&self, proxy: &Proxy, loaded: &Loaded, arrival: &Arrival, decision: &Decision<'_>) {
        let duration = self.duration;
        let metrics = &proxy.shared.metrics;
        let labels = metrics.labels(loaded);
        metrics.observe_request(
            &labels,
            &RequestRecord {
                method: &arrival.method,
                route: decision.route,
                region: decision.region,
                status: self.status,
                outcome: self.outcome,
                id: decision.format.map(|f| (f.name(), decision.minted)),
                duration,
                // A fan-out has no one region to hold its legs' time against.
                upstream: self.upstream.filter(|_| self.error.is_none() && decision.region.is_some()),
            },
        );
        if !loaded.table.settings().log.access {
            return;
        }
        tracing::info!(
            target: "shardgate::access",
            request_id = arrival.request_id.to_str().unwrap_or("-"),
            method = arrival.method.as_str(),
            route = decision.route,
            status = self.status,
            duration_s = duration.as_secs_f64(),
            upstream_duration_s = self.upstream.map(|d| d.as_secs_f64()),
            region = decision.region,
            rule = decision.rule_text(&loaded.table).as_deref(),
            attempts = decision.attempts,
            peer_forwarded = decision.peer,
            outcome = self.outcome,
            reason = self.error.map(ProxyError::reason),
            id_format = decision.format.map(Format::name),
            id = decision.id.as_deref(),
            legs = decision.legs.as_deref(),
            "request"
        );
    }
}
