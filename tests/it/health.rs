//! Health checks and failover: a region whose backends die is taken out
//! within the check interval and its reads fail over (writes only where the
//! route allows); with no failover region the answer is 503 + Retry-After;
//! when the backends return, routing returns. No request hangs meanwhile.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use shardgate::ids::Iuid;
use tokio::net::TcpListener;

use crate::support::{backend, backend_on, get, proxy, send, BoxError, Got, TestResult};

const HEALTH: &str =
    "upstream: { health: { interval: 100ms, timeout: 200ms, rise: 1, fall: 1 }, retries: 0, eject_after: 0 }";

fn iuid(country: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, 3, 9).to_string()
}

/// GET that must finish within 5 s (a hang fails the test).
async fn get_bounded(url: &str) -> Result<Got, BoxError> {
    tokio::time::timeout(Duration::from_secs(5), get(url)).await.map_err(|_| "request hung")?
}

/// Polls `url` until the answering region is `want` (or the status is
/// `want_status` when given), asserting that no request hangs.
async fn until(url: &str, want: &str, want_status: u16) -> Result<Got, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = get_bounded(url).await?;
        if got.status.as_u16() == want_status && (want.is_empty() || got.header("x-backend-region") == Some(want)) {
            return Ok(got);
        }
        if Instant::now() > deadline {
            return Err(format!("{url}: still {} from {:?}", got.status, got.header("x-backend-region")).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_region_whose_checks_time_out_slowly_delays_no_other_regions_checks() -> TestResult {
    // kz's backend takes connections and never answers; its checks wait 10 s each.
    let blackhole = TcpListener::bind("127.0.0.1:0").await?;
    let kz_addr = blackhole.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = blackhole.accept().await {
            held.push(s);
        }
    });
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let kz = format!("kz: {{ upstreams: [\"http://{kz_addr}\"] }}");
    let slow = format!("kz: {{ upstreams: [\"http://{kz_addr}\"], upstream: {{ health: {{ timeout: 10s }} }} }}");
    let yaml = crate::support::table(eu.addr, kz_addr, us.addr, HEALTH).replace(&kz, &slow);
    let p = proxy(&yaml).await?;
    let health = p.proxy.as_ref().ok_or("proxy")?.shared().health.clone();
    let eu_down = || health.report().iter().any(|(r, _, up, _)| r == "eu" && !up);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!eu_down(), "{:?}", health.report());
    // eu's backend goes away: its checks fail at once, whatever kz's wait.
    eu.stop();
    drop(eu);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !eu_down() {
        assert!(Instant::now() < deadline, "eu's checks waited on kz's: {:?}", health.report());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_dead_region_fails_over_and_comes_back() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let kz_addr = kz.addr;
    let yaml = crate::support::table(eu.addr, kz.addr, us.addr, HEALTH)
        .replace(&format!("kz: {{ upstreams: [\"http://{}\"] }}", kz.addr), &format!("kz: {{ upstreams: [\"http://{}\"], failover: eu }}", kz.addr))
        .replace("  - name: by-header", "  - name: writes\n    match: { path: \"/v1/w/{id}\", methods: [POST] }\n    id: { path_param: id, formats: [iuid] }\n  - name: by-header");
    let p = proxy(&yaml).await?;
    let read = p.url(&format!("/v1/orders/{}", iuid(7)));
    assert_eq!(get_bounded(&read).await?.header("x-backend-region"), Some("kz"));

    kz.stop();
    drop(kz);
    until(&read, "eu", 200).await?;
    // The health report shows the kz endpoint down once the checks notice
    // (a read fails over at once: its refused attempt moves to eu).
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = p.proxy.as_ref().ok_or("proxy")?.shared().health.clone();
    while !health.report().iter().any(|(r, _, up, _)| r == "kz" && !up) {
        assert!(Instant::now() < deadline, "{:?}", health.report());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Writes do not fail over on a route that does not allow it: 503.
    let w = send(Request::post(p.url(&format!("/v1/w/{}", iuid(7)))).body(Full::new(Bytes::new()))?).await?;
    assert_eq!(w.status, 503);
    assert_eq!(w.json()?["reason"], "region_unavailable");
    assert!(w.header("retry-after").is_some());
    // Nor does an upgrade: its tunnel could carry writes.
    let upgrade =
        format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", iuid(7));
    let r = crate::support::raw(p.addr, upgrade.as_bytes(), Duration::from_secs(10)).await?;
    assert_eq!(r.status(), Some(503), "{}", r.text());

    // Bring kz back on the same address: routing returns to it.
    let kz = backend_on(TcpListener::bind(kz_addr).await?, "kz").await?;
    until(&read, "kz", 200).await?;
    assert!(kz.hits() > 0);
    Ok(())
}

#[tokio::test]
async fn a_dead_region_without_failover_answers_503() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let p = proxy(&crate::support::table(eu.addr, kz.addr, us.addr, HEALTH)).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(1)));
    assert_eq!(get_bounded(&url).await?.header("x-backend-region"), Some("us"));
    us.stop();
    drop(us);
    let got = until(&url, "", 503).await?;
    assert_eq!(got.json()?["reason"], "region_unavailable");
    assert_eq!(got.header("retry-after"), Some("5"));
    assert!(got.header("proxy-status").is_some_and(|v| v.contains("destination_unavailable")));
    // Other regions are unaffected.
    assert_eq!(get_bounded(&p.url(&format!("/v1/orders/{}", iuid(49)))).await?.header("x-backend-region"), Some("eu"));
    Ok(())
}

