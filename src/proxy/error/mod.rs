//! The one table of failures shardgate answers itself, on the proxy
//! listener and the admin listener alike: for each, its HTTP status, the
//! stable `reason`, the RFC 9209 `Proxy-Status` error token, the RFC 9457
//! title and type, and the `outcome` label of the request metrics
//! ([`ProxyError::spec`]); and the one builder of their
//! `application/problem+json` responses ([`problem_response`]).

use std::fmt;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::ids::{escape_for_display, Format, IdError};

/// Where a route looks for its id, as shown in error messages.
pub type ParamName = String;

/// A failure shardgate answers itself.
#[derive(Debug)]
pub enum ProxyError {
    /// No route matches the method and path.
    NoRoute,
    /// The route's id is not in the request.
    MissingId {
        /// e.g. `path parameter 'id'`, `header 'x-entity-id'`.
        param: ParamName,
    },
    /// The id appears more than once in the request with different values.
    AmbiguousId {
        /// Where the id was read.
        param: ParamName,
    },
    /// The id is there but no accepted format decodes it.
    BadId {
        /// Where the id was read.
        param: ParamName,
        /// Why the route's first format rejected it.
        error: IdError,
        /// The offending input (escaped and truncated when shown).
        input: String,
    },
    /// The id decodes but the table names no owner (a configuration gap).
    NoOwner {
        /// The table's explanation.
        detail: String,
    },
    /// A create route cannot mint in the asked country (a configuration gap:
    /// no shard of its region, a shard count that does not fit).
    CannotMint {
        /// Why.
        detail: String,
    },
    /// A create request names no country.
    MissingCountry {
        /// Where the country was read.
        param: ParamName,
    },
    /// A create request names a country the table does not know.
    UnknownCountry {
        /// Where the country was read.
        param: ParamName,
        /// What was there.
        value: String,
    },
    /// A create request carries an id of its own that the route's mint rule
    /// would not have minted (with `accept_client_id`).
    ClientIdRejected {
        /// Where the id was read.
        param: ParamName,
        /// Why it does not fit the rule.
        detail: String,
    },
    /// A batch mint request with a bad parameter.
    BadMintRequest {
        /// What is wrong, naming the parameter and value.
        detail: String,
    },
    /// The owning region has no usable endpoint.
    RegionUnavailable {
        /// The region's name.
        region: String,
    },
    /// Every endpoint of the region is at its connection cap with its wait
    /// queue full (`upstream.max_connections`, `upstream.max_pending`).
    UpstreamSaturated {
        /// The region's name.
        region: String,
    },
    /// The upstream did not answer in time.
    UpstreamTimeout {
        /// The region's name.
        region: String,
    },
    /// Every endpoint tried refused or failed the connection.
    UpstreamConnect {
        /// The region's name.
        region: String,
    },
    /// The upstream connection failed after the request was sent.
    UpstreamFailed {
        /// The region's name.
        region: String,
    },
    /// The whole-request deadline passed.
    RequestTimeout,
    /// The client's request body could not be passed on: malformed framing,
    /// or an upload cut short. The client's fault, never held against the upstream.
    ClientBody {
        /// What went wrong.
        detail: &'static str,
    },
    /// The request target is longer than the configured limit.
    UriTooLong {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// Too many request headers.
    HeadersTooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// An HTTP/1.1 request head larger than `server.max_header_bytes`.
    HeadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// An HTTP/1.1 request head that cannot be read: a malformed request
    /// line or field, ambiguous framing (RFC 9112 §6.3), obs-fold, bare CR.
    MalformedHead {
        /// Which rule the head broke.
        detail: String,
    },
    /// An HTTP/1.1 request without a `Host` header or with several (RFC 9112 §3.2).
    BadHost {
        /// How many `Host` fields the request has.
        count: usize,
    },
    /// A transfer coding other than `chunked` (RFC 9112 §6.1: 501).
    UnsupportedTransferCoding {
        /// The coding.
        coding: String,
    },
    /// A mesh loop: this instance already forwarded the request, or the hop limit is reached.
    Loop {
        /// Explanation.
        detail: String,
    },
    /// The listener is at its connection limit; the connection is refused
    /// before any request is read.
    TooManyConnections {
        /// `server.max_connections` or `server.admin_max_connections`.
        limit: usize,
        /// `proxy` or `admin`.
        listener: &'static str,
    },
    /// The admin listener has no endpoint at this path.
    NoEndpoint {
        /// The path asked for.
        path: String,
    },
    /// An admin endpoint asked for without the bearer token.
    Unauthorized,
    /// An admin endpoint asked for with a method it does not take.
    MethodNotAllowed {
        /// The endpoint's path.
        path: String,
        /// The method used.
        method: String,
        /// What it takes (`Allow`).
        allow: &'static str,
    },
    /// `/explain` without an id.
    ExplainWithoutId,
    /// `/explain` for a route the table does not have.
    UnknownRoute {
        /// The route name asked for.
        name: String,
    },
    /// `POST /reload` on an instance not started from a file.
    NoTableFile,
    /// `POST /reload` of a file with problems (the running table stays).
    InvalidTable {
        /// Every problem, in file order.
        errors: crate::config::ConfigErrors,
    },
    /// `POST /reload` of a file that changes what only a restart can.
    NeedsRestart {
        /// What.
        detail: String,
    },
    /// `POST /reload` failed to run.
    ReloadFailed {
        /// Why.
        detail: String,
    },
}

/// One row of the error table.
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
    pub outcome: &'static str,
}

