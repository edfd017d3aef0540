//! `/metrics` parsed as Prometheus text: the request, upstream, id, retry,
//! reload, config, build, connection and health series with their labels,
//! no path or id as a label value; and the hook that sets an upstream's
//! health.

use shardgate::routing::shared::sha256_hex;

use crate::support::get;
use crate::support::ops::{iuid, ops, parse_metrics, value};
use crate::support::TestResult;

#[tokio::test]
async fn ops_metrics_parse_with_expected_series_and_labels() -> TestResult {
    let o = ops("").await?;
    let ok = get(&o.url(&format!("/v1/orders/{}", iuid(7, 3)))).await?;
    assert_eq!(ok.status, 200);
    let bad = get(&o.url("/v1/orders/not-an-id")).await?;
    assert_eq!(bad.status, 400);
    let bad_reason = bad.json()?["reason"].as_str().ok_or("reason")?.to_owned();
    let none = get(&o.url("/nothing/here")).await?;
    assert_eq!(none.status, 404);

    let got = get(&o.admin_url("/metrics")).await?;
    assert_eq!(got.status, 200);
    assert!(got.header("content-type").is_some_and(|c| c.starts_with("application/openmetrics-text")));
    let m = parse_metrics(&got.body)?;
    let req = "shardgate_http_server_request_duration_seconds_count";
    let series = |route: &str, status: &str, region: &str, outcome: &str| {
        value(
            &m,
            req,
            &[
                ("http_request_method", "GET"),
                ("http_route", route),
                ("http_response_status_code", status),
                ("region", region),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(series("orders", "200", "kz", "proxied")?, 1.0);
    assert_eq!(series("orders", "400", "", "bad_id")?, 1.0);
    assert_eq!(series("", "404", "", "no_route")?, 1.0);
    // The histogram has buckets up to +Inf and a sum.
    let buckets = m.get("shardgate_http_server_request_duration_seconds_bucket").ok_or("no buckets")?;
    assert!(buckets.iter().any(|(l, v)| l.get("le").map(String::as_str) == Some("+Inf") && *v >= 1.0));
    assert!(m.contains_key("shardgate_http_server_request_duration_seconds_sum"));
    // No raw path or id ever becomes a label value.
    for samples in m.values() {
        for (labels, _) in samples {
            assert!(labels.values().all(|v| !v.contains('/') || v.starts_with("http://")), "{labels:?}");
        }
    }
    // The unit that placed the routed request, counted under its name as the table writes it.
    assert_eq!(value(&m, "shardgate_placement_requests_total", &[("unit", "country KZ")])?, 1.0);
    assert_eq!(value(&m, "shardgate_placement_requests_total", &[("unit", "country DE")])?, 0.0);
    let upstream = "shardgate_http_client_request_duration_seconds_count";
    assert_eq!(value(&m, upstream, &[("region", "kz"), ("http_response_status_code", "200")])?, 1.0);
    assert_eq!(value(&m, "shardgate_ids_decoded_total", &[("format", "iuid")])?, 1.0);
    assert_eq!(value(&m, "shardgate_id_decode_failures_total", &[("format", "iuid"), ("reason", &bad_reason)])?, 1.0);
    assert_eq!(value(&m, "shardgate_retries_total", &[])?, 0.0);
    assert_eq!(value(&m, "shardgate_retry_budget_exhausted_total", &[])?, 0.0);
    assert_eq!(value(&m, "shardgate_config_reloads_total", &[("result", "success")])?, 0.0);
    assert_eq!(value(&m, "shardgate_config_reloads_total", &[("result", "failure")])?, 0.0);
    assert!(value(&m, "shardgate_config_last_reload_success_timestamp_seconds", &[])? > 1.7e9);
    let sha = sha256_hex(&o.table(""));
    assert_eq!(value(&m, "shardgate_config_info", &[("version", "1"), ("sha256", &sha)])?, 1.0);
    assert_eq!(value(&m, "shardgate_build_info", &[("version", env!("CARGO_PKG_VERSION"))])?, 1.0);
    assert!(value(&m, "shardgate_open_connections", &[("listener", "admin")])? >= 1.0);
    assert!(value(&m, "shardgate_open_connections", &[("listener", "proxy")])? >= 0.0);
    let kz_endpoint = format!("http://{}", o.kz.addr);
    let health = value(&m, "shardgate_upstream_health", &[("region", "kz"), ("endpoint", &kz_endpoint)]);
    let health = health.or_else(|_| value(&m, "shardgate_upstream_health", &[("region", "kz")]))?;
    assert!(health == 0.0 || health == 1.0);
    Ok(())
}

#[tokio::test]
async fn ops_metrics_hook_sets_upstream_health() -> TestResult {
    let metrics = shardgate::metrics::Metrics::new();
    metrics.set_upstream_health("eu", "http://10.0.0.1:8080", false);
    metrics.set_upstream_health("eu", "http://10.0.0.2:8080", true);
    let m = parse_metrics(metrics.render().as_bytes())?;
    let h = "shardgate_upstream_health";
    assert_eq!(value(&m, h, &[("region", "eu"), ("endpoint", "http://10.0.0.1:8080")])?, 0.0);
    assert_eq!(value(&m, h, &[("region", "eu"), ("endpoint", "http://10.0.0.2:8080")])?, 1.0);
    Ok(())
}
