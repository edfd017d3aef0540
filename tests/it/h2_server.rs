//! The client leg's HTTP/2 server, driven by an independent client (the
//! `h2` crate's): shutdown sends GOAWAY, refuses new streams and lets the
//! stream in flight finish; an answer carries `Date` and the length of a
//! body of known size, and a HEAD's is its head alone; a request body sent
//! in frames reaches the backend whole; a client that resets its stream
//! mid-body leaves the connection serving; an answer its client gives no
//! window, or whose upstream goes quiet, is reset after the idle timeout,
//! however busy the client keeps the connection (an upload still moving
//! keeps it, as `h2_upstream` shows); a body its backend does not take holds up none of the
//! connection's other streams. (The reset reaching an HTTP/2 backend is
//! `h2_upstream`'s.)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderMap, Request};

use crate::support::{draining_proxy, iuid, table, three_backends, world, BoxError, Draining, TestResult};

/// A new HTTP/2 connection (prior knowledge) to `addr`.
async fn connect(addr: SocketAddr) -> Result<SendRequest<Bytes>, BoxError> {
    let socket = tokio::net::TcpStream::connect(addr).await?;
    let (client, conn) = h2::client::handshake(socket).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A stream's body, read to its end.
async fn read_body(mut body: h2::RecvStream) -> Result<Bytes, BoxError> {
    let mut out = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Checks that an answer's `head` carries a `Date` that parses and the
/// length of its `body` (read to the end); `whose` names the answer.
fn assert_date_and_length(head: &HeaderMap, body: &[u8], whose: &str) -> TestResult {
    let date = head.get("date").ok_or(format!("no Date on {whose}"))?.to_str()?;
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    let length: usize = head.get("content-length").ok_or(format!("no Content-Length on {whose}"))?.to_str()?.parse()?;
    assert_eq!(length, body.len(), "{whose}");
    Ok(())
}

/// A GET of `path` on `client`, its answer's status and body.
async fn get(client: &SendRequest<Bytes>, addr: SocketAddr, path: &str) -> Result<(u16, Bytes), BoxError> {
    let req = Request::get(format!("http://{addr}{path}")).body(())?;
    let (answer, _) = client.clone().ready().await?.send_request(req, true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    let status = answer.status().as_u16();
    Ok((status, read_body(answer.into_body()).await?))
}

#[tokio::test]
async fn h2_shutdown_sends_goaway_refuses_new_streams_and_finishes_the_one_in_flight() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let Draining { addr, begin, server } = draining_proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    let client = connect(addr).await?;
    // The backend answers `/t/slow/` after 2 s: in flight when shutdown begins.
    let slow = {
        let client = client.clone();
        let path = format!("/t/slow/{}", iuid(7));
        tokio::spawn(async move { get(&client, addr, &path).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    begin.send(()).map_err(|()| "server gone")?;
    // The GOAWAY and its final stream id (after a ping) reach the client.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = get(&client, addr, &format!("/v1/orders/{}", iuid(7))).await;
    assert!(later.is_err(), "a stream opened after the GOAWAY was served: {later:?}");
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), slow).await???;
    assert_eq!((status, &body[..]), (200, &b"slow"[..]));
    let finished = tokio::time::timeout(Duration::from_secs(10), server).await???;
    assert!(finished, "the stream in flight did not finish within the grace period");
    assert!(started.elapsed() < Duration::from_secs(5), "shutdown took {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn h2_answers_carry_date_and_length_and_request_bodies_arrive_whole() -> TestResult {
    let (p, _backends) = world("", false).await?;
    let client = connect(p.addr).await?;
    // A body in three frames, its length said.
    let body = "0123456789".repeat(1000).into_bytes();
    let req = Request::post(p.url(&format!("/v1/orders/{}", iuid(7))))
        .header("content-length", body.len())
        .header("content-type", "text/plain")
        .body(())?;
    let (answer, mut tx) = client.clone().ready().await?.send_request(req, false)?;
    for part in [&body[..4000], &body[4000..8000]] {
        tx.send_data(Bytes::copy_from_slice(part), false)?;
    }
    tx.send_data(Bytes::copy_from_slice(&body[8000..]), true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(answer.status(), 200);
    let head = answer.headers().clone();
    let got = read_body(answer.into_body()).await?;
    assert_date_and_length(&head, &got, "the upstream's answer")?;
    let echo: serde_json::Value = serde_json::from_slice(&got)?;
    assert_eq!(echo["region"], "kz");
    assert_eq!(echo["body_bytes"], body.len());
    assert_eq!(echo["headers"]["content-length"], body.len().to_string());
    // The proxy's own answer (no route) gets both from the server.
    let req = Request::get(p.url("/nowhere")).body(())?;
    let (answer, _) = client.clone().ready().await?.send_request(req, true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(answer.status(), 404);
    let head = answer.headers().clone();
    let got = read_body(answer.into_body()).await?;
    assert_date_and_length(&head, &got, "the proxy's own answer")?;
    // The answer to a HEAD is its head alone: a body would be the client's protocol error.
    let req = Request::head(p.url("/nowhere")).body(())?;
    let (answer, _) = client.clone().ready().await?.send_request(req, true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!((answer.status().as_u16(), answer.headers().get("content-length")), (404, head.get("content-length")));
    assert!(answer.body().is_end_stream(), "the answer to a HEAD has a body");
    assert!(read_body(answer.into_body()).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn h2_a_stream_its_client_resets_mid_body_leaves_the_connection_serving() -> TestResult {
    let (p, backends) = world("", false).await?;
    let client = connect(p.addr).await?;
    let req = Request::post(p.url(&format!("/v1/orders/{}", iuid(7)))).header("content-length", "100000").body(())?;
    let (answer, mut tx) = client.clone().ready().await?.send_request(req, false)?;
    tx.send_data(Bytes::from(vec![b'x'; 20_000]), false)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.send_reset(h2::Reason::CANCEL);
    drop(answer);
    // The connection and its other streams go on.
    let before = backends[1].hits();
    let (status, body) = get(&client, p.addr, &format!("/v1/orders/{}", iuid(7))).await?;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(backends[1].hits(), before + 1);
    Ok(())
}

#[tokio::test]
async fn h2_an_answer_its_client_gives_no_window_is_reset_after_the_idle_timeout() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let p = crate::support::proxy(&table(eu.addr, kz.addr, us.addr, "server: { idle_timeout: 1s }")).await?;
    // Streams open with no window: no byte of an answer's body may be sent.
    let socket = tokio::net::TcpStream::connect(p.addr).await?;
    let (client, mut conn) = h2::client::Builder::new().initial_window_size(0).handshake::<_, Bytes>(socket).await?;
    let mut ping = conn.ping_pong().ok_or("no ping handle")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    // The connection is never idle: a ping every 200 ms.
    let pinging = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if ping.ping(h2::Ping::opaque()).await.is_err() {
                return;
            }
        }
    });
    let req = Request::get(format!("http://{}/v1/orders/{}", p.addr, iuid(7))).body(())?;
    let (answer, _) = client.ready().await?.send_request(req, true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(answer.status(), 200);
    let started = Instant::now();
    let mut body = answer.into_body();
    let ended = tokio::time::timeout(Duration::from_secs(10), body.data()).await;
    let ended = ended.map_err(|_| "the answer waited for a window past the idle timeout")?;
    assert!(matches!(ended, Some(Err(_))), "not reset: {ended:?}");
    assert!(started.elapsed() >= Duration::from_millis(900), "reset after {:?}", started.elapsed());
    // The stream was reset, not the connection closed.
    assert!(!pinging.is_finished(), "the connection was closed, not the stream reset");
    pinging.abort();
    Ok(())
}

#[tokio::test]
async fn h2_an_answer_whose_upstream_goes_quiet_is_reset_after_the_idle_timeout() -> TestResult {
    // kz's backend sends a head and the start of a body, then nothing, its
    // socket open until the proxy closes it.
    let (closed, mut was_closed) = tokio::sync::mpsc::channel::<Duration>(1);
    let kz = crate::support::raw_backend(move |mut stream| {
        let closed = closed.clone();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nabc").await;
            let quiet = Instant::now();
            let mut buf = [0u8; 64];
            if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await {
                let _ = closed.send(quiet.elapsed()).await;
            }
        }
    })
    .await?;
    let [eu, _, us] = three_backends().await?;
    let extra = "server: { idle_timeout: 1s }\nupstream: { health: { interval: 0s }, max_connections: 1 }";
    let p = crate::support::proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    let client = connect(p.addr).await?;
    // The connection is never idle: another region's answer every 200 ms.
    let busy = {
        let client = client.clone();
        let addr = p.addr;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !matches!(get(&client, addr, &format!("/v1/orders/{}", iuid(49))).await, Ok((200, _))) {
                    return;
                }
            }
        })
    };
    let req = Request::get(format!("http://{}/v1/orders/{}", p.addr, iuid(7))).body(())?;
    let (answer, _) = client.clone().ready().await?.send_request(req, true)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.data()).await?;
    assert_eq!(first.ok_or("no first bytes")??, "abc");
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), body.data()).await;
    let ended = ended.map_err(|_| "the answer waited on its quiet upstream past the idle timeout")?;
    assert!(matches!(ended, Some(Err(_))), "not reset: {ended:?}");
    assert!(started.elapsed() >= Duration::from_millis(900), "reset after {:?}", started.elapsed());
    // Its upstream connection was closed, not kept.
    let quiet_for = tokio::time::timeout(Duration::from_secs(5), was_closed.recv()).await?;
    assert!(quiet_for.is_some_and(|d| d < Duration::from_secs(10)), "{quiet_for:?}");
    // The stream was reset, not the connection closed.
    assert!(!busy.is_finished(), "the connection was closed, not the stream reset");
    busy.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_a_body_its_backend_does_not_take_holds_up_no_other_stream() -> TestResult {
    // kz's backend reads a request's head, then nothing for longer than the test.
    let kz = crate::support::raw_backend(|stream| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    })
    .await?;
    let [eu, _, us] = three_backends().await?;
    let extra = "upstream: { health: { interval: 0s }, request_timeout: 60s }";
    let p = crate::support::proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    let client = connect(p.addr).await?;
    // An upload to kz far larger than the sockets on the way to kz hold: the
    // rest waits at the proxy, and in the client.
    const STUCK: usize = 48 * 1024 * 1024;
    let req = Request::post(p.url(&format!("/v1/orders/{}", iuid(7)))).header("content-length", STUCK).body(())?;
    let (_stuck, mut tx) = client.clone().ready().await?.send_request(req, false)?;
    tx.send_data(Bytes::from(vec![b'x'; STUCK]), true)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // An upload to eu on the same connection arrives whole.
    let body = vec![b'y'; 300_000];
    let req = Request::post(p.url(&format!("/v1/orders/{}", iuid(49))))
        .header("content-length", body.len())
        .header("content-type", "text/plain")
        .body(())?;
    let (answer, mut tx) = client.clone().ready().await?.send_request(req, false)?;
    tx.send_data(Bytes::from(body), true)?;
    let answer = tokio::time::timeout(Duration::from_secs(5), answer).await;
    let answer = answer.map_err(|_| "the upload to eu waited behind the one kz does not take")??;
    assert_eq!(answer.status(), 200);
    let echo: serde_json::Value = serde_json::from_slice(&read_body(answer.into_body()).await?)?;
    assert_eq!((&echo["region"], &echo["body_bytes"]), (&serde_json::json!("eu"), &serde_json::json!(300_000)));
    assert_eq!(kz.hits(), 1, "the upload reached kz");
    Ok(())
}
