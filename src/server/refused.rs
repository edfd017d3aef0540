//! What a listener answers on its own, before any request reaches the
//! proxy: a connection past the limit, a head it cannot read, plain HTTP on
//! a TLS port. Each is written straight to the socket, then it closes.

use std::fmt;

use http::{header, HeaderMap, HeaderValue, StatusCode as S};

use crate::problem::{row, Outcome, Problem, Spec, HEADERS_TOO_LARGE, REQ, TOO_MANY_CONNECTIONS};

/// A refusal of the listener's.
#[derive(Debug)]
pub enum Refused {
    /// The listener is at its connection limit.
    TooManyConnections {
        /// `server.max_connections` or `server.admin_max_connections`.
        limit: usize,
        /// `proxy`, `admin` or `backend`.
        listener: &'static str,
    },
    /// An HTTP/1.1 request head larger than `server.max_header_bytes`.
    HeadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// An HTTP/1.1 request head with more fields than `server.max_headers`.
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// An HTTP/1.1 request head that cannot be read: a malformed request
    /// line or field, ambiguous framing (RFC 9112 §6.3), obs-fold, bare CR.
    Malformed {
        /// Which rule the head broke.
        detail: String,
    },
    /// Plain HTTP sent to a listener that speaks TLS.
    PlainHttpToTls,
}

const HEAD_TOO_LARGE: Spec = row(
    S::REQUEST_HEADER_FIELDS_TOO_LARGE,
    "head_too_large",
    REQ,
    "Request head too large",
    "request-too-large",
    Outcome::TooLarge,
);
const MALFORMED: Spec =
    row(S::BAD_REQUEST, "bad_request_head", REQ, "Malformed request", "bad-request", Outcome::BadRequest);
const PLAIN_TO_TLS: Spec =
    row(S::BAD_REQUEST, "plain_http_to_tls", REQ, "Plain HTTP to a TLS port", "bad-request", Outcome::BadRequest);

impl Problem for Refused {
    fn spec(&self) -> Spec {
        match self {
            Refused::TooManyConnections { .. } => TOO_MANY_CONNECTIONS,
            Refused::HeadTooLarge { .. } => HEAD_TOO_LARGE,
            Refused::TooManyHeaders { .. } => HEADERS_TOO_LARGE,
            Refused::Malformed { .. } => MALFORMED,
            Refused::PlainHttpToTls => PLAIN_TO_TLS,
        }
    }

    fn fields(&self, h: &mut HeaderMap) {
        if let Refused::TooManyConnections { .. } = self {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::TooManyConnections { limit, listener: "admin" } => {
                write!(f, "the admin listener already has {limit} open connections (server.admin_max_connections)")
            }
            Refused::TooManyConnections { limit, .. } => {
                write!(f, "this proxy already has {limit} open connections (server.max_connections)")
            }
            Refused::HeadTooLarge { limit } => write!(f, "the request head exceeds {limit} bytes"),
            Refused::TooManyHeaders { limit } => write!(f, "the request has more than {limit} headers"),
            Refused::Malformed { detail } => f.write_str(detail),
            Refused::PlainHttpToTls => {
                f.write_str("this port speaks TLS (HTTPS), and the request was sent as plain HTTP: use https://")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_a_complete_row_and_a_problem_response() -> Result<(), Box<dyn std::error::Error>> {
        for (err, reason) in [
            (Refused::TooManyConnections { limit: 1, listener: "proxy" }, "too_many_connections"),
            (Refused::HeadTooLarge { limit: 1 }, "head_too_large"),
            (Refused::TooManyHeaders { limit: 1 }, "headers_too_large"),
            (Refused::Malformed { detail: "malformed request head".into() }, "bad_request_head"),
            (Refused::PlainHttpToTls, "plain_http_to_tls"),
        ] {
            crate::problem::tests::assert_complete(&err, reason)?;
        }
        Ok(())
    }
}
