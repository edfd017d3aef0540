//! Three regional shardgates as mesh peers, each with its own table and
//! backend: any request to any instance reaches the owner in at most one peer
//! hop, creates are minted in the country's owner region, and tables that
//! disagree end in 508 within the hop limit.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use shardgate::ids::{Iuid, LocalityUuid, ManualClock, UniqidMinter};

use crate::support::{
    get, proxy, proxy_on, send, send_from, three_backends, three_listeners, BoxError, Got, Running, TestResult,
};

/// A client address that no mesh table trusts (they trust 127.0.0.1).
const STRANGER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 9));

fn order(country: u8) -> String {
    format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, country, 3, 1))
}

fn get_req(url: &str, headers: &[(&str, &str)]) -> Result<Request<Full<Bytes>>, BoxError> {
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    Ok(req.body(Full::new(Bytes::new()))?)
}

/// Sends `make()` until `done` accepts the answer (health checks take a
/// few rounds to notice a stopped backend); fails after 10 s.
async fn until<F>(
    what: &str,
    make: impl Fn() -> Result<Request<Full<Bytes>>, BoxError>,
    done: F,
) -> Result<Got, BoxError>
where
    F: Fn(&Got) -> bool,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = send(make()?).await?;
        if done(&got) {
            return Ok(got);
        }
        if Instant::now() > deadline {
            return Err(format!("{what}: still {} {}", got.status, String::from_utf8_lossy(&got.body)).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const REGIONS: [&str; 3] = ["eu", "kz", "us"];

/// A mesh table for the instance of `local`, with `owner_of_kz` as the owner
/// of country KZ (to make tables disagree on purpose).
fn mesh_table(local: &str, gw: &[SocketAddr; 3], be: &[SocketAddr; 3], owner_of_kz: &str, max_hops: u32) -> String {
    format!(
        r#"version: 1
listen: 127.0.0.1:18080
admin: 127.0.0.1:19901
region: {local}
instance: gw-{local}
mesh: {{ max_hops: {max_hops}, trusted_peers: ["127.0.0.1/32"] }}
mint_batch: {{ path: "/_shardgate/ids", max_count: 10000 }}
upstream: {{ health: {{ interval: 100ms, timeout: 500ms, fall: 1, rise: 1 }} }}
regions:
  eu: {{ upstreams: ["http://{be0}"], peer: "http://{gw0}" }}
  kz: {{ upstreams: ["http://{be1}"], peer: "http://{gw1}" }}
  us: {{ upstreams: ["http://{be2}"], peer: "http://{gw2}" }}
countries:
  KZ: {{ id: 7, region: {owner_of_kz} }}
  DE: {{ id: 49, region: eu }}
  US: {{ id: 1, region: us }}
entities: {{ IntercityOrder: 3 }}
shards: {{ count: 16, regions: {{ eu: "0-5", kz: "6-10", us: "11-15" }} }}
nodes:
  locality_mac: {{ "c110002": eu, "c110003": kz, "c110004": us }}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}", methods: [GET] }}
    id: {{ path_param: id, formats: [iuid, uniqid] }}
  - name: couriers
    match: {{ path: "/v1/couriers/{{id}}", methods: [GET] }}
    id: {{ path_param: id, formats: [locality] }}
  - name: create-order
    match: {{ path: "/v1/orders", methods: [POST] }}
    mint: {{ format: iuid, entity: IntercityOrder, country: {{ header: X-Country }}, header: X-Entity-Id, location: "/v1/orders/{{id}}" }}
  - name: create-ticket
    match: {{ path: "/v1/tickets", methods: [POST] }}
    mint: {{ format: uniqid, country: {{ query: country }}, header: X-Ticket-Id }}
  - name: create-order-idempotent
    match: {{ path: "/v1/order-retries", methods: [POST] }}
    mint: {{ format: iuid, entity: IntercityOrder, country: {{ header: X-Country }}, header: X-Entity-Id, accept_client_id: true }}
"#,
        gw0 = gw[0],
        gw1 = gw[1],
        gw2 = gw[2],
        be0 = be[0],
        be1 = be[1],
        be2 = be[2],
    )
}

struct Mesh {
    backends: [Running; 3],
    gateways: Vec<Running>,
}

async fn mesh(owners_of_kz: [&str; 3], max_hops: u32) -> Result<Mesh, BoxError> {
    mesh_with(owners_of_kz, max_hops, false).await
}

async fn mesh_with(owners_of_kz: [&str; 3], max_hops: u32, kz_fails_over_to_eu: bool) -> Result<Mesh, BoxError> {
    let failover: &[(usize, &str)] = if kz_fails_over_to_eu { &[(1, "eu")] } else { &[] };
    mesh_failing_over(owners_of_kz, max_hops, failover).await
}

/// A mesh whose regions (by index into [`REGIONS`]) fail over as listed.
async fn mesh_failing_over(
    owners_of_kz: [&str; 3],
    max_hops: u32,
    failover: &[(usize, &str)],
) -> Result<Mesh, BoxError> {
    let backends = three_backends().await?;
    let be = [backends[0].addr, backends[1].addr, backends[2].addr];
    let (listeners, gw) = three_listeners().await?;
    let mut gateways = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let mut yaml = mesh_table(REGIONS[i], &gw, &be, owners_of_kz[i], max_hops);
        for &(region, to) in failover {
            let peer = format!("peer: \"http://{}\" }}", gw[region]);
            yaml = yaml.replace(&peer, &format!("peer: \"http://{}\", failover: {to} }}", gw[region]));
        }
        gateways.push(proxy_on(l, &yaml).await?);
    }
    Ok(Mesh { backends, gateways })
}