/// Which row of [`TABLE`] an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    NoRoute,
    MissingId,
    AmbiguousId,
    BadId,
    NoOwner,
    CannotMint,
    MissingCountry,
    UnknownCountry,
    ClientIdRejected,
    BadMintRequest,
    RegionUnavailable,
    UpstreamSaturated,
    UpstreamTimeout,
    UpstreamConnect,
    UpstreamFailed,
    RequestTimeout,
    ClientBody,
    UriTooLong,
    HeadersTooLarge,
    HeadTooLarge,
    MalformedHead,
    BadHost,
    UnsupportedTransferCoding,
    Loop,
    TooManyConnections,
    NoEndpoint,
    Unauthorized,
    MethodNotAllowed,
    ExplainWithoutId,
    UnknownRoute,
    NoTableFile,
    InvalidTable,
    NeedsRestart,
    ReloadFailed,
}

const fn row(
    status: StatusCode,
    reason: &'static str,
    token: &'static str,
    title: &'static str,
    slug: &'static str,
    outcome: &'static str,
) -> Spec {
    Spec { status, reason, token, title, slug, outcome }
}

const REQ: &str = "http_request_error";
const DEST: &str = "destination_not_found";

/// The table, one row per [`Kind`], in its order: status, reason,
/// Proxy-Status token, title, type slug, metrics outcome. (A rejected id's
/// reason is its decoder's: `bad_length`, `bad_format`, ….)
const TABLE: [Spec; 34] = [
    row(StatusCode::NOT_FOUND, "no_route", DEST, "No route", "no-route", "no_route"),
    row(StatusCode::BAD_REQUEST, "missing_id", REQ, "Missing entity id", "invalid-entity-id", "bad_id"),
    row(StatusCode::BAD_REQUEST, "ambiguous_id", REQ, "Ambiguous entity id", "invalid-entity-id", "bad_id"),
    row(StatusCode::BAD_REQUEST, "bad_id", REQ, "Invalid entity id", "invalid-entity-id", "bad_id"),
    row(StatusCode::BAD_GATEWAY, "no_owner", DEST, "No route for entity", "no-route-for-entity", "no_owner"),
    row(StatusCode::BAD_GATEWAY, "cannot_mint", DEST, "Cannot mint", "cannot-mint", "no_owner"),
    row(StatusCode::BAD_REQUEST, "missing_country", REQ, "Invalid country", "invalid-country", "bad_request"),
    row(StatusCode::BAD_REQUEST, "unknown_country", REQ, "Invalid country", "invalid-country", "bad_request"),
    row(StatusCode::BAD_REQUEST, "client_id_mismatch", REQ, "Client id rejected", "invalid-entity-id", "bad_request"),
    row(
        StatusCode::BAD_REQUEST,
        "bad_mint_request",
        REQ,
        "Invalid mint request",
        "invalid-mint-request",
        "bad_request",
    ),
    row(
        StatusCode::SERVICE_UNAVAILABLE,
        "region_unavailable",
        "destination_unavailable",
        "Region unavailable",
        "region-unavailable",
        "unavailable",
    ),
    row(
        StatusCode::SERVICE_UNAVAILABLE,
        "upstream_saturated",
        "connection_limit_reached",
        "Upstream saturated",
        "upstream-saturated",
        "unavailable",
    ),
    row(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream_timeout",
        "http_response_timeout",
        "Upstream timeout",
        "timeout",
        "timeout",
    ),
    row(
        StatusCode::BAD_GATEWAY,
        "upstream_connect_failed",
        "connection_refused",
        "Upstream connection failed",
        "upstream-failed",
        "upstream_error",
    ),
    row(
        StatusCode::BAD_GATEWAY,
        "upstream_failed",
        "proxy_internal_response",
        "Upstream failed",
        "upstream-failed",
        "upstream_error",
    ),
    row(
        StatusCode::GATEWAY_TIMEOUT,
        "request_timeout",
        "http_response_timeout",
        "Request timeout",
        "timeout",
        "timeout",
    ),
    row(StatusCode::BAD_REQUEST, "bad_request_body", REQ, "Bad request body", "bad-request-body", "bad_request"),
    row(StatusCode::URI_TOO_LONG, "uri_too_long", REQ, "URI too long", "request-too-large", "too_large"),
    row(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        REQ,
        "Request headers too large",
        "request-too-large",
        "too_large",
    ),
    row(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "head_too_large",
        REQ,
        "Request head too large",
        "request-too-large",
        "too_large",
    ),
    row(StatusCode::BAD_REQUEST, "bad_request_head", REQ, "Malformed request", "bad-request", "bad_request"),
    row(StatusCode::BAD_REQUEST, "bad_host", REQ, "Bad Host header", "bad-request", "bad_request"),
    row(
        StatusCode::NOT_IMPLEMENTED,
        "unsupported_transfer_coding",
        REQ,
        "Unsupported transfer coding",
        "bad-request",
        "bad_request",
    ),
    row(StatusCode::LOOP_DETECTED, "loop_detected", "proxy_loop_detected", "Loop detected", "loop-detected", "loop"),
    row(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        "connection_limit_reached",
        "Too many connections",
        "too-many-connections",
        "refused",
    ),
    row(StatusCode::NOT_FOUND, "not_found", DEST, "Not Found", "admin-not-found", "no_route"),
    row(StatusCode::UNAUTHORIZED, "unauthorized", REQ, "Unauthorized", "admin-unauthorized", "bad_request"),
    row(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        REQ,
        "Method Not Allowed",
        "admin-method-not-allowed",
        "bad_request",
    ),
    row(StatusCode::BAD_REQUEST, "missing_id", REQ, "Bad Request", "admin-missing-id", "bad_id"),
    row(StatusCode::NOT_FOUND, "unknown_route", DEST, "Not Found", "admin-unknown-route", "no_route"),
    row(StatusCode::CONFLICT, "no_file", REQ, "Conflict", "admin-no-file", "bad_request"),
    row(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_config",
        REQ,
        "Unprocessable Entity",
        "admin-invalid-config",
        "bad_request",
    ),
    row(StatusCode::CONFLICT, "needs_restart", REQ, "Conflict", "admin-needs-restart", "bad_request"),
    row(
        StatusCode::INTERNAL_SERVER_ERROR,
        "reload_failed",
        "proxy_internal_error",
        "Internal Server Error",
        "admin-reload-failed",
        "proxy_error",
    ),
];

