//! The one place where the proxy's own failures become HTTP responses:
//! RFC 9457 `application/problem+json` bodies with a stable `reason`, plus an
//! RFC 9209 `Proxy-Status` header so clients can tell a proxy error from a
//! backend's.

use std::fmt;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use crate::ids::{escape_for_display, IdError};

/// Where a route looks for its id, as shown in error messages.
pub type ParamName = String;

/// A failure the proxy answers itself.
#[derive(Debug)]
pub enum ProxyError {
    /// No route matches the method and path.
    NoRoute,
    /// The route's id is not in the request.
    MissingId {
        /// e.g. `path parameter 'id'`, `header 'x-entity-id'`.
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
    /// The owning region has no usable endpoint.
    RegionUnavailable {
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
    /// Every endpoint of the region is at its connection cap with its wait
    /// queue full (`upstream.max_connections`, `upstream.max_pending`).
    UpstreamSaturated {
        /// The region's name.
        region: String,
    },
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
    /// The id appears more than once in the request with different values.
    AmbiguousId {
        /// Where the id was read.
        param: ParamName,
    },
    /// Too many request headers.
    HeadersTooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// A create request names a country the table does not know, or none.
    BadCountry {
        /// Where the country was read.
        param: ParamName,
        /// What was there (absent: `None`).
        value: Option<String>,
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
    /// A mesh loop: this instance already forwarded the request, or the hop limit is reached.
    Loop {
        /// Explanation.
        detail: String,
    },
    /// The listener is at `server.max_connections`; the connection is refused
    /// before any request is read.
    TooManyConnections {
        /// The configured limit.
        limit: usize,
    },
}

impl ProxyError {
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

    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::MissingId { .. }
            | ProxyError::BadId { .. }
            | ProxyError::BadCountry { .. }
            | ProxyError::ClientIdRejected { .. } => StatusCode::BAD_REQUEST,
            ProxyError::NoOwner { .. } | ProxyError::UpstreamConnect { .. } | ProxyError::UpstreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::RegionUnavailable { .. } | ProxyError::TooManyConnections { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::UpstreamTimeout { .. } | ProxyError::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::UpstreamSaturated { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ClientBody { .. } => StatusCode::BAD_REQUEST,
            ProxyError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ProxyError::BadHost { .. } | ProxyError::AmbiguousId { .. } => StatusCode::BAD_REQUEST,
            ProxyError::UnsupportedTransferCoding { .. } => StatusCode::NOT_IMPLEMENTED,
            ProxyError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::Loop { .. } => StatusCode::LOOP_DETECTED,
            ProxyError::BadMintRequest { .. } => StatusCode::BAD_REQUEST,
        }
    }

    /// The stable machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::NoRoute => "no_route",
            ProxyError::MissingId { .. } => "missing_id",
            ProxyError::BadId { error, .. } => error.reason.code(),
            ProxyError::NoOwner { .. } => "no_owner",
            ProxyError::RegionUnavailable { .. } => "region_unavailable",
            ProxyError::UpstreamTimeout { .. } => "upstream_timeout",
            ProxyError::UpstreamConnect { .. } => "upstream_connect_failed",
            ProxyError::UpstreamFailed { .. } => "upstream_failed",
            ProxyError::RequestTimeout => "request_timeout",
            ProxyError::UpstreamSaturated { .. } => "upstream_saturated",
            ProxyError::ClientBody { .. } => "bad_request_body",
            ProxyError::UriTooLong { .. } => "uri_too_long",
            ProxyError::BadHost { .. } => "bad_host",
            ProxyError::UnsupportedTransferCoding { .. } => "unsupported_transfer_coding",
            ProxyError::AmbiguousId { .. } => "ambiguous_id",
            ProxyError::HeadersTooLarge { .. } => "headers_too_large",
            ProxyError::BadCountry { value: None, .. } => "missing_country",
            ProxyError::BadCountry { .. } => "unknown_country",
            ProxyError::Loop { .. } => "loop_detected",
            ProxyError::ClientIdRejected { .. } => "client_id_mismatch",
            ProxyError::BadMintRequest { .. } => "bad_mint_request",
            ProxyError::TooManyConnections { .. } => "too_many_connections",
        }
    }

    /// The RFC 9209 error token for `Proxy-Status`.
    pub fn proxy_status_token(&self) -> &'static str {
        match self {
            ProxyError::NoRoute | ProxyError::NoOwner { .. } => "destination_not_found",
            ProxyError::MissingId { .. }
            | ProxyError::BadId { .. }
            | ProxyError::BadCountry { .. }
            | ProxyError::ClientIdRejected { .. }
            | ProxyError::UriTooLong { .. }
            | ProxyError::BadHost { .. }
            | ProxyError::UnsupportedTransferCoding { .. }
            | ProxyError::AmbiguousId { .. }
            | ProxyError::HeadersTooLarge { .. } => "http_request_error",
            ProxyError::RegionUnavailable { .. } => "destination_unavailable",
            ProxyError::UpstreamTimeout { .. } | ProxyError::RequestTimeout => "http_response_timeout",
            ProxyError::UpstreamSaturated { .. } => "connection_limit_reached",
            ProxyError::ClientBody { .. } => "http_request_error",
            ProxyError::UpstreamConnect { .. } => "connection_refused",
            ProxyError::UpstreamFailed { .. } => "proxy_internal_response",
            ProxyError::Loop { .. } => "proxy_loop_detected",
            ProxyError::BadMintRequest { .. } => "http_request_error",
            ProxyError::TooManyConnections { .. } => "connection_limit_reached",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ProxyError::NoRoute => "No route",
            ProxyError::MissingId { .. } => "Missing entity id",
            ProxyError::BadId { .. } => "Invalid entity id",
            ProxyError::NoOwner { .. } => "No route for entity",
            ProxyError::RegionUnavailable { .. } => "Region unavailable",
            ProxyError::UpstreamTimeout { .. } => "Upstream timeout",
            ProxyError::UpstreamConnect { .. } => "Upstream connection failed",
            ProxyError::UpstreamFailed { .. } => "Upstream failed",
            ProxyError::RequestTimeout => "Request timeout",
            ProxyError::UpstreamSaturated { .. } => "Upstream saturated",
            ProxyError::ClientBody { .. } => "Bad request body",
            ProxyError::UriTooLong { .. } => "URI too long",
            ProxyError::BadHost { .. } => "Bad Host header",
            ProxyError::UnsupportedTransferCoding { .. } => "Unsupported transfer coding",
            ProxyError::AmbiguousId { .. } => "Ambiguous entity id",
            ProxyError::HeadersTooLarge { .. } => "Request headers too large",
            ProxyError::BadCountry { .. } => "Invalid country",
            ProxyError::ClientIdRejected { .. } => "Client id rejected",
            ProxyError::Loop { .. } => "Loop detected",
            ProxyError::BadMintRequest { .. } => "Invalid mint request",
            ProxyError::TooManyConnections { .. } => "Too many connections",
        }
    }

