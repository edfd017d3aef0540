//! A field of a protobuf message found by its field numbers, without the
//! message's schema: how a gRPC route reads the id from the first request
//! message (`id: { grpc_field: "2.1" }`: field 1 of the message in field 2).
//!
//! ```text
//! message = *field
//! field   = key value
//! key     = varint: field number << 3 | wire type
//! value   = varint                    wire type 0
//!         | 8 bytes                   wire type 1 (fixed64, double)
//!         | varint length, bytes      wire type 2 (string, bytes, message, packed)
//!         | *field, end-group key     wire type 3 (group start), 4 (group end)
//!         | 4 bytes                   wire type 5 (fixed32, float)
//! varint  = 1 to 10 bytes, 7 bits each, low first, high bit = more
//! ```
//!
//! Every field is walked over, known or not; groups (proto2) are skipped to
//! their end. Each field on the path must be length-delimited and appear at
//! most once in its message: a parser merges repeated embedded messages and
//! keeps the last of repeated strings, so a message naming the id twice
//! could be routed by one and served by the other; it is refused instead.
//! The walk reads the message once per level of the path, never copies, and
//! never recurses (groups are counted, not followed by calls).

use std::fmt;

/// Most levels a field path may have.
pub const MAX_DEPTH: usize = 8;

/// The largest field number protobuf allows (2^29 - 1).
const MAX_FIELD: u32 = (1 << 29) - 1;

/// Most groups open at once while one is skipped.
const MAX_GROUPS: u32 = 64;

/// A path of field numbers: `2.1` is field 1 of the message in field 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldPath {
    numbers: [u32; MAX_DEPTH],
    len: u8,
}

impl FieldPath {
    /// Reads `2.1`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        let mut path = FieldPath { numbers: [0; MAX_DEPTH], len: 0 };
        for part in text.split('.') {
            let n: u32 = part.parse().map_err(|_| format!("{part:?} is not a field number"))?;
            if !(1..=MAX_FIELD).contains(&n) {
                return Err(format!("field number {n} is outside 1 to {MAX_FIELD}"));
            }
            let slot = path.numbers.get_mut(usize::from(path.len)).ok_or(format!("more than {MAX_DEPTH} levels"))?;
            *slot = n;
            path.len += 1;
        }
        Ok(path)
    }

    /// The field numbers, outermost first.
    pub fn numbers(&self) -> &[u32] {
        &self.numbers[..usize::from(self.len)]
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.numbers().iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// Why a message's field could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The message ends inside a field.
    Truncated,
    /// A varint of more than ten bytes, or a key above 32 bits.
    BadVarint,
    /// Wire type 6 or 7, or field number 0.
    BadKey,
    /// A group end without its start, a start without its end, or groups
    /// nested deeper than this walker follows.
    BadGroup,
    /// A field on the path is not length-delimited (not a string, bytes or
    /// message).
    NotBytes,
    /// A field on the path appears more than once in its message.
    Repeated,
}

impl Reason {
    /// The reason's name, for metrics and problem details.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Truncated => "truncated",
            Reason::BadVarint => "bad_varint",
            Reason::BadKey => "bad_key",
            Reason::BadGroup => "bad_group",
            Reason::NotBytes => "not_bytes",
            Reason::Repeated => "repeated",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Truncated => "the message ends inside a field",
            Reason::BadVarint => "a varint is longer than ten bytes",
            Reason::BadKey => "a field has wire type 6 or 7, or number 0",
            Reason::BadGroup => "a group is not closed, not opened, or nested too deep",
            Reason::NotBytes => "the field is not a string, bytes or message",
            Reason::Repeated => "the field appears more than once",
        })
    }
}

impl std::error::Error for Reason {}

/// The bytes of the field at `path` in `message`; `None` when the message
/// (or a message on the way) has no such field.
pub fn find<'m>(message: &'m [u8], path: &FieldPath) -> Result<Option<&'m [u8]>, Reason> {
    let mut here = message;
    for &number in path.numbers() {
        match only(here, number)? {
            Some(inner) => here = inner,
            None => return Ok(None),
        }
    }
    Ok(Some(here))
}

/// The value of field `number` in `message`, which must be length-delimited
/// and appear at most once; every other field is walked over.
fn only(message: &[u8], number: u32) -> Result<Option<&[u8]>, Reason> {
    let mut rest = message;
    let mut found = None;
    while !rest.is_empty() {
        let (field, wire) = key(&mut rest)?;
        if field == number {
            if wire != WIRE_LEN {
                return Err(Reason::NotBytes);
            }
            if found.is_some() {
                return Err(Reason::Repeated);
            }
            found = Some(delimited(&mut rest)?);
        } else {
            skip(&mut rest, field, wire)?;
        }
    }
    Ok(found)
}

const WIRE_VARINT: u8 = 0;
const WIRE_I64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_GROUP_START: u8 = 3;
const WIRE_GROUP_END: u8 = 4;
const WIRE_I32: u8 = 5;

/// Reads a key: the field number and the wire type.
fn key(rest: &mut &[u8]) -> Result<(u32, u8), Reason> {
    let k = u32::try_from(varint(rest)?).map_err(|_| Reason::BadVarint)?;
    let (field, wire) = (k >> 3, (k & 7) as u8);
    if field == 0 || wire > WIRE_I32 {
        return Err(Reason::BadKey);
    }
    Ok((field, wire))
}

/// Reads a varint.
fn varint(rest: &mut &[u8]) -> Result<u64, Reason> {
    let mut value = 0u64;
    for (i, &b) in rest.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *rest = &rest[i + 1..];
            return Ok(value);
        }
    }
    Err(if rest.len() < 10 { Reason::Truncated } else { Reason::BadVarint })
}

