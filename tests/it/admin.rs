//! The admin listener without a token stays the operator's: a page on
//! another site cannot drain or reload it (cross-site `Origin`,
//! `Sec-Fetch-Site`, form bodies), nor read it through a name rebound to
//! its address (`Host`); with a token, the probes need none and everything
//! else does (the scheme name in any case, the token exact); wrong methods
//! are 405 with `Allow` and unknown paths 404, as problems. Silent sockets
//! at its connection cap make room for the probes instead of starving them.
//! And the proxy fits its connection limit to the open-file limit it runs
//! under.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::Full;
use shardgate::app::{server_options, Instance};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::binary::spawn_binary_limited;
use crate::support::ops::ops_with;
use crate::support::{backend, get, raw, send, table, BoxError, Raw, Running, TestResult};

/// An instance with its admin listener, `token` its bearer token.
struct Admin {
    inst: Arc<Instance>,
    admin: SocketAddr,
    run: tokio::task::JoinHandle<std::io::Result<bool>>,
    _backend: Running,
    _dir: tempfile::TempDir,
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.run.abort();
    }
}

async fn admin(extra: &str, token: Option<&str>) -> Result<Admin, BoxError> {
    let kz = backend("kz").await?;
    let text = table(kz.addr, kz.addr, kz.addr, extra);
    let cfg = shardgate::config::load_str(&text, "t.yaml").map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, &text)?;
    let inst = Arc::new(Instance::new(&cfg, &text, Some(file), token.map(str::to_owned)));
    let (pl, al) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let admin = al.local_addr()?;
    let (i, opts) = (Arc::clone(&inst), server_options(&cfg));
    let run = tokio::spawn(async move { i.run(pl, Some(al), opts).await });
    Ok(Admin { inst, admin, run, _backend: kz, _dir: dir })
}

/// `METHOD path` to the admin listener with `Host: host` and `fields`.
async fn ask(a: &Admin, method: &str, path: &str, host: &str, fields: &[&str]) -> Result<Raw, BoxError> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for f in fields {
        req.push_str(f);
        req.push_str("\r\n");
    }
    if method == "POST" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    raw(a.admin, req.as_bytes(), Duration::from_secs(5)).await
}

#[tokio::test]
async fn without_a_token_another_site_cannot_drain_reload_or_read_it() -> TestResult {
    let a = admin("", None).await?;
    let own = a.admin.to_string();
    let refusals: [(&str, &str, &str, &[&str]); 5] = [
        ("POST", "/drain", own.as_str(), &["Origin: http://evil.example"]),
        ("POST", "/reload", own.as_str(), &["Sec-Fetch-Site: cross-site"]),
        ("POST", "/drain", own.as_str(), &["Content-Type: application/x-www-form-urlencoded"]),
        ("POST", "/reload", own.as_str(), &["Content-Type: text/plain"]),
        ("GET", "/config", "evil.example:9901", &[]),
    ];
    for (method, path, host, fields) in refusals {
        let r = ask(&a, method, path, host, fields).await?;
        assert_eq!(r.status(), Some(403), "{method} {path} {fields:?}: {}", r.text());
        assert_eq!(r.problem().ok_or("problem+json")?["reason"], "forbidden");
    }
    assert!(!a.inst.drain().is_draining(), "a cross-site request started the drain");
    // The operator's own requests still work: its address, a loopback name,
    // the same origin; probes answer whatever the name.
    let port = a.admin.port();
    let localhost = format!("localhost:{port}");
    let origin = format!("Origin: http://{own}");
    let allowed: [(&str, &str, &str, &[&str]); 4] = [
        ("GET", "/config", own.as_str(), &[]),
        ("GET", "/config", localhost.as_str(), &[]),
        ("GET", "/ready", "evil.example", &[]),
        ("POST", "/reload", own.as_str(), &[origin.as_str(), "Sec-Fetch-Site: same-origin"]),
    ];
    for (method, path, host, fields) in allowed {
        let r = ask(&a, method, path, host, fields).await?;
        assert_eq!(r.status(), Some(200), "{method} {path} Host {host}: {}", r.text());
    }
    // With a token, the token decides (a tool may reach it by any name).
    let t = admin("", Some("s3cret")).await?;
    let r = ask(&t, "GET", "/config", "admin.internal:9901", &["Authorization: Bearer s3cret"]).await?;
    assert_eq!(r.status(), Some(200), "{}", r.text());
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
    // `plan --admin` without the token, or with a wrong one, says so.
    let base = o.admin_url("");
    for (token, says) in [(None, "set SHARDGATE_ADMIN_TOKEN"), (Some("nope"), "refused SHARDGATE_ADMIN_TOKEN's")] {
        let mut plan = std::process::Command::new(env!("CARGO_BIN_EXE_shardgate"));
        plan.args(["plan", "--admin", &base, "new.yaml"]).env_remove("SHARDGATE_ADMIN_TOKEN");
        if let Some(t) = token {
            plan.env("SHARDGATE_ADMIN_TOKEN", t);
        }
        let out = tokio::task::spawn_blocking(move || plan.output()).await??;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{err}");
        assert!(err.contains("401") && err.contains(says), "{err}");
    }
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
async fn silent_sockets_at_the_admin_cap_make_room_for_the_probes() -> TestResult {
    let a = admin("server: { admin_max_connections: 4 }", None).await?;
    // Four sockets opened and left silent fill the cap.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(a.admin).await?);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Each probe is still answered: the oldest silent socket is closed for it.
    for _ in 0..6 {
        let r = ask(&a, "GET", "/ready", "127.0.0.1", &[]).await?;
        assert_eq!(r.status(), Some(200), "{}", r.text());
        silent.push(TcpStream::connect(a.admin).await?);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The silent ones were closed, oldest first.
    let first = crate::support::read_until_closed(&mut silent[0], Duration::from_secs(2)).await?;
    assert!(first.closed, "the oldest silent socket is still open");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_limit_fits_the_open_file_limit() -> TestResult {
    let kz = backend("kz").await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("log");
    // 256 open files: room for (256 - 128 - 64) / 2 = 32 client connections.
    let (child, port, _) = spawn_binary_limited(dir.path(), kz.addr, "", Some(&log), Some(256)).await?;
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(proxy).await?;
        s.write_all(b"GET").await?;
        held.push(s);
    }
    // Past the fitted limit a new client is told so at once, not left waiting.
    let r = raw(proxy, b"GET /v1/orders/x HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(5)).await?;
    assert_eq!(r.status(), Some(503), "{}", r.text());
    assert_eq!(r.problem().ok_or("problem+json")?["reason"], "too_many_connections");
    drop(held);
    drop(child);
    let log = std::fs::read_to_string(&log)?;
    assert!(log.contains("max_connections lowered"), "{log}");
    assert!(log.contains("max_connections=32") || log.contains("\"max_connections\":32"), "{log}");
    Ok(())
}
