//! The HTTP/2 upstream leg (`h2c://` endpoints) under calls that end
//! early: a call its client gives up, or that runs out of its deadline at
//! the proxy, resets its stream at the backend, which then stops reading
//! a body no one waits on; an answer that ends before the call's body
//! does lets the rest of the body go, within the request timeout; a body
//! read whole goes with its length, and goes again on another connection
//! when a GOAWAY says the server never took its stream; calls that wait
//! for the server's concurrent-stream limit wait as for a pooled
//! connection, never held against the endpoint; the connections of an
//! endpoint a reload took out are let go.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::grpc::{region_as, ECHO_ROUTE};
use crate::support::{iuid, proxy, table, BoxError, Running, TestResult};

/// How the backend answers a call before reading its body.
#[derive(Clone, Copy)]
enum First {
    /// It does not: the call waits.
    Nothing,
    /// A head, then `grpc-status: 0` in trailers.
    Trailers,
    /// A head alone that ends the answer (gRPC's Trailers-Only).
    HeadAlone,
    /// As `HeadAlone`, then the body is read but no window given back:
    /// past the first 64 KiB the body stalls.
    HeadAloneNoWindow,
    /// A head, then nothing until the body's end, then the number of bytes
    /// it had and `grpc-status: 0` in trailers.
    HeadThenCount,
}

/// An HTTP/2 backend that answers each call as `first` says, then reads
/// its body; for each call it sends on the channel its `content-length`
/// (`length N`, or `length none`), `first` when the body's first bytes
/// came, then `end`, or `reset REASON`.
async fn backend(first: First) -> Result<(SocketAddr, mpsc::Receiver<String>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (seen, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else { return };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let seen = seen.clone();
                    tokio::spawn(async move {
                        let length = req.headers().get("content-length").and_then(|v| v.to_str().ok());
                        let _ = seen.send(format!("length {}", length.unwrap_or("none"))).await;
                        let mut body = req.into_body();
                        let head = http::Response::builder().header("content-type", "application/grpc");
                        let answer = match first {
                            First::Nothing => None,
                            First::Trailers => {
                                head.body(()).ok().and_then(|h| respond.send_response(h, false).ok()).map(
                                    |mut stream| {
                                        let mut trailers = http::HeaderMap::new();
                                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                                        let _ = stream.send_trailers(trailers);
                                        stream
                                    },
                                )
                            }
                            First::HeadThenCount => {
                                head.body(()).ok().and_then(|h| respond.send_response(h, false).ok())
                            }
                            First::HeadAlone | First::HeadAloneNoWindow => head
                                .header("grpc-status", "0")
                                .body(())
                                .ok()
                                .and_then(|h| respond.send_response(h, true).ok()),
                        };
                        let mut first_bytes = true;
                        let mut count = 0;
                        let ended = loop {
                            match body.data().await {
                                Some(Ok(data)) => {
                                    count += data.len();
                                    if !matches!(first, First::HeadAloneNoWindow) {
                                        let _ = body.flow_control().release_capacity(data.len());
                                    }
                                    if first_bytes {
                                        first_bytes = false;
                                        let _ = seen.send("first".into()).await;
                                    }
                                }
                                Some(Err(e)) => break format!("reset {:?}", e.reason()),
                                None => break "end".into(),
                            }
                        };
                        let mut answer = answer;
                        if let (First::HeadThenCount, "end", Some(stream)) = (first, ended.as_str(), answer.as_mut()) {
                            let _ = stream.send_data(Bytes::from(count.to_string()), false);
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let _ = stream.send_trailers(trailers);
                        }
                        let _ = seen.send(ended).await;
                        drop((respond, answer));
                    });
                }
            });
        }
    });
    Ok((addr, rx))
}

/// The proxy with region kz served by the backend at `at` over h2c.
async fn proxy_to(at: SocketAddr) -> Result<Running, BoxError> {
    proxy_with(at, "health: { interval: 0s }").await
}

/// [`proxy_to`], with `upstream` as the table's `upstream:` settings.
async fn proxy_with(at: SocketAddr, upstream: &str) -> Result<Running, BoxError> {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let yaml = table(dead, dead, dead, &format!("upstream: {{ {upstream} }}")) + ECHO_ROUTE;
    proxy(&region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{at}\"]"))).await
}

