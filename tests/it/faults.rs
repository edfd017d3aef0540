//! Faults around the proxy on real sockets: broken backends (garbage status
//! line, oversized response head, silence, a reset mid-body), a partitioned
//! peer region, and reloads that fail (truncated file, unreadable file,
//! full disk). Each test asserts the exact answer, that no request hangs,
//! and that the proxy keeps serving afterwards with the last good table.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardgate::ids::Iuid;
use shardgate::routing::{ReloadError, Reloader};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{self, backend, get, proxy, raw_backend, table, BoxError, Got, Running, TestResult};

fn iuid(country: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, 3, 12345).to_string()
}

/// GET that must finish within 5 s.
async fn bounded(url: &str) -> Result<Got, BoxError> {
    tokio::time::timeout(Duration::from_secs(5), get(url)).await.map_err(|_| format!("{url}: request hung"))?
}

async fn expect_problem(url: &str, status: u16, reason: &str) -> TestResult {
    let got = bounded(url).await?;
    assert_eq!(got.status, status, "{url}: {}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    assert_eq!(got.json()?["reason"], reason, "{url}");
    Ok(())
}

/// A backend that writes `bytes` after the request head, then closes.
async fn answering(bytes: &'static [u8]) -> Result<Running, BoxError> {
    raw_backend(move |mut s: TcpStream| async move {
        let _ = s.write_all(bytes).await;
        let _ = s.shutdown().await;
    })
    .await
}

/// The proxy with kz pointed at `kz`, eu and us at real backends.
async fn with_kz(kz: &Running, extra: &str) -> Result<(Running, Running, Running), BoxError> {
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    Ok((p, eu, us))
}

const UPSTREAM: &str = "upstream: { attempt_timeout: 500ms, request_timeout: 2s, retries: 0, eject_after: 0 }";

async fn serves_others(p: &Running) -> TestResult {
    let got = bounded(&p.url(&format!("/v1/orders/{}", iuid(49)))).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("eu")));
    Ok(())
}

#[tokio::test]
async fn a_garbage_status_line_is_502() -> TestResult {
    let kz = answering(b"HTTP/1.1 ABC Garbage\r\n\r\n").await?;
    let (p, _eu, _us) = with_kz(&kz, UPSTREAM).await?;
    expect_problem(&p.url(&format!("/v1/orders/{}", iuid(7))), 502, "upstream_failed").await?;
    let kz2 = answering(b"NOT HTTP AT ALL\r\n\r\n").await?;
    let (p2, _eu2, _us2) = with_kz(&kz2, UPSTREAM).await?;
    expect_problem(&p2.url(&format!("/v1/orders/{}", iuid(7))), 502, "upstream_failed").await?;
    assert_eq!((kz.hits(), kz2.hits()), (1, 1));
    serves_others(&p).await?;
    serves_others(&p2).await
}

#[tokio::test]
async fn an_oversized_response_head_is_502() -> TestResult {
    let kz = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nX-Huge: ").await;
        let _ = s.write_all(&vec![b'a'; 1 << 20]).await;
        let _ = s.write_all(b"\r\ncontent-length: 0\r\n\r\n").await;
    })
    .await?;
    let (p, _eu, _us) = with_kz(&kz, UPSTREAM).await?;
    expect_problem(&p.url(&format!("/v1/orders/{}", iuid(7))), 502, "upstream_failed").await?;
    serves_others(&p).await
}

#[tokio::test]
async fn a_silent_backend_is_504_after_the_attempt_timeout() -> TestResult {
    let kz = raw_backend(|s: TcpStream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    })
    .await?;
    let (p, _eu, _us) = with_kz(&kz, UPSTREAM).await?;
    let started = Instant::now();
    expect_problem(&p.url(&format!("/v1/orders/{}", iuid(7))), 504, "upstream_timeout").await?;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(2), "{took:?}");
    serves_others(&p).await
}

#[tokio::test]
async fn a_reset_mid_body_fails_the_client_without_a_hang() -> TestResult {
    let kz = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n0123456789").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        // SO_LINGER 0: closing sends RST instead of FIN.
        let _ = s.set_zero_linger();
        drop(s);
    })
    .await?;
    let (p, _eu, _us) = with_kz(&kz, UPSTREAM).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    match tokio::time::timeout(Duration::from_secs(5), get(&url)).await {
        Err(_) => return Err("client hung on an upstream reset".into()),
        Ok(Ok(got)) => return Err(format!("a reset body looked complete: {} bytes", got.body.len()).into()),
        Ok(Err(_)) => {} // the client saw the message cut short
    }
    // The same on a raw socket: the head and 10 bytes arrive, then the connection ends.
    let req = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\n\r\n", iuid(7));
    let r = support::raw(p.addr, req.as_bytes(), Duration::from_secs(5)).await?;
    assert!(r.closed, "connection left open after the upstream reset");
    assert_eq!(r.status(), Some(200));
    assert!(r.text().ends_with("\r\n\r\n0123456789"), "{:?}", r.text());
    serves_others(&p).await
}

