//! Live re-homing on one instance: a move's `hold` parks the writes of its
//! unit (only those) before their body is read, the `switch` revision sends
//! them to the new owner at the release rate, an `abort` sends them back to
//! the source, and the bounds (held at once, held for how long) answer 503
//! or give the move up. A write is answered by the owner its table names,
//! or refused: never written where the unit may no longer live.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

use super::support::{get, iuid, proxy, send, table, three_backends, BoxError, Got, Running};

type TestResult = Result<(), BoxError>;

/// Publishes `text` as the proxy's table.
fn publish(p: &Running, text: &str) -> TestResult {
    let proxy = p.proxy.as_ref().ok_or("not a proxy")?;
    let cfg = shardgate::config::load_str(text, "t.yaml").map_err(|e| format!("{e}"))?;
    proxy.shared().table.publish_config(&cfg, text.to_string())?;
    Ok(())
}

fn put(p: &Running, country: u8) -> Result<Request<Full<Bytes>>, BoxError> {
    let url = format!("http://{}/v1/orders/{}", p.addr, iuid(country));
    Ok(Request::put(url).body(Full::new(Bytes::from_static(b"{\"state\":\"paid\"}")))?)
}

fn region(got: &Got) -> String {
    got.headers.get("x-backend-region").and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

fn moving(phase: &str, to: &str, epoch: u32, extra: &str) -> String {
    format!("moves:\n  - {{ unit: \"country KZ\", to: {to}, phase: {phase}, epoch: {epoch}{extra} }}\n")
}

async fn metric(p: &Running, result: &str) -> Result<f64, BoxError> {
    let proxy = p.proxy.as_ref().ok_or("not a proxy")?;
    let text = proxy.shared().metrics.render();
    let line = format!("shardgate_move_requests_total{{unit=\"country KZ\",result=\"{result}\"}} ");
    Ok(text.lines().find_map(|l| l.strip_prefix(&line)).map_or(Ok(0.0), str::parse)?)
}

#[tokio::test]
async fn rehoming_hold_then_switch_sends_held_writes_to_the_new_owner_at_the_release_rate() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let base = table(eu.addr, kz.addr, us.addr, "");
    let p = proxy(&base).await?;
    // Hold: KZ's writes wait; its reads and other countries' writes do not.
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 1, ", release_rate: 20")))?;
    let mut held = Vec::new();
    for _ in 0..10 {
        let req = put(&p, 7)?;
        held.push(tokio::spawn(async move { (send(req).await, Instant::now()) }));
    }
    let read = get(&format!("http://{}/v1/orders/{}", p.addr, iuid(7))).await?;
    assert_eq!((read.status.as_u16(), region(&read)), (200, "kz".into()));
    let other = send(put(&p, 49)?).await?;
    assert_eq!((other.status.as_u16(), region(&other)), (200, "eu".into()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.iter().all(|h| !h.is_finished()), "a held write was answered during the hold");
    let kz_before = kz.hits.load(Ordering::SeqCst);
    assert_eq!(metric(&p, "held").await?, 10.0);

    // Switch: KZ is eu's, and the held writes go there, 20 a second.
    let switched = table(eu.addr, kz.addr, us.addr, &moving("switch", "eu", 2, ", release_rate: 20"))
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    let at = Instant::now();
    publish(&p, &switched)?;
    let mut last = at;
    for h in held {
        let (got, done) = h.await?;
        let got = got?;
        assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()));
        last = last.max(done);
    }
    // Ten at 20 a second: the last one about half a second after the switch.
    assert!(last - at >= Duration::from_millis(400), "released too fast: {:?}", last - at);
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a held write reached the old owner");
    assert_eq!(metric(&p, "released").await?, 10.0);
    // After the switch, nothing is held and KZ is eu's.
    let after = send(put(&p, 7)?).await?;
    assert_eq!((after.status.as_u16(), region(&after)), (200, "eu".into()));
    Ok(())
}

#[tokio::test]
async fn rehoming_a_write_with_dot_segments_in_its_path_is_held_as_well() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 1, ""))).await?;
    let kz_before = kz.hits.load(Ordering::SeqCst);
    // The route is /v1/orders/{id}: this path is it once its dot segments go.
    let url = format!("http://{}/v1/orders/x/../{}", p.addr, iuid(7));
    let held = tokio::spawn(send(Request::put(url).body(Full::new(Bytes::from_static(b"{}")))?));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "a write with dot segments was not held");
    let switched = table(eu.addr, kz.addr, us.addr, &moving("switch", "eu", 2, ""))
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    publish(&p, &switched)?;
    let got = tokio::time::timeout(Duration::from_secs(10), held).await???;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()));
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "the held write reached the old owner");
    Ok(())
}

#[tokio::test]
async fn rehoming_abort_sends_held_writes_back_to_the_source_and_reverse_moves_it_back() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 1, "")))?;
    let req = put(&p, 7)?;
    let held = tokio::spawn(send(req));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished());
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("abort", "eu", 1, "")))?;
    let got = held.await??;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "kz".into()));
    assert_eq!(metric(&p, "aborted").await?, 1.0);

    // Moved to eu (hold at epoch 2, switch at 3), then back to kz the same way (4, 5).
    let to_eu = |phase: &str, epoch| {
        let t = table(eu.addr, kz.addr, us.addr, &moving(phase, "eu", epoch, ""));
        if phase == "switch" {
            t.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }")
        } else {
            t
        }
    };
    publish(&p, &to_eu("hold", 2))?;
    publish(&p, &to_eu("switch", 3))?;
    let back = |phase: &str| {
        let epoch = if phase == "hold" { 4 } else { 5 };
        let t = table(eu.addr, kz.addr, us.addr, &moving(phase, "kz", epoch, ""));
        if phase == "hold" {
            t.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }")
        } else {
            t
        }
    };
    publish(&p, &back("hold"))?;
    let held = tokio::spawn(send(put(&p, 7)?));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished());
    publish(&p, &back("switch"))?;
    let got = held.await??;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "kz".into()));
    Ok(())
}

