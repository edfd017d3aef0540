//! A request head (RFC 9112 §3 and §5), parsed out of a connection's read
//! buffer with `httparse` and checked for one unambiguous framing (§6):
//!
//! ```text
//! request-line  = method SP request-target SP HTTP-version CRLF
//! field-line    = field-name ":" OWS field-value OWS CRLF   (no obs-fold)
//! framing       = Transfer-Encoding ending in chunked
//!               | one Content-Length (repeats must agree)
//!               | neither: no body
//! ```
//!
//! Refused, as the issue of request smuggling wants: both framings at once,
//! a `Content-Length` that is not a number or disagrees with another,
//! `Transfer-Encoding` not ending in `chunked` or in HTTP/1.0, obs-fold,
//! bare CR, invalid tokens and field characters (httparse's checks). A
//! chunked body whose codings include more than `chunked` is read here and
//! refused later with 501 (`proxy::headers::check_framing`), as on HTTP/2.
//!
//! Header values are slices of the head's bytes (no copy); the head leaves
//! the buffer, which then starts at the body.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri, Version};

use super::{connection, content_length, ends_chunked, parse_error, range_in, Error, Framing, Part, Reason};

/// The limits a request head is read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest head, request line and fields, in bytes.
    pub max_head_bytes: usize,
    /// Most header fields.
    pub max_headers: usize,
}

/// Header fields parsed on the stack; more than this many (a configured
/// `server.max_headers` above it) are parsed into a vector.
const STACK_HEADERS: usize = 128;

/// Fields a proxy may add to a request's map on its way on: a one-id
/// request's added fields (a request id, `X-Forwarded-For/Proto/Host`,
/// `Via`) are written after its own by the upstream head writer, but a
/// fan-out's or a search's go into its map, which the legs copy. Room is
/// made for them up front, since growing a header map re-hashes it (four
/// times per proxied request, when every request took them into its map). No more than that: a map's entries are about
/// 100 bytes each, and past 1 KiB an allocation leaves the allocator's
/// fast path.
pub const ROOM_FOR_PROXY_FIELDS: usize = 5;

/// A parsed request head and what it says about the connection.
#[derive(Debug)]
pub struct RequestHead {
    /// Method.
    pub method: Method,
    /// Request target.
    pub uri: Uri,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: Version,
    /// Header fields, in order, names lowercased.
    pub headers: HeaderMap,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// A head's field names, and where their values lie in it.
type Parsed = smallvec::SmallVec<[(HeaderName, std::ops::Range<usize>); 16]>;

/// Parses a request head at the start of `buf`. `Ok(None)`: incomplete, read
/// more. On success the head's bytes leave `buf`.
pub fn parse_request(buf: &mut BytesMut, limits: &RequestLimits) -> Result<Option<RequestHead>, Error> {
    match parse_one(buf, limits) {
        // RFC 9112 §2.3: a later HTTP/1 minor version is answered as the
        // highest this server speaks. Rewritten in place, then read again.
        Err(e) if e.reason == Reason::Version && later_minor_as_11(buf) => parse_one(buf, limits),
        parsed => parsed,
    }
}

/// Rewrites a request line's `HTTP/1.<2-9>` to `HTTP/1.1`; whether it did.
fn later_minor_as_11(buf: &mut BytesMut) -> bool {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else { return false };
    let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let Some(at) = line.len().checked_sub(1) else { return false };
    let later = line.len() >= 8 && line[at - 7..at] == *b"HTTP/1." && (b'2'..=b'9').contains(&line[at]);
    if later {
        buf[at] = b'1';
    }
    later
}

fn parse_one(buf: &mut BytesMut, limits: &RequestLimits) -> Result<Option<RequestHead>, Error> {
    let err = |r| Error::new(Part::RequestHead, r);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let fields: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= STACK_HEADERS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let mut req = httparse::Request::new(&mut []);
    let bytes: &[u8] = buf;
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, bytes, fields) {
        Ok(httparse::Status::Complete(len)) if len > limits.max_head_bytes => return Err(err(Reason::HeadTooLarge)),
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > limits.max_head_bytes => return Err(err(Reason::HeadTooLarge)),
        Ok(httparse::Status::Partial) => return Ok(None),
        // A bad token is the method's until the method is read, the target's after.
        Err(httparse::Error::Token) if req.method.is_some() => return Err(err(Reason::Target)),
        Err(e) => return Err(parse_error(Part::RequestHead, e)),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(err(Reason::LineEnd));
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| err(Reason::Method))?;
    let target_range = range_in(bytes, target.as_bytes());
    // Where each field's name and value lie, kept while the head leaves the
    // buffer: inline for the usual few (a `Vec` was an allocation a request;
    // an array sized by the limit cost more to zero than the parse itself).
    // `new` and `reserve_exact` are what `with_capacity` calls, but made
    // here the list is built in place: through `with_capacity` this build
    // copied the inline array on every request (a memcpy in the profile).
    let count = req.headers.len();
    let mut parsed = Parsed::new();
    parsed.reserve_exact(count);
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| err(Reason::HeaderName))?;
        parsed.push((name, range_in(bytes, h.value)));
    }
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target_range)).map_err(|_| err(Reason::Target))?;
    let http11 = minor == 1;
    let mut out = RequestHead {
        method,
        uri,
        version: if http11 { Version::HTTP_11 } else { Version::HTTP_10 },
        // `try_`: a map holds at most 32,768 fields, and the configured
        // limit has no ceiling of its own.
        headers: HeaderMap::try_with_capacity(count + ROOM_FOR_PROXY_FIELDS)
            .map_err(|_| err(Reason::TooManyHeaders))?,
        framing: Framing::Empty,
        keep_alive: http11,
        expect_continue: false,
    };
    take_fields(&mut out, &mut parsed, &head, http11)?;
    Ok(Some(out))
}

