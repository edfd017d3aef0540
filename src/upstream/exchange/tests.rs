use super::*;
use crate::routing::Upstream;
use crate::upstream::pool::tests::{endpoint, outgoing, plain, pool};
use crate::upstream::pool::{Limits, Pool};
use http::header::{self, HeaderMap, HeaderValue};
use http_body_util::{BodyExt, Empty, Full};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const LIMITS: Limits = Limits::new(8, 8);

/// A backend that reads one request head (and `body` more bytes) per
/// answer and writes the scripted answers in turn on one connection; the
/// request bytes it saw come back through the handle.
async fn scripted(
    answers: Vec<&'static [u8]>,
    body: usize,
) -> std::io::Result<(Upstream, tokio::task::JoinHandle<Vec<u8>>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let up = endpoint(listener.local_addr()?).map_err(|e| std::io::Error::other(e.to_string()))?;
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let Ok((mut s, _)) = listener.accept().await else { return seen };
        for answer in answers {
            let start = seen.len();
            let mut buf = [0u8; 4096];
            while !seen[start..].windows(4).any(|w| w == b"\r\n\r\n")
                || seen.len() - head_end(&seen[start..]) - start < body
            {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return seen,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            if s.write_all(answer).await.is_err() {
                return seen;
            }
        }
        // Keeps the connection open a moment, then closes it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen
    });
    Ok((up, task))
}

/// Where the head in `b` ends (after its blank line), or `b.len()`.
fn head_end(b: &[u8]) -> usize {
    b.windows(4).position(|w| w == b"\r\n\r\n").map_or(b.len(), |i| i + 4)
}