#[tokio::test]
async fn rehoming_held_requests_leave_half_the_listeners_connections_to_the_rest() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let limit = "server: { max_connections: 20 }\n";
    let p = proxy(&table(eu.addr, kz.addr, us.addr, limit)).await?;
    publish(&p, &table(eu.addr, kz.addr, us.addr, &format!("{limit}{}", moving("hold", "eu", 1, ""))))?;
    // Twenty writes of the held unit, each on its own connection: ten wait, ten are refused.
    let mut held = Vec::new();
    for _ in 0..20 {
        let req = put(&p, 7)?;
        held.push(tokio::spawn(send(req)));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = held.iter().filter(|h| h.is_finished()).count();
    assert_eq!(refused, 10, "held past half of server.max_connections");
    // Every other client still gets in.
    let other = get(&format!("http://{}/v1/orders/{}", p.addr, iuid(49))).await?;
    assert_eq!((other.status.as_u16(), region(&other)), (200, "eu".into()));
    Ok(())
}

#[tokio::test]
async fn rehoming_a_full_hold_answers_503_and_a_hold_past_its_time_refuses_writes_it_would_send_the_source_itself(
) -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    let bounds = ", hold: { max_requests: 2, max_time: 400ms }";
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 1, bounds)))?;
    let kz_before = kz.hits.load(Ordering::SeqCst);
    let started = Instant::now();
    let first = tokio::spawn(send(put(&p, 7)?));
    let second = tokio::spawn(send(put(&p, 7)?));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let third = send(put(&p, 7)?).await?;
    assert_eq!(third.status.as_u16(), 503);
    assert_eq!(third.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(third.json()?["reason"], "hold_full", "{:?}", third.body);
    // Past max_time the move is given up here. This instance reaches kz's
    // backends itself, where no gateway fences a unit that switched
    // meanwhile: the held writes are refused, not written to the source.
    for h in [first, second] {
        let got = h.await??;
        assert_eq!(got.status.as_u16(), 503, "{:?}", got.body);
        assert_eq!(got.json()?["reason"], "hold_expired", "{:?}", got.body);
        assert_eq!(got.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Later writes are not held again: refused at once.
    let quick = Instant::now();
    let later = send(put(&p, 7)?).await?;
    assert_eq!(later.json()?["reason"], "hold_expired", "{:?}", later.body);
    assert!(quick.elapsed() < Duration::from_millis(300), "held again after the move was given up");
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a write of the held unit reached the source");
    // Reads go on to the source.
    let read = get(&format!("http://{}/v1/orders/{}", p.addr, iuid(7))).await?;
    assert_eq!((read.status.as_u16(), region(&read)), (200, "kz".into()));
    assert_eq!(metric(&p, "expired").await?, 2.0);
    assert_eq!(metric(&p, "refused").await?, 1.0);
    // An abort gives the unit back to its source: writes reach kz again.
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("abort", "eu", 1, bounds)))?;
    let aborted = send(put(&p, 7)?).await?;
    assert_eq!((aborted.status.as_u16(), region(&aborted)), (200, "kz".into()));
    // A new epoch holds again.
    publish(&p, &table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 2, bounds)))?;
    let held = tokio::spawn(send(put(&p, 7)?));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!held.is_finished(), "a new epoch did not hold");
    assert_eq!(held.await??.json()?["reason"], "hold_expired");
    Ok(())
}

#[test]
fn rehoming_moves_are_checked_with_their_line() {
    let t = |moves: &str, countries: &str| {
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let text = table(at(1), at(2), at(3), moves);
        let text = text.replace("KZ: { id: 7, region: kz }", countries);
        shardgate::config::load_str(&text, "t.yaml").err().map(|e| e.to_string()).unwrap_or_default()
    };
    let kz = "KZ: { id: 7, region: kz }";
    let err = t(&moving("switch", "eu", 1, ""), kz);
    assert!(err.contains("moves[0].phase") && err.contains("still gives it to another region"), "{err}");
    let err = t(&moving("hold", "kz", 1, ""), kz);
    assert!(err.contains("already belongs to \"kz\""), "{err}");
    let err = t("moves:\n  - { unit: \"country XX\", to: eu, phase: hold, epoch: 1 }\n", kz);
    assert!(err.contains("moves[0].unit") && err.contains("not a placement unit"), "{err}");
    let err = t(&moving("hold", "eu", 0, ", hold: { requests: some }"), kz);
    assert!(err.contains("epoch 0") && err.contains("not `writes` or `all`"), "{err}");
    assert_eq!(t(&moving("hold", "eu", 1, ""), kz), "");
    // Only as the table names its units: what would be accepted and never match is refused.
    for unit in ["shards 06-10", "shard 6-6", "key_range 8000000000000000x"] {
        let err = t(&format!("moves:\n  - {{ unit: \"{unit}\", to: eu, phase: hold, epoch: 1 }}\n"), kz);
        assert!(err.contains("not a placement unit"), "{unit}: {err}");
    }
    assert_eq!(t("moves:\n  - { unit: \"shards 6-10\", to: eu, phase: hold, epoch: 1 }\n", kz), "");
}