#[tokio::test]
async fn a_partitioned_peer_region_fails_fast_and_is_marked_down() -> TestResult {
    // kz's gateway accepts connections and never answers (a blackhole);
    // us's gateway answers. This instance serves eu.
    let blackhole = raw_backend(|s: TcpStream| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    })
    .await?;
    let (eu, us_gw) = (backend("eu").await?, backend("us").await?);
    let health = "upstream: { attempt_timeout: 300ms, request_timeout: 1s, retries: 0, \
                  health: { interval: 100ms, timeout: 200ms, fall: 1, rise: 1 } }";
    let yaml = table(eu.addr, blackhole.addr, us_gw.addr, health)
        .replace("version: 1\n", "version: 1\nregion: eu\n")
        .replace(
            &format!("kz: {{ upstreams: [\"http://{}\"] }}", blackhole.addr),
            &format!("kz: {{ peer: \"http://{}\" }}", blackhole.addr),
        )
        .replace(
            &format!("us: {{ upstreams: [\"http://{}\"] }}", us_gw.addr),
            &format!("us: {{ peer: \"http://{}\" }}", us_gw.addr),
        );
    let p = proxy(&yaml).await?;
    let kz_url = p.url(&format!("/v1/orders/{}", iuid(7)));

    // Until the checker marks it down: 504 after the attempt timeout; after: 503 at once.
    let started = Instant::now();
    let got = bounded(&kz_url).await?;
    let first = got.json()?["reason"].as_str().unwrap_or("").to_string();
    assert!(
        (got.status == 504 && first == "upstream_timeout") || (got.status == 503 && first == "region_unavailable"),
        "{} {first}",
        got.status
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let health = p.proxy.clone().ok_or("proxy")?.shared().health.clone();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !health.report().iter().any(|(region, _, up, _)| region == "kz" && !up) {
        if Instant::now() > deadline {
            return Err(format!("the blackholed peer is not marked down: {:?}", health.report()).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    let got = bounded(&kz_url).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (503, Some("region_unavailable")));
    assert!(got.header("retry-after").is_some());
    assert!(started.elapsed() < Duration::from_millis(250), "{:?}", started.elapsed());
    // Other regions are unaffected: eu locally, us through its peer.
    serves_others(&p).await?;
    let got = bounded(&p.url(&format!("/v1/orders/{}", iuid(1)))).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("us")));
    assert!(us_gw.hits() >= 1);
    Ok(())
}

/// A proxy whose table is the file `file`, and the reloader that the
/// file watcher, SIGHUP and `POST /reload` use, on the same shared table.
async fn reloading(
    file: &Path,
    eu: &Running,
    kz: &Running,
    us: &Running,
) -> Result<(Running, Arc<Reloader>), BoxError> {
    // Padding makes the file larger than a 4 KiB page (for the disk-full case).
    // It comes first, so that a cut at 4096 bytes falls inside the table.
    let text = format!("# {}\n{}", "pad ".repeat(750), table(eu.addr, kz.addr, us.addr, ""));
    std::fs::write(file, &text)?;
    let p = proxy(&text).await?;
    let shared = p.proxy.as_ref().ok_or("proxy")?.shared().table.clone();
    Ok((p, Arc::new(Reloader::new(file, shared))))
}

/// The proxy still routes with its first table (version 1) and serves.
async fn still_on_first_table(p: &Running, r: &Reloader) -> TestResult {
    assert_eq!(r.shared().snapshot().version, 1, "the failed reload replaced the table");
    let got = bounded(&p.url(&format!("/v1/orders/{}", iuid(7)))).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    Ok(())
}

fn reload_error(r: &Reloader) -> Result<String, BoxError> {
    match r.reload_now() {
        Ok(o) => Err(format!("reload accepted: {o:?}").into()),
        Err(e @ ReloadError::Invalid(_)) => Ok(e.to_string()),
        Err(e) => Err(format!("unexpected: {e}").into()),
    }
}

