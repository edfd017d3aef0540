//! Failures stay where they start, on real sockets: a client's broken or
//! slow body is never held against a backend, long uploads finish, one
//! endpoint's connections are capped, a retry never returns to the endpoint
//! that failed, an ejected endpoint comes back only after a check (or a
//! trial request) succeeds, and the admin listener cannot use up the
//! process's file descriptors.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use shardgate::app::{server_options, Instance};
use shardgate::routing::Table;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::{
    self, all_up, backend, backend_with, full, get, health_of, is_health_check, iuid, proxy, raw, read_until_closed,
    table, world, BoxError, Got, Running, TestResult,
};

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn client_faults_never_eject_a_healthy_backend() -> TestResult {
    // Two failures held against kz's only endpoint would eject it for 30 s.
    let (p, [_eu, kz, _us]) =
        world("upstream: { eject_after: 2, eject_for: 30s, retries: 0, health: { interval: 0s } }", false).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // Eight bodies with a malformed chunk size: the client's 400 (or the
    // connection closed under it), never a 5xx.
    for _ in 0..8 {
        let req =
            format!("POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n");
        let r = raw(p.addr, req.as_bytes(), WAIT).await?;
        if let Some(status) = r.status() {
            assert_eq!(status, 400, "{}", r.text());
            assert_eq!(r.problem().ok_or("problem+json")?["reason"], "bad_request_body");
        }
    }
    // Eight uploads cut short: 10 of 1000 bytes, then the client goes away
    // once the request has reached the backend.
    for _ in 0..8 {
        let before = kz.hits();
        let mut s = TcpStream::connect(p.addr).await?;
        s.write_all(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789").as_bytes())
            .await?;
        let deadline = Instant::now() + WAIT;
        while kz.hits() == before && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(all_up(&p, "kz")?, "{:?}", health_of(&p, "kz")?);
    // kz's clients are still served by kz.
    for _ in 0..3 {
        let got = get(&p.url(&path)).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    }
    Ok(())
}

#[tokio::test]
async fn an_upload_longer_than_the_timeouts_finishes() -> TestResult {
    // The default timeouts: 10 s per attempt, 15 s for the whole request.
    // A 6.4 MB upload at 400 KB/s takes 16 s.
    let (p, [_eu, kz, _us]) = world("", false).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    let body: Vec<u8> = (0..6_400_000u32).map(|i| (i % 251) as u8).collect();
    let mut s = TcpStream::connect(p.addr).await?;
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).await?;
    let started = Instant::now();
    for (i, chunk) in body.chunks(40_000).enumerate() {
        tokio::time::sleep_until((started + Duration::from_millis(100 * i as u64)).into()).await;
        s.write_all(chunk).await?;
    }
    let sent = started.elapsed();
    let r = read_until_closed(&mut s, Duration::from_secs(20)).await?;
    let text = r.text();
    assert!(sent > Duration::from_secs(15), "the upload took only {sent:?}");
    assert!(text.starts_with("HTTP/1.1 200"), "after {sent:?}: {}", &text[..text.len().min(400)]);
    let json: serde_json::Value = serde_json::from_str(text.split_once("\r\n\r\n").ok_or("no body")?.1)?;
    assert_eq!(json["body_bytes"], body.len());
    assert_eq!(json["region"], "kz");
    let direct = support::send(Request::post(kz.url(&path)).body(Full::new(Bytes::from(body)))?).await?.json()?;
    assert_eq!(json["body_sha256"], direct["body_sha256"]);
    Ok(())
}

#[tokio::test]
async fn a_small_body_sent_slowly_is_timed_from_its_last_byte_and_never_blamed_on_the_backend() -> TestResult {
    // A body this small is read whole before it goes; its upload (1.5 s)
    // outlasts the request's whole timeout (1 s), and one failure held
    // against kz's only endpoint would eject it.
    let extra = "upstream: { attempt_timeout: 1s, request_timeout: 1s, eject_after: 1, eject_for: 30s, retries: 0, \
                 health: { interval: 0s } }";
    let (p, [_eu, _kz, _us]) = world(extra, false).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    for _ in 0..2 {
        let mut s = TcpStream::connect(p.addr).await?;
        let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nConnection: close\r\n\r\n");
        s.write_all(format!("{head}0123456789").as_bytes()).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        s.write_all(b"abcdefghij").await?;
        let r = read_until_closed(&mut s, WAIT).await?;
        let text = r.text();
        assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(400)]);
        let json: serde_json::Value = serde_json::from_str(text.split_once("\r\n\r\n").ok_or("no body")?.1)?;
        assert_eq!((json["region"].as_str(), json["body_bytes"].as_u64()), (Some("kz"), Some(20)));
    }
    assert!(all_up(&p, "kz")?, "{:?}", health_of(&p, "kz")?);
    Ok(())
}