fn total_handled(m: &Mesh) -> u64 {
    m.gateways.iter().map(Running::handled).sum()
}

#[tokio::test]
async fn any_instance_reaches_the_owner_in_one_hop() -> TestResult {
    let m = mesh(["kz", "kz", "kz"], 2).await?;
    // Peers answer each other's health checks themselves: after a few
    // check rounds every peer and backend is still up.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    for gw in &m.gateways {
        let report = gw.proxy.as_ref().ok_or("proxy")?.shared().health.report();
        assert_eq!(report.len(), 6, "{report:?}");
        assert!(report.iter().all(|(_, _, up, ejected)| *up && !ejected), "{report:?}");
    }
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let uniq = UniqidMinter::new(&clock, 16);
    let mut rng = rand::rng();
    let ids: Vec<(String, &str)> = vec![
        (format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, 7, 3, 1)), "kz"),
        (format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, 49, 3, 1)), "eu"),
        (format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, 1, 3, 1)), "us"),
        (format!("/v1/orders/{}", uniq.mint_for_shard(2, &mut rng).ok_or("shard")?), "eu"),
        (format!("/v1/orders/{}", uniq.mint_for_shard(8, &mut rng).ok_or("shard")?), "kz"),
        (format!("/v1/orders/{}", uniq.mint_for_shard(13, &mut rng).ok_or("shard")?), "us"),
        (format!("/v1/couriers/{}", LocalityUuid::from_fields(1, 1, 0x0c11_0003, 1_700_000_000_000)), "kz"),
        (format!("/v1/couriers/{}", LocalityUuid::from_fields(1, 1, 0x0c11_0004, 1_700_000_000_000)), "us"),
    ];
    for gw in &m.gateways {
        for (path, owner) in &ids {
            let before = total_handled(&m);
            let got = get(&gw.url(path)).await?;
            assert_eq!(got.status, 200, "{path} via {}: {}", gw.addr, String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some(*owner), "{path} via {}", gw.addr);
            let body = got.json()?;
            let hops: u32 = body["headers"]["x-shardgate-hops"].as_str().map_or(Ok(0), str::parse)?;
            assert!(hops <= 1, "{path}: {hops} hops");
            // The client never sees the mesh headers.
            assert!(got.header("x-shardgate-hops").is_none() && got.header("forwarded").is_none());
            // One request at the entry instance, plus one at the owner's when it forwarded.
            assert_eq!(total_handled(&m) - before, u64::from(hops) + 1);
        }
    }
    Ok(())
}

