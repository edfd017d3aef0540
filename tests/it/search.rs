//! Search placement learns only from the entity itself: a region that
//! answers a request about something else of the id's (`GET /s/X/comments`
//! answered `200 []` by a region without X) teaches the search cache
//! nothing, so one client's read never sends another client's write to a
//! region that does not hold the entity. An id read from the query is
//! asked for with it (`HEAD /q?id=X`), never by the bare path, which any
//! region with a list there answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

use crate::support::{backend_with, full, get, is_health_check, proxy, raw, send, BoxError, Running, TestResult};

/// An id that carries no region.
const X: &str = "017491bb-3800-74cf-8cf4-000000000001";

/// The requests a backend received: `METHOD path` each.
type Log = Arc<Mutex<Vec<String>>>;

/// A region's backend that answers each request (its method and target)
/// by `answers`: the status, the body, and how long it takes first. It says
/// whether it holds X (`x-holds`), and logs every request but health checks
/// as `METHOD target`.
async fn logged_region<F>(holds: bool, answers: F) -> Result<(Running, Log), BoxError>
where
    F: Fn(&http::Method, &http::Uri) -> (StatusCode, &'static str, Duration) + Send + Sync + 'static,
{
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    let (running, _) = backend_with(move |req| {
        let seen = Arc::clone(&seen);
        let answer = (!is_health_check(&req)).then(|| answers(req.method(), req.uri()));
        if let (Some(_), Ok(mut s)) = (&answer, seen.lock()) {
            s.push(format!("{} {}", req.method(), req.uri()));
        }
        async move {
            let Some((status, body, delay)) = answer else { return Response::new(full("ok")) };
            tokio::time::sleep(delay).await;
            let mut resp = Response::new(full(body));
            *resp.status_mut() = status;
            resp.headers_mut().insert("x-holds", http::HeaderValue::from_static(if holds { "yes" } else { "no" }));
            resp
        }
    })
    .await?;
    Ok((running, log))
}

/// A region's backend that holds the entity X when `holds`; either way it
/// answers every list under `/s/<id>/` with `200 []`, as list endpoints
/// do, and anything ending in `/gone` with 404. Its lists answer after
/// `list_delay`.
async fn region(holds: bool, list_delay: Duration) -> Result<(Running, Log), BoxError> {
    logged_region(holds, move |method, uri| {
        let path = uri.path();
        let list = path.ends_with("/comments") && method == http::Method::GET;
        let entity = path == format!("/s/{X}") || path.starts_with(&format!("/s/{X}/"));
        match () {
            () if list => (StatusCode::OK, "[]", list_delay),
            () if holds && entity && !path.ends_with("/gone") => (StatusCode::OK, "{}", Duration::ZERO),
            () => (StatusCode::NOT_FOUND, "{}", Duration::ZERO),
        }
    })
    .await
}

/// Regions eu and us, and a search route over both.
fn table(eu: std::net::SocketAddr, us: std::net::SocketAddr) -> String {
    format!(
        r#"version: 1
regions:
  eu: {{ upstreams: ["http://{eu}"] }}
  us: {{ upstreams: ["http://{us}"] }}
upstream: {{ health: {{ interval: 0s }} }}
routes:
  - name: things
    match: {{ path: "/s/{{id}}/{{*rest}}" }}
    id: {{ path_param: id, formats: [uuidv7] }}
    placement: search
"#
    )
}

#[tokio::test]
async fn one_clients_read_never_sends_another_clients_write_astray() -> TestResult {
    // eu does not hold X and answers its lists at once; us holds X and
    // answers its lists late: a search that trusted the first 2xx of a
    // list would remember eu.
    let (eu, eu_log) = region(false, Duration::ZERO).await?;
    let (us, _us_log) = region(true, Duration::from_millis(200)).await?;
    let p = proxy(&table(eu.addr, us.addr)).await?;
    // One client reads a list of X's.
    let list = get(&p.url(&format!("/s/{X}/comments"))).await?;
    assert_eq!((list.status.as_u16(), list.header("x-holds")), (200, Some("yes")), "answered by a region without X");
    // Another writes X's profile: it goes to the region that holds X.
    let put = Request::put(p.url(&format!("/s/{X}/profile"))).body(Full::new(Bytes::from("{}")))?;
    let got = send(put).await?;
    assert_eq!((got.status.as_u16(), got.header("x-holds")), (200, Some("yes")));
    let eu_saw = eu_log.lock().map_err(|_| "log")?.clone();
    assert!(!eu_saw.iter().any(|r| r.starts_with("PUT")), "a write reached a region without X: {eu_saw:?}");
    // What eu was asked was where X is (HEAD of X itself), never its lists.
    assert!(eu_saw.iter().all(|r| r == &format!("HEAD /s/{X}")), "{eu_saw:?}");
    Ok(())
}

#[tokio::test]
async fn a_read_with_a_query_of_its_own_teaches_the_search_nothing() -> TestResult {
    // eu does not hold X but answers any GET with a query at once (a view it
    // computes for whatever it is asked); us holds X and answers late.
    let (eu, eu_log) = logged_region(false, |method, uri| match (method == http::Method::GET, uri.query()) {
        (true, Some(_)) => (StatusCode::OK, "{}", Duration::ZERO),
        _ => (StatusCode::NOT_FOUND, "{}", Duration::ZERO),
    })
    .await?;
    let (us, _) = logged_region(true, |_, uri| match uri.path().starts_with(&format!("/s/{X}")) {
        true => (StatusCode::OK, "{}", Duration::from_millis(200)),
        false => (StatusCode::NOT_FOUND, "{}", Duration::ZERO),
    })
    .await?;
    let p = proxy(&table(eu.addr, us.addr).replace("/s/{id}/{*rest}", "/s/{id}")).await?;
    // One client reads X with a query: asked where X is first, then of us.
    let read = get(&p.url(&format!("/s/{X}?view=mine"))).await?;
    assert_eq!((read.status.as_u16(), read.header("x-holds")), (200, Some("yes")));
    // Another writes X: it goes to us, which holds it.
    let put = Request::put(p.url(&format!("/s/{X}"))).body(Full::new(Bytes::from("{}")))?;
    let got = send(put).await?;
    assert_eq!((got.status.as_u16(), got.header("x-holds")), (200, Some("yes")));
    let eu_saw = eu_log.lock().map_err(|_| "log")?.clone();
    assert!(eu_saw.iter().all(|r| r == &format!("HEAD /s/{X}")), "{eu_saw:?}");
    Ok(())
}

/// A region's backend that holds X, on raw HTTP/1.1 keep-alive
/// connections that read each request's body by its `Content-Length` (as
/// nginx and Go do, where hyper would close): `HEAD`/`GET /s/X` 200, a
/// path ending in `/gone` 404, others `200 []`; its log has every request
/// line it read.
async fn strict_region() -> Result<(std::net::SocketAddr, Log), BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let line = head.lines().next().unwrap_or("").to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                        .and_then(|(_, v)| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + length {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + length);
                    let path = line.split(' ').nth(1).unwrap_or("");
                    let answer = if line.starts_with("HEAD ") {
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
                    } else if path.ends_with("/gone") {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}"
                    } else {
                        "HTTP/1.1 200 OK\r\nx-holds: yes\r\ncontent-length: 2\r\n\r\n[]"
                    };
                    if let Ok(mut l) = seen.lock() {
                        l.push(line);
                    }
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((addr, log))
}

