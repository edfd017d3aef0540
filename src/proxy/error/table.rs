//! The proxy's error table: each failure's row ([`Spec`]: status, reason,
//! `Proxy-Status` token, title, type slug, metrics outcome), named once
//! and picked by one exhaustive match the compiler checks
//! ([`ProxyError::spec`]).

use http::StatusCode as S;

use super::{LegFailure, ProxyError};
use crate::grpc::status::Code;
use crate::problem::{row, Outcome, Spec, DEST, HEADERS_TOO_LARGE, METHOD_NOT_ALLOWED, REQ};

const UNAVAILABLE: &str = "destination_unavailable";
const LATE: &str = "http_response_timeout";
const BAD_ID: &str = "invalid-entity-id";
const BAD_COUNTRY: &str = "invalid-country";
const TOO_LARGE: &str = "request-too-large";
const UPSTREAM: &str = "upstream-failed";

const NO_ROUTE: Spec = row(S::NOT_FOUND, "no_route", DEST, "No route", "no-route", Outcome::NoRoute);
const MISSING_ID: Spec = row(S::BAD_REQUEST, "missing_id", REQ, "Missing entity id", BAD_ID, Outcome::BadId);
const BAD_MESSAGE: Spec = row(S::BAD_REQUEST, "bad_message", REQ, "Unreadable message", BAD_ID, Outcome::BadId);
const MESSAGE_TOO_LARGE: Spec =
    row(S::PAYLOAD_TOO_LARGE, "message_too_large", REQ, "Message too large", TOO_LARGE, Outcome::TooLarge);
const NOT_GRPC: Spec =
    row(S::UNSUPPORTED_MEDIA_TYPE, "not_grpc", REQ, "Not a gRPC call", "not-grpc", Outcome::BadRequest);
const AMBIGUOUS_ID: Spec = row(S::BAD_REQUEST, "ambiguous_id", REQ, "Ambiguous entity id", BAD_ID, Outcome::BadId);
const NO_OWNER: Spec =
    row(S::BAD_GATEWAY, "no_owner", DEST, "No route for entity", "no-route-for-entity", Outcome::NoOwner);
const CANNOT_MINT: Spec = row(S::BAD_GATEWAY, "cannot_mint", DEST, "Cannot mint", "cannot-mint", Outcome::NoOwner);
const MISSING_COUNTRY: Spec =
    row(S::BAD_REQUEST, "missing_country", REQ, "Invalid country", BAD_COUNTRY, Outcome::BadRequest);
const UNKNOWN_COUNTRY: Spec =
    row(S::BAD_REQUEST, "unknown_country", REQ, "Invalid country", BAD_COUNTRY, Outcome::BadRequest);
const CLIENT_ID: Spec =
    row(S::BAD_REQUEST, "client_id_mismatch", REQ, "Client id rejected", BAD_ID, Outcome::BadRequest);
const BAD_MINT: Spec =
    row(S::BAD_REQUEST, "bad_mint_request", REQ, "Invalid mint request", "invalid-mint-request", Outcome::BadRequest);
const REGION_DOWN: Spec = row(
    S::SERVICE_UNAVAILABLE,
    "region_unavailable",
    UNAVAILABLE,
    "Region unavailable",
    "region-unavailable",
    Outcome::Unavailable,
);
const SATURATED: Spec = row(
    S::SERVICE_UNAVAILABLE,
    "upstream_saturated",
    "connection_limit_reached",
    "Upstream saturated",
    "upstream-saturated",
    Outcome::Unavailable,
)
.with_grpc(Code::ResourceExhausted);
const HOLD_FULL: Spec = row(
    S::SERVICE_UNAVAILABLE,
    "hold_full",
    "connection_limit_reached",
    "Placement unit moving",
    "hold-full",
    Outcome::Unavailable,
)
.with_grpc(Code::Unavailable);
const HOLD_EXPIRED: Spec = row(
    S::SERVICE_UNAVAILABLE,
    "hold_expired",
    UNAVAILABLE,
    "Placement unit moving",
    "hold-expired",
    Outcome::Unavailable,
);
const STALE_EPOCH: Spec = row(
    S::MISDIRECTED_REQUEST,
    "stale_epoch",
    "destination_not_found",
    "Placement unit moved",
    "stale-epoch",
    Outcome::Misdirected,
);
const NOT_OWNER: Spec = row(
    S::MISDIRECTED_REQUEST,
    "not_owner",
    "destination_not_found",
    "Entity owned by another region",
    "not-owner",
    Outcome::Misdirected,
);
const UPSTREAM_TIMEOUT: Spec =
    row(S::GATEWAY_TIMEOUT, "upstream_timeout", LATE, "Upstream timeout", "timeout", Outcome::Timeout);
const CONNECT: Spec = row(
    S::BAD_GATEWAY,
    "upstream_connect_failed",
    "connection_refused",
    "Upstream connection failed",
    UPSTREAM,
    Outcome::UpstreamError,
);
const FAILED: Spec = row(
    S::BAD_GATEWAY,
    "upstream_failed",
    "proxy_internal_response",
    "Upstream failed",
    UPSTREAM,
    Outcome::UpstreamError,
);
const BAD_UPGRADE: Spec = row(
    S::BAD_GATEWAY,
    "upstream_bad_upgrade",
    "http_protocol_error",
    "Upgrade not asked for",
    UPSTREAM,
    Outcome::UpstreamError,
);
const REQUEST_TIMEOUT: Spec =
    row(S::GATEWAY_TIMEOUT, "request_timeout", LATE, "Request timeout", "timeout", Outcome::Timeout);