/// A gateway's table in a three-region mesh: each region's backend and
/// gateway; `local` served here; KZ owned by `kz_owner`, `extra` added.
fn mesh_table(local: &str, gw: &[SocketAddr; 3], be: &[SocketAddr; 3], kz_owner: &str, extra: &str) -> String {
    format!(
        r#"version: 1
region: {local}
instance: gw-{local}
mesh: {{ trusted_peers: ["127.0.0.1/32"] }}
regions:
  eu: {{ upstreams: ["http://{}"], peer: "http://{}" }}
  kz: {{ upstreams: ["http://{}"], peer: "http://{}" }}
  us: {{ upstreams: ["http://{}"], peer: "http://{}" }}
{tail}"#,
        be[0],
        gw[0],
        be[1],
        gw[1],
        be[2],
        gw[2],
        tail = mesh_tail(kz_owner, extra)
    )
}

/// What every table of the three-region mesh ends with: the countries (KZ
/// owned by `kz_owner`), `extra`, and the orders route.
fn mesh_tail(kz_owner: &str, extra: &str) -> String {
    format!(
        r#"countries:
  KZ: {{ id: 7, region: {kz_owner} }}
  DE: {{ id: 49, region: eu }}
  US: {{ id: 1, region: us }}
entities: {{ IntercityOrder: 3 }}
{extra}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}" }}
    id: {{ path_param: id, formats: [iuid] }}
"#,
    )
}

/// `n` KZ writes and reads through `p`, each answered 200 by `owner`'s backend.
async fn kz_answered_by(p: &Running, n: usize, owner: &str) -> TestResult {
    for _ in 0..n {
        let got = send(put(p, 7)?).await?;
        assert_eq!((got.status.as_u16(), region(&got)), (200, owner.into()), "{:?}", got.body);
        let got = get(&format!("http://{}/v1/orders/{}", p.addr, iuid(7))).await?;
        assert_eq!((got.status.as_u16(), region(&got)), (200, owner.into()));
    }
    Ok(())
}

/// Three regions' backends and a gateway each, serving [`mesh_table`] with
/// KZ owned by `kz_owner`: the backends, their addresses, the gateways'
/// addresses and the gateways (eu, kz, us).
async fn mesh_of(kz_owner: &str) -> Result<([Running; 3], [SocketAddr; 3], [SocketAddr; 3], [Running; 3]), BoxError> {
    let backends = three_backends().await?;
    let be = backends.each_ref().map(|b| b.addr);
    let ([l_eu, l_kz, l_us], gw) = super::support::three_listeners().await?;
    let gateways = [
        super::support::proxy_on(l_eu, &mesh_table("eu", &gw, &be, kz_owner, "")).await?,
        super::support::proxy_on(l_kz, &mesh_table("kz", &gw, &be, kz_owner, "")).await?,
        super::support::proxy_on(l_us, &mesh_table("us", &gw, &be, kz_owner, "")).await?,
    ];
    Ok((backends, be, gw, gateways))
}

#[tokio::test]
async fn rehoming_a_gateway_frozen_on_the_old_table_reaches_the_new_owner_through_421_and_one_retry() -> TestResult {
    let ([_eu, kz, _us], be, gw, [gw_eu, gw_kz, gw_us]) = mesh_of("kz").await?;
    let hold = moving("hold", "eu", 1, ", hold: { max_time: 300ms }");
    let switch = moving("switch", "eu", 2, "");
    for (p, local) in [(&gw_eu, "eu"), (&gw_kz, "kz"), (&gw_us, "us")] {
        publish(p, &mesh_table(local, &gw, &be, "kz", &hold))?;
    }
    // us confirmed the hold, then froze: it never hears of the switch.
    for (p, local) in [(&gw_eu, "eu"), (&gw_kz, "kz")] {
        publish(p, &mesh_table(local, &gw, &be, "eu", &switch))?;
    }
    let kz_before = kz.hits.load(Ordering::SeqCst);
    // Through the stale gateway: its writes wait out the hold it still has
    // (300ms) and go on to kz's gateway, as its reads do at once; kz's
    // gateway answers 421 naming eu at epoch 2; the stale gateway tries eu, once.
    kz_answered_by(&gw_us, 20, "eu").await?;
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a request reached the old owner through the stale gateway");
    // kz's gateway counted the 421s it answered.
    let text = gw_kz.proxy.as_ref().ok_or("proxy")?.shared().metrics.render();
    assert!(text.contains("outcome=\"misdirected\""), "no misdirected outcome at kz's gateway");
    // Through the current gateways: straight to eu.
    for p in [&gw_eu, &gw_kz] {
        let got = send(put(p, 7)?).await?;
        assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()));
    }
    // Without the retry (a client of kz's gateway claiming to be a peer
    // with an older epoch): the 421 itself, with the owner in its body.
    let stale = Request::put(format!("http://{}/v1/orders/{}", gw_kz.addr, iuid(7)))
        .header("x-shardgate-hops", "1")
        .header("forwarded", "by=_gw-us")
        .header("x-shardgate-epoch", "0")
        .body(Full::new(Bytes::from_static(b"{}")))?;
    let got = send(stale).await?;
    assert_eq!(got.status.as_u16(), 421, "{:?}", got.body);
    let body = got.json()?;
    assert_eq!((body["owner"].as_str(), body["epoch"].as_u64()), (Some("eu"), Some(2)), "{body}");
    Ok(())
}

