//! gRPC statuses, for the answers the proxy makes itself to a gRPC call: a
//! gRPC client reads `grpc-status` and `grpc-message`, not an HTTP status,
//! so a failure is answered `200` with the status in the head and no body
//! (the protocol's "Trailers-Only" answer).
//!
//! ```text
//! HTTP/2 200
//! content-type: application/grpc
//! grpc-status: 3
//! grpc-message: bad_length: ... %C3%A9 ...     bytes outside printable ASCII, and %, percent-encoded
//! ```

/// A gRPC status code (the protocol's `google.rpc.Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// The caller cancelled.
    Cancelled = 1,
    /// Nothing better to say.
    Unknown = 2,
    /// The call names something wrong (a malformed id).
    InvalidArgument = 3,
    /// The deadline passed first.
    DeadlineExceeded = 4,
    /// What the call asks for is nowhere.
    NotFound = 5,
    /// The call cannot be served in the system's present state (no owner).
    FailedPrecondition = 9,
    /// A limit was reached (connections, sizes).
    ResourceExhausted = 8,
    /// The method (here: the route) does not exist.
    Unimplemented = 12,
    /// The proxy failed.
    Internal = 13,
    /// Nothing could take the call now; a retry may.
    Unavailable = 14,
}

impl Code {
    /// The code's number, as `grpc-status` carries it.
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// Whether a request with this `content-type` is a gRPC call
/// (`application/grpc`, `application/grpc+proto`, `application/grpc;...`).
pub fn is_grpc(content_type: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    content_type.len() >= GRPC.len()
        && content_type[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(content_type.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// Whether `head` is a gRPC call: HTTP/2 with a gRPC `content-type`.
pub fn is_call(head: &http::request::Parts) -> bool {
    head.version == http::Version::HTTP_2
        && head.headers.get(http::header::CONTENT_TYPE).is_some_and(|v| is_grpc(v.as_bytes()))
}

/// The call's deadline from `grpc-timeout` (at most eight digits and a
/// unit: `H`ours, `M`inutes, `S`econds, `m`illi-, `u` micro-, `n`anoseconds);
/// `None` without one, or with one that is malformed (the call then has
/// the route's timeouts alone).
pub fn timeout(headers: &http::HeaderMap) -> Option<std::time::Duration> {
    use std::time::Duration;
    // A name, not a `&str`: looked up by it, the map does not parse and
    // lowercase the text on every call.
    const GRPC_TIMEOUT: http::HeaderName = http::HeaderName::from_static("grpc-timeout");
    let v = headers.get(GRPC_TIMEOUT)?.as_bytes();
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    match unit {
        b'H' => Some(Duration::from_secs(n * 3600)),
        b'M' => Some(Duration::from_secs(n * 60)),
        b'S' => Some(Duration::from_secs(n)),
        b'm' => Some(Duration::from_millis(n)),
        b'u' => Some(Duration::from_micros(n)),
        b'n' => Some(Duration::from_nanos(n)),
        _ => None,
    }
}

/// `text` as `grpc-message` carries it: printable ASCII but `%` as it is,
/// every other byte of its UTF-8 as `%XX`.
pub fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_as_the_protocol_writes_them() {
        use std::time::Duration;
        let t = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", http::HeaderValue::from_static(v));
            timeout(&h)
        };
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("99999999S"), Some(Duration::from_secs(99_999_999)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("7u"), Some(Duration::from_micros(7)));
        assert_eq!(t("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "123456789S", "1x", "-1S", "1.5S", "1 S"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        assert_eq!(timeout(&http::HeaderMap::new()), None);
    }

    #[test]
    fn grpc_content_types_are_told_apart() {
        for yes in ["application/grpc", "application/grpc+proto", "Application/GRPC;charset=x"] {
            assert!(is_grpc(yes.as_bytes()), "{yes}");
        }
        for no in ["application/grpc-web", "application/json", "application/grp", ""] {
            assert!(!is_grpc(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn messages_are_percent_encoded_as_the_protocol_says() {
        assert_eq!(message("bad id: 100% é\n"), "bad id: 100%25 %C3%A9%0A");
        assert_eq!(Code::InvalidArgument.number(), 3);
        assert_eq!(Code::Unavailable.number(), 14);
    }
}
