//! Graceful drain on real sockets: in process (what SIGTERM starts) and by
//! `POST /drain`, in-flight requests finished and new connections refused;
//! the binary draining on SIGTERM and exiting 0, exiting 130 at once on
//! SIGINT; and `shardgate demo` on the same signals, surviving SIGHUP and a
//! reader of its output that leaves.

use std::time::{Duration, Instant};

use crate::support::binary::{free_ports, spawn_binary, Child};
use crate::support::ops::{iuid, ops, post};
use crate::support::{backend, get, BoxError, TestResult};

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
