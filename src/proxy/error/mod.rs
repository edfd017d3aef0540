//! The failures the proxy answers itself: for each, its row of the table
//! ([`ProxyError::spec`]: HTTP status, stable `reason`, RFC 9209
//! `Proxy-Status` token, RFC 9457 title and type, metrics `outcome`), its
//! message, and what its problem+json answer carries besides
//! ([`crate::problem`] builds it).

use std::fmt;

use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde_json::{Map, Value};

use crate::ids::{Format, IdError};
use crate::problem::Problem;
pub use crate::problem::{quote, Spec};

mod table;

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
        /// Why each of the route's formats rejected it, in the route's order.
        errors: Vec<IdError>,
        /// The offending input (escaped and truncated when shown).
        input: String,
    },
    /// A gRPC call's first message cannot give its id: compressed, larger
    /// than `server.request_buffer_bytes`, or not a valid message.
    BadMessage {
        /// Why.
        detail: String,
    },
    /// A gRPC call's first message is larger than the route may hold to read its id.
    MessageTooLarge {
        /// `server.request_buffer_bytes`.
        limit: usize,
    },
    /// A request that is not a gRPC call on a `protocol: grpc` route.
    NotGrpc,
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
    /// The unit of the request is being re-homed and this instance holds as
    /// many requests as it may (of the move's, or of all moves).
    HoldFull {
        /// The placement unit.
        unit: String,
        /// The limit reached: `moves[i].hold.max_requests`, or half of
        /// `server.max_connections` for all moves.
        max: usize,
    },
    /// A write of a unit whose move this instance gave up (its hold ran past
    /// `max_time` with no switch or abort): the source's backends, reached
    /// from here, could take it after the unit switched elsewhere.
    HoldExpired {
        /// The placement unit.
        unit: String,
    },
    /// A peer forwarded a request for a unit this instance's table re-homed
    /// with a newer epoch: it goes to `owner` now.
    StaleEpoch {
        /// The placement unit.
        unit: String,
        /// Its owner in this table.
        owner: String,
        /// Its epoch in this table.
        epoch: u64,
    },
    /// A peer's leg of a search or fan-out that writes an entity this
    /// instance's table places in another region (the two tables disagree
    /// about the route): it goes to `owner`.
    NotOwner {
        /// Its owner in this table.
        owner: String,
    },
    /// The owning region has no usable endpoint.
    RegionUnavailable {
        /// The region's name.
        region: String,
    },
    /// Every endpoint of the region is at one of its limits: its connection
    /// cap with a full wait queue or a wait too long, its share for uploads,
    /// its tunnels. Never a failure of the endpoint's.
    UpstreamSaturated {
        /// The region's name.
        region: String,
        /// Which limit.
        full: crate::upstream::Full,
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
    /// The upstream switched protocols (`101`) when the client asked for no
    /// upgrade, or to a protocol the client did not ask for.
    BadUpgrade,
    /// The whole-request deadline passed.
    RequestTimeout,
    /// The client's request body could not be passed on: malformed framing,
    /// or an upload cut short. The client's fault, never held against the upstream.
    ClientBody {
        /// What went wrong.
        detail: &'static str,
    },
    /// The client sent its request body slower than `server.body_min_rate`
    /// allows: its fault, never held against the upstream.
    BodyTimeout,
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
    /// A route's path asked for with a method none of its routes takes.
    MethodNotAllowed {
        /// The method used.
        method: String,
        /// What the path takes (`Allow`).
        allow: String,
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
    /// The route's `rewrite` made no valid request target of this request.
    Rewrite {
        /// What it made, and why that is not a target.
        detail: String,
    },
}

/// One region of a fan-out or search that gave no usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegFailure {
    /// The region.
    pub region: String,
    /// A stable token: `leg_timeout`, `deadline`, `status`, `too_large`,
    /// `proxy_full`, `invalid_json`, `no_array`, `bad_item`, or the error
    /// table's reason.
    pub reason: &'static str,
    /// What happened, for people.
    pub detail: String,
}

