//! Global reads on real sockets: fan-out routes merging three regional
//! backends' lists (order, paging, partial answers, failures, a mesh peer
//! that must not fan out again), and search placement for ids that carry no
//! region (found once, then remembered; forgotten when a reload moves the
//! region).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use shardgate::ids::Iuid;

use crate::support::{
    backend_with, full, get, is_health_check, proxy, proxy_on, send, send_from, three_backends, three_listeners,
    BoxError, Running, TestBody, TestResult,
};

/// A client address no table here trusts as a mesh peer.
const STRANGER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 9));

/// `n` orders of a region minted in `country`, at `start + k * step` ms, as JSON elements.
fn orders(region: &str, country: u8, start: u64, step: u64, n: u64) -> Vec<serde_json::Value> {
    (0..n)
        .map(|k| {
            let id = Iuid::from_fields(start + k * step, country, 3, u64::from(country) * 1000 + k);
            serde_json::json!({ "id": id.to_string(), "region": region, "k": k })
        })
        .collect()
}

/// A backend that answers every request with `status` and `body` after `delay`.
async fn answering(status: u16, body: Bytes, delay: Duration) -> Result<Running, BoxError> {
    let (running, _) = backend_with(move |_req| {
        let body = body.clone();
        async move {
            tokio::time::sleep(delay).await;
            let mut resp: Response<TestBody> = Response::new(full(body));
            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
            resp.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
            resp
        }
    })
    .await?;
    Ok(running)
}

/// The request ids each request the regions were sent carried, in arrival order.
type IdLog = Arc<std::sync::Mutex<Vec<Vec<String>>>>;

/// A region that answers every request (200, a list of one order of
/// `country`) and logs the request ids it carried (health checks aside).
async fn id_recorder(country: u8, log: &IdLog) -> Result<Running, BoxError> {
    let log = Arc::clone(log);
    let (running, _) = backend_with(move |req| {
        if !is_health_check(&req) {
            let rids = req.headers().get_all("x-request-id").iter();
            let rids = rids.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
            if let Ok(mut l) = log.lock() {
                l.push(rids);
            }
        }
        let id = Iuid::from_fields(1_700_000_000_000, country, 3, 1).to_string();
        async move { Response::new(full(serde_json::json!([{ "id": id }]).to_string())) }
    })
    .await?;
    Ok(running)
}

