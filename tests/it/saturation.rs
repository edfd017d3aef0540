//! A crowded endpoint stays fair, on real sockets: a request waiting for a
//! connection is refused as saturated (503) after `upstream.queue_timeout`,
//! never timed out against the endpoint; slow uploads hold at most
//! `upstream.upload_share` of an endpoint's connections, a small body is
//! read before any connection is taken, and a body slower than
//! `server.body_min_rate` is the client's 408; a client that takes its
//! answer slower than `server.answer_min_rate` is closed; tunnels have a
//! cap of their own and close when idle. Through all of it the endpoint is never
//! ejected and the region's other clients are served.

use std::time::{Duration, Instant};

use http::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    all_up, backend, backend_with, full, get, is_health_check, iuid, proxy, read_until_closed, table, BoxError, Got,
    Running, TestResult,
};

/// A kz backend that reads each request's body to its end before it
/// answers (as most applications do), so an upload holds its connection.
async fn reading_backend() -> Result<(Running, std::sync::Arc<crate::support::Conns>), BoxError> {
    backend_with(|req| async move {
        let health = is_health_check(&req);
        let body = http_body_util::BodyExt::collect(req.into_body()).await.map(|b| b.to_bytes().len()).unwrap_or(0);
        let mut resp = Response::new(full(if health { "ok".to_string() } else { format!("kz read {body}") }));
        resp.headers_mut().insert("x-backend-region", http::HeaderValue::from_static("kz"));
        resp
    })
    .await
}

/// A proxy whose kz region is `kz` (failing over to eu), with `extra` in its table.
async fn over(kz: &Running, extra: &str) -> Result<(Running, Running, Running), BoxError> {
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let yaml = table(eu.addr, kz.addr, us.addr, extra).replace(
        &format!("kz: {{ upstreams: [\"http://{}\"] }}", kz.addr),
        &format!("kz: {{ upstreams: [\"http://{}\"], failover: eu }}", kz.addr),
    );
    Ok((proxy(&yaml).await?, eu, us))
}

/// An upload that sends one byte at a time; stopped (its connection
/// closed) when dropped.
struct Trickle(tokio::task::JoinHandle<()>);

impl Drop for Trickle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts an upload of `length` bytes to `path` that sends one byte every
/// `every`, until the proxy closes its connection or it is dropped.
async fn trickle(p: &Running, path: &str, length: usize, every: Duration) -> Result<Trickle, BoxError> {
    let mut s = TcpStream::connect(p.addr).await?;
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n");
    s.write_all(head.as_bytes()).await?;
    Ok(Trickle(tokio::spawn(async move {
        for _ in 0..length {
            tokio::time::sleep(every).await;
            if s.write_all(b"x").await.is_err() {
                return;
            }
        }
    })))
}

/// `GET path` on the proxy, and how long it took.
async fn timed_get(p: &Running, path: &str) -> Result<(Got, Duration), BoxError> {
    let started = Instant::now();
    let got = get(&p.url(path)).await?;
    Ok((got, started.elapsed()))
}

#[tokio::test]
async fn a_wait_for_a_connection_is_saturation_never_an_upstream_failure() -> TestResult {
    let (kz, _) = reading_backend().await?;
    // Both connections may carry uploads; a waiter gives up after 300 ms,
    // well before its attempt timer would have run out under the old rule.
    let extra = "upstream: { max_connections: 2, upload_share: 1.0, queue_timeout: 300ms, attempt_timeout: 1s, \
                 eject_after: 2, retries: 0, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // Two uploads of 100 KB at 10 bytes a second hold both connections.
    let _uploads = [
        trickle(&p, &path, 100_000, Duration::from_millis(100)).await?,
        trickle(&p, &path, 100_000, Duration::from_millis(100)).await?,
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Six reads wait for a connection: each refused as saturated.
    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let url = p.url(&path);
        waiters.spawn(async move { get(&url).await });
    }
    while let Some(got) = waiters.join_next().await {
        let got = got??;
        assert_eq!(got.status, 503, "{:?}", got.body);
        assert_eq!(got.json()?["reason"], "upstream_saturated");
        assert_eq!(got.header("retry-after"), Some("1"));
    }
    // The waits were never held against kz, and its reads never left it.
    assert!(all_up(&p, "kz")?, "kz ejected: {:?}", crate::support::health_of(&p, "kz")?);
    Ok(())
}