/// A streaming call to the proxy, routed to kz, with one message sent and
/// its body left open; `deadline` as its `grpc-timeout`.
async fn open_call(
    p: &Running,
    deadline: Option<&str>,
) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), BoxError> {
    let socket = tokio::net::TcpStream::connect(p.addr).await?;
    let (client, conn) = h2::client::handshake(socket).await?;
    tokio::spawn(conn);
    let mut head = http::Request::post(format!("http://{}/echo.Echo/Collect", p.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", iuid(7));
    if let Some(d) = deadline {
        head = head.header("grpc-timeout", d);
    }
    let (answer, mut body) = client.ready().await?.send_request(head.body(())?, false)?;
    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 2, b'h', b'i']), false)?;
    Ok((answer, body))
}

async fn next(seen: &mut mpsc::Receiver<String>) -> Result<String, BoxError> {
    Ok(tokio::time::timeout(Duration::from_secs(10), seen.recv()).await?.ok_or("the backend is gone")?)
}

/// What the backend saw of a call's body after its length.
async fn after_length(seen: &mut mpsc::Receiver<String>) -> Result<String, BoxError> {
    let length = next(seen).await?;
    assert!(length.starts_with("length "), "{length}");
    next(seen).await
}

#[tokio::test]
async fn h2_upstream_a_call_its_client_resets_is_reset_at_the_backend() -> TestResult {
    let (at, mut seen) = backend(First::Nothing).await?;
    let p = proxy_to(at).await?;
    let (_answer, mut body) = open_call(&p, None).await?;
    assert_eq!(after_length(&mut seen).await?, "first");
    body.send_reset(h2::Reason::CANCEL);
    assert_eq!(next(&mut seen).await?, "reset Some(CANCEL)", "the backend kept a stream its client gave up");
    Ok(())
}

#[tokio::test]
async fn h2_upstream_a_call_past_its_deadline_at_the_proxy_is_reset_at_the_backend() -> TestResult {
    let (at, mut seen) = backend(First::Nothing).await?;
    let p = proxy_to(at).await?;
    let (answer, _body) = open_call(&p, Some("300m")).await?;
    assert_eq!(after_length(&mut seen).await?, "first");
    let resp = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    let status = resp.headers().get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_string);
    assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED from the proxy: {resp:?}");
    assert_eq!(next(&mut seen).await?, "reset Some(CANCEL)", "the backend kept a stream the proxy gave up");
    Ok(())
}

#[tokio::test]
async fn h2_upstream_an_answer_that_ends_first_lets_the_rest_of_the_body_go() -> TestResult {
    for first in [First::Trailers, First::HeadAlone] {
        let (at, mut seen) = backend(first).await?;
        let p = proxy_to(at).await?;
        let (answer, mut body) = open_call(&p, None).await?;
        let resp = tokio::time::timeout(Duration::from_secs(10), answer).await??;
        let in_head = resp.headers().get("grpc-status").cloned();
        let mut answer_body = resp.into_body();
        let trailers = tokio::time::timeout(Duration::from_secs(10), answer_body.trailers()).await??;
        let status = trailers.and_then(|t| t.get("grpc-status").cloned()).or(in_head);
        assert_eq!(status.as_ref().map(|v| v.as_bytes()), Some(&b"0"[..]));
        assert_eq!(after_length(&mut seen).await?, "first");
        // The call's answer has ended; the rest of its body still reaches the backend.
        body.send_data(Bytes::from_static(&[0, 0, 0, 0, 1, b'!']), true)?;
        assert_eq!(next(&mut seen).await?, "end", "the body's end did not reach the backend");
    }
    Ok(())
}

