//! HTTP/1.1 messages on the wire: heads parsed with `httparse` straight
//! out of a connection's read buffer, bodies framed and decoded without
//! copying, heads written into one buffer. No I/O and no policy: the
//! upstream exchange (`upstream::exchange`) and the client leg's HTTP/1.1
//! server (`proxy::h1`) drive these over their sockets.
//!
//! * [`request`]: a request head, checked as RFC 9112 §6 and RFC 9110 want
//!   (one framing, a valid length, chunked last), ready as `http` types;
//! * [`response`]: a response head and how its body is delimited (§6.3),
//!   its fields kept as ranges of the head's bytes ([`fields`]);
//! * [`framing`]: body framing and the incremental decoder;
//! * [`rules`]: header rules made once per route, and what they make of
//!   one message's fields;
//! * [`write`](mod@write): heads and fields written into a buffer.
//!
//! Why by hand: hyper's HTTP/1 state machines (a task and a channel per
//! upstream connection, a dispatcher per client connection) were most of
//! the proxy's per-request CPU; the parsing itself is httparse's, as in
//! hyper. Errors are one small value, a [`Part`] and a [`Reason`], like the
//! id codecs'.

pub mod fields;
pub mod framing;
pub mod request;
pub mod response;
pub mod rules;
pub mod write;

use std::fmt;

use http::header::{self, HeaderName};

pub use fields::Fields;
pub use framing::{Decoded, Decoder, Framing};
pub use request::{parse_request, RequestHead, RequestLimits};
pub use response::{bodiless, parse_response, ResponseHead};

/// Which part of a message broke a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// A request line or header field.
    RequestHead,
    /// A status line or header field.
    ResponseHead,
    /// Body framing.
    Body,
}

/// The rule a message broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The head is larger than allowed.
    HeadTooLarge,
    /// More header fields than allowed.
    TooManyHeaders,
    /// The method is not a token.
    Method,
    /// The request target is not a valid URI.
    Target,
    /// Not `HTTP/1.0` or `HTTP/1.1`.
    Version,
    /// A header field name is not a token (or has space before the colon).
    HeaderName,
    /// A header field value has a forbidden character (a bare CR, a control
    /// character), or a line was folded (obs-fold).
    HeaderValue,
    /// A line does not end in CRLF (or LF) where one must.
    LineEnd,
    /// The status line is malformed.
    Status,
    /// `Content-Length` is not a decimal number, or two disagree.
    ContentLength,
    /// Both `Content-Length` and `Transfer-Encoding` (a smuggling vector).
    LengthAndEncoding,
    /// `Transfer-Encoding` whose last coding is not `chunked`.
    NotChunked,
    /// `Transfer-Encoding` in an HTTP/1.0 message.
    EncodingInHttp10,
    /// A response's `Transfer-Encoding` names a coding other than
    /// `chunked`, which the client never asked for (the proxy sends no
    /// `TE` upstream) and which could not reach it faithfully: the body
    /// is framed anew on the client's leg.
    OtherCoding,
    /// The peer closed in the middle of a head.
    HeadIncomplete,
    /// The peer closed before the body's end.
    BodyIncomplete,
    /// A chunk size that is not hex digits.
    ChunkSize,
    /// A chunk size beyond 64 bits.
    ChunkSizeOverflow,
    /// A chunk extension with a bare LF, or too long.
    ChunkExtension,
    /// Chunk framing without its CRLF.
    ChunkLineEnd,
    /// A trailer field that does not parse.
    Trailer,
    /// Trailer fields beyond the limits.
    TrailersTooLarge,
}