impl LegFailure {
    /// The reason of a region whose answer found no room left among what
    /// the fan-outs in flight hold (`server.fanout_buffer_bytes`).
    pub const PROXY_FULL: &'static str = "proxy_full";

    /// Whether every one of `failed` found no room for its answer (and
    /// there is one): the proxy is saturated, not the regions.
    pub fn all_proxy_full(failed: &[LegFailure]) -> bool {
        !failed.is_empty() && failed.iter().all(|f| f.reason == Self::PROXY_FULL)
    }

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
    /// The error for a failed upstream attempt at `region`.
    pub fn from_attempt(e: crate::upstream::attempt::AttemptError, region: &str) -> ProxyError {
        use crate::upstream::attempt::AttemptError as A;
        let region = region.to_string();
        match e {
            A::Connect => ProxyError::UpstreamConnect { region },
            A::Saturated(full) => ProxyError::UpstreamSaturated { region, full },
            A::Failed => ProxyError::UpstreamFailed { region },
            A::Timeout => ProxyError::UpstreamTimeout { region },
            A::RequestTimeout => ProxyError::RequestTimeout,
            A::ClientBody(detail) => ProxyError::ClientBody { detail },
            A::BodyTimeout => ProxyError::BodyTimeout,
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
            ProxyError::BadId { errors, .. } => errors.first().map(|e| (e.format, e.reason.code())),
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
            ProxyError::RegionUnavailable { .. } | ProxyError::HoldExpired { .. } => Some("5"),
            ProxyError::UpstreamSaturated { .. } | ProxyError::HoldFull { .. } => Some("1"),
            ProxyError::LegsFailed { failed, .. } if LegFailure::all_proxy_full(failed) => Some("1"),
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
            E::BadMessage { detail } => write!(f, "the call's first message gives no id: {detail}"),
            E::NotGrpc => f.write_str("this route carries gRPC calls only (HTTP/2, content-type application/grpc)"),
            E::MessageTooLarge { limit } => {
                write!(f, "the call's first message is larger than the {limit} bytes read for its id")
            }
            E::AmbiguousId { param } => {
                write!(f, "{param} appears more than once with different values; send the entity id once")
            }
            E::BadId { param, errors, input } => {
                write!(f, "{param} is not a valid entity id: {}", quote(input))?;
                for (i, e) in errors.iter().enumerate() {
                    let sep = if i == 0 { " is" } else { ";" };
                    write!(f, "{sep} not a valid {} id: {}", e.format, e.reason.explain())?;
                }
                Ok(())
            }
            E::NoOwner { detail } => write!(f, "the routing table names no owner: {detail}"),
            E::CannotMint { detail } => write!(f, "the routing table cannot mint this id: {detail}"),
            E::MissingCountry { param } => write!(f, "the country is missing: expected in {param}"),
            E::UnknownCountry { param, value } => write!(f, "{param} names an unknown country: {}", quote(value)),
            E::ClientIdRejected { param, detail } => {
                write!(f, "{param} holds an id this route would not mint: {detail}")
            }
            E::BadMintRequest { detail } => write!(f, "invalid batch mint request: {detail}"),
            E::StaleEpoch { unit, owner, epoch } => {
                write!(f, "{unit} moved to region {owner} (epoch {epoch}); the forwarding instance's table is older")
            }
            E::NotOwner { owner } => write!(f, "this instance's table places the entity in region {owner}"),
            E::HoldFull { unit, max } => {
                write!(
                    f,
                    "{unit} is moving to another region and this instance holds {max} requests already; retry shortly"
                )
            }
            E::HoldExpired { unit } => write!(
                f,
                "{unit} is moving to another region and its hold ran out on this instance before the move's next \
                 table came; its writes wait for that table"
            ),
            E::RegionUnavailable { region } => write!(f, "region {region} has no healthy endpoint"),
            E::UpstreamSaturated { region, full } => {
                write!(f, "no endpoint of region {region} can take the request now: {}", full.explain())
            }
            E::UpstreamTimeout { region } => write!(f, "region {region} did not answer in time"),
            E::UpstreamConnect { region } => write!(f, "could not connect to any endpoint of region {region}"),
            E::UpstreamFailed { region } => write!(f, "the connection to region {region} failed"),
            E::BadUpgrade => f.write_str("the upstream switched protocols when the request asked for no such upgrade"),
            E::RequestTimeout => f.write_str("the request did not complete within the request timeout"),
            E::BodyTimeout => f.write_str(
                "the request body arrived slower than this proxy accepts (server.body_timeout, server.body_min_rate)",
            ),
            E::ClientBody { detail } => f.write_str(detail),
            E::UriTooLong { limit } => write!(f, "the request target exceeds {limit} bytes"),
            E::HeadersTooLarge { limit } => write!(f, "the request has more than {limit} headers"),
            E::BadHost { count: 0 } => f.write_str("the request has no Host header; one is required"),
            E::BadHost { count } => write!(f, "the request has {count} Host headers; exactly one is allowed"),
            E::UnsupportedTransferCoding { coding } => {
                write!(f, "transfer coding {} is not supported; only chunked is", quote(coding))
            }
            E::Loop { detail } => write!(f, "mesh loop: {detail}"),
            E::MethodNotAllowed { method, allow } => write!(f, "this path takes {allow}, not {}", quote(method)),
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
            E::Rewrite { detail } => write!(f, "the route's rewrite made no valid request target: {detail}"),
        }
    }
}

