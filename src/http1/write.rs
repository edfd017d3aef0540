//! Heads written into one buffer, ready for a single write: the request
//! line and fields of an upstream request. Field names go out as `http`
//! keeps them (lowercase); repeated fields go out as repeated lines, in
//! order; the fields a proxy adds ([`Added`]) go out after the client's.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Method;

use super::rules::RuleFields;

/// How many fields [`Added`] holds.
const ADDED_MAX: usize = 5;

/// The fields a proxy adds to a request on its way upstream (its
/// `X-Forwarded-*`, `Via`, and a request id it minted), written after the
/// client's fields instead of inserted into the client's header map: each
/// insert hashes the name and may grow the map, and the head writer reads
/// the fields in order anyway. Holds at most five, in the order they were
/// pushed. Header rules' fields ([`RuleFields`]) go out with them, before
/// them.
#[derive(Clone, Debug, Default)]
pub struct Added {
    fields: [Option<(AddedField, HeaderValue)>; ADDED_MAX],
    rules: RuleFields,
}

/// A field a proxy adds: its name as the head writer writes it and as a
/// header map holds it, both from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddedField {
    /// `X-Forwarded-For`.
    ForwardedFor,
    /// `X-Forwarded-Proto`.
    ForwardedProto,
    /// `X-Forwarded-Host`.
    ForwardedHost,
    /// `X-Request-Id`.
    RequestId,
    /// `Via`.
    Via,
}

impl AddedField {
    /// The name, lowercase, as written.
    pub const fn as_str(self) -> &'static str {
        match self {
            AddedField::ForwardedFor => "x-forwarded-for",
            AddedField::ForwardedProto => "x-forwarded-proto",
            AddedField::ForwardedHost => "x-forwarded-host",
            AddedField::RequestId => "x-request-id",
            AddedField::Via => "via",
        }
    }

    /// The name for a header map (made when the crate is compiled, not
    /// checked again on each use).
    pub const fn name(self) -> HeaderName {
        const FOR: HeaderName = HeaderName::from_static(AddedField::ForwardedFor.as_str());
        const PROTO: HeaderName = HeaderName::from_static(AddedField::ForwardedProto.as_str());
        const HOST: HeaderName = HeaderName::from_static(AddedField::ForwardedHost.as_str());
        const ID: HeaderName = HeaderName::from_static(AddedField::RequestId.as_str());
        match self {
            AddedField::ForwardedFor => FOR,
            AddedField::ForwardedProto => PROTO,
            AddedField::ForwardedHost => HOST,
            AddedField::RequestId => ID,
            AddedField::Via => header::VIA,
        }
    }
}

impl Added {
    /// No fields (a `const fn`, so that an empty list can be a `static`).
    pub const fn new() -> Added {
        Added { fields: [None, None, None, None, None], rules: RuleFields::new() }
    }

    /// The header rules' fields, to fill.
    pub fn rules_mut(&mut self) -> &mut RuleFields {
        &mut self.rules
    }

    /// Adds `name: value` after those already added. The list's length is
    /// fixed by the code that fills it (one per field it adds), never by
    /// input; a sixth field is a programming error, caught in tests, and
    /// dropped in a release build rather than written anywhere else.
    pub fn push(&mut self, name: AddedField, value: HeaderValue) {
        let free = self.fields.iter_mut().find(|f| f.is_none());
        debug_assert!(free.is_some(), "more than {ADDED_MAX} added fields");
        if let Some(slot) = free {
            *slot = Some((name, value));
        }
    }

    /// The fields, in order.
    pub fn iter(&self) -> impl Iterator<Item = (AddedField, &HeaderValue)> {
        self.fields.iter().map_while(|f| f.as_ref().map(|(n, v)| (*n, v)))
    }

    /// Appends the fields to `map`, for a request whose map itself is read
    /// or copied (a fan-out's or a search's legs).
    pub fn move_into(self, map: &mut HeaderMap) {
        self.rules.apply(map);
        for (name, value) in self.fields.into_iter().flatten() {
            map.append(name.name(), value);
        }
    }
}

/// The framing fields a written head carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrittenFraming {
    /// `Content-Length`.
    pub length: bool,
    /// `Transfer-Encoding`.
    pub chunked: bool,
}

