//! A response head (RFC 9112 §4), parsed out of an upstream connection's
//! read buffer, and how its body is delimited (§6.3):
//!
//! ```text
//! status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF
//! body        = none      for HEAD, 1xx, 204, 304
//!             | chunked   Transfer-Encoding: chunked
//!             | to close  no length at all
//!             | n bytes   Content-Length (repeats and lists must agree)
//! ```
//!
//! Refused: lengths that disagree, any `Transfer-Encoding` in HTTP/1.0,
//! and on a body a coding other than `chunked` (the client never asked for
//! one, and the body is framed anew on its leg, so the coding could not
//! reach it) or a field that does not end in `chunked`. Of agreeing length
//! fields only the first value is kept for the client.
//!
//! Keep-alive: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
//! `Connection: keep-alive`, never for a body delimited by the close.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::{Method, StatusCode, Version};

use super::{
    connection, content_length, ends_chunked, other_coding, parse_error, range_in, Error, Fields, Framing, Part, Reason,
};

/// Most header fields in a response head.
pub const MAX_HEADERS: usize = 100;
/// Largest response head, in bytes.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status.
    pub status: StatusCode,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: Version,
    /// Header fields, in order, as sent (see [`Fields`] for why not a map);
    /// without the hop-by-hop fields this head's framing and keep-alive
    /// consumed (`Transfer-Encoding`, `Keep-Alive`, `Proxy-Connection`, and
    /// `Connection` when it lists only `close`, `keep-alive` or `upgrade`):
    /// they describe this connection only, and a proxy would remove them
    /// anyway. A `Connection` naming other fields is kept, so the caller can
    /// remove those too.
    pub fields: Fields,
    /// How the body is delimited (given the request's method).
    pub framing: Framing,
    /// Whether the connection may carry another request after this response.
    pub keep_alive: bool,
}

/// Whether a `Connection` value lists only tokens about the connection
/// itself (`close`, `keep-alive`, `upgrade`), no field names.
fn only_connection_tokens(value: &[u8]) -> bool {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).all(|t| {
        t.is_empty()
            || t.eq_ignore_ascii_case(b"close")
            || t.eq_ignore_ascii_case(b"keep-alive")
            || t.eq_ignore_ascii_case(b"upgrade")
    })
}

/// Whether a response with `status` to a request (a `HEAD` when
/// `to_head`) has no body, whatever its fields say (RFC 9112 §6.3 rule 1).
pub fn bodiless(status: StatusCode, to_head: bool) -> bool {
    to_head || status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
}

/// Parses a response head at the start of `buf`, for a request with
/// `method`. `Ok(None)`: incomplete, read more. On success the head's bytes
/// leave `buf`. A 1xx head is returned like any other (the caller skips
/// it, or switches protocols on a 101).
pub fn parse_response(buf: &mut BytesMut, method: &Method) -> Result<Option<ResponseHead>, Error> {
    let err = |r| Error::new(Part::ResponseHead, r);
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let bytes: &[u8] = buf;
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, bytes, &mut fields)
    {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => return Err(err(Reason::HeadTooLarge)),
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > MAX_HEAD_BYTES => return Err(err(Reason::HeadTooLarge)),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(parse_error(Part::ResponseHead, e)),
    };
    let (Some(minor), Some(code)) = (resp.version, resp.code) else { return Err(err(Reason::Status)) };
    let status = StatusCode::from_u16(code).map_err(|_| err(Reason::Status))?;
    let http11 = minor == 1;
    let mut keep_alive = http11;
    // Each field's name and value as ranges of the head, which stays where
    // it lies: only the ranges are kept, the head's bytes join them once
    // they leave the buffer.
    let mut out = Fields::with_capacity(resp.headers.len());
    let FramingFields { length, bad_length, encoded, chunked, other } =
        read_fields(resp.headers, bytes, http11, &mut keep_alive, &mut out);
    out.set_head(buf.split_to(len).freeze());
    // Transfer-Encoding beside a length (valid or not): the length is
    // ignored, and dropped (whoever reads the fields next must not frame the
    // body by it), and the connection is not trusted with another message
    // (§6.3 rule 3).
    let overridden = encoded && (length.is_some() || bad_length);
    if overridden {
        out.drop_where(|name| name.eq_ignore_ascii_case(b"content-length"));
    }
    // An HTTP/1.0 message cannot be chunked: its framing is faulty
    // (RFC 9112 §6.1), and passing it on would hand the client raw chunks.
    if encoded && !http11 {
        return Err(err(Reason::EncodingInHttp10));
    }
    let bodiless = bodiless(status, *method == Method::HEAD);
    if other && !bodiless {
        return Err(err(Reason::OtherCoding));
    }
    let framing = match (bodiless, encoded, length) {
        (true, _, _) => Framing::Empty,
        (false, true, _) if chunked => Framing::Chunked,
        // No coding at all (`Transfer-Encoding: chunked,`, an empty field):
        // read to the close, the client would get the chunks' framing.
        (false, true, _) => return Err(err(Reason::NotChunked)),
        (false, false, _) if bad_length => return Err(err(Reason::ContentLength)),
        (false, false, Some(0)) => Framing::Empty,
        (false, false, Some(n)) => Framing::Length(n),
        (false, false, None) => Framing::UntilClose,
    };
    if framing == Framing::UntilClose || overridden {
        keep_alive = false;
    }
    Ok(Some(ResponseHead {
        status,
        version: if http11 { Version::HTTP_11 } else { Version::HTTP_10 },
        fields: out,
        framing,
        keep_alive,
    }))
}

