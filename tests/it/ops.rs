//! Operating shardgate on real sockets: reload under load, graceful drain
//! (in process and the real binary with SIGTERM), `/metrics` parsed as
//! Prometheus text, `/explain` for every id format, and the admin listener's
//! auth and errors.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use shardgate::app::{server_options, Instance};
use shardgate::ids::{Iuid, LocalityUuid, ManualClock, UniqidMinter};
use shardgate::routing::shared::sha256_hex;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::support::binary::{free_ports, spawn_binary, spawn_binary_logging, Child};
use crate::support::{self, backend, get, send, table, BoxError, Running, TestResult};

/// Backends, an instance with proxy and admin listeners on port 0, and the
/// table file it reloads.
struct Ops {
    eu: Running,
    kz: Running,
    us: Running,
    inst: Arc<Instance>,
    proxy: SocketAddr,
    admin: SocketAddr,
    run: JoinHandle<std::io::Result<bool>>,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ops {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }
    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }
    fn table(&self, extra: &str) -> String {
        table(self.eu.addr, self.kz.addr, self.us.addr, extra)
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        self.run.abort();
    }
}

async fn ops_with(extra: &str, token: Option<&str>) -> Result<Ops, BoxError> {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let text = table(eu.addr, kz.addr, us.addr, extra);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, &text)?;
    let cfg = shardgate::config::load_str(&text, "table.yaml").map_err(|e| format!("test table invalid:\n{e}"))?;
    let inst = Arc::new(Instance::new(&cfg, &text, Some(file.clone()), token.map(str::to_owned)));
    let (pl, al) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let (proxy, admin) = (pl.local_addr()?, al.local_addr()?);
    let i = Arc::clone(&inst);
    let opts = server_options(&cfg);
    let run = tokio::spawn(async move { i.run(pl, Some(al), opts).await });
    Ok(Ops { eu, kz, us, inst, proxy, admin, run, file, _dir: dir })
}

async fn ops(extra: &str) -> Result<Ops, BoxError> {
    ops_with(extra, None).await
}

fn iuid(country: u8, entity: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, entity, 12345).to_string()
}

async fn post(url: &str) -> Result<support::Got, BoxError> {
    send(Request::post(url).body(Full::new(Bytes::new()))?).await
}

/// Writes `text` next to `file` and renames it over `file`, as editors do.
fn replace_file(file: &Path, text: &str) -> std::io::Result<()> {
    let tmp = file.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)
}

