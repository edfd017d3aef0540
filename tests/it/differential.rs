//! The proxy's HTTP/1.1 request reader against hyper's, on the same bytes.
//!
//! Each request is sent to a hyper HTTP/1.1 server on a loopback socket
//! (which records what its service was given: method, target, version,
//! fields and body, or that the body failed) and read with
//! `http1::parse_request` and the body `Decoder`. Both must accept or both
//! refuse, and what they accept must be the same request. The cases are a
//! hand-written corpus (line ends, framing, smuggling shapes, chunk
//! syntax) and every byte value placed in the method, the target, a field
//! name and a field value.
//!
//! Where the proxy deliberately differs from hyper, the case is listed
//! in [`STRICTER`] with the reason; each such case must still be refused by
//! the proxy and accepted by hyper, so the list cannot go stale silently.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use shardgate::http1::{parse_request, Decoded, Decoder, RequestLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::support::{BoxError, TestResult};

/// What a reader made of a request.
#[derive(Debug, PartialEq)]
enum Read {
    Request(Box<Seen>),
    Refused,
}

/// A request as a reader gave it on.
#[derive(Debug, PartialEq)]
struct Seen {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
}

const LIMITS: RequestLimits = RequestLimits { max_head_bytes: 16 * 1024, max_headers: 100 };

/// Cases the proxy refuses and hyper accepts, on purpose.
const STRICTER: &[(&str, &str)] = &[
    (
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Content-Length with Transfer-Encoding is refused, not read as chunked (RFC 9112 §6.3 allows both; \
         refusing leaves no reading for a later hop to disagree with)",
    ),
    (
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
        "the same, in the other order",
    ),
];

/// Cases the proxy reads and hyper refuses, on purpose.
const LAXER: &[(&str, &str)] = &[(
    "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
    "a later HTTP/1 minor version is read as HTTP/1.1, the highest this server speaks (RFC 9112 §2.3)",
)];

/// The proxy's reading of `bytes`: the head, then the body to its end.
fn ours(bytes: &[u8]) -> Read {
    let mut buf = BytesMut::from(bytes);
    let Ok(Some(head)) = parse_request(&mut buf, &LIMITS) else { return Read::Refused };
    let mut decoder = Decoder::new(head.framing);
    let mut body = BytesMut::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
            Ok(Decoded::Done) => break,
            Ok(Decoded::NeedMore) | Err(_) => return Read::Refused,
        }
    }
    Read::Request(Box::new(Seen {
        method: head.method,
        uri: head.uri,
        version: head.version,
        headers: head.headers,
        body: body.freeze(),
    }))
}

/// A hyper HTTP/1.1 server that reports each request it reads.
async fn hyper_server() -> Result<(std::net::SocketAddr, mpsc::UnboundedReceiver<Read>), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let read = match body.collect().await {
                            Ok(b) => Read::Request(Box::new(Seen {
                                method: parts.method,
                                uri: parts.uri,
                                version: parts.version,
                                headers: parts.headers,
                                body: b.to_bytes(),
                            })),
                            Err(_) => Read::Refused,
                        };
                        let _ = tx.send(read);
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<Bytes>::new()))
                    }
                });
                // Half-close: the client shuts its side after the request, so a
                // head hyper waits on ends at once instead of at a timeout.
                let _ = hyper::server::conn::http1::Builder::new()
                    .half_close(true)
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((addr, rx))
}

/// hyper's reading of `bytes`: what its service got, or `Refused` when
/// it answered without calling the service (a 4xx for the head).
async fn theirs(
    addr: std::net::SocketAddr,
    rx: &mut mpsc::UnboundedReceiver<Read>,
    bytes: &[u8],
) -> Result<Read, BoxError> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(bytes).await?;
    stream.shutdown().await?;
    // Wait for hyper's answer (or its close), then for what the service saw.
    let mut answer = [0u8; 512];
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut answer)).await;
    // The service reports before it answers, so by now its report is in.
    Ok(rx.try_recv().unwrap_or(Read::Refused))
}

/// The hand-written corpus: requests both readers must agree on.
fn corpus() -> Vec<String> {
    let mut cases: Vec<String> = [
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /v1/orders/x?y=1&z HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nX-B:\r\n\r\n",
        "GET / HTTP/1.1\nHost: a\nX-Lf: only\n\n",
        "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "get /lower HTTP/1.1\r\nHost: a\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET http://example.com:8080/p?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Space:    padded value   \r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Tab:\tv\t\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Utf8: caf\u{e9}\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        // refused by both
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\nhello",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
        "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Cr: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Space : a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n: empty-name\r\n\r\n",
        "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
        "GET /\r\nHost: a\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
        "G@T / HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cases.extend(STRICTER.iter().chain(LAXER).map(|(case, _)| case.to_string()));
    cases
}

/// Every byte value in the method, the target, a field name and a field value.
fn byte_cases() -> Vec<Vec<u8>> {
    let mut cases = Vec::new();
    for b in 0..=255u8 {
        for (before, after) in [
            (&b"GE"[..], &b"T / HTTP/1.1\r\nHost: a\r\n\r\n"[..]),
            (b"GET /a", b"b HTTP/1.1\r\nHost: a\r\n\r\n"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-N", b"m: v\r\n\r\n"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-V: v", b"v\r\n\r\n"),
        ] {
            let mut case = before.to_vec();
            case.push(b);
            case.extend_from_slice(after);
            cases.push(case);
        }
    }
    cases
}

#[tokio::test]
async fn the_request_reader_agrees_with_hyper_or_differs_on_purpose() -> TestResult {
    let (addr, mut rx) = hyper_server().await?;
    let mut cases: Vec<Vec<u8>> = corpus().into_iter().map(String::into_bytes).collect();
    cases.extend(byte_cases());
    let mut disagree = Vec::new();
    let mut accepted = 0;
    for case in &cases {
        let (mine, hypers) = (ours(case), theirs(addr, &mut rx, case).await?);
        let listed = |list: &[(&str, &str)]| list.iter().any(|(s, _)| s.as_bytes() == case.as_slice());
        let fine = if listed(STRICTER) {
            mine == Read::Refused && hypers != Read::Refused
        } else if listed(LAXER) {
            mine != Read::Refused && hypers == Read::Refused
        } else {
            mine == hypers
        };
        if !fine {
            disagree.push(format!("{:?}\n  ours:  {mine:?}\n  hyper: {hypers:?}", String::from_utf8_lossy(case)));
        }
        accepted += usize::from(mine != Read::Refused);
    }
    assert!(disagree.is_empty(), "{} of {} cases disagree:\n{}", disagree.len(), cases.len(), disagree.join("\n"));
    // Both outcomes are exercised, not only refusals.
    assert!(accepted > 100 && accepted < cases.len() - 100, "{accepted} of {} accepted", cases.len());
    Ok(())
}