impl ProxyError {
    /// The error's row of the table.
    pub fn spec(&self) -> Spec {
        let mut spec = TABLE[self.kind() as usize];
        if let ProxyError::BadId { error, .. } = self {
            spec.reason = error.reason.code();
        }
        spec
    }

    fn kind(&self) -> Kind {
        use ProxyError as E;
        match self {
            E::NoRoute => Kind::NoRoute,
            E::MissingId { .. } => Kind::MissingId,
            E::AmbiguousId { .. } => Kind::AmbiguousId,
            E::BadId { .. } => Kind::BadId,
            E::NoOwner { .. } => Kind::NoOwner,
            E::CannotMint { .. } => Kind::CannotMint,
            E::MissingCountry { .. } => Kind::MissingCountry,
            E::UnknownCountry { .. } => Kind::UnknownCountry,
            E::ClientIdRejected { .. } => Kind::ClientIdRejected,
            E::BadMintRequest { .. } => Kind::BadMintRequest,
            E::RegionUnavailable { .. } => Kind::RegionUnavailable,
            E::UpstreamSaturated { .. } => Kind::UpstreamSaturated,
            E::UpstreamTimeout { .. } => Kind::UpstreamTimeout,
            E::UpstreamConnect { .. } => Kind::UpstreamConnect,
            E::UpstreamFailed { .. } => Kind::UpstreamFailed,
            E::RequestTimeout => Kind::RequestTimeout,
            E::ClientBody { .. } => Kind::ClientBody,
            E::UriTooLong { .. } => Kind::UriTooLong,
            E::HeadersTooLarge { .. } => Kind::HeadersTooLarge,
            E::HeadTooLarge { .. } => Kind::HeadTooLarge,
            E::MalformedHead { .. } => Kind::MalformedHead,
            E::BadHost { .. } => Kind::BadHost,
            E::UnsupportedTransferCoding { .. } => Kind::UnsupportedTransferCoding,
            E::Loop { .. } => Kind::Loop,
            E::TooManyConnections { .. } => Kind::TooManyConnections,
            E::NoEndpoint { .. } => Kind::NoEndpoint,
            E::Unauthorized => Kind::Unauthorized,
            E::MethodNotAllowed { .. } => Kind::MethodNotAllowed,
            E::ExplainWithoutId => Kind::ExplainWithoutId,
            E::UnknownRoute { .. } => Kind::UnknownRoute,
            E::NoTableFile => Kind::NoTableFile,
            E::InvalidTable { .. } => Kind::InvalidTable,
            E::NeedsRestart { .. } => Kind::NeedsRestart,
            E::ReloadFailed { .. } => Kind::ReloadFailed,
        }
    }

