//! Faults around the proxy on real sockets: broken backends (garbage status
//! line, oversized response head, silence, a reset mid-body, a kept
//! connection closed as it is reused) and a partitioned peer region. Each
//! test asserts the exact answer, that no request hangs, and that the proxy
//! keeps serving afterwards. Reloads that fail are in `reload.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::{
    self, backend, bounded, get, iuid, proxy, raw_backend, read_sized, send, table, BoxError, Running, TestResult,
};

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

/// No retries beyond the attempt, no health checks' own connections.
const NO_RETRIES: &str = "upstream: { retries: 0, health: { interval: 0s } }";

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

/// A backend whose every connection answers one request (echoing its body;
/// the first answers once `together` connections have a request), then reads
/// the next and closes without answering it: its keep-alive timeout racing
/// the proxy's reuse of the connection. Counts the requests it left
/// unanswered.
async fn answering_once(together: usize) -> Result<(SocketAddr, Arc<AtomicUsize>), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let dropped = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&dropped);
    let first = Arc::new(tokio::sync::Barrier::new(together));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (count, first) = (Arc::clone(&count), Arc::clone(&first));
            tokio::spawn(async move {
                let Ok((_, body)) = read_sized(&mut s).await else { return };
                first.wait().await;
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-backend-region: kz\r\n\r\n", body.len());
                if s.write_all(head.as_bytes()).await.is_err() || s.write_all(&body).await.is_err() {
                    return;
                }
                if read_sized(&mut s).await.is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    Ok((addr, dropped))
}

#[tokio::test]
async fn a_put_on_a_kept_connection_the_backend_closes_goes_again_on_a_new_one() -> TestResult {
    let (kz, dropped) = answering_once(1).await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz, us.addr, NO_RETRIES)).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    // Every write after the first may find its kept connection closed under
    // it; each is answered with its own body all the same.
    for n in 0..10 {
        let body = format!("{{\"write\":{n}}}");
        let got = send(Request::put(&url).body(Full::new(Bytes::from(body.clone())))?).await?;
        assert_eq!(got.status, 200, "write {n}: {}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.body, body.as_bytes(), "write {n}");
        if dropped.load(Ordering::SeqCst) > 0 {
            break;
        }
    }
    assert!(dropped.load(Ordering::SeqCst) > 0, "no write found its kept connection closed");
    // A POST is never sent twice: the server may have acted on it.
    let before = dropped.load(Ordering::SeqCst);
    let got = send(Request::post(&url).body(Full::new(Bytes::from_static(b"{}")))?).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.json()?["reason"], "upstream_failed");
    assert_eq!(dropped.load(Ordering::SeqCst), before + 1, "the POST reached the backend once");
    serves_others(&p).await
}

#[tokio::test]
async fn a_request_goes_again_on_at_most_two_more_kept_connections_the_backend_closes() -> TestResult {
    // Three writes at once, answered together: three kept connections.
    let (kz, dropped) = answering_once(3).await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz, us.addr, NO_RETRIES)).await?;
    let url = p.url(&format!("/v1/orders/{}", iuid(7)));
    let put = || async { send(Request::put(&url).body(Full::new(Bytes::from_static(b"{}")))?).await };
    let (a, b, c) = tokio::join!(put(), put(), put());
    for got in [a?, b?, c?] {
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    }
    // The next finds each closed under it: sent on the third, then failed.
    let got = put().await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(dropped.load(Ordering::SeqCst), 3, "the write reached the backend on three connections");
    serves_others(&p).await
}
