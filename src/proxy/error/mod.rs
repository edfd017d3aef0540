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

mod table;

pub use table::Spec;
use table::{Kind, TABLE};

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
    /// A fan-out request with a `limit`, cursor or country list that cannot be used.
    BadPage {
        /// What is wrong, naming the parameter.
        detail: String,
    },
    /// A fan-out or search whose regions failed: every one, or, where the
    /// route requires all, any one. 504 when every failure was a timeout.
    LegsFailed {
        /// `fan-out` or `search`.
        what: &'static str,
        /// Regions asked.
        asked: usize,
        /// The regions that failed, and why.
        failed: Vec<LegFailure>,
    },
    /// A search found the id in no region (each answered 404).
    NotFoundAnywhere {
        /// The regions asked.
        asked: Vec<String>,
    },
}

/// One region of a fan-out or search that gave no usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegFailure {
    /// The region.
    pub region: String,
    /// A stable token: `leg_timeout`, `deadline`, `status`, `too_large`,
    /// `invalid_json`, `no_array`, `bad_item`, or the error table's reason.
    pub reason: &'static str,
    /// What happened, for people.
    pub detail: String,
}

impl LegFailure {
    /// Whether the region ran out of time (its own or the whole request's).
    pub fn is_timeout(&self) -> bool {
        matches!(self.reason, "leg_timeout" | "deadline" | "upstream_timeout" | "request_timeout")
    }

    /// As JSON, for the failure lists of answers and problems.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "region": self.region, "reason": self.reason, "detail": self.detail })
    }
}

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
            E::BadPage { .. } => Kind::BadPage,
            E::LegsFailed { failed, .. } if !failed.is_empty() && failed.iter().all(LegFailure::is_timeout) => {
                Kind::LegsTimeout
            }
            E::LegsFailed { .. } => Kind::LegsFailed,
            E::NotFoundAnywhere { .. } => Kind::NotFoundAnywhere,
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
            E::BadPage { detail } => write!(f, "invalid page request: {detail}"),
            E::LegsFailed { what, asked, failed } => {
                write!(f, "{what}: {} of {asked} regions failed", failed.len())?;
                for (i, leg) in failed.iter().enumerate() {
                    let sep = if i == 0 { ": " } else { "; " };
                    write!(f, "{sep}{} ({})", leg.region, leg.detail)?;
                }
                Ok(())
            }
            E::NotFoundAnywhere { asked } => write!(f, "no region has this entity (asked {})", asked.join(", ")),
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
/// and `request_id` the request's id (the `X-Request-Id` field is the
/// server's to write, as on every answer).
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
        if let ProxyError::LegsFailed { failed, .. } = err {
            map.insert("failed".into(), failed.iter().map(LegFailure::to_json).collect());
        }
        if let ProxyError::NotFoundAnywhere { asked } = err {
            map.insert("asked".into(), asked.clone().into());
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