#[tokio::test]
async fn h2_upstream_a_body_stalled_after_its_answer_ended_is_reset_at_the_request_timeout() -> TestResult {
    let (at, mut seen) = backend(First::HeadAloneNoWindow).await?;
    let p = proxy_with(at, "health: { interval: 0s }, request_timeout: 1s, attempt_timeout: 1s").await?;
    let (answer, mut body) = open_call(&p, None).await?;
    let resp = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(resp.headers().get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    assert_eq!(after_length(&mut seen).await?, "first");
    // The answer has ended; more body than the backend's window follows.
    for _ in 0..8 {
        body.send_data(Bytes::from(vec![0u8; 16 * 1024]), false)?;
    }
    assert_eq!(next(&mut seen).await?, "reset Some(CANCEL)", "a body no one takes was piped on forever");
    Ok(())
}

#[tokio::test]
async fn h2_upstream_a_body_read_whole_goes_with_its_length() -> TestResult {
    let (at, mut seen) = backend(First::Trailers).await?;
    let p = proxy_to(at).await?;
    // HTTP/1.1, chunked: the proxy reads the body whole, then knows its length.
    let mut socket = tokio::net::TcpStream::connect(p.addr).await?;
    let head = format!(
        "POST /echo.Echo/Collect HTTP/1.1\r\nhost: x\r\nx-entity-id: {}\r\ntransfer-encoding: chunked\r\n\r\n",
        iuid(7)
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, format!("{head}5\r\nhello\r\n0\r\n\r\n").as_bytes()).await?;
    assert_eq!(next(&mut seen).await?, "length 5", "a body read whole reached the backend without its length");
    assert_eq!(next(&mut seen).await?, "first");
    assert_eq!(next(&mut seen).await?, "end");
    Ok(())
}

/// A listener whose first connection says SETTINGS, then answers the
/// first request's HEADERS with `GOAWAY(last_stream_id 0, NO_ERROR)`: the
/// server took no stream. Later connections go to `to`.
async fn going_away_first(to: SocketAddr) -> Result<SocketAddr, BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            if !std::mem::take(&mut first) {
                tokio::spawn(async move {
                    let Ok(mut backend) = tokio::net::TcpStream::connect(to).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut socket, &mut backend).await;
                });
                continue;
            }
            tokio::spawn(async move {
                let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
                let mut preface = [0u8; 24];
                if socket.write_all(&settings).await.is_err() || socket.read_exact(&mut preface).await.is_err() {
                    return;
                }
                let mut head = [0u8; 9];
                while socket.read_exact(&mut head).await.is_ok() {
                    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                    let mut payload = vec![0u8; len];
                    if socket.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    if head[3] == 1 {
                        let goaway = [0u8, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                        let _ = socket.write_all(&goaway).await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

#[tokio::test]
async fn h2_upstream_a_body_read_whole_goes_again_when_a_goaway_left_its_stream_out() -> TestResult {
    let (at, mut seen) = backend(First::Trailers).await?;
    let p = proxy_to(going_away_first(at).await?).await?;
    // A write: its stream was never taken, so it goes again, once.
    let mut socket = tokio::net::TcpStream::connect(p.addr).await?;
    let head = format!(
        "POST /echo.Echo/Collect HTTP/1.1\r\nhost: x\r\nx-entity-id: {}\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
        iuid(7)
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, head.as_bytes()).await?;
    assert_eq!(next(&mut seen).await?, "length 5", "the call did not go again");
    assert_eq!(next(&mut seen).await?, "first");
    assert_eq!(next(&mut seen).await?, "end");
    let mut answer = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut socket, &mut answer);
    tokio::time::timeout(Duration::from_secs(10), read).await??;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    Ok(())
}

#[tokio::test]
async fn h2_upstream_calls_that_waited_on_one_failed_opening_count_it_once() -> TestResult {
    // A listener whose accept queue is full and never taken from: a new
    // connection's SYN goes unanswered until the connect timeout.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind("127.0.0.1:0".parse()?)?;
    let listener = socket.listen(1)?;
    let at = listener.local_addr()?;
    let mut queued = Vec::new();
    for _ in 0..3 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(at)).await {
            queued.push(s);
        }
    }
    let upstream = "health: { interval: 0s }, connect_timeout: 500ms, retries: 0, eject_after: 2, eject_for: 60s";
    let p = proxy_with(at, upstream).await?;
    // Five calls at once: one opens the connection, four wait for it; it fails for all five.
    let calls = (0..5).map(|_| unary(p.addr));
    for answer in futures_util::future::join_all(calls).await {
        let answer = answer?;
        assert!(answer.starts_with("HTTP/1.1 5"), "{answer}");
    }
    let health = p.proxy.as_ref().ok_or("proxy")?.shared().health.clone();
    let kz = health.report().into_iter().find(|(r, ..)| r == "kz").ok_or("no kz endpoint")?;
    assert!(!kz.3, "one failed opening ejected the endpoint as five would: {kz:?}");
    drop(queued);
    Ok(())
}

/// An HTTP/2 backend that takes one stream at a time and answers each call
/// (`grpc-status: 0`) `after` it came.
async fn one_stream_at_a_time(after: Duration) -> Result<(SocketAddr, Arc<AtomicUsize>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let streams = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&streams);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let handshake = h2::server::Builder::new().max_concurrent_streams(1).handshake::<_, Bytes>(socket);
                let Ok(mut conn) = handshake.await else { return };
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let head = http::Response::builder().header("content-type", "application/grpc").body(());
                        if let Some(mut stream) = head.ok().and_then(|h| respond.send_response(h, false).ok()) {
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let _ = stream.send_trailers(trailers);
                        }
                    });
                }
            });
        }
    });
    Ok((addr, streams))
}