#[tokio::test]
async fn creates_are_minted_in_the_countrys_region() -> TestResult {
    let m = mesh(["kz", "kz", "kz"], 2).await?;
    for gw in &m.gateways {
        for (country, id, owner) in [("KZ", 7u8, "kz"), ("DE", 49, "eu"), ("US", 1, "us")] {
            let req =
                Request::post(gw.url("/v1/orders")).header("x-country", country).body(Full::new(Bytes::from("{}")))?;
            let got = send(req).await?;
            assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some(owner), "create for {country} via {}", gw.addr);
            let minted = got.header("x-entity-id").ok_or("minted id echoed")?;
            let iuid = Iuid::parse(minted)?;
            assert_eq!((iuid.country(), iuid.service_entity()), (id, 3));
            assert_eq!(got.header("location").map(str::to_string), Some(format!("/v1/orders/{minted}")));
            // The backend received the same id the client got.
            assert_eq!(got.json()?["headers"]["x-entity-id"], minted);
            // Reading it back by its id reaches the same backend.
            let back = get(&gw.url(&format!("/v1/orders/{minted}"))).await?;
            assert_eq!(back.header("x-backend-region"), Some(owner));
        }
        // uniqid creates land on a shard of the country's region.
        let got = send(Request::post(gw.url("/v1/tickets?country=US")).body(Full::new(Bytes::new()))?).await?;
        assert_eq!(got.header("x-backend-region"), Some("us"));
        let id = shardgate::ids::UniqidShard::parse(got.header("x-ticket-id").ok_or("ticket id")?)?;
        assert!((11..=15).contains(&id.shard()));
    }
    // Unknown and missing countries are 400 problem+json, and reach no backend.
    let gw = &m.gateways[0];
    let got =
        send(Request::post(gw.url("/v1/orders")).header("x-country", "XX").body(Full::new(Bytes::new()))?).await?;
    assert_eq!(
        (got.status.as_u16(), got.json()?["reason"].as_str().map(str::to_string)),
        (400, Some("unknown_country".into()))
    );
    let got = send(Request::post(gw.url("/v1/orders")).body(Full::new(Bytes::new()))?).await?;
    assert_eq!(
        (got.status.as_u16(), got.json()?["reason"].as_str().map(str::to_string)),
        (400, Some("missing_country".into()))
    );
    Ok(())
}

#[tokio::test]
async fn disagreeing_tables_end_in_508_within_the_hop_limit() -> TestResult {
    // eu thinks kz owns KZ; kz thinks eu owns it.
    for max_hops in [1u32, 2, 3] {
        let m = mesh(["kz", "eu", "kz"], max_hops).await?;
        let path = format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, 7, 3, 1));
        let got = get(&m.gateways[0].url(&path)).await?;
        assert_eq!(got.status, 508, "max_hops {max_hops}");
        let body = got.json()?;
        assert_eq!(body["reason"], "loop_detected");
        assert!(got.header("proxy-status").is_some_and(|p| p.contains("proxy_loop_detected")));
        // No backend saw it, and no request travelled more than the limit
        // (each instance handled it at most once: the loop guard or the hop
        // limit stops it at its second visit).
        assert_eq!(m.backends.iter().map(Running::hits).sum::<usize>(), 0);
        let handled = total_handled(&m);
        assert!(handled <= u64::from(max_hops) + 1 && handled >= 2, "max_hops {max_hops}: {handled} handlings");
    }
    Ok(())
}

