//! DNS discovery against a name server run here on loopback: a backend
//! named by host is every address of its name, re-resolved as its TTL
//! runs out; an address that goes away is drained (a request in flight
//! there finishes), and a failed lookup keeps the addresses last found; a
//! name whose lookups go unanswered delays no other name's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, UdpSocket};

use crate::support::{self, backend_on, get, BoxError, Running, TestResult};

/// What the name server answers for its one name: addresses, or SERVFAIL.
#[derive(Clone, Debug)]
enum Answer {
    Addresses(Vec<Ipv4Addr>),
    Fail,
}

/// A name that the name server never answers.
const SILENT: &str = "silent.test";

/// A name server on 127.0.0.1 answering the A question of `name` (and of
/// every name under it) from `answer`
/// (TTL 1 s), AAAA with no records, [`SILENT`]'s never, and anything else
/// NXDOMAIN.
async fn name_server(name: &'static str, answer: Arc<Mutex<Answer>>) -> Result<SocketAddr, BoxError> {
    Ok(counting_name_server(name, answer).await?.0)
}

/// [`name_server`], and how many A questions for `name` it was asked.
async fn counting_name_server(
    name: &'static str,
    answer: Arc<Mutex<Answer>>,
) -> Result<(SocketAddr, Arc<std::sync::atomic::AtomicUsize>), BoxError> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    let addr = socket.local_addr()?;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let current = answer.lock().map(|a| a.clone()).unwrap_or(Answer::Fail);
            if let Some((reply, a_for_name)) = reply(&buf[..n], name, &current) {
                if a_for_name {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                let _ = socket.send_to(&reply, from).await;
            }
        }
    });
    Ok((addr, asked))
}

