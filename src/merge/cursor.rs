//! The cursor: an element's place in a merged order, carried by the client
//! between pages. Opaque to clients (lowercase hex of a short text); the
//! text names the order it belongs to, so a cursor of another order is
//! refused instead of paging wrongly.
//!
//! Text, before hex: `2|<a|d><t|v>|<t|n|s>|<tie, 16 hex>|<index>|<region>|<value>`,
//! the value last because a string value may hold any character.

use std::borrow::Cow;
use std::fmt;

use super::{Key, SortKey, Spec, Value};

/// Longest cursor accepted, in characters.
const MAX_LEN: usize = 4096;

/// Where a page ended: the key of its last element.
#[derive(Clone, Debug, PartialEq)]
pub struct Cursor {
    value: Value<'static>,
    tie: u64,
    region: String,
    index: usize,
}

/// Why a cursor was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CursorError {
    /// Not a cursor shardgate wrote (the part that is wrong).
    Malformed(&'static str),
    /// A cursor of an order other than this route's.
    OtherOrder,
}

impl fmt::Display for CursorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorError::Malformed(what) => write!(f, "not a cursor of this route ({what})"),
            CursorError::OtherOrder => f.write_str("the cursor belongs to another order; start again without it"),
        }
    }
}

impl std::error::Error for CursorError {}

fn mode(spec: &Spec) -> (char, char) {
    let dir = if spec.descending { 'd' } else { 'a' };
    let kind = match spec.sort {
        SortKey::IdTime { .. } => 't',
        SortKey::Field(_) => 'v',
    };
    (dir, kind)
}

impl Cursor {
    /// The cursor just after `key`.
    pub fn at(key: &Key<'_>) -> Cursor {
        let value = match &key.value {
            Value::Time(ms) => Value::Time(*ms),
            Value::Number(n) => Value::Number(*n),
            Value::Text(t) => Value::Text(Cow::Owned(t.to_string())),
        };
        Cursor { value, tie: key.tie, region: key.region.to_string(), index: key.index }
    }

    /// The key it marks.
    pub fn key(&self) -> Key<'_> {
        let value = match &self.value {
            Value::Time(ms) => Value::Time(*ms),
            Value::Number(n) => Value::Number(*n),
            Value::Text(t) => Value::Text(Cow::Borrowed(t)),
        };
        Key { value, tie: self.tie, region: &self.region, index: self.index }
    }

    /// The opaque text clients send back.
    pub fn encode(&self, spec: &Spec) -> String {
        let (dir, kind) = mode(spec);
        let (tag, value) = match &self.value {
            Value::Time(ms) => ('t', ms.to_string()),
            Value::Number(n) => ('n', format!("{:016x}", n.to_bits())),
            Value::Text(t) => ('s', t.to_string()),
        };
        let text = format!("2|{dir}{kind}|{tag}|{:016x}|{}|{}|{value}", self.tie, self.index, self.region);
        let mut out = String::with_capacity(text.len() * 2);
        for b in text.bytes() {
            out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        out
    }

    /// Reads a cursor of `spec`'s order.
    pub fn decode(spec: &Spec, input: &str) -> Result<Cursor, CursorError> {
        use CursorError::Malformed;
        if input.len() > MAX_LEN {
            return Err(Malformed("too long"));
        }
        if !input.len().is_multiple_of(2) {
            return Err(Malformed("odd length"));
        }
        let mut bytes = Vec::with_capacity(input.len() / 2);
        for pair in input.as_bytes().chunks_exact(2) {
            let hi = hex(pair[0]).ok_or(Malformed("not hex"))?;
            let lo = hex(pair[1]).ok_or(Malformed("not hex"))?;
            bytes.push(hi << 4 | lo);
        }
        let text = String::from_utf8(bytes).map_err(|_| Malformed("not UTF-8"))?;
        let mut parts = text.splitn(7, '|');
        let mut next = |what| parts.next().ok_or(Malformed(what));
        if next("version")? != "2" {
            return Err(Malformed("version"));
        }
        let (dir, kind) = mode(spec);
        if next("order")? != format!("{dir}{kind}") {
            return Err(CursorError::OtherOrder);
        }
        let tag = next("value kind")?;
        let tie = u64::from_str_radix(next("tie")?, 16).map_err(|_| Malformed("tie"))?;
        let index = next("index")?.parse().map_err(|_| Malformed("index"))?;
        let region = next("region")?.to_string();
        let raw = next("value")?;
        let value = match (tag, kind) {
            ("t", 't') => Value::Time(raw.parse().map_err(|_| Malformed("time"))?),
            ("n", 'v') => Value::Number(f64::from_bits(u64::from_str_radix(raw, 16).map_err(|_| Malformed("number"))?)),
            ("s", 'v') => Value::Text(Cow::Owned(raw.to_string())),
            _ => return Err(Malformed("value kind")),
        };
        Ok(Cursor { value, tie, region, index })
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}