#[tokio::test]
async fn failover_through_a_peer_is_served_by_the_failover_region() -> TestResult {
    // kz fails over to eu in every table; kz's backend dies. Each gateway
    // must end up answering reads for KZ entities from eu's backend, without
    // the request bouncing between peers (no 508) and without ejecting peers.
    let m = mesh_with(["kz", "kz", "kz"], 2, true).await?;
    let path = format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, 7, 3, 1));
    assert_eq!(get(&m.gateways[2].url(&path)).await?.header("x-backend-region"), Some("kz"));
    m.backends[1].stop();
    for gw in &m.gateways {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), get(&gw.url(&path))).await??;
            assert_ne!(got.status, 508, "failover bounced between peers via {}", gw.addr);
            if got.status == 200 && got.header("x-backend-region") == Some("eu") {
                let hops: u32 = got.json()?["headers"]["x-shardgate-hops"].as_str().map_or(Ok(0), str::parse)?;
                assert!(hops <= 2, "{hops} hops");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "via {}: still {}", gw.addr, got.status);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    // Peers stay up: their loop guards and 5xx are not held against them.
    for gw in &m.gateways {
        let report = gw.proxy.as_ref().ok_or("proxy")?.shared().health.report();
        assert!(
            report
                .iter()
                .filter(|(_, e, _, _)| m.gateways.iter().any(|g| e.contains(&g.addr.to_string())))
                .all(|(_, _, up, ej)| *up && !ej),
            "{report:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_million_ids_minted_concurrently_across_instances_are_unique() -> TestResult {
    // Six tasks (two per instance) fetch batches of 10,000 iUIDs for all
    // three countries while creates go through the same minters; 1,000,000
    // ids in all, no duplicate, each carrying the country it was asked for.
    let m = mesh(["kz", "kz", "kz"], 2).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..6usize {
        let url = m.gateways[t % 3].url("/_shardgate/ids");
        let create = m.gateways[t % 3].url("/v1/orders");
        tasks.spawn(async move {
            let mut ids: Vec<(u128, u8)> = Vec::new();
            let per_task = 1_000_000 / 6 + usize::from(t < 1_000_000 % 6);
            let mut round = 0usize;
            while ids.len() < per_task {
                let (country, code) = [("KZ", 7u8), ("DE", 49), ("US", 1)][round % 3];
                let n = (per_task - ids.len()).min(10_000);
                let q = format!("{url}?format=iuid&country={country}&entity=IntercityOrder&count={n}");
                let got = send(Request::post(q).body(Full::new(Bytes::new()))?).await?;
                assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
                let body = got.json()?;
                let list = body["ids"].as_array().ok_or("ids")?;
                assert_eq!(list.len(), n);
                for v in list {
                    let id = Iuid::parse(v.as_str().ok_or("id string")?)?;
                    ids.push((id.as_u128(), code));
                }
                // A create through the same instance, interleaved.
                let c = send(Request::post(create.clone()).header("x-country", country).body(Full::new(Bytes::new()))?)
                    .await?;
                let minted = Iuid::parse(c.header("x-entity-id").ok_or("minted id")?)?;
                ids.push((minted.as_u128(), code));
                round += 1;
            }
            Ok::<_, BoxError>(ids)
        });
    }
    let mut all = Vec::with_capacity(1_010_000);
    while let Some(res) = tasks.join_next().await {
        all.extend(res??);
    }
    assert!(all.len() >= 1_000_000, "{} ids", all.len());
    for (v, code) in &all {
        assert_eq!(((v >> 64) & 0xff) as u8, *code);
    }
    let mut values: Vec<u128> = all.into_iter().map(|(v, _)| v).collect();
    values.sort_unstable();
    let dupes = values.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dupes, 0, "{dupes} duplicate ids among {}", values.len());
    // Bad batch requests are 400 problem+json.
    let gw = &m.gateways[0];
    for (q, reason) in [
        ("format=snowflake&count=1", "bad_mint_request"),
        ("country=XX&entity=IntercityOrder", "unknown_country"),
        ("country=KZ&entity=IntercityOrder&count=10001", "bad_mint_request"),
        ("country=KZ", "bad_mint_request"),
    ] {
        let got = send(Request::post(gw.url(&format!("/_shardgate/ids?{q}"))).body(Full::new(Bytes::new()))?).await?;
        assert_eq!(
            (got.status.as_u16(), got.json()?["reason"].as_str().map(str::to_string)),
            (400, Some(reason.to_string())),
            "{q}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn failover_chains_are_followed_across_peers() -> TestResult {
    // kz fails over to eu, eu to us, in every table; kz's and eu's backends
    // die. A KZ entity is served by us through every gateway: the kz
    // gateway fails it over to eu's, which follows eu's failover on to us.
    let m = mesh_failing_over(["kz", "kz", "kz"], 3, &[(1, "eu"), (0, "us")]).await?;
    m.backends[0].stop();
    m.backends[1].stop();
    let path = order(7);
    for gw in &m.gateways {
        let got = until(&format!("via {}", gw.addr), || get_req(&gw.url(&path), &[]), |g| g.status != 503).await?;
        assert_eq!(got.status, 200, "via {}: {}", gw.addr, String::from_utf8_lossy(&got.body));
        assert_eq!(got.header("x-backend-region"), Some("us"), "via {}", gw.addr);
        let headers = &got.json()?["headers"];
        // The chain is a mesh header: the backend never sees it.
        assert!(headers.get("x-shardgate-failover").is_none(), "{headers}");
        let hops: u32 = headers["x-shardgate-hops"].as_str().map_or(Ok(0), str::parse)?;
        assert!(hops <= 3, "{hops} hops");
    }
    // A single instance with the same chain answers the same way.
    let be = [m.backends[0].addr, m.backends[1].addr, m.backends[2].addr];
    let single = proxy(&format!(
        r#"version: 1
upstream: {{ health: {{ interval: 100ms, timeout: 500ms, fall: 1, rise: 1 }} }}
regions:
  eu: {{ upstreams: ["http://{}"], failover: us }}
  kz: {{ upstreams: ["http://{}"], failover: eu }}
  us: {{ upstreams: ["http://{}"] }}
countries: {{ KZ: {{ id: 7, region: kz }} }}
routes:
  - {{ name: orders, match: {{ path: "/v1/orders/{{id}}" }}, id: {{ path_param: id, formats: [iuid] }} }}
"#,
        be[0], be[1], be[2]
    ))
    .await?;
    let got = until("single instance", || get_req(&single.url(&path), &[]), |g| g.status == 200).await?;
    assert_eq!(got.header("x-backend-region"), Some("us"));
    Ok(())
}

#[tokio::test]
async fn mesh_headers_count_only_from_peers() -> TestResult {
    // kz fails over to eu; every backend is up. The tables trust 127.0.0.1.
    let m = mesh_with(["kz", "kz", "kz"], 3, true).await?;
    let kz_order = order(7);
    let forged: [&[(&str, &str)]; 4] = [
        &[("x-shardgate-failover", "eu")],
        &[("x-shardgate-failover", "kz, eu")],
        &[("x-shardgate-hops", "9")],
        &[("forwarded", "by=_gw-eu"), ("forwarded", "by=_gw-kz"), ("forwarded", "by=_gw-us")],
    ];
    for gw in &m.gateways {
        for headers in forged {
            // From a stranger: removed before routing, so the KZ entity goes
            // to kz (not to eu, no 508) and the backend sees none of them.
            let got = send_from(STRANGER, get_req(&gw.url(&kz_order), headers)?).await?;
            assert_eq!(got.status, 200, "{headers:?} via {}: {}", gw.addr, String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some("kz"), "{headers:?} via {}", gw.addr);
            let seen = &got.json()?["headers"];
            assert!(seen.get("x-shardgate-failover").is_none(), "{seen}");
            let hops: usize = seen.get("x-shardgate-hops").and_then(|h| h.as_str()).unwrap_or("0").parse()?;
            assert!(hops <= 1, "{headers:?}: the backend saw {hops} hops");
            // Only the entry gateway's own element, when it forwarded.
            let forwarded = seen.get("forwarded").and_then(|f| f.as_str()).map_or(0, |f| f.split(',').count());
            assert_eq!(forwarded, hops, "{headers:?}: {seen}");
        }
    }
    // The same headers from a trusted peer address are honoured: the
    // failover mark makes eu's gateway serve from eu, and its own name in
    // `Forwarded` is a loop.
    let eu = &m.gateways[0];
    let got =
        send(get_req(&eu.url(&kz_order), &[("x-shardgate-failover", "kz, eu"), ("x-shardgate-hops", "1")])?).await?;
    assert_eq!(got.header("x-backend-region"), Some("eu"));
    let got = send(get_req(&eu.url(&kz_order), &[("forwarded", "by=_gw-eu"), ("x-shardgate-hops", "1")])?).await?;
    assert_eq!(got.status, 508);
    Ok(())
}

/// A create request for `country` with an id of the client's own.
fn create(url: &str, country: Option<&str>, id: &str) -> Result<Request<Full<Bytes>>, BoxError> {
    let mut req = Request::post(url).header("x-entity-id", id);
    if let Some(c) = country {
        req = req.header("x-country", c);
    }
    Ok(req.body(Full::new(Bytes::from("{}")))?)
}

#[tokio::test]
async fn create_routes_mint_whatever_id_the_client_sends() -> TestResult {
    let m = mesh(["kz", "kz", "kz"], 3).await?;
    // A US id of another entity type (4), sent as if it were the new order's.
    let foreign = Iuid::from_fields(1_700_000_000_000, 1, 4, 99).to_string();
    for gw in &m.gateways {
        for from in [STRANGER, IpAddr::from([127, 0, 0, 1])] {
            let got = send_from(from, create(&gw.url("/v1/orders"), Some("kz"), &foreign)?).await?;
            assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some("kz"), "via {} from {from}", gw.addr);
            let minted = got.header("x-entity-id").ok_or("minted id")?;
            assert_ne!(minted, foreign);
            let iuid = Iuid::parse(minted)?;
            assert_eq!((iuid.country(), iuid.service_entity()), (7, 3), "country names are case-insensitive");
            assert_eq!(got.json()?["headers"]["x-entity-id"], minted, "the backend got the minted id only");
        }
        // Without a country the client's id does not stand in for one.
        let got = send_from(STRANGER, create(&gw.url("/v1/orders"), None, &foreign)?).await?;
        assert_eq!((got.status.as_u16(), got.json()?["reason"].clone()), (400, "missing_country".into()));
    }
    assert_eq!(m.backends[2].hits(), 0, "nothing was created in us");

    // A route that opts in keeps a client's id only when the rule could
    // have minted it: its format, the requested country and the entity.
    let gw = &m.gateways[2];
    let retry = Iuid::from_fields(1_700_000_000_000, 7, 3, 42).to_string();
    let got = send(create(&gw.url("/v1/order-retries"), Some("KZ"), &retry)?).await?;
    assert_eq!((got.status.as_u16(), got.header("x-entity-id")), (200, Some(retry.as_str())));
    assert_eq!(got.header("x-backend-region"), Some("kz"));
    assert_eq!(got.json()?["headers"]["x-entity-id"], retry.as_str());
    for (country, id, reason) in [
        ("KZ", foreign.as_str(), "client_id_mismatch"),
        ("US", retry.as_str(), "client_id_mismatch"),
        ("KZ", &Iuid::from_fields(1_700_000_000_000, 7, 4, 42).to_string(), "client_id_mismatch"),
        ("KZ", "not-an-id", "bad_length"),
    ] {
        let got = send(create(&gw.url("/v1/order-retries"), Some(country), id)?).await?;
        assert_eq!(got.status, 400, "{country} {id}");
        assert_eq!(got.json()?["reason"], reason, "{country} {id}: {}", String::from_utf8_lossy(&got.body));
    }
    Ok(())
}

#[tokio::test]
async fn a_failed_create_announces_no_id() -> TestResult {
    let m = mesh(["kz", "kz", "kz"], 3).await?;
    m.backends[1].stop();
    for gw in &m.gateways {
        // Before and after the health checks notice: 502, then 503.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut statuses = Vec::new();
        while !statuses.contains(&503) {
            let req = Request::post(gw.url("/v1/orders")).header("x-country", "KZ").body(Full::new(Bytes::new()))?;
            let got = send(req).await?;
            assert!(got.status.is_server_error(), "via {}: {}", gw.addr, got.status);
            assert!(got.header("location").is_none(), "via {}: {:?}", gw.addr, got.headers);
            assert!(got.header("x-entity-id").is_none(), "via {}: {:?}", gw.addr, got.headers);
            statuses.push(got.status.as_u16());
            assert!(Instant::now() < deadline, "via {}: {statuses:?}", gw.addr);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_create_through_a_peer_that_trusts_no_one_announces_the_id_its_owner_stored() -> TestResult {
    // A plain-HTTP mesh with the default `trusted_peers: []`: each owner mints again.
    let backends = three_backends().await?;
    let be = [backends[0].addr, backends[1].addr, backends[2].addr];
    let (listeners, gw) = three_listeners().await?;
    let mut gateways = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let yaml =
            mesh_table(REGIONS[i], &gw, &be, "kz", 3).replace("trusted_peers: [\"127.0.0.1/32\"]", "trusted_peers: []");
        gateways.push(proxy_on(l, &yaml).await?);
    }
    for gw in &gateways {
        for country in ["KZ", "DE", "US"] {
            let req = Request::post(gw.url("/v1/orders")).header("x-country", country).body(Full::new(Bytes::new()))?;
            let got = send(req).await?;
            assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
            let told = got.header("x-entity-id").ok_or("no id announced")?;
            let stored = got.json()?["headers"]["x-entity-id"].as_str().map(str::to_string).ok_or("no id stored")?;
            assert_eq!(told, stored, "{country} via {}: the client was told another id than its owner stored", gw.addr);
            assert_eq!(got.header("location").map(str::to_string), Some(format!("/v1/orders/{stored}")));
        }
    }
    Ok(())
}
