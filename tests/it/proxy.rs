//! The proxy on real sockets: every id format and placement strategy
//! reaches its owner's backend, forwarding is transparent, and every error
//! the proxy makes has its status, reason and `Proxy-Status`.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use shardgate::ids::{Iuid, LocalityUuid, ManualClock, UniqidMinter, Uuid7};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{self, backend, get, proxy, send, table, Running, TestResult};

struct World {
    eu: Running,
    kz: Running,
    us: Running,
    proxy: Running,
}

async fn world(extra: &str) -> Result<World, support::BoxError> {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let proxy = proxy(&table(eu.addr, kz.addr, us.addr, extra)).await?;
    Ok(World { eu, kz, us, proxy })
}

fn iuid(country: u8, entity: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, entity, 12345).to_string()
}

async fn region_of(w: &World, path: &str) -> Result<String, support::BoxError> {
    let got = get(&w.proxy.url(path)).await?;
    assert_eq!(got.status, 200, "{path}: {}", String::from_utf8_lossy(&got.body));
    Ok(got.header("x-backend-region").unwrap_or("").to_string())
}

#[tokio::test]
async fn every_format_reaches_its_owner() -> TestResult {
    let w = world("").await?;
    // iUID by country, with the (country, entity) override winning.
    assert_eq!(region_of(&w, &format!("/v1/orders/{}", iuid(7, 3))).await?, "kz");
    assert_eq!(region_of(&w, &format!("/v1/orders/{}", iuid(49, 3))).await?, "eu");
    assert_eq!(region_of(&w, &format!("/v1/orders/{}", iuid(1, 3))).await?, "us");
    assert_eq!(region_of(&w, &format!("/v1/orders/{}", iuid(7, 4))).await?, "eu");
    // uniqid by shard range, on the same route (second accepted format).
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let m = UniqidMinter::new(&clock, 16);
    let mut rng = rand::rng();
    for (shard, region) in [(0, "eu"), (5, "eu"), (6, "kz"), (10, "kz"), (11, "us"), (15, "us")] {
        let id = m.mint_for_shard(shard, &mut rng).ok_or("shard")?;
        assert_eq!(region_of(&w, &format!("/v1/orders/{id}")).await?, region, "shard {shard}");
    }
    // Locality by MAC fragment.
    for (mac, region) in [(0x0c11_0002, "eu"), (0x0d53_7a50, "kz"), (0x000_0001, "us")] {
        let id = LocalityUuid::from_fields(0x1234_5678, 1, mac, 1_700_000_000_000);
        assert_eq!(region_of(&w, &format!("/v1/sessions/{id}")).await?, region);
    }
    // Snowflake by datacenter (Twitter layout: datacenter at bit 17).
    for (dc, region) in [(1u64, "eu"), (2, "kz"), (3, "us")] {
        let id = (12_345u64 << 22) | (dc << 17) | (4 << 12) | 7;
        assert_eq!(region_of(&w, &format!("/v1/tweets/{id}")).await?, region);
    }
    // Sonyflake by machine id, Instagram by logical shard.
    assert_eq!(region_of(&w, &format!("/v1/flakes/{}", (1000u64 << 24) | 258)).await?, "kz");
    assert_eq!(region_of(&w, &format!("/v1/media/{}", (5000u64 << 23) | (42 << 10) | 1)).await?, "us");
    // UUIDv7 by rendezvous hash: always the same region for the same id.
    let v7 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
    let first = region_of(&w, &format!("/v1/events/{v7}")).await?;
    assert!(["eu", "kz", "us"].contains(&first.as_str()));
    assert_eq!(region_of(&w, &format!("/v1/events/{v7}")).await?, first);
    // Header and query parameter sources.
    let req =
        Request::get(w.proxy.url("/v1/wallet")).header("x-entity-id", iuid(1, 4)).body(Full::new(Bytes::new()))?;
    assert_eq!(send(req).await?.header("x-backend-region"), Some("us"));
    assert_eq!(region_of(&w, &format!("/v1/search?q=1&id={}", iuid(49, 4))).await?, "eu");
    Ok(())
}