/// A backend that answers `ok` after `delay`.
async fn slow_ok(delay: Duration) -> Result<(Running, Arc<support::Conns>), BoxError> {
    backend_with(move |req| async move {
        if !is_health_check(&req) {
            tokio::time::sleep(delay).await;
        }
        Response::new(full("ok"))
    })
    .await
}

/// A proxy whose kz region is `kz` alone (eu and us are real backends).
async fn with_kz(kz: &[SocketAddr], extra: &str) -> Result<(Running, Running, Running), BoxError> {
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let list: Vec<String> = kz.iter().map(|a| format!("\"http://{a}\"")).collect();
    let yaml = table(eu.addr, kz[0], us.addr, extra).replace(
        &format!("kz: {{ upstreams: [\"http://{}\"] }}", kz[0]),
        &format!("kz: {{ upstreams: [{}] }}", list.join(", ")),
    );
    Ok((proxy(&yaml).await?, eu, us))
}

/// `n` concurrent GETs of `url` over one HTTP/2 connection; their statuses.
async fn h2_burst(url: &str, n: usize) -> Result<Vec<Got>, BoxError> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (client, url) = (client.clone(), url.to_string());
        tasks.spawn(async move {
            let resp = client.request(Request::get(url).body(Full::new(Bytes::new()))?).await?;
            let (parts, body) = resp.into_parts();
            let body = http_body_util::BodyExt::collect(body).await?.to_bytes();
            Ok::<_, BoxError>(Got { status: parts.status, headers: parts.headers, body })
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = tasks.join_next().await {
        out.push(r??);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_open_at_most_the_cap_of_connections() -> TestResult {
    let (kz, conns) = slow_ok(Duration::from_millis(10)).await?;
    // No active checks: their connection is not a request's.
    let (p, _eu, _us) = with_kz(
        &[kz.addr],
        "upstream: { max_connections: 8, max_pending: 5000, queue_timeout: 60s, health: { interval: 0s } }",
    )
    .await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    // 2,000 requests at once, over HTTP/2: all served, through at most 8 connections.
    let got = tokio::time::timeout(Duration::from_secs(60), h2_burst(&url, 2000)).await??;
    assert!(got.iter().all(|g| g.status == 200), "{:?}", got.iter().find(|g| g.status != 200));
    assert_eq!(kz.hits(), 2000);
    let most = conns.most.load(Ordering::SeqCst);
    assert!(most <= 8, "{most} connections at once to one endpoint");

    // With room for 20 waiting requests, a burst of 400 is partly refused:
    // 503 upstream_saturated with Retry-After, and not a health failure.
    let (kz, conns) = slow_ok(Duration::from_millis(50)).await?;
    let extra = "upstream: { max_connections: 4, max_pending: 20, eject_after: 1, health: { interval: 0s } }";
    let (p, _eu, _us) = with_kz(&[kz.addr], extra).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    let got = tokio::time::timeout(Duration::from_secs(60), h2_burst(&url, 400)).await??;
    let refused: Vec<&Got> = got.iter().filter(|g| g.status == StatusCode::SERVICE_UNAVAILABLE).collect();
    assert!(!refused.is_empty() && refused.len() < 400, "{} refused", refused.len());
    for g in &refused {
        assert_eq!(g.json()?["reason"], "upstream_saturated");
        assert_eq!(g.header("retry-after"), Some("1"));
    }
    assert!(got.iter().all(|g| g.status == 200 || g.status == 503));
    assert!(conns.most.load(Ordering::SeqCst) <= 4);
    assert!(all_up(&p, "kz")?, "saturation ejected kz: {:?}", health_of(&p, "kz")?);
    let one = get(&url).await?;
    assert_eq!((one.status.as_u16(), &one.body[..]), (200, &b"ok"[..]));
    Ok(())
}

#[tokio::test]
async fn a_dead_endpoint_moves_reads_to_the_failover_region_at_once() -> TestResult {
    // Active checks every minute: they play no part here.
    let (p, [_eu, kz, _us]) = world("upstream: { health: { interval: 60s } }", true).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    assert_eq!(get(&p.url(&path)).await?.header("x-backend-region"), Some("kz"));
    kz.stop();
    drop(kz);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Its only endpoint refuses: the retry goes to eu, never back to kz.
    for _ in 0..5 {
        let got = get(&p.url(&path)).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("eu")));
    }
    Ok(())
}

/// A backend that answers 500 (health checks included) while `broken`,
/// else 200 with `name`.
async fn switchable(name: &'static str, broken: Arc<AtomicBool>) -> Result<Running, BoxError> {
    let (running, _) = backend_with(move |_req| {
        let broken = broken.load(Ordering::SeqCst);
        async move {
            let mut resp = Response::new(full(name));
            if broken {
                *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            }
            resp
        }
    })
    .await?;
    Ok(running)
}

/// GETs `url` every 25 ms for `for_`; the bodies of the answers that were not 200.
async fn steady_load(url: &str, for_: Duration) -> Result<(usize, Vec<String>), BoxError> {
    let started = Instant::now();
    let (mut n, mut failed) = (0, Vec::new());
    while started.elapsed() < for_ {
        let got = get(url).await?;
        n += 1;
        if got.status != 200 {
            failed.push(format!("{} {}", got.status, String::from_utf8_lossy(&got.body)));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok((n, failed))
}

#[tokio::test]
async fn an_ejected_endpoint_comes_back_only_after_a_successful_check() -> TestResult {
    let broken = Arc::new(AtomicBool::new(false));
    let a = switchable("a", Arc::clone(&broken)).await?;
    let (b, _) = backend_with(|_req| async { Response::new(full("b")) }).await?;
    // Passive ejection at the first 5xx for 200 ms; the active checks (every
    // 100 ms) never take an endpoint down (fall 1000), so only ejection and
    // re-admission are at work.
    let extra =
        "upstream: { eject_after: 1, eject_for: 200ms, retries: 0, health: { interval: 100ms, fall: 1000, rise: 1 } }";
    let (p, _eu, _us) = with_kz(&[a.addr, b.addr], extra).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    broken.store(true, Ordering::SeqCst);
    // 1.5 s of load, more than seven ejection periods: the request that
    // met the failure is the only one it costs.
    let (n, failed) = steady_load(&url, Duration::from_millis(1500)).await?;
    assert_eq!(failed.len(), 1, "{failed:?} of {n}");
    assert_eq!(a.hits(), 1, "the broken endpoint got traffic again on a timer");
    assert!(health_of(&p, "kz")?.iter().any(|(_, _, ejected)| *ejected));
    // Mended: the next successful check re-admits it, and it takes its share.
    broken.store(false, Ordering::SeqCst);
    let (n, failed) = steady_load(&url, Duration::from_millis(800)).await?;
    assert!(failed.is_empty(), "{failed:?} of {n}");
    assert!(a.hits() > 3, "a was not re-admitted: {} hits", a.hits());
    Ok(())
}

#[tokio::test]
async fn a_retry_cut_short_by_the_requests_timeout_is_not_held_against_its_endpoint() -> TestResult {
    // a never answers in time; b answers in 600 ms, within an attempt's
    // timeout (1 s) but not within what a's attempt left of the request's
    // (1.3 s). One failure held against an endpoint ejects it.
    let (a, _) = slow_ok(Duration::from_secs(5)).await?;
    let (b, _) = slow_ok(Duration::from_millis(600)).await?;
    let extra = "upstream: { attempt_timeout: 1s, request_timeout: 1300ms, retries: 1, eject_after: 1, \
                 eject_for: 30s, health: { interval: 0s } }";
    let (p, _eu, _us) = with_kz(&[a.addr, b.addr], extra).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    // Round robin: one of two requests starts at a, and its retry at b is cut short.
    let mut statuses = Vec::new();
    for _ in 0..2 {
        statuses.push(get(&url).await?.status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 504]);
    let health = health_of(&p, "kz")?;
    let ejected = |addr: SocketAddr| health.iter().find(|(e, ..)| e.contains(&addr.to_string())).map(|h| h.2);
    assert_eq!((ejected(a.addr), ejected(b.addr)), (Some(true), Some(false)), "{health:?}");
    // b serves on.
    assert_eq!(get(&url).await?.status, 200);
    Ok(())
}

#[tokio::test]
async fn a_first_attempt_cut_by_the_requests_timeout_is_still_held_against_its_endpoint() -> TestResult {
    // The attempt's and the request's timeouts are equal: the request's, which
    // counts from before the connection, runs out first, on the endpoint's time.
    let (a, _) = slow_ok(Duration::from_secs(5)).await?;
    let extra = "upstream: { attempt_timeout: 1s, request_timeout: 1s, retries: 0, eject_after: 1, eject_for: 30s, \
                 health: { interval: 0s } }";
    let (p, _eu, _us) = with_kz(&[a.addr], extra).await?;
    assert_eq!(get(&p.url(&format!("/v1/orders/{}", iuid(7)))).await?.status, 504);
    assert!(health_of(&p, "kz")?.iter().all(|(_, _, ejected)| *ejected), "{:?}", health_of(&p, "kz")?);
    Ok(())
}

#[tokio::test]
async fn without_active_checks_one_trial_request_decides() -> TestResult {
    let broken = Arc::new(AtomicBool::new(false));
    let a = switchable("a", Arc::clone(&broken)).await?;
    let (b, _) = backend_with(|_req| async { Response::new(full("b")) }).await?;
    let extra = "upstream: { eject_after: 3, eject_for: 300ms, retries: 0, health: { interval: 0s } }";
    let (p, _eu, _us) = with_kz(&[a.addr, b.addr], extra).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    broken.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let (n, failed) = steady_load(&url, Duration::from_millis(1500)).await?;
    // Three failures eject it; after that, one trial per ejection period,
    // whose failure ejects it again at once (not three more).
    let periods = (started.elapsed().as_millis() / 300) as usize;
    assert!(a.hits() >= 4 && a.hits() <= 3 + periods, "{} hits on the broken endpoint in {periods} periods", a.hits());
    assert_eq!(failed.len(), a.hits(), "{failed:?} of {n}");
    broken.store(false, Ordering::SeqCst);
    let before = a.hits();
    let (n, failed) = steady_load(&url, Duration::from_millis(1000)).await?;
    assert!(failed.is_empty(), "{failed:?} of {n}");
    assert!(a.hits() - before > 5, "a successful trial did not re-admit it: {} more hits", a.hits() - before);
    Ok(())
}

#[tokio::test]
async fn turning_active_checks_off_does_not_freeze_endpoints_down() -> TestResult {
    let broken = Arc::new(AtomicBool::new(true));
    let a = switchable("a", Arc::clone(&broken)).await?;
    // Checks take it down at once and would need 1000 successes to bring it back.
    let extra = "upstream: { health: { interval: 50ms, fall: 1, rise: 1000 } }";
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let yaml = table(eu.addr, a.addr, us.addr, extra);
    let p = proxy(&yaml).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    let deadline = Instant::now() + WAIT;
    while get(&url).await?.status != 503 {
        assert!(Instant::now() < deadline, "the checks did not take a down");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broken.store(false, Ordering::SeqCst);
    // A reload turns the checks off: nothing would ever bring `a` back.
    let off = table(eu.addr, a.addr, us.addr, "upstream: { health: { interval: 0s } }");
    let cfg = shardgate::config::load_str(&off, "off.yaml").map_err(|e| e.to_string())?;
    p.proxy.as_ref().ok_or("proxy")?.shared().table.publish(Table::compile(&cfg), off);
    let deadline = Instant::now() + WAIT;
    loop {
        let got = get(&url).await?;
        if got.status == 200 {
            assert_eq!(&got.body[..], b"a");
            break;
        }
        assert!(Instant::now() < deadline, "still {} after the checks were turned off", got.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_caps_connections_and_closes_silent_ones_oldest_first() -> TestResult {
    let kz = backend("kz").await?;
    let text = table(kz.addr, kz.addr, kz.addr, "server: { admin_max_connections: 4, header_read_timeout: 500ms }");
    let cfg = shardgate::config::load_str(&text, "t.yaml").map_err(|e| e.to_string())?;
    let inst = Arc::new(Instance::new(&cfg, &text, None, None));
    let (pl, al) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let (proxy_addr, admin) = (pl.local_addr()?, al.local_addr()?);
    let i = Arc::clone(&inst);
    let opts = server_options(&cfg);
    let run = tokio::spawn(async move { i.run(pl, Some(al), opts).await });
    // Ten sockets that say nothing: each past the fourth closes the oldest
    // silent one to make room, so the four newest are held.
    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(TcpStream::connect(admin).await?);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    for s in &mut idle[..6] {
        let r = read_until_closed(s, Duration::from_millis(500)).await?;
        assert!(r.closed && r.bytes.is_empty(), "an older silent socket was kept: {}", r.text());
    }
    // The held ones are closed at header_read_timeout, having sent nothing.
    for s in &mut idle[6..] {
        let r = read_until_closed(s, Duration::from_secs(3)).await?;
        assert!(r.closed);
    }
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let ready = get(&format!("http://{admin}/ready")).await?;
    assert_eq!(ready.status, 200);
    assert_eq!(inst.proxy.shared().metrics.connections_refused("admin"), 0);
    let got = get(&format!("http://{proxy_addr}/v1/orders/{}", iuid(7))).await?;
    assert_eq!(got.status, 200);
    run.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_accepts_back_off_without_spinning_or_flooding_the_log() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let (port, admin) = {
        let (a, b) = (std::net::TcpListener::bind("127.0.0.1:0")?, std::net::TcpListener::bind("127.0.0.1:0")?);
        (a.local_addr()?.port(), b.local_addr()?.port())
    };
    let text = table(kz.addr, kz.addr, kz.addr, "server: { header_read_timeout: 60s, idle_timeout: 60s }")
        .replace("listen: 127.0.0.1:18080", &format!("listen: 127.0.0.1:{port}"))
        .replace("admin: 127.0.0.1:19901", &format!("admin: 127.0.0.1:{admin}"));
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, text)?;
    let log = dir.path().join("stderr.log");
    // 64 file descriptors: a few dozen client connections use them up.
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n 64 && exec {} serve -c {}", env!("CARGO_BIN_EXE_shardgate"), file.display()))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let result = async {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !matches!(get(&format!("http://127.0.0.1:{admin}/ready")).await, Ok(r) if r.status == 200) {
            assert!(Instant::now() < deadline, "the binary did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut held = Vec::new();
        for _ in 0..100 {
            held.push(TcpStream::connect(format!("127.0.0.1:{port}")).await?);
        }
        // Out of descriptors for two seconds: it must not spin.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = cpu_seconds(child.id())?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let spent = cpu_seconds(child.id())? - before;
        assert!(spent < 0.5, "{spent:.2} s of CPU in 2 s while accept fails");
        drop(held);
        // Descriptors free again: it accepts, and says so once.
        let deadline = Instant::now() + Duration::from_secs(5);
        let url = format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7));
        while !matches!(get(&url).await, Ok(r) if r.status == 200) {
            assert!(Instant::now() < deadline, "not accepting again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = std::fs::read_to_string(&log)?;
        let count = |what: &str| text.lines().filter(|l| l.contains(what)).count();
        let (warnings, recoveries) = (count("accept failed"), count("accepting again"));
        // One warning an episode, however many accepts fail in it (about
        // eight in the two seconds held, with the back-off), and each episode
        // ends by saying so. Freeing the held connections lets the queued ones
        // in at once, which may start another short episode, still open when
        // the log is read.
        assert!(
            recoveries >= 1 && (recoveries..=recoveries + 1).contains(&warnings) && warnings <= 3,
            "{warnings} accept warnings, {recoveries} recoveries:\n{text}"
        );
        Ok::<_, BoxError>(())
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// User plus system CPU seconds a process has used so far.
fn cpu_seconds(pid: u32) -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').ok_or("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11).ok_or("utime")?.parse::<f64>()? + fields.get(12).ok_or("stime")?.parse::<f64>()?;
    let hz = std::process::Command::new("getconf").arg("CLK_TCK").output()?;
    let hz: f64 = String::from_utf8_lossy(&hz.stdout).trim().parse()?;
    Ok(ticks / hz)
}
