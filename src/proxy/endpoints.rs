//! What the proxy listener answers itself, before any routing: the peers'
//! readiness check (`GET /.shardgate/ready`, 503 while draining) and the
//! batch mint endpoint (`POST <mint_batch.path>`, [`super::mint::batch`]).

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderValue, Method, Response, StatusCode};
use http_body_util::{Either, Full};

use super::mint::{self, Minters};
use crate::problem::response as problem_response;
use crate::routing::Table;
use crate::server::{AnswerBody, Drain};

/// The answer to `head`, if it is one of the listener's own endpoints.
/// `name` is this instance's (a refusal's `Proxy-Status`).
pub(super) fn own_answer(
    head: &Parts,
    table: &Table,
    drain: &Drain,
    minters: &Minters,
    name: &str,
) -> Option<Response<AnswerBody>> {
    let path = head.uri.path();
    if path == crate::mesh::READY_PATH {
        let (status, body) = if drain.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, &b"draining\n"[..])
        } else {
            (StatusCode::OK, &b"ready\n"[..])
        };
        return Some(plain(status, "text/plain", Bytes::from_static(body)));
    }
    if head.method != Method::POST || table.settings().mint_batch.path.as_deref() != Some(path) {
        return None;
    }
    Some(match mint::batch(head.uri.query(), table, minters) {
        Ok(body) => plain(StatusCode::OK, "application/json", Bytes::from(body)),
        Err(err) => problem_response(&err, path, "-", name).map(Either::Right),
    })
}

fn plain(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<AnswerBody> {
    let mut resp = Response::new(Either::Right(Full::new(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
