//! A head's header fields kept as the bytes they arrived in: the head
//! itself and, per field, where its name and value lie in it.
//!
//! ```text
//! head   = status-line *( field-line CRLF ) CRLF      one shared `Bytes`
//! Fields = [ (name range, value range, kept) ... ]    in arrival order
//! ```
//!
//! Why not a `HeaderMap`: on the way from an upstream to an HTTP/1.1
//! client a response's fields are only filtered and written out again.
//! Building the map (a `HeaderName` and a `HeaderValue` per field, hashed
//! and inserted), filtering it and dropping it is a measurable share of a
//! proxied request's work (`benches/load/instructions.py`); ranges cost
//! none of that. Fields are dropped by name
//! (case-insensitively, as field names compare), never edited; whoever needs
//! a map (an HTTP/2 client, a fan-out reading `Content-Length`) gets one from
//! [`Fields::move_into`]. The parser that made the ranges (`httparse`) has
//! already checked every name is a token and every value free of control
//! characters, the checks `HeaderName` and `HeaderValue` would repeat.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// One field: where its name and value lie in the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
    kept: bool,
}

/// A head's fields, as ranges of the head's bytes.
#[derive(Clone, Debug, Default)]
pub struct Fields {
    head: Bytes,
    list: Vec<Field>,
}

impl PartialEq for Fields {
    /// The same kept fields, in the same order (wherever their bytes lie).
    fn eq(&self, other: &Fields) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Fields {
    /// No fields yet, room for `count`; the head's bytes come with
    /// [`Fields::set_head`] (a parser knows the ranges before the head
    /// leaves its read buffer).
    pub(crate) fn with_capacity(count: usize) -> Fields {
        Fields { head: Bytes::new(), list: Vec::with_capacity(count) }
    }

    /// The head the ranges are of.
    pub(crate) fn set_head(&mut self, head: Bytes) {
        self.head = head;
    }

    /// Adds a field whose name and value are the byte ranges given of the
    /// head. A head is at most a few hundred kilobytes, so offsets fit 32
    /// bits; a range that does not is not added. A range outside the head
    /// reads as empty, never panics.
    pub(crate) fn push(&mut self, name: std::ops::Range<usize>, value: std::ops::Range<usize>, kept: bool) {
        let fit = |r: std::ops::Range<usize>| Some((u32::try_from(r.start).ok()?, u32::try_from(r.end).ok()?));
        if let (Some(name), Some(value)) = (fit(name), fit(value)) {
            self.list.push(Field { name, value, kept });
        }
    }

    fn bytes(&self, (start, end): (u32, u32)) -> &[u8] {
        self.head.get(start as usize..end as usize).unwrap_or_default()
    }

    /// The kept fields, in order: name as sent, value.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.list.iter().filter(|f| f.kept).map(|f| (self.bytes(f.name), self.bytes(f.value)))
    }

    /// How many fields are kept.
    pub fn len(&self) -> usize {
        self.list.iter().filter(|f| f.kept).count()
    }

    /// Whether no field is kept.
    pub fn is_empty(&self) -> bool {
        !self.list.iter().any(|f| f.kept)
    }

    /// The value of the first kept field named `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }

    /// Drops every field whose name (as sent) `drop` says to.
    pub fn drop_where(&mut self, mut drop: impl FnMut(&[u8]) -> bool) {
        for i in 0..self.list.len() {
            let f = self.list[i];
            if f.kept && drop(self.bytes(f.name)) {
                self.list[i].kept = false;
            }
        }
    }

    /// Moves the kept fields into `map`, before the fields already there; a
    /// field whose name the map already holds is left out (the map's value
    /// replaces it), except `Via`, which each hop appends to.
    pub fn move_into(self, map: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        if map.is_empty() {
            // The common case (an upstream's answer, nothing added yet): the
            // fields go straight in, with no map rebuilt and no name looked up.
            map.reserve(self.len());
            self.append_to(map, |_| true);
            return;
        }
        let old = std::mem::take(map);
        let mut out = HeaderMap::with_capacity(self.len() + old.len());
        self.append_to(&mut out, |name| name == header::VIA || !old.contains_key(name));
        let mut last = None;
        for (name, value) in old {
            // `None`: another value of the name before.
            if let Some(name) = name {
                last = Some(name);
            }
            if let Some(name) = &last {
                out.append(name.clone(), value);
            }
        }
        *map = out;
    }

