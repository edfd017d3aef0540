//! The metrics' series and labels, rendered.

use super::*;

fn record<'a>(route: Option<&'a str>, region: Option<&'a str>, id: Option<(&'static str, bool)>) -> RequestRecord<'a> {
    RequestRecord {
        method: &Method::GET,
        route,
        region,
        status: 200,
        outcome: Outcome::Proxied,
        id,
        duration: Duration::from_millis(3),
        upstream: Some(Duration::from_millis(2)),
    }
}

fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[test]
fn cached_series_record_into_the_rendered_families() {
    let m = Metrics::new();
    let labels = TableLabels::build(1, &["orders"], &["eu", "kz"]);
    for _ in 0..3 {
        m.observe_request(&labels, &record(Some("orders"), Some("kz"), Some(("iuid", false))));
    }
    m.observe_request(&labels, &record(Some("orders"), Some("eu"), Some(("iuid", true))));
    // A name the table does not know is recorded, never cached.
    m.observe_request(&labels, &record(Some("gone"), Some("kz"), None));
    m.observe_request(&labels, &record(Some("gone"), Some("kz"), None));
    assert_eq!(labels.series.read().map(|c| c.len()).unwrap_or(0), 2);

    let text = m.render();
    let count = |prefix: &str| line(&text, prefix).and_then(|l| l.rsplit(' ').next()).map(str::to_owned);
    assert_eq!(count("shardgate_ids_decoded_total{format=\"iuid\"}").as_deref(), Some("3"), "{text}");
    assert_eq!(count("shardgate_ids_minted_total{format=\"iuid\",region=\"eu\"}").as_deref(), Some("1"));
    let requests = "shardgate_http_server_request_duration_seconds_count{http_request_method=\"GET\",\
                    http_route=\"orders\",http_response_status_code=\"200\",region=\"kz\",outcome=\"proxied\"}";
    assert_eq!(count(requests).as_deref(), Some("3"), "{text}");
    let unknown = "shardgate_http_server_request_duration_seconds_count{http_request_method=\"GET\",\
                   http_route=\"gone\",http_response_status_code=\"200\",region=\"kz\",outcome=\"proxied\"}";
    assert_eq!(count(unknown).as_deref(), Some("2"), "{text}");
    let upstream =
        "shardgate_http_client_request_duration_seconds_count{region=\"kz\",http_response_status_code=\"200\"}";
    assert_eq!(count(upstream).as_deref(), Some("5"), "{text}");
}
