//! Merge: the JSON arrays that regions answer a fan-out with, made into one
//! array in one order, a page at a time. Pure: answer bytes in, page out.
//!
//! ```text
//!  answer bytes ─► items (split: one pass, borrowed, keys) ─┐
//!  answer bytes ─► items                                    ├─► page (order, after the cursor, limit) ─► write
//!  answer bytes ─► items                                    ┘
//! ```
//!
//! * Each answer is read once (`split`): its elements, borrowed, each with
//!   the field it is sorted by, the text checked as JSON on the way; what
//!   that pass does not read goes to `serde_json` (`RawValue`, and `pick`
//!   for the field), whose answer and messages stand. The elements reach the
//!   client byte for byte as their region wrote them, never re-serialised.
//! * The sort key is by default the time embedded in the element's id
//!   (iUIDs, UUIDv7, Locality UUIDs and Snowflakes are k-sortable), or a
//!   named field's value (numbers, or strings such as RFC 3339 times).
//! * The order is total: the key, then a hash of the element's id (or of
//!   the element), then the region's name, then the element's position in
//!   its region's answer (two equal elements of one region differ there).
//!   So a [`Cursor`], the last element's place in it, says exactly where
//!   the next page starts: paging returns every element once, whatever the
//!   regions' own order.
//!
//! Answers that are not JSON, have no array where the rule says, or hold an
//! element without its sort key are errors of that region ([`LegError`]),
//! never merged in part.

mod cursor;
mod pick;
mod split;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use serde_json::value::RawValue;

use crate::ids::{self, Format, Params};
use split::{Member, Raw};

pub use cursor::{Cursor, CursorError};

/// Longest string sort value, in bytes: it travels in the cursor.
pub const MAX_TEXT_KEY: usize = 1024;

/// How a fan-out route merges: where the array is, what it is ordered by.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The field of each answer holding the array; `None`: the answer is the array.
    pub items: Option<String>,
    /// What elements are ordered by.
    pub sort: SortKey,
    /// Largest first (newest first for times).
    pub descending: bool,
}

/// What elements are ordered by.
#[derive(Clone, Debug, PartialEq)]
pub enum SortKey {
    /// The time embedded in the id held in `field`, decoded as one of `formats`.
    IdTime {
        /// The element field holding the id.
        field: String,
        /// Formats the id may be in, tried in order.
        formats: Vec<Format>,
    },
    /// A field's value: numbers in numeric order before strings in byte order.
    Field(String),
}

impl SortKey {
    /// The field the key is read from.
    pub fn field(&self) -> &str {
        match self {
            SortKey::IdTime { field, .. } | SortKey::Field(field) => field,
        }
    }
}

/// One element's sort value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'b> {
    /// Unix ms from an id.
    Time(u64),
    /// A JSON number.
    Number(f64),
    /// A JSON string, unescaped.
    Text(Cow<'b, str>),
}

impl Value<'_> {
    fn cmp(&self, other: &Value<'_>) -> Ordering {
        match (self, other) {
            (Value::Time(a), Value::Time(b)) => a.cmp(b),
            (Value::Number(a), Value::Number(b)) => a.total_cmp(b),
            (Value::Text(a), Value::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Time(_) => 0,
            Value::Number(_) => 1,
            Value::Text(_) => 2,
        }
    }
}

/// An element's place in the merged order: its value, a tie-breaking hash,
/// its region, its position in the region's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Key<'b> {
    /// The sort value.
    pub value: Value<'b>,
    /// FNV-1a of the id text (id time) or of the element's bytes (field).
    pub tie: u64,
    /// The region that answered it.
    pub region: &'b str,
    /// Its position in the region's answer: no two elements share a key.
    pub index: usize,
}