#[tokio::test]
async fn a_request_that_found_its_region_full_never_fails_over_whatever_its_other_endpoints_say() -> TestResult {
    let (kz, _) = reading_backend().await?;
    // kz's second endpoint refuses connections, and is never ejected here.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let extra = "upstream: { max_connections: 2, upload_share: 1.0, queue_timeout: 300ms, attempt_timeout: 1s, \
                 eject_after: 1000, retries: 0, health: { interval: 0s } }";
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let yaml = table(eu.addr, kz.addr, us.addr, extra).replace(
        &format!("kz: {{ upstreams: [\"http://{}\"] }}", kz.addr),
        &format!("kz: {{ upstreams: [\"http://{}\", \"http://{dead}\"], failover: eu }}", kz.addr),
    );
    let p = proxy(&yaml).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // Two slow uploads hold both of the live endpoint's connections (one
    // that tries the dead endpoint first moves on to the live one).
    let _uploads = [
        trickle(&p, &path, 100_000, Duration::from_millis(100)).await?,
        trickle(&p, &path, 100_000, Duration::from_millis(100)).await?,
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Reads at once, so that each tries the two endpoints in either order:
    // full then refused, or refused then full. Neither leaves kz.
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = p.url(&path);
        readers.spawn(async move { get(&url).await });
    }
    while let Some(got) = readers.join_next().await {
        let got = got??;
        assert!(matches!(got.status.as_u16(), 502 | 503), "{} {:?}", got.status, got.body);
    }
    assert_eq!(eu.hits(), 0, "a read of a full region went to its failover region");
    Ok(())
}

#[tokio::test]
async fn slow_uploads_keep_to_their_share_and_others_are_served() -> TestResult {
    let (kz, conns) = reading_backend().await?;
    // Four connections, half of them for uploads.
    let extra = "upstream: { max_connections: 4, upload_share: 0.5, queue_timeout: 500ms, attempt_timeout: 2s, \
                 eject_after: 1, retries: 0, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // Twelve uploads of 1 MB at two bytes a second: a slow-upload flood.
    let mut uploads = Vec::new();
    for _ in 0..12 {
        uploads.push(trickle(&p, &path, 1_000_000, Duration::from_millis(500)).await?);
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Every other client of kz is served by kz meanwhile, at once.
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let (got, took) = timed_get(&p, &path).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")), "{:?}", got.body);
        slowest = slowest.max(took);
    }
    // Served between the uploads, not after them (they run for minutes).
    assert!(slowest < Duration::from_secs(1), "the slowest read took {slowest:?}");
    assert!(conns.most.load(std::sync::atomic::Ordering::SeqCst) <= 4);
    assert!(all_up(&p, "kz")?, "kz ejected: {:?}", crate::support::health_of(&p, "kz")?);
    Ok(())
}

