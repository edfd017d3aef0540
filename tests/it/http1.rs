//! The client leg's HTTP/1.1 server on the wire: pipelining, `Expect:
//! 100-continue`, HTTP/1.0 clients, how a response body is framed for the
//! client (length, chunked, until close), HEAD, and idle keep-alive
//! connections. Raw sockets against the proxy, real backends behind it.

use std::time::{Duration, Instant};

use shardgate::ids::Iuid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    backend, draining_proxy, field, proxy, raw, raw_backend, read_head, read_sized, read_until_closed, table,
    three_backends, BoxError, Draining, Running, TestResult, WAIT,
};

/// An iUID of country 7 (KZ, served by the kz backend).
fn id() -> String {
    Iuid::from_fields(1_700_000_000_000, 7, 3, 12345).to_string()
}

async fn world(extra: &str) -> Result<([Running; 3], Running), BoxError> {
    let backends = three_backends().await?;
    let p = proxy(&table(backends[0].addr, backends[1].addr, backends[2].addr, extra)).await?;
    Ok((backends, p))
}

/// One response cut out of `bytes`: status, head (lowercased), body; and the rest.
fn next_response(bytes: &[u8]) -> Option<(u16, String, Vec<u8>, &[u8])> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let status = head.get(9..12)?.parse().ok()?;
    let rest = &bytes[end..];
    if status == 204 || status == 304 {
        return Some((status, head, Vec::new(), rest));
    }
    if let Some(len) = field(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        return Some((status, head, rest.get(..len)?.to_vec(), &rest[len..]));
    }
    if field(&head, "transfer-encoding").as_deref() == Some("chunked") {
        let (body, rest) = dechunk(rest)?;
        return Some((status, head, body, rest));
    }
    Some((status, head, rest.to_vec(), &[]))
}

