//! Search placement learns only from the entity itself: a region that
//! answers a request about something else of the id's (`GET /s/X/comments`
//! answered `200 []` by a region without X) teaches the search cache
//! nothing, so one client's read never sends another client's write to a
//! region that does not hold the entity.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

use crate::support::{backend_with, full, get, is_health_check, proxy, send, BoxError, Running, TestResult};

/// An id that carries no region.
const X: &str = "017491bb-3800-74cf-8cf4-000000000001";

/// The requests a backend received: `METHOD path` each.
type Log = Arc<Mutex<Vec<String>>>;

/// A region's backend that holds the entity X when `holds`; either way it
/// answers every list under `/s/<id>/` with `200 []`, as list endpoints
/// do. Its lists answer after `list_delay`.
async fn region(holds: bool, list_delay: Duration) -> Result<(Running, Log), BoxError> {
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    let (running, _) = backend_with(move |req| {
        let seen = Arc::clone(&seen);
        async move {
            if is_health_check(&req) {
                return Response::new(full("ok"));
            }
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            if let Ok(mut s) = seen.lock() {
                s.push(format!("{method} {path}"));
            }
            let entity = path == format!("/s/{X}");
            let status = if path.ends_with("/comments") && method == http::Method::GET {
                tokio::time::sleep(list_delay).await;
                StatusCode::OK
            } else if holds && (entity || path.starts_with(&format!("/s/{X}/"))) {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            let body = if path.ends_with("/comments") { "[]" } else { "{}" };
            let mut resp = Response::new(full(body));
            *resp.status_mut() = status;
            resp.headers_mut().insert("x-holds", http::HeaderValue::from_static(if holds { "yes" } else { "no" }));
            resp
        }
    })
    .await?;
    Ok((running, log))
}

#[tokio::test]
async fn one_clients_read_never_sends_another_clients_write_astray() -> TestResult {
    // eu does not hold X and answers its lists at once; us holds X and
    // answers its lists late: a search that trusted the first 2xx of a
    // list would remember eu.
    let (eu, eu_log) = region(false, Duration::ZERO).await?;
    let (us, _us_log) = region(true, Duration::from_millis(200)).await?;
    let yaml = format!(
        r#"version: 1
regions:
  eu: {{ upstreams: ["http://{}"] }}
  us: {{ upstreams: ["http://{}"] }}
upstream: {{ health: {{ interval: 0s }} }}
routes:
  - name: things
    match: {{ path: "/s/{{id}}/{{*rest}}" }}
    id: {{ path_param: id, formats: [uuidv7] }}
    placement: search
"#,
        eu.addr, us.addr
    );
    let p = proxy(&yaml).await?;
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
