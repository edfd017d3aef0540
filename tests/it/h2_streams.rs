//! Streams that share an HTTP/2 connection to a backend do not harm each
//! other: a client that stops reading a long answer made of small frames
//! (a server-streaming call, say) holds only its own stream. The proxy
//! takes the frames off the connection as they come and gives the backend
//! window back as the client takes the bytes, so the connection neither
//! closes for the frames held (`h2` counts what small frames cost) nor
//! stalls the other calls on it; the client that stopped gets every byte
//! once it reads again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use super::grpc::{region_as, ECHO_ROUTE};
use crate::support::{iuid, proxy, table, BoxError, Running, TestResult};

/// The size of each of a flood's small frames.
const FRAME: usize = 20;

/// An HTTP/2 backend: `/echo.Echo/Flood` answers `frames` DATA frames of
/// `size` bytes, then `grpc-status: 0`, and says `queued` on the channel
/// once they are all handed to its connection; `/echo.Echo/Wait` answers
/// one frame of `size` bytes once `release` is notified.
async fn backend(
    (frames, size): (usize, usize),
    release: Arc<Notify>,
) -> Result<(SocketAddr, mpsc::Receiver<&'static str>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (said, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (said, release) = (said.clone(), Arc::clone(&release));
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else { return };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let (said, release) = (said.clone(), Arc::clone(&release));
                    tokio::spawn(async move {
                        let flood = req.uri().path().ends_with("/Flood");
                        if !flood {
                            release.notified().await;
                        }
                        let head = http::Response::builder().header("content-type", "application/grpc").body(());
                        let Some(mut tx) = head.ok().and_then(|h| respond.send_response(h, false).ok()) else {
                            return;
                        };
                        let (count, frame) = (if flood { frames } else { 1 }, Bytes::from(vec![b'x'; size]));
                        for _ in 0..count {
                            if tx.send_data(frame.clone(), false).is_err() {
                                return;
                            }
                        }
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        let _ = tx.send_trailers(trailers);
                        if flood {
                            let _ = said.send("queued").await;
                        }
                    });
                }
            });
        }
    });
    Ok((addr, rx))
}

/// The proxy with region kz served by the backend at `at` over h2c.
async fn proxy_to(at: SocketAddr) -> Result<Running, BoxError> {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let yaml = table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + ECHO_ROUTE;
    proxy(&region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{at}\"]"))).await
}

/// A call `method` to the proxy over HTTP/2, routed to kz; its body ended.
async fn call(p: &Running, method: &str) -> Result<h2::client::ResponseFuture, BoxError> {
    let socket = tokio::net::TcpStream::connect(p.addr).await?;
    let (client, conn) = h2::client::handshake(socket).await?;
    tokio::spawn(conn);
    let head = http::Request::post(format!("http://{}/echo.Echo/{method}", p.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", iuid(7))
        .body(())?;
    let (answer, _) = client.ready().await?.send_request(head, true)?;
    Ok(answer)
}

/// The bytes of an HTTP/2 answer's body, and its `grpc-status`.
async fn read_all(resp: http::Response<h2::RecvStream>) -> Result<(usize, Option<String>), BoxError> {
    let mut body = resp.into_body();
    let mut got = 0;
    while let Some(data) = body.data().await {
        let data = data?;
        got += data.len();
        let _ = body.flow_control().release_capacity(data.len());
    }
    let trailers = body.trailers().await?;
    Ok((got, trailers.and_then(|t| t.get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_string))))
}

/// The other call on the backend's connection, waiting there while the
/// flood is held, answered (`size` bytes) once released.
async fn other_call_answers(waiting: h2::client::ResponseFuture, release: &Notify, size: usize) -> TestResult {
    release.notify_one();
    let resp = tokio::time::timeout(Duration::from_secs(10), waiting).await??;
    let (got, status) = tokio::time::timeout(Duration::from_secs(10), read_all(resp)).await??;
    assert_eq!((got, status.as_deref()), (size, Some("0")), "the other call on the connection failed");
    Ok(())
}

#[tokio::test]
async fn h2_streams_a_client_that_stops_reading_small_frames_harms_no_other_call() -> TestResult {
    const FRAMES: usize = 30_000;
    let release = Arc::new(Notify::new());
    let (at, mut said) = backend((FRAMES, FRAME), Arc::clone(&release)).await?;
    let p = proxy_to(at).await?;
    // Opens the backend connection; waits on it until released.
    let waiting = call(&p, "Wait").await?;
    // Its client takes the first 64 KiB (its window), then reads nothing.
    let flood = tokio::time::timeout(Duration::from_secs(10), call(&p, "Flood").await?).await??;
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), said.recv()).await?, Some("queued"));
    // The frames reach the proxy, which holds them for the client.
    tokio::time::sleep(Duration::from_millis(500)).await;
    other_call_answers(waiting, &release, FRAME).await?;
    let (got, status) = tokio::time::timeout(Duration::from_secs(20), read_all(flood)).await??;
    assert_eq!((got, status.as_deref()), (FRAMES * FRAME, Some("0")), "the held answer lost bytes");
    Ok(())
}

