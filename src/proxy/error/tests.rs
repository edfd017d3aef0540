//! The error table: every row complete, in its place, and its problem+json answer.

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
        E::BadId { param: p(), error: IdError { format: Format::Iuid, reason: Reason::BadLength }, input: "x".into() },
        E::NoOwner { detail: d() },
        E::CannotMint { detail: d() },
        E::MissingCountry { param: p() },
        E::UnknownCountry { param: p(), value: "XX".into() },
        E::ClientIdRejected { param: p(), detail: d() },
        E::BadMintRequest { detail: d() },
        E::RegionUnavailable { region: r() },
        E::UpstreamSaturated { region: r() },
        E::UpstreamTimeout { region: r() },
        E::UpstreamConnect { region: r() },
        E::UpstreamFailed { region: r() },
        E::RequestTimeout,
        E::ClientBody { detail: "the client stopped" },
        E::UriTooLong { limit: 1 },
        E::HeadersTooLarge { limit: 1 },
        E::HeadTooLarge { limit: 1 },
        E::MalformedHead { detail: "malformed request head".into() },
        E::BadHost { count: 2 },
        E::UnsupportedTransferCoding { coding: "gzip".into() },
        E::Loop { detail: d() },
        E::TooManyConnections { limit: 1, listener: "proxy" },
        E::NoEndpoint { path: "/x".into() },
        E::Unauthorized,
        E::MethodNotAllowed { path: "/x".into(), method: "PUT".into(), allow: "GET" },
        E::ExplainWithoutId,
        E::UnknownRoute { name: "x".into() },
        E::NoTableFile,
        E::InvalidTable { errors: crate::config::ConfigErrors::single("t.yaml", "bad".into(), None) },
        E::NeedsRestart { detail: d() },
        E::ReloadFailed { detail: d() },
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
        E::NotFoundAnywhere { asked: vec!["eu".into(), "us".into()] },
    ]
}

#[test]
fn every_error_has_a_complete_row_and_a_problem_response() -> Result<(), Box<dyn std::error::Error>> {
    let outcomes = [
        "no_route",
        "bad_id",
        "no_owner",
        "bad_request",
        "unavailable",
        "timeout",
        "upstream_error",
        "too_large",
        "loop",
        "refused",
        "proxy_error",
        "not_found",
    ];
    // In TABLE's order: a row out of place shows here.
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
        "upstream_saturated",
        "upstream_timeout",
        "upstream_connect_failed",
        "upstream_failed",
        "request_timeout",
        "bad_request_body",
        "uri_too_long",
        "headers_too_large",
        "head_too_large",
        "bad_request_head",
        "bad_host",
        "unsupported_transfer_coding",
        "loop_detected",
        "too_many_connections",
        "not_found",
        "unauthorized",
        "method_not_allowed",
        "missing_id",
        "unknown_route",
        "no_file",
        "invalid_config",
        "needs_restart",
        "reload_failed",
        "bad_page",
        "regions_failed",
        "regions_timeout",
        "not_found_in_any_region",
    ];
    let errors = every_error();
    assert_eq!(errors.len(), TABLE.len());
    for (err, reason) in errors.into_iter().zip(reasons) {
        let spec = err.spec();
        assert_eq!(spec.reason, reason, "{err:?}");
        assert!(spec.status.is_client_error() || spec.status.is_server_error(), "{err:?}");
        for text in [spec.reason, spec.token, spec.slug] {
            assert!(!text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-'));
        }
        assert!(outcomes.contains(&spec.outcome), "{err:?}: {}", spec.outcome);
        let message = err.to_string();
        assert!(message.chars().next().is_some_and(|c| !c.is_uppercase()), "{message}");
        let resp = problem_response(&err, "/p", "rid", "gw");
        assert_eq!(resp.status(), spec.status);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = serde_json::from_slice(&resp.into_body().into_inner().unwrap_or_default())?;
        assert_eq!(body["reason"], spec.reason);
        assert_eq!(body["status"], spec.status.as_u16());
        assert_eq!(body["detail"], message);
    }
    Ok(())
}

#[test]
fn retry_after_goes_with_temporary_failures() {
    for (err, after) in [
        (ProxyError::RegionUnavailable { region: "kz".into() }, Some("5")),
        (ProxyError::UpstreamSaturated { region: "kz".into() }, Some("1")),
        (ProxyError::NoRoute, None),
    ] {
        let resp = problem_response(&err, "/", "-", "gw");
        assert_eq!(resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("")), after);
    }
}
