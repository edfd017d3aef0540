//! Reloading the table. A reload applies a valid table and keeps the last
//! good one through an invalid or missing file; a table that changes what
//! only a restart can change applies every other change, keeps each
//! restart-only key's running value and lists it in `needs_restart` (each
//! key alone and all at once), and a later edit still applies. Reloads of a
//! served table that fail (truncated, not UTF-8, unreadable, a full disk)
//! keep the proxy serving the last good table. Under load and a hundred
//! reloads every request is answered by the table in force; `POST /reload`
//! reports every error of a table, then applies a valid one.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use shardgate::config::{self, restart::RESTART_ONLY};
use shardgate::routing::shared::sha256_hex;
use shardgate::routing::{ReloadError, Reloader, SharedTable, Table};

use crate::support::ops::{iuid, ops, parse_metrics, post, replace_file, value};
use crate::support::reload::{mini, owner_of_kz, start};
use crate::support::{self, backend, bounded, get, proxy, BoxError, Running, TestResult};

// ---------------------------------------------------------------------------
// A reloader on a real file.

#[test]
fn routing_reload_now_keeps_last_good_table() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    let r = start(dir.path(), &file, &mini("kz"))?;
    assert_eq!(owner_of_kz(r.shared()), "kz");

    std::fs::write(&file, mini("eu"))?;
    let o = r.reload_now(&shardgate::routing::Provenance::by("test"))?;
    assert_eq!((o.version, o.needs_restart.len()), (2, 0));
    assert_eq!(owner_of_kz(r.shared()), "eu");

    std::fs::write(&file, mini("mars"))?;
    let e = r.reload_now(&shardgate::routing::Provenance::by("test")).err().ok_or("accepted an invalid table")?;
    let ReloadError::Invalid(errs) = &e else { return Err(format!("{e}").into()) };
    assert!(errs.has_path("countries.KZ.region"), "{errs}");
    assert_eq!(owner_of_kz(r.shared()), "eu");
    assert_eq!((r.successes(), r.failures()), (1, 1));
    // Unchanged invalid file: the watcher path does not retry it.
    assert!(r.reload_if_changed().is_none());

    // Restart-only keys are reported and keep their running values.
    std::fs::write(&file, mini("kz").replace("127.0.0.1:8080", "127.0.0.1:8181"))?;
    let o = r.reload_now(&shardgate::routing::Provenance::by("test"))?;
    assert_eq!(o.needs_restart, vec!["listen"]);
    let snap = r.shared().snapshot();
    assert_eq!(snap.table.settings().restart.listen.port(), 8080);
    assert_eq!(owner_of_kz(r.shared()), "kz");

    std::fs::remove_file(&file)?;
    assert!(r.reload_now(&shardgate::routing::Provenance::by("test")).is_err());
    assert_eq!(owner_of_kz(r.shared()), "kz");
    assert_eq!(r.failures(), 2);
    Ok(())
}

// ---------------------------------------------------------------------------
// Restart-only keys.

/// Each restart-only key: the top-level section it is in, its value in
/// the base table (`None`: left out) and a change of it. A value of a
/// mapping section is one `key: value` entry of that mapping.
const CHANGES: &[(&str, &str, Option<&str>, &str)] = &[
    ("listen", "listen", Some("127.0.0.1:18080"), "127.0.0.1:18081"),
    ("admin", "admin", Some("127.0.0.1:19901"), "127.0.0.1:19902"),
    ("region", "region", Some("kz"), "eu"),
    ("instance", "instance", Some("gw-a"), "gw-b"),
    ("ids.locality", "ids", Some("locality: { pid: 1 }"), "locality: { pid: 2 }"),
    ("server.tls", "server", None, "tls: { cert: gw.pem, key: gw.key }"),
    ("server.header_read_timeout", "server", None, "header_read_timeout: 11s"),
    ("server.idle_timeout", "server", None, "idle_timeout: 61s"),
    ("server.answer_min_rate", "server", None, "answer_min_rate: 2048"),
    ("server.max_header_bytes", "server", None, "max_header_bytes: 20000"),
    ("server.max_headers", "server", None, "max_headers: 101"),
    ("server.max_connections", "server", None, "max_connections: 10001"),
    ("server.admin_max_connections", "server", None, "admin_max_connections: 65"),
    ("server.backlog", "server", None, "backlog: 1024"),
    ("server.fanout_buffer_bytes", "server", None, "fanout_buffer_bytes: 1048576"),
    ("upstream.tls", "upstream", None, "tls: { ca: ca.pem }"),
    ("upstream.connect_timeout", "upstream", None, "connect_timeout: 3s"),
    ("upstream.pool_idle_timeout", "upstream", None, "pool_idle_timeout: 91s"),
    ("search_cache.capacity", "search_cache", None, "capacity: 5"),
    ("telemetry", "telemetry", None, "sample_ratio: 0.5"),
];

/// Sections whose values are mappings (the others are scalars).
const MAPPINGS: [&str; 5] = ["ids", "server", "upstream", "search_cache", "telemetry"];