#[tokio::test]
async fn a_small_body_is_read_whole_before_a_connection_is_taken() -> TestResult {
    let (kz, _) = reading_backend().await?;
    let extra = "upstream: { max_connections: 1, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // A 20-byte body whose second half comes 3 s after the first.
    let mut slow = TcpStream::connect(p.addr).await?;
    slow.write_all(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n0123456789").as_bytes())
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // kz's one connection is free meanwhile: reads go through at once.
    for _ in 0..3 {
        let (got, took) = timed_get(&p, &path).await?;
        assert_eq!(got.status, 200);
        assert!(took < Duration::from_millis(1500), "a read waited {took:?} behind a slow body");
    }
    tokio::time::sleep(Duration::from_millis(2800)).await;
    slow.write_all(b"abcdefghij").await?;
    let r = read_until_closed(&mut slow, Duration::from_secs(2)).await?;
    assert!(r.text().starts_with("HTTP/1.1 200"), "{}", r.text());
    assert!(r.text().ends_with("kz read 20"), "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_is_the_clients_408() -> TestResult {
    let (kz, _) = reading_backend().await?;
    let extra = "server: { body_timeout: 1s, body_min_rate: 100 }\n\
                 upstream: { eject_after: 1, retries: 0, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // One read whole first (1 KB), one passed on as it comes (1 MB): both
    // at ten bytes a second, a tenth of the minimum.
    for length in [1_000, 1_000_000] {
        let started = Instant::now();
        let mut s = TcpStream::connect(p.addr).await?;
        s.write_all(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n").as_bytes()).await?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") && started.elapsed() < Duration::from_secs(8) {
            let _ = s.write_all(b"x").await;
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
                if n == 0 {
                    break;
                }
                answer.extend_from_slice(&buf[..n]);
            }
        }
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{length} bytes: {text}");
        assert!(text.contains("body_timeout"), "{text}");
        // About a second in (its grace, and a tenth of a second per ten bytes).
        assert!(started.elapsed() < Duration::from_secs(4), "{length} bytes: answered after {:?}", started.elapsed());
    }
    assert!(all_up(&p, "kz")?, "a slow client was held against kz: {:?}", crate::support::health_of(&p, "kz")?);
    Ok(())
}

/// Opens a WebSocket tunnel through the proxy to `path`: the socket once
/// the `101` is read, or the status the proxy answered instead.
async fn tunnel(p: &Running, path: &str) -> Result<Result<TcpStream, u16>, BoxError> {
    let mut s = TcpStream::connect(p.addr).await?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    s.write_all(head.as_bytes()).await?;
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte)).await?? {
            0 => return Err(format!("closed: {}", String::from_utf8_lossy(&answer)).into()),
            _ => answer.push(byte[0]),
        }
    }
    let status: u16 = String::from_utf8_lossy(&answer).get(9..12).and_then(|t| t.parse().ok()).ok_or("no status")?;
    Ok(if status == 101 { Ok(s) } else { Err(status) })
}

