//! Problems: how every failure shardgate answers itself becomes a
//! response, on every listener. An error type says what its failure is
//! ([`Problem`]: its [`Spec`] row, its message, any fields or headers of
//! its own); [`response`] is the one builder of the RFC 9457
//! `application/problem+json` answer with its RFC 9209 `Proxy-Status`.
//!
//! The proxy's failures are [`crate::proxy::error::ProxyError`], the
//! listeners' own refusals [`crate::server::Refused`], the admin listener's
//! `admin::AdminError`; rows that more than one of them answer are here.

use std::fmt;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Map, Value};

use crate::grpc;
use crate::grpc::status::Code;
use crate::ids::escape_for_display;
pub use crate::outcome::Outcome;

/// One row of an error table: what a failure is on the wire and in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// HTTP status.
    pub status: StatusCode,
    /// The stable machine-readable `reason`.
    pub reason: &'static str,
    /// The RFC 9209 `Proxy-Status` error token.
    pub token: &'static str,
    /// The RFC 9457 title.
    pub title: &'static str,
    /// The last segment of the RFC 9457 type URI.
    pub slug: &'static str,
    /// The `outcome` label of `shardgate_http_server_request_duration_seconds`.
    pub outcome: Outcome,
    /// The gRPC status a gRPC call gets instead ([`grpc_response`]).
    pub grpc: Code,
}

/// A row: status, reason, `Proxy-Status` token, title, type slug, metrics
/// outcome; its gRPC status follows from the outcome ([`Spec::with_grpc`]
/// for a row that differs).
pub const fn row(
    status: StatusCode,
    reason: &'static str,
    token: &'static str,
    title: &'static str,
    slug: &'static str,
    outcome: Outcome,
) -> Spec {
    Spec { status, reason, token, title, slug, outcome, grpc: grpc_code(outcome) }
}

impl Spec {
    /// The row with another gRPC status than its outcome's.
    pub const fn with_grpc(self, grpc: Code) -> Spec {
        Spec { grpc, ..self }
    }
}

/// The gRPC status of a call that ended so (a proxied call's own status is
/// its backend's; only failures are answered by the proxy).
const fn grpc_code(outcome: Outcome) -> Code {
    use Outcome as O;
    match outcome {
        O::Proxied | O::ForwardedToPeer | O::Minted | O::Fanout | O::FanoutPartial | O::Searched | O::SearchCached => {
            Code::Unknown
        }
        O::NoRoute => Code::Unimplemented,
        O::BadId | O::BadRequest => Code::InvalidArgument,
        O::NoOwner => Code::FailedPrecondition,
        O::Unavailable | O::UpstreamError | O::Refused | O::Misdirected => Code::Unavailable,
        O::Timeout => Code::DeadlineExceeded,
        O::TooLarge => Code::ResourceExhausted,
        O::Loop | O::ProxyError => Code::Internal,
        O::NotFound => Code::NotFound,
    }
}

/// `Proxy-Status` token: the request itself is at fault.
pub const REQ: &str = "http_request_error";
/// `Proxy-Status` token: nothing to send it to.
pub const DEST: &str = "destination_not_found";

/// A path asked for with a method it does not take (a route's, an admin endpoint's).
pub const METHOD_NOT_ALLOWED: Spec = row(
    StatusCode::METHOD_NOT_ALLOWED,
    "method_not_allowed",
    REQ,
    "Method Not Allowed",
    "method-not-allowed",
    Outcome::NoRoute,
);
/// A request with more header fields than allowed (the listener's, or the proxy's check).
pub const HEADERS_TOO_LARGE: Spec = row(
    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    "headers_too_large",
    REQ,
    "Request headers too large",
    "request-too-large",
    Outcome::TooLarge,
);
/// A listener at its connection limit.
pub const TOO_MANY_CONNECTIONS: Spec = row(
    StatusCode::SERVICE_UNAVAILABLE,
    "too_many_connections",
    "connection_limit_reached",
    "Too many connections",
    "too-many-connections",
    Outcome::Refused,
);

/// A failure that shardgate answers itself.
pub trait Problem: fmt::Display {
    /// Its row.
    fn spec(&self) -> Spec;

    /// Members of the problem object beyond the standard ones.
    fn members(&self, _body: &mut Map<String, Value>) {}