impl Reason {
    /// The stable snake_case code.
    pub const fn code(self) -> &'static str {
        match self {
            Reason::HeadTooLarge => "head_too_large",
            Reason::TooManyHeaders => "too_many_headers",
            Reason::Method => "bad_method",
            Reason::Target => "bad_target",
            Reason::Version => "bad_version",
            Reason::HeaderName => "bad_header_name",
            Reason::HeaderValue => "bad_header_value",
            Reason::LineEnd => "bad_line_end",
            Reason::Status => "bad_status",
            Reason::ContentLength => "bad_content_length",
            Reason::LengthAndEncoding => "length_and_encoding",
            Reason::NotChunked => "not_chunked",
            Reason::EncodingInHttp10 => "encoding_in_http10",
            Reason::OtherCoding => "transfer_coding_not_chunked",
            Reason::HeadIncomplete => "head_incomplete",
            Reason::BodyIncomplete => "body_incomplete",
            Reason::ChunkSize => "bad_chunk_size",
            Reason::ChunkSizeOverflow => "chunk_size_overflow",
            Reason::ChunkExtension => "bad_chunk_extension",
            Reason::ChunkLineEnd => "bad_chunk_line_end",
            Reason::Trailer => "bad_trailer",
            Reason::TrailersTooLarge => "trailers_too_large",
        }
    }

    /// What the rule is, for people.
    pub const fn explain(self) -> &'static str {
        match self {
            Reason::HeadTooLarge => "the message head is larger than allowed",
            Reason::TooManyHeaders => "more header fields than allowed",
            Reason::Method => "the method is not a token",
            Reason::Target => "the request target is not a valid URI",
            Reason::Version => "the version is not HTTP/1.0 or HTTP/1.1",
            Reason::HeaderName => "a header field name is not a token",
            Reason::HeaderValue => "a header field value has a forbidden character or is folded",
            Reason::LineEnd => "a line does not end where it must",
            Reason::Status => "the status line is malformed",
            Reason::ContentLength => "Content-Length is not one decimal number",
            Reason::LengthAndEncoding => "both Content-Length and Transfer-Encoding are present",
            Reason::NotChunked => "Transfer-Encoding does not end in chunked",
            Reason::EncodingInHttp10 => "Transfer-Encoding is not allowed in HTTP/1.0",
            Reason::OtherCoding => "Transfer-Encoding names a coding other than chunked",
            Reason::HeadIncomplete => "the connection closed in the middle of a message head",
            Reason::BodyIncomplete => "the connection closed before the end of the body",
            Reason::ChunkSize => "a chunk size is not hexadecimal",
            Reason::ChunkSizeOverflow => "a chunk size does not fit 64 bits",
            Reason::ChunkExtension => "a chunk extension is malformed or too long",
            Reason::ChunkLineEnd => "chunk framing lacks its CRLF",
            Reason::Trailer => "a trailer field is malformed",
            Reason::TrailersTooLarge => "the trailer fields are larger than allowed",
        }
    }
}

/// A message that broke a rule: where, and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    /// Where.
    pub part: Part,
    /// Which rule.
    pub reason: Reason,
}

impl Error {
    pub(crate) const fn new(part: Part, reason: Reason) -> Error {
        Error { part, reason }
    }

    pub(crate) const fn body(reason: Reason) -> Error {
        Error { part: Part::Body, reason }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = match self.part {
            Part::RequestHead => "request head",
            Part::ResponseHead => "response head",
            Part::Body => "body",
        };
        write!(f, "malformed {part}: {} ({})", self.reason.explain(), self.reason.code())
    }
}

impl std::error::Error for Error {}

/// What a `httparse` error means, for a head.
fn parse_error(part: Part, e: httparse::Error) -> Error {
    let reason = match e {
        httparse::Error::HeaderName => Reason::HeaderName,
        httparse::Error::HeaderValue => Reason::HeaderValue,
        httparse::Error::NewLine => Reason::LineEnd,
        httparse::Error::Status => Reason::Status,
        httparse::Error::Token => Reason::Method,
        httparse::Error::TooManyHeaders => Reason::TooManyHeaders,
        httparse::Error::Version => Reason::Version,
    };
    Error::new(part, reason)
}

/// How many names [`HOP_BY_HOP`] lists.
pub const HOP_COUNT: usize = 8;
/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1),
/// plus the non-standard ones proxies conventionally drop. `Connection`
/// comes first (the proxy's `remove_hop_by_hop` relies on
/// it).
pub const HOP_BY_HOP: [HeaderName; HOP_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// A `Content-Length` value: one or more ASCII digits, within 64 bits
/// (no sign, no spaces, no list).
pub fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

/// Watches a read buffer for the end of a message head, so that the head
/// is parsed once it is complete instead of after every read: a peer that
/// sends its head a byte at a time would otherwise have it parsed from the
/// start each time (quadratic in the head's size). Only the bytes added
/// since the last look are searched.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadScan {
    scanned: usize,
}

