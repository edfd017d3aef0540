//! Traces: OpenTelemetry spans of the request path, exported over OTLP/HTTP.
//!
//! ```text
//!  client ──traceparent──► server span ─┬─► client span (attempt 1) ──traceparent──► upstream or peer
//!                          GET users    ├─► client span (attempt 2, retry_reason)
//!                                       └─► leg span (fan-out, search) ─► client span …
//! ```
//!
//! Spans are `tracing` spans turned into OpenTelemetry spans by
//! `tracing-opentelemetry`, under a dispatcher of this instance's own (not
//! the process's global one): each proxy in a process has its tracer, its
//! service name and its export queue, and the access log never sees them.
//! With traces off there is no [`Traces`] at all, and the request path
//! skips every span with one `Option` check.
//!
//! A client's W3C `traceparent` (and `tracestate`) makes the server span
//! its child; every attempt sends the attempt's own span as the upstream's
//! parent, so a trace through two regional gateways shows both hops.
//! Sampling: parent-based for a trusted sender (a mesh peer or a
//! `server.trusted_hops` proxy: its sampled flag is followed), otherwise
//! the ratio. Anyone else's trace is continued but sampled at the ratio, a
//! fresh draw per request: a client that marks every request sampled (or
//! picks trace ids the ratio keeps) cannot make this proxy record and
//! export its every request, crowding out everyone else's spans. No span
//! carries the raw id unless `log.ids` is on.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tracing::{dispatcher, Dispatch, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use super::export::{ExportCounts, Queue, QueueSettings};
use crate::config::schema::Telemetry;

/// Where and how spans go, resolved from the table and the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSettings {
    /// The collector's traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Share of new traces recorded.
    pub sample_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// `service.instance.id`: this instance's name.
    pub instance: String,
    /// The export queue.
    pub queue: QueueSettings,
}

impl TraceSettings {
    /// The settings of `t`, each key left out taken from the standard
    /// variable `env` gives: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is) or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (plus `/v1/traces`), `OTEL_TRACES_SAMPLER`
    /// and `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SERVICE_NAME`. `Ok(None)`: traces
    /// are off (no endpoint anywhere, `OTEL_SDK_DISABLED=true` or
    /// `OTEL_TRACES_EXPORTER=none`). An unusable variable is an error naming it.
    pub fn resolve(
        t: &Telemetry,
        instance: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceSettings>, String> {
        let env = |key: &str| env(key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let endpoint = match (&t.otlp_endpoint, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(base), _) => traces_url(base),
            (None, Some(full)) => checked("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", full)?,
            (None, None) => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => checked("OTEL_EXPORTER_OTLP_ENDPOINT", traces_url(&base))?,
                None => return Ok(None),
            },
        };
        let sample_ratio = match t.sample_ratio {
            Some(r) => r,
            None => env_ratio(&env)?,
        };
        let service_name =
            t.service_name.clone().or_else(|| env("OTEL_SERVICE_NAME")).unwrap_or_else(|| "shardgate".into());
        let queue = QueueSettings::from_env(env);
        Ok(Some(TraceSettings { endpoint, sample_ratio, service_name, instance: instance.to_string(), queue }))
    }
}

/// `base` with `/v1/traces` appended (once).
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// `url` from variable `var`, if it is a plain `http://` URL.
fn checked(var: &str, url: String) -> Result<String, String> {
    match url.parse::<http::Uri>() {
        Ok(u) if u.scheme_str() == Some("http") && u.authority().is_some() => Ok(url),
        _ => Err(format!(
            "{var}={} is not an http:// URL (the exporter speaks plain OTLP/HTTP; send to a local collector)",
            crate::config::show(&url)
        )),
    }
}

/// The ratio `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name (1.0 without them).
fn env_ratio(env: &impl Fn(&str) -> Option<String>) -> Result<f64, String> {
    let sampler = env("OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".into());
    match sampler.as_str() {
        "always_on" | "parentbased_always_on" => Ok(1.0),
        "always_off" | "parentbased_always_off" => Ok(0.0),
        "traceidratio" | "parentbased_traceidratio" => match env("OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some(arg) => arg
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("OTEL_TRACES_SAMPLER_ARG={} is not a ratio from 0 to 1", crate::config::show(&arg))),
        },
        other => Err(format!(
            "OTEL_TRACES_SAMPLER={} is not one shardgate knows (always_on, always_off, traceidratio and their parentbased_ forms)",
            crate::config::show(other)
        )),
    }
}

/// The target of every span made here.
const TARGET: &str = "shardgate::trace";

/// This instance's tracer: the spans of its requests and their export.
pub struct Traces {
    dispatch: Dispatch,
    provider: SdkTracerProvider,
    counts: Arc<ExportCounts>,
    settings: TraceSettings,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// A span of this instance's tracer. Dropped within the instance's
/// dispatcher: the registry closes a span's parent through the dispatcher
/// in force where the child is dropped, so a child dropped outside it would
/// keep its parent open (and unexported) for ever.
#[derive(Clone)]
pub struct TraceSpan {
    span: Span,
    dispatch: Dispatch,
}

impl std::fmt::Debug for TraceSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TraceSpan").field(&self.span.id()).finish()
    }
}