/// Reads a length and that many bytes.
fn delimited<'m>(rest: &mut &'m [u8]) -> Result<&'m [u8], Reason> {
    let len = usize::try_from(varint(rest)?).map_err(|_| Reason::Truncated)?;
    take(rest, len)
}

fn take<'m>(rest: &mut &'m [u8], len: usize) -> Result<&'m [u8], Reason> {
    if len > rest.len() {
        return Err(Reason::Truncated);
    }
    let (value, after) = rest.split_at(len);
    *rest = after;
    Ok(value)
}

/// Walks over the value of a field of wire type `wire` (numbered `field`,
/// for a group's end).
fn skip(rest: &mut &[u8], field: u32, wire: u8) -> Result<(), Reason> {
    match wire {
        WIRE_VARINT => varint(rest).map(drop),
        WIRE_I64 => take(rest, 8).map(drop),
        WIRE_LEN => delimited(rest).map(drop),
        WIRE_I32 => take(rest, 4).map(drop),
        WIRE_GROUP_START => skip_group(rest, field),
        _ => Err(Reason::BadGroup),
    }
}

/// Walks to the end of group `field`, whose start was just read: its
/// fields, and the groups inside it counted rather than followed.
fn skip_group(rest: &mut &[u8], field: u32) -> Result<(), Reason> {
    // The numbers of the groups open, innermost last.
    let mut open = [0u32; MAX_GROUPS as usize];
    open[0] = field;
    let mut depth = 1usize;
    while depth > 0 {
        if rest.is_empty() {
            return Err(Reason::BadGroup);
        }
        let (f, wire) = key(rest)?;
        match wire {
            WIRE_GROUP_START => {
                let slot = open.get_mut(depth).ok_or(Reason::BadGroup)?;
                *slot = f;
                depth += 1;
            }
            WIRE_GROUP_END => {
                if open[depth - 1] != f {
                    return Err(Reason::BadGroup);
                }
                depth -= 1;
            }
            _ => skip(rest, f, wire)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A varint's bytes.
    fn v(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn key_of(field: u32, wire: u8) -> Vec<u8> {
        v(u64::from(field) << 3 | u64::from(wire))
    }

    /// A length-delimited field.
    fn bytes(field: u32, value: &[u8]) -> Vec<u8> {
        [key_of(field, WIRE_LEN), v(value.len() as u64), value.to_vec()].concat()
    }

    #[test]
    fn finds_a_top_level_and_a_nested_field_past_unknown_fields_of_every_wire_type() -> Result<(), String> {
        let id = b"018e4282-d0bf-8007-80c0-002e9b1f0a47";
        let inner = [key_of(3, WIRE_VARINT), v(300), bytes(1, id)].concat();
        let group =
            [key_of(9, WIRE_GROUP_START), key_of(1, WIRE_I32), vec![1, 2, 3, 4], key_of(9, WIRE_GROUP_END)].concat();
        let message =
            [key_of(5, WIRE_I64), vec![0; 8], group, bytes(7, b"unknown"), bytes(2, &inner), bytes(1, b"top")].concat();
        assert_eq!(find(&message, &FieldPath::parse("1")?), Ok(Some(&b"top"[..])));
        assert_eq!(find(&message, &FieldPath::parse("2.1")?), Ok(Some(&id[..])));
        assert_eq!(find(&message, &FieldPath::parse("4")?), Ok(None));
        assert_eq!(find(&message, &FieldPath::parse("2.4")?), Ok(None));
        assert_eq!(find(&message, &FieldPath::parse("2.3")?), Err(Reason::NotBytes));
        assert_eq!(find(&[], &FieldPath::parse("1")?), Ok(None));
        Ok(())
    }

    #[test]
    fn a_field_named_twice_is_refused_at_every_level() -> Result<(), String> {
        let twice = [bytes(1, b"a"), bytes(1, b"b")].concat();
        assert_eq!(find(&twice, &FieldPath::parse("1")?), Err(Reason::Repeated));
        let outer = [bytes(2, &bytes(1, b"a")), bytes(2, &bytes(3, b"x"))].concat();
        assert_eq!(find(&outer, &FieldPath::parse("2.1")?), Err(Reason::Repeated));
        Ok(())
    }

    #[test]
    fn broken_messages_say_why() -> Result<(), String> {
        let cases: [(Vec<u8>, Reason); 7] = [
            (vec![0x0a, 5, b'a'], Reason::Truncated),
            (vec![0x0a], Reason::Truncated),
            (vec![0x80; 11], Reason::BadVarint),
            (vec![0x0e], Reason::BadKey),
            (vec![0x02, 0], Reason::BadKey),
            (key_of(9, WIRE_GROUP_END), Reason::BadGroup),
            ([key_of(9, WIRE_GROUP_START), key_of(8, WIRE_GROUP_END)].concat(), Reason::BadGroup),
        ];
        for (message, reason) in cases {
            assert_eq!(find(&message, &FieldPath::parse("1")?), Err(reason), "{message:?}");
        }
        let deep: Vec<u8> = (0..=MAX_GROUPS).flat_map(|_| key_of(9, WIRE_GROUP_START)).collect();
        assert_eq!(find(&deep, &FieldPath::parse("1")?), Err(Reason::BadGroup));
        Ok(())
    }

    #[test]
    fn field_paths_are_numbers_within_protobufs_range() -> Result<(), String> {
        assert_eq!(FieldPath::parse("2.1")?.numbers(), [2, 1]);
        assert_eq!(FieldPath::parse("536870911")?.to_string(), "536870911");
        for bad in ["", "0", "1.", "a", "536870912", "1.2.3.4.5.6.7.8.9", "-1"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