#[tokio::test]
async fn every_leg_of_a_fanout_or_a_search_carries_the_requests_one_id() -> TestResult {
    let log = IdLog::default();
    let (eu, kz, us) = (id_recorder(49, &log).await?, id_recorder(7, &log).await?, id_recorder(1, &log).await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    // The ids of every request the regions were sent since the last look.
    let legs = || log.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
    for (n, sent) in [None, Some("client-rid-4"), Some("has space")].into_iter().enumerate() {
        let with_id = |url: String| -> Result<Request<Full<Bytes>>, BoxError> {
            let mut req = Request::get(url);
            if let Some(id) = sent {
                req = req.header("x-request-id", id);
            }
            Ok(req.body(Full::new(Bytes::new()))?)
        };
        let got = send(with_id(p.url("/v1/users/alice/orders"))?).await?;
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        let answered = got.header("x-request-id").ok_or("fan-out answer without an id")?.to_string();
        assert_eq!(legs(), vec![vec![answered.clone()]; 3], "{sent:?}");
        assert_eq!(answered == "client-rid-4", sent == Some("client-rid-4"), "{sent:?}: {answered}");

        // Every region holds the id here; a new one each time, so that the
        // search asks the regions again rather than the one it remembers.
        let legacy = format!("0190163d-8694-7000-8000-00000000000{n}");
        let got = send(with_id(p.url(&format!("/v1/legacy/{legacy}")))?).await?;
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        let answered = got.header("x-request-id").ok_or("search answer without an id")?.to_string();
        let asked = legs();
        assert!(!asked.is_empty() && asked.iter().all(|ids| *ids == [answered.as_str()]), "{sent:?}: {asked:?}");
        assert_eq!(answered == "client-rid-4", sent == Some("client-rid-4"), "{sent:?}: {answered}");
    }
    Ok(())
}

async fn list(items: &[serde_json::Value]) -> Result<Running, BoxError> {
    answering(200, Bytes::from(serde_json::Value::from(items.to_vec()).to_string()), Duration::ZERO).await
}

/// A table of three regions on these backends with one fan-out route
/// (`fanout` is the rule's body, in flow style) and one search route.
fn table(eu: SocketAddr, kz: SocketAddr, us: SocketAddr, fanout: &str) -> String {
    format!(
        r#"version: 1
regions:
  eu: {{ upstreams: ["http://{eu}"] }}
  kz: {{ upstreams: ["http://{kz}"] }}
  us: {{ upstreams: ["http://{us}"] }}
countries:
  KZ: {{ id: 7, region: kz }}
  DE: {{ id: 49, region: eu }}
  US: {{ id: 1, region: us }}
routes:
  - name: user-orders
    match: {{ path: "/v1/users/{{user}}/orders" }}
    fanout: {{ {fanout} }}
  - name: legacy
    match: {{ path: "/v1/legacy/{{id}}", methods: [GET, HEAD, PUT] }}
    id: {{ path_param: id, formats: [uuidv7] }}
    placement: search
"#
    )
}

fn ids(body: &serde_json::Value) -> Vec<String> {
    body["items"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().filter_map(|i| i["id"].as_str().map(String::from)).collect())
}

#[tokio::test]
async fn fanout_merges_three_regions_into_one_time_order_and_pages_through_it_once() -> TestResult {
    // Interleaved in time, with equal times across regions (the tie-breakers decide).
    let eu_items = orders("eu", 49, 1_700_000_000_000, 60_000, 5);
    let kz_items = orders("kz", 7, 1_700_000_030_000, 60_000, 4);
    let us_items = orders("us", 1, 1_700_000_000_000, 120_000, 6);
    let (eu, kz, us) = (list(&eu_items).await?, list(&kz_items).await?, list(&us_items).await?);
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "sort: { formats: [iuid] }")).await?;
    let mut expected: Vec<(u64, String)> = Vec::new();
    for item in eu_items.iter().chain(&kz_items).chain(&us_items) {
        let id = item["id"].as_str().ok_or("id")?;
        expected.push((Iuid::parse(id)?.unix_ts_ms(), id.to_string()));
    }
    // The whole list: newest first.
    let whole = get(&p.url("/v1/users/alice/orders?limit=100")).await?;
    assert_eq!(whole.status, 200, "{}", String::from_utf8_lossy(&whole.body));
    let body = whole.json()?;
    let merged = ids(&body);
    assert_eq!(merged.len(), 15);
    let times: Vec<u64> = merged.iter().map(|id| Iuid::parse(id).map(|i| i.unix_ts_ms())).collect::<Result<_, _>>()?;
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "not newest first: {times:?}");
    assert_eq!(body["next_cursor"], serde_json::Value::Null);
    assert_eq!(body["failed"], serde_json::json!([]));
    let mut answered: Vec<(String, usize)> = body["regions"]
        .as_array()
        .ok_or("regions")?
        .iter()
        .map(|r| (r["region"].as_str().unwrap_or("?").to_string(), r["items"].as_u64().unwrap_or(0) as usize))
        .collect();
    answered.sort();
    let counts = [("eu", eu_items.len()), ("kz", kz_items.len()), ("us", us_items.len())];
    assert_eq!(answered, counts.map(|(r, n)| (r.to_string(), n)), "each region with its count");
    let text = String::from_utf8_lossy(&whole.body);
    assert!(text.contains(&format!(r#"{{"items":{},"region":"eu"}}"#, eu_items.len())), "{text}");
    // Page by page with the cursor: the same elements, each once, in the same order.
    let mut paged = Vec::new();
    let mut url = p.url("/v1/users/alice/orders?limit=4");
    for _ in 0..10 {
        let page = get(&url).await?;
        assert_eq!(page.status, 200);
        let page = page.json()?;
        paged.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => url = p.url(&format!("/v1/users/alice/orders?limit=4&cursor={c}")),
            None => break,
        }
    }
    assert_eq!(paged, merged);
    assert_eq!(paged.iter().collect::<HashSet<_>>().len(), 15, "duplicates");
    let mut expected_times: Vec<u64> = expected.iter().map(|(t, _)| *t).collect();
    expected_times.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(times, expected_times);
    let expected_ids: HashSet<&String> = expected.iter().map(|(_, id)| id).collect();
    assert_eq!(merged.iter().collect::<HashSet<_>>(), expected_ids);
    // Each region was asked once per page, without the proxy's own parameters.
    assert_eq!((eu.hits(), kz.hits(), us.hits()), (5, 5, 5));
    // Bad page requests are the client's error.
    for (query, reason) in [("limit=0", "bad_page"), ("limit=x", "bad_page"), ("cursor=00zz", "bad_page")] {
        let got = get(&p.url(&format!("/v1/users/alice/orders?{query}"))).await?;
        assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (400, Some(reason)), "{query}");
    }
    Ok(())
}

#[tokio::test]
async fn fanout_asks_only_the_regions_owning_the_countries_named() -> TestResult {
    let [eu, kz, us] =
        [list(&orders("eu", 49, 1, 1, 2)).await?, list(&orders("kz", 7, 1, 1, 2)).await?, list(&[]).await?];
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "countries: { header: X-Countries }")).await?;
    let req =
        Request::get(p.url("/v1/users/alice/orders")).header("x-countries", "kz, de").body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!(got.status, 200);
    assert_eq!(ids(&got.json()?).len(), 4);
    assert_eq!((eu.hits(), kz.hits(), us.hits()), (1, 1, 0));
    let req =
        Request::get(p.url("/v1/users/alice/orders")).header("x-countries", "KZ,XX").body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (400, Some("unknown_country")));
    Ok(())
}

