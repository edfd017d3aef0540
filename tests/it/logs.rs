//! Logging: the access-log and drain settings parsed with their defaults
//! (an unknown key refused), the binary naming each request's rule in
//! its access log, written to a file without colour codes, and serving on
//! when nothing reads its log.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::binary::{spawn_binary_logging, spawn_with};
use crate::support::ops::{iuid, post};
use crate::support::{backend, get, table, TestResult};

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

/// The support table with every upstream at 127.0.0.1:9, to be parsed only.
fn table_text(extra: &str) -> String {
    let a: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9));
    table(a, a, a, extra)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_goes_to_its_file_as_json_and_is_reopened_on_sigusr1() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let (stderr, access, rotated) =
        (dir.path().join("stderr.log"), dir.path().join("access.log"), dir.path().join("access.log.1"));
    let extra = format!(
        "log: {{ access_file: \"{}\" }}\nserver: {{ drain_delay: 0s, shutdown_timeout: 1s }}",
        access.display()
    );
    let (mut child, port, _) = spawn_binary_logging(dir.path(), kz.addr, &extra, Some(&stderr)).await?;
    let first = get(&format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7, 3))).await?;
    assert_eq!(first.status, 200);
    // Its line written (by the log's own thread); then logrotate: rename, and tell the proxy.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&access).map_or(0, |m| m.len()) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::rename(&access, &rotated)?;
    child.signal("-USR1")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !access.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = get(&format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7, 4))).await?;
    assert_eq!(second.status, 200);
    child.signal("-TERM")?;
    assert_eq!(child.wait_exit(Duration::from_secs(10)).await?, 0);
    let lines = |path: &std::path::Path| -> Result<Vec<serde_json::Value>, Box<dyn std::error::Error + Send + Sync>> {
        let text = std::fs::read_to_string(path)?;
        text.lines().map(|l| serde_json::from_str(l).map_err(Into::into)).collect()
    };
    let (old, new) = (lines(&rotated)?, lines(&access)?);
    assert_eq!((old.len(), new.len()), (1, 1), "{old:?} {new:?}");
    for (line, rule, region) in [(&old[0], "country 7 (KZ)", "kz"), (&new[0], "override KZ/WalletAccount", "eu")] {
        let got = (line["target"].as_str(), line["rule"].as_str(), line["status"].as_u64(), line["region"].as_str());
        assert_eq!(got, (Some("shardgate::access"), Some(rule), Some(200), Some(region)), "{line}");
    }
    let text = std::fs::read_to_string(&stderr)?;
    assert!(!text.contains("shardgate::access"), "access lines on standard error too:\n{text}");
    assert!(text.contains("access log reopened"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_a_log_reader_that_stops_reading_stops_no_request() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    // Standard error is a pipe nobody reads: full after 64 KiB, about 250 access lines.
    let piped = ("info", std::process::Stdio::piped());
    let (mut child, port, admin) =
        spawn_with(dir.path(), &table(kz.addr, kz.addr, kz.addr, ""), piped, None, &[]).await?;
    let _unread = child.0.stderr.take().ok_or("no pipe")?;
    let url = format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7, 3));
    for n in 0..2000 {
        let got = tokio::time::timeout(Duration::from_secs(5), get(&url)).await;
        let got = got.map_err(|_| format!("request {n} was not answered: the proxy waits on its log"))??;
        assert_eq!(got.status, 200);
    }
    let metrics = String::from_utf8(get(&format!("http://127.0.0.1:{admin}/metrics")).await?.body.to_vec())?;
    assert!(metrics.contains("shardgate_log_lines_dropped_total 0"), "the lines fit the queue: none dropped");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_an_access_file_that_stops_taking_lines_stops_no_request_across_a_reload() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    // The access file is a pipe whose reader never reads: its writer is
    // stuck in write(2), holding the file, once 64 KiB are in it.
    let fifo = dir.path().join("access.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status()?.success(), "mkfifo failed");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::File::open(fifo))
    };
    let extra = format!("log: {{ access_file: \"{}\" }}", fifo.display());
    let quiet = ("info", std::process::Stdio::null());
    let text = table(kz.addr, kz.addr, kz.addr, &extra);
    let (_child, port, admin) = spawn_with(dir.path(), &text, quiet, None, &[]).await?;
    let _unread = reader.join().map_err(|_| "the reader thread panicked")??;
    let url = format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(7, 3));
    let answered = |round: &'static str| {
        let url = url.clone();
        async move {
            for n in 0..1000 {
                let got = tokio::time::timeout(Duration::from_secs(5), get(&url)).await;
                let got = got.map_err(|_| format!("{round}: request {n} was not answered"))??;
                assert_eq!(got.status, 200);
            }
            Ok::<_, crate::support::BoxError>(())
        }
    };
    answered("before the reload").await?;
    // A reload: the new table's file is followed while the old one's writer is stuck.
    let file = dir.path().join("table.yaml");
    let reloaded = std::fs::read_to_string(&file)? + "\n# reloaded\n";
    std::fs::write(&file, reloaded)?;
    assert_eq!(post(&format!("http://127.0.0.1:{admin}/reload")).await?.status, 200);
    answered("after the reload").await?;
    Ok(())
}