/// What the framing fields of a response say.
struct FramingFields {
    length: Option<u64>,
    bad_length: bool,
    encoded: bool,
    chunked: bool,
    /// A coding other than `chunked` is named.
    other: bool,
}

/// Puts the parsed fields (slices of `head`) into `out` as ranges,
/// reading keep-alive and what the framing fields say on the way; the
/// hop-by-hop fields they consumed are not kept.
fn read_fields(
    fields: &[httparse::Header<'_>],
    head: &[u8],
    http11: bool,
    keep_alive: &mut bool,
    out: &mut Fields,
) -> FramingFields {
    let mut seen = FramingFields { length: None, bad_length: false, encoded: false, chunked: false, other: false };
    let mut close = false;
    for h in fields {
        let (name, value) = (h.name.as_bytes(), h.value);
        // Matched on the length first: most names are none of these.
        let kept = match name.len() {
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                seen.encoded = true;
                seen.chunked = ends_chunked(value);
                // `chunked` alone, as nearly every chunked answer says, names no other.
                seen.other |= !(seen.chunked && value.len() == 7) && other_coding(value).is_some();
                false
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                // A list (`5, 5`) or a repeat is fine when every element
                // agrees. Only the first field's first element goes on: a
                // client may refuse a repeat or a list (an HTTP/2 client
                // resets the stream), and a HEAD or 304 answer's length is
                // in no body.
                let first = seen.length.is_none() && !seen.bad_length;
                let mut parts = 0;
                for part in value.split(|&b| b == b',') {
                    parts += 1;
                    match (content_length(part.trim_ascii()), seen.length) {
                        (None, _) => seen.bad_length = true,
                        (Some(n), Some(prev)) if n != prev => seen.bad_length = true,
                        (Some(n), _) => seen.length = Some(n),
                    }
                }
                if first && parts > 1 {
                    first_of_list(out, head, name, value);
                    false
                } else {
                    first
                }
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                connection(value, http11, &mut close, keep_alive);
                !only_connection_tokens(value)
            }
            10 if name.eq_ignore_ascii_case(b"keep-alive") => false,
            16 if name.eq_ignore_ascii_case(b"proxy-connection") => false,
            _ => true,
        };
        out.push(range_in(head, name), range_in(head, value), kept);
    }
    seen
}