#[tokio::test]
async fn a_read_with_a_body_is_not_asked_again_without_it() -> TestResult {
    let (eu, _) = region(false, Duration::ZERO).await?;
    let (us, us_log) = strict_region().await?;
    let p = proxy(&table(eu.addr, us)).await?;
    // us is remembered for X.
    assert_eq!(get(&p.url(&format!("/s/{X}/comments"))).await?.status.as_u16(), 200);
    // A GET with a body, which us answers 404: the body went to us, so the
    // proxy answers that 404 and does not send the head (which says it has
    // a body) again without one.
    let read = format!("GET /s/{X}/gone HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello");
    let answer = raw(p.addr, read.as_bytes(), Duration::from_secs(10)).await?;
    assert_eq!(answer.status(), Some(404), "{}", answer.text());
    // us's connections carry other clients' requests as they were sent.
    for _ in 0..3 {
        let got = get(&p.url(&format!("/s/{X}/comments"))).await?;
        assert_eq!((got.status.as_u16(), got.header("x-holds")), (200, Some("yes")), "a request reached us garbled");
    }
    let lines = us_log.lock().map_err(|_| "log")?.clone();
    assert!(lines.iter().all(|l| l.starts_with("GET /s/") || l.starts_with("HEAD /s/")), "{lines:?}");
    Ok(())
}