#[tokio::test]
async fn idle_tunnels_have_their_own_cap_and_close() -> TestResult {
    let kz = backend("kz").await?;
    // Two connections for requests; three tunnels, apart from them; a tunnel
    // on the WebSocket route closes after 700 ms of quiet.
    let extra = "upstream: { max_connections: 2, max_tunnels: 3, queue_timeout: 300ms, eject_after: 1, \
                 health: { interval: 0s } }";
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let yaml = table(eu.addr, kz.addr, us.addr, extra).replace(
        "    match: { path: \"/t/{mode}/{id}\" }\n",
        "    match: { path: \"/t/{mode}/{id}\" }\n    tunnel_idle_timeout: 700ms\n",
    );
    let p = proxy(&yaml).await?;
    let ws = format!("/t/ws/{}", iuid(7));
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut s = tunnel(&p, &ws).await?.map_err(|status| format!("tunnel refused with {status}"))?;
        s.write_all(b"ping").await?;
        let mut echo = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut echo)).await??;
        assert_eq!(&echo, b"ping");
        open.push(s);
    }
    // A fourth is over the tunnels' cap: 503, not a wait for ever.
    assert_eq!(tunnel(&p, &ws).await?.err(), Some(503));
    // The tunnels hold none of the requests' connections.
    let started = Instant::now();
    for _ in 0..4 {
        let got = get(&p.url(&format!("/v1/orders/{}", iuid(7)))).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    }
    assert!(started.elapsed() < Duration::from_secs(2), "reads waited {:?}", started.elapsed());
    // Left idle, each tunnel is closed; the cap frees up for new ones.
    for s in &mut open {
        let r = read_until_closed(s, Duration::from_secs(3)).await?;
        assert!(r.closed, "an idle tunnel stayed open");
    }
    let mut again = tunnel(&p, &ws).await?.map_err(|status| format!("tunnel refused with {status}"))?;
    again.write_all(b"pong").await?;
    let mut echo = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(2), again.read_exact(&mut echo)).await??;
    assert_eq!(&echo, b"pong");
    assert!(all_up(&p, "kz")?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_slow_upload_and_idle_tunnel_floods_the_region_is_still_served() -> TestResult {
    let kz = backend("kz").await?;
    let extra = "upstream: { max_connections: 16, max_tunnels: 32, queue_timeout: 500ms, attempt_timeout: 2s, \
                 eject_after: 1, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));
    // Forty uploads of 1 MB at two bytes a second, and forty idle tunnels:
    // more of each than the endpoint has room for.
    let mut uploads = Vec::new();
    for _ in 0..40 {
        uploads.push(trickle(&p, &path, 1_000_000, Duration::from_millis(500)).await?);
    }
    let mut tunnels = Vec::new();
    for _ in 0..40 {
        tunnels.push(tunnel(&p, &format!("/t/ws/{}", iuid(7))).await?);
    }
    let opened = tunnels.iter().filter(|t| t.is_ok()).count();
    assert_eq!(opened, 32, "the tunnels' own cap");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut took = Vec::new();
    for _ in 0..50 {
        let (got, t) = timed_get(&p, &path).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")), "{:?}", got.body);
        took.push(t);
    }
    took.sort();
    let (median, slowest) = (took[took.len() / 2], took[took.len() - 1]);
    eprintln!("reads under both floods: median {median:?}, slowest {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "the slowest read took {slowest:?}");
    assert!(all_up(&p, "kz")?, "kz ejected: {:?}", crate::support::health_of(&p, "kz")?);
    Ok(())
}

/// A kz backend whose every answer (health checks' aside) is `size` bytes.
async fn large_answers(size: usize) -> Result<(Running, std::sync::Arc<crate::support::Conns>), BoxError> {
    let body = bytes::Bytes::from(vec![b'x'; size]);
    backend_with(move |req| {
        let body = if is_health_check(&req) { bytes::Bytes::from_static(b"ok") } else { body.clone() };
        async move { Response::new(full(body)) }
    })
    .await
}

#[tokio::test]
async fn a_client_that_takes_its_answer_slower_than_the_minimum_rate_is_closed_and_frees_its_connection() -> TestResult
{
    let (kz, _) = large_answers(48 * 1024 * 1024).await?;
    // One connection to kz, which the slow reader's answer holds; 8 MB/s a
    // client must take over any 4 s in which a write to it waits.
    let extra = "server: { idle_timeout: 4s, answer_min_rate: 8000000 }\n\
                 upstream: { max_connections: 1, queue_timeout: 200ms, health: { interval: 0s } }";
    let (p, _eu, _us) = over(&kz, extra).await?;
    let p = &p;
    let mut slow = TcpStream::connect(p.addr).await?;
    let head = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\n\r\n", iuid(7));
    slow.write_all(head.as_bytes()).await?;
    // About 1 MB/s: bytes move every second or so (the proxy's writes end as
    // its socket's send buffer drains), so idle_timeout alone never closes it.
    let started = Instant::now();
    let mut chunk = vec![0u8; 16 * 1024];
    let (mut taken, mut closed) = (0usize, None);
    while started.elapsed() < Duration::from_secs(15) {
        match tokio::time::timeout(Duration::from_secs(5), slow.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => {
                closed = Some(started.elapsed());
                break;
            }
            Ok(Ok(n)) => taken += n,
            Err(_) => return Err(format!("the proxy sent nothing for 5 s after {taken} bytes").into()),
        }
        tokio::time::sleep(Duration::from_millis(16)).await;
    }
    let closed = closed.ok_or(format!("a reader taking {taken} bytes in 15 s was not closed"))?;
    assert!(taken < 48 * 1024 * 1024, "the whole answer went");
    assert!(closed >= Duration::from_secs(4), "closed after {closed:?}, before a whole idle_timeout");
    // Its upstream connection is free again: the next request is served.
    let (got, _) = timed_get(p, &format!("/v1/orders/{}", iuid(7))).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body[..got.body.len().min(300)]));
    Ok(())
}
