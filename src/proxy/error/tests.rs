//! The proxy's error table: every row complete, and its problem+json answer.

use super::*;
use crate::ids::Reason;

/// One error of every kind.
fn every_error() -> Vec<ProxyError> {
    use ProxyError as E;
    let (p, r, d) = (|| "header 'x'".to_string(), || "kz".to_string(), || "why".to_string());
    vec![
        E::NoRoute,
        E::MissingId { param: p() },
        E::AmbiguousId { param: p() },
        E::BadId {
            param: p(),
            errors: vec![IdError { format: Format::Iuid, reason: Reason::BadLength }],
            input: "x".into(),
        },
        E::NoOwner { detail: d() },
        E::CannotMint { detail: d() },
        E::MissingCountry { param: p() },
        E::UnknownCountry { param: p(), value: "XX".into() },
        E::ClientIdRejected { param: p(), detail: d() },
        E::BadMintRequest { detail: d() },
        E::RegionUnavailable { region: r() },
        E::HoldFull { unit: "country KZ".into(), max: 3 },
        E::HoldExpired { unit: "country KZ".into() },
        E::StaleEpoch { unit: "country KZ".into(), owner: r(), epoch: 2 },
        E::NotOwner { owner: r() },
        E::UpstreamSaturated { region: r(), full: crate::upstream::Full::Queue },
        E::BadUpgrade,
        E::UpstreamTimeout { region: r() },
        E::UpstreamConnect { region: r() },
        E::UpstreamFailed { region: r() },
        E::RequestTimeout,
        E::ClientBody { detail: "the client stopped" },
        E::BodyTimeout,
        E::UriTooLong { limit: 1 },
        E::HeadersTooLarge { limit: 1 },
        E::BadHost { count: 2 },
        E::UnsupportedTransferCoding { coding: "gzip".into() },
        E::Loop { detail: d() },
        E::MethodNotAllowed { method: "PUT".into(), allow: "GET".into() },
        E::BadPage { detail: d() },
        E::LegsFailed {
            what: "fan-out",
            asked: 3,
            failed: vec![LegFailure { region: "us".into(), reason: "status", detail: "answered 500".into() }],
        },
        E::LegsFailed {
            what: "search",
            asked: 3,
            failed: vec![LegFailure { region: "us".into(), reason: "leg_timeout", detail: "no answer in 2s".into() }],
        },
        full_legs(),
        E::NotFoundAnywhere { asked: vec!["eu".into(), "us".into()] },
        E::Rewrite { detail: "'/a b' is not a path".into() },
    ]
}

/// A fan-out whose every region found no room for its answer.
fn full_legs() -> ProxyError {
    let full =
        |region: &str| LegFailure { region: region.into(), reason: LegFailure::PROXY_FULL, detail: "no room".into() };
    ProxyError::LegsFailed { what: "fan-out", asked: 2, failed: vec![full("eu"), full("us")] }
}

#[test]
fn every_error_has_a_complete_row_and_a_problem_response() -> Result<(), Box<dyn std::error::Error>> {
    // In `every_error`'s order.
    let reasons = [
        "no_route",
        "missing_id",
        "ambiguous_id",
        "bad_length",
        "no_owner",
        "cannot_mint",
        "missing_country",
        "unknown_country",
        "client_id_mismatch",
        "bad_mint_request",
        "region_unavailable",
        "hold_full",
        "hold_expired",
        "stale_epoch",
        "not_owner",
        "upstream_saturated",
        "upstream_bad_upgrade",
        "upstream_timeout",
        "upstream_connect_failed",
        "upstream_failed",
        "request_timeout",
        "bad_request_body",
        "body_timeout",
        "uri_too_long",
        "headers_too_large",
        "bad_host",
        "unsupported_transfer_coding",
        "loop_detected",
        "method_not_allowed",
        "bad_page",
        "regions_failed",
        "regions_timeout",
        "fanout_saturated",
        "not_found_in_any_region",
        "rewrite_failed",
    ];
    let errors = every_error();
    assert_eq!(errors.len(), reasons.len());
    for (err, reason) in errors.iter().zip(reasons) {
        crate::problem::tests::assert_complete(err, reason)?;
    }
    Ok(())
}

#[test]
fn retry_after_goes_with_temporary_failures() {
    for (err, after) in [
        (ProxyError::RegionUnavailable { region: "kz".into() }, Some("5")),
        (ProxyError::HoldExpired { unit: "country KZ".into() }, Some("5")),
        (ProxyError::UpstreamSaturated { region: "kz".into(), full: crate::upstream::Full::Waited }, Some("1")),
        (full_legs(), Some("1")),
        (ProxyError::NoRoute, None),
    ] {
        let resp = crate::problem::response(&err, "/", "-", "gw");
        assert_eq!(resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("")), after);
    }
}