impl Key<'_> {
    /// Ascending order of keys.
    fn cmp(&self, other: &Key<'_>) -> Ordering {
        self.value
            .cmp(&other.value)
            .then(self.tie.cmp(&other.tie))
            .then_with(|| self.region.cmp(other.region))
            .then(self.index.cmp(&other.index))
    }

    /// The key's leading part as one integer, ordered as the keys are:
    /// keys whose leads differ compare as their leads do, and equal leads
    /// leave the order to [`Key::cmp`]. Bits: the value's rank (2), the
    /// value (64: a time, a number's bits in total order, a text's first
    /// eight bytes), the tie's top 62; a text leaves its tie out, since
    /// texts sharing eight bytes go on to compare the rest.
    fn lead(&self) -> u128 {
        let (value, tie) = match &self.value {
            Value::Time(ms) => (*ms, self.tie),
            Value::Number(n) => {
                // `f64::total_cmp`'s order, as an unsigned integer.
                let bits = n.to_bits() as i64;
                let ordered = bits ^ ((((bits >> 63) as u64) >> 1) as i64);
                ((ordered as u64) ^ (1 << 63), self.tie)
            }
            Value::Text(t) => {
                let mut first = [0u8; 8];
                let n = t.len().min(8);
                first[..n].copy_from_slice(&t.as_bytes()[..n]);
                (u64::from_be_bytes(first), 0)
            }
        };
        u128::from(self.value.rank()) << 126 | u128::from(value) << 62 | u128::from(tie >> 2)
    }
}

/// One element of an answer, with its key.
#[derive(Clone, Debug)]
pub struct Item<'b> {
    /// Where it goes in the order.
    pub key: Key<'b>,
    /// The element as its region wrote it (valid JSON).
    pub raw: &'b str,
}

/// Why one region's answer cannot be merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegError {
    /// The body is not JSON (the parser's message).
    NotJson(String),
    /// The body is JSON but has no array where the rule says (what it found).
    NoArray(String),
    /// An element lacks a usable sort key.
    BadItem {
        /// Its position in the region's array.
        index: usize,
        /// What is wrong.
        detail: String,
    },
}

impl LegError {
    /// A stable snake_case token for logs and the failure list.
    pub const fn reason(&self) -> &'static str {
        match self {
            LegError::NotJson(_) => "invalid_json",
            LegError::NoArray(_) => "no_array",
            LegError::BadItem { .. } => "bad_item",
        }
    }
}

impl fmt::Display for LegError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LegError::NotJson(e) => write!(f, "the answer is not JSON: {e}"),
            LegError::NoArray(what) => write!(f, "the answer has no array to merge: {what}"),
            LegError::BadItem { index, detail } => write!(f, "element {index}: {detail}"),
        }
    }
}

impl std::error::Error for LegError {}

/// The elements of `region`'s answer `body`, each with its key, in the
/// answer's order.
pub fn items<'b>(spec: &Spec, params: &Params, region: &'b str, body: &'b [u8]) -> Result<Vec<Item<'b>>, LegError> {
    let text = std::str::from_utf8(body).map_err(|e| LegError::NotJson(format!("not UTF-8: {e}")))?;
    let array: &str = match &spec.items {
        None => text,
        Some(field) => match pick::field(text, field) {
            Ok(Some(raw)) => raw.get(),
            Ok(None) => return Err(LegError::NoArray(format!("no field {}", quoted(field)))),
            Err(e) => return Err(LegError::NotJson(e)),
        },
    };
    let name = spec.sort.field();
    let mut out = Vec::with_capacity(32);
    let mut add = |text: &'b str, member| {
        let index = out.len();
        let key =
            key(spec, params, region, index, text, member).map_err(|detail| LegError::BadItem { index, detail })?;
        out.push(Item { key, raw: text });
        Ok(())
    };
    // A member the parser found: not known to be a plain string.
    let parsed = |found: Result<Option<&'b str>, String>| found.map(|v| v.map(|text| Raw { text, plain: false }));
    if let Some(elements) = split::elements(array, name) {
        for e in elements {
            let member = match e.member {
                Member::Value(raw) => Ok(Some(raw)),
                Member::Absent => Ok(None),
                // The parser's message says what it is.
                Member::NotAnObject => parsed(pick::member(e.text, name)),
            };
            add(e.text, member)?;
        }
    } else {
        // The parser's pass; only when it fails is the text looked at again, to say why.
        let elements: Vec<&RawValue> =
            serde_json::from_str(array).map_err(|e| match serde_json::from_str::<&RawValue>(array) {
                Ok(value) => LegError::NoArray(format!("found {}", kind(value.get()))),
                Err(_) => LegError::NotJson(e.to_string()),
            })?;
        for raw in elements {
            add(raw.get(), parsed(pick::member(raw.get(), name)))?;
        }
    }
    Ok(out)
}