/// Puts the parsed fields (`parsed`, value ranges in `head`) into `out` and
/// reads its framing, keep-alive and `Expect` from them.
fn take_fields(out: &mut RequestHead, parsed: &mut Parsed, head: &bytes::Bytes, http11: bool) -> Result<(), Error> {
    let err = |r| Error::new(Part::RequestHead, r);
    let (mut length, mut chunked, mut encoded, mut close) = (None, false, false, false);
    for (name, value) in parsed.drain(..) {
        let value = HeaderValue::from_maybe_shared(head.slice(value)).map_err(|_| err(Reason::HeaderValue))?;
        match name {
            header::TRANSFER_ENCODING => {
                if !http11 {
                    return Err(err(Reason::EncodingInHttp10));
                }
                encoded = true;
                chunked = ends_chunked(value.as_bytes());
            }
            header::CONTENT_LENGTH => {
                let n = content_length(value.as_bytes()).ok_or(err(Reason::ContentLength))?;
                match length {
                    Some(prev) if prev != n => return Err(err(Reason::ContentLength)),
                    // A repeat that agrees is one field (as hyper reads it): two
                    // would go upstream, where a stricter server could refuse them.
                    Some(_) => continue,
                    None => length = Some(n),
                }
            }
            header::CONNECTION => connection(value.as_bytes(), http11, &mut close, &mut out.keep_alive),
            header::EXPECT => out.expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue"),
            _ => {}
        }
        out.headers.try_append(name, value).map_err(|_| err(Reason::TooManyHeaders))?;
    }
    out.framing = match (encoded, length) {
        (true, Some(_)) => return Err(err(Reason::LengthAndEncoding)),
        (true, None) if !chunked => return Err(err(Reason::NotChunked)),
        (true, None) => Framing::Chunked,
        (false, Some(0) | None) => Framing::Empty,
        (false, Some(n)) => Framing::Length(n),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const LIMITS: RequestLimits = RequestLimits { max_head_bytes: 1024, max_headers: 8 };

    fn parse(text: &str) -> Result<Option<RequestHead>, Error> {
        parse_request(&mut BytesMut::from(text.as_bytes()), &LIMITS)
    }

    fn reason(text: &str) -> Option<Reason> {
        parse(text).err().map(|e| e.reason)
    }

    #[test]
    fn a_later_http1_minor_version_is_read_as_11() -> TestResult {
        for v in ["HTTP/1.2", "HTTP/1.9"] {
            let head = parse(&format!("GET /x {v}\r\nHost: a\r\n\r\n"))?.ok_or("complete")?;
            assert_eq!((head.version, head.keep_alive), (Version::HTTP_11, true), "{v}");
        }
        for v in ["HTTP/2.0", "HTTP/1.x", "HTTP/0.9", "HTTP/1.10"] {
            assert!(reason(&format!("GET /x {v}\r\nHost: a\r\n\r\n")).is_some(), "{v} was read");
        }
        Ok(())
    }

    #[test]
    fn a_request_head_leaves_the_buffer_at_its_body() -> TestResult {
        let mut buf = BytesMut::from(
            &b"POST /v1/orders?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Two: 1\r\nx-two: 2\r\n\r\nhello"[..],
        );
        let head = parse_request(&mut buf, &LIMITS)?.ok_or("complete")?;
        assert_eq!(head.method, Method::POST);
        assert_eq!(head.uri.path_and_query().map(|p| p.as_str()), Some("/v1/orders?x=1"));
        assert_eq!(head.framing, Framing::Length(5));
        assert!(head.keep_alive);
        assert_eq!(head.headers.get_all("x-two").iter().count(), 2);
        assert_eq!(&buf[..], b"hello");
        Ok(())
    }

    #[test]
    fn partial_heads_wait_and_oversized_ones_are_refused() -> TestResult {
        assert!(parse("GET / HTTP/1.1\r\nHost: a\r\n")?.is_none());
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(1100));
        assert_eq!(reason(&long), Some(Reason::HeadTooLarge));
        let many: String = (0..9).map(|i| format!("x-{i}: 1\r\n")).collect();
        assert_eq!(reason(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(Reason::TooManyHeaders));
        Ok(())
    }

    #[test]
    fn framing_is_unambiguous_or_refused() -> TestResult {
        let ok = |t: &str| parse(t).ok().flatten().map(|h| h.framing);
        assert_eq!(ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), Some(Framing::Chunked));
        assert_eq!(ok("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), Some(Framing::Chunked));
        assert_eq!(ok("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"), Some(Framing::Length(3)));
        let twice = parse("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n")?.ok_or("complete")?;
        assert_eq!(twice.headers.get_all("content-length").iter().count(), 1, "an agreeing repeat is one field");
        assert_eq!(ok("GET / HTTP/1.1\r\n\r\n"), Some(Framing::Empty));
        for (text, want) in [
            ("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", Reason::LengthAndEncoding),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", Reason::LengthAndEncoding),
            ("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", Reason::ContentLength),
            ("POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n", Reason::ContentLength),
            ("POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", Reason::ContentLength),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", Reason::NotChunked),
            ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Reason::EncodingInHttp10),
            ("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", Reason::HeaderName),
            ("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", Reason::HeaderValue),
            ("GET / HTTP/1.1\r\nX : a\r\n\r\n", Reason::HeaderName),
            ("GET / HTTP/2.0\r\n\r\n", Reason::Version),
            ("G(T / HTTP/1.1\r\n\r\n", Reason::Method),
        ] {
            assert_eq!(reason(text), Some(want), "{text:?}");
        }
        Ok(())
    }

    #[test]
    fn connection_tokens_decide_keep_alive() -> TestResult {
        let keep = |t: &str| parse(t).ok().flatten().map(|h| h.keep_alive);
        assert_eq!(keep("GET / HTTP/1.0\r\n\r\n"), Some(false));
        assert_eq!(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"), Some(true));
        assert_eq!(keep("GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"), Some(false));
        assert_eq!(parse("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n")?.map(|h| h.expect_continue), Some(true));
        Ok(())
    }

    #[test]
    fn more_fields_than_a_header_map_holds_are_refused_not_a_panic() -> TestResult {
        let limits = RequestLimits { max_head_bytes: 1 << 20, max_headers: 40_000 };
        let fields: String = (0..33_000).map(|i| format!("x{i}: v\r\n")).collect();
        let mut buf = BytesMut::from(format!("GET / HTTP/1.1\r\n{fields}\r\n").as_bytes());
        assert_eq!(parse_request(&mut buf, &limits).err().map(|e| e.reason), Some(Reason::TooManyHeaders));
        Ok(())
    }
}
