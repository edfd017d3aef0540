//! Extract: find the route's id in the request (path parameter, header,
//! query parameter, or a field of a gRPC call's first message). Pure and
//! synchronous; borrows from the request.

use std::borrow::Cow;

use http::HeaderMap;

use crate::routing::IdSource;

use super::error::ProxyError;

/// Where an id came from, for error messages (`path parameter 'id'`).
pub fn describe(source: &IdSource) -> String {
    match source {
        IdSource::PathParam(name) => format!("path parameter '{name}'"),
        IdSource::Header(name) => format!("header '{name}'"),
        IdSource::Query(name) => format!("query parameter '{name}'"),
        IdSource::GrpcField(path) => format!("gRPC message field {path}"),
    }
}

/// Reads the raw id. Percent-encoding in path and query values is decoded;
/// nothing is trimmed (a space is part of the id, and makes it invalid). An
/// id given more than once (two headers, a repeated query parameter) with
/// different values is ambiguous: the proxy would route by one while the
/// backend may act on the other.
///
/// A message field's bytes are the id's text, or, 16 bytes that are not
/// printable ASCII, the UUID they are (written as text, for the formats
/// to parse).
pub fn extract<'a>(
    source: &IdSource,
    path_params: &matchit::Params<'a, 'a>,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    message: Option<&'a [u8]>,
) -> Result<Cow<'a, str>, ProxyError> {
    let missing = || ProxyError::MissingId { param: describe(source) };
    let raw: Cow<'a, str> = match source {
        IdSource::PathParam(name) => percent_decode(path_params.get(name).ok_or_else(missing)?),
        IdSource::Header(name) => {
            let mut values = headers.get_all(name).iter();
            let value = values.next().ok_or_else(missing)?;
            if values.any(|other| other != value) {
                return Err(ProxyError::AmbiguousId { param: describe(source) });
            }
            match value.to_str() {
                Ok(s) => Cow::Borrowed(s),
                // obs-text bytes: an id never has them; keep them visible as
                // replacement characters so the id is rejected, not altered.
                Err(_) => Cow::Owned(String::from_utf8_lossy(value.as_bytes()).into_owned()),
            }
        }
        IdSource::Query(name) => {
            let mut values = query_params(query.unwrap_or(""), name);
            let value = values.next().ok_or_else(missing)?;
            let decoded = percent_decode(value);
            if values.any(|other| other != value && percent_decode(other) != decoded) {
                return Err(ProxyError::AmbiguousId { param: describe(source) });
            }
            decoded
        }
        IdSource::GrpcField(path) => {
            let bytes = crate::grpc::field::find(message.ok_or_else(missing)?, path)
                .map_err(|reason| ProxyError::BadMessage { detail: format!("{}: {reason}", describe(source)) })?
                .ok_or_else(missing)?;
            // A UUID's 16 bytes are never printable ASCII (its variant byte is 0x80 or more).
            let text =
                std::str::from_utf8(bytes).ok().filter(|t| t.len() != 16 || t.bytes().all(|b| b.is_ascii_graphic()));
            match (text, <[u8; 16]>::try_from(bytes)) {
                (Some(text), _) => Cow::Borrowed(text),
                (None, Ok(raw)) => Cow::Owned(uuid_text(raw)),
                (None, Err(_)) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned()),
            }
        }
    };
    if raw.is_empty() {
        return Err(missing());
    }
    Ok(raw)
}

/// 16 bytes as a UUID's text (`8-4-4-4-12` lowercase hex).
fn uuid_text(raw: [u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in raw.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The first value of `name` in a query string (`a=1&b=2`), still encoded.
pub fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query_params(query, name).next()
}

/// Every value of `name` in a query string, in order, still encoded.
pub fn query_params<'q, 'n>(query: &'q str, name: &'n str) -> impl Iterator<Item = &'q str> + use<'q, 'n> {
    query.split('&').filter_map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// Decodes `%XX` escapes (and nothing else: `+` stays `+`). Invalid escapes
/// and invalid UTF-8 after decoding are replaced, which makes any id invalid
/// rather than silently different.
pub fn percent_decode(s: &str) -> Cow<'_, str> {
    if !s.contains('%') {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (b.get(i + 1).and_then(|&c| hex(c)), b.get(i + 2).and_then(|&c| hex(c))) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
            out.extend_from_slice("\u{fffd}".as_bytes());
            i += 1;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_lookup_is_exact() {
        assert_eq!(query_param("a=1&id=x&id=y", "id"), Some("x"));
        assert_eq!(query_param("idx=1", "id"), None);
        assert_eq!(query_param("id", "id"), Some(""));
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("abc"), "abc");
        assert_eq!(percent_decode("a%2Db"), "a-b");
        assert_eq!(percent_decode("a%2"), "a\u{fffd}2");
        assert_eq!(percent_decode("%00"), "\0");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}