#[tokio::test]
async fn forwarding_is_transparent() -> TestResult {
    let w = world("").await?;
    let path = format!("/v1/orders/{}?a=1&b=two", iuid(7, 3));
    let direct = get(&w.kz.url(&path)).await?;
    let proxied = get(&w.proxy.url(&path)).await?;
    assert_eq!(direct.status, proxied.status);
    let (d, p) = (direct.json()?, proxied.json()?);
    assert_eq!(d["method"], p["method"]);
    assert_eq!(d["path"], p["path"]);
    assert_eq!(d["query"], p["query"]);
    assert_eq!(d["body_sha256"], p["body_sha256"]);
    // The backend sees the proxy's additions and the client's own headers.
    let h = &p["headers"];
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert!(h["via"].as_str().is_some_and(|v| v.starts_with("1.1 ")), "{h}");
    let rid = h["x-request-id"].as_str().ok_or("request id forwarded")?;
    assert_eq!(proxied.header("x-request-id"), Some(rid), "request id echoed");
    assert_eq!(proxied.header("content-type"), direct.header("content-type"));
    Ok(())
}

/// The upstream gets one request id, the answer's: the client's when it
/// sent one acceptable id, a fresh one for none, an unacceptable one or
/// several; a `Connection` naming the field does not take it away.
#[tokio::test]
async fn the_upstream_gets_the_answers_one_request_id() -> TestResult {
    let w = world("").await?;
    let long = "r".repeat(129);
    // (the ids the client sends, a `Connection` naming one, the id kept if any)
    let cases: [(&[&str], Option<&str>, Option<&str>); 6] = [
        (&[], None, None),
        (&["client-rid-9"], None, Some("client-rid-9")),
        (&["has space"], None, None),
        (&[long.as_str()], None, None),
        (&["client-rid-a", "client-rid-b"], None, None),
        (&["client-rid-c"], Some("x-request-id"), Some("client-rid-c")),
    ];
    for (sent, connection, kept) in cases {
        let mut req = Request::get(w.proxy.url(&format!("/v1/orders/{}", iuid(7, 3))));
        for id in sent {
            req = req.header("x-request-id", *id);
        }
        if let Some(c) = connection {
            req = req.header("connection", c);
        }
        let got = send(req.body(Full::new(Bytes::new()))?).await?;
        assert_eq!(got.status, 200, "{sent:?}: {}", String::from_utf8_lossy(&got.body));
        // One value (a repeated field would be a list), the answer's.
        let upstream = got.json()?["headers"]["x-request-id"].as_str().map(String::from).ok_or("one id upstream")?;
        assert_eq!(got.header("x-request-id"), Some(upstream.as_str()), "{sent:?}");
        match kept {
            Some(id) => assert_eq!(upstream, id),
            // A fresh one: a UUIDv7, as this proxy mints them.
            None => assert!(Uuid7::parse(&upstream).is_ok(), "{sent:?} became {upstream}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_and_request_id_kept() -> TestResult {
    let w = world("").await?;
    let req = Request::get(w.proxy.url(&format!("/v1/orders/{}", iuid(7, 3))))
        .header("connection", "x-private, keep-alive")
        .header("x-private", "secret")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic eA==")
        .header("te", "trailers")
        .header("x-request-id", "req-123")
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .header("x-forwarded-for", "6.6.6.6")
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    let h = &got.json()?["headers"];
    for gone in ["x-private", "keep-alive", "proxy-authorization", "te"] {
        assert!(h.get(gone).is_none(), "{gone} forwarded: {h}");
    }
    assert_eq!(h["x-request-id"], "req-123");
    assert_eq!(got.header("x-request-id"), Some("req-123"));
    assert_eq!(h["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    // 127.0.0.1 is not a trusted hop in this table: the forged value is replaced.
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    Ok(())
}

#[tokio::test]
async fn repeated_headers_reach_the_backend_and_its_echo() -> TestResult {
    let w = world("").await?;
    let req = Request::get(w.proxy.url(&format!("/v1/orders/{}", iuid(7, 3))))
        .header("x-multi", "one")
        .header("x-multi", "two")
        .header("accept", "text/plain")
        .body(Full::new(Bytes::new()))?;
    let h = &send(req).await?.json()?["headers"];
    assert_eq!(h["x-multi"], serde_json::json!(["one", "two"]), "{h}");
    assert_eq!(h["accept"], "text/plain");
    Ok(())
}

#[tokio::test]
async fn large_post_body_streams_through() -> TestResult {
    let w = world("").await?;
    let body: Vec<u8> = (0..10 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let path = format!("/v1/orders/{}", iuid(49, 3));
    let req = |url: String| Request::post(url).body(Full::new(Bytes::from(body.clone())));
    let direct = send(req(w.eu.url(&path))?).await?.json()?;
    let proxied = send(req(w.proxy.url(&path))?).await?.json()?;
    assert_eq!(proxied["body_bytes"], 10 * 1024 * 1024);
    assert_eq!(proxied["body_sha256"], direct["body_sha256"]);
    assert_eq!(proxied["method"], "POST");
    Ok(())
}

#[tokio::test]
async fn chunked_204_304_and_head_pass_through() -> TestResult {
    let w = world("").await?;
    let id = iuid(7, 3);
    let chunked = get(&w.proxy.url(&format!("/t/chunked/{id}"))).await?;
    assert_eq!(chunked.status, 200);
    assert_eq!(&chunked.body[..], b"chunk0;chunk1;chunk2;chunk3;chunk4;");
    let direct = get(&w.kz.url(&format!("/t/chunked/{id}"))).await?;
    assert_eq!(direct.body, chunked.body);
    let s204 = get(&w.proxy.url(&format!("/t/status204/{id}"))).await?;
    assert_eq!((s204.status.as_u16(), s204.body.len()), (204, 0));
    let s304 = get(&w.proxy.url(&format!("/t/status304/{id}"))).await?;
    assert_eq!((s304.status.as_u16(), s304.header("etag")), (304, Some("\"v1\"")));
    let head = send(Request::head(w.proxy.url(&format!("/v1/orders/{id}"))).body(Full::new(Bytes::new()))?).await?;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    // The backend's content length for the HEAD request is passed on.
    assert!(head.header("content-length").and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n > 100));
    Ok(())
}

#[tokio::test]
async fn websocket_upgrade_is_tunnelled() -> TestResult {
    let w = world("").await?;
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    let req = format!(
        "GET /t/ws/{} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        iuid(7, 3)
    );
    s.write_all(req.as_bytes()).await?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut byte)).await??;
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    // The upstream's fields went through the header map (a 101's do): its
    // request id replaced by the proxy's, its `Via` followed by the proxy's.
    let values = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.trim())
            .collect::<Vec<_>>()
    };
    let ids = values("x-request-id");
    assert!(ids.len() == 1 && ids[0] != "from-upstream", "{head}");
    let via = values("via");
    assert!(via.len() == 2 && via[0] == "1.1 ws-backend" && via[1].starts_with("1.1 "), "{head}");
    s.write_all(b"ping through the tunnel").await?;
    let mut echo = [0u8; 23];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut echo)).await??;
    assert_eq!(&echo, b"ping through the tunnel");
    Ok(())
}

