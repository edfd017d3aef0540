//! Hostile input on real sockets: request smuggling, odd paths and ids,
//! ambiguous ids, h2c upgrades, slowloris heads, slow bodies and a
//! connection flood. Every test asserts
//! the exact answer and then that the proxy still serves a good request.
//!
//! What the proxy does with each, as asserted here:
//!
//! * Smuggling: hyper's HTTP/1.1 parser answers a bare `400` and closes for
//!   conflicting `Content-Length`s, obs-fold lines, a `Transfer-Encoding`
//!   whose last coding is not `chunked`, and `Transfer-Encoding` on
//!   HTTP/1.0. `Content-Length` together with `Transfer-Encoding: chunked`
//!   is read as chunked (RFC 9112 §6.3: `Content-Length` dropped) and the
//!   connection is closed after the answer, so bytes after the chunked body
//!   are never read as a second request. A coding before the final
//!   `chunked` (`gzip, chunked`) is answered 501 problem+json: the upstream
//!   leg re-frames the body, so the coding could not be passed on. An
//!   HTTP/1.1 request with no `Host` or several is 400 (`bad_host`). Bare LF line ends are accepted as
//!   line ends (RFC 9112 §2.2 allows it); the upstream leg is always
//!   re-serialised by the proxy with CRLF, so the backend never sees them.
//! * Paths: dot segments (`.`, `..`, raw or as `%2e`) are removed per RFC
//!   3986 §5.2.4 before the route is matched, and the normalised path is
//!   what goes upstream, so a `..` cannot route by one id and forward
//!   another route's path; `..` never climbs above `/`. An encoded slash
//!   (`%2f`) does not split a segment. Percent-escapes are decoded in the
//!   id only; bad escapes (`%zz`) and invalid UTF-8 after decoding (`%ff`)
//!   become U+FFFD and fail the id.
//!   Raw non-ASCII bytes in the request target are refused (`400`
//!   problem+json, `bad_request_head`).
//! * Overlong targets: up to `server.max_uri_bytes` they are served; above
//!   it, while the whole head still fits the head buffer
//!   (`server.max_header_bytes`), the proxy answers `414` problem+json
//!   (`uri_too_long`); a head larger than `server.max_header_bytes` (a 1 MB
//!   path) is refused with `431` problem+json (`head_too_large`) and the
//!   connection closed, before the proxy routes anything.

use std::time::{Duration, Instant};

use shardgate::ids::Iuid;
use tokio::io::AsyncWriteExt;

use crate::support::{self, backend, get, proxy, raw, read_until_closed, table, Running, TestResult};

struct World {
    eu: Running,
    kz: Running,
    us: Running,
    proxy: Running,
}

impl World {
    fn hits(&self) -> usize {
        self.eu.hits() + self.kz.hits() + self.us.hits()
    }

    /// A good request is still served (routed to kz).
    async fn still_serves(&self) -> TestResult {
        let got = get(&self.proxy.url(&format!("/v1/orders/{}", iuid(7)))).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")), "proxy stopped serving");
        Ok(())
    }
}

async fn world(extra: &str) -> Result<World, support::BoxError> {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let proxy = proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    Ok(World { eu, kz, us, proxy })
}