    /// Appends the kept fields whose names `keep` says to `map`.
    fn append_to(&self, map: &mut HeaderMap, keep: impl Fn(&HeaderName) -> bool) {
        for f in self.list.iter().filter(|f| f.kept) {
            // Both were checked by the parser that made the ranges; a field
            // either would refuse is left out rather than trusted.
            let Ok(name) = HeaderName::from_bytes(self.bytes(f.name)) else { continue };
            if !keep(&name) {
                continue;
            }
            let Some(range) = self.head.get(f.value.0 as usize..f.value.1 as usize) else { continue };
            if let Ok(value) = HeaderValue::from_maybe_shared(self.head.slice_ref(range)) {
                map.append(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(head: &'static str) -> Fields {
        let head = Bytes::from_static(head.as_bytes());
        let mut out = Fields::with_capacity(4);
        out.set_head(head.clone());
        let mut at = 0;
        for line in head.split(|&b| b == b'\n') {
            if let Some(colon) = line.iter().position(|&b| b == b':') {
                let end = line.len() - usize::from(line.ends_with(b"\r"));
                out.push(at..at + colon, at + colon + 2..at + end, true);
            }
            at += line.len() + 1;
        }
        out
    }

    #[test]
    fn names_compare_without_case_and_dropped_fields_are_gone() {
        let mut f = fields("X-A: 1\r\nDate: d\r\nx-a: 2\r\nVia: 1.1 up\r\n");
        assert_eq!(f.get("x-a"), Some(&b"1"[..]));
        assert_eq!(f.get("date"), Some(&b"d"[..]));
        assert_eq!(f.len(), 4);
        f.drop_where(|n| n.eq_ignore_ascii_case(b"x-a"));
        assert_eq!(f.iter().collect::<Vec<_>>(), [(&b"Date"[..], &b"d"[..]), (&b"Via"[..], &b"1.1 up"[..])]);
        assert_eq!(f.get("x-a"), None);
    }

    #[test]
    fn the_map_replaces_same_named_fields_but_via_is_appended() {
        let f = fields("X-Request-Id: up\r\nVia: 1.1 up\r\nX-B: b\r\nx-b: c\r\n");
        let mut map = HeaderMap::new();
        map.insert("x-request-id", HeaderValue::from_static("mine"));
        map.append("via", HeaderValue::from_static("1.1 me"));
        map.append("via", HeaderValue::from_static("1.1 me-too"));
        f.move_into(&mut map);
        let all: Vec<(&str, &[u8])> = map.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(
            all,
            [
                ("via", &b"1.1 up"[..]),
                ("via", b"1.1 me"),
                ("via", b"1.1 me-too"),
                ("x-b", b"b"),
                ("x-b", b"c"),
                ("x-request-id", b"mine"),
            ]
        );
    }

    #[test]
    fn ranges_outside_the_head_read_as_empty() {
        let mut f = Fields::with_capacity(1);
        f.set_head(Bytes::from_static(b"a: b"));
        f.push(0..1, 3..9, true);
        let (start, end) = (2, 1);
        f.push(start..end, 3..4, true);
        assert_eq!(f.iter().collect::<Vec<_>>(), [(&b"a"[..], &b""[..]), (&b""[..], &b"b"[..])]);
        let mut map = HeaderMap::new();
        f.move_into(&mut map);
        assert!(map.is_empty(), "{map:?}");
    }

    #[test]
    fn fields_move_into_an_empty_map_in_order_with_repeats_and_without_the_dropped() {
        let mut f = fields("Set-Cookie: a=1\r\nX-Drop: 1\r\nContent-Type: text/plain\r\nset-cookie: b=2\r\n");
        f.drop_where(|n| n.eq_ignore_ascii_case(b"x-drop"));
        let mut map = HeaderMap::new();
        f.move_into(&mut map);
        let all: Vec<(&str, &[u8])> = map.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(all, [("set-cookie", &b"a=1"[..]), ("set-cookie", b"b=2"), ("content-type", b"text/plain")]);
        // Nothing kept: the map stays as it is.
        let mut f = fields("X-Gone: 1\r\n");
        f.drop_where(|_| true);
        f.move_into(&mut map);
        assert_eq!(map.len(), 3);
    }
}