/// The reply to one query (RFC 1035 §4.1): the question echoed, then the
/// answers; and whether it was an A question for `name` or a name under it.
/// None for [`SILENT`].
fn reply(query: &[u8], name: &str, answer: &Answer) -> Option<(Vec<u8>, bool)> {
    let mut at = 12;
    let mut labels = Vec::new();
    while *query.get(at)? != 0 {
        let len = usize::from(*query.get(at)?);
        labels.push(String::from_utf8_lossy(query.get(at + 1..at + 1 + len)?).to_ascii_lowercase());
        at += 1 + len;
    }
    let question_end = at + 5;
    let qtype = u16::from_be_bytes([*query.get(at + 1)?, *query.get(at + 2)?]);
    if labels.join(".") == SILENT {
        return None;
    }
    // `name` and every name under it (a wildcard record).
    let asked = labels.join(".");
    let ours = asked == name || asked.strip_suffix(name).is_some_and(|sub| sub.ends_with('.'));
    let (rcode, addrs): (u8, Vec<Ipv4Addr>) = match (ours, answer, qtype) {
        (false, ..) => (3, Vec::new()),
        (true, Answer::Fail, _) => (2, Vec::new()),
        (true, Answer::Addresses(list), 1) => (0, list.clone()),
        (true, Answer::Addresses(_), _) => (0, Vec::new()),
    };
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(query.get(..2)?);
    out.extend_from_slice(&[0x81, 0x80 | rcode, 0, 1]);
    out.extend_from_slice(&u16::try_from(addrs.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question_end)?);
    for ip in addrs {
        // The name by pointer to the question; A, IN, TTL 1 s, four bytes.
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some((out, ours && qtype == 1))
}

/// A backend named `who` on `ip`:`port`.
async fn backend_at(ip: Ipv4Addr, port: u16, who: &str) -> Result<Running, BoxError> {
    backend_on(TcpListener::bind(SocketAddr::new(IpAddr::V4(ip), port)).await?, who).await
}

/// Sends GETs until one answers from `who`; fails after 10 s.
async fn until_from(p: &Running, who: &str) -> TestResult {
    until_in_a_row(p, who, 1).await
}

/// Sends GETs until `n` in a row answer from `who` (the others gone); fails after 10 s.
async fn until_in_a_row(p: &Running, who: &str, n: usize) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_a_row = 0;
    loop {
        let got = get(&p.url("/any")).await?;
        in_a_row = if got.header("x-backend-region") == Some(who) { in_a_row + 1 } else { 0 };
        if in_a_row == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(
                format!("no answer from {who}; last {} {:?}", got.status, got.header("x-backend-region")).into()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_backend_is_every_address_of_its_name_as_it_changes() -> TestResult {
    let (first_ip, second_ip) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    let probe = TcpListener::bind((first_ip, 0)).await?;
    let port = probe.local_addr()?.port();
    let first = backend_on(probe, "first").await?;
    let second = backend_at(second_ip, port, "second").await?;
    let answer = Arc::new(Mutex::new(Answer::Addresses(vec![first_ip])));
    let dns = name_server("backends.test", Arc::clone(&answer)).await?;
    let yaml = format!(
        "version: 1\nupstream: {{ dns: {{ servers: [\"{dns}\"], min_ttl: 1s, max_ttl: 2s }} }}\nregions:\n  eu: {{ upstreams: [\"http://backends.test:{port}\"] }}\ndefault_region: eu\nroutes:\n  - {{ name: all, match: {{ prefix: / }}, to: local }}\n"
    );
    let p = support::proxy(&yaml).await?;
    let set = |list: Answer| answer.lock().map(|mut a| *a = list).map_err(|_| "lock");
    until_from(&p, "first").await?;
    // A second address: both take requests.
    set(Answer::Addresses(vec![first_ip, second_ip]))?;
    until_from(&p, "second").await?;
    until_from(&p, "first").await?;
    // first goes away while a request is in flight there: it finishes there.
    set(Answer::Addresses(vec![first_ip]))?;
    until_in_a_row(&p, "first", 6).await?;
    let slow = tokio::spawn({
        let url = p.url("/t/slow/x");
        async move { get(&url).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    set(Answer::Addresses(vec![second_ip]))?;
    until_in_a_row(&p, "second", 6).await?;
    let slow = slow.await??;
    assert_eq!((slow.status.as_u16(), slow.header("x-backend-region")), (200, Some("first")));
    let before = first.hits();
    for _ in 0..4 {
        assert_eq!(get(&p.url("/any")).await?.header("x-backend-region"), Some("second"));
    }
    assert_eq!(first.hits(), before);
    // The name server fails: the last addresses stay.
    set(Answer::Fail)?;
    let stats = &p.proxy.as_ref().ok_or("proxy")?.shared().dns;
    let failed = stats.failed.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.failed.load(Ordering::Relaxed) == failed && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stats.failed.load(Ordering::Relaxed) > failed, "no failed lookup counted");
    for _ in 0..4 {
        assert_eq!(get(&p.url("/any")).await?.header("x-backend-region"), Some("second"));
    }
    drop(second);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_whose_lookups_go_unanswered_delays_no_other_names_refresh() -> TestResult {
    let probe = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), 0)).await?;
    let port = probe.local_addr()?.port();
    let _backend = backend_on(probe, "eu").await?;
    let answer = Arc::new(Mutex::new(Answer::Addresses(vec![Ipv4Addr::new(127, 0, 0, 2)])));
    let (dns, asked) = counting_name_server("backends.test", answer).await?;
    // us's name is never answered: each of its lookups waits out its timeout (about 4 s).
    let yaml = format!(
        "version: 1\nupstream: {{ dns: {{ servers: [\"{dns}\"], min_ttl: 1s, max_ttl: 1s }} }}\nregions:\n  us: {{ upstreams: [\"http://{SILENT}:{port}\"] }}\n  eu: {{ upstreams: [\"http://backends.test:{port}\"] }}\ndefault_region: eu\nroutes:\n  - {{ name: all, match: {{ prefix: / }}, to: local }}\n"
    );
    let p = support::proxy(&yaml).await?;
    until_from(&p, "eu").await?;
    // eu's name, TTL 1 s, is asked again about every second meanwhile.
    let before = asked.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let during = asked.load(Ordering::Relaxed) - before;
    assert!(during >= 4, "backends.test was asked {during} times in 6 s: its refresh waited on silent.test's lookups");
    Ok(())
}

/// Two regions whose backends are two names of one address (two virtual
/// hosts behind one balancer): the name that fails is ejected, and the
/// other, on the same address, stays in service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_names_on_one_address_keep_their_health_apart() -> TestResult {
    let (vhosts, _) = support::backend_with(|req| {
        let host = req.headers().get("host").map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
        let host = host.unwrap_or_default();
        let status = if host.starts_with("eu.") { 503 } else { 200 };
        async move {
            let mut resp = http::Response::new(support::full(host));
            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
            resp
        }
    })
    .await?;
    let kz = support::backend("kz").await?;
    let dns = name_server("shared.test", Arc::new(Mutex::new(Answer::Addresses(vec![Ipv4Addr::LOCALHOST])))).await?;
    let port = vhosts.addr.port();
    let extra = format!(
        "upstream: {{ dns: {{ servers: [\"{dns}\"], min_ttl: 1s, max_ttl: 2s }}, health: {{ interval: 0s }}, \
         retries: 0, eject_after: 2, eject_for: 60s }}"
    );
    let yaml = support::table(vhosts.addr, kz.addr, vhosts.addr, &extra)
        .replace(
            &format!("eu: {{ upstreams: [\"http://{}\"] }}", vhosts.addr),
            &format!("eu: {{ upstreams: [\"http://eu.shared.test:{port}\"] }}"),
        )
        .replace(
            &format!("us: {{ upstreams: [\"http://{}\"] }}", vhosts.addr),
            &format!("us: {{ upstreams: [\"http://us.shared.test:{port}\"] }}"),
        );
    assert!(yaml.contains("eu.shared.test") && yaml.contains("us.shared.test"), "{yaml}");
    let p = support::proxy(&yaml).await?;
    let order = |country: u8| p.url(&format!("/v1/orders/{}", support::iuid(country)));
    // The endpoint each name was found at, as health reports it: (up, ejected).
    let found = |region: &str, name: &str| -> Result<Option<(bool, bool)>, BoxError> {
        let report = support::health_of(&p, region)?;
        Ok(report.into_iter().find(|(e, ..)| e.ends_with(&format!("({name})"))).map(|(_, up, ej)| (up, ej)))
    };
    // Once both names are found (and tracked): us answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    while found("eu", "eu.shared.test")?.is_none()
        || found("us", "us.shared.test")?.is_none()
        || get(&order(1)).await?.status != 200
    {
        assert!(Instant::now() < deadline, "the names were never found: {:?}", support::health_of(&p, "us")?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // eu's virtual host fails until its endpoint is ejected.
    for _ in 0..4 {
        assert_eq!(get(&order(49)).await?.status, 503);
    }
    assert_eq!(found("eu", "eu.shared.test")?, Some((true, true)), "{:?}", support::health_of(&p, "eu")?);
    // us, on the same address, is not.
    for _ in 0..4 {
        let got = get(&order(1)).await?;
        assert_eq!(
            (got.status.as_u16(), String::from_utf8_lossy(&got.body).into_owned()),
            (200, format!("us.shared.test:{port}"))
        );
    }
    assert_eq!(found("us", "us.shared.test")?, Some((true, false)), "{:?}", support::health_of(&p, "us")?);
    Ok(())
}