    fn type_slug(&self) -> &'static str {
        match self {
            ProxyError::BadId { .. } | ProxyError::MissingId { .. } => "invalid-entity-id",
            ProxyError::NoOwner { .. } => "no-route-for-entity",
            ProxyError::NoRoute => "no-route",
            ProxyError::RegionUnavailable { .. } => "region-unavailable",
            ProxyError::UpstreamTimeout { .. } | ProxyError::RequestTimeout => "timeout",
            ProxyError::UpstreamSaturated { .. } => "upstream-saturated",
            ProxyError::ClientBody { .. } => "bad-request-body",
            ProxyError::UpstreamConnect { .. } | ProxyError::UpstreamFailed { .. } => "upstream-failed",
            ProxyError::UriTooLong { .. } | ProxyError::HeadersTooLarge { .. } => "request-too-large",
            ProxyError::BadHost { .. } | ProxyError::UnsupportedTransferCoding { .. } => "bad-request",
            ProxyError::AmbiguousId { .. } => "invalid-entity-id",
            ProxyError::BadCountry { .. } => "invalid-country",
            ProxyError::ClientIdRejected { .. } => "invalid-entity-id",
            ProxyError::Loop { .. } => "loop-detected",
            ProxyError::BadMintRequest { .. } => "invalid-mint-request",
            ProxyError::TooManyConnections { .. } => "too-many-connections",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ProxyError::MissingId { param }
            | ProxyError::BadId { param, .. }
            | ProxyError::BadCountry { param, .. }
            | ProxyError::ClientIdRejected { param, .. }
            | ProxyError::AmbiguousId { param } => Some(param),
            _ => None,
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::NoRoute => f.write_str("no route matches this method and path"),
            ProxyError::MissingId { param } => write!(f, "the entity id is missing: expected in {param}"),
            ProxyError::BadId { param, error, input } => write!(
                f,
                "{param} is not a valid entity id: {} is not a valid {} id: {}",
                quote(input),
                error.format,
                error.reason.explain()
            ),
            ProxyError::NoOwner { detail } => write!(f, "the routing table names no owner: {detail}"),
            ProxyError::RegionUnavailable { region } => write!(f, "region {region} has no healthy endpoint"),
            ProxyError::UpstreamTimeout { region } => write!(f, "region {region} did not answer in time"),
            ProxyError::UpstreamConnect { region } => write!(f, "could not connect to any endpoint of region {region}"),
            ProxyError::UpstreamFailed { region } => write!(f, "the connection to region {region} failed"),
            ProxyError::RequestTimeout => f.write_str("the request did not complete within the request timeout"),
            ProxyError::UpstreamSaturated { region } => write!(
                f,
                "every endpoint of region {region} is at its connection limit with a full wait queue (upstream.max_connections, upstream.max_pending)"
            ),
            ProxyError::ClientBody { detail } => f.write_str(detail),
            ProxyError::UriTooLong { limit } => write!(f, "the request target exceeds {limit} bytes"),
            ProxyError::BadHost { count: 0 } => f.write_str("the request has no Host header; one is required"),
            ProxyError::BadHost { count } => write!(f, "the request has {count} Host headers; exactly one is allowed"),
            ProxyError::UnsupportedTransferCoding { coding } => write!(
                f,
                "transfer coding {} is not supported; only chunked is",
                quote(coding)
            ),
            ProxyError::AmbiguousId { param } => {
                write!(f, "{param} appears more than once with different values; send the entity id once")
            }
            ProxyError::HeadersTooLarge { limit } => write!(f, "the request has more than {limit} headers"),
            ProxyError::BadCountry { param, value: None } => write!(f, "the country is missing: expected in {param}"),
            ProxyError::BadCountry { param, value: Some(v) } => {
                write!(f, "{param} names an unknown country: {}", quote(v))
            }
            ProxyError::ClientIdRejected { param, detail } => {
                write!(f, "{param} holds an id this route would not mint: {detail}")
            }
            ProxyError::Loop { detail } => write!(f, "mesh loop: {detail}"),
            ProxyError::BadMintRequest { detail } => write!(f, "invalid batch mint request: {detail}"),
            ProxyError::TooManyConnections { limit } => {
                write!(f, "this proxy already has {limit} open connections (server.max_connections)")
            }
        }
    }
}