/// A chunked body decoded (no extensions or trailers expected), and what follows it.
fn dechunk(mut bytes: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut body = Vec::new();
    loop {
        let line = bytes.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&bytes[..line]).ok()?, 16).ok()?;
        bytes = &bytes[line + 2..];
        if size == 0 {
            return Some((body, bytes.get(2..)?));
        }
        body.extend_from_slice(bytes.get(..size)?);
        bytes = bytes.get(size + 2..)?;
    }
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> TestResult {
    let ([_eu, kz, _us], p) = world("").await?;
    let id = id();
    let requests = format!(
        "GET /v1/orders/{id}?n=1 HTTP/1.1\r\nHost: x\r\n\r\n\
         POST /v1/orders/{id}?n=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
         POST /v1/orders/{id}?n=3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
         GET /v1/orders/{id}?n=4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let r = raw(p.addr, requests.as_bytes(), WAIT).await?;
    assert!(r.closed, "the last request asked to close: {}", r.text());
    let mut rest = &r.bytes[..];
    let mut seen = Vec::new();
    while let Some((status, _, body, more)) = next_response(rest) {
        let json: serde_json::Value = serde_json::from_slice(&body)?;
        seen.push((status, json["query"].as_str().unwrap_or("").to_string(), json["body_bytes"].as_u64()));
        rest = more;
    }
    let want = [(200, "n=1", Some(0)), (200, "n=2", Some(5)), (200, "n=3", Some(3)), (200, "n=4", Some(0))];
    let want: Vec<_> = want.iter().map(|(s, q, b)| (*s, q.to_string(), *b)).collect();
    assert_eq!(seen, want, "{}", r.text());
    assert_eq!(kz.hits(), 4);
    Ok(())
}

#[tokio::test]
async fn expect_continue_is_answered_before_the_body_is_sent() -> TestResult {
    let ([_eu, kz, _us], p) = world("").await?;
    let mut s = TcpStream::connect(p.addr).await?;
    let head =
        format!("PUT /v1/orders/{} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", id());
    s.write_all(head.as_bytes()).await?;
    // The client waits for the interim answer before it sends the body.
    let interim = read_head(&mut s).await?;
    assert!(interim.starts_with("HTTP/1.1 100 Continue\r\n"), "{interim}");
    s.write_all(b"hello").await?;
    let (head, body) = read_sized(&mut s).await?;
    assert!(head.starts_with("http/1.1 200 "), "{head}");
    let json: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(json["body_bytes"], 5);
    assert_eq!(kz.hits(), 1);
    Ok(())
}

#[tokio::test]
async fn http10_clients_close_unless_they_ask_to_keep_alive() -> TestResult {
    let ([_eu, _kz, _us], p) = world("").await?;
    let id = id();
    // No keep-alive asked: the answer says close, and the connection closes.
    let r = raw(p.addr, format!("GET /v1/orders/{id} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes(), WAIT).await?;
    let (status, head, _, _) = next_response(&r.bytes).ok_or("no response")?;
    assert_eq!((status, field(&head, "connection").as_deref(), r.closed), (200, Some("close"), true), "{head}");
    // Asked: the answer says keep-alive, and a second request is served on the same connection.
    let mut s = TcpStream::connect(p.addr).await?;
    let ask = format!("GET /v1/orders/{id} HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
    s.write_all(ask.as_bytes()).await?;
    let (head, _) = read_sized(&mut s).await?;
    assert_eq!(field(&head, "connection").as_deref(), Some("keep-alive"), "{head}");
    s.write_all(format!("GET /v1/orders/{id} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let second = read_until_closed(&mut s, WAIT).await?;
    assert_eq!(second.status(), Some(200), "{}", second.text());
    assert!(second.closed);
    // A body of unknown length goes to an HTTP/1.0 client until the close, not chunked.
    let r = raw(p.addr, format!("GET /t/chunked/{id} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes(), WAIT).await?;
    let (status, head, body, _) = next_response(&r.bytes).ok_or("no response")?;
    assert_eq!(status, 200, "{head}");
    assert!(field(&head, "transfer-encoding").is_none() && field(&head, "content-length").is_none(), "{head}");
    assert_eq!(String::from_utf8_lossy(&body), "chunk0;chunk1;chunk2;chunk3;chunk4;");
    assert!(r.closed);
    Ok(())
}

#[tokio::test]
async fn every_answer_has_one_request_id_and_an_upstreams_the_proxys_via() -> TestResult {
    let ([_eu, _kz, _us], p) = world("").await?;
    let name = p.proxy.as_ref().ok_or("no proxy")?.name().to_lowercase();
    let id = id();
    let lines = |head: &str, name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.trim().to_string())
            .collect::<Vec<_>>()
    };
    // (request, status, the request id the answer must carry if the client set one, Via expected)
    let cases = [
        (format!("GET /v1/orders/{id} HTTP/1.0\r\nHost: x\r\n\r\n"), 200, None, true),
        (
            format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nX-Request-Id: rid-11\r\nConnection: close\r\n\r\n"),
            200,
            Some("rid-11"),
            true,
        ),
        (
            "GET /v1/orders/not-an-id HTTP/1.0\r\nHost: x\r\nX-Request-Id: rid-bad\r\n\r\n".to_string(),
            400,
            Some("rid-bad"),
            false,
        ),
        ("GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(), 404, None, false),
    ];
    for (ask, want_status, want_id, want_via) in cases {
        let r = raw(p.addr, ask.as_bytes(), WAIT).await?;
        let (status, head, _, _) = next_response(&r.bytes).ok_or("no response")?;
        assert_eq!(status, want_status, "{ask}: {head}");
        let ids = lines(&head, "x-request-id");
        assert_eq!(ids.len(), 1, "{ask}: {head}");
        if let Some(want) = want_id {
            assert_eq!(ids[0], want, "{ask}: {head}");
        }
        let via = lines(&head, "via");
        let want_via = if want_via { vec![format!("1.1 {name}")] } else { vec![] };
        assert_eq!(via, want_via, "{ask}: {head}");
    }
    Ok(())
}

#[tokio::test]
async fn response_bodies_are_framed_for_the_client() -> TestResult {
    let ([_eu, _kz, _us], p) = world("").await?;
    let id = id();
    // Unknown length to an HTTP/1.1 client: chunked; then HEAD (no body) and
    // 204 (no body) on the same connection, and a last request that closes.
    let requests = format!(
        "GET /t/chunked/{id} HTTP/1.1\r\nHost: x\r\n\r\n\
         HEAD /v1/orders/{id} HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /t/status204/{id} HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let r = raw(p.addr, requests.as_bytes(), WAIT).await?;
    let (status, head, body, rest) = next_response(&r.bytes).ok_or("no first response")?;
    assert_eq!((status, field(&head, "transfer-encoding").as_deref()), (200, Some("chunked")), "{head}");
    assert_eq!(String::from_utf8_lossy(&body), "chunk0;chunk1;chunk2;chunk3;chunk4;");
    // HEAD: the length of the body a GET would get, and no body.
    let end = rest.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no HEAD response")? + 4;
    let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ") && field(&head, "content-length").is_some(), "{head}");
    let rest = &rest[end..];
    let (status, head, body, rest) = next_response(rest).ok_or("no 204")?;
    assert_eq!((status, body.len()), (204, 0), "{head}");
    let (status, head, body, rest) = next_response(rest).ok_or("no last response")?;
    assert_eq!(status, 200, "{head}");
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    assert!(rest.is_empty() && r.closed, "{}", r.text());
    // Every answer carries a Date: the upstream's, or one the proxy adds.
    assert!(field(&head, "date").is_some_and(|d| d.ends_with(" gmt")), "{head}");
    Ok(())
}

/// Sends `GET {path}` on `s` and reads its answer.
async fn get_on(s: &mut TcpStream, path: &str) -> TestResult {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
    read_sized(s).await?;
    Ok(())
}

/// Asserts that `s`, now sent nothing more, is closed without an answer at
/// a 400 ms head-read timeout: not before it, and not at the (60 s) idle timeout.
async fn closes_at_the_head_timeout(s: &mut TcpStream) -> TestResult {
    let waited = Instant::now();
    let r = read_until_closed(s, WAIT).await?;
    let elapsed = waited.elapsed();
    assert!(r.closed && r.bytes.is_empty(), "{}", r.text());
    assert!(elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3), "{elapsed:?}");
    Ok(())
}

#[tokio::test]
async fn an_idle_keep_alive_connection_closes_at_header_read_timeout() -> TestResult {
    let ([_eu, _kz, _us], p) = world("server: { header_read_timeout: 400ms }").await?;
    let mut s = TcpStream::connect(p.addr).await?;
    get_on(&mut s, &format!("/v1/orders/{}", id())).await?;
    closes_at_the_head_timeout(&mut s).await
}

#[tokio::test]
async fn the_head_timeout_holds_after_a_request_that_outlasted_it() -> TestResult {
    // The head-read timer fires while the slow answer (2 s) is in flight;
    // re-armed for the next head, it must still close the idle connection.
    let ([_eu, _kz, _us], p) = world("server: { header_read_timeout: 400ms }").await?;
    let mut s = TcpStream::connect(p.addr).await?;
    get_on(&mut s, &format!("/v1/orders/{}", id())).await?;
    // The server now waits for the second head, its timer armed; the slow
    // request arrives before the deadline and is still in flight past it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    get_on(&mut s, &format!("/t/slow/{}", id())).await?;
    closes_at_the_head_timeout(&mut s).await
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight_without_waiting_for_idle_sockets() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    // A long head-read timeout: idle sockets must not be what ends the wait.
    let yaml = table(eu.addr, kz.addr, us.addr, "server: { header_read_timeout: 30s }");
    let Draining { addr, begin, server } = draining_proxy(&yaml).await?;
    let id = id();
    // A socket that has sent nothing, one idle between requests, and a request in flight.
    let mut silent = TcpStream::connect(addr).await?;
    let mut idle = TcpStream::connect(addr).await?;
    idle.write_all(format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
    read_sized(&mut idle).await?;
    let mut slow = TcpStream::connect(addr).await?;
    slow.write_all(format!("GET /t/slow/{id} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    begin.send(()).map_err(|()| "server gone")?;
    let finished = tokio::time::timeout(Duration::from_secs(10), server).await???;
    let elapsed = started.elapsed();
    assert!(finished, "in-flight requests did not finish within the grace period");
    assert!(elapsed < Duration::from_secs(5), "shutdown took {elapsed:?}");
    // The request in flight got its answer, marked as the connection's last.
    let r = read_until_closed(&mut slow, WAIT).await?;
    let (status, head, _, _) = next_response(&r.bytes).ok_or("no answer")?;
    assert_eq!((status, field(&head, "connection").as_deref(), r.closed), (200, Some("close"), true), "{head}");
    // The others were closed without an answer.
    for s in [&mut silent, &mut idle] {
        let r = read_until_closed(s, WAIT).await?;
        assert!(r.closed && r.bytes.is_empty(), "{}", r.text());
    }
    Ok(())
}

#[tokio::test]
async fn a_body_the_proxy_did_not_read_is_skipped_when_it_has_arrived() -> TestResult {
    let ([_eu, kz, _us], p) = world("").await?;
    let id = id();
    // No route for the first request: answered without reading its body,
    // which is in the same packet; the connection carries the next request.
    let requests = format!(
        "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world\
         POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
         GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let r = raw(p.addr, requests.as_bytes(), WAIT).await?;
    assert_eq!(r.statuses(), vec![404, 404, 200], "{}", r.text());
    assert_eq!(kz.hits(), 1);
    // A body that has not arrived is not waited for: the connection closes after the answer.
    let mut s = TcpStream::connect(p.addr).await?;
    s.write_all(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part").await?;
    let r = read_until_closed(&mut s, WAIT).await?;
    assert_eq!((r.status(), r.closed), (Some(404), true), "{}", r.text());
    assert!(r.text().to_ascii_lowercase().contains("connection: close"), "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn an_upstream_length_beside_chunked_is_not_passed_on() -> TestResult {
    // RFC 9112 §6.3: the length is ignored and must not be forwarded, or the
    // client would frame the body by it and read the next answer into this one.
    let kz = raw_backend(|mut s: TcpStream| async move {
        let answer =
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let _ = s.write_all(answer).await;
        let _ = s.shutdown().await;
    })
    .await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "upstream: { health: { interval: 0s } }")).await?;
    let id = id();
    let two = format!(
        "GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let r = raw(p.addr, two.as_bytes(), WAIT).await?;
    let (status, head, body, rest) = next_response(&r.bytes).ok_or("no first answer")?;
    assert_eq!((status, body.as_slice()), (200, &b"abc"[..]), "{}", r.text());
    assert!(field(&head, "content-length").is_none(), "{head}");
    let (status, _, body, rest) = next_response(rest).ok_or("no second answer")?;
    assert_eq!((status, body.as_slice(), rest.is_empty()), (200, &b"abc"[..], true), "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn an_upstream_length_given_twice_goes_on_once_and_an_http10_chunked_answer_is_refused() -> TestResult {
    let kz = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc").await;
        let _ = s.shutdown().await;
    })
    .await?;
    // HTTP/1.0 has no chunked coding: passed on, the client would read the
    // chunks' framing as the body.
    let us = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n").await;
        let _ = s.shutdown().await;
    })
    .await?;
    let eu = backend("eu").await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "upstream: { health: { interval: 0s } }")).await?;
    let get = |id: String| format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = raw(p.addr, get(id()).as_bytes(), WAIT).await?;
    let (status, head, body, _) = next_response(&r.bytes).ok_or("no answer")?;
    assert_eq!((status, body.as_slice()), (200, &b"abc"[..]), "{}", r.text());
    assert_eq!(head.matches("content-length:").count(), 1, "{head}");
    let us_id = Iuid::from_fields(1_700_000_000_000, 1, 3, 12345).to_string();
    let r = raw(p.addr, get(us_id).as_bytes(), WAIT).await?;
    assert_eq!(r.status(), Some(502), "{}", r.text());
    assert!(!r.text().contains("3\r\nabc"), "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn an_upstream_length_list_goes_on_as_one_value_and_a_coding_the_client_cannot_get_is_refused() -> TestResult {
    let kz = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc").await;
        let _ = s.shutdown().await;
    })
    .await?;
    // A transfer coding the client never asked for: the body is framed anew
    // on the client's leg, so passed on it would reach the client as raw
    // gzip bytes with nothing saying so.
    let us = raw_backend(|mut s: TcpStream| async move {
        let gzip = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let _ = s.write_all(gzip).await;
        let _ = s.shutdown().await;
    })
    .await?;
    let eu = backend("eu").await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "upstream: { health: { interval: 0s }, retries: 0 }")).await?;
    // Two requests on one connection: the list is one length, so the
    // connection stays open for the second.
    let id = id();
    let two = format!(
        "GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let r = raw(p.addr, two.as_bytes(), WAIT).await?;
    let (status, head, body, rest) = next_response(&r.bytes).ok_or("no first answer")?;
    assert_eq!((status, body.as_slice()), (200, &b"abc"[..]), "{}", r.text());
    assert_eq!(field(&head, "content-length").as_deref(), Some("3"), "{head}");
    assert!(field(&head, "connection").is_none(), "{head}");
    let (status, _, body, _) = next_response(rest).ok_or("no second answer")?;
    assert_eq!((status, body.as_slice()), (200, &b"abc"[..]), "{}", r.text());
    // An HTTP/2 client would reset a stream whose head has a length list.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let resp = tokio::time::timeout(WAIT, client.get(format!("http://{}/v1/orders/{id}", p.addr).parse()?)).await??;
    assert_eq!(resp.headers().get("content-length").map(|v| v.as_bytes()), Some(&b"3"[..]));
    assert_eq!(http_body_util::BodyExt::collect(resp.into_body()).await?.to_bytes(), "abc");
    let us_id = Iuid::from_fields(1_700_000_000_000, 1, 3, 12345).to_string();
    let r = raw(
        p.addr,
        format!("GET /v1/orders/{us_id} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        WAIT,
    )
    .await?;
    assert_eq!(r.status(), Some(502), "{}", r.text());
    assert!(!r.text().contains("abc"), "{}", r.text());
    Ok(())
}

/// An upstream answer with every kind of field a proxy must not pass on
/// (hop-by-hop, named by `Connection`, the mesh's), beside fields it must
/// (repeated, `Date`, `Via`, a request id the proxy replaces).
const UPSTREAM_FIELDS: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Secret\r\n\
X-Secret: 1\r\nProxy-Authenticate: Basic\r\nUpgrade: h2c\r\nTE: trailers\r\nX-Shardgate-Hops: 3\r\n\
Forwarded: by=up\r\nX-Shardgate-Leg: eu\r\nX-Shardgate-Failover: eu\r\nKeep-Alive: timeout=5\r\n\
Via: 1.1 upstream\r\nX-Request-Id: from-upstream\r\n\
Date: Tue, 01 Jan 2030 00:00:00 GMT\r\nX-Kept: Yes\r\nx-kept: again\r\n\r\nok";

/// Fields no client may see.
const NOT_PASSED_ON: [&str; 10] = [
    "connection",
    "x-secret",
    "proxy-authenticate",
    "upgrade",
    "te",
    "x-shardgate-hops",
    "forwarded",
    "x-shardgate-leg",
    "x-shardgate-failover",
    "keep-alive",
];

#[tokio::test]
async fn upstream_fields_reach_http1_and_http2_clients_filtered_the_same() -> TestResult {
    let kz = raw_backend(|mut s: TcpStream| async move {
        let _ = s.write_all(UPSTREAM_FIELDS).await;
        let _ = s.shutdown().await;
    })
    .await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "upstream: { health: { interval: 0s } }")).await?;
    let path = format!("/v1/orders/{}", id());

    // HTTP/1.1: the fields as written on the wire, in order.
    let ask = format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: client-rid-1\r\nConnection: close\r\n\r\n");
    let r = raw(p.addr, ask.as_bytes(), WAIT).await?;
    let (status, head, body, _) = next_response(&r.bytes).ok_or("no answer")?;
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]), "{}", r.text());
    let lines: Vec<(&str, &str)> = head.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k, v.trim())).collect();
    let values = |name: &str| lines.iter().filter(|(k, _)| *k == name).map(|(_, v)| *v).collect::<Vec<_>>();
    for name in NOT_PASSED_ON.into_iter().filter(|n| *n != "connection") {
        assert!(values(name).is_empty(), "{name} passed on: {head}");
    }
    assert_eq!(values("connection"), ["close"], "{head}");
    // The upstream's own length frames the body, once.
    assert_eq!(values("content-length"), ["2"], "{head}");
    assert_eq!(values("x-kept"), ["yes", "again"], "{head}");
    assert_eq!(values("date"), ["tue, 01 jan 2030 00:00:00 gmt"], "{head}");
    assert_eq!(values("x-request-id"), ["client-rid-1"], "{head}");
    let via = values("via");
    assert_eq!((via.len(), via.first()), (2, Some(&"1.1 upstream")), "{head}");

    // HTTP/2 (prior knowledge): the same fields, from the header map.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::get(p.url(&path)).header("x-request-id", "client-rid-2").body(Default::default())?;
    let resp = tokio::time::timeout(WAIT, client.request(req)).await??;
    assert_eq!((resp.version(), resp.status().as_u16()), (http::Version::HTTP_2, 200));
    let h = resp.headers();
    let all = |name: &str| h.get_all(name).iter().map(|v| v.to_str().unwrap_or("?").to_string()).collect::<Vec<_>>();
    for name in NOT_PASSED_ON {
        assert!(all(name).is_empty(), "{name} passed on: {h:?}");
    }
    assert_eq!(all("x-kept"), ["Yes", "again"], "{h:?}");
    assert_eq!(all("date"), ["Tue, 01 Jan 2030 00:00:00 GMT"], "{h:?}");
    assert_eq!(all("x-request-id"), ["client-rid-2"], "{h:?}");
    let via = all("via");
    assert_eq!((via.len(), via.first().map(String::as_str)), (2, Some("1.1 upstream")), "{h:?}");
    assert_eq!(kz.hits(), 2);
    Ok(())
}