impl Drop for TraceSpan {
    fn drop(&mut self) {
        let span = std::mem::replace(&mut self.span, Span::none());
        dispatcher::with_default(&self.dispatch, move || drop(span));
    }
}

/// Span totals, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanTotals {
    /// Accepted by the collector.
    pub exported: u64,
    /// Dropped with the queue full.
    pub dropped: u64,
    /// Refused by the collector, or not delivered.
    pub failed: u64,
}

impl Traces {
    /// The exporter, its queue and worker thread, and the tracer.
    pub fn start(settings: TraceSettings) -> Result<Traces, String> {
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone());
        if std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT").is_none()
            && std::env::var_os("OTEL_EXPORTER_OTLP_TIMEOUT").is_none()
        {
            builder = builder.with_timeout(std::time::Duration::from_secs(5));
        }
        let mut exporter = builder.build().map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", settings.instance.clone()))
            .build();
        // The exporter writes the resource into every export; the queue
        // owns the exporter from here on, so it gets the resource first.
        exporter.set_resource(&resource);
        let counts = Arc::new(ExportCounts::default());
        let queue = Queue::start(exporter, settings.queue, Arc::clone(&counts))
            .map_err(|e| format!("cannot start the span export thread: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio))))
            .with_resource(resource)
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("shardgate"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false);
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
        Ok(Traces { dispatch, provider, counts, settings })
    }

    /// What the traces were started with.
    pub fn settings(&self) -> &TraceSettings {
        &self.settings
    }

    /// What became of the spans so far.
    pub fn totals(&self) -> SpanTotals {
        use std::sync::atomic::Ordering::Relaxed;
        SpanTotals {
            exported: self.counts.exported.load(Relaxed),
            dropped: self.counts.dropped.load(Relaxed),
            failed: self.counts.failed.load(Relaxed),
        }
    }

    /// The server span of a request with `method` and `headers` (its
    /// parent: the client's `traceparent`, when it sent one, its sampled
    /// flag followed only when the client is `trusted`). A method
    /// outside HTTP's own is `_OTHER` (its name `HTTP`), as the semantic
    /// conventions say: clients do not choose span names.
    pub fn server(&self, method: &Method, headers: &HeaderMap, trusted: bool) -> TraceSpan {
        let known = span_method(method);
        let span = dispatcher::with_default(&self.dispatch, || {
            tracing::info_span!(target: TARGET, "request", otel.name = span_name(known), otel.kind = "server",
                http.request.method = known, http.request.method_original = tracing::field::Empty,
                service.instance.id = self.settings.instance.as_str())
        });
        if known == "_OTHER" {
            span.record("http.request.method_original", method.as_str());
        }
        let parent = TraceContextPropagator::new().extract(&Fields(headers));
        let parent = if trusted { parent } else { self.sampled_here(&parent) };
        let _ = span.set_parent(parent);
        self.own(span)
    }

    /// `parent` with its sampled flag drawn here at the ratio.
    fn sampled_here(&self, parent: &opentelemetry::Context) -> opentelemetry::Context {
        use opentelemetry::trace::{SpanContext, TraceContextExt as _};
        let sent = parent.span().span_context().clone();
        if !sent.is_valid() {
            return opentelemetry::Context::new();
        }
        let sampled = rand::random::<f64>() < self.settings.sample_ratio;
        let flags = sent.trace_flags().with_sampled(sampled);
        let context = SpanContext::new(sent.trace_id(), sent.span_id(), flags, true, sent.trace_state().clone());
        opentelemetry::Context::new().with_remote_span_context(context)
    }

    fn own(&self, span: Span) -> TraceSpan {
        TraceSpan { span, dispatch: self.dispatch.clone() }
    }

    /// The client span of attempt number `attempt` at `endpoint` of
    /// `region`, under `parent`; `retry_reason`: why the attempt before
    /// failed.
    pub fn attempt(&self, parent: &TraceSpan, a: &Attempt<'_>) -> TraceSpan {
        let span = dispatcher::with_default(&self.dispatch, || {
            let known = span_method(a.method);
            tracing::info_span!(target: TARGET, parent: &parent.span, "attempt", otel.name = span_name(known),
                otel.kind = "client", http.request.method = known,
                server.address = %a.endpoint, shardgate.region = a.region, shardgate.attempt = a.number,
                shardgate.peer = a.peer, shardgate.retry_reason = a.retry_reason)
        });
        self.own(span)
    }

    /// The span of a fan-out's or search's leg to `region`, under `parent`.
    pub fn leg(&self, parent: &TraceSpan, kind: &'static str, region: &str) -> TraceSpan {
        let span = dispatcher::with_default(&self.dispatch, || {
            tracing::info_span!(target: TARGET, parent: &parent.span, "leg", otel.name = format!("{kind} leg {region}"),
                shardgate.leg.kind = kind, shardgate.region = region)
        });
        self.own(span)
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// One upstream attempt, as its span names it.
#[derive(Debug)]
pub struct Attempt<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The endpoint's URI.
    pub endpoint: &'a http::Uri,
    /// Its region.
    pub region: &'a str,
    /// 1 for the first attempt.
    pub number: u32,
    /// Whether the endpoint is another region's shardgate.
    pub peer: bool,
    /// Why the attempt before failed (`None`: the first attempt).
    pub retry_reason: Option<&'a str>,
}

/// Sets attribute `key` of `span` (nothing when it is not a trace span).
pub fn set(span: &TraceSpan, key: &'static str, value: impl Into<opentelemetry::Value>) {
    span.span.set_attribute(key, value);
}

/// Marks `span` failed, with `description`.
pub fn set_error(span: &TraceSpan, description: impl Into<std::borrow::Cow<'static, str>>) {
    span.span.set_status(opentelemetry::trace::Status::error(description));
}

/// Records the status an attempt (or a request) was answered with; 5xx is an error.
pub fn answered(span: &TraceSpan, status: u16) {
    set(span, "http.response.status_code", i64::from(status));
    if status >= 500 {
        set_error(span, format!("answered {status}"));
    }
}

/// Records that an attempt failed, with the error table's token.
pub fn failed(span: &TraceSpan, reason: &'static str) {
    set(span, "error.type", reason);
    set_error(span, reason);
}

/// Renames `span` (the server span gets its route once it is known).
pub fn rename(span: &TraceSpan, name: String) {
    use opentelemetry::trace::TraceContextExt as _;
    // Once a child exists the span has started, and `tracing-opentelemetry`
    // applies no new `otel.name`; the OpenTelemetry span takes it directly.
    span.span.context().span().update_name(name);
}

/// `headers` with `traceparent` (and `tracestate`) naming `span` as the
/// parent, replacing the client's.
pub fn inject(span: &TraceSpan, headers: &mut HeaderMap) {
    let cx = span.span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut FieldsMut(headers));
}

/// Header fields as a propagator reads them.
struct Fields<'a>(&'a HeaderMap);