#[tokio::test]
async fn rehoming_the_new_owners_gateway_that_gave_its_hold_up_still_takes_the_units_writes() -> TestResult {
    let ([_eu, kz, _us], be, gw, [gw_eu, gw_kz, gw_us]) = mesh_of("kz").await?;
    let hold = moving("hold", "eu", 1, ", hold: { max_time: 300ms }");
    let switch = moving("switch", "eu", 2, "");
    for (p, local) in [(&gw_eu, "eu"), (&gw_kz, "kz"), (&gw_us, "us")] {
        publish(p, &mesh_table(local, &gw, &be, "kz", &hold))?;
    }
    // eu's gateway, the unit's new owner, never hears of the switch.
    for (p, local) in [(&gw_kz, "kz"), (&gw_us, "us")] {
        publish(p, &mesh_table(local, &gw, &be, "eu", &switch))?;
    }
    let kz_before = kz.hits.load(Ordering::SeqCst);
    // Its own client's write waits out the hold and goes to kz's gateway
    // (the source, through a peer), whose 421 names eu: served here.
    let own = send(put(&gw_eu, 7)?).await?;
    assert_eq!((own.status.as_u16(), region(&own)), (200, "eu".into()), "{:?}", own.body);
    // Given up now, it still serves what a sender at epoch 2 placed here.
    for _ in 0..5 {
        let got = send(put(&gw_us, 7)?).await?;
        assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()), "{:?}", got.body);
    }
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a write reached the unit's old owner");
    Ok(())
}

#[tokio::test]
async fn rehoming_a_gateway_behind_on_the_table_serves_what_a_newer_sender_placed_in_its_region() -> TestResult {
    let ([_eu, kz, _us], be, gw, [gw_eu, gw_kz, gw_us]) = mesh_of("kz").await?;
    // KZ switched to eu everywhere but at eu's own gateway, which has not
    // yet read the table (it still places KZ at kz, with no move).
    let switch = moving("switch", "eu", 2, "");
    for (p, local) in [(&gw_kz, "kz"), (&gw_us, "us")] {
        publish(p, &mesh_table(local, &gw, &be, "eu", &switch))?;
    }
    let kz_before = kz.hits.load(Ordering::SeqCst);
    // us's gateway sends KZ to eu's, with epoch 2: eu's gateway serves it
    // from eu's backends instead of sending it on to kz by its older table
    // (from where kz's gateway, at epoch 2, would send it back).
    kz_answered_by(&gw_us, 10, "eu").await?;
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a request reached the old owner");
    // The same for a write held at kz's gateway and released by the switch.
    publish(&gw_kz, &mesh_table("kz", &gw, &be, "kz", &moving("hold", "eu", 1, "")))?;
    let held = tokio::spawn(send(put(&gw_kz, 7)?));
    tokio::time::sleep(Duration::from_millis(300)).await;
    publish(&gw_kz, &mesh_table("kz", &gw, &be, "eu", &switch))?;
    let got = held.await??;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()), "{:?}", got.body);
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a request reached the old owner");
    // A client of eu's gateway is placed by eu's table as it stands: to
    // kz's gateway, which fences it (421, the owner eu); eu's table has no
    // move to retry by (the fleet barrier puts the hold everywhere first).
    let got = send(put(&gw_eu, 7)?).await?;
    assert_eq!(got.status.as_u16(), 421, "{:?}", got.body);
    assert_eq!(got.json()?["owner"].as_str(), Some("eu"));
    assert_eq!(kz.hits.load(Ordering::SeqCst), kz_before, "a request reached the old owner");
    Ok(())
}

#[tokio::test]
async fn rehoming_a_write_sent_on_before_a_hold_comes_back_after_the_switch() -> TestResult {
    // KZ is eu's; kz's gateway has not yet read the hold of its move back.
    let ([_eu, _kz, _us], be, gw, [gw_eu, gw_kz, _gw_us]) = mesh_of("eu").await?;
    publish(&gw_eu, &mesh_table("eu", &gw, &be, "eu", &moving("hold", "kz", 3, "")))?;
    // A write to kz's gateway goes on to eu's, which holds it ...
    let held = tokio::spawn(send(put(&gw_kz, 7)?));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "the write was not held at eu's gateway");
    // ... until the switch gives KZ back to kz: it comes back through the
    // gateway that sent it, which serves it (once it has the switch, or
    // before, by the sender's newer epoch).
    let switch = moving("switch", "kz", 4, "");
    publish(&gw_eu, &mesh_table("eu", &gw, &be, "kz", &switch))?;
    let got = held.await??;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "kz".into()), "{:?}", got.body);
    Ok(())
}

/// What a recording backend saw: each request's method, path and arrival.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(http::Method, String, Instant)>>>;

/// A backend of `region` that records every request but health checks.
async fn recording(region: &'static str) -> Result<(Running, Seen), BoxError> {
    let seen: Seen = Default::default();
    let log = seen.clone();
    let (running, _) = super::support::backend_with(move |req: Request<hyper::body::Incoming>| {
        let log = log.clone();
        async move {
            if !super::support::is_health_check(&req) {
                let entry = (req.method().clone(), req.uri().path().to_string(), Instant::now());
                log.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
            }
            use http_body_util::BodyExt;
            let _ = req.into_body().collect().await;
            let mut resp = http::Response::new(Full::new(Bytes::from_static(b"{}")).map_err(|e| match e {}).boxed());
            resp.headers_mut().insert("x-backend-region", http::HeaderValue::from_static(region));
            resp
        }
    })
    .await?;
    Ok((running, seen))
}

/// One request of the load: its kind (0 KZ write, 1 KZ read, 2 DE write,
/// 3 US read), status (0: no answer), latency and start.
type Sent = (u8, u16, Duration, Instant);

/// The load: 64 clients, each sending in turn a KZ write, a KZ read, a DE
/// write and a US read to an instance; (kind, status, latency) of each.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    only_first: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Sent>>>,
}