/// A table serving kz with KZ owned by `kz_owner`, the keys in `changed`
/// changed and every other restart-only key at its base value.
fn table(kz_owner: &str, changed: &[&str]) -> String {
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for (key, section, base, new) in CHANGES {
        let value = if changed.contains(key) { Some(*new) } else { *base };
        let Some(value) = value else { continue };
        match sections.iter_mut().find(|(s, _)| s == section) {
            Some((_, values)) => values.push(value),
            None => sections.push((section, vec![value])),
        }
    }
    let mut text = String::from("version: 1\n");
    for (section, values) in sections {
        if MAPPINGS.contains(&section) {
            text.push_str(&format!("{section}: {{ {} }}\n", values.join(", ")));
        } else {
            text.push_str(&format!("{section}: {}\n", values.join("")));
        }
    }
    text.push_str(&format!(
        "regions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9001\"] }}\n  kz: {{ upstreams: [\"http://127.0.0.1:9002\"] }}\n\
         countries:\n  KZ: {{ id: 7, region: {kz_owner} }}\n\
         routes:\n  - {{ name: orders, match: {{ path: \"/v1/orders/{{id}}\" }}, id: {{ path_param: id, formats: [iuid] }} }}\n"
    ));
    text
}

#[test]
fn every_restart_only_key_is_kept_and_reported_while_the_rest_applies() -> TestResult {
    let keys: Vec<&str> = CHANGES.iter().map(|(k, ..)| *k).collect();
    assert_eq!(keys, RESTART_ONLY, "the test's changes and config::restart::RESTART_ONLY differ");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, table("kz", &[]))?;
    let (cfg, text) = config::load_file(&file)?;
    let shared = Arc::new(SharedTable::new(Table::compile(&cfg), text));
    let running = shared.snapshot().table.settings().restart.clone();
    let r = Reloader::new(&file, Arc::clone(&shared));
    // Each key alone, with KZ moved each time: the move applies, the key is kept.
    for (i, key) in keys.iter().enumerate() {
        let owner = if i % 2 == 0 { "eu" } else { "kz" };
        std::fs::write(&file, table(owner, &[key]))?;
        let outcome = r.reload_now(&shardgate::routing::Provenance::by("test")).map_err(|e| format!("{key}: {e}"))?;
        assert_eq!(outcome.needs_restart, [*key], "{key}");
        assert_eq!(owner_of_kz(&shared), owner, "{key}: the country move did not apply");
        assert_eq!(shared.snapshot().table.settings().restart, running, "{key}: the running value was not kept");
    }
    // Every key at once, and a move.
    std::fs::write(&file, table("eu", &keys))?;
    let outcome = r.reload_now(&shardgate::routing::Provenance::by("test"))?;
    assert_eq!(outcome.needs_restart, RESTART_ONLY);
    assert_eq!(owner_of_kz(&shared), "eu");
    assert_eq!(shared.snapshot().table.settings().restart, running);
    // The next edit still applies (nothing froze): the move back.
    std::fs::write(&file, table("kz", &keys))?;
    assert_eq!(r.reload_now(&shardgate::routing::Provenance::by("test"))?.needs_restart, RESTART_ONLY);
    assert_eq!(owner_of_kz(&shared), "kz");
    Ok(())
}

#[test]
fn a_table_naming_another_region_is_compiled_in_the_one_served_until_restart() -> TestResult {
    use shardgate::config::model::CountrySource;
    let served = |region: &str| {
        format!(
            "version: 1\nregion: {region}\ninstance: gw\nregions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9001\"] }}\n  \
             kz: {{ upstreams: [\"http://127.0.0.1:9002\"] }}\ncountries:\n  KZ: {{ id: 7, region: kz }}\n  \
             DE: {{ id: 49, region: eu }}\nentities: {{ Order: 3 }}\nroutes:\n  - name: create\n    \
             match: {{ path: /v1/orders, methods: [POST] }}\n    \
             mint: {{ format: iuid, entity: Order, country: {{ local: true }} }}\n"
        )
    };
    let minted = |shared: &SharedTable| {
        let loaded = shared.snapshot();
        let route = loaded.config.as_ref().and_then(|c| c.routes.iter().find_map(|r| r.mint.clone()));
        route.and_then(|m| match m.country {
            Some(CountrySource::Local(c)) => Some(c),
            _ => None,
        })
    };
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, served("eu"))?;
    let (cfg, text) = config::load_file(&file)?;
    let shared = Arc::new(SharedTable::from_config(&cfg, text));
    let r = Reloader::new(&file, Arc::clone(&shared));
    assert_eq!(minted(&shared), Some(49));
    std::fs::write(&file, served("kz"))?;
    let outcome = r.reload_now(&shardgate::routing::Provenance::by("test"))?;
    assert_eq!(outcome.needs_restart, ["region"]);
    assert_eq!(minted(&shared), Some(49), "creates went on minting in the new region's country before a restart");
    Ok(())
}

// ---------------------------------------------------------------------------
// Failed reloads of a served table.

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
    let text = format!("# {}\n{}", "pad ".repeat(750), support::table(eu.addr, kz.addr, us.addr, ""));
    std::fs::write(file, &text)?;
    let p = proxy(&text).await?;
    let shared = p.proxy.as_ref().ok_or("proxy")?.shared().table.clone();
    Ok((p, Arc::new(Reloader::new(file, shared))))
}

/// The proxy still routes with its first table (version 1) and serves.
async fn still_on_first_table(p: &Running, r: &Reloader) -> TestResult {
    assert_eq!(r.shared().snapshot().version, 1, "the failed reload replaced the table");
    let got = bounded(&p.url(&format!("/v1/orders/{}", iuid(7, 3)))).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    Ok(())
}

fn reload_error(r: &Reloader) -> Result<String, BoxError> {
    match r.reload_now(&shardgate::routing::Provenance::by("test")) {
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
    assert_eq!(r.reload_now(&shardgate::routing::Provenance::by("test"))?.version, 2);
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

// ---------------------------------------------------------------------------
// Reloads while serving, and POST /reload.

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
        let outcome =
            tokio::task::spawn_blocking(move || r.reload_now(&shardgate::routing::Provenance::by("test"))).await?;
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
