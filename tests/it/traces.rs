//! Traces: spans exported over OTLP/HTTP to a collector on loopback (the
//! protobuf decoded with the OpenTelemetry proto types), across a
//! two-gateway mesh; and what a dead collector costs requests (nothing).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use shardgate::ids::Iuid;
use tokio::net::TcpListener;

use crate::support::{backend, backend_with, full, proxy_on, send, BoxError, Running, TestResult};

/// A span as the collector got it, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    span: Span,
}

type Received = Arc<Mutex<Vec<Got>>>;

/// An OTLP/HTTP collector on loopback keeping every span it is sent.
async fn collector() -> Result<(Running, Received), BoxError> {
    let received: Received = Arc::default();
    let keep = Arc::clone(&received);
    let (running, _) = backend_with(move |req| {
        let keep = Arc::clone(&keep);
        async move {
            let path_ok = req.uri().path() == "/v1/traces";
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let Ok(export) = ExportTraceServiceRequest::decode(body) else {
                return Response::builder().status(400).body(full("not an OTLP trace export")).unwrap_or_default();
            };
            let mut spans = Vec::new();
            for rs in export.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                    .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    spans.extend(ss.spans.into_iter().map(|span| Got { service: service.clone(), span }));
                }
            }
            if let Ok(mut all) = keep.lock() {
                all.extend(spans);
            }
            let status = if path_ok { 200 } else { 404 };
            Response::builder()
                .status(status)
                .header("content-type", "application/x-protobuf")
                .body(full(Bytes::new()))
                .unwrap_or_default()
        }
    })
    .await?;
    Ok((running, received))
}

fn text(v: &AnyValue) -> Option<String> {
    Some(match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}

/// Attribute `key` of `span`, as text.
fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans of trace `trace_id` (hex), once at least `n` have arrived (10 s at most).
async fn spans_of(received: &Received, trace_id: &str, n: usize) -> Result<Vec<Got>, BoxError> {
    for _ in 0..200 {
        let got: Vec<Got> = received
            .lock()
            .map_err(|_| "collector lock poisoned")?
            .iter()
            .filter(|g| hex(&g.span.trace_id) == trace_id)
            .cloned()
            .collect();
        if got.len() >= n {
            return Ok(got);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all: Vec<String> = received
        .lock()
        .map_err(|_| "collector lock poisoned")?
        .iter()
        .map(|g| format!("{} {} {:?} trace {}", g.service, g.span.name, g.span.kind(), hex(&g.span.trace_id)))
        .collect();
    Err(format!("fewer than {n} spans of trace {trace_id} arrived in 10 s; all spans: {all:#?}").into())
}

/// A table of one region, kz: served from `backend` by the instance in
/// kz, through its shardgate `peer` by a front door (`local`: `None`);
/// traces to `collector`.
fn table(local: Option<&str>, instance: &str, backend: SocketAddr, peer: SocketAddr, collector: &str) -> String {
    let region = local.map(|r| format!("region: {r}\n")).unwrap_or_default();
    let kz = match local {
        Some(_) => format!("upstreams: [\"http://{backend}\"], peer: \"http://{peer}\""),
        None => format!("peer: \"http://{peer}\""),
    };
    format!(
        r#"version: 1
{region}instance: {instance}
mesh: {{ trusted_peers: ["127.0.0.1/32"] }}
telemetry: {{ otlp_endpoint: "{collector}", service_name: {instance} }}
regions:
  kz: {{ {kz} }}
countries:
  KZ: {{ id: 7, region: kz }}
entities: {{ IntercityOrder: 3 }}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}", methods: [GET] }}
    id: {{ path_param: id, formats: [iuid] }}
"#
    )
}

fn one<'a>(spans: &'a [Got], service: &str, kind: SpanKind) -> Result<&'a Span, BoxError> {
    let found: Vec<&Got> = spans.iter().filter(|g| g.service == service && g.span.kind == kind as i32).collect();
    match found.as_slice() {
        [g] => Ok(&g.span),
        _ => Err(format!("expected one {kind:?} span of {service}, got {}: {spans:#?}", found.len()).into()),
    }
}