    /// The error for a failed upstream attempt at `region`.
    pub fn from_attempt(e: crate::upstream::attempt::AttemptError, region: &str) -> ProxyError {
        use crate::upstream::attempt::AttemptError as A;
        let region = region.to_string();
        match e {
            A::Connect => ProxyError::UpstreamConnect { region },
            A::Saturated => ProxyError::UpstreamSaturated { region },
            A::Failed => ProxyError::UpstreamFailed { region },
            A::Timeout => ProxyError::UpstreamTimeout { region },
            A::RequestTimeout => ProxyError::RequestTimeout,
            A::ClientBody(detail) => ProxyError::ClientBody { detail },
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.spec().status
    }

    /// The stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        self.spec().reason
    }

    /// The id format and reason of a rejected id (for the decode-failure metric).
    pub fn rejected_id(&self) -> Option<(Format, &'static str)> {
        match self {
            ProxyError::BadId { error, .. } => Some((error.format, error.reason.code())),
            _ => None,
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ProxyError::MissingId { param }
            | ProxyError::AmbiguousId { param }
            | ProxyError::BadId { param, .. }
            | ProxyError::MissingCountry { param }
            | ProxyError::UnknownCountry { param, .. }
            | ProxyError::ClientIdRejected { param, .. } => Some(param),
            _ => None,
        }
    }