async fn problem(w: &World, path: &str) -> Result<(u16, serde_json::Value, String), support::BoxError> {
    let got = get(&w.proxy.url(path)).await?;
    assert_eq!(got.header("content-type"), Some("application/problem+json"), "{path}");
    let ps = got.header("proxy-status").unwrap_or("").to_string();
    Ok((got.status.as_u16(), got.json()?, ps))
}

#[tokio::test]
async fn errors_are_problem_json_with_proxy_status() -> TestResult {
    let w = world("").await?;
    // malformed id: 400, names the parameter and the rule
    let (status, body, ps) = problem(&w, "/v1/orders/not-an-id").await?;
    assert_eq!(status, 400);
    assert_eq!(body["reason"], "bad_length");
    assert_eq!(body["param"], "path parameter 'id'");
    assert!(body["detail"].as_str().is_some_and(|d| d.contains("'not-an-id'")), "{body}");
    assert!(ps.contains("error=http_request_error"), "{ps}");
    let v7 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
    let (status, body, _) = problem(&w, &format!("/v1/orders/{v7}")).await?;
    assert_eq!((status, body["reason"].as_str()), (400, Some("version_not_8")));
    // missing id (header route without the header)
    let (status, body, _) = problem(&w, "/v1/wallet").await?;
    assert_eq!((status, body["reason"].as_str()), (400, Some("missing_id")));
    // valid id, no owner: 502 (a table gap)
    let (status, body, ps) = problem(&w, &format!("/v1/orders/{}", iuid(99, 3))).await?;
    assert_eq!((status, body["reason"].as_str()), (502, Some("no_owner")));
    assert!(ps.contains("error=destination_not_found"), "{ps}");
    // no route: 404
    let (status, body, ps) = problem(&w, "/nowhere").await?;
    assert_eq!((status, body["reason"].as_str()), (404, Some("no_route")));
    assert!(ps.contains("error=destination_not_found"), "{ps}");
    // The echoed input is escaped and truncated.
    let long = "%0A".repeat(300);
    let (status, body, _) = problem(&w, &format!("/v1/orders/{long}")).await?;
    assert_eq!(status, 400);
    let detail = body["detail"].as_str().unwrap_or("");
    assert!(!detail.contains('\n') && detail.len() < 400, "{detail}");
    // No upstream was contacted for any of these.
    assert_eq!(w.eu.hits() + w.kz.hits() + w.us.hits(), 0);
    Ok(())
}

