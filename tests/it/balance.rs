//! A region's own upstream settings and how its requests are spread over
//! its backends: weights, least outstanding requests, the region's limits
//! and timeouts, and the counts a reload goes on from (requests under way
//! at each backend, and at each placement unit), on real sockets against
//! real backends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};

use crate::support::{self, backend, backend_with, full, get, BoxError, Running, TestResult};

/// A table whose region `eu` is `eu` (its keys as written) and routes
/// everything there.
fn table(eu: &str, top: &str) -> String {
    format!(
        "version: 1\n{top}\nregions:\n  eu: {eu}\ndefault_region: eu\nroutes:\n  - {{ name: all, match: {{ prefix: / }}, to: local }}\n"
    )
}

/// Sends `n` GETs to `path`, `at_once` at a time; the statuses, counted.
async fn load(p: &Running, path: &str, n: usize, at_once: usize) -> Result<Vec<u16>, BoxError> {
    let url = Arc::new(p.url(path));
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..at_once {
        let (url, next) = (Arc::clone(&url), Arc::clone(&next));
        tasks.spawn(async move {
            let mut statuses = Vec::new();
            while next.fetch_add(1, Ordering::SeqCst) < n {
                statuses.push(get(&url).await.map_or(0, |g| g.status.as_u16()));
            }
            statuses
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        all.extend(done?);
    }
    Ok(all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_share_a_regions_requests_within_five_percent() -> TestResult {
    let (a, b) = (backend("eu").await?, backend("eu").await?);
    let eu = format!(
        "{{ upstreams: [{{ url: \"http://{}\", weight: 3 }}, {{ url: \"http://{}\", weight: 1 }}], balance: weighted }}",
        a.addr, b.addr
    );
    let p = support::proxy(&table(&eu, "")).await?;
    let statuses = load(&p, "/w", 10_000, 32).await?;
    assert!(statuses.iter().all(|&s| s == 200));
    let share = a.hits() as f64 / (a.hits() + b.hits()) as f64;
    assert!((share - 0.75).abs() < 0.05, "{} / {}", a.hits(), b.hits());
    Ok(())
}

/// A backend that answers after `delay`.
async fn delayed(delay: Duration) -> Result<Running, BoxError> {
    let (running, _) = backend_with(move |_req| async move {
        tokio::time::sleep(delay).await;
        Response::new(full("ok"))
    })
    .await?;
    Ok(running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_sends_fewer_requests_to_a_slow_backend() -> TestResult {
    let (slow, fast) = (delayed(Duration::from_millis(100)).await?, delayed(Duration::ZERO).await?);
    let region = |balance: &str| {
        format!("{{ upstreams: [\"http://{}\", \"http://{}\"], balance: {balance} }}", slow.addr, fast.addr)
    };
    let rr = support::proxy(&table(&region("round_robin"), "")).await?;
    load(&rr, "/x", 200, 8).await?;
    let (rr_slow, rr_all) = (slow.hits(), slow.hits() + fast.hits());
    let lr = support::proxy(&table(&region("least_request"), "")).await?;
    load(&lr, "/x", 200, 8).await?;
    let (lr_slow, lr_all) = (slow.hits() - rr_slow, slow.hits() + fast.hits() - rr_all);
    assert_eq!((rr_all, lr_all), (200, 200));
    assert!(rr_slow >= 90, "round robin gave the slow backend {rr_slow} of 200");
    assert!(lr_slow * 4 < lr_all, "least_request gave the slow backend {lr_slow} of {lr_all}");
    Ok(())
}

/// A backend that answers `/x` only once released (one request a permit
/// added), anything else at once.
async fn held_backend() -> Result<(Running, Arc<tokio::sync::Semaphore>), BoxError> {
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let gate = Arc::clone(&release);
    let (held, _) = backend_with(move |req| {
        let gate = Arc::clone(&gate);
        async move {
            if req.uri().path() == "/x" {
                let _ = gate.acquire().await.map(|p| p.forget());
            }
            Response::new(full("held"))
        }
    })
    .await?;
    Ok((held, release))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_still_sees_the_requests_under_way_after_a_reload() -> TestResult {
    // `held` answers requests only when released (its health checks at
    // once); `fast` at once.
    let (held, release) = held_backend().await?;
    let fast = delayed(Duration::ZERO).await?;
    let eu = format!("{{ upstreams: [\"http://{}\", \"http://{}\"], balance: least_request }}", held.addr, fast.addr);
    let text = table(&eu, "");
    let p = support::proxy(&text).await?;
    // One request at a time until one waits at `held` (each of the others
    // was answered by `fast`).
    let url = p.url("/x");
    let mut waiting = None;
    for _ in 0..64 {
        let u = url.clone();
        let mut task = tokio::spawn(async move { get(&u).await.map(|g| g.status) });
        let answered = tokio::time::timeout(Duration::from_millis(500), &mut task).await;
        if answered.is_err() && held.hits() == 1 {
            waiting = Some(task);
            break;
        }
    }
    let waiting = waiting.ok_or("no request ever reached the held backend")?;
    // A reload (a route added) compiles a new table: it goes on from the
    // old one's count, so the waiting request still steers every other one
    // to `fast`. Counted from zero, each would have an even chance of
    // `held`, and would wait there too.
    let next = format!("{text}  - {{ name: other, match: {{ prefix: /other/ }}, to: local }}\n");
    let cfg = shardgate::config::load_str(&next, "next.yaml")?;
    p.proxy.as_ref().ok_or("proxy")?.shared().table.publish_config(&cfg, next.clone())?;
    for _ in 0..20 {
        let got = tokio::time::timeout(Duration::from_secs(2), get(&url))
            .await
            .map_err(|_| "a request waited at `held`")??;
        assert_eq!(got.status, StatusCode::OK);
    }
    assert_eq!(held.hits(), 1);
    release.add_permits(1);
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), waiting).await???, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn a_request_under_way_over_a_reload_counts_for_its_unit_in_the_new_table() -> TestResult {
    let (held, release) = held_backend().await?;
    // The table has no countries: an iUID is placed by `default_region`.
    let text = format!(
        "version: 1\nregions:\n  eu: {{ upstreams: [\"http://{}\"] }}\ndefault_region: eu\nroutes:\n  - {{ name: ids, match: {{ prefix: /x }}, id: {{ header: x-id, formats: [iuid] }} }}\n",
        held.addr
    );
    let p = support::proxy(&text).await?;
    let req = http::Request::get(p.url("/x")).header("x-id", support::iuid(7)).body(Default::default())?;
    let waiting = tokio::spawn(support::send(req));
    for _ in 0..100 {
        if held.hits() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(held.hits(), 1, "the request never reached its backend");
    let next = format!("{text}  - {{ name: other, match: {{ prefix: /other/ }}, to: local }}\n");
    let cfg = shardgate::config::load_str(&next, "next.yaml")?;
    let shared = &p.proxy.as_ref().ok_or("proxy")?.shared().table;
    shared.publish_config(&cfg, next.clone())?;
    release.add_permits(1);
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), waiting).await???.status, StatusCode::OK);
    // Counted as it ends, on the table it started on: the new table reads that count.
    let counts: std::collections::HashMap<String, u64> =
        shared.snapshot().table.units().counts().map(|(n, c)| (n.to_string(), c)).collect();
    assert_eq!(counts.get("default"), Some(&1), "{counts:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regions_own_limits_and_timeouts_replace_the_tables() -> TestResult {
    let slow = delayed(Duration::from_millis(400)).await?;
    let kz_like = backend("eu").await?;
    let eu = format!(
        "{{ upstreams: [\"http://{}\"], upstream: {{ max_connections: 1, max_pending: 0, attempt_timeout: 200ms, request_timeout: 300ms }} }}",
        slow.addr
    );
    let yaml = table(&eu, "").replace(
        "default_region: eu",
        &format!("  us: {{ upstreams: [\"http://{}\"] }}\ndefault_region: eu", kz_like.addr),
    ) + "  - { name: us, match: { prefix: /us/ }, to: { region: us } }\n";
    let p = support::proxy(&yaml).await?;
    // The region's attempt timeout: 504 well before the backend's 400 ms.
    let got = get(&p.url("/a")).await?;
    assert_eq!((got.status, got.json()?["reason"].as_str()), (StatusCode::GATEWAY_TIMEOUT, Some("upstream_timeout")));
    // Its one connection busy and no wait allowed: the second of two at once is refused.
    let statuses = load(&p, "/b", 2, 2).await?;
    assert!(statuses.contains(&503), "{statuses:?}");
    // Another region keeps the table's settings.
    assert_eq!(get(&p.url("/us/x")).await?.status, StatusCode::OK);
    Ok(())
}

#[test]
fn region_settings_are_checked_with_their_line() {
    for (eu, want) in [
        ("{ upstreams: [{ url: \"http://127.0.0.1:1\", weight: 2 }] }", "only with `balance: weighted`"),
        ("{ upstreams: [{ url: \"http://127.0.0.1:1\", weight: 0 }], balance: weighted }", "outside 1-1000"),
        ("{ upstreams: [\"http://127.0.0.1:1\"], balance: fastest }", "unknown balance"),
        ("{ upstreams: [{ url: \"http://127.0.0.1:1\", wieght: 2 }] }", "`{ url: URL, weight: N }`"),
        ("{ upstreams: [\"http://127.0.0.1:1\"], upstream: { max_connections: 0 } }", "must be positive"),
        ("{ upstreams: [\"http://127.0.0.1:1\"], upstream: { attempt_timeout: 1m } }", "longer than request_timeout"),
        ("{ upstreams: [\"http://127.0.0.1:1\"], upstream: { health: { interval: 0s } } }", "must be positive"),
        ("{ upstreams: [\"http://127.0.0.1:1\"], upstream: { retries: 2 } }", "retries"),
    ] {
        let err =
            shardgate::config::load_str(&table(eu, ""), "t.yaml").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want) && err.contains("t.yaml:4:"), "{eu}: {err}");
    }
}

#[tokio::test]
async fn each_region_takes_its_own_turns_among_its_backends() -> TestResult {
    // Requests alternate between eu and kz, two backends each: with one
    // turn for every region, each region would always land on the same one.
    let (e1, e2, k1, k2) = (backend("eu").await?, backend("eu").await?, backend("kz").await?, backend("kz").await?);
    let text = format!(
        "version: 1\nregions:\n  eu: {{ upstreams: [\"http://{}\", \"http://{}\"] }}\n  kz: {{ upstreams: \
         [\"http://{}\", \"http://{}\"] }}\nroutes:\n  - {{ name: eu, match: {{ prefix: /eu }}, to: {{ region: eu }} \
         }}\n  - {{ name: kz, match: {{ prefix: /kz }}, to: {{ region: kz }} }}\n",
        e1.addr, e2.addr, k1.addr, k2.addr
    );
    let p = support::proxy(&text).await?;
    for _ in 0..4 {
        for region in ["/eu", "/kz"] {
            assert_eq!(get(&p.url(region)).await?.status, 200);
        }
    }
    assert_eq!([e1.hits(), e2.hits(), k1.hits(), k2.hits()], [2, 2, 2, 2]);
    Ok(())
}