impl HeadScan {
    /// Whether `buf` is worth parsing: it holds a blank line (`\n\n` or
    /// `\n\r\n`, as httparse ends a head) or more than `max` bytes (so
    /// the parser can refuse it).
    pub fn ready(&mut self, buf: &[u8], max: usize) -> bool {
        // A terminator may begin in the last bytes already searched.
        let from = self.scanned.saturating_sub(2).min(buf.len());
        self.scanned = buf.len();
        // Each line feed is looked at once, by memchr's vectorised search,
        // which stops at the head's end (a byte-window scan over the whole
        // read, or two substring searches, look at every byte).
        buf.len() > max
            || memchr::memchr_iter(b'\n', &buf[from..]).any(|i| match buf.get(from + i + 1) {
                Some(b'\n') => true,
                Some(b'\r') => buf.get(from + i + 2) == Some(&b'\n'),
                _ => false,
            })
    }

    /// A head was taken out of the buffer: look at what is left from its start.
    pub fn reset(&mut self) {
        self.scanned = 0;
    }
}

/// Applies a `Connection` field to a message's keep-alive: once any line
/// says `close`, a later `keep-alive` does not undo it; HTTP/1.0 keeps the
/// connection only when asked.
fn connection(value: &[u8], http11: bool, close: &mut bool, keep_alive: &mut bool) {
    if *close || has_token(value, "close") {
        *close = true;
        *keep_alive = false;
    } else if !http11 && has_token(value, "keep-alive") {
        *keep_alive = true;
    }
}

/// Whether a comma-separated header value lists `token` (case-insensitive).
pub fn has_token(value: &[u8], token: &str) -> bool {
    value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether the last coding of a `Transfer-Encoding` value is `chunked`.
fn ends_chunked(value: &[u8]) -> bool {
    value.rsplit(|&b| b == b',').next().is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// The first coding of a `Transfer-Encoding` value other than `chunked`
/// (the proxy passes on no other: it frames every body anew).
pub fn other_coding(value: &[u8]) -> Option<&[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).find(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"chunked"))
}

/// The byte range of `part` inside `whole` (both from the same buffer).
fn range_in(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    start..start + part.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_scan_finds_the_blank_line_across_reads_and_looks_at_new_bytes_only() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        // Fed a byte at a time, it is ready exactly when the last byte arrives.
        let mut scan = HeadScan::default();
        for end in 1..=head.len() {
            assert_eq!(scan.ready(&head[..end], 1024), end == head.len(), "after {end} bytes");
        }
        // Bare LF line ends, split between reads.
        let mut scan = HeadScan::default();
        assert!(!scan.ready(b"HTTP/1.1 200 OK\n", 1024));
        assert!(scan.ready(b"HTTP/1.1 200 OK\n\n", 1024));
        // Too much without a blank line: ready, so the parser can refuse it.
        let mut scan = HeadScan::default();
        assert!(!scan.ready(&[b'a'; 64], 64));
        assert!(scan.ready(&[b'a'; 65], 64));
        // After a head leaves the buffer, what is left is looked at whole.
        let mut scan = HeadScan::default();
        assert!(scan.ready(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", 1024));
        scan.reset();
        assert!(scan.ready(b"HTTP/1.1 200 OK\r\n\r\n", 1024));
    }

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"0042"), Some(42));
        assert_eq!(content_length(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b"+1", b"-1", b" 1", b"1 ", b"1,1", b"0x10", b"18446744073709551616"] {
            assert_eq!(content_length(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn tokens_and_the_last_coding() {
        assert!(has_token(b"keep-alive, Upgrade", "upgrade"));
        assert!(!has_token(b"keep-alive-ish", "keep-alive"));
        assert!(ends_chunked(b"gzip, Chunked"));
        assert!(!ends_chunked(b"chunked, gzip"));
        assert!(!ends_chunked(b""));
    }
}
