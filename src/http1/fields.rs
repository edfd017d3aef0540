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
            map.reserve(self.list.len());
            self.append_to(map, |_| true);
            return;
        }
        let old = std::mem::take(map);
        let mut out = HeaderMap::with_capacity(self.list.len() + old.len());
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

    /// The fields of `lines` (`name: value` each), all kept.
    fn fields(lines: &[&str]) -> Fields {
        let head = lines.join("\r\n");
        let mut out = Fields::with_capacity(lines.len());
        let mut at = 0;
        for line in lines {
            let colon = line.find(':').unwrap_or(0);
            out.push(at..at + colon, at + colon + 2..at + line.len(), true);
            at += line.len() + 2;
        }
        out.set_head(Bytes::from(head));
        out
    }

    fn listed(map: &HeaderMap) -> Vec<String> {
        map.iter().map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes()))).collect()
    }

    #[test]
    fn fields_move_into_an_empty_map_in_order_with_repeats_and_without_the_dropped() {
        let mut f = fields(&["Set-Cookie: a=1", "X-Drop: 1", "Content-Type: text/plain", "set-cookie: b=2"]);
        f.drop_where(|n| n.eq_ignore_ascii_case(b"x-drop"));
        let mut map = HeaderMap::new();
        f.move_into(&mut map);
        assert_eq!(listed(&map), ["set-cookie: a=1", "set-cookie: b=2", "content-type: text/plain"]);
    }

    #[test]
    fn the_maps_fields_replace_the_moved_ones_except_via() {
        let f = fields(&["Via: 1.1 upstream", "Content-Type: text/plain", "X-Kept: 1"]);
        let mut map = HeaderMap::new();
        map.append(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        map.append(header::VIA, HeaderValue::from_static("1.1 shardgate"));
        f.move_into(&mut map);
        assert_eq!(
            listed(&map),
            ["via: 1.1 upstream", "via: 1.1 shardgate", "x-kept: 1", "content-type: application/json"]
        );
        // Nothing kept: the map stays as it is.
        let mut f = fields(&["X-Gone: 1"]);
        f.drop_where(|_| true);
        f.move_into(&mut map);
        assert_eq!(map.len(), 4);
    }
}
