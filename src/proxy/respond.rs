//! Respond: the end of every request. An error becomes its problem+json
//! answer ([`super::error`]), or its gRPC status for a gRPC call; while draining every HTTP/1.x answer gets
//! `Connection: close`; the debug headers, the request and leg metrics, the
//! trace's attributes and the access-log line are written here, once, from
//! the request's [`Journal`], which the stages wrote as they went.

use std::time::{Duration, Instant};

use http::{header, HeaderValue, Response, Version};
use http_body_util::Either;

use super::ctx::{Arrival, Ctx, Journal};
use super::error::ProxyError;
use crate::http1::rules::RuleFields;
use crate::ids::Format;
use crate::metrics::{Metrics, RequestRecord};
use crate::outcome::Outcome;
use crate::problem::{grpc_response, response as problem_response};
use crate::routing::{Loaded, Table};
use crate::server::{AnswerBody, Drain};
use crate::telemetry::traces::{self, TraceSpan};

/// What the end of a request reports to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Report<'p> {
    /// The request and leg metrics.
    pub(super) metrics: &'p Metrics,
    /// The going-away flag (HTTP/1.x answers get `Connection: close`).
    pub(super) drain: &'p Drain,
    /// This instance's name (problem+json `Proxy-Status`).
    pub(super) name: &'p str,
}

/// The answer to a routed request, recorded: its response (or problem),
/// `Connection: close` while draining, the debug headers, the metrics, the
/// trace and the access-log line; and what the header rules make of its
/// fields, written with its head.
pub(super) fn finish(
    report: Report<'_>,
    loaded: &Loaded,
    ctx: &Ctx<'_>,
    result: Result<Response<AnswerBody>, ProxyError>,
) -> (Response<AnswerBody>, RuleFields) {
    let (table, arrival, journal) = (&loaded.table, &ctx.arrival, &ctx.journal);
    // One clock read for both durations.
    let now = Instant::now();
    let upstream = journal.upstream_started.map(|t| now.saturating_duration_since(t));
    let duration = now.saturating_duration_since(arrival.started);
    let (mut resp, error) = match result {
        Ok(resp) => (resp, None),
        Err(err) => {
            if let Some((format, reason)) = err.rejected_id() {
                report.metrics.id_decode_failed(format.name(), reason);
            }
            tracing::debug!(error = %err, reason = err.reason(), "proxy error");
            let id = arrival.request_id.to_str().unwrap_or("-");
            let resp = if arrival.grpc {
                grpc_response(&err, report.name)
            } else {
                problem_response(&err, arrival.uri.path(), id, report.name)
            };
            let resp = resp.map(Either::Right);
            (resp, Some(err))
        }
    };
    let h = resp.headers_mut();
    if report.drain.is_draining() && arrival.version <= Version::HTTP_11 {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let legs = journal.legs.as_ref().map(|l| l.summary(table));
    if table.settings().server.debug_headers {
        let rule = journal.rule_text(table);
        for (name, value) in [
            ("x-shardgate-route", journal.route.map(|r| r.name.as_str())),
            ("x-shardgate-region", journal.region_name(table)),
            ("x-shardgate-rule", rule.as_deref()),
            ("x-shardgate-legs", legs.as_deref()),
        ] {
            if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                h.insert(name, v);
            }
        }
    }
    // A gRPC status the proxy answers is the protocol's, not the application's to edit.
    let grpc_status = error.is_some() && arrival.grpc;
    let route_rules = journal.route.and_then(|r| r.headers.response_rules.as_ref());
    let rules = match route_rules.filter(|_| !ctx.relayed && !grpc_status) {
        Some(rules) => ctx.rule_fields(rules, journal.region),
        None => RuleFields::new(),
    };
    let outcome = journal.outcome(error.as_ref());
    let record = Record {
        status: resp.status().as_u16(),
        outcome,
        error: error.as_ref(),
        duration,
        upstream,
        legs: legs.as_deref(),
    };
    record.write(report.metrics, loaded, arrival, journal);
    if let Some(span) = &journal.trace {
        record.trace(span, table, arrival, journal);
    }
    (resp, rules)
}

/// The metrics and the access-log line of one answered request.
struct Record<'a> {
    status: u16,
    outcome: Outcome,
    error: Option<&'a ProxyError>,
    duration: Duration,
    upstream: Option<Duration>,
    /// The legs' summary, when there were legs.
    legs: Option<&'a str>,
}

impl Record<'_> {
    /// The server span's attributes: what the access log says, without the
    /// raw id unless `log.ids` is on (then `journal.id` holds it).
    fn trace(&self, span: &TraceSpan, table: &Table, arrival: &Arrival, journal: &Journal<'_>) {
        if let Some(route) = journal.route {
            let method = traces::span_name(traces::span_method(&arrival.method));
            traces::rename(span, format!("{method} {}", route.template));
            traces::set(span, "http.route", route.template.clone());
            traces::set(span, "shardgate.route", route.name.clone());
        }
        let texts = [
            ("shardgate.region", journal.region_name(table).map(str::to_string)),
            ("shardgate.rule", journal.rule_text(table)),
            ("shardgate.id.format", journal.format.map(|f| f.name().to_string())),
            ("shardgate.id", journal.id.clone()),
            ("shardgate.legs", self.legs.map(str::to_string)),
            ("shardgate.reason", self.error.map(|e| e.reason().to_string())),
        ];
        for (key, value) in texts {
            if let Some(v) = value {
                traces::set(span, key, v);
            }
        }
        traces::set(span, "shardgate.outcome", self.outcome.as_str());
        traces::set(span, "shardgate.attempts", i64::from(journal.attempts));
        traces::set(span, "shardgate.peer_forwarded", journal.peer);
        traces::answered(span, self.status);
    }

    fn write(&self, metrics: &Metrics, loaded: &Loaded, arrival: &Arrival, journal: &Journal<'_>) {
        if let (Some(rule), Some(region)) = (journal.rule, journal.region) {
            loaded.table.units().count(rule, region);
        }
        let duration = self.duration;
        let labels = metrics.labels(loaded);
        metrics.observe_request(
            &labels,
            &RequestRecord {
                method: &arrival.method,
                route: journal.route.map(|r| r.name.as_str()),
                region: journal.region_name(&loaded.table),
                status: self.status,
                outcome: self.outcome,
                id: journal.format.map(|f| (f.name(), journal.minted)),
                duration,
                // A fan-out has no one region to hold its legs' time against.
                upstream: self.upstream.filter(|_| self.error.is_none() && journal.region.is_some()),
            },
        );
        if let (Some(legs), Some(route)) = (&journal.legs, journal.route) {
            for (region, answer) in &legs.answers {
                metrics.leg(legs.kind, &route.name, &loaded.table.region(*region).name, answer);
            }
        }
        let log = &loaded.table.settings().log;
        if !log.access {
            return;
        }
        tracing::info!(
            target: "shardgate::access",
            request_id = arrival.request_id.to_str().unwrap_or("-"),
            method = arrival.method.as_str(),
            route = journal.route.map(|r| r.name.as_str()),
            status = self.status,
            duration_s = duration.as_secs_f64(),
            upstream_duration_s = self.upstream.map(|d| d.as_secs_f64()),
            region = journal.region_name(&loaded.table),
            rule = journal.rule_text(&loaded.table).as_deref(),
            attempts = journal.attempts,
            peer_forwarded = journal.peer,
            outcome = self.outcome.as_str(),
            reason = self.error.map(ProxyError::reason),
            id_format = journal.format.map(Format::name),
            id = journal.id.as_deref(),
            legs = self.legs,
            "request"
        );
    }
}