#[tokio::test]
async fn failed_reloads_keep_the_last_good_table() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    let (p, r) = reloading(&file, &eu, &kz, &us).await?;
    let good = std::fs::read_to_string(&file)?;

    // Truncated mid-write (a writer that died half way, a torn copy).
    let cut = good.find("routes:").ok_or("routes")? + 40;
    std::fs::write(&file, &good[..cut])?;
    let e = reload_error(&r)?;
    assert!(e.contains("config rejected"), "{e}");
    assert_eq!(r.failures(), 1);
    still_on_first_table(&p, &r).await?;
    // Truncated to nothing.
    std::fs::write(&file, "")?;
    let _ = reload_error(&r)?;
    assert_eq!(r.failures(), 2);
    still_on_first_table(&p, &r).await?;
    // Cut inside a multi-byte character: not UTF-8.
    std::fs::write(&file, [good.as_bytes(), "# é".as_bytes().get(..3).unwrap_or_default()].concat())?;
    let e = reload_error(&r)?;
    assert!(e.contains("not valid utf-8"), "{e}");
    assert_eq!(r.failures(), 3);
    still_on_first_table(&p, &r).await?;

    // Permission denied. chmod 000 does not stop root (CAP_DAC_OVERRIDE),
    // which these tests often are: then the file is replaced by something
    // that cannot be read as a file (a directory, a dangling symlink).
    std::fs::write(&file, &good)?;
    let mut failures = r.failures();
    if unreadable_by_chmod(&file)? {
        let e = reload_error(&r)?;
        assert!(e.contains("cannot open config file") && e.contains("ermission denied"), "{e}");
        failures += 1;
        assert_eq!(r.failures(), failures);
        still_on_first_table(&p, &r).await?;
    }
    std::fs::remove_file(&file)?;
    std::fs::create_dir(&file)?;
    let e = reload_error(&r)?;
    assert!(e.contains("cannot read config file") && e.contains("directory"), "{e}");
    failures += 1;
    assert_eq!(r.failures(), failures);
    still_on_first_table(&p, &r).await?;
    std::fs::remove_dir(&file)?;
    std::os::unix::fs::symlink(dir.path().join("gone.yaml"), &file)?;
    let e = reload_error(&r)?;
    assert!(e.contains("cannot open config file") && e.contains("No such file"), "{e}");
    failures += 1;
    assert_eq!(r.failures(), failures);
    still_on_first_table(&p, &r).await?;

    // The good file back: the reload succeeds (and only then the version moves).
    std::fs::remove_file(&file)?;
    std::fs::write(&file, &good)?;
    assert_eq!(r.reload_now()?.version, 2);
    assert_eq!(r.failures(), failures);
    Ok(())
}

/// Makes `file` mode 000; true when that really stops this process reading it.
fn unreadable_by_chmod(file: &Path) -> Result<bool, BoxError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o000))?;
    let blocked = std::fs::File::open(file).is_err();
    if !blocked {
        eprintln!("running as root: chmod 000 does not block reads; using a directory and a dangling symlink instead");
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(blocked)
}

/// A 4 KiB tmpfs mounted for the test (needs root and mount rights);
/// unmounted when dropped.
struct TinyFs(std::path::PathBuf);

impl TinyFs {
    fn mount(at: &Path) -> Option<TinyFs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4k", "shardgate-test"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| TinyFs(at.to_path_buf()))
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_during_a_table_write_keeps_the_last_good_table() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let dir = tempfile::tempdir()?;
    let mnt = dir.path().join("tiny");
    let fs = TinyFs::mount(&mnt);
    // With a tmpfs of 4 KiB the disk really fills: the proxy starts from a
    // table elsewhere, the new table written there stops at 4096 bytes with
    // ENOSPC. Without mount rights the same outcome is simulated: the file
    // is cut at 4096 bytes, which is what a full disk leaves.
    let base = if fs.is_some() { mnt.clone() } else { dir.path().to_path_buf() };
    let file = base.join("table.yaml");
    let scratch = dir.path().join("first.yaml");
    let (p, _) = reloading(&scratch, &eu, &kz, &us).await?;
    let good = std::fs::read_to_string(&scratch)?;
    let changed = good.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    match &fs {
        Some(_) => {
            let e = std::fs::write(&file, &changed).err().ok_or("the tiny tmpfs did not fill")?;
            assert_eq!(e.raw_os_error(), Some(28), "{e}"); // ENOSPC
        }
        None => {
            eprintln!("cannot mount a tmpfs here: simulating a full disk by a file cut at 4096 bytes");
            std::fs::write(&file, &changed.as_bytes()[..4096])?;
        }
    }
    assert_eq!(std::fs::metadata(&file)?.len(), 4096);
    let r = Reloader::new(&file, p.proxy.as_ref().ok_or("proxy")?.shared().table.clone());
    let e = reload_error(&r)?;
    assert!(e.contains("config rejected"), "{e}");
    assert_eq!(r.failures(), 1);
    still_on_first_table(&p, &r).await?;
    drop(fs);
    Ok(())
}
