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