// ---------------------------------------------------------------------------
// 1. Reload under load.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ops_reload_under_load_keeps_every_request_on_the_table_in_force() -> TestResult {
    let o = ops("").await?;
    // Table A (version 1 and every odd version): KZ → kz. Table B (even versions): KZ → eu.
    let table_a = o.table("");
    let kz_line = "KZ: { id: 7, region: kz }";
    if !table_a.contains(kz_line) {
        return Err("the support table changed its KZ line".into());
    }
    let table_b = table_a.replace(kz_line, "KZ: { id: 7, region: eu }");
    let unknown_region = table_a.replace(kz_line, "KZ: { id: 7, region: mars }");
    let broken_yaml = table_a.replace(kz_line, "KZ: { id: 7, region: kz");
    let owner = |version: u64| if version % 2 == 1 { "kz" } else { "eu" };

    let shared = Arc::clone(&o.inst.shared);
    let done = Arc::new(AtomicBool::new(false));
    let url = o.url(&format!("/v1/orders/{}", iuid(7, 3)));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (shared, done, url) = (Arc::clone(&shared), Arc::clone(&done), url.clone());
        workers.push(tokio::spawn(async move {
            let client = support::client();
            let (mut stable, mut total) = (0usize, 0usize);
            // Bounded: until the reloads are over, at most 20 000 requests per task.
            while !done.load(Ordering::SeqCst) && total < 20_000 {
                let before = shared.snapshot().version;
                let resp = client.request(Request::get(&url).body(Full::new(Bytes::new()))?).await?;
                let after = shared.snapshot().version;
                let status = resp.status();
                let region = resp.headers().get("x-backend-region").and_then(|v| v.to_str().ok()).map(str::to_owned);
                resp.into_body().collect().await?;
                total += 1;
                if status != StatusCode::OK {
                    return Err::<_, BoxError>(
                        format!("request failed with {status} (versions {before}..{after})").into(),
                    );
                }
                let region = region.ok_or("no x-backend-region")?;
                if !(before..=after).any(|v| owner(v) == region) {
                    return Err(format!("answered by {region} while versions {before}..{after} were in force").into());
                }
                if before == after {
                    stable += 1;
                }
            }
            Ok((stable, total))
        }));
    }

    let reloader = o.inst.reloader.clone().ok_or("no reloader")?;
    let mut last_valid = table_a.clone();
    for i in 0..100u32 {
        let (text, valid) = match i % 4 {
            0 => (&table_b, true),
            1 => (&unknown_region, false),
            2 => (&table_a, true),
            _ => (&broken_yaml, false),
        };
        replace_file(&o.file, text)?;
        let r = Arc::clone(&reloader);
        let outcome = tokio::task::spawn_blocking(move || r.reload_now()).await?;
        assert_eq!(outcome.is_ok(), valid, "reload {i}: {outcome:?}");
        if valid {
            last_valid = text.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done.store(true, Ordering::SeqCst);
    let (mut stable, mut total) = (0, 0);
    for w in workers {
        let (s, t) = w.await??;
        stable += s;
        total += t;
    }
    // Most requests saw no swap, so the exact-owner check really ran.
    assert!(total >= 200 && stable * 2 >= total, "{stable} stable of {total}");

    assert_eq!((reloader.successes(), reloader.failures()), (50, 50));
    let metrics = parse_metrics(&get(&o.admin_url("/metrics")).await?.body)?;
    assert_eq!(value(&metrics, "shardgate_config_reloads_total", &[("result", "success")])?, 50.0);
    assert_eq!(value(&metrics, "shardgate_config_reloads_total", &[("result", "failure")])?, 50.0);
    let cfg = get(&o.admin_url("/config")).await?.json()?;
    assert_eq!(cfg["version"], 51);
    assert_eq!(cfg["sha256"], sha256_hex(&last_valid));
    assert_eq!(cfg["source"], last_valid);
    assert_eq!(sha256_hex(&last_valid), sha256_hex(&table_a), "the last valid table is A");
    let info = &metrics["shardgate_config_info"];
    assert_eq!(info.len(), 1, "one config_info series: {info:?}");
    assert!(info.iter().any(|(l, v)| *v == 1.0 && l.get("sha256") == Some(&sha256_hex(&table_a))));
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Drain.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ops_drain_finishes_in_flight_requests_and_refuses_new_connections() -> TestResult {
    let o = ops("server: { drain_delay: 600ms, shutdown_timeout: 5s }").await?;
    assert_eq!(get(&o.admin_url("/ready")).await?.status, 200);
    // A slow request (the backend answers after 2 s) in flight.
    let slow_url = o.url(&format!("/t/slow/{}", iuid(7, 3)));
    let slow = tokio::spawn(async move { get(&slow_url).await });
    let waited = Instant::now();
    while o.kz.hits() == 0 {
        if waited.elapsed() > Duration::from_secs(5) {
            return Err("the slow request never reached its backend".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // What SIGTERM does.
    let drain_started = Instant::now();
    assert!(o.inst.start_drain());
    assert!(!o.inst.start_drain(), "a second start is a no-op");
    let ready = get(&o.admin_url("/ready")).await?;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()?["status"], "draining");
    // Within the drain delay new connections are still served, told to close.
    let during = get(&o.url(&format!("/v1/orders/{}", iuid(49, 3)))).await?;
    assert_eq!(during.status, 200);
    assert_eq!(during.header("connection"), Some("close"));
    assert!(drain_started.elapsed() < Duration::from_millis(600), "test too slow to observe the delay");

    // After the delay the listener is closed.
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(drain_started.elapsed()) + Duration::from_millis(300))
        .await;
    let refused = tokio::net::TcpStream::connect(o.proxy).await;
    assert!(refused.is_err(), "a new connection was accepted after the drain delay");
    assert_eq!(get(&o.admin_url("/ready")).await?.status, 503, "admin stays up while requests finish");

    // The slow request completes, then the server returns, well within the timeout.
    let got = slow.await??;
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..], b"slow");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !o.run.is_finished() {
        if Instant::now() > deadline {
            return Err("the server did not stop within the shutdown timeout".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(drain_started.elapsed() < Duration::from_secs(5));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ops_post_drain_starts_the_same_drain() -> TestResult {
    let o = ops("server: { drain_delay: 100ms, shutdown_timeout: 2s }").await?;
    let got = post(&o.admin_url("/drain")).await?;
    assert_eq!(got.status, 202);
    assert_eq!(got.json()?["draining"], true);
    assert!(o.inst.drain().is_draining());
    assert_eq!(get(&o.admin_url("/readyz")).await?.status, 503);
    let deadline = Instant::now() + Duration::from_secs(3);
    while !o.run.is_finished() {
        if Instant::now() > deadline {
            return Err("the server did not stop after POST /drain".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(tokio::net::TcpStream::connect(o.proxy).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ops_binary_drains_on_sigterm_and_exits_0() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let (mut child, port, admin) =
        spawn_binary(dir.path(), kz.addr, "server: { drain_delay: 300ms, shutdown_timeout: 5s }").await?;
    let slow_url = format!("http://127.0.0.1:{port}/t/slow/{}", iuid(7, 3));
    let slow = tokio::spawn(async move { get(&slow_url).await });
    let waited = Instant::now();
    while kz.hits() == 0 {
        if waited.elapsed() > Duration::from_secs(5) {
            return Err("the slow request never reached its backend".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = Instant::now();
    child.signal("-TERM")?;
    // Ready turns 503 at once (the admin listener stays up during the drain).
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let r = get(&format!("http://127.0.0.1:{admin}/ready")).await?;
        if r.status == 503 {
            break;
        }
        if Instant::now() > deadline {
            return Err("/ready did not turn 503 after SIGTERM".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let got = slow.await??;
    assert_eq!(got.status, 200, "the in-flight request completed");
    assert_eq!(&got.body[..], b"slow");
    assert_eq!(child.wait_exit(Duration::from_secs(10)).await?, 0);
    assert!(sent.elapsed() < Duration::from_secs(10));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_binary_exits_130_on_sigint() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let (mut child, _, _) = spawn_binary(dir.path(), kz.addr, "server: { drain_delay: 30s }").await?;
    child.signal("-INT")?;
    // Fast: no 30 s drain delay.
    assert_eq!(child.wait_exit(Duration::from_secs(5)).await?, 130);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_binary_names_rules_and_logs_without_colour_to_a_file() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("stderr.log");
    let (mut child, port, _) = spawn_binary_logging(
        dir.path(),
        kz.addr,
        "server: { debug_headers: true, drain_delay: 0s, shutdown_timeout: 1s }",
        Some(&log),
    )
    .await?;
    for (entity, rule) in [(3, "country 7 (KZ)"), (4, "override KZ/WalletAccount")] {
        let got = get(&format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7, entity))).await?;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("x-shardgate-rule"), Some(rule));
    }
    child.signal("-TERM")?;
    assert_eq!(child.wait_exit(Duration::from_secs(10)).await?, 0);
    let text = std::fs::read_to_string(&log)?;
    for rule in ["country 7 (KZ)", "override KZ/WalletAccount"] {
        assert!(text.lines().any(|l| l.contains("shardgate::access") && l.contains(rule)), "{rule}:\n{text}");
    }
    assert!(!text.contains('\u{1b}'), "colour codes in a log file:\n{text:?}");
    Ok(())
}

/// `shardgate demo` on a free port, answering once its proxy is up.
async fn spawn_demo() -> Result<Child, BoxError> {
    spawn_demo_to(std::process::Stdio::null()).await
}

/// The demo, its standard output to `stdout`, once it answers.
async fn spawn_demo_to(stdout: std::process::Stdio) -> Result<Child, BoxError> {
    let (port, _) = free_ports()?;
    let child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_shardgate"))
            .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdout(stdout)
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !matches!(get(&format!("http://127.0.0.1:{port}/.shardgate/ready")).await, Ok(r) if r.status == 200) {
        if Instant::now() > deadline {
            return Err("the demo did not come up".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_demo_exits_130_on_sigint_and_0_on_sigterm() -> TestResult {
    for (signal, code) in [("-INT", 130), ("-TERM", 0)] {
        let mut demo = spawn_demo().await?;
        demo.signal(signal)?;
        assert_eq!(demo.wait_exit(Duration::from_secs(10)).await?, code, "demo after {signal}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_demo_survives_sighup_and_a_reader_that_leaves() -> TestResult {
    // `shardgate demo | head -n 0`: the reader is gone before the demo
    // writes a line; it serves all the same.
    let (reader, writer) = std::io::pipe()?;
    drop(reader);
    let mut demo = spawn_demo_to(writer.into()).await?;
    // SIGHUP (a closed terminal, a `kill -HUP`): nothing to reload, nothing to die of.
    demo.signal("-HUP")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(demo.0.try_wait()?.is_none(), "the demo exited: {:?}", demo.0.try_wait());
    demo.signal("-TERM")?;
    assert_eq!(demo.wait_exit(Duration::from_secs(10)).await?, 0);
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. /metrics.

/// Samples by metric name: (labels, value).
type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// A small parser for the Prometheus / OpenMetrics text format: comments
/// skipped, `name{k="v",…} value` with `\\`, `\"` and `\n` escapes.
fn parse_metrics(body: &[u8]) -> Result<Samples, BoxError> {
    let text = std::str::from_utf8(body)?;
    if !text.ends_with("# EOF\n") {
        return Err("exposition does not end with # EOF".into());
    }
    let mut out = Samples::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| format!("bad sample line {line:?}"))?;
        let name = &line[..name_end];
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next().ok_or("unterminated labels")?;
                match c {
                    '}' => {
                        rest = &r[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        if chars.next().map(|p| p.1) != Some('"') {
                            return Err(format!("label value not quoted in {line:?}").into());
                        }
                        let mut value = String::new();
                        loop {
                            match chars.next().ok_or("unterminated label value")?.1 {
                                '"' => break,
                                '\\' => match chars.next().ok_or("dangling escape")?.1 {
                                    'n' => value.push('\n'),
                                    other => value.push(other),
                                },
                                other => value.push(other),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    other => key.push(other),
                }
            }
        }
        let value_text = rest.split_whitespace().next().ok_or_else(|| format!("no value in {line:?}"))?;
        let value: f64 = value_text.parse().map_err(|_| format!("bad value in {line:?}"))?;
        out.entry(name.to_owned()).or_default().push((labels, value));
    }
    Ok(out)
}

/// The value of the one sample of `name` whose labels include `want`.
fn value(samples: &Samples, name: &str, want: &[(&str, &str)]) -> Result<f64, BoxError> {
    let found: Vec<f64> = samples
        .get(name)
        .into_iter()
        .flatten()
        .filter(|(labels, _)| want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| *v)
        .collect();
    match found.as_slice() {
        [v] => Ok(*v),
        [] => Err(format!("no sample {name}{want:?}; have {:?}", samples.get(name)).into()),
        _ => Err(format!("{} samples {name}{want:?}", found.len()).into()),
    }
}

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

// ---------------------------------------------------------------------------
// 4. /explain.

async fn explain(o: &Ops, id: &str, route: Option<&str>) -> Result<serde_json::Value, BoxError> {
    let mut url = o.admin_url(&format!("/explain?id={id}"));
    if let Some(r) = route {
        url.push_str(&format!("&route={r}"));
    }
    let got = get(&url).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    got.json()
}

/// What `/explain` must say about one id on one route.
struct Expect<'a> {
    route: &'a str,
    /// The proxy path for the route, with `{id}`.
    path: &'a str,
    format: &'a str,
    valid_in: &'a [&'a str],
    region: &'a str,
    kind: &'a str,
}

/// Checks `/explain` for `id`: valid in exactly `valid_in`, decoded by the
/// route as `format`, placed in `region` by a rule of `kind`, and the proxy
/// really sends it there.
async fn check_explain(o: &Ops, id: &str, x: Expect<'_>) -> TestResult {
    let Expect { route, path, format, valid_in, region, kind } = x;
    let e = explain(o, id, Some(route)).await?;
    let formats: HashSet<&str> =
        e["valid_as"].as_array().ok_or("valid_as")?.iter().filter_map(|v| v["format"].as_str()).collect();
    assert_eq!(formats, valid_in.iter().copied().collect(), "{id}: {e}");
    let decoded = e["valid_as"].as_array().ok_or("valid_as")?.iter().find(|v| v["format"] == format).ok_or("fmt")?;
    assert!(decoded["fields"].as_object().is_some_and(|f| !f.is_empty()), "{decoded}");
    let routes = e["routes"].as_array().ok_or("routes")?;
    assert_eq!(routes.len(), 1, "{e}");
    let r = &routes[0];
    assert_eq!(r["route"], route);
    assert_eq!(r["decoded_as"], format, "{r}");
    assert_eq!(r["region"], region, "{r}");
    assert_eq!(r["rule_kind"], kind, "{r}");
    assert!(r["rule"].as_str().is_some_and(|s| !s.is_empty()));
    let got = get(&o.url(&path.replace("{id}", id))).await?;
    assert_eq!(got.header("x-backend-region"), Some(region), "the proxy agrees for {id}");
    Ok(())
}

#[tokio::test]
async fn ops_explain_every_format() -> TestResult {
    let o = ops("").await?;
    let decimal = ["snowflake", "sonyflake", "instagram"];
    // iUID: by country, and by a (country, entity) override.
    check_explain(
        &o,
        &iuid(7, 3),
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "iuid",
            valid_in: &["iuid"],
            region: "kz",
            kind: "country",
        },
    )
    .await?;
    check_explain(
        &o,
        &iuid(7, 4),
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "iuid",
            valid_in: &["iuid"],
            region: "eu",
            kind: "override",
        },
    )
    .await?;
    // uniqid by shard.
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let uniqid = UniqidMinter::new(&clock, 16).mint_for_shard(8, &mut rand::rng()).ok_or("shard")?.to_string();
    check_explain(
        &o,
        &uniqid,
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "uniqid",
            valid_in: &["uniqid"],
            region: "kz",
            kind: "shard",
        },
    )
    .await?;
    // Locality by MAC fragment.
    let locality = LocalityUuid::from_fields(0x1234_5678, 1, 0x0d53_7a50, 1_700_000_000_000).to_string();
    check_explain(
        &o,
        &locality,
        Expect {
            route: "sessions",
            path: "/v1/sessions/{id}",
            format: "locality",
            valid_in: &["locality"],
            region: "kz",
            kind: "locality_mac",
        },
    )
    .await?;
    // UUIDv7 by rendezvous hash: the region the proxy uses.
    let v7 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
    let hashed = get(&o.url(&format!("/v1/events/{v7}"))).await?;
    let hashed = hashed.header("x-backend-region").ok_or("region")?.to_owned();
    check_explain(
        &o,
        v7,
        Expect {
            route: "events",
            path: "/v1/events/{id}",
            format: "uuidv7",
            valid_in: &["uuidv7"],
            region: &hashed,
            kind: "hash",
        },
    )
    .await?;
    // The decimal formats overlap: every one the id is valid in is listed.
    let snowflake = ((12_345u64 << 22) | (2 << 17) | (4 << 12) | 7).to_string();
    check_explain(
        &o,
        &snowflake,
        Expect {
            route: "tweets",
            path: "/v1/tweets/{id}",
            format: "snowflake",
            valid_in: &decimal,
            region: "kz",
            kind: "snowflake_datacenter",
        },
    )
    .await?;
    let sonyflake = ((1000u64 << 24) | 258).to_string();
    check_explain(
        &o,
        &sonyflake,
        Expect {
            route: "flakes",
            path: "/v1/flakes/{id}",
            format: "sonyflake",
            valid_in: &decimal,
            region: "kz",
            kind: "sonyflake_machine",
        },
    )
    .await?;
    let instagram = ((5000u64 << 23) | (42 << 10) | 1).to_string();
    check_explain(
        &o,
        &instagram,
        Expect {
            route: "media",
            path: "/v1/media/{id}",
            format: "instagram",
            valid_in: &decimal,
            region: "us",
            kind: "instagram_shard",
        },
    )
    .await?;

    // Without a route: every route whose formats accept the id.
    let e = explain(&o, &iuid(7, 3), None).await?;
    let names: HashSet<&str> =
        e["routes"].as_array().ok_or("routes")?.iter().filter_map(|r| r["route"].as_str()).collect();
    assert_eq!(names, ["orders", "by-header", "by-query", "behaviours"].into_iter().collect());
    let iuid_fields = &e["valid_as"][0]["fields"];
    assert_eq!(iuid_fields["country"], 7);
    assert_eq!(iuid_fields["service_entity"], 3);
    // A route that does not accept the id says why; bad requests are problems.
    let e = explain(&o, "nope", Some("orders")).await?;
    assert!(e["routes"][0]["reason"].as_str().is_some(), "{e}");
    assert!(e["valid_as"].as_array().is_some_and(Vec::is_empty));
    assert_eq!(get(&o.admin_url("/explain")).await?.status, 400);
    let unknown = get(&o.admin_url(&format!("/explain?id={}&route=nope", iuid(7, 3)))).await?;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.header("content-type"), Some("application/problem+json"));
    Ok(())
}

// ---------------------------------------------------------------------------
// Admin listener: reload errors, config, auth, methods.

#[tokio::test]
async fn ops_post_reload_reports_every_error_then_applies_a_valid_table() -> TestResult {
    let o = ops("").await?;
    let good = o.table("");
    let bad = good
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: mars }")
        .replace("  - name: sessions\n", "  - name: sessions\n    bogus: 1\n");
    replace_file(&o.file, &bad)?;
    let got = post(&o.admin_url("/reload")).await?;
    assert_eq!(got.status, 422, "{}", String::from_utf8_lossy(&got.body));
    let body = got.json()?;
    let errors = body["errors"].as_array().ok_or("errors")?;
    assert_eq!(errors.len(), 2, "{body}");
    for e in errors {
        assert!(e["path"].is_string() && e["line"].as_u64() > Some(0) && e["col"].as_u64() > Some(0), "{e}");
        assert!(e["message"].is_string() && e.get("hint").is_some(), "{e}");
    }
    assert!(errors.iter().any(|e| e["path"] == "countries.KZ.region"), "{body}");
    assert_eq!(get(&o.admin_url("/config")).await?.json()?["version"], 1, "the running table is kept");

    let moved = good.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: us }");
    replace_file(&o.file, &moved)?;
    let got = post(&o.admin_url("/reload")).await?;
    assert_eq!(got.status, 200);
    let body = got.json()?;
    assert_eq!(body["result"], "success");
    assert_eq!(body["version"], 2);
    assert_eq!(body["sha256"], sha256_hex(&moved));
    let got = get(&o.url(&format!("/v1/orders/{}", iuid(7, 3)))).await?;
    assert_eq!(got.header("x-backend-region"), Some("us"));
    let cfg = get(&o.admin_url("/config")).await?.json()?;
    assert_eq!(cfg["version"], 2);
    assert!(cfg["loaded_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{cfg}");
    Ok(())
}

#[tokio::test]
async fn ops_admin_token_methods_and_unknown_paths() -> TestResult {
    let o = ops_with("", Some("s3cret")).await?;
    // Probes need no token.
    for p in ["/live", "/livez", "/ready", "/readyz", "/healthz"] {
        assert_eq!(get(&o.admin_url(p)).await?.status, 200, "{p}");
    }
    // Everything else does.
    for p in ["/metrics", "/config", "/explain?id=x"] {
        let got = get(&o.admin_url(p)).await?;
        assert_eq!(got.status, 401, "{p}");
        assert_eq!(got.header("content-type"), Some("application/problem+json"));
        assert!(got.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
    }
    let wrong = Request::get(o.admin_url("/config")).header("authorization", "Bearer nope").body(Full::default())?;
    assert_eq!(send(wrong).await?.status, 401);
    let right = Request::get(o.admin_url("/config")).header("authorization", "Bearer s3cret").body(Full::default())?;
    assert_eq!(send(right).await?.status, 200);
    // The scheme name is case-insensitive (RFC 9110 §11.1); the token is not.
    for (auth, status) in [("bearer s3cret", 200), ("BEARER s3cret", 200), ("bearer S3CRET", 401), ("Bearer", 401)] {
        let req = Request::get(o.admin_url("/config")).header("authorization", auth).body(Full::default())?;
        assert_eq!(send(req).await?.status, status, "{auth}");
    }
    let drain = Request::post(o.admin_url("/drain")).body(Full::default())?;
    assert_eq!(send(drain).await?.status, 401, "no drain without the token");
    assert!(!o.inst.drain().is_draining());
    // Wrong method: 405 with Allow; unknown path: 404; both problem+json.
    let m = Request::post(o.admin_url("/metrics")).header("authorization", "Bearer s3cret").body(Full::default())?;
    let got = send(m).await?;
    assert_eq!(got.status, 405);
    assert_eq!(got.header("allow"), Some("GET, HEAD"));
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    let r = Request::get(o.admin_url("/reload")).header("authorization", "Bearer s3cret").body(Full::default())?;
    let got = send(r).await?;
    assert_eq!(got.status, 405);
    assert_eq!(got.header("allow"), Some("POST"));
    let got = get(&o.admin_url("/nope")).await?;
    assert_eq!(got.status, 404);
    assert_eq!(got.json()?["status"], 404);
    Ok(())
}

#[tokio::test]
async fn ops_access_log_settings_parse_and_default() -> TestResult {
    let cfg = shardgate::config::load_str(&table_text(""), "t.yaml").map_err(|e| e.to_string())?;
    let s = &cfg.settings;
    assert!(s.log.access && !s.log.ids);
    assert_eq!(s.server.drain_delay, Duration::from_secs(5));
    assert_eq!(s.server.shutdown_timeout, Duration::from_secs(30));
    let cfg = shardgate::config::load_str(
        &table_text("log: { access: false, ids: true }\nserver: { drain_delay: 0s, shutdown_timeout: 250ms }"),
        "t.yaml",
    )
    .map_err(|e| e.to_string())?;
    let s = &cfg.settings;
    assert!(!s.log.access && s.log.ids);
    assert_eq!(s.server.drain_delay, Duration::ZERO);
    assert_eq!(s.server.shutdown_timeout, Duration::from_millis(250));
    let Err(errs) = shardgate::config::load_str(&table_text("log: { acces: true }"), "t.yaml") else {
        return Err("accepted an unknown log key".into());
    };
    assert!(errs.has_path("log.acces"), "{errs}");
    Ok(())
}

fn table_text(extra: &str) -> String {
    let a: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9));
    table(a, a, a, extra)
}
