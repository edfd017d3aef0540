//! Heads written into one buffer, ready for a single write: the request
//! line and fields of an upstream request, the status line and fields of a
//! response, `Date`. Field names go out as `http` keeps them (lowercase);
//! repeated fields go out as repeated lines, in order.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderValue};
use http::{Method, StatusCode, Version};

/// Writes `METHOD target HTTP/1.1`, `host`, then `headers`, then the blank
/// line: an upstream request head. `headers` must not hold `Host`.
pub fn request_head(out: &mut Vec<u8>, method: &Method, target: &str, host: &HeaderValue, headers: &HeaderMap) {
    request_head_open(out, method, target, host, headers);
    out.extend_from_slice(b"\r\n");
}

/// [`request_head`] without the blank line, so that framing fields can follow.
pub fn request_head_open(out: &mut Vec<u8>, method: &Method, target: &str, host: &HeaderValue, headers: &HeaderMap) {
    out.reserve(64 + target.len() + headers.len() * 32);
    request_line(out, method, target);
    field(out, "host", host.as_bytes());
    fields(out, headers);
}

/// Writes `METHOD target HTTP/1.1`.
pub fn request_line(out: &mut Vec<u8>, method: &Method, target: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Writes the status line for `status` in `version` (`HTTP/1.0` for an
/// HTTP/1.0 client, else `HTTP/1.1`), with the canonical reason phrase.
pub fn status_line(out: &mut Vec<u8>, version: Version, status: StatusCode) {
    if version == Version::HTTP_11 && status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(if version == Version::HTTP_10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    // A reason phrase is optional, but some clients expect one.
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes every field of `headers` as `name: value` lines.
pub fn fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Writes one `name: value` line.
pub fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
const DATE_LEN: usize = 29;

thread_local! {
    /// The `Date` value of the current second, formatted once per second per thread.
    static DATE: RefCell<(u64, [u8; DATE_LEN])> = const { RefCell::new((u64::MAX, [0; DATE_LEN])) };
}

/// Writes a `date:` line with the current time (RFC 9110 §6.6.1: an origin
/// with a clock sends one; the proxy adds it to the answers it writes).
pub fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == DATE_LEN {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = second;
            }
        }
        field(out, "date", &cached.1);
    });
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
        assert_eq!(String::from_utf8(out)?, "GET /v1/x?y=1 HTTP/1.1\r\nhost: h:8080\r\nx-a: 1\r\nx-a: 2\r\n\r\n");
        Ok(())
    }

    #[test]
    fn status_lines_follow_the_client_version() {
        let line = |v, s| {
            let mut out = Vec::new();
            status_line(&mut out, v, s);
            String::from_utf8_lossy(&out).into_owned()
        };
        assert_eq!(line(Version::HTTP_11, StatusCode::OK), "HTTP/1.1 200 OK\r\n");
        assert_eq!(line(Version::HTTP_10, StatusCode::NOT_FOUND), "HTTP/1.0 404 Not Found\r\n");
        assert_eq!(line(Version::HTTP_11, StatusCode::from_u16(599).unwrap_or_default()), "HTTP/1.1 599 Unknown\r\n");
    }

    #[test]
    fn the_date_is_an_imf_fixdate() {
        let mut out = Vec::new();
        date(&mut out);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("date: ") && text.ends_with(" GMT\r\n") && text.len() == 6 + DATE_LEN + 2, "{text}");
    }
}