fn iuid(country: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, 3, 12345).to_string()
}

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn smuggling_attempts_are_refused_or_read_one_way() -> TestResult {
    let w = world("").await?;
    let id = iuid(7);
    let smuggled = format!("GET /v1/orders/{id}?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    // (name, request bytes): each must get a 400 problem+json and a closed
    // connection, with nothing sent upstream. Content-Length with
    // Transfer-Encoding is refused outright (RFC 9112 §6.3 allows reading it
    // as chunked and closing; refusing leaves no reading to disagree on).
    let refused = [
        (
            "Content-Length then Transfer-Encoding",
            format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "Transfer-Encoding then Content-Length",
            format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "conflicting Content-Length",
            format!(
                "POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: {}\r\n\r\nhello{smuggled}",
                5 + smuggled.len()
            ),
        ),
        ("Content-Length list", format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello")),
        ("signed Content-Length", format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello")),
        (
            "obs-fold",
            format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n{smuggled}"),
        ),
        (
            "Transfer-Encoding: chunked, identity",
            format!(
                "POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{smuggled}"
            ),
        ),
        (
            "Transfer-Encoding: identity",
            format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n{smuggled}"),
        ),
        (
            "Transfer-Encoding on HTTP/1.0",
            format!("POST /v1/orders/{id} HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        ),
        (
            "bad chunk size",
            format!("POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{smuggled}"),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, req) in &refused {
        let before = w.hits();
        let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
        // "bad chunk size" is found only after the head was forwarded; the
        // upstream leg then fails, and the client sees a 502 or a close.
        let ok = if *name == "bad chunk size" {
            r.closed && matches!(r.status(), None | Some(400 | 502))
        } else {
            let reason = r.problem().map(|p| p["reason"].clone());
            r.closed && r.status() == Some(400) && reason == Some("bad_request_head".into()) && w.hits() == before
        };
        if !ok || r.statuses().len() > 1 {
            wrong.push(format!("{name}: closed={} {:?} hits+{}", r.closed, r.text(), w.hits() - before));
        }
        w.still_serves().await?;
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // Bare LF line ends: one request, answered and re-serialised upstream.
    let before = w.kz.hits();
    let req = format!("GET /v1/orders/{id} HTTP/1.1\nHost: x\nConnection: close\n\n");
    let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
    assert!(r.closed);
    assert_eq!(r.statuses(), vec![200], "{}", r.text());
    assert_eq!(w.kz.hits() - before, 1);
    // A bare LF inside a header value cannot start a header of its own.
    let before = w.kz.hits();
    let req =
        format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nX-A: 1\nX-Smuggled: yes\r\nConnection: close\r\n\r\n");
    let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
    assert!(r.closed);
    match r.status() {
        Some(400) => assert_eq!(w.kz.hits(), before),
        Some(200) => assert_eq!(w.kz.hits() - before, 1),
        other => return Err(format!("bare LF in a header: {other:?} {}", r.text()).into()),
    }
    w.still_serves().await?;
    Ok(())
}

/// One case of [`paths_and_ids_get_exact_answers`]: path → (status, reason).
/// An empty reason means a bare answer from hyper (no problem+json).
async fn case(w: &World, path: &str) -> Result<(u16, String), support::BoxError> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
    let status = r.status().ok_or_else(|| format!("{path}: no answer: {:?}", r.text()))?;
    let reason = r.problem().and_then(|p| p["reason"].as_str().map(str::to_string)).unwrap_or_default();
    Ok((status, reason))
}

#[tokio::test]
async fn paths_and_ids_get_exact_answers() -> TestResult {
    let w = world("").await?;
    let id = iuid(7);
    let tweet = (12_345u64 << 22) | (2 << 17) | (4 << 12) | 7; // datacenter 2: kz
    let cases: Vec<(String, u16, &str)> = vec![
        // bad percent-encoding and invalid UTF-8 after decoding
        ("/v1/orders/%zz".into(), 400, "bad_length"),
        (format!("/v1/orders/{}%zz", &id[..33]), 400, "bad_length"),
        (format!("/v1/orders/{}%ff", &id[..35]), 400, "bad_length"),
        (format!("/v1/orders/{}%C3%A9", &id[..35]), 400, "bad_length"),
        (format!("/v1/tweets/{tweet}%ff"), 400, "not_canonical_decimal"),
        // dot segments are removed before matching (RFC 3986 §5.2.4); what
        // is left here matches no route (see dot_segments_are_removed_before_routing)
        (format!("/v1/orders/{id}/.."), 404, "no_route"),
        ("/v1/orders/..".into(), 404, "no_route"),
        ("/v1/orders/%2e%2e".into(), 404, "no_route"),
        // an encoded slash does not make a segment: this is one (bad) id
        (format!("/v1/orders/%2e%2e%2f{}", &id[..30]), 400, "bad_length"),
        // NUL, whitespace
        (format!("/v1/orders/{}%00", &id[..35]), 400, "bad_format"),
        (format!("/v1/orders/{id}%00"), 400, "bad_length"),
        (format!("/v1/tweets/{tweet}%00"), 400, "not_canonical_decimal"),
        (format!("/v1/tweets/%20{tweet}"), 400, "not_canonical_decimal"),
        (format!("/v1/tweets/{tweet}%09"), 400, "not_canonical_decimal"),
        (format!("/v1/orders/{}%20", &id[..35]), 400, "bad_format"),
        (format!("/v1/search?id={}%00", &id[..35]), 400, "bad_format"),
        (format!("/v1/search?id=%20{id}"), 400, "bad_length"),
        // Unicode digits: fullwidth １２３ and Arabic-Indic ١٢٣
        ("/v1/tweets/%EF%BC%91%EF%BC%92%EF%BC%93".into(), 400, "not_canonical_decimal"),
        ("/v1/tweets/%D9%A1%D9%A2%D9%A3".into(), 400, "not_canonical_decimal"),
        // overlong: decimal overflow, an id of 1000 digits, a target over max_uri_bytes
        ("/v1/tweets/99999999999999999999".into(), 400, "not_canonical_decimal"),
        (format!("/v1/tweets/{}", "9".repeat(1000)), 400, "not_canonical_decimal"),
        (format!("/v1/orders/{}", "a".repeat(9000)), 414, "uri_too_long"),
        // raw spaces and control bytes in the target: the head is refused
        (format!("/v1/orders/{}\t", &id[..35]), 400, "bad_request_head"),
    ];
    let mut wrong = Vec::new();
    for (path, status, reason) in &cases {
        let got = case(&w, path).await?;
        if got != (*status, reason.to_string()) {
            wrong.push(format!("{path}: got {got:?}, want ({status}, {reason:?})"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(w.hits(), 0, "no malformed id reached a backend");

    // Raw invalid UTF-8 in the request target, a NUL byte on the wire in the
    // target and in a header value: the head is refused with problem+json.
    for req in [
        b"GET /v1/orders/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        format!("GET /v1/orders/{id}\0 HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
        format!("GET /v1/wallet HTTP/1.1\r\nHost: x\r\nX-Entity-Id: {id}\0\r\n\r\n").into_bytes(),
    ] {
        let r = raw(w.proxy.addr, &req, WAIT).await?;
        let reason = r.problem().map(|p| p["reason"].clone());
        assert_eq!((r.status(), reason, r.closed), (Some(400), Some("bad_request_head".into()), true), "{}", r.text());
    }
    // Whitespace inside a header id fails it; around it, it is HTTP's optional whitespace.
    let r = raw(
        w.proxy.addr,
        format!(
            "GET /v1/wallet HTTP/1.1\r\nHost: x\r\nX-Entity-Id: {} {}\r\nConnection: close\r\n\r\n",
            &id[..10],
            &id[11..]
        )
        .as_bytes(),
        WAIT,
    )
    .await?;
    assert_eq!(
        (r.status(), r.problem().map(|p| p["reason"].clone())),
        (Some(400), Some("bad_format".into())),
        "{}",
        r.text()
    );
    let r = raw(
        w.proxy.addr,
        format!("GET /v1/wallet HTTP/1.1\r\nHost: x\r\nX-Entity-Id: \t{id} \r\nConnection: close\r\n\r\n").as_bytes(),
        WAIT,
    )
    .await?;
    assert_eq!(r.status(), Some(200), "{}", r.text());
    assert_eq!(w.hits(), 1);

    // A 1 MB path: larger than the head limit, refused (431 problem+json) and closed.
    let long = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(1 << 20));
    let r = raw(w.proxy.addr, long.as_bytes(), WAIT).await?;
    let reason = r.problem().map(|p| p["reason"].clone());
    assert_eq!((r.status(), reason, r.closed), (Some(431), Some("head_too_large".into()), true), "{}", r.text());
    w.still_serves().await?;
    Ok(())
}

#[tokio::test]
async fn slowloris_head_is_cut_at_header_read_timeout() -> TestResult {
    let w = world("server: { header_read_timeout: 300ms }").await?;
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    let head = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", iuid(7), "p".repeat(200));
    let started = Instant::now();
    let mut cut = false;
    // One byte every 50 ms: the head would take over 13 s.
    for b in head.as_bytes() {
        if s.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
        let r = tokio::time::timeout(Duration::from_millis(50), tokio::io::AsyncReadExt::read(&mut s, &mut [0u8; 512]))
            .await;
        if let Ok(Ok(0) | Err(_)) = r {
            cut = true;
            break;
        }
        if let Ok(Ok(_)) = r {
            // An answer (408) before close is fine; keep going to see the close.
        }
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(cut, "the slow head was not cut within {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(w.hits(), 0);
    w.still_serves().await?;
    Ok(())
}

#[tokio::test]
async fn slow_bodies_are_bounded() -> TestResult {
    let extra = "server: { header_read_timeout: 300ms, idle_timeout: 400ms }\nupstream: { attempt_timeout: 1s, request_timeout: 2s, retries: 0 }";
    let w = world(extra).await?;
    let path = format!("/v1/orders/{}", iuid(7));

    // A body that trickles (one byte per 100 ms, 20 bytes promised) for
    // longer than attempt_timeout: the attempt's clock starts only once the
    // body has been sent, so it is answered, in full.
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    s.write_all(
        format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let started = Instant::now();
    let mut got = Vec::new();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(5) {
        let _ = s.write_all(b"x").await;
        let r = read_until_closed(&mut s, Duration::from_millis(100)).await?;
        got.extend_from_slice(&r.bytes);
        if r.closed {
            closed = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(closed, "no answer after {elapsed:?}: {text}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"body_bytes\": 20"), "{text}");
    assert!(elapsed > Duration::from_millis(1500), "answered after {elapsed:?}, before the body was sent");
    w.still_serves().await?;

    // A body that stalls (10 of 100 bytes, then nothing): the connection is
    // idle for server.idle_timeout and closed, without an answer.
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    s.write_all(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789").as_bytes()).await?;
    let started = Instant::now();
    let r = read_until_closed(&mut s, WAIT).await?;
    let elapsed = started.elapsed();
    assert!(r.closed, "stalled body left open: {}", r.text());
    assert!(elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2), "{elapsed:?}");
    w.still_serves().await?;

    // An idle connection with nothing sent is closed too.
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    let r = read_until_closed(&mut s, WAIT).await?;
    assert!(r.closed);
    w.still_serves().await?;
    Ok(())
}

#[tokio::test]
async fn a_connection_flood_is_refused_at_the_limit() -> TestResult {
    let w = world("server: { max_connections: 3 }").await?;
    let p = w.proxy.proxy.clone().ok_or("proxy")?;
    // Three connections hold every slot (a head started, never finished).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
        s.write_all(b"GET /v1/orders/").await?;
        held.push(s);
    }
    let deadline = Instant::now() + WAIT;
    while p.shared().metrics.open_connections("proxy") < 3 {
        if Instant::now() > deadline {
            return Err("held connections not counted".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A flood of 20 more: each is answered 503 problem+json and closed.
    let mut refused = 0;
    for _ in 0..20 {
        let req = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: x\r\n\r\n", iuid(7));
        let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
        assert!(r.closed, "refused connection left open");
        assert_eq!(r.status(), Some(503), "{}", r.text());
        let text = r.text().to_ascii_lowercase();
        assert!(text.contains("connection: close") && text.contains("retry-after: 1"), "{text}");
        assert!(text.contains("content-type: application/problem+json"), "{text}");
        assert!(text.contains("error=connection_limit_reached"), "{text}");
        assert_eq!(r.problem().map(|p| p["reason"].clone()), Some("too_many_connections".into()));
        refused += 1;
    }
    assert_eq!(p.shared().metrics.connections_refused("proxy"), refused);
    assert!(p.shared().metrics.render().contains("shardgate_connections_refused_total{listener=\"proxy\"} 20"));
    assert_eq!(w.hits(), 0);
    // Freeing the slots lets requests in again.
    drop(held);
    let deadline = Instant::now() + WAIT;
    while p.shared().metrics.open_connections("proxy") > 0 {
        if Instant::now() > deadline {
            return Err("closed connections still counted".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.still_serves().await?;
    Ok(())
}

/// Sends `req` over HTTP/2 (prior knowledge) and reads the whole answer.
async fn send_h2(req: http::Request<http_body_util::Full<bytes::Bytes>>) -> Result<support::Got, support::BoxError> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let resp = tokio::time::timeout(WAIT, client.request(req)).await??;
    let (parts, body) = resp.into_parts();
    let body = http_body_util::BodyExt::collect(body).await?.to_bytes();
    Ok(support::Got { status: parts.status, headers: parts.headers, body })
}

fn empty() -> http_body_util::Full<bytes::Bytes> {
    http_body_util::Full::new(bytes::Bytes::new())
}

#[tokio::test]
async fn an_id_given_twice_with_different_values_is_refused() -> TestResult {
    let w = world("").await?;
    let (kz, us) = (iuid(7), iuid(1));
    // Two X-Entity-Id headers, over HTTP/1.1 and HTTP/2.
    let two = |a: &str, b: &str| -> Result<http::Request<_>, support::BoxError> {
        Ok(http::Request::get(w.proxy.url("/v1/wallet"))
            .header("x-entity-id", a)
            .header("x-entity-id", b)
            .body(empty())?)
    };
    for got in [support::send(two(&kz, &us)?).await?, send_h2(two(&kz, &us)?).await?] {
        assert_eq!(got.status, 400, "{}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.json()?["reason"], "ambiguous_id");
        assert_eq!(got.json()?["param"], "header 'x-entity-id'");
    }
    // The same query parameter twice.
    let got = get(&w.proxy.url(&format!("/v1/search?id={kz}&id={us}"))).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].clone()), (400, "ambiguous_id".into()));
    assert_eq!(w.hits(), 0);
    // The same value twice (even spelled differently) is one id.
    let got = support::send(two(&kz, &kz)?).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    let spelled = kz.replacen('-', "%2D", 1);
    let got = get(&w.proxy.url(&format!("/v1/search?id={kz}&id={spelled}"))).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    Ok(())
}

#[tokio::test]
async fn dot_segments_are_removed_before_routing() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let yaml = table(eu.addr, kz.addr, us.addr, "").replace(
        "routes:\n",
        "routes:\n  - name: raw\n    match: { path: \"/raw/{id}/{*rest}\" }\n    id: { path_param: id, formats: [iuid] }\n",
    );
    let p = proxy(&yaml).await?;
    let (kz_id, us_id) = (iuid(7), iuid(1));
    // Routed by the id the backend will act on: the path it receives is the one that was matched.
    for path in [
        format!("/raw/{us_id}/../../v1/orders/{kz_id}"),
        format!("/raw/{us_id}/%2e%2e/%2E%2E/v1/orders/{kz_id}"),
        format!("/raw/{us_id}/.%2e/.%2E/v1/./orders/{kz_id}"),
        format!("/v1/orders/../orders/{kz_id}"),
    ] {
        let got = get(&p.url(&path)).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")), "{path}");
        assert_eq!(got.json()?["path"], format!("/v1/orders/{kz_id}"), "{path}");
    }
    // `..` never climbs above the root.
    let got = get(&p.url(&format!("/../../../raw/{us_id}/x"))).await?;
    assert_eq!(got.json()?["path"], format!("/raw/{us_id}/x"));
    assert_eq!(us.hits(), 1);
    Ok(())
}

#[tokio::test]
async fn h2c_upgrades_are_not_tunnelled() -> TestResult {
    let w = world("").await?;
    let id = iuid(7);
    // An h2c upgrade is answered as a plain request: the backend sees no
    // Upgrade or HTTP2-Settings, nothing switches protocols, and the next
    // request on the connection is read by the proxy and routed again.
    let req = format!(
        "GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
         HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\nGET /v1/orders/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        iuid(1)
    );
    let r = raw(w.proxy.addr, req.as_bytes(), WAIT).await?;
    assert_eq!(r.statuses(), vec![200, 200], "{}", r.text());
    let text = r.text();
    assert!(text.contains("\"region\": \"kz\"") && text.contains("\"region\": \"us\""), "{text}");
    for gone in ["\"upgrade\"", "\"http2-settings\""] {
        assert!(!text.contains(gone), "{gone} reached the backend: {text}");
    }
    assert_eq!((w.kz.hits(), w.us.hits()), (1, 1));
    Ok(())
}

#[tokio::test]
async fn framing_and_forwarding_conformance() -> TestResult {
    let w = world("").await?;
    let id = iuid(7);
    let ask = |req: String| async move { raw(w.proxy.addr, req.as_bytes(), WAIT).await };
    // A transfer coding other than chunked cannot be passed on faithfully: 501.
    let r = ask(format!(
        "POST /v1/orders/{id} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    ))
    .await?;
    assert_eq!(r.status(), Some(501), "{}", r.text());
    assert_eq!(r.problem().ok_or_else(|| r.text())?["reason"], "unsupported_transfer_coding");
    // HTTP/1.1 needs exactly one Host (RFC 9112 §3.2); HTTP/1.0 may omit it.
    for head in [
        format!("GET /v1/orders/{id} HTTP/1.1\r\nConnection: close\r\n\r\n"),
        format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"),
    ] {
        let r = ask(head).await?;
        assert_eq!(r.status(), Some(400), "{}", r.text());
        assert_eq!(r.problem().ok_or_else(|| r.text())?["reason"], "bad_host");
    }
    assert_eq!(w.hits(), 0);
    let r = ask(format!("GET /v1/orders/{id} HTTP/1.0\r\n\r\n")).await?;
    assert!(r.text().starts_with("HTTP/1.0 200") || r.status() == Some(200), "{}", r.text());
    // X-Forwarded-Host is the authority the client asked for: the absolute
    // URI's over HTTP/1.1, `:authority` over HTTP/2, not another Host.
    let r = ask(format!(
        "GET http://asked.example/v1/orders/{id} HTTP/1.1\r\nHost: asked.example\r\nConnection: close\r\n\r\n"
    ))
    .await?;
    assert!(r.text().contains("\"x-forwarded-host\": \"asked.example\""), "{}", r.text());
    let got = send_h2(http::Request::get(w.proxy.url(&format!("/v1/orders/{id}"))).body(empty())?).await?;
    let h = &got.json()?["headers"];
    assert_eq!(h["x-forwarded-host"], w.proxy.addr.to_string());
    // Via names the version the request came in with.
    assert_eq!(h["via"], "2 shardgate");
    let got = get(&w.proxy.url(&format!("/v1/orders/{id}"))).await?;
    assert_eq!(got.json()?["headers"]["via"], "1.1 shardgate");
    // A client's Forwarded is not believed (127.0.0.1 is no trusted hop here).
    let got = support::send(
        http::Request::get(w.proxy.url(&format!("/v1/orders/{id}"))).header("forwarded", "for=6.6.6.6").body(empty())?,
    )
    .await?;
    assert!(got.json()?["headers"].get("forwarded").is_none(), "{}", String::from_utf8_lossy(&got.body));
    // A GET with a chunked body is forwarded with its body, as with Content-Length.
    for head in ["Transfer-Encoding: chunked", "Content-Length: 5"] {
        let body = if head.starts_with("Transfer") { "5\r\nhello\r\n0\r\n\r\n" } else { "hello" };
        let r = ask(format!("GET /v1/orders/{id} HTTP/1.1\r\nHost: x\r\n{head}\r\nConnection: close\r\n\r\n{body}"))
            .await?;
        assert!(r.text().contains("\"body_bytes\": 5"), "{head}: {}", r.text());
    }
    Ok(())
}

#[tokio::test]
async fn a_socket_that_sends_nothing_is_closed_at_header_read_timeout() -> TestResult {
    let w = world("server: { header_read_timeout: 300ms, idle_timeout: 60s }").await?;
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    let started = Instant::now();
    let r = read_until_closed(&mut s, WAIT).await?;
    assert!(r.closed, "a silent socket was held open");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    w.still_serves().await?;
    Ok(())
}