async fn get(pool: &Pool, up: &Upstream, method: &Method) -> Result<(u16, Bytes), Box<dyn std::error::Error>> {
    let conn = plain(pool, up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let headers = HeaderMap::new();
    let target = http::uri::PathAndQuery::from_static("/x");
    let out = outgoing(method, &target, up, &headers);
    let resp = exchange(conn, &out, &mut Empty::<Bytes>::new()).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

#[tokio::test]
async fn every_response_framing_is_read_and_the_connection_reused() -> TestResult {
    let answers: Vec<&'static [u8]> = vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: 1\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nuntil close",
    ];
    let (up, backend) = scripted(answers, 0).await?;
    let pool = pool();
    let get_ = Method::GET;
    assert_eq!(get(&pool, &up, &get_).await?, (200, Bytes::from("hello")));
    assert_eq!(get(&pool, &up, &get_).await?, (200, Bytes::from("abcde")));
    assert_eq!(get(&pool, &up, &get_).await?, (201, Bytes::from("ok")), "1xx heads are skipped");
    assert_eq!(get(&pool, &up, &get_).await?, (204, Bytes::new()));
    assert_eq!(get(&pool, &up, &get_).await?, (304, Bytes::new()), "304 has no body whatever its length says");
    assert_eq!(get(&pool, &up, &Method::HEAD).await?, (200, Bytes::new()), "HEAD has no body");
    assert_eq!(pool.kept(&up.pool_key), 1, "every framing so far left the connection reusable");
    assert_eq!(get(&pool, &up, &get_).await?, (200, Bytes::from("until close")));
    assert_eq!(pool.kept(&up.pool_key), 0, "a body delimited by the close ends the connection");
    assert_eq!(pool.connects(), 1, "one connection carried all seven");
    backend.await?;
    Ok(())
}

#[tokio::test]
async fn connection_close_and_broken_bodies_are_never_reused() -> TestResult {
    let (up, _b) = scripted(vec![b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"], 0).await?;
    let pool = pool();
    assert_eq!(get(&pool, &up, &Method::GET).await?, (200, Bytes::from("ok")));
    assert_eq!(pool.kept(&up.pool_key), 0);

    // A chunk size that is not hex is an error of the body, not a short body.
    let (up, _b) =
        scripted(vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n"], 0).await?;
    let err = get(&pool, &up, &Method::GET).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("chunk size"), "{err}");
    assert_eq!(pool.kept(&up.pool_key), 0);

    // Cut short: closed before the promised length.
    let (up, b) = scripted(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhal"], 0).await?;
    let pool2 = pool;
    let conn = plain(&pool2, &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let headers = HeaderMap::new();
    let target = http::uri::PathAndQuery::from_static("/x");
    let out = outgoing(&Method::GET, &target, &up, &headers);
    let resp = exchange(conn, &out, &mut Empty::<Bytes>::new()).await.map_err(|e| e.to_string())?;
    b.abort();
    let err = resp.into_body().collect().await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("closed before the end of the body"), "{err}");
    Ok(())
}

#[tokio::test]
async fn invalid_response_heads_are_bad_responses() -> TestResult {
    for answer in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!"[..],
        b"HTTX/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
    ] {
        let (up, _b) = scripted(vec![answer], 0).await?;
        let conn = plain(&pool(), &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
        let headers = HeaderMap::new();
        let target = http::uri::PathAndQuery::from_static("/x");
        let out = outgoing(&Method::GET, &target, &up, &headers);
        match exchange(conn, &out, &mut Empty::<Bytes>::new()).await {
            Err(ExchangeError::BadResponse(_)) => {}
            other => {
                return Err(
                    format!("{:?}: expected a bad response, got {other:?}", String::from_utf8_lossy(answer)).into()
                )
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn request_bodies_go_with_their_framing() -> TestResult {
    // A body of known size gets a Content-Length; the head and body leave together.
    let (up, backend) = scripted(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"], 5).await?;
    let conn = plain(&pool(), &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let headers = HeaderMap::new();
    let target = http::uri::PathAndQuery::from_static("/p");
    let out = outgoing(&Method::POST, &target, &up, &headers);
    let resp = exchange(conn, &out, &mut Full::new(Bytes::from("hello"))).await.map_err(|e| e.to_string())?;
    assert_eq!(resp.status(), 200);
    let seen = String::from_utf8(backend.await?)?;
    assert!(seen.starts_with("POST /p HTTP/1.1\r\nhost: 127.0.0.1:"), "{seen}");
    assert!(seen.ends_with("content-length: 5\r\n\r\nhello"), "{seen}");

    // A body of unknown length goes chunked.
    let (up, backend) = scripted(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"], 15).await?;
    let conn = plain(&pool(), &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let mut headers = HeaderMap::new();
    headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    let target = http::uri::PathAndQuery::from_static("/p");
    let out = outgoing(&Method::GET, &target, &up, &headers);
    let resp = exchange(conn, &out, &mut Full::new(Bytes::from("hello"))).await.map_err(|e| e.to_string())?;
    assert_eq!(resp.status(), 200);
    let seen = String::from_utf8(backend.await?)?;
    assert!(seen.ends_with("transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{seen}");
    Ok(())
}

/// A body that sends one piece, then never ends (a client still uploading).
struct Endless(bool);

impl Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.0 {
            return Poll::Pending;
        }
        self.0 = true;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from("part")))))
    }
}

#[tokio::test]
async fn an_answer_before_the_upload_ends_is_returned_and_the_connection_not_kept() -> TestResult {
    let (up, _backend) = scripted(vec![b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 3\r\n\r\nbig"], 0).await?;
    let pool = pool();
    let conn = plain(&pool, &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1000000"));
    let target = http::uri::PathAndQuery::from_static("/upload");
    let out = outgoing(&Method::POST, &target, &up, &headers);
    let answer = tokio::time::timeout(Duration::from_secs(5), exchange(conn, &out, &mut Endless(false))).await?;
    let resp = answer.map_err(|e| e.to_string())?;
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.into_body().collect().await?.to_bytes(), "big");
    assert_eq!(pool.kept(&up.pool_key), 0, "the rest of the upload was never sent: the connection cannot be reused");
    Ok(())
}

#[tokio::test]
async fn a_kept_connection_closed_by_the_server_is_stale_for_idempotent_methods_only() -> TestResult {
    // The server answers, then closes without `Connection: close`.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let up = endpoint(listener.local_addr()?)?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
            let _ = s.read(&mut buf).await;
            // Reads the next request, then closes without answering it.
        }
    });
    let pool = pool();
    assert_eq!(get(&pool, &up, &Method::GET).await?.0, 200);
    // (method, body, the error: stale with the body taken or not, or `None`: failed).
    let cases: [(Method, &'static [u8], Option<bool>); 3] =
        [(Method::GET, b"", Some(false)), (Method::PUT, b"{}", Some(true)), (Method::POST, b"", None)];
    for (method, body, stale) in cases {
        let conn = plain(&pool, &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
        assert!(conn.reused, "the kept connection is taken again");
        let headers = HeaderMap::new();
        let target = http::uri::PathAndQuery::from_static("/x");
        let out = outgoing(&method, &target, &up, &headers);
        match (exchange(conn, &out, &mut Full::new(Bytes::from_static(body))).await, stale) {
            (Err(ExchangeError::Stale { taken, .. }), Some(want)) if taken == want => {}
            (Err(ExchangeError::Io(_)), None) => {}
            (other, _) => return Err(format!("{method}: got {other:?}").into()),
        }
        // A fresh connection for the next round, then it is kept again.
        assert_eq!(get(&pool, &up, &Method::GET).await?.0, 200);
    }
    Ok(())
}

#[tokio::test]
async fn a_head_that_arrives_a_byte_at_a_time_is_read() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let up = endpoint(listener.local_addr()?)?;
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else { return };
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        let _ = s.set_nodelay(true);
        for b in b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok" {
            if s.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    assert_eq!(get(&pool(), &up, &Method::GET).await?, (200, Bytes::from("ok")));
    Ok(())
}

// Bodies held whole take nothing off any connection.
impl TakeIn for Empty<Bytes> {
    fn take_in(self: Pin<&mut Self>, _: &mut Context<'_>) {}
}

impl TakeIn for Full<Bytes> {
    fn take_in(self: Pin<&mut Self>, _: &mut Context<'_>) {}
}

impl TakeIn for Endless {
    fn take_in(self: Pin<&mut Self>, _: &mut Context<'_>) {}
}

/// A body of 64 KiB frames that never ends, as fast as it is read; says
/// on `taken` when it is asked to take in what has arrived.
struct Flood {
    taken: Arc<tokio::sync::Notify>,
}

impl Body for Flood {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; 64 * 1024])))))
    }
}

impl TakeIn for Flood {
    fn take_in(self: Pin<&mut Self>, _: &mut Context<'_>) {
        self.taken.notify_one();
    }
}

#[tokio::test]
async fn an_upload_the_upstream_does_not_take_asks_its_body_to_take_in() -> TestResult {
    // A server that reads nothing: the connection's buffers fill.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let up = endpoint(listener.local_addr()?)?;
    tokio::spawn(async move {
        let held = listener.accept().await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(held);
    });
    let pool = pool();
    let conn = plain(&pool, &up, LIMITS).await.map_err(|e| format!("{e:?}"))?;
    let (headers, target) = (HeaderMap::new(), http::uri::PathAndQuery::from_static("/upload"));
    let out = outgoing(&Method::POST, &target, &up, &headers);
    let taken = Arc::new(tokio::sync::Notify::new());
    let mut body = Flood { taken: Arc::clone(&taken) };
    tokio::select! {
        _ = exchange(conn, &out, &mut body) => return Err("the exchange ended".into()),
        _ = taken.notified() => {}
        _ = tokio::time::sleep(Duration::from_secs(10)) => return Err("the body was never asked to take in".into()),
    }
    Ok(())
}