impl std::error::Error for ProxyError {}

fn quote(input: &str) -> String {
    format!("'{}'", escape_for_display(input, 64))
}

/// The response body type of everything the proxy answers itself.
pub type ErrorBody = Full<Bytes>;

/// Builds the problem+json response for `err`.
///
/// `instance` is the request path (escaped and truncated here), `proxy_name`
/// the RFC 9209 name of this proxy, `request_id` the request's id.
pub fn problem_response(err: &ProxyError, instance: &str, request_id: &str, proxy_name: &str) -> Response<ErrorBody> {
    let status = err.status();
    let mut body = serde_json::json!({
        "type": format!("https://shardgate.dev/problems/{}", err.type_slug()),
        "title": err.title(),
        "status": status.as_u16(),
        "detail": err.to_string(),
        "instance": escape_for_display(instance, 256),
        "request_id": request_id,
        "reason": err.reason(),
    });
    if let (Some(param), Some(map)) = (err.param(), body.as_object_mut()) {
        map.insert("param".into(), param.into());
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let details = format!("\"{}\"", err.reason());
    let ps = format!("{proxy_name}; error={}; details={details}", err.proxy_status_token());
    if let Ok(v) = HeaderValue::from_str(&ps) {
        h.insert("proxy-status", v);
    }
    match err {
        ProxyError::RegionUnavailable { .. } => {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        ProxyError::TooManyConnections { .. } | ProxyError::UpstreamSaturated { .. } => {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert("x-request-id", v);
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