#[tokio::test]
async fn a_slow_region_is_cut_at_its_timeout_and_named_or_fails_the_request_by_policy() -> TestResult {
    let eu = list(&orders("eu", 49, 1_700_000_000_000, 1000, 3)).await?;
    let kz = list(&orders("kz", 7, 1_700_000_000_500, 1000, 3)).await?;
    let slow = answering(200, Bytes::from("[]"), Duration::from_secs(5)).await?;
    let p = proxy(&table(eu.addr, kz.addr, slow.addr, "leg_timeout: 300ms, deadline: 2s")).await?;
    let got = get(&p.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("x-shardgate-partial"), Some("us"));
    let body = got.json()?;
    assert_eq!(ids(&body).len(), 6);
    assert_eq!(body["failed"][0]["region"], "us");
    assert_eq!(body["failed"][0]["reason"], "leg_timeout");
    // One region at a time: the first slow one uses up its leg_timeout, the
    // second is cut by the whole request's deadline, the third never starts.
    let slow2 = answering(200, Bytes::from("[]"), Duration::from_secs(5)).await?;
    let fanout = "leg_timeout: 1s, deadline: 1500ms, concurrency: 1, regions: [us, kz, eu]";
    let p = proxy(&table(eu.addr, slow2.addr, slow.addr, fanout)).await?;
    let got = get(&p.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 504, "{}", String::from_utf8_lossy(&got.body));
    let failed = got.json()?["failed"].clone();
    let reason = |region: &str| {
        failed.as_array().and_then(|a| a.iter().find(|f| f["region"] == region)).map(|f| f["reason"].clone())
    };
    assert_eq!(reason("us"), Some("leg_timeout".into()));
    assert_eq!(reason("kz"), Some("deadline".into()));
    assert_eq!(reason("eu"), Some("deadline".into()));
    assert_eq!(eu.hits(), 1, "eu was never asked by the second proxy");
    // partial: fail: the same region fails the request, 504 as all failures were timeouts.
    let p = proxy(&table(eu.addr, kz.addr, slow.addr, "leg_timeout: 300ms, partial: fail")).await?;
    let got = get(&p.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 504);
    let problem = got.json()?;
    assert_eq!(problem["reason"], "regions_timeout");
    assert_eq!(problem["failed"][0]["region"], "us");
    Ok(())
}