#[tokio::test]
async fn after_a_malformed_body_the_connection_closes() -> TestResult {
    let ([_eu, kz, _us], p) = world("").await?;
    let id = id();
    // The chunk's data is followed by `X`, not CRLF: what comes after is no
    // message boundary, and the GET in it must never be served.
    let req = format!(
        "POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n\
         GET /v1/orders/{id}?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    let r = raw(p.addr, req.as_bytes(), WAIT).await?;
    assert_eq!((r.statuses(), r.closed), (vec![400], true), "{}", r.text());
    assert!(r.text().to_ascii_lowercase().contains("connection: close"), "{}", r.text());
    assert!(kz.hits() <= 1, "the pipelined GET reached the backend");
    Ok(())
}

#[tokio::test]
async fn a_client_that_leaves_abandons_its_request() -> TestResult {
    // The backend never answers; it notes when the proxy closes its side.
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = std::sync::Arc::clone(&closed);
    let kz = raw_backend(move |mut s: TcpStream| {
        let seen = std::sync::Arc::clone(&seen);
        async move {
            let mut buf = [0u8; 64];
            if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    })
    .await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let extra = "upstream: { health: { interval: 0s }, attempt_timeout: 20s, request_timeout: 30s }";
    let p = proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    let mut s = TcpStream::connect(p.addr).await?;
    s.write_all(format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\n\r\n", id()).as_bytes()).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(3);
    while !closed.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed.load(std::sync::atomic::Ordering::SeqCst), "the upstream request outlived its client");
    Ok(())
}

/// An upstream on a socket of the test's own that records every request
/// head it reads (lowercased) and answers each `200 ok`, closing.
async fn recording_upstream() -> Result<(std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>), BoxError>
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(head) = read_head(&mut s).await else { return };
                let _ = tx.send(head.to_ascii_lowercase());
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
                let _ = s.shutdown().await;
            });
        }
    });
    Ok((addr, rx))
}