#[tokio::test]
async fn a_request_through_two_gateways_is_one_trace_with_both_hops() -> TestResult {
    let (otlp, received) = collector().await?;
    let kz = backend("kz").await?;
    let front_l = TcpListener::bind("127.0.0.1:0").await?;
    let gw_l = TcpListener::bind("127.0.0.1:0").await?;
    let gw_addr = gw_l.local_addr()?;
    let url = otlp.url("");
    let gw = proxy_on(gw_l, &table(Some("kz"), "gw-kz", kz.addr, gw_addr, &url)).await?;
    let front = proxy_on(front_l, &table(None, "front", kz.addr, gw_addr, &url)).await?;

    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 77).to_string();
    let (trace_id, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let req = Request::get(front.url(&format!("/v1/orders/{id}")))
        .header("traceparent", format!("00-{trace_id}-{client_span}-01"))
        .header("tracestate", "vendor=opaque")
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let echoed = got.json()?;
    let upstream_parent = echoed["headers"]["traceparent"].as_str().ok_or("the backend got no traceparent")?;
    assert_eq!(echoed["headers"]["tracestate"], "vendor=opaque", "tracestate is carried along");

    assert_eq!(gw.handled(), 1, "the front door reached kz through gw-kz");
    let spans = spans_of(&received, trace_id, 4).await?;
    let front_server = one(&spans, "front", SpanKind::Server)?;
    let front_attempt = one(&spans, "front", SpanKind::Client)?;
    let gw_server = one(&spans, "gw-kz", SpanKind::Server)?;
    let gw_attempt = one(&spans, "gw-kz", SpanKind::Client)?;
    assert_eq!(spans.len(), 4, "{spans:#?}");
    // One chain: client → front → its attempt → gw-kz → its attempt → the backend.
    assert_eq!(hex(&front_server.parent_span_id), client_span);
    assert_eq!(front_attempt.parent_span_id, front_server.span_id);
    assert_eq!(gw_server.parent_span_id, front_attempt.span_id);
    assert_eq!(gw_attempt.parent_span_id, gw_server.span_id);
    assert_eq!(upstream_parent, format!("00-{trace_id}-{}-01", hex(&gw_attempt.span_id)));

    assert_eq!(front_server.name, "GET /v1/orders/{id}");
    for (key, want) in [
        ("http.request.method", "GET"),
        ("http.route", "/v1/orders/{id}"),
        ("http.response.status_code", "200"),
        ("shardgate.route", "orders"),
        ("shardgate.region", "kz"),
        ("shardgate.rule", "country 7 (KZ)"),
        ("shardgate.id.format", "iuid"),
        ("shardgate.outcome", "forwarded_to_peer"),
        ("shardgate.peer_forwarded", "true"),
    ] {
        assert_eq!(attr(front_server, key).as_deref(), Some(want), "front server span: {key}");
    }
    assert_eq!(attr(gw_server, "shardgate.outcome").as_deref(), Some("proxied"));
    assert_eq!(attr(front_attempt, "shardgate.peer").as_deref(), Some("true"));
    assert_eq!(attr(front_attempt, "shardgate.attempt").as_deref(), Some("1"));
    assert_eq!(attr(front_attempt, "server.address"), Some(format!("http://{gw_addr}/")));
    assert_eq!(attr(gw_attempt, "server.address"), Some(format!("http://{}/", kz.addr)));
    assert_eq!(attr(gw_attempt, "http.response.status_code").as_deref(), Some("200"));
    // log.ids is off: no span carries the id.
    for g in &spans {
        let values: Vec<String> =
            g.span.attributes.iter().filter_map(|kv| text(kv.value.as_ref()?.value.as_ref()?)).collect();
        assert!(values.iter().all(|v| !v.contains(&id)), "a span carries the raw id: {values:?}");
        assert!(!g.span.name.contains(&id));
    }

    // Without a client's traceparent the front door starts the trace.
    let got = send(Request::get(front.url(&format!("/v1/orders/{id}"))).body(Full::new(Bytes::new()))?).await?;
    let upstream_parent = got.json()?["headers"]["traceparent"].as_str().ok_or("no traceparent")?.to_string();
    let new_trace = upstream_parent.split('-').nth(1).ok_or("malformed traceparent")?;
    assert_ne!(new_trace, trace_id);
    let spans = spans_of(&received, new_trace, 4).await?;
    assert!(one(&spans, "front", SpanKind::Server)?.parent_span_id.is_empty(), "a root span");
    Ok(())
}

#[tokio::test]
async fn with_traces_off_the_clients_traceparent_reaches_the_upstream_untouched() -> TestResult {
    let kz = backend("kz").await?;
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let yaml = table(Some("kz"), "gw-kz", kz.addr, addr, "")
        .replace("telemetry: { otlp_endpoint: \"\", service_name: gw-kz }\n", "");
    let gw = proxy_on(l, &yaml).await?;
    assert!(gw.proxy.as_ref().ok_or("proxy")?.shared().traces.is_none(), "traces are off by default");
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 77);
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let req = Request::get(gw.url(&format!("/v1/orders/{id}")))
        .header("traceparent", parent)
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!(got.json()?["headers"]["traceparent"], parent);
    Ok(())
}

/// A collector that accepts connections and never answers.
async fn silent_collector() -> Result<(SocketAddr, Arc<AtomicUsize>), BoxError> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    Ok((addr, accepted))
}

async fn all_answered(gw: &Running, n: usize) -> TestResult {
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 77);
    for i in 0..n {
        let got = send(Request::get(gw.url(&format!("/v1/orders/{id}"))).body(Full::new(Bytes::new()))?).await?;
        assert_eq!(got.status, 200, "request {i}: {}", String::from_utf8_lossy(&got.body));
    }
    Ok(())
}