impl Load {
    fn start(ports: [u16; 2]) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let only_first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..64)
            .map(|client| {
                let (stop, only_first) = (stop.clone(), only_first.clone());
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    let mut n = client;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let port = if only_first.load(Ordering::SeqCst) { ports[0] } else { ports[n % 2] };
                        let kind = (n % 4) as u8;
                        let (method, country) = match kind {
                            0 => (http::Method::PUT, 7),
                            1 => (http::Method::GET, 7),
                            2 => (http::Method::PUT, 49),
                            _ => (http::Method::GET, 1),
                        };
                        let url = format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(country));
                        let body =
                            if method == http::Method::PUT { Bytes::from_static(b"{\"v\":1}") } else { Bytes::new() };
                        let started = Instant::now();
                        let status = match Request::builder().method(method).uri(url).body(Full::new(body)) {
                            Ok(req) => send(req).await.map_or(0, |g| g.status.as_u16()),
                            Err(_) => 0,
                        };
                        out.push((kind, status, started.elapsed(), started));
                    }
                    out
                })
            })
            .collect();
        Load { stop, only_first, tasks }
    }

    async fn finish(self) -> Result<Vec<Sent>, BoxError> {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await?);
        }
        Ok(all)
    }
}

/// Runs `shardgate move` for the two tables; its exit code and output.
async fn shardgate_move(
    dir: &std::path::Path,
    source: &str,
    hold: &str,
    switch: &str,
    barrier: &str,
) -> Result<(i32, String), BoxError> {
    let (h, s) = (dir.join("hold.yaml"), dir.join("switch.yaml"));
    std::fs::write(&h, hold)?;
    std::fs::write(&s, switch)?;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_shardgate"));
    command.args(["move", "--source", source, "--barrier", barrier]).arg("--hold").arg(&h).arg("--switch").arg(&s);
    let out = tokio::task::spawn_blocking(move || command.output()).await??;
    Ok((
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    ))
}

/// When the first of `instances` ran `text`.
fn first_applied(instances: Vec<(String, u16)>, text: &str) -> tokio::task::JoinHandle<Option<Instant>> {
    let want = super::etcd::sha256(text);
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            for (_, admin) in &instances {
                let sha = get(&format!("http://127.0.0.1:{admin}/config")).await.ok().and_then(|g| g.json().ok());
                if sha.is_some_and(|v| v["sha256"] == want) {
                    return Some(Instant::now());
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        None
    })
}

fn writes_of_kz_after(seen: &Seen, after: Instant, before: Instant) -> usize {
    let kz = format!("/v1/orders/{}", iuid(7));
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    seen.iter().filter(|(m, p, at)| *m == http::Method::PUT && *p == kz && *at > after && *at < before).count()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len().saturating_sub(1) * 99 / 100).copied().unwrap_or_default()
}