    /// `Retry-After` for failures worth retrying later, in seconds.
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            ProxyError::RegionUnavailable { .. } => Some("5"),
            ProxyError::TooManyConnections { .. } | ProxyError::UpstreamSaturated { .. } => Some("1"),
            _ => None,
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ProxyError as E;
        match self {
            E::NoRoute => f.write_str("no route matches this method and path"),
            E::MissingId { param } => write!(f, "the entity id is missing: expected in {param}"),
            E::AmbiguousId { param } => {
                write!(f, "{param} appears more than once with different values; send the entity id once")
            }
            E::BadId { param, error, input } => write!(
                f,
                "{param} is not a valid entity id: {} is not a valid {} id: {}",
                quote(input),
                error.format,
                error.reason.explain()
            ),
            E::NoOwner { detail } => write!(f, "the routing table names no owner: {detail}"),
            E::CannotMint { detail } => write!(f, "the routing table cannot mint this id: {detail}"),
            E::MissingCountry { param } => write!(f, "the country is missing: expected in {param}"),
            E::UnknownCountry { param, value } => write!(f, "{param} names an unknown country: {}", quote(value)),
            E::ClientIdRejected { param, detail } => {
                write!(f, "{param} holds an id this route would not mint: {detail}")
            }
            E::BadMintRequest { detail } => write!(f, "invalid batch mint request: {detail}"),
            E::RegionUnavailable { region } => write!(f, "region {region} has no healthy endpoint"),
            E::UpstreamSaturated { region } => write!(
                f,
                "every endpoint of region {region} is at its connection limit with a full wait queue \
                 (upstream.max_connections, upstream.max_pending)"
            ),
            E::UpstreamTimeout { region } => write!(f, "region {region} did not answer in time"),
            E::UpstreamConnect { region } => write!(f, "could not connect to any endpoint of region {region}"),
            E::UpstreamFailed { region } => write!(f, "the connection to region {region} failed"),
            E::RequestTimeout => f.write_str("the request did not complete within the request timeout"),
            E::ClientBody { detail } => f.write_str(detail),
            E::UriTooLong { limit } => write!(f, "the request target exceeds {limit} bytes"),
            E::HeadersTooLarge { limit } => write!(f, "the request has more than {limit} headers"),
            E::HeadTooLarge { limit } => write!(f, "the request head exceeds {limit} bytes"),
            E::MalformedHead { detail } => f.write_str(detail),
            E::BadHost { count: 0 } => f.write_str("the request has no Host header; one is required"),
            E::BadHost { count } => write!(f, "the request has {count} Host headers; exactly one is allowed"),
            E::UnsupportedTransferCoding { coding } => {
                write!(f, "transfer coding {} is not supported; only chunked is", quote(coding))
            }
            E::Loop { detail } => write!(f, "mesh loop: {detail}"),
            E::TooManyConnections { limit, listener: "admin" } => {
                write!(f, "the admin listener already has {limit} open connections (server.admin_max_connections)")
            }
            E::TooManyConnections { limit, .. } => {
                write!(f, "this proxy already has {limit} open connections (server.max_connections)")
            }
            E::NoEndpoint { path } => write!(f, "no admin endpoint at {}", quote(path)),
            E::Unauthorized => f.write_str("this endpoint needs the admin bearer token"),
            E::MethodNotAllowed { path, method, allow } => {
                write!(f, "{} takes {allow}, not {}", escape_for_display(path, 64), quote(method))
            }
            E::ExplainWithoutId => f.write_str("give the id to explain as ?id=…"),
            E::UnknownRoute { name } => write!(f, "no route named {}", quote(name)),
            E::NoTableFile => f.write_str("this instance was not started from a table file"),
            E::InvalidTable { errors } => {
                write!(f, "{} problem(s) in {}; the running table is kept", errors.len(), errors.source_name)
            }
            E::NeedsRestart { detail } => f.write_str(detail),
            E::ReloadFailed { detail } => write!(f, "the reload task failed: {detail}"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// Untrusted input in a message: quoted, escaped, at most 64 characters.
pub fn quote(input: &str) -> String {
    format!("'{}'", escape_for_display(input, 64))
}

/// The response body type of everything shardgate answers itself.
pub type ErrorBody = Full<Bytes>;

/// The problem+json response for `err`, with `Proxy-Status` naming
/// `proxy_name`, `instance` the request path (escaped and truncated here)
/// and `request_id` the request's id (the caller sets the header).
pub fn problem_response(err: &ProxyError, instance: &str, request_id: &str, proxy_name: &str) -> Response<ErrorBody> {
    let spec = err.spec();
    let mut body = serde_json::json!({
        "type": format!("https://shardgate.dev/problems/{}", spec.slug),
        "title": spec.title,
        "status": spec.status.as_u16(),
        "detail": err.to_string(),
        "instance": escape_for_display(instance, 256),
        "request_id": request_id,
        "reason": spec.reason,
    });
    if let Some(map) = body.as_object_mut() {
        if let Some(param) = err.param() {
            map.insert("param".into(), param.into());
        }
        if let ProxyError::InvalidTable { errors } = err {
            let list = errors
                .errors
                .iter()
                .map(|e| serde_json::json!({ "path": e.path, "line": e.line, "col": e.col, "message": e.message, "hint": e.hint }))
                .collect();
            map.insert("result".into(), "failure".into());
            map.insert("errors".into(), serde_json::Value::Array(list));
        }
    }
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
    if let Some(after) = err.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static(after));
    }
    match err {
        ProxyError::Unauthorized => {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"shardgate\""));
        }
        ProxyError::MethodNotAllowed { allow, .. } => {
            h.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        _ => {}
    }
    resp
}

/// `err` as a complete HTTP/1.1 response with `Connection: close`, for
/// answers written straight to a socket before hyper serves it (the
/// connection-limit refusal).
pub fn problem_http1_bytes(err: &ProxyError, proxy_name: &str) -> Vec<u8> {
    http1_bytes(problem_response(err, "", "-", proxy_name))
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
mod tests;