/// A region's backend for ids in the query, as list endpoints take them:
/// `/q?id=X` is the entity (200 when it `holds` X, else 404), and `/q`
/// alone, or with a `view`, is a list every region answers `200 []`. A
/// region that is `slow` answers everything 200 ms late.
async fn query_region(holds: bool, slow: bool) -> Result<(Running, Log), BoxError> {
    let delay = if slow { Duration::from_millis(200) } else { Duration::ZERO };
    logged_region(holds, move |_, uri| {
        let query = uri.query().unwrap_or("");
        match !query.contains("id=") || query.contains("view=") {
            true => (StatusCode::OK, "[]", delay),
            false if holds => (StatusCode::OK, "{}", delay),
            false => (StatusCode::NOT_FOUND, "{}", delay),
        }
    })
    .await
}

#[tokio::test]
async fn an_id_in_the_query_is_searched_for_with_its_query() -> TestResult {
    // eu does not hold X and answers at once; us holds X and answers late.
    let (eu, eu_log) = query_region(false, false).await?;
    let (us, _us_log) = query_region(true, true).await?;
    let route = "    match: { path: \"/s/{id}/{*rest}\" }\n    id: { path_param: id, formats: [uuidv7] }\n";
    let yaml =
        table(eu.addr, us.addr).replace(route, "    match: { path: /q }\n    id: { query: id, formats: [uuidv7] }\n");
    assert!(yaml.contains("query: id"), "{yaml}");
    let p = proxy(&yaml).await?;
    // A list of X's: asked where X is first, then answered by the region that holds it.
    let list = get(&p.url(&format!("/q?id={X}&view=history"))).await?;
    assert_eq!((list.status.as_u16(), list.header("x-holds")), (200, Some("yes")), "answered by a region without X");
    // A write of an id not yet searched for goes to the region that holds it.
    let y = X.replace("0001", "0002");
    let put = Request::put(p.url(&format!("/q?id={y}"))).body(Full::new(Bytes::from("{}")))?;
    let got = send(put).await?;
    assert_eq!((got.status.as_u16(), got.header("x-holds")), (200, Some("yes")));
    // eu was asked only where each id is, with the id in the query.
    let eu_saw = eu_log.lock().map_err(|_| "log")?.clone();
    assert_eq!(eu_saw, [format!("HEAD /q?id={X}"), format!("HEAD /q?id={y}")]);
    Ok(())
}

#[test]
fn a_search_route_of_many_paths_with_its_id_outside_them_and_no_exists_is_warned_of() -> TestResult {
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let route = "    match: { path: \"/s/{id}/{*rest}\" }\n    id: { path_param: id, formats: [uuidv7] }\n";
    let warned = |with: &str| -> Result<Vec<String>, BoxError> {
        let cfg =
            shardgate::config::load_str(&table(at, at).replace(route, with), "t.yaml").map_err(|e| e.to_string())?;
        Ok(cfg.warnings().into_iter().filter(|w| w.contains("search.exists")).collect())
    };
    let header = "    id: { header: X-Entity-Id, formats: [uuidv7] }\n";
    let w = warned(&format!("    match: {{ prefix: /w/ }}\n{header}"))?;
    assert!(w.len() == 1 && w[0].contains("route things"), "{w:?}");
    let w = warned("    match: { path: \"/q/{tenant}\" }\n    id: { query: id, formats: [uuidv7] }\n")?;
    assert_eq!(w.len(), 1, "{w:?}");
    // One path, the id in the path, or exists set: nothing to warn of.
    assert_eq!(warned(&format!("    match: {{ path: /w }}\n{header}"))?, Vec::<String>::new());
    assert_eq!(warned(route)?, Vec::<String>::new());
    let exists = format!("    match: {{ prefix: /w/ }}\n{header}    search: {{ exists: /w }}\n");
    assert_eq!(warned(&exists)?, Vec::<String>::new());
    Ok(())
}