#[tokio::test]
async fn upstream_failures_map_to_502_503_504() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    // kz points at a port nobody listens on; us answers slowly.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let extra = "upstream: { attempt_timeout: 300ms, request_timeout: 2s, retries: 0 }";
    let p = proxy(&table(eu.addr, dead, us.addr, extra)).await?;
    let got = get(&p.url(&format!("/v1/orders/{}", iuid(7, 3)))).await?;
    assert_eq!(got.status, 502);
    assert_eq!(got.json()?["reason"], "upstream_connect_failed");
    assert!(got.header("proxy-status").is_some_and(|p| p.contains("connection_refused")));
    let got = get(&p.url(&format!("/t/slow/{}", iuid(1, 3)))).await?;
    assert_eq!(got.status, 504);
    assert_eq!(got.json()?["reason"], "upstream_timeout");
    assert!(got.header("proxy-status").is_some_and(|p| p.contains("http_response_timeout")));
    drop(kz);
    Ok(())
}

#[tokio::test]
async fn a_refusing_endpoint_is_skipped() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let yaml = table(eu.addr, kz.addr, us.addr, "")
        .replace(&format!("[\"http://{}\"]", kz.addr), &format!("[\"http://{dead}\", \"http://{}\"]", kz.addr));
    let p = proxy(&yaml).await?;
    for _ in 0..6 {
        let got = get(&p.url(&format!("/v1/orders/{}", iuid(7, 3)))).await?;
        assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    }
    Ok(())
}

#[tokio::test]
async fn a_backend_closing_mid_response_does_not_hang_the_client() -> TestResult {
    let w = world("").await?;
    let url = w.proxy.url(&format!("/t/truncated/{}", iuid(7, 3)));
    let res = tokio::time::timeout(Duration::from_secs(5), get(&url)).await;
    match res {
        Ok(Ok(got)) => assert!(got.body.len() < 1000, "truncated body must not be completed"),
        Ok(Err(_)) => {} // the client saw the connection fail: fine
        Err(_) => return Err("client hung on a truncated upstream response".into()),
    }
    Ok(())
}

#[tokio::test]
async fn forged_host_and_absolute_uri_do_not_choose_the_upstream() -> TestResult {
    let w = world("").await?;
    let evil = backend("evil").await?;
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr).await?;
    let req = format!(
        "GET http://{evil}/v1/orders/{id} HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n",
        evil = evil.addr,
        id = iuid(7, 3)
    );
    s.write_all(req.as_bytes()).await?;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut resp)).await??;
    let resp = String::from_utf8_lossy(&resp).to_lowercase();
    assert!(resp.starts_with("http/1.1 200"), "{resp}");
    assert!(resp.contains("x-backend-region: kz"), "{resp}");
    // The backend sees its own authority as Host; the client's goes in X-Forwarded-Host.
    assert!(resp.contains(&format!("\"host\": \"{}\"", w.kz.addr)), "{resp}");
    assert!(resp.contains(&format!("\"x-forwarded-host\": \"{}\"", evil.addr)), "{resp}");
    assert_eq!(evil.hits(), 0);
    Ok(())
}