/// The key of the element `text`, whose sort field is `member` (the
/// field's value, `None` without it; an error when the element is not an
/// object).
fn key<'b>(
    spec: &Spec,
    params: &Params,
    region: &'b str,
    index: usize,
    text: &'b str,
    member: Result<Option<Raw<'b>>, String>,
) -> Result<Key<'b>, String> {
    let name = spec.sort.field();
    let value = member.map_err(|e| format!("not a JSON object: {e}"))?;
    let Some(value) = value else { return Err(format!("no field {}", quoted(name))) };
    match &spec.sort {
        SortKey::IdTime { formats, .. } => {
            let id = string(value).map_err(|_| format!("field {} is {}, not an id", quoted(name), kind(value.text)))?;
            let decoded = ids::parse_any(formats, &id, params)
                .map_err(|e| format!("field {} is not an id of the route's formats: {e}", quoted(name)))?;
            Ok(Key { value: Value::Time(decoded.unix_ms()), tie: fnv(id.as_bytes()), region, index })
        }
        SortKey::Field(_) => {
            let v = value.text;
            let value = if v.starts_with('"') {
                let text = string(value).map_err(|e| format!("field {}: {e}", quoted(name)))?;
                // It travels in the cursor, whose length is bounded.
                if text.len() > MAX_TEXT_KEY {
                    return Err(format!("field {} is longer than {MAX_TEXT_KEY} bytes", quoted(name)));
                }
                Value::Text(text)
            } else {
                match serde_json::from_str::<f64>(v) {
                    Ok(n) => Value::Number(n),
                    Err(_) => return Err(format!("field {} is {}, not a number or string", quoted(name), kind(v))),
                }
            };
            Ok(Key { value, tie: fnv(text.as_bytes()), region, index })
        }
    }
}

/// The text of the JSON string `raw`: as it lies when it is plain, else
/// the parser's reading.
fn string(raw: Raw<'_>) -> Result<Cow<'_, str>, serde_json::Error> {
    match raw.text.get(1..raw.text.len().saturating_sub(1)) {
        Some(inner) if raw.plain => Ok(Cow::Borrowed(inner)),
        _ => pick::string(raw.text),
    }
}

/// One page of the merged order.
#[derive(Debug)]
pub struct Page<'b> {
    /// The page's elements, in order.
    pub items: Vec<Item<'b>>,
    /// Where the next page starts, when elements remain after this one.
    pub next: Option<Cursor>,
}

/// Orders `all` (every region's elements) by `spec`, skips up to and
/// including `after`, and keeps `limit`.
pub fn page<'b>(spec: &Spec, mut all: Vec<Item<'b>>, after: Option<&Cursor>, limit: usize) -> Page<'b> {
    let order = |a: &Key<'_>, b: &Key<'_>| if spec.descending { b.cmp(a) } else { a.cmp(b) };
    if let Some(c) = after {
        let mark = c.key();
        all.retain(|i| order(&i.key, &mark) == Ordering::Greater);
    }
    // Sorted as (lead, position) pairs, under half an item's size, so the
    // sort moves less.
    let mut sorted: Vec<(u128, usize)> = all.iter().enumerate().map(|(n, i)| (i.key.lead(), n)).collect();
    let by = |a: &(u128, usize), b: &(u128, usize)| {
        let (a, b) = if spec.descending { (b, a) } else { (a, b) };
        a.0.cmp(&b.0).then_with(|| all[a.1].key.cmp(&all[b.1].key))
    };
    let more = limit < sorted.len();
    if more {
        // Only the page needs sorting: partition it off first.
        sorted.select_nth_unstable_by(limit, by);
        sorted.truncate(limit);
    }
    sorted.sort_unstable_by(by);
    let items: Vec<Item<'b>> = sorted.iter().map(|&(_, n)| all[n].clone()).collect();
    let next = if more { items.last().map(|i| Cursor::at(&i.key)) } else { None };
    Page { items, next }
}

/// Writes the page's elements as a JSON array (their bytes as received).
pub fn write_array(items: &[Item<'_>], out: &mut Vec<u8>) {
    out.reserve(items.iter().map(|i| i.raw.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.raw.as_bytes());
    }
    out.push(b']');
}

/// 64-bit FNV-1a: the stable tie-breaker between equal sort values.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What kind of JSON value `text` is, for messages.
fn kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

fn quoted(name: &str) -> String {
    format!("'{}'", ids::escape_for_display(name, 64))
}

#[cfg(test)]
mod tests;
