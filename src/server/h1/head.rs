//! The response head for an HTTP/1.1 client, written into one buffer:
//! the status line, the upstream's fields as it sent them (filtered), the
//! answer's map, the fields the proxy adds beside the map, `Date`, the
//! body's framing and the connection's fate.

use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use http_body_util::Either;
use hyper::body::Body;

use crate::http1::rules::RuleFields;
use crate::http1::{self, Fields};
use crate::server::{AnswerBody, X_REQUEST_ID};

/// What the response writer needs to know of its request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asked {
    pub(super) head: bool,
    pub(super) http11: bool,
    /// The client allows another request on the connection, and its body was read to the end.
    pub(super) keep_alive: bool,
}

/// How a response body goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framed {
    None,
    /// This many bytes, no more: a body that gives more is cut there and a
    /// shorter one closes the connection, so the client never reads one
    /// response's bytes as the next one's.
    Length(u64),
    Chunked,
    UntilClose,
}

/// The fields this instance adds to an answer beside its map
/// ([`Answer`](crate::server::Answer)).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ours<'a> {
    /// The request id, replacing any the upstream sent.
    pub(super) request_id: Option<&'a HeaderValue>,
    /// This instance's `Via`, after the upstream's, on an upstream's answer.
    pub(super) via: Option<&'a HeaderValue>,
    /// The header rules' edits: fields not written, and fields after the map's.
    pub(super) rules: &'a RuleFields,
}

/// Writes a response head into `out`: the status line, the fields (an
/// upstream's as it sent them, then the map's, which replace same-named
/// ones but `Via`, then `ours`), `Date`, the body's framing and the
/// connection's fate. Returns how the body goes and whether the connection
/// stays open after it.
pub(super) fn write_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    body: &AnswerBody,
    ours: Ours<'_>,
    asked: Asked,
) -> (Framed, bool) {
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    let upstream = match body {
        Either::Left(b) => Some(b.fields()),
        Either::Right(_) => None,
    };
    let close = headers.get_all(header::CONNECTION).iter().any(|v| http1::has_token(v.as_bytes(), "close"));
    let mut keep = asked.keep_alive && !close;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let framed = if http1::bodiless(status, asked.head) {
        Framed::None
    } else if let Some(value) = headers
        .get(header::CONTENT_LENGTH)
        .map(|v| v.as_bytes())
        .or_else(|| upstream.and_then(|f| f.get("content-length")))
    {
        match http1::content_length(value) {
            Some(n) => Framed::Length(n),
            None => {
                keep = false;
                Framed::UntilClose
            }
        }
    } else if let Some(n) = body.size_hint().exact() {
        http1::write::field(out, "content-length", itoa::Buffer::new().format(n).as_bytes());
        Framed::Length(n)
    } else if asked.http11 {
        http1::write::field(out, "transfer-encoding", b"chunked");
        Framed::Chunked
    } else {
        keep = false;
        Framed::UntilClose
    };
    // A `Date` among the fields written is the answer's; else this server's.
    if !fields(out, upstream, headers, ours, switching) {
        http1::write::field(out, "date", &http_date());
    }
    if !switching {
        if !keep {
            http1::write::field(out, "connection", b"close");
        } else if !asked.http11 {
            http1::write::field(out, "connection", b"keep-alive");
        }
    }
    out.extend_from_slice(b"\r\n");
    (framed, keep)
}

/// Writes the fields: the upstream's as it sent them (but `Connection`,
/// and those the map or `ours` replace), the map's (but `Connection`,
/// unless switching protocols, and a request id `ours` replaces), then
/// `ours`: this proxy's `Via` after the upstream's, the request id.
/// Returns whether one of the fields written is a `Date`.
fn fields(out: &mut Vec<u8>, upstream: Option<&Fields>, headers: &HeaderMap, ours: Ours<'_>, switching: bool) -> bool {
    let mut dated = false;
    let mut write = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        dated |= name.eq_ignore_ascii_case(b"date");
        http1::write::field(out, name, value);
    };
    for (name, value) in upstream.iter().flat_map(|f| f.iter()) {
        let replaced = || {
            (ours.request_id.is_some() && name.eq_ignore_ascii_case(X_REQUEST_ID.as_str().as_bytes()))
                || headers.keys().any(|k| k != header::VIA && name.eq_ignore_ascii_case(k.as_str().as_bytes()))
        };
        if !name.eq_ignore_ascii_case(b"connection") && ours.rules.keeps(name) && !replaced() {
            write(out, name, value);
        }
    }
    for (name, value) in headers {
        // The connection's fate is this server's to say (a 101 keeps its
        // `Connection: upgrade`); an upstream's id moved here is replaced.
        let fate = name == header::CONNECTION && !switching;
        let replaced = ours.request_id.is_some() && name == X_REQUEST_ID;
        if !(fate || replaced) && ours.rules.keeps(name.as_str().as_bytes()) {
            write(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    for (name, value) in ours.rules.put() {
        write(out, name.as_str().as_bytes(), &value);
    }
    if let Some(via) = ours.via {
        http1::write::field(out, header::VIA.as_str(), via.as_bytes());
    }
    if let Some(id) = ours.request_id {
        http1::write::field(out, X_REQUEST_ID.as_str(), id.as_bytes());
    }
    dated
}

/// `Date` for a response: the current second's, formatted once per second per thread.
pub(in crate::server) fn http_date() -> [u8; 29] {
    use std::cell::Cell;
    thread_local! {
        static CACHED: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|c| {
        let (at, text) = c.get();
        if at == second {
            return text;
        }
        let mut fresh = [0u8; 29];
        let formatted = httpdate::fmt_http_date(now);
        if formatted.len() == fresh.len() {
            fresh.copy_from_slice(formatted.as_bytes());
        }
        c.set((second, fresh));
        fresh
    })
}