/// A unary call to the proxy over HTTP/1.1, routed to kz: its answer, whole.
async fn unary(proxy: SocketAddr) -> Result<String, BoxError> {
    let mut s = tokio::net::TcpStream::connect(proxy).await?;
    let head = format!(
        "POST /echo.Echo/Unary HTTP/1.1\r\nhost: x\r\nx-entity-id: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        iuid(7)
    );
    tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tokio::io::AsyncReadExt::read_to_end(&mut s, &mut answer)).await??;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn h2_upstream_calls_waiting_on_the_servers_stream_limit_are_saturation_not_failures() -> TestResult {
    let (at, streams) = one_stream_at_a_time(Duration::from_millis(1500)).await?;
    let upstream = "health: { interval: 0s }, attempt_timeout: 2s, queue_timeout: 300ms, retries: 0, \
                    eject_after: 2, eject_for: 60s";
    let p = proxy_with(at, upstream).await?;
    // One call takes the server's one stream for 1.5 s; three more wait for it.
    let first = tokio::spawn(unary(p.addr));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = futures_util::future::join_all((0..3).map(|_| unary(p.addr))).await;
    for answer in waiting {
        let answer = answer?;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("upstream_saturated"), "{answer}");
    }
    assert!(first.await??.starts_with("HTTP/1.1 200"));
    // The calls given up never reached the server: they waited at the
    // proxy, not in the connection, whose streams it would have sent later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(streams.load(Ordering::SeqCst), 1, "calls given up reached the server");
    let health = p.proxy.as_ref().ok_or("proxy")?.shared().health.clone();
    let kz = health.report().into_iter().find(|(r, ..)| r == "kz").ok_or("no kz endpoint")?;
    assert!(!kz.3, "calls waiting for a stream ejected the endpoint: {kz:?}");
    // And it serves the next call.
    assert!(unary(p.addr).await?.starts_with("HTTP/1.1 200"));
    Ok(())
}

/// An HTTP/2 backend answering every call at once (`grpc-status: 0`);
/// how many connections to it are open.
async fn counting_connections() -> Result<(SocketAddr, Arc<AtomicUsize>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let open = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&open);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut conn) = h2::server::handshake(socket).await {
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        let head = http::Response::builder().header("content-type", "application/grpc").body(());
                        if let Some(mut stream) = head.ok().and_then(|h| respond.send_response(h, false).ok()) {
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let _ = stream.send_trailers(trailers);
                        }
                    }
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok((addr, open))
}