/// The `(name, value)` fields of a lowercased head, in order.
fn fields(head: &str) -> Vec<(String, String)> {
    head.lines().skip(1).filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
}

#[tokio::test]
async fn the_upstream_gets_the_endpoints_host_and_the_proxys_fields_once_after_the_clients() -> TestResult {
    let (kz, mut heads) = recording_upstream().await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz, us.addr, "upstream: { health: { interval: 0s } }")).await?;
    let path = format!("/v1/orders/{}", id());
    // A client that is no trusted hop, forging every forwarded field.
    let ask = format!(
        "GET {path} HTTP/1.1\r\nHost: client.example\r\nX-A: 1\r\nX-Forwarded-For: 6.6.6.6\r\n\
         X-Forwarded-Proto: https\r\nX-Forwarded-Host: forged.example\r\nVia: 1.1 edge\r\nX-B: 2\r\n\
         Connection: close\r\n\r\n"
    );
    let r = raw(p.addr, ask.as_bytes(), WAIT).await?;
    assert_eq!(r.status(), Some(200), "{}", r.text());
    let head = tokio::time::timeout(WAIT, heads.recv()).await?.ok_or("no request upstream")?;
    let got = fields(&head);
    let values = |name: &str| got.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
    let at = |name: &str, value: &str| got.iter().position(|(k, v)| k == name && v.starts_with(value));
    assert_eq!(got.first().map(|(k, v)| (k.as_str(), v.clone())), Some(("host", kz.to_string())), "{head}");
    assert_eq!(values("host").len(), 1, "the client's host is not sent: {head}");
    assert_eq!(values("x-forwarded-for"), ["127.0.0.1"], "{head}");
    assert_eq!(values("x-forwarded-proto"), ["http"], "{head}");
    assert_eq!(values("x-forwarded-host"), ["client.example"], "{head}");
    let via = values("via");
    assert_eq!((via.len(), via.first()), (2, Some(&"1.1 edge")), "{head}");
    assert!(via[1].starts_with("1.1 ") && via[1] != "1.1 edge", "{head}");
    // The client's fields in their order, then the proxy's, its Via last.
    let order = [at("x-a", "1"), at("x-b", "2"), at("x-forwarded-for", ""), at("x-forwarded-proto", "")];
    let order: Vec<usize> = order.into_iter().collect::<Option<_>>().ok_or("a field is missing")?;
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{head}");
    assert_eq!(got.iter().rposition(|(k, _)| k == "via"), Some(got.len() - 1), "{head}");
    // The client sent no request id: the one the proxy minted, once, the answer's.
    let (_, answer, _, _) = next_response(&r.bytes).ok_or("no answer")?;
    let answer = fields(&answer);
    let answered: Vec<&str> = answer.iter().filter(|(k, _)| k == "x-request-id").map(|(_, v)| v.as_str()).collect();
    assert_eq!(answered.len(), 1, "{answer:?}");
    assert_eq!(values("x-request-id"), answered, "{head}");

    // HTTP/2 (prior knowledge): its `:authority` is the forwarded host.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::get(p.url(&path)).header("x-forwarded-for", "6.6.6.6").body(Default::default())?;
    let resp = tokio::time::timeout(WAIT, client.request(req)).await??;
    assert_eq!(resp.status().as_u16(), 200);
    let head = tokio::time::timeout(WAIT, heads.recv()).await?.ok_or("no second request upstream")?;
    let got = fields(&head);
    let values = |name: &str| got.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
    assert_eq!(values("host"), [kz.to_string().as_str()], "{head}");
    let answered = resp.headers().get("x-request-id").and_then(|v| v.to_str().ok()).ok_or("no id answered")?;
    assert_eq!(values("x-request-id"), [answered], "{head}");
    assert_eq!(values("x-forwarded-for"), ["127.0.0.1"], "{head}");
    assert_eq!(values("x-forwarded-host"), [p.addr.to_string().as_str()], "{head}");
    assert_eq!(values("via").len(), 1, "{head}");
    Ok(())
}

