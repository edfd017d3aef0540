//! The rows of the error table: per failure, its status, reason,
//! `Proxy-Status` token, title, type slug and metrics outcome.

use http::StatusCode;

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
pub(super) enum Kind {
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
    BadPage,
    LegsFailed,
    LegsTimeout,
    NotFoundAnywhere,
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
pub(super) const TABLE: [Spec; 38] = [
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
    row(StatusCode::BAD_REQUEST, "bad_page", REQ, "Invalid page request", "invalid-page", "bad_request"),
    row(
        StatusCode::BAD_GATEWAY,
        "regions_failed",
        "destination_unavailable",
        "Regions failed",
        "regions-failed",
        "upstream_error",
    ),
    row(
        StatusCode::GATEWAY_TIMEOUT,
        "regions_timeout",
        "http_response_timeout",
        "Regions timed out",
        "regions-failed",
        "timeout",
    ),
    row(StatusCode::NOT_FOUND, "not_found_in_any_region", DEST, "Not found in any region", "not-found", "not_found"),
];