#[tokio::test]
async fn limits_answer_414_and_431_without_upstream_contact() -> TestResult {
    let w = world("server: { max_uri_bytes: 200, max_headers: 20 }").await?;
    let got = get(&w.proxy.url(&format!("/v1/orders/{}?pad={}", iuid(7, 3), "a".repeat(300)))).await?;
    assert_eq!(got.status, 414);
    assert_eq!(got.json()?["reason"], "uri_too_long");
    let mut req = Request::get(w.proxy.url(&format!("/v1/orders/{}", iuid(7, 3))));
    for i in 0..25 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let got = send(req.body(Full::new(Bytes::new()))?).await?;
    assert_eq!(got.status, 431);
    assert_eq!(got.json()?["reason"], "headers_too_large");
    assert_eq!(w.kz.hits(), 0);
    Ok(())
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() -> TestResult {
    let w = world("").await?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = Request::get(w.proxy.url(&format!("/v1/orders/{}", iuid(1, 3)))).body(Full::new(Bytes::new()))?;
    let resp = tokio::time::timeout(Duration::from_secs(5), client.request(req)).await??;
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.headers().get("x-backend-region").map(|v| v.as_bytes()), Some(&b"us"[..]));
    Ok(())
}

#[tokio::test]
async fn a_wrong_method_is_405_and_a_bad_id_is_explained_for_each_format() -> TestResult {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let yaml = table(eu.addr, kz.addr, us.addr, "").replace(
        "  - name: by-header",
        "  - name: cancel\n    match: { path: \"/v1/cancel/{id}\", methods: [POST, DELETE] }\n    \
         id: { path_param: id, formats: [iuid] }\n  - name: by-header",
    );
    let p = proxy(&yaml).await?;
    // A path a route has, with a method none of its routes takes.
    let got = get(&p.url(&format!("/v1/cancel/{}", iuid(7, 3)))).await?;
    assert_eq!((got.status.as_u16(), got.header("allow")), (405, Some("POST, DELETE")));
    assert_eq!(got.json()?["reason"], "method_not_allowed");
    // An id no format of a multi-format route reads: each format's reason.
    let got = get(&p.url("/v1/orders/12345abc")).await?;
    assert_eq!(got.status, 400);
    let body = got.json()?;
    let formats: Vec<(String, String)> = body["formats"]
        .as_array()
        .ok_or("no formats")?
        .iter()
        .map(|f| (f["format"].as_str().unwrap_or("").to_string(), f["reason"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(formats.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(), ["iuid", "uniqid"], "{body}");
    assert!(formats.iter().all(|(_, r)| !r.is_empty()), "{body}");
    let detail = body["detail"].as_str().unwrap_or("");
    assert!(detail.contains("not a valid iuid id") && detail.contains("not a valid uniqid id"), "{detail}");
    Ok(())
}

#[tokio::test]
async fn a_switch_of_protocols_nobody_asked_for_is_502() -> TestResult {
    // An upstream that answers every request with a 101 to h2c.
    let kz = support::raw_backend(|mut s| async move {
        let _ = s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n").await;
        let mut sink = [0u8; 1024];
        while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await?;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "upstream: { health: { interval: 0s } }")).await?;
    let path = format!("/t/ws/{}", iuid(7, 3));
    // A plain GET: it asked for no upgrade.
    let got = get(&p.url(&path)).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (502, Some("upstream_bad_upgrade")));
    // A WebSocket request answered with a switch to another protocol.
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    let r = support::raw(p.addr, req.as_bytes(), Duration::from_secs(3)).await?;
    assert_eq!(r.status(), Some(502), "{}", r.text());
    assert_eq!(r.problem().ok_or("problem+json")?["reason"], "upstream_bad_upgrade");
    Ok(())
}

#[tokio::test]
async fn an_upstream_cannot_set_the_proxys_own_answer_fields() -> TestResult {
    let kz = support::backend_with(|_req| async {
        let mut r = http::Response::new(support::full("{}"));
        for (name, value) in [("x-shardgate-region", "mars"), ("x-shardgate-partial", "eu"), ("x-app", "kept")] {
            r.headers_mut().insert(name, http::HeaderValue::from_static(value));
        }
        r
    })
    .await?
    .0;
    let (eu, us) = (backend("eu").await?, backend("us").await?);
    let path = format!("/v1/orders/{}", iuid(7, 3));
    for (debug, region) in [(false, None), (true, Some("kz"))] {
        let extra = format!("server: {{ debug_headers: {debug} }}\nupstream: {{ health: {{ interval: 0s }} }}");
        let p = proxy(&table(eu.addr, kz.addr, us.addr, &extra)).await?;
        let got = get(&p.url(&path)).await?;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("x-app"), Some("kept"));
        assert_eq!(got.header("x-shardgate-region"), region, "debug_headers {debug}");
        assert_eq!(got.header("x-shardgate-partial"), None);
    }
    Ok(())
}