#[tokio::test]
async fn h2_streams_an_http1_client_that_stops_reading_small_frames_harms_no_other_call() -> TestResult {
    // More than the sockets between the proxy and the client hold (the
    // proxy's send buffer grows to 4 MiB on Linux; the client's receive
    // buffer is set small).
    const FRAMES: usize = 300_000;
    let release = Arc::new(Notify::new());
    let (at, mut said) = backend((FRAMES, FRAME), Arc::clone(&release)).await?;
    let p = proxy_to(at).await?;
    let waiting = call(&p, "Wait").await?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(8192)?;
    let mut client = socket.connect(p.addr).await?;
    let head = format!("GET /echo.Echo/Flood HTTP/1.1\r\nhost: x\r\nx-entity-id: {}\r\n\r\n", iuid(7));
    client.write_all(head.as_bytes()).await?;
    assert_eq!(tokio::time::timeout(Duration::from_secs(20), said.recv()).await?, Some("queued"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    other_call_answers(waiting, &release, FRAME).await?;
    let body = tokio::time::timeout(Duration::from_secs(30), chunked_body(&mut client)).await??;
    assert_eq!(body, FRAMES * FRAME, "the held answer lost bytes");
    Ok(())
}

#[tokio::test]
async fn h2_streams_clients_that_stop_reading_hold_only_their_own_windows() -> TestResult {
    // Each answer is 2 MiB in 16 KiB frames: more than a stream's window.
    const SIZE: usize = 16 * 1024;
    let release = Arc::new(Notify::new());
    let (at, mut said) = backend((128, SIZE), Arc::clone(&release)).await?;
    let p = proxy_to(at).await?;
    let waiting = call(&p, "Wait").await?;
    let mut floods = Vec::new();
    for _ in 0..6 {
        floods.push(tokio::time::timeout(Duration::from_secs(10), call(&p, "Flood").await?).await??);
        assert_eq!(tokio::time::timeout(Duration::from_secs(10), said.recv()).await?, Some("queued"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Six streams hold what they may; the connection still carries the other call's answer.
    other_call_answers(waiting, &release, SIZE).await?;
    for flood in floods {
        let (got, status) = tokio::time::timeout(Duration::from_secs(20), read_all(flood)).await??;
        assert_eq!((got, status.as_deref()), (128 * SIZE, Some("0")), "a held answer lost bytes");
    }
    Ok(())
}

/// The length of a chunked answer's body, read to its last chunk.
async fn chunked_body(s: &mut tokio::net::TcpStream) -> Result<usize, BoxError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut at = loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err("closed before the head ended".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200") && head.contains("transfer-encoding: chunked"), "{head}");
            break end + 4;
        }
    };
    let mut body = 0;
    loop {
        // Enough bytes for the next chunk's size line and its data.
        let line_end = loop {
            if let Some(i) = buf[at..].windows(2).position(|w| w == b"\r\n") {
                break at + i;
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(format!("closed after {body} bytes of body").into());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&buf[at..line_end])?.trim(), 16)?;
        if size == 0 {
            return Ok(body);
        }
        while buf.len() < line_end + 2 + size + 2 {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(format!("closed after {body} bytes of body").into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        body += size;
        at = line_end + 2 + size + 2;
        if at > 1 << 20 {
            buf.drain(..at);
            at = 0;
        }
    }
}