#[tokio::test]
async fn a_dead_collector_fails_no_request_and_holds_none_up() -> TestResult {
    let kz = backend("kz").await?;
    // Refusing: nothing listens on the port.
    let refused = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let gw = proxy_on(l, &table(Some("kz"), "gw-kz", kz.addr, addr, &format!("http://{refused}"))).await?;
    all_answered(&gw, 50).await?;
    let traces = gw.proxy.as_ref().and_then(|p| p.shared().traces.clone()).ok_or("traces are off")?;
    let mut totals = traces.totals();
    for _ in 0..100 {
        if totals.failed >= 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        totals = traces.totals();
    }
    assert_eq!((totals.exported, totals.failed), (0, 100), "50 requests, two spans each, none delivered");

    // Silent: the export hangs on a connection that never answers, while requests go on.
    let (silent, accepted) = silent_collector().await?;
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let gw = proxy_on(l, &table(Some("kz"), "gw-kz", kz.addr, addr, &format!("http://{silent}"))).await?;
    all_answered(&gw, 5).await?;
    for _ in 0..100 {
        if accepted.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(accepted.load(Ordering::SeqCst) > 0, "the exporter never connected");
    // An export is stuck now; every request is still answered.
    all_answered(&gw, 50).await?;
    let traces = gw.proxy.as_ref().and_then(|p| p.shared().traces.clone()).ok_or("traces are off")?;
    let totals = traces.totals();
    // The export gives up after 5 s: had requests waited for it, it would have failed by now.
    assert_eq!((totals.exported, totals.failed), (0, 0), "requests were answered while the export still waited");
    Ok(())
}

#[tokio::test]
async fn an_invalid_traceparent_sends_the_upstream_a_fresh_one_and_no_empty_tracestate() -> TestResult {
    let (collector, _received) = collector().await?;
    let kz = backend("kz").await?;
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let gw = proxy_on(l, &table(Some("kz"), "gw-kz", kz.addr, addr, &collector.url(""))).await?;
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 78);
    let req = Request::get(gw.url(&format!("/v1/orders/{id}")))
        .header("traceparent", "00-not-a-trace-01")
        .header("tracestate", "vendor=stale")
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    let headers = &got.json()?["headers"];
    let sent = headers["traceparent"].as_str().ok_or("no traceparent upstream")?;
    assert!(sent.starts_with("00-") && sent.len() == 55 && sent != "00-not-a-trace-01", "{sent}");
    assert!(headers.get("tracestate").is_none(), "tracestate upstream: {:?}", headers.get("tracestate"));
    Ok(())
}

#[tokio::test]
async fn a_method_of_the_clients_own_making_names_no_span() -> TestResult {
    let (otlp, received) = collector().await?;
    let kz = backend("kz").await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let gw = proxy_on(listener, &table(Some("kz"), "gw-kz", kz.addr, addr, &otlp.url(""))).await?;
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 78).to_string();
    let trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
    let req = Request::builder()
        .method("FROBNICATE")
        .uri(gw.url(&format!("/v1/orders/{id}")))
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b8-01"))
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!(got.status, 405, "{}", String::from_utf8_lossy(&got.body));
    let spans = spans_of(&received, trace_id, 1).await?;
    let server = one(&spans, "gw-kz", SpanKind::Server)?;
    // As the semantic conventions say: the client chooses no span name.
    assert!(server.name == "HTTP" || server.name.starts_with("HTTP "), "span named {:?}", server.name);
    assert_eq!(attr(server, "http.request.method").as_deref(), Some("_OTHER"));
    assert_eq!(attr(server, "http.request.method_original").as_deref(), Some("FROBNICATE"));
    Ok(())
}

/// A gateway recording no new traces (`sample_ratio: 0`), `trusted` listing
/// the hops whose sampled flag it follows (and no mesh peer).
fn unsampled_table(backend: SocketAddr, collector: &str, trusted: &str) -> String {
    table(Some("kz"), "gw-kz", backend, backend, collector)
        .replace("mesh: { trusted_peers: [\"127.0.0.1/32\"] }", &format!("server: {{ trusted_hops: [{trusted}] }}"))
        .replace("service_name: gw-kz }", "service_name: gw-kz, sample_ratio: 0.0 }")
}

#[tokio::test]
async fn a_clients_sampled_flag_is_followed_from_a_trusted_hop_only() -> TestResult {
    let (otlp, _received) = collector().await?;
    let kz = backend("kz").await?;
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 78);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    for (trusted, flag) in [("", "00"), ("\"127.0.0.1/32\"", "01")] {
        let gw = proxy_on(TcpListener::bind("127.0.0.1:0").await?, &unsampled_table(kz.addr, &otlp.url(""), trusted))
            .await?;
        for _ in 0..20 {
            let req = Request::get(gw.url(&format!("/v1/orders/{id}")))
                .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
                .body(Full::new(Bytes::new()))?;
            let got = send(req).await?;
            let sent = got.json()?["headers"]["traceparent"].as_str().ok_or("no traceparent upstream")?.to_owned();
            // The trace is continued either way; only a trusted hop decides that it is recorded.
            assert!(sent.starts_with(&format!("00-{trace_id}-")), "trusted {trusted:?}: {sent}");
            assert!(sent.ends_with(&format!("-{flag}")), "trusted {trusted:?}: {sent}");
        }
    }
    Ok(())
}