    /// Header fields beyond the standard ones (`Retry-After`, `Allow`, …).
    fn fields(&self, _headers: &mut HeaderMap) {}
}

/// Untrusted input in a message: quoted, escaped, at most 64 characters.
pub fn quote(input: &str) -> String {
    format!("'{}'", escape_for_display(input, 64))
}

/// The response body type of everything shardgate answers itself.
pub type ErrorBody = Full<Bytes>;

/// The problem+json response for `err`, with `Proxy-Status` naming
/// `proxy_name`, `instance` the request path (escaped and truncated here)
/// and `request_id` the request's id (the `X-Request-Id` field is the
/// server's to write, as on every answer).
pub fn response(err: &dyn Problem, instance: &str, request_id: &str, proxy_name: &str) -> Response<ErrorBody> {
    let spec = err.spec();
    let mut body = Map::new();
    body.insert("type".into(), format!("https://shardgate.dev/problems/{}", spec.slug).into());
    body.insert("title".into(), spec.title.into());
    body.insert("status".into(), spec.status.as_u16().into());
    body.insert("detail".into(), err.to_string().into());
    body.insert("instance".into(), escape_for_display(instance, 256).into());
    body.insert("request_id".into(), request_id.into());
    body.insert("reason".into(), spec.reason.into());
    err.members(&mut body);
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = spec.status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let ps = format!("{proxy_name}; error={}; details=\"{}\"", spec.token, spec.reason);
    if let Ok(v) = HeaderValue::from_str(&ps) {
        h.insert("proxy-status", v);
    }
    err.fields(h);
    resp
}

/// The answer to a gRPC call for `err`: `200` with its gRPC status and
/// message in the head and no body (gRPC's "Trailers-Only"), the same
/// `Proxy-Status` as [`response`] and the error's own fields.
pub fn grpc_response(err: &dyn Problem, proxy_name: &str) -> Response<ErrorBody> {
    let spec = err.spec();
    let mut resp = Response::new(Full::new(Bytes::new()));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(u16::from(spec.grpc.number())));
    let text = format!("{}: {err}", spec.reason);
    if let Ok(v) = HeaderValue::from_str(&grpc::status::message(&text)) {
        h.insert("grpc-message", v);
    }
    let ps = format!("{proxy_name}; error={}; details=\"{}\"", spec.token, spec.reason);
    if let Ok(v) = HeaderValue::from_str(&ps) {
        h.insert("proxy-status", v);
    }
    err.fields(h);
    resp
}

/// `err` as a complete HTTP/1.1 response with `Connection: close`, for
/// answers written straight to a socket (a connection refused at the
/// limit, a head that cannot be read).
pub fn http1_answer(err: &dyn Problem, proxy_name: &str) -> Vec<u8> {
    http1_bytes(response(err, "", "-", proxy_name))
}

/// A complete response as HTTP/1.1 bytes with `Content-Length` and
/// `Connection: close`.
pub fn http1_bytes(resp: Response<ErrorBody>) -> Vec<u8> {
    let status = resp.status();
    let mut out = format!("HTTP/1.1 {} {}\r\n", status.as_u16(), status.canonical_reason().unwrap_or("")).into_bytes();
    for (name, value) in resp.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let body = resp.into_body().into_inner().unwrap_or_default();
    out.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Asserts that `err` has a complete row with `reason` and a
    /// problem+json answer that says what the row says.
    pub(crate) fn assert_complete(err: &dyn Problem, reason: &str) -> Result<(), Box<dyn std::error::Error>> {
        let spec = err.spec();
        let message = err.to_string();
        assert_eq!(spec.reason, reason, "{message}");
        assert!(spec.status.is_client_error() || spec.status.is_server_error(), "{message}");
        for text in [spec.reason, spec.token, spec.slug] {
            assert!(!text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-'));
        }
        assert!(message.chars().next().is_some_and(|c| !c.is_uppercase()), "{message}");
        let resp = response(err, "/p", "rid", "gw");
        assert_eq!(resp.status(), spec.status);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let body: Value = serde_json::from_slice(&resp.into_body().into_inner().unwrap_or_default())?;
        assert_eq!(body["reason"], spec.reason);
        assert_eq!(body["status"], spec.status.as_u16());
        assert_eq!(body["detail"], message);
        Ok(())
    }
}