/// Writes `METHOD target HTTP/1.1`, `host`, `headers` but their `Host`
/// (the endpoint's goes out instead) and those header rules replace, then
/// `added` (the rules' fields, then the proxy's): an upstream request head
/// without its blank line, so that framing fields can follow. Returns which
/// framing fields it wrote (seen on the way, rather than looked up in the
/// map again).
pub fn request_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    host: &HeaderValue,
    headers: &HeaderMap,
    added: &Added,
) -> WrittenFraming {
    out.reserve(64 + target.len() + (headers.len() + ADDED_MAX) * 32);
    request_line(out, method, target);
    field(out, "host", host.as_bytes());
    let mut seen = WrittenFraming::default();
    for (name, value) in headers {
        if name == header::HOST || !added.rules.keeps(name.as_str().as_bytes()) {
            continue;
        }
        seen.length |= name == header::CONTENT_LENGTH;
        seen.chunked |= name == header::TRANSFER_ENCODING;
        field(out, name.as_str(), value.as_bytes());
    }
    for (name, value) in added.rules.put() {
        field(out, name.as_str(), &value);
    }
    for (name, value) in added.iter() {
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
        headers.append("host", HeaderValue::from_static("client.example"));
        headers.append("x-a", HeaderValue::from_static("2"));
        headers.append("via", HeaderValue::from_static("1.1 edge"));
        let mut added = Added::default();
        added.push(AddedField::ForwardedFor, HeaderValue::from_static("10.0.0.1"));
        added.push(AddedField::Via, HeaderValue::from_static("1.1 me"));
        let mut out = Vec::new();
        let framing =
            request_head(&mut out, &Method::GET, "/v1/x?y=1", &HeaderValue::from_static("h:8080"), &headers, &added);
        assert_eq!(
            String::from_utf8(out)?,
            "GET /v1/x?y=1 HTTP/1.1\r\nhost: h:8080\r\nx-a: 1\r\nx-a: 2\r\nvia: 1.1 edge\r\n\
             x-forwarded-for: 10.0.0.1\r\nvia: 1.1 me\r\n",
            "the endpoint's host only, the client's fields, then the added ones"
        );
        assert_eq!(framing, WrittenFraming::default());
        Ok(())
    }

    #[test]
    fn added_fields_keep_their_order_in_a_map() {
        let mut added = Added::default();
        use AddedField::{ForwardedFor, ForwardedProto, Via};
        for (name, value) in [(ForwardedFor, "10.0.0.1"), (ForwardedProto, "http"), (Via, "1.1 me")] {
            added.push(name, HeaderValue::from_static(value));
        }
        let mut map = HeaderMap::new();
        map.append("via", HeaderValue::from_static("1.1 edge"));
        added.move_into(&mut map);
        let vias: Vec<&[u8]> = map.get_all("via").iter().map(HeaderValue::as_bytes).collect();
        assert_eq!(vias, [&b"1.1 edge"[..], b"1.1 me"]);
        assert_eq!(map.get("x-forwarded-proto").map(HeaderValue::as_bytes), Some(&b"http"[..]));
        assert_eq!(map.len(), 4);
    }

    #[test]
    fn rule_fields_go_out_with_the_head() -> Result<(), Box<dyn std::error::Error>> {
        use crate::http1::rules::{Line, Rules, Value};
        use std::sync::Arc;
        let line = |name: &'static str, value: Option<&'static str>, replaces| Line {
            name: HeaderName::from_static(name),
            value: value.map(|v| Value::Fixed(HeaderValue::from_static(v))),
            replaces,
        };
        let lines = vec![line("x-a", Some("set"), true), line("x-b", None, true), line("x-c", Some("2"), false)];
        let no_lists = Arc::new([Box::default(), Box::default(), Box::default()]);
        let rules = Arc::new(Rules::new(lines, no_lists).ok_or("rules")?);
        let mut headers = HeaderMap::new();
        for (n, v) in [("x-a", "1"), ("x-b", "1"), ("x-c", "1"), ("x-ab", "1")] {
            headers.append(n, HeaderValue::from_static(v));
        }
        let mut added = Added::default();
        *added.rules_mut() = RuleFields::of(&rules, [None; 3], &HeaderValue::from_static("id"));
        added.push(AddedField::Via, HeaderValue::from_static("1.1 me"));
        let mut out = Vec::new();
        request_head(&mut out, &Method::GET, "/", &HeaderValue::from_static("h"), &headers, &added);
        assert_eq!(
            String::from_utf8(out)?,
            "GET / HTTP/1.1\r\nhost: h\r\nx-c: 1\r\nx-ab: 1\r\nx-a: set\r\nx-c: 2\r\nvia: 1.1 me\r\n"
        );
        added.move_into(&mut headers);
        let all = |n: &str| headers.get_all(n).iter().map(|v| v.to_str().unwrap_or("?")).collect::<Vec<_>>();
        assert_eq!((all("x-a"), all("x-b"), all("x-c")), (vec!["set"], vec![], vec!["1", "2"]));
        Ok(())
    }
}