#[tokio::test]
async fn an_id_header_routes_in_any_case_and_reaches_the_upstream_as_sent() -> TestResult {
    let (_backends, p) = world("").await?;
    for name in ["X-Entity-Id", "x-entity-id", "X-ENTITY-ID", "x-EnTiTy-iD"] {
        let ask = format!("GET /v1/wallet HTTP/1.1\r\nHost: x\r\n{name}: {}\r\nConnection: close\r\n\r\n", id());
        let r = raw(p.addr, ask.as_bytes(), WAIT).await?;
        let (status, head, body, _) = next_response(&r.bytes).ok_or("no answer")?;
        assert_eq!(status, 200, "{name}: {}", r.text());
        assert!(head.contains("x-backend-region: kz\r\n"), "{name}: {head}");
        let echo: serde_json::Value = serde_json::from_slice(&body)?;
        assert_eq!(echo["headers"]["x-entity-id"], id(), "{name}: {echo}");
    }
    Ok(())
}

#[tokio::test]
async fn a_later_http1_minor_version_is_served_as_11() -> TestResult {
    let ([_eu, kz, _us], p) = world("").await?;
    let req = format!("GET /v1/orders/{} HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n", id());
    let r = raw(p.addr, req.as_bytes(), WAIT).await?;
    assert!(r.text().starts_with("HTTP/1.1 200"), "{}", r.text());
    assert_eq!(kz.hits(), 1);
    Ok(())
}