impl std::error::Error for ProxyError {}

impl Problem for ProxyError {
    fn spec(&self) -> Spec {
        ProxyError::spec(self)
    }

    fn members(&self, body: &mut Map<String, Value>) {
        if let Some(param) = self.param() {
            body.insert("param".into(), param.into());
        }
        match self {
            ProxyError::BadId { errors, .. } => {
                let each = errors
                    .iter()
                    .map(|e| {
                        serde_json::json!({ "format": e.format.name(), "reason": e.reason.code(), "detail": e.reason.explain() })
                    })
                    .collect();
                body.insert("formats".into(), Value::Array(each));
            }
            ProxyError::LegsFailed { failed, .. } => {
                body.insert("failed".into(), failed.iter().map(LegFailure::to_json).collect());
            }
            ProxyError::NotFoundAnywhere { asked } => {
                body.insert("asked".into(), asked.clone().into());
            }
            ProxyError::NotOwner { owner } => {
                body.insert("owner".into(), owner.clone().into());
            }
            ProxyError::StaleEpoch { unit, owner, epoch } => {
                body.insert("unit".into(), unit.clone().into());
                body.insert("owner".into(), owner.clone().into());
                body.insert("epoch".into(), (*epoch).into());
            }
            _ => {}
        }
    }

    fn fields(&self, h: &mut HeaderMap) {
        if let Some(after) = self.retry_after() {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static(after));
        }
        if let ProxyError::StaleEpoch { owner, epoch, .. } = self {
            if let Ok(v) = HeaderValue::from_str(owner) {
                h.insert(crate::mesh::OWNER, v);
            }
            h.insert(crate::mesh::EPOCH, HeaderValue::from(*epoch));
        }
        if let ProxyError::NotOwner { owner } = self {
            if let Ok(v) = HeaderValue::from_str(owner) {
                h.insert(crate::mesh::OWNER, v);
            }
        }
        if let ProxyError::MethodNotAllowed { allow, .. } = self {
            if let Ok(v) = HeaderValue::from_str(allow) {
                h.insert(header::ALLOW, v);
            }
        }
    }
}

#[cfg(test)]
mod tests;