#[tokio::test]
async fn regions_that_answer_badly_are_reported_never_merged() -> TestResult {
    let big = Bytes::from(format!("[{}]", vec![r#"{"id":"x"}"#; 200].join(",")));
    let too_large = answering(200, big, Duration::ZERO).await?;
    let not_json = answering(200, Bytes::from("<html>oops</html>"), Duration::ZERO).await?;
    let failing = answering(500, Bytes::from(r#"{"error":"boom"}"#), Duration::ZERO).await?;
    let fanout = "max_leg_bytes: 1024";
    let p = proxy(&table(too_large.addr, not_json.addr, failing.addr, fanout)).await?;
    let got = get(&p.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    let problem = got.json()?;
    assert_eq!(problem["reason"], "regions_failed");
    let reasons: Vec<(String, String)> = problem["failed"]
        .as_array()
        .ok_or("failed")?
        .iter()
        .map(|f| (f["region"].as_str().unwrap_or("").to_string(), f["reason"].as_str().unwrap_or("").to_string()))
        .collect();
    for expected in [("eu", "too_large"), ("kz", "invalid_json"), ("us", "status")] {
        assert!(reasons.contains(&(expected.0.into(), expected.1.into())), "{expected:?} in {reasons:?}");
    }
    // With one good region, the others are named beside its answer.
    let good = list(&orders("us", 1, 1, 1, 2)).await?;
    let no_key = list(&[serde_json::json!({ "name": "no id" })]).await?;
    let p = proxy(&table(no_key.addr, not_json.addr, good.addr, fanout)).await?;
    let body = get(&p.url("/v1/users/alice/orders")).await?.json()?;
    assert_eq!(ids(&body).len(), 2);
    let failed: Vec<&str> =
        body["failed"].as_array().ok_or("failed")?.iter().filter_map(|f| f["reason"].as_str()).collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.contains(&"bad_item") && failed.contains(&"invalid_json"), "{failed:?}");
    // A list said to be compressed is not read as plain JSON (the leg's
    // fields are looked up, not only its body).
    let items = serde_json::Value::from(orders("kz", 7, 1, 1, 2)).to_string();
    let (encoded, _) = backend_with(move |_req| {
        let items = items.clone();
        async move {
            let mut resp: Response<TestBody> = Response::new(full(items));
            resp.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
            resp.headers_mut().insert("content-encoding", http::HeaderValue::from_static("gzip"));
            resp
        }
    })
    .await?;
    let p = proxy(&table(no_key.addr, encoded.addr, good.addr, fanout)).await?;
    let body = get(&p.url("/v1/users/alice/orders")).await?.json()?;
    assert_eq!(ids(&body).len(), 2, "{body}");
    let kz = body["failed"].as_array().and_then(|a| a.iter().find(|f| f["region"] == "kz")).ok_or("kz failed")?;
    assert_eq!(kz["reason"], "invalid_json", "{body}");
    assert!(kz["detail"].as_str().unwrap_or("").contains("encoded (gzip)"), "{body}");
    Ok(())
}

/// A mesh table: the regions eu, kz and us on backends `be`; a region with
/// a gateway in `gw` is reached through it, unless it is `local` (this
/// instance's region, served from its backend). `local: None` is a front door.
fn mesh_table(local: Option<&str>, be: &[SocketAddr; 3], gw: &[Option<SocketAddr>; 3]) -> String {
    let head = local.map_or(String::new(), |r| format!("region: {r}\ninstance: gw-{r}\n"));
    let mut regions = String::new();
    for (i, name) in ["eu", "kz", "us"].into_iter().enumerate() {
        let body = match gw[i] {
            Some(g) if local == Some(name) => format!(r#"upstreams: ["http://{}"], peer: "http://{g}""#, be[i]),
            Some(g) => format!(r#"peer: "http://{g}""#),
            None => format!(r#"upstreams: ["http://{}"]"#, be[i]),
        };
        regions.push_str(&format!("  {name}: {{ {body} }}\n"));
    }
    format!(
        r#"version: 1
{head}mesh: {{ trusted_peers: ["127.0.0.1/32"] }}
regions:
{regions}routes:
  - name: user-orders
    match: {{ path: "/v1/users/{{user}}/orders" }}
    fanout: {{ sort: {{ formats: [iuid] }} }}
  - name: legacy
    match: {{ path: "/v1/legacy/{{id}}" }}
    id: {{ path_param: id, formats: [uuidv7] }}
    placement: search
"#
    )
}

/// A front door and gw-us on backends `be`: eu and kz reached directly, us
/// through gw-us, whose table is `us_table` of its mesh table. The front,
/// gw-us, and gw-us's mesh table.
async fn front_and_gw_us(
    be: [SocketAddr; 3],
    us_table: impl FnOnce(&str) -> String,
) -> Result<(Running, Running, String), BoxError> {
    let (listeners, addrs) = three_listeners().await?;
    let [front_l, us_l, _] = listeners;
    let gws = [None, None, Some(addrs[1])];
    let table = mesh_table(Some("us"), &be, &gws);
    let gw_us = proxy_on(us_l, &us_table(&table)).await?;
    let front = proxy_on(front_l, &mesh_table(None, &be, &gws)).await?;
    Ok((front, gw_us, table))
}

/// `mesh`'s table with one route of its own, none of the mesh's (an
/// older table, during a rollout).
fn without_the_routes(mesh: &str) -> String {
    let routes = mesh.find("routes:").unwrap_or(mesh.len());
    format!("{}routes:\n  - name: other\n    match: {{ path: \"/other\" }}\n    to: local\n", &mesh[..routes])
}

#[tokio::test]
async fn a_fanout_or_search_through_a_mesh_peer_is_served_there_and_never_fanned_out_again() -> TestResult {
    let eu = list(&orders("eu", 49, 1_700_000_000_000, 1000, 2)).await?;
    let kz = list(&orders("kz", 7, 1_700_000_000_300, 1000, 2)).await?;
    let us = list(&orders("us", 1, 1_700_000_000_600, 1000, 2)).await?;
    let be = [eu.addr, kz.addr, us.addr];
    let (listeners, addrs) = three_listeners().await?;
    let [front_l, us_l, _] = listeners;
    let gws = [None, None, Some(addrs[1])];
    let gw_us = proxy_on(us_l, &mesh_table(Some("us"), &be, &gws)).await?;
    let front = proxy_on(front_l, &mesh_table(None, &be, &gws)).await?;
    let got = get(&front.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let merged = ids(&got.json()?);
    assert_eq!(merged.len(), 6);
    assert_eq!(merged.iter().collect::<HashSet<_>>().len(), 6);
    // us's leg went through gw-us, which asked its own backend once and no one else.
    assert_eq!(gw_us.handled(), 1);
    assert_eq!((eu.hits(), kz.hits(), us.hits()), (1, 1, 1));
    // A client cannot pose as a leg: from a stranger the mark is removed and gw-us fans out itself.
    let req = Request::get(gw_us.url("/v1/users/alice/orders"))
        .header("x-shardgate-leg", "us")
        .body(Full::new(Bytes::new()))?;
    let got = send_from(STRANGER, req).await?;
    assert_eq!(ids(&got.json()?).len(), 6);
    assert_eq!((eu.hits(), kz.hits(), us.hits()), (2, 2, 2));
    Ok(())
}

#[tokio::test]
async fn a_peer_without_the_route_is_a_failed_leg_not_an_empty_region() -> TestResult {
    // gw-us's table (an older one, during a rollout) has no fan-out route:
    // it answers the leg 404 itself (no_route), which says nothing of us's orders.
    let eu = list(&orders("eu", 49, 1_700_000_000_000, 1000, 2)).await?;
    let kz = list(&orders("kz", 7, 1_700_000_000_300, 1000, 2)).await?;
    let us = list(&orders("us", 1, 1_700_000_000_600, 1000, 2)).await?;
    let (front, _gw_us, _) = front_and_gw_us([eu.addr, kz.addr, us.addr], without_the_routes).await?;
    // The list: eu's and kz's orders, and us named as failed, not as empty.
    let got = get(&front.url("/v1/users/alice/orders")).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert!(got.header("x-shardgate-partial").is_some(), "no partial mark");
    let body = got.json()?;
    assert_eq!(ids(&body).len(), 4, "{body}");
    let failed: Vec<&str> =
        body["failed"].as_array().ok_or("failed")?.iter().filter_map(|f| f["region"].as_str()).collect();
    assert_eq!(failed, ["us"], "{body}");
    Ok(())
}

#[tokio::test]
async fn a_remembered_region_whose_peer_lost_the_route_fails_and_is_not_forgotten() -> TestResult {
    // The front door finds a legacy id in us through gw-us; then gw-us takes
    // a table without the route (a rollout going back).
    let [eu, kz, us] = three_backends().await?;
    let (front, gw_us, us_table) = front_and_gw_us([eu.addr, kz.addr, us.addr], str::to_string).await?;
    let legacy = shardgate::cli::backend::legacy_ids("us").into_iter().next().ok_or("no legacy id")?;
    let url = front.url(&format!("/v1/legacy/{legacy}"));
    assert_eq!(get(&url).await?.status, 200);
    let older = without_the_routes(&us_table);
    let cfg = shardgate::config::load_str(&older, "t.yaml").map_err(|e| e.to_string())?;
    gw_us.proxy.as_ref().ok_or("proxy")?.shared().table.publish_config(&cfg, older.clone())?;
    // A write to the remembered region: gw-us's own 404 is us's failure, not "no such entity".
    let got = send(Request::put(url.as_str()).body(Full::new(Bytes::from("{}")))?).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.json()?["reason"], "regions_failed");
    // Still remembered: once gw-us has the route again, the write goes to us alone.
    let cfg = shardgate::config::load_str(&us_table, "t.yaml").map_err(|e| e.to_string())?;
    gw_us.proxy.as_ref().ok_or("proxy")?.shared().table.publish_config(&cfg, us_table.clone())?;
    let before = (eu.hits(), kz.hits());
    let got = send(Request::put(url.as_str()).body(Full::new(Bytes::from("{}")))?).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("us")));
    assert_eq!((eu.hits(), kz.hits()), before, "searched again");
    Ok(())
}

#[tokio::test]
async fn a_legacy_id_is_found_through_every_gateway_and_then_asked_of_its_region_alone() -> TestResult {
    // Echo backends that hold the demo's legacy records of their region.
    let [eu, kz, us] = three_backends().await?;
    let legacy = shardgate::cli::backend::legacy_ids("us").into_iter().next().ok_or("no legacy id")?;
    let path = format!("/v1/legacy/{legacy}");
    // Three regional gateways, each reaching the other regions through their gateways.
    let (listeners, addrs) = three_listeners().await?;
    let be = [eu.addr, kz.addr, us.addr];
    let gws = addrs.map(Some);
    let mut gateways = Vec::new();
    for (listener, region) in listeners.into_iter().zip(["eu", "kz", "us"]) {
        gateways.push(proxy_on(listener, &mesh_table(Some(region), &be, &gws)).await?);
    }
    for gw in &gateways {
        let got = get(&gw.url(&path)).await?;
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.json()?["region"], "us");
    }
    // gw-eu's and gw-kz's us legs went through gw-us, which served them from
    // its backend without searching again (one request each, plus its own).
    assert_eq!(gateways[2].handled(), 3);
    // Remembered: the next request at each gateway goes to us alone.
    let before = (eu.hits(), kz.hits(), us.hits());
    for gw in &gateways {
        let got = get(&gw.url(&path)).await?;
        assert_eq!((got.status.as_u16(), got.json()?["region"].as_str()), (200, Some("us")));
    }
    assert_eq!((eu.hits(), kz.hits(), us.hits()), (before.0, before.1, before.2 + 3));
    let front = &gateways[0];
    // An id no region holds: 404, naming the regions asked.
    let missing = get(&front.url("/v1/legacy/017491bb-3800-74cf-8cf4-000000000000")).await?;
    assert_eq!(missing.status, 404);
    let problem = missing.json()?;
    assert_eq!(problem["reason"], "not_found_in_any_region");
    assert_eq!(problem["asked"], serde_json::json!(["eu", "kz", "us"]));
    Ok(())
}

#[tokio::test]
async fn a_search_leg_that_writes_where_the_peers_table_places_the_entity_elsewhere_is_refused() -> TestResult {
    // The front door searches for legacy ids; gw-us's table (say, a newer
    // one during a rollout) sends that route to eu. The front finds the id
    // in us through gw-us, and its PUT goes there as a leg.
    let [eu, kz, us] = three_backends().await?;
    let searched = "    id: { path_param: id, formats: [uuidv7] }\n    placement: search\n";
    let to_eu = |mesh: &str| mesh.replace(searched, "    to: { region: eu }\n");
    let (front, _gw_us, us_table) = front_and_gw_us([eu.addr, kz.addr, us.addr], to_eu).await?;
    assert!(us_table.contains(searched));
    let legacy = shardgate::cli::backend::legacy_ids("us").into_iter().next().ok_or("no legacy id")?;
    let url = front.url(&format!("/v1/legacy/{legacy}"));
    let before = (eu.hits(), us.hits());
    let got = send(Request::put(url.as_str()).body(Full::new(Bytes::from("{}")))?).await?;
    assert_eq!(got.status, 421, "{}", String::from_utf8_lossy(&got.body));
    let problem = got.json()?;
    assert_eq!((problem["reason"].as_str(), problem["owner"].as_str()), (Some("not_owner"), Some("eu")), "{problem}");
    // us's backend got the search's HEAD, never the PUT; eu's only its HEAD.
    assert_eq!((eu.hits(), us.hits()), (before.0 + 1, before.1 + 1));
    // Reads are served where the leg asks.
    let got = get(&url).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("us")));
    Ok(())
}

#[tokio::test]
async fn a_reload_that_moves_a_regions_backends_forgets_what_was_found_there() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let us2 = crate::support::backend("us").await?;
    let legacy = shardgate::cli::backend::legacy_ids("us").into_iter().next().ok_or("no legacy id")?;
    let path = format!("/v1/legacy/{legacy}");
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    assert_eq!(get(&p.url(&path)).await?.status, 200);
    assert_eq!(get(&p.url(&path)).await?.status, 200);
    assert_eq!(us.hits(), 2);
    let proxy_ref = p.proxy.as_ref().ok_or("proxy")?;
    let shared = proxy_ref.shared();
    let stats = shared.found.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
    // us moves to another backend: its ids are searched for again, there.
    let moved = table(eu.addr, kz.addr, us2.addr, "");
    let cfg = shardgate::config::load_str(&moved, "t.yaml")?;
    shared.table.publish(shardgate::routing::Table::compile(&cfg), moved.clone());
    let got = get(&p.url(&path)).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("us")));
    assert_eq!((us.hits(), us2.hits()), (2, 1));
    assert_eq!(shared.found.stats().stale, 1);
    // A write finds its region with HEAD, then goes there alone.
    let put_id = shardgate::cli::backend::legacy_ids("kz").into_iter().next().ok_or("no legacy id")?;
    let before = (eu.hits(), kz.hits(), us2.hits());
    let req = Request::put(p.url(&format!("/v1/legacy/{put_id}"))).body(Full::new(Bytes::from("{}")))?;
    let got = send(req).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    assert_eq!(kz.hits(), before.1 + 2, "a HEAD, then the PUT");
    assert!(eu.hits() <= before.0 + 1 && us2.hits() <= before.2 + 1, "the others got at most the HEAD");
    // A region that cannot be reached is a failure, not a "not found".
    us2.stop();
    drop(us2);
    let got = get(&p.url("/v1/legacy/017491bb-3800-74cf-8cf4-000000000000")).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    let problem = got.json()?;
    assert_eq!(problem["reason"], "regions_failed");
    assert_eq!(problem["failed"][0]["region"], "us");
    Ok(())
}