#[tokio::test]
async fn h2_upstream_the_connections_of_an_endpoint_a_reload_took_out_are_let_go() -> TestResult {
    let (old, old_open) = counting_connections().await?;
    let (new, _) = counting_connections().await?;
    let p = proxy_to(old).await?;
    assert!(unary(p.addr).await?.starts_with("HTTP/1.1 200"));
    assert_eq!(old_open.load(Ordering::SeqCst), 1);
    // kz's backend is replaced: the next calls go to the new one, and the
    // old one's connection is closed, not kept (and pinged) for good.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let yaml = table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + ECHO_ROUTE;
    let text = region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{new}\"]"));
    let cfg = shardgate::config::load_str(&text, "t.yaml").map_err(|e| e.to_string())?;
    p.proxy.as_ref().ok_or("proxy")?.shared().table.publish_config(&cfg, text.clone())?;
    assert!(unary(p.addr).await?.starts_with("HTTP/1.1 200"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while old_open.load(Ordering::SeqCst) > 0 {
        assert!(std::time::Instant::now() < deadline, "the old endpoint's connection is still open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test]
async fn h2_upstream_an_answer_whose_backend_waits_for_the_body_is_not_reset_while_the_body_moves() -> TestResult {
    // The backend answers with a head, then sends nothing until the body
    // ends: for three times the idle timeout only the client's body moves,
    // which keeps the stream from being idle, as it would an HTTP/1.1
    // connection.
    let (at, mut seen) = backend(First::HeadThenCount).await?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let extra = "upstream: { health: { interval: 0s } }\nserver: { idle_timeout: 1s }";
    let yaml = table(dead, dead, dead, extra) + ECHO_ROUTE;
    let p = proxy(&region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{at}\"]"))).await?;
    let (answer, mut body) = open_call(&p, None).await?;
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await??;
    assert_eq!(answer.status(), 200);
    let message = Bytes::from_static(&[0, 0, 0, 0, 2, b'h', b'i']);
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        body.send_data(message.clone(), false)?;
    }
    body.send_data(message, true)?;
    let mut answer = answer.into_body();
    let data = tokio::time::timeout(Duration::from_secs(10), answer.data()).await?;
    let data = data.ok_or("the answer ended without its count")?.map_err(|e| format!("the answer was reset: {e}"))?;
    assert_eq!(data, "70", "the backend counts the ten messages");
    assert_eq!(after_length(&mut seen).await?, "first");
    assert_eq!(next(&mut seen).await?, "end");
    Ok(())
}

#[tokio::test]
async fn h2_upstream_a_call_routed_by_its_first_message_is_held_while_its_unit_moves() -> TestResult {
    // Its unit is known only once its first message is read: it must still
    // wait out the hold, and then go to the unit's new owner.
    let (kz_at, mut kz_seen) = backend(First::Trailers).await?;
    let (eu_at, mut eu_seen) = backend(First::Trailers).await?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let route = "  - name: by-field\n    match: { path: \"/field.Echo/{method}\" }\n    id: { grpc_field: \"1\", formats: [iuid] }\n";
    let text = |moves: &str| {
        let yaml = table(dead, dead, dead, &format!("upstream: {{ health: {{ interval: 0s }} }}\n{moves}")) + route;
        let yaml = region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{kz_at}\"]"));
        region_as(&yaml, dead, "eu", &format!("upstreams: [\"h2c://{eu_at}\"]"))
    };
    let p = proxy(&text("")).await?;
    let publish = |yaml: &str| -> TestResult {
        let cfg = shardgate::config::load_str(yaml, "t.yaml").map_err(|e| format!("{e}"))?;
        p.proxy.as_ref().ok_or("not a proxy")?.shared().table.publish_config(&cfg, yaml.to_string())?;
        Ok(())
    };
    publish(&text("moves:\n  - { unit: \"country KZ\", to: eu, phase: hold, epoch: 1 }\n"))?;
    // A unary call whose field 1 is a KZ entity's id.
    let id = iuid(7);
    let mut message = vec![0x0a, u8::try_from(id.len())?];
    message.extend_from_slice(id.as_bytes());
    let mut framed = vec![0, 0, 0, 0, u8::try_from(message.len())?];
    framed.extend_from_slice(&message);
    let socket = tokio::net::TcpStream::connect(p.addr).await?;
    let (client, conn) = h2::client::handshake(socket).await?;
    tokio::spawn(conn);
    let head = http::Request::post(format!("http://{}/field.Echo/Unary", p.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let (answer, mut body) = client.ready().await?.send_request(head, false)?;
    body.send_data(Bytes::from(framed), true)?;
    let mut answer = tokio::spawn(answer);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!answer.is_finished(), "the call was answered during the hold");
    assert!(kz_seen.try_recv().is_err(), "the call reached the unit's source during the hold");
    let switched = text("moves:\n  - { unit: \"country KZ\", to: eu, phase: switch, epoch: 2 }\n")
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    publish(&switched)?;
    let answer = tokio::time::timeout(Duration::from_secs(10), &mut answer).await???;
    assert_eq!(answer.status(), 200);
    assert!(next(&mut eu_seen).await?.starts_with("length"), "the call went to the new owner");
    assert!(kz_seen.try_recv().is_err(), "the call reached the old owner");
    Ok(())
}
