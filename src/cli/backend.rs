//! `shardgate backend`: a small regional backend that answers every request
//! with JSON naming its region and echoing the request line, the headers it
//! received and a digest of the body. Used by `shardgate demo`, the compose
//! topology and the tests.

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
use crate::proxy::error::{problem_http1_bytes, ProxyError};
use crate::proxy::server::Acceptor;

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
    let refused = ProxyError::TooManyConnections { limit: MAX_CONNECTIONS, listener: "backend" };
    let refusal: Arc<[u8]> = problem_http1_bytes(&refused, "shardgate-backend").into();
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

/// The echo answer for one request (public for test backends).
pub async fn answer(region: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
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