impl Extractor for Fields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Header fields as a propagator writes them.
struct FieldsMut<'a>(&'a mut HeaderMap);

impl Injector for FieldsMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else { return };
        // An empty `tracestate` (a trace with no vendor state) is no field at
        // all: sent empty, it is malformed; left as the client's, it is stale.
        if value.is_empty() {
            self.0.remove(name);
        } else if let Ok(value) = HeaderValue::from_str(&value) {
            self.0.insert(name, value);
        }
    }
}

/// `method` as a span says it: one of HTTP's, else `_OTHER`.
pub fn span_method(method: &Method) -> &'static str {
    crate::metrics::method_label(method)
}

/// A span's name for a request of `known` method (`HTTP` for `_OTHER`).
pub fn span_name(known: &'static str) -> &'static str {
    if known == "_OTHER" {
        "HTTP"
    } else {
        known
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resolve(t: &Telemetry, env: &[(&str, &str)]) -> Result<Option<TraceSettings>, String> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TraceSettings::resolve(t, "gw-eu", |k| env.get(k).cloned())
    }

    #[test]
    fn off_without_an_endpoint_anywhere() -> Result<(), String> {
        assert_eq!(resolve(&Telemetry::default(), &[("OTEL_SERVICE_NAME", "x")])?, None);
        Ok(())
    }

    #[test]
    fn the_table_wins_and_each_missing_key_comes_from_the_environment() -> Result<(), String> {
        let t = Telemetry { otlp_endpoint: Some("http://c:4318/".into()), sample_ratio: None, service_name: None };
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_SERVICE_NAME", "edge"),
        ];
        let s = resolve(&t, &env)?.ok_or("off")?;
        assert_eq!(
            (s.endpoint.as_str(), s.sample_ratio, s.service_name.as_str()),
            ("http://c:4318/v1/traces", 0.25, "edge")
        );
        let s = resolve(&Telemetry::default(), &env)?.ok_or("off")?;
        assert_eq!(s.endpoint, "http://other:4318/v1/traces");
        let s = resolve(&Telemetry::default(), &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom")])?;
        let s = s.ok_or("off")?;
        assert_eq!(
            (s.endpoint.as_str(), s.sample_ratio, s.service_name.as_str()),
            ("http://t:1/custom", 1.0, "shardgate")
        );
        Ok(())
    }

    #[test]
    fn disabled_or_unusable_variables() -> Result<(), String> {
        let t = Telemetry { otlp_endpoint: Some("http://c:4318".into()), ..Telemetry::default() };
        assert_eq!(resolve(&t, &[("OTEL_SDK_DISABLED", "true")])?, None);
        assert_eq!(resolve(&t, &[("OTEL_TRACES_EXPORTER", "none")])?, None);
        let e = resolve(&Telemetry::default(), &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")]);
        assert!(e.as_ref().is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_ENDPOINT")), "{e:?}");
        let e = resolve(&t, &[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")]);
        assert!(e.as_ref().is_err_and(|e| e.contains("OTEL_TRACES_SAMPLER_ARG=\"2\"")), "{e:?}");
        let e = resolve(&t, &[("OTEL_TRACES_SAMPLER", "jaeger_remote")]);
        assert!(e.is_err());
        Ok(())
    }
}