#[tokio::test]
async fn passive_ejection_takes_a_failing_endpoint_out() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let dead = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    // Active checks off; two endpoints for kz, one refusing connections.
    let extra = "upstream: { health: { interval: 0s }, retries: 0, eject_after: 2, eject_for: 60s }";
    let yaml = crate::support::table(eu.addr, kz.addr, us.addr, extra)
        .replace(&format!("[\"http://{}\"]", kz.addr), &format!("[\"http://{dead}\", \"http://{}\"]", kz.addr));
    let p = proxy(&yaml).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    for _ in 0..10 {
        assert_eq!(get_bounded(&url).await?.status, 200);
    }
    let report = p.proxy.as_ref().ok_or("proxy")?.shared().health.report();
    assert!(report.iter().any(|(_, e, _, ejected)| e.contains(&dead.to_string()) && *ejected), "{report:?}");
    Ok(())
}

#[tokio::test]
async fn only_reads_fail_over_unless_the_route_allows_writes() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let yaml = crate::support::table(eu.addr, kz.addr, us.addr, HEALTH)
        .replace(
            &format!("kz: {{ upstreams: [\"http://{}\"] }}", kz.addr),
            &format!("kz: {{ upstreams: [\"http://{}\"], failover: eu }}", kz.addr),
        )
        .replace(
            "  - name: by-header",
            "  - name: moving\n    match: { path: \"/v1/moving/{id}\" }\n    id: { path_param: id, formats: [iuid] }\n    \
             allow_failover_writes: true\n  - name: by-header",
        );
    let p = proxy(&yaml).await?;
    kz.stop();
    drop(kz);
    let path = format!("/v1/orders/{}", iuid(7));
    until(&p.url(&path), "eu", 200).await?;
    // Reads go to the failover region.
    for method in ["GET", "HEAD", "OPTIONS"] {
        let req = Request::builder().method(method).uri(p.url(&path)).body(Full::new(Bytes::new()))?;
        let got = send(req).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("eu")), "{method}");
    }
    // Every write stays: 503, and eu never sees it.
    let before = eu.hits();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        let req = Request::builder().method(method).uri(p.url(&path)).body(Full::new(Bytes::from("{}")))?;
        let got = send(req).await?;
        assert_eq!(got.status, 503, "{method}: {:?}", got.header("x-backend-region"));
        assert_eq!(got.json()?["reason"], "region_unavailable");
    }
    assert_eq!(eu.hits(), before, "a write reached a region that does not own its entity");
    // A route that allows it sends writes there too.
    let req = Request::put(p.url(&format!("/v1/moving/{}", iuid(7)))).body(Full::new(Bytes::from("{}")))?;
    let got = send(req).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("eu")));
    Ok(())
}