#[tokio::test]
async fn explain_and_metrics_say_which_regions_were_asked() -> TestResult {
    use shardgate::app::{server_options, Instance};
    let [eu, kz, us] = three_backends().await?;
    let text = table(eu.addr, kz.addr, us.addr, "sort: { formats: [iuid] }");
    let cfg = shardgate::config::load_str(&text, "t.yaml")?;
    let inst = Arc::new(Instance::new(&cfg, &text, None, None));
    let (pl, al) =
        (tokio::net::TcpListener::bind("127.0.0.1:0").await?, tokio::net::TcpListener::bind("127.0.0.1:0").await?);
    let (proxy_addr, admin) = (pl.local_addr()?, al.local_addr()?);
    let i = Arc::clone(&inst);
    let opts = server_options(&cfg);
    let run = tokio::spawn(async move { i.run(pl, Some(al), opts).await });
    let legacy = shardgate::cli::backend::legacy_ids("us").into_iter().next().ok_or("no legacy id")?;
    // Not searched yet: /explain says where it would ask, and that nothing is known.
    let explain = |route: &str, id: &str| format!("http://{admin}/explain?id={id}&route={route}");
    let before = get(&explain("legacy", &legacy)).await?.json()?;
    let entry = &before["routes"][0];
    assert_eq!(entry["placement"], "search");
    assert_eq!(entry["search"]["regions"], serde_json::json!(["eu", "kz", "us"]));
    assert_eq!(entry["search"]["found"], serde_json::Value::Null);
    let got = get(&format!("http://{proxy_addr}/v1/legacy/{legacy}")).await?;
    assert_eq!(got.status, 200);
    let after = get(&explain("legacy", &legacy)).await?.json()?;
    assert_eq!(after["routes"][0]["search"]["found"]["region"], "us");
    assert_eq!(after["routes"][0]["region"], "us");
    // A fan-out route, named, shows its regions and merge.
    let fan = get(&explain("user-orders", &legacy)).await?.json()?;
    assert_eq!(fan["routes"][0]["fanout"]["regions"], serde_json::json!(["eu", "kz", "us"]));
    assert_eq!(fan["routes"][0]["fanout"]["order"], "desc");
    let orders = get(&format!("http://{proxy_addr}/v1/users/alice/orders")).await?;
    assert_eq!(orders.status, 200);
    assert_eq!(ids(&orders.json()?).len(), 9, "the demo backends hold 3 orders of alice each");
    let metrics = String::from_utf8(get(&format!("http://{admin}/metrics")).await?.body.to_vec())?;
    for line in [
        r#"shardgate_search_cache_lookups_total{result="miss"} 1"#,
        r#"shardgate_search_cache_entries 1"#,
        r#"shardgate_legs_total{kind="search",route="legacy",region="us",outcome="found"} 1"#,
        r#"shardgate_legs_total{kind="fanout",route="user-orders",region="kz",outcome="ok"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in /metrics:\n{metrics}");
    }
    // A fan-out has no one region its upstream time could be held against.
    let unnamed = metrics.lines().find(|l| l.contains("client_request_duration") && l.contains("region=\"\""));
    assert!(unnamed.is_none(), "{unnamed:?}");
    run.abort();
    Ok(())
}