/// A length list's first value, as a field of its own (the list itself is
/// not kept). Out of line: nearly every answer gives one length.
#[cold]
fn first_of_list(out: &mut Fields, head: &[u8], name: &[u8], value: &[u8]) {
    let one = value.split(|&b| b == b',').next().unwrap_or(value).trim_ascii();
    out.push(range_in(head, name), range_in(head, one), true);
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn parse(text: &str, method: Method) -> Result<Option<ResponseHead>, Error> {
        parse_response(&mut BytesMut::from(text.as_bytes()), &method)
    }

    fn framing(text: &str, method: Method) -> Option<(Framing, bool)> {
        parse(text, method).ok().flatten().map(|h| (h.framing, h.keep_alive))
    }

    #[test]
    fn the_body_is_delimited_as_section_6_3_says() -> TestResult {
        let get = Method::GET;
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", get.clone()),
            Some((Framing::Length(5), true))
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Method::HEAD), Some((Framing::Empty, true)));
        assert_eq!(framing("HTTP/1.1 204 No Content\r\n\r\n", get.clone()), Some((Framing::Empty, true)));
        assert_eq!(
            framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", get.clone()),
            Some((Framing::Empty, true))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", get.clone()),
            Some((Framing::Chunked, true))
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n", get.clone()), Some((Framing::UntilClose, false)));
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", get.clone()),
            Some((Framing::Length(5), true))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", get.clone()),
            Some((Framing::Chunked, false))
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", get.clone()),
            Some((Framing::Length(1), false))
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n", get.clone()),
            Some((Framing::Length(1), true))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", get),
            Some((Framing::Length(1), false))
        );
        Ok(())
    }

    #[test]
    fn bad_lengths_and_statuses_are_refused() {
        let reason = |t: &str| parse(t, Method::GET).err().map(|e| e.reason);
        assert_eq!(
            reason("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            Some(Reason::ContentLength)
        );
        assert_eq!(reason("HTTP/1.1 200 OK\r\nContent-Length: five\r\n\r\n"), Some(Reason::ContentLength));
        assert_eq!(
            reason("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
            Some(Reason::EncodingInHttp10)
        );
        assert_eq!(reason("HTTP/1.1 2000 OK\r\n\r\n"), Some(Reason::Status));
        assert_eq!(reason("HTTP/1.1 099 OK\r\n\r\n"), Some(Reason::Status));
        assert!(matches!(parse("HTTP/1.1 200 OK\r\n", Method::GET), Ok(None)));
    }

    #[test]
    fn the_head_leaves_the_buffer_and_values_are_kept() -> TestResult {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nframes"[..],
        );
        let head = parse_response(&mut buf, &Method::GET)?.ok_or("complete")?;
        assert_eq!(head.status, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(head.framing, Framing::Empty);
        assert_eq!(head.fields.get("upgrade"), Some(&b"websocket"[..]));
        assert_eq!(&buf[..], b"frames");
        Ok(())
    }

    #[test]
    fn fields_the_framing_consumed_are_not_kept() -> TestResult {
        let text = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
                    Transfer-Encoding: chunked\r\nProxy-Connection: close\r\nX-A: 1\r\n\r\n";
        let head = parse(text, Method::GET)?.ok_or("complete")?;
        let names: Vec<&[u8]> = head.fields.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"X-A"[..]]);
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, true));
        // A Connection that names fields stays, for the caller to remove them.
        let head = parse("HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\r\n", Method::GET)?
            .ok_or("complete")?;
        assert_eq!(head.fields.get("connection"), Some(&b"close, X-Secret"[..]));
        assert!(!head.keep_alive);
        Ok(())
    }

    #[test]
    fn a_length_beside_transfer_encoding_is_dropped_with_it() -> TestResult {
        let text = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\ncontent-length: 10\r\n\r\n";
        let head = parse(text, Method::GET)?.ok_or("complete")?;
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, false));
        assert!(head.fields.is_empty(), "{:?}", head.fields);
        // A length that is not one is dropped the same way.
        let text = "HTTP/1.1 200 OK\r\nContent-Length: abc\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = parse(text, Method::GET)?.ok_or("complete")?;
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, false));
        assert!(head.fields.is_empty(), "{:?}", head.fields);
        Ok(())
    }

    #[test]
    fn a_coding_other_than_chunked_on_a_body_is_refused() -> TestResult {
        for text in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(parse(text, Method::GET).err().map(|e| e.reason), Some(Reason::OtherCoding), "{text:?}");
        }
        for text in [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: \r\n\r\n",
        ] {
            assert_eq!(parse(text, Method::GET).err().map(|e| e.reason), Some(Reason::NotChunked), "{text:?}");
        }
        // Where no body comes, the field only describes one: nothing to refuse.
        let text = "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(parse(text, Method::GET)?.map(|h| h.framing), Some(Framing::Empty));
        let text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(parse(text, Method::HEAD)?.map(|h| h.framing), Some(Framing::Empty));
        Ok(())
    }

    #[test]
    fn one_length_goes_on_however_many_agreed() -> TestResult {
        for text in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length:  5 ,5\r\ncontent-length: 5\r\n\r\n",
        ] {
            let head = parse(text, Method::GET)?.ok_or("complete")?;
            assert_eq!(head.framing, Framing::Length(5));
            let lengths: Vec<&[u8]> =
                head.fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length")).map(|(_, v)| v).collect();
            assert_eq!(lengths, [&b"5"[..]], "{text:?}");
        }
        // A HEAD answer keeps its length, though it has no body.
        let text = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
        let head = parse(text, Method::HEAD)?.ok_or("complete")?;
        assert_eq!((head.framing, head.fields.get("content-length")), (Framing::Empty, Some(&b"5"[..])));
        Ok(())
    }
}