const CLIENT_BODY: Spec =
    row(S::BAD_REQUEST, "bad_request_body", REQ, "Bad request body", "bad-request-body", Outcome::BadRequest);
const BODY_TIMEOUT: Spec =
    row(S::REQUEST_TIMEOUT, "body_timeout", REQ, "Request body too slow", "body-timeout", Outcome::BadRequest);
const URI_TOO_LONG: Spec = row(S::URI_TOO_LONG, "uri_too_long", REQ, "URI too long", TOO_LARGE, Outcome::TooLarge);
const BAD_HOST: Spec = row(S::BAD_REQUEST, "bad_host", REQ, "Bad Host header", "bad-request", Outcome::BadRequest);
const CODING: Spec = row(
    S::NOT_IMPLEMENTED,
    "unsupported_transfer_coding",
    REQ,
    "Unsupported transfer coding",
    "bad-request",
    Outcome::BadRequest,
);
const LOOP: Spec =
    row(S::LOOP_DETECTED, "loop_detected", "proxy_loop_detected", "Loop detected", "loop-detected", Outcome::Loop);
const BAD_PAGE: Spec =
    row(S::BAD_REQUEST, "bad_page", REQ, "Invalid page request", "invalid-page", Outcome::BadRequest);
const LEGS_TIMEOUT: Spec =
    row(S::GATEWAY_TIMEOUT, "regions_timeout", LATE, "Regions timed out", "regions-failed", Outcome::Timeout);
const LEGS_FULL: Spec = row(
    S::SERVICE_UNAVAILABLE,
    "fanout_saturated",
    "connection_limit_reached",
    "Fan-outs saturated",
    "fanout-saturated",
    Outcome::Unavailable,
);
const LEGS_FAILED: Spec =
    row(S::BAD_GATEWAY, "regions_failed", UNAVAILABLE, "Regions failed", "regions-failed", Outcome::UpstreamError);
const REWRITE: Spec = row(
    S::INTERNAL_SERVER_ERROR,
    "rewrite_failed",
    "proxy_configuration_error",
    "Rewrite failed",
    "rewrite-failed",
    Outcome::ProxyError,
);
const NOT_FOUND: Spec =
    row(S::NOT_FOUND, "not_found_in_any_region", DEST, "Not found in any region", "not-found", Outcome::NotFound);

impl ProxyError {
    /// The error's row of the table. (A rejected id's reason is its
    /// decoder's: `bad_length`, `bad_format`, ….)
    pub fn spec(&self) -> Spec {
        use ProxyError as E;
        match self {
            E::NoRoute => NO_ROUTE,
            E::MethodNotAllowed { .. } => METHOD_NOT_ALLOWED,
            E::MissingId { .. } => MISSING_ID,
            E::BadMessage { .. } => BAD_MESSAGE,
            E::NotGrpc => NOT_GRPC,
            E::MessageTooLarge { .. } => MESSAGE_TOO_LARGE,
            E::AmbiguousId { .. } => AMBIGUOUS_ID,
            E::BadId { errors, .. } => {
                let reason = errors.first().map_or("bad_id", |e| e.reason.code());
                row(S::BAD_REQUEST, reason, REQ, "Invalid entity id", BAD_ID, Outcome::BadId)
            }
            E::NoOwner { .. } => NO_OWNER,
            E::CannotMint { .. } => CANNOT_MINT,
            E::MissingCountry { .. } => MISSING_COUNTRY,
            E::UnknownCountry { .. } => UNKNOWN_COUNTRY,
            E::ClientIdRejected { .. } => CLIENT_ID,
            E::BadMintRequest { .. } => BAD_MINT,
            E::RegionUnavailable { .. } => REGION_DOWN,
            E::HoldFull { .. } => HOLD_FULL,
            E::HoldExpired { .. } => HOLD_EXPIRED,
            E::StaleEpoch { .. } => STALE_EPOCH,
            E::NotOwner { .. } => NOT_OWNER,
            E::UpstreamSaturated { .. } => SATURATED,
            E::UpstreamTimeout { .. } => UPSTREAM_TIMEOUT,
            E::UpstreamConnect { .. } => CONNECT,
            E::UpstreamFailed { .. } => FAILED,
            E::BadUpgrade => BAD_UPGRADE,
            E::RequestTimeout => REQUEST_TIMEOUT,
            E::ClientBody { .. } => CLIENT_BODY,
            E::BodyTimeout => BODY_TIMEOUT,
            E::UriTooLong { .. } => URI_TOO_LONG,
            E::HeadersTooLarge { .. } => HEADERS_TOO_LARGE,
            E::BadHost { .. } => BAD_HOST,
            E::UnsupportedTransferCoding { .. } => CODING,
            E::Loop { .. } => LOOP,
            E::BadPage { .. } => BAD_PAGE,
            E::LegsFailed { failed, .. } if !failed.is_empty() && failed.iter().all(LegFailure::is_timeout) => {
                LEGS_TIMEOUT
            }
            E::LegsFailed { failed, .. } if LegFailure::all_proxy_full(failed) => LEGS_FULL,
            E::LegsFailed { .. } => LEGS_FAILED,
            E::NotFoundAnywhere { .. } => NOT_FOUND,
            E::Rewrite { .. } => REWRITE,
        }
    }
}