#[tokio::test]
async fn the_demo_prints_a_fanout_and_a_search_whose_answers_come_from_every_region() -> TestResult {
    let mut text = shardgate::cli::demo::DEMO_TABLE.to_string();
    let mut backends = Vec::new();
    for (region, placeholder) in [("eu", "127.0.0.1:18081"), ("kz", "127.0.0.1:18082"), ("us", "127.0.0.1:18083")] {
        let b = crate::support::backend(region).await?;
        text = text.replace(placeholder, &b.addr.to_string());
        backends.push(b);
    }
    let p = proxy(&text).await?;
    let cfg = shardgate::config::load_str(&text, "demo.yaml")?;
    let lines = shardgate::cli::demo::global_read_examples(&cfg, p.addr);
    let urls: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("curl"))
        .filter_map(|l| l.split_whitespace().last())
        .map(|u| u.trim_matches('\''))
        .collect();
    assert_eq!(urls.len(), 2, "{lines:?}");
    let fanout = get(urls[0]).await?.json()?;
    let regions: HashSet<&str> =
        fanout["items"].as_array().ok_or("items")?.iter().filter_map(|i| i["region"].as_str()).collect();
    assert_eq!(regions, HashSet::from(["eu", "kz", "us"]), "{fanout}");
    let found = get(urls[1]).await?;
    assert_eq!((found.status.as_u16(), found.json()?["region"].as_str()), (200, Some("us")));
    Ok(())
}