#[tokio::test]
async fn rehoming_a_fleet_under_load_moves_a_country_and_back_and_aborts_with_no_failed_request() -> TestResult {
    if !super::etcd::etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let cluster = super::etcd::Cluster::start(dir.path()).await?;
    let (eu, eu_seen) = recording("eu").await?;
    let (kz, kz_seen) = recording("kz").await?;
    let (us, _) = recording("us").await?;
    let t = kz_table([eu.addr, kz.addr, us.addr]);
    let (endpoints, source) = keyed(&cluster, &t("", "kz"))?;
    let a = super::etcd::Instance::start(dir.path(), &endpoints, "gw-a").await?;
    let mut b = super::etcd::Instance::start(dir.path(), &endpoints, "gw-b").await?;
    let admins = vec![("a".to_string(), port_of(&a.url(""))), ("b".to_string(), port_of(&b.url("")))];
    let load = Load::start([a.port, b.port]);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // KZ to eu.
    let (hold, switch) = (t(&moving("hold", "eu", 1, ""), "kz"), t(&moving("switch", "eu", 2, ""), "eu"));
    let switched = first_applied(admins.clone(), &switch);
    let (code, out) = shardgate_move(dir.path(), &source, &hold, &switch, "3s").await?;
    assert_eq!(code, 0, "{out}");
    let to_eu = switched.await?.ok_or("the switch was never applied")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The phase is in the fleet view and in /explain of a KZ id.
    let fleet = get(&a.url("/fleet")).await?.json()?.to_string();
    assert!(fleet.contains(r#""moves":[{"epoch":2,"phase":"switch","to":"eu","unit":"country KZ"}]"#), "{fleet}");
    let explain = get(&a.url(&format!("/explain?id={}&route=orders", iuid(7)))).await?.json()?.to_string();
    assert!(explain.contains(r#""move":{"epoch":2,"phase":"switch","to":"eu","unit":"country KZ"}"#), "{explain}");

    // And back to kz.
    let (hold, switch) = (t(&moving("hold", "kz", 3, ""), "eu"), t(&moving("switch", "kz", 4, ""), "kz"));
    let back_started = Instant::now();
    let switched = first_applied(admins.clone(), &switch);
    let (code, out) = shardgate_move(dir.path(), &source, &hold, &switch, "3s").await?;
    assert_eq!(code, 0, "{out}");
    let to_kz = switched.await?.ok_or("the switch back was never applied")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let back_done = Instant::now();

    // A move whose epochs do not pass the unit's in etcd (4) is refused, nothing put.
    let running = super::etcd::sha256(&switch);
    let (stale_hold, stale_switch) = (t(&moving("hold", "eu", 2, ""), "kz"), t(&moving("switch", "eu", 3, ""), "eu"));
    let (code, out) = shardgate_move(dir.path(), &source, &stale_hold, &stale_switch, "3s").await?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not moved: country KZ is at epoch 4 in the table in etcd"), "{out}");
    assert_eq!(a.sha256().await?, running, "a refused move put a table");
    // A move of another unit whose tables leave KZ's switch out would give
    // up KZ's fence: refused, nothing put.
    let de = |phase: &str, epoch: u32| {
        format!("moves:\n  - {{ unit: \"country DE\", to: us, phase: {phase}, epoch: {epoch} }}\n")
    };
    let de_switch = t(&de("switch", 2), "kz").replace("DE: { id: 49, region: eu }", "DE: { id: 49, region: us }");
    let (code, out) = shardgate_move(dir.path(), &source, &t(&de("hold", 1), "kz"), &de_switch, "3s").await?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the hold table gives up a fence the table in etcd keeps: country KZ at epoch 4"), "{out}");
    assert_eq!(a.sha256().await?, running, "a refused move put a table");

    // A third time with b frozen: it cannot confirm the hold, so the move is aborted.
    load.only_first.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = b.child.as_ref().map(|c| c.0.id().to_string()).ok_or("no b")?;
    std::process::Command::new("kill").args(["-STOP", &pid]).status()?;
    let (hold, switch) = (t(&moving("hold", "eu", 5, ""), "kz"), t(&moving("switch", "eu", 6, ""), "eu"));
    let (code, out) = shardgate_move(dir.path(), &source, &hold, &switch, "1s").await?;
    std::process::Command::new("kill").args(["-CONT", &pid]).status()?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("gw-b") && out.contains("aborting"), "{out}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Called off at its epoch, not set back to the table before it.
    assert!(out.contains("the hold table, its holds called off (phase: abort), put at revision"), "{out}");
    let explain = get(&a.url(&format!("/explain?id={}&route=orders", iuid(7)))).await?.json()?.to_string();
    assert!(explain.contains(r#""move":{"epoch":5,"phase":"abort","to":"eu","unit":"country KZ"}"#), "{explain}");
    let results = load.finish().await?;
    b.child = None;

    let failed: Vec<_> = results.iter().filter(|r| r.1 != 200).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        results.len(),
        &failed[..failed.len().min(5)]
    );
    // No write of KZ reached kz after the switch to eu, nor eu after the switch back.
    assert_eq!(writes_of_kz_after(&kz_seen, to_eu, back_started), 0, "a KZ write reached kz after the switch");
    assert_eq!(writes_of_kz_after(&eu_seen, to_kz, back_done), 0, "a KZ write reached eu after the switch back");
    // Held writes waited at most the hold; the other countries did not notice.
    let kz_writes: Vec<Duration> = results.iter().filter(|r| r.0 == 0).map(|r| r.2).collect();
    let slowest = kz_writes.iter().max().copied().unwrap_or_default();
    assert!(slowest < Duration::from_secs(2), "a KZ write took {slowest:?}");
    let others = |during: bool| -> Vec<Duration> {
        let moving = |at: Instant| {
            (at >= to_eu - Duration::from_secs(1) && at <= to_eu)
                || (at >= to_kz - Duration::from_secs(1) && at <= to_kz)
        };
        results.iter().filter(|r| r.0 >= 2 && moving(r.3) == during).map(|r| r.2).collect()
    };
    let (during, outside) = (p99(others(true)), p99(others(false)));
    eprintln!(
        "{} requests, none failed; KZ writes: slowest {slowest:?}; other countries' p99 {during:?} around the switches, {outside:?} otherwise",
        results.len()
    );
    Ok(())
}

#[tokio::test]
async fn rehoming_a_move_never_overwrites_a_table_put_while_it_waits() -> TestResult {
    if !super::etcd::etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let cluster = super::etcd::Cluster::start(dir.path()).await?;
    let [eu, kz, us] = three_backends().await?;
    let t = kz_table([eu.addr, kz.addr, us.addr]);
    let (endpoints, source) = keyed(&cluster, &t("", "kz"))?;
    // The one instance is frozen: it never confirms the hold.
    let b = super::etcd::Instance::start(dir.path(), &endpoints, "gw-b").await?;
    let pid = b.child.as_ref().map(|c| c.0.id().to_string()).ok_or("no instance")?;
    std::process::Command::new("kill").args(["-STOP", &pid]).status()?;
    let (hold, switch) = (t(&moving("hold", "eu", 1, ""), "kz"), t(&moving("switch", "eu", 2, ""), "eu"));
    let mover = move_until_held(dir.path(), &cluster, &source, (&hold, &switch), "3s").await?;
    // While the move waits on its barrier, another writer puts its own table.
    let theirs = t("", "kz").replace("US: { id: 1, region: us }", "US: { id: 1, region: eu }");
    cluster.put(&theirs)?;
    let (code, out) = mover.await??;
    std::process::Command::new("kill").args(["-CONT", &pid]).status()?;
    assert_eq!(cluster.value()?.trim_end(), theirs.trim_end(), "the move overwrote the other writer's table: {out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not called off: the table in etcd changed"), "{out}");
    // A put on an older revision: refused, unless the key already holds
    // what it puts (its own write, whose answer was lost).
    let target = shardgate::source::etcd::Target::parse(&source)?;
    let client = shardgate::source::etcd::Client::new(&target, None, None);
    let key = super::etcd::KEY;
    assert!(matches!(client.put_if(key, &theirs, 1).await.map_err(|e| e.0)?, Ok(n) if n > 1));
    assert!(matches!(client.put_if(key, &hold, 1).await.map_err(|e| e.0)?, Err(n) if n > 1));
    assert_eq!(cluster.value()?.trim_end(), theirs.trim_end());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehoming_a_move_whose_etcd_fails_after_the_hold_calls_it_off_once_etcd_is_back() -> TestResult {
    if !super::etcd::etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut cluster = super::etcd::Cluster::start(dir.path()).await?;
    let [eu, kz, us] = three_backends().await?;
    let t = kz_table([eu.addr, kz.addr, us.addr]);
    let (_, source) = keyed(&cluster, &t("", "kz"))?;
    let held_for = ", hold: { max_time: 30s }";
    let (hold, switch) = (t(&moving("hold", "eu", 1, held_for), "kz"), t(&moving("switch", "eu", 2, ""), "eu"));
    // No instance reports, so the barrier waits its whole 5 s; etcd goes
    // down meanwhile, and comes back within `move`'s --recover (5 min).
    let mover = move_until_held(dir.path(), &cluster, &source, (&hold, &switch), "5s").await?;
    cluster.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart().await?;
    let (code, out) = mover.await??;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("etcd failed once the hold may be in"), "{out}");
    assert!(out.contains("its holds called off (phase: abort), put at revision"), "{out}");
    assert_eq!(cluster.value()?.trim_end(), hold.replace("phase: hold", "phase: abort").trim_end());
    Ok(())
}

/// `shardgate move` with these (hold, switch) tables, started in the
/// background and returned once its hold is the key's value.
async fn move_until_held(
    dir: &std::path::Path,
    cluster: &super::etcd::Cluster,
    source: &str,
    (hold, switch): (&str, &str),
    barrier: &'static str,
) -> Result<tokio::task::JoinHandle<Result<(i32, String), String>>, BoxError> {
    let mover = {
        let (d, s, h, w) = (dir.to_path_buf(), source.to_string(), hold.to_string(), switch.to_string());
        tokio::spawn(async move { shardgate_move(&d, &s, &h, &w, barrier).await.map_err(|e| e.to_string()) })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.value()?.trim_end() != hold.trim_end() {
        if Instant::now() > deadline {
            return Err("the hold was never put".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(mover)
}

/// The suite's table with KZ owned by `kz_owner` and `extra` added, for
/// the backends at `be` (eu, kz, us).
fn kz_table(be: [std::net::SocketAddr; 3]) -> impl Fn(&str, &str) -> String {
    move |extra, kz_owner| {
        table(be[0], be[1], be[2], extra)
            .replace("KZ: { id: 7, region: kz }", &format!("KZ: {{ id: 7, region: {kz_owner} }}"))
    }
}

/// Puts `first` at the table key of `cluster`: its endpoints, and the
/// `etcd://` source `move` and the instances follow.
fn keyed(cluster: &super::etcd::Cluster, first: &str) -> Result<(String, String), BoxError> {
    cluster.put(first)?;
    let endpoints = cluster.endpoints();
    let source = format!("etcd://{endpoints}{}", super::etcd::KEY);
    Ok((endpoints, source))
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok()).unwrap_or(0)
}

/// A DELETE of a KZ order: a write without a body.
fn delete(p: &Running) -> Result<Request<Full<Bytes>>, BoxError> {
    Ok(Request::delete(format!("http://{}/v1/orders/{}", p.addr, iuid(7))).body(Full::new(Bytes::new()))?)
}

#[tokio::test]
async fn rehoming_a_client_that_leaves_while_held_gives_its_place_back() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, kz.addr, us.addr, "")).await?;
    publish(
        &p,
        &table(eu.addr, kz.addr, us.addr, &moving("hold", "eu", 1, ", hold: { max_requests: 1, max_time: 10s }")),
    )?;
    // A write without a body: the server watches its socket while it waits.
    let gone = tokio::spawn(send(delete(&p)?));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(send(delete(&p)?).await?.status.as_u16(), 503, "the one place was not taken");
    // The held client goes away: its place is free again, long before max_time.
    gone.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let next = tokio::spawn(send(delete(&p)?));
        tokio::time::sleep(Duration::from_millis(150)).await;
        if !next.is_finished() {
            break;
        }
        assert!(Instant::now() < deadline, "the place of a client that left was never given back");
    }
    Ok(())
}

/// A re-homing phase of KZ: its owner, and its move (phase, epoch, target).
type Phase<'a> = (&'a str, (&'a str, u32, &'a str));

/// The front door's table in the three-region mesh: no region of its own.
fn front_table(gw: &[SocketAddr; 3], kz_owner: &str, extra: &str) -> String {
    format!(
        r#"version: 1
instance: gw-front
mesh: {{ max_hops: 3 }}
regions:
  eu: {{ peer: "http://{}" }}
  kz: {{ peer: "http://{}" }}
  us: {{ peer: "http://{}" }}
{tail}"#,
        gw[0],
        gw[1],
        gw[2],
        tail = mesh_tail(kz_owner, extra)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehoming_phases_applied_one_instance_after_another_fail_no_held_write() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let be = [eu.addr, kz.addr, us.addr];
    let ([l_eu, l_kz, l_us], gw) = super::support::three_listeners().await?;
    // As in the compose topology: kz fails over to eu, eu to us.
    let gateway = |local: &str, owner: &str, extra: &str| {
        mesh_table(local, &gw, &be, owner, extra)
            .replace(&format!("peer: \"http://{}\" }}", gw[0]), &format!("peer: \"http://{}\", failover: us }}", gw[0]))
            .replace(&format!("peer: \"http://{}\" }}", gw[1]), &format!("peer: \"http://{}\", failover: eu }}", gw[1]))
            .replace("trusted_peers: [\"127.0.0.1/32\"] }", "trusted_peers: [\"127.0.0.1/32\"], max_hops: 3 }")
    };
    let gw_eu = super::support::proxy_on(l_eu, &gateway("eu", "kz", "")).await?;
    let gw_kz = super::support::proxy_on(l_kz, &gateway("kz", "kz", "")).await?;
    let gw_us = super::support::proxy_on(l_us, &gateway("us", "kz", "")).await?;
    let front = proxy(&front_table(&gw, "kz", "")).await?;
    let all = std::sync::Arc::new([front, gw_eu, gw_kz, gw_us]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..16usize {
        let (all, stop) = (std::sync::Arc::clone(&all), std::sync::Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let p = &all[(c + n) % 4];
                n += 1;
                match send(put(p, 7)?).await {
                    Ok(got) if got.status == 200 => {}
                    Ok(got) => failed.push(format!("via {n}: {} {}", got.status, String::from_utf8_lossy(&got.body))),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            Ok::<_, BoxError>(failed)
        }));
    }
    // Each phase to the four instances one after another (front, eu, kz,
    // us), 30 ms apart, as file watchers apply an edit of four files. Each
    // switch or abort stays in the tables after it, as the guide says: the
    // unit's epoch is never given up.
    let phases: [Phase; 6] = [
        ("kz", ("hold", 1, "eu")),
        ("eu", ("switch", 2, "eu")),
        ("eu", ("hold", 3, "kz")),
        ("kz", ("switch", 4, "kz")),
        ("kz", ("hold", 5, "eu")),
        ("kz", ("abort", 5, "eu")),
    ];
    for (owner, (phase, epoch, to)) in phases {
        let extra = moving(phase, to, epoch, ", hold: { max_time: 20s }");
        publish(&all[0], &front_table(&gw, owner, &extra))?;
        for (p, local) in all[1..].iter().zip(["eu", "kz", "us"]) {
            tokio::time::sleep(Duration::from_millis(30)).await;
            publish(p, &gateway(local, owner, &extra))?;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut failed = Vec::new();
    for c in clients {
        failed.extend(c.await??);
    }
    assert!(failed.is_empty(), "{} failed: {:?}", failed.len(), &failed[..failed.len().min(5)]);
    Ok(())
}

#[tokio::test]
async fn rehoming_a_write_held_longer_than_its_request_timeout_is_timed_from_its_release() -> TestResult {
    // The hold's wait is the move's, not the upstream's: the request's
    // timers start once it is let go.
    let [eu, kz, us] = three_backends().await?;
    let timed = "upstream: { request_timeout: 500ms, attempt_timeout: 500ms }\n";
    let p = proxy(&table(eu.addr, kz.addr, us.addr, timed)).await?;
    publish(&p, &table(eu.addr, kz.addr, us.addr, &format!("{timed}{}", moving("hold", "eu", 1, ""))))?;
    let req = put(&p, 7)?;
    let held = tokio::spawn(send(req));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!held.is_finished(), "the write was answered during the hold");
    let switched = table(eu.addr, kz.addr, us.addr, &format!("{timed}{}", moving("switch", "eu", 2, "")))
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    publish(&p, &switched)?;
    let got = held.await??;
    assert_eq!((got.status.as_u16(), region(&got)), (200, "eu".into()));
    Ok(())
}

#[tokio::test]
async fn move_checks_a_shared_table_in_the_region_given_and_a_barrier_too_long_is_a_usage_error() -> TestResult {
    // A fleet's shared table: `to: local` needs the region each instance serves.
    let shared = |kz: &str, phase: &str, epoch: u32| {
        format!(
            "version: 1\nregions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9001\"] }}\n  kz: {{ upstreams: \
             [\"http://127.0.0.1:9002\"] }}\n  us: {{ upstreams: [\"http://127.0.0.1:9003\"] }}\ncountries:\n  \
             KZ: {{ id: 7, region: {kz} }}\nroutes:\n  - name: health\n    match: {{ path: /v1/health }}\n    \
             to: local\n{}",
            moving(phase, "eu", epoch, "")
        )
    };
    let (hold, switch) = (shared("kz", "hold", 1), shared("eu", "switch", 2));
    let dir = tempfile::tempdir()?;
    let (closed, _) = super::support::binary::free_ports()?;
    let source = format!("etcd://127.0.0.1:{closed}/shardgate/table");
    let run = |extra: &'static [&'static str], switch: String| {
        let (dir, source, hold) = (dir.path().to_path_buf(), source.clone(), hold.clone());
        async move {
            let (h, s) = (dir.join("hold.yaml"), dir.join("switch.yaml"));
            std::fs::write(&h, hold)?;
            std::fs::write(&s, switch)?;
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_shardgate"));
            command.args(["move", "--source", &source]).args(extra).arg("--hold").arg(&h).arg("--switch").arg(&s);
            let out = tokio::task::spawn_blocking(move || command.output()).await??;
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            Ok::<_, BoxError>((out.status.code().unwrap_or(-1), text))
        }
    };
    // Without a region the table does not load: 78.
    let (code, out) = run(&[], switch.clone()).await?;
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("hold.yaml: invalid"), "{out}");
    // In kz's region it does; the tables make a move, and etcd is not there: 69.
    let (code, out) = run(&["--region", "kz"], switch.clone()).await?;
    assert_eq!(code, 69, "{out}");
    // A barrier not shorter than the hold's max_time (5 s) is a usage error: 2.
    let (code, out) = run(&["--region", "kz", "--barrier", "5s"], switch.clone()).await?;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--barrier"), "{out}");
    // A switch to another region than the hold's makes no move with it: 78.
    let to_us = switch.replace("to: eu", "to: us").replace("region: eu }\nroutes", "region: us }\nroutes");
    let (code, out) = run(&["--region", "kz"], to_us).await?;
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("the switch must go to the hold's region"), "{out}");
    Ok(())
}
