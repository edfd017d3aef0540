//! Heads written into one buffer, ready for a single write: the request
//! line and fields of an upstream request. Field names go out as `http`
//! keeps them (lowercase); repeated fields go out as repeated lines, in
//! order.

use http::header::{self, HeaderMap, HeaderValue};
use http::Method;

/// The framing fields a written head carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrittenFraming {
    /// `Content-Length`.
    pub length: bool,
    /// `Transfer-Encoding`.
    pub chunked: bool,
}

/// Writes `METHOD target HTTP/1.1`, `host`, then `headers`: an upstream
/// request head without its blank line, so that framing fields can follow.
/// `headers` must not hold `Host`. Returns which framing fields it wrote
/// (seen on the way, rather than looked up in the map again).
pub fn request_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    host: &HeaderValue,
    headers: &HeaderMap,
) -> WrittenFraming {
    out.reserve(64 + target.len() + headers.len() * 32);
    request_line(out, method, target);
    field(out, "host", host.as_bytes());
    let mut seen = WrittenFraming::default();
    for (name, value) in headers {
        seen.length |= name == header::CONTENT_LENGTH;
        seen.chunked |= name == header::TRANSFER_ENCODING;
        field(out, name.as_str(), value.as_bytes());
    }
    seen
}

/// Writes `METHOD target HTTP/1.1`.
pub fn request_line(out: &mut Vec<u8>, method: &Method, target: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Writes one `name: value` line.
pub fn field(out: &mut Vec<u8>, name: impl AsRef<[u8]>, value: &[u8]) {
    out.extend_from_slice(name.as_ref());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_is_one_block() -> Result<(), Box<dyn std::error::Error>> {
        let mut headers = HeaderMap::new();
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        request_head(&mut out, &Method::GET, "/v1/x?y=1", &HeaderValue::from_static("h:8080"), &headers);
        assert_eq!(String::from_utf8(out)?, "GET /v1/x?y=1 HTTP/1.1\r\nhost: h:8080\r\nx-a: 1\r\nx-a: 2\r\n");
        Ok(())
    }
}
