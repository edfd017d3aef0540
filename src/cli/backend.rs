//! `shardgate backend`: a small regional backend that answers every request
//! with JSON naming its region and echoing the request line, the headers it
//! received and a digest of the body. Used by `shardgate demo`, the compose
//! topology and the tests.
//!
//! Two paths hold data, the same on every run, for the demo's global reads:
//! `GET /v1/users/{user}/orders`, the user's orders kept in this region (a
//! JSON array, each order with its iUID, minted in the region's demo country
//! at times that interleave with the other regions', and a `region` field),
//! and `GET|HEAD /v1/legacy/{id}`, records under UUIDv7 ids that carry no
//! region: 200 for the region's own ([`legacy_ids`]), 404 for any other.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::problem::http1_answer;
use crate::server::accept::Acceptor;
use crate::server::Refused;

/// `shardgate backend --region R --listen ADDR`: serves until a signal.
pub async fn run(region: String, listen: std::net::SocketAddr) -> io::Result<i32> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
    tracing::info!(%listen, %region, "demo backend serving");
    let exit = crate::app::until_signal(|stop| serve(listener, region, stop)).await?;
    Ok(super::stopped(exit))
}

/// Most connections the backend serves at once; beyond it the shared
/// [`Acceptor`] answers 503 and closes (it also backs off when accept fails,
/// so a full file table does not spin the loop).
const MAX_CONNECTIONS: usize = 4096;

/// Serves the echo backend for `region` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, region: String, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    let region: Arc<str> = region.into();
    let builder = auto::Builder::new(TokioExecutor::new());
    let refused = Refused::TooManyConnections { limit: MAX_CONNECTIONS, listener: "backend" };
    let refusal: Arc<[u8]> = http1_answer(&refused, "shardgate-backend").into();
    let mut acceptor = Acceptor::new(listener, "backend", MAX_CONNECTIONS, refusal, Arc::new(Metrics::new()));
    tokio::pin!(shutdown);
    loop {
        let (stream, _, slot) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            () = &mut shutdown => return Ok(()),
        };
        let region = Arc::clone(&region);
        let service = service_fn(move |req| {
            let region = Arc::clone(&region);
            async move { Ok::<_, Infallible>(answer(&region, req).await) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = conn.await;
        });
    }
}

/// What the backend answers, in this field order (region first, for people).
#[derive(serde::Serialize)]
struct Echo<'a> {
    region: &'a str,
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    request_line: String,
    headers: serde_json::Map<String, serde_json::Value>,
    body_bytes: u64,
    body_sha256: String,
}

/// The demo regions, in order, and the country their orders are minted in
/// (the demo table's: DE, KZ, US).
const DEMO_REGIONS: [(&str, u8); 3] = [("eu", 49), ("kz", 7), ("us", 1)];

/// When the demo's orders were placed: from 2026-01-01T00:00:00Z, one a minute,
/// the regions in turn (eu, kz, us, eu, …).
const ORDERS_FROM_MS: u64 = 1_767_225_600_000;

/// Orders per user per region.
pub const ORDERS_PER_REGION: u64 = 3;

fn mix(text: &str, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ n;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    crate::ids::mix64(h)
}

/// `user`'s orders kept in `region` (none in a region the demo does not know).
pub fn orders(region: &str, user: &str) -> Vec<serde_json::Value> {
    let Some(i) = DEMO_REGIONS.iter().position(|(r, _)| *r == region) else { return Vec::new() };
    let country = DEMO_REGIONS[i].1;
    (0..ORDERS_PER_REGION)
        .map(|k| {
            let at = ORDERS_FROM_MS + (k * 3 + i as u64) * 60_000;
            let id = crate::ids::Iuid::from_fields(at, country, 3, mix(user, k * 3 + i as u64));
            serde_json::json!({ "id": id.to_string(), "region": region, "user": user, "total_cents": 1000 + (mix(user, k) % 9000) })
        })
        .collect()
}

/// The legacy records `region` holds: UUIDv7 ids, which carry no region.
pub fn legacy_ids(region: &str) -> Vec<String> {
    let Some(i) = DEMO_REGIONS.iter().position(|(r, _)| *r == region) else { return Vec::new() };
    (0..2u64)
        .map(|k| {
            let at = 1_600_000_000_000 + (i as u64) * 86_400_000 + k * 1000;
            let salt = mix(region, k);
            crate::ids::Uuid7::from_fields(at, (salt >> 52) as u16, salt).to_string()
        })
        .collect()
}

/// The answer of the two data paths, when `path` is one of them.
fn data(region: &str, method: &http::Method, path: &str) -> Option<(http::StatusCode, serde_json::Value)> {
    let read = method == http::Method::GET || method == http::Method::HEAD;
    if let Some(user) = path.strip_prefix("/v1/users/").and_then(|p| p.strip_suffix("/orders")) {
        if read && !user.is_empty() && !user.contains('/') {
            return Some((http::StatusCode::OK, serde_json::Value::Array(orders(region, user))));
        }
    }
    let id = path.strip_prefix("/v1/legacy/")?;
    if legacy_ids(region).iter().any(|l| l == id) {
        return Some((http::StatusCode::OK, serde_json::json!({ "id": id, "region": region, "kind": "legacy" })));
    }
    Some((
        http::StatusCode::NOT_FOUND,
        serde_json::json!({ "error": "no such record in this region", "region": region }),
    ))
}

/// The echo answer for one request (public for test backends).
pub async fn answer(region: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some((status, value)) = data(region, req.method(), req.uri().path()) {
        let mut resp = Response::new(Full::new(Bytes::from(value.to_string())));
        *resp.status_mut() = status;
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(region) {
            resp.headers_mut().insert("x-backend-region", v);
        }
        return resp;
    }
    let (parts, mut body) = req.into_parts();
    let mut hasher = Sha256::new();
    let mut len: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(data) = f.data_ref() {
                    len += data.len() as u64;
                    hasher.update(data);
                }
            }
            Err(_) => break,
        }
    }
    // A header sent once is a string; a repeated one is the list of its
    // values in the order received.
    let mut headers = serde_json::Map::new();
    for name in parts.headers.keys() {
        let values: Vec<serde_json::Value> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned().into())
            .collect();
        let value = match <[serde_json::Value; 1]>::try_from(values) {
            Ok([one]) => one,
            Err(many) => serde_json::Value::Array(many),
        };
        headers.insert(name.as_str().to_string(), value);
    }
    let digest: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let body = Echo {
        region,
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query(),
        request_line: format!("{} {} {:?}", parts.method, parts.uri, parts.version),
        headers,
        body_bytes: len,
        body_sha256: digest,
    };
    let mut resp = Response::new(Full::new(Bytes::from(serde_json::to_vec_pretty(&body).unwrap_or_default())));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(region) {
        resp.headers_mut().insert("x-backend-region", v);
    }
    resp
}