#[tokio::test]
async fn legs_ask_for_whole_plain_lists_and_a_region_without_one_answers_404() -> TestResult {
    // A region that says what it was sent, inside the one order it holds.
    let (seen, _) = backend_with(|req| async move {
        let h = |name: &str| req.headers().get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let id = Iuid::from_fields(1_700_000_000_000, 49, 3, 1).to_string();
        let item = serde_json::json!({
            "id": id, "query": req.uri().query(), "method": req.method().as_str(),
            "accept_encoding": h("accept-encoding"), "if_none_match": h("if-none-match"),
            "range": h("range"), "content_length": h("content-length"), "expect": h("expect"),
        });
        Response::new(full(serde_json::Value::from(vec![item]).to_string()))
    })
    .await?;
    let nobody = answering(404, Bytes::from(r#"{"error":"no such user"}"#), Duration::ZERO).await?;
    let p = proxy(&table(seen.addr, nobody.addr, nobody.addr, "")).await?;
    let req = Request::get(p.url("/v1/users/alice/orders?status=open&limit=5&cursor="))
        .header("accept-encoding", "gzip, br")
        .header("if-none-match", "\"v1\"")
        .header("range", "bytes=0-10")
        .body(Full::new(Bytes::new()))?;
    let got = send(req).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    // 404 is "no list here": an empty one, not a failure.
    assert_eq!(got.header("x-shardgate-partial"), None);
    let body = got.json()?;
    assert_eq!(body["failed"], serde_json::json!([]));
    let item = &body["items"][0];
    assert_eq!(item["query"], "status=open", "the proxy's own parameters stay with it");
    assert_eq!(item["method"], "GET");
    for field in ["accept_encoding", "if_none_match", "range", "content_length", "expect"] {
        assert_eq!(item[field], serde_json::Value::Null, "{field} reached the region");
    }
    // Every region without a list: 404.
    let p = proxy(&table(nobody.addr, nobody.addr, nobody.addr, "")).await?;
    let got = get(&p.url("/v1/users/nobody/orders")).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (404, Some("not_found_in_any_region")));
    Ok(())
}

#[tokio::test]
async fn a_search_passes_on_a_refusal_every_region_agrees_on_and_the_owners_304() -> TestResult {
    let refusing = answering(403, Bytes::from(r#"{"error":"forbidden"}"#), Duration::ZERO).await?;
    let p = proxy(&table(refusing.addr, refusing.addr, refusing.addr, "")).await?;
    let got = get(&p.url("/v1/legacy/017491bb-3800-74cf-8cf4-000000000000")).await?;
    assert_eq!((got.status.as_u16(), got.json()?["error"].as_str()), (403, Some("forbidden")));
    // The owner answers a conditional read 304, the others 404: the 304 is the answer.
    let (owner, _) = backend_with(|req| async move {
        let mut resp: Response<TestBody> = Response::new(full(""));
        if req.headers().contains_key("if-none-match") {
            *resp.status_mut() = http::StatusCode::NOT_MODIFIED;
        }
        resp
    })
    .await?;
    let nobody = answering(404, Bytes::from("{}"), Duration::ZERO).await?;
    let p = proxy(&table(nobody.addr, nobody.addr, owner.addr, "")).await?;
    let req = Request::get(p.url("/v1/legacy/017491bb-3800-74cf-8cf4-000000000000"))
        .header("if-none-match", "\"v1\"")
        .body(Full::new(Bytes::new()))?;
    assert_eq!(send(req).await?.status, 304);
    Ok(())
}

#[test]
fn a_fanout_whose_deadline_does_not_cover_its_rounds_of_legs_is_warned_of() -> TestResult {
    let at = SocketAddr::from(([127, 0, 0, 1], 9));
    let warned = |fanout: &str| -> Result<Vec<String>, BoxError> {
        let cfg = shardgate::config::load_str(&table(at, at, at, fanout), "t.yaml").map_err(|e| e.to_string())?;
        Ok(cfg.warnings().into_iter().filter(|w| w.contains("fanout.deadline")).collect())
    };
    // Three regions one at a time: three rounds of 2 s, and 5 s to do them in.
    let w = warned("concurrency: 1, leg_timeout: 2s, deadline: 5s")?;
    assert!(w.len() == 1 && w[0].contains("route user-orders") && w[0].contains("3 rounds"), "{w:?}");
    assert_eq!(warned("concurrency: 1, leg_timeout: 2s, deadline: 6s")?, Vec::<String>::new());
    assert_eq!(warned("concurrency: 3, leg_timeout: 2s, deadline: 2s")?, Vec::<String>::new());
    Ok(())
}

#[test]
fn a_fanout_whose_answers_may_be_larger_than_the_room_is_warned_of() -> TestResult {
    let at = SocketAddr::from(([127, 0, 0, 1], 9));
    let warned = |fanout: &str| -> Result<Vec<String>, BoxError> {
        let yaml = table(at, at, at, fanout) + "server: { fanout_buffer_bytes: 2000000 }\n";
        let cfg = shardgate::config::load_str(&yaml, "t.yaml").map_err(|e| e.to_string())?;
        Ok(cfg.warnings().into_iter().filter(|w| w.contains("fanout_buffer_bytes")).collect())
    };
    let w = warned("max_leg_bytes: 4000000")?;
    assert!(w.len() == 1 && w[0].contains("route user-orders") && w[0].contains("(4000000)"), "{w:?}");
    assert_eq!(warned("max_leg_bytes: 2000000")?, Vec::<String>::new());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_brings_a_fanout_deadline_too_short_for_its_legs_is_warned_of() -> TestResult {
    use crate::support::binary::spawn_table;
    use crate::support::ops::{post, replace_file};
    let at = SocketAddr::from(([127, 0, 0, 1], 9));
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("stderr.log");
    let text = |fanout: &str, ports: (u16, u16)| {
        format!("listen: 127.0.0.1:{}\nadmin: 127.0.0.1:{}\n{}", ports.0, ports.1, table(at, at, at, fanout))
    };
    let (mut child, port, admin) = spawn_table(
        dir.path(),
        &text("concurrency: 3, leg_timeout: 2s, deadline: 5s", (18080, 19901)),
        Some(&log),
        None,
    )
    .await?;
    let warned = || std::fs::read_to_string(&log).map(|l| l.contains("fanout.deadline"));
    assert!(!warned()?, "warned of a table that covers its legs");
    // One region at a time: three rounds of 2 s, and 5 s to do them in.
    replace_file(
        &dir.path().join("table.yaml"),
        &text("concurrency: 1, leg_timeout: 2s, deadline: 5s", (port, admin)),
    )?;
    let got = post(&format!("http://127.0.0.1:{admin}/reload")).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !warned()? {
        if std::time::Instant::now() > deadline {
            return Err(format!("the reload's table was not warned of: {}", std::fs::read_to_string(&log)?).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.signal("-TERM")?;
    child.wait_exit(Duration::from_secs(10)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_parsed_elements_do_not_fit_the_room_is_its_regions_failure() -> TestResult {
    // eu's text (under 500 kB) fits a room of 1 MB; its 6000 elements, as
    // they wait to be merged, take it past that.
    let eu_items = orders("eu", 49, 1_700_000_000_000, 1000, 6000);
    let eu_bytes = serde_json::Value::from(eu_items.clone()).to_string().len();
    assert!(eu_bytes < 500_000, "{eu_bytes}");
    let (eu, kz, us) = (list(&eu_items).await?, list(&[]).await?, list(&[]).await?);
    let yaml =
        table(eu.addr, kz.addr, us.addr, "sort: { formats: [iuid] }") + "server: { fanout_buffer_bytes: 1000000 }\n";
    let p = proxy(&yaml).await?;
    let got = get(&p.url("/v1/users/alice/orders?limit=10")).await?;
    assert_eq!(got.header("x-shardgate-partial"), Some("eu"), "{}", String::from_utf8_lossy(&got.body));
    let body = got.json()?;
    assert_eq!((&body["failed"][0]["region"], &body["failed"][0]["reason"]), (&"eu".into(), &"too_large".into()));
    assert!(body["failed"][0]["detail"].as_str().is_some_and(|d| d.contains("6000 elements")), "{body}");
    Ok(())
}

#[tokio::test]
async fn fanouts_at_once_hold_no_more_answers_than_their_room() -> TestResult {
    // eu answers more than half the room at once (600 large elements: its
    // text, and little more once parsed), kz an empty list, us an empty
    // list a second late.
    let mut eu_items = orders("eu", 49, 1_700_000_000_000, 1000, 600);
    for item in &mut eu_items {
        item["pad"] = "x".repeat(600).into();
    }
    let eu_bytes = serde_json::Value::from(eu_items.clone()).to_string().len();
    assert!((360_000..500_000).contains(&eu_bytes), "{eu_bytes}");
    let eu = list(&eu_items).await?;
    let kz = list(&[]).await?;
    let us = answering(200, Bytes::from("[]"), Duration::from_secs(1)).await?;
    let yaml =
        table(eu.addr, kz.addr, us.addr, "sort: { formats: [iuid] }") + "server: { fanout_buffer_bytes: 700000 }\n";
    let p = proxy(&yaml).await?;
    let url = p.url("/v1/users/alice/orders?limit=10");
    // The first fan-out holds eu's answer while it waits for us.
    let first = tokio::spawn({
        let url = url.clone();
        async move { get(&url).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The second finds no room for eu's: eu is its failure, the rest is merged.
    let second = get(&url).await?;
    assert_eq!(second.status, 200, "{}", String::from_utf8_lossy(&second.body));
    assert_eq!(second.header("x-shardgate-partial"), Some("eu"));
    let body = second.json()?;
    assert_eq!((&body["failed"][0]["region"], &body["failed"][0]["reason"]), (&"eu".into(), &"proxy_full".into()));
    let first = first.await??;
    assert_eq!((first.status.as_u16(), first.header("x-shardgate-partial")), (200, None));
    assert_eq!(ids(&first.json()?).len(), 10);
    // Once the first has answered, its room is free again.
    let third = get(&url).await?;
    assert_eq!((third.status.as_u16(), third.header("x-shardgate-partial")), (200, None));
    Ok(())
}
