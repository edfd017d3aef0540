//! Decoded ids as JSON text, written by hand: the field names and value
//! types are fixed by the codecs, and writing bytes directly keeps
//! `shardgate decode --json` fast (the formatting machinery cost about
//! 11,000 instructions per iUID line) and this module free of dependencies.
//!
//! Field values: integers and booleans as JSON numbers and booleans, hex
//! fields as lowercase zero-padded strings, times as RFC 3339 UTC strings.

use std::io::{self, Write};

use super::clock::iso8601;
use super::text::{hex32, uuid_ascii};
use super::{Decoded, Field};

/// The fields of `d` as `"name":value` pairs separated by commas (to go
/// inside an object), the first preceded by a comma too when `after_others`.
pub fn write_field_pairs(d: &Decoded, after_others: bool, w: &mut impl Write) -> io::Result<()> {
    let mut res = Ok(());
    let mut first = !after_others;
    d.for_each_key(&mut |key, value| {
        if res.is_ok() {
            res = (|| {
                // Names are the codecs' own identifiers: nothing to escape
                // (`field_names_need_no_escaping` checks every one). The key
                // is `,"name":`; the first pair goes without its comma.
                let key = key.json.as_bytes();
                w.write_all(if first { key.get(1..).unwrap_or(key) } else { key })?;
                write_value(value, w)
            })();
            first = false;
        }
    });
    res
}

/// `{"format":"…","canonical":"…","fields":{…}}`.
pub fn write_object(d: &Decoded, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"{\"format\":\"")?;
    w.write_all(d.format().name().as_bytes())?;
    w.write_all(b"\",\"canonical\":\"")?;
    write_canonical(d, w)?;
    w.write_all(b"\",\"fields\":{")?;
    write_field_pairs(d, false, w)?;
    w.write_all(b"}}")
}

/// The id's canonical text, as its `Display` writes it (checked by a test).
pub fn write_canonical(d: &Decoded, w: &mut impl Write) -> io::Result<()> {
    match d {
        // The same digits `Display` makes (`text::uuid_ascii`).
        Decoded::Iuid(id) => w.write_all(&uuid_ascii(id.as_u128())),
        Decoded::Locality(id) => w.write_all(&uuid_ascii(id.as_u128())),
        Decoded::Uuidv7(id) => w.write_all(&uuid_ascii(id.as_u128())),
        Decoded::Snowflake(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Sonyflake(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Instagram(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Uniqid(_) => write!(w, "{d}"),
    }
}

/// `value` in lowercase hex, zero-padded to `width` digits (more digits when
/// the value needs them, like `{:0width$x}`), as a JSON string: quotes and
/// digits in one write (each write into a buffered writer costs about as
/// much as a digit pair). The digits come from `text::hex32`, all 32 in a
/// few wide operations: a digit-by-digit loop was a tenth of an iUID line.
fn write_hex_str(value: u128, width: u8, w: &mut impl Write) -> io::Result<()> {
    let needed = (128 - value.leading_zeros()).div_ceil(4).max(1) as usize;
    let n = needed.max(usize::from(width)).min(32);
    let mut out = [b'"'; 34];
    out[1..33].copy_from_slice(&hex32(value));
    out[32 - n] = b'"';
    w.write_all(&out[32 - n..])
}

/// Writes one field value as JSON: a number, a string, or a boolean.
pub fn write_value(v: Field, w: &mut impl Write) -> io::Result<()> {
    match v {
        Field::Int(n) => w.write_all(itoa::Buffer::new().format(n).as_bytes()),
        Field::Bool(b) => w.write_all(if b { b"true" } else { b"false" }),
        Field::Hex { value, width } => write_hex_str(value, width, w),
        Field::Str(s) => write_str(s, w),
        Field::TimeMs(ms) => write_iso(ms.saturating_mul(1000), 3, w),
        Field::TimeUs(us) => write_iso(us, 6, w),
    }
}

fn write_iso(us: u64, digits: u8, w: &mut impl Write) -> io::Result<()> {
    match iso8601(us, digits) {
        Some(t) => {
            // Quotes and text in one write.
            let (bytes, len) = t.to_ascii();
            let mut quoted = [b'"'; 29];
            quoted[1..=len].copy_from_slice(&bytes[..len]);
            w.write_all(&quoted[..len + 2])
        }
        None => w.write_all(b"null"),
    }
}

/// Whether `b` must be escaped in a JSON string.
const fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f
}

/// `s` as a JSON string (RFC 8259 escaping). Most strings (ids, field
/// names) need none: they are checked in one pass and written at once.
pub fn write_str(s: &str, w: &mut impl Write) -> io::Result<()> {
    let bytes = s.as_bytes();
    // A fold, not `any`: without the early exit the check vectorises (an
    // id's 36 bytes in a few wide comparisons instead of a loop of 36).
    if !bytes.iter().fold(false, |seen, &b| seen | needs_escape(b)) {
        w.write_all(b"\"")?;
        w.write_all(bytes)?;
        return w.write_all(b"\"");
    }
    w.write_all(b"\"")?;
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f | 0x7f => {
                w.write_all(&bytes[start..i])?;
                write!(w, "\\u{b:04x}")?;
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        w.write_all(&bytes[start..i])?;
        w.write_all(esc)?;
        start = i + 1;
    }
    w.write_all(&bytes[start..])?;
    w.write_all(b"\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_need_no_escaping() {
        let params = crate::Params::default();
        let mut seen = 0;
        for input in [
            "018e4282-d0bf-8007-80c0-002e9b1f0a47",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
            "20be0ffc-314a-bd53-7a50-013a65ca76d2",
            "36a016b019df3543ab",
            "1050118621198921728",
        ] {
            for d in crate::Format::ALL.iter().filter_map(|&f| crate::parse(f, input, &params).ok()) {
                d.for_each_key(&mut |key, _| {
                    let name = key.name;
                    assert_eq!(key.json, format!(",\"{name}\":"), "{name}");
                    assert!(
                        !name.is_empty()
                            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                        "{name:?}"
                    );
                    seen += 1;
                });
            }
        }
        assert!(seen > 20, "{seen}");
    }

    #[test]
    fn json_canonical_is_the_display_form_for_every_format() -> Result<(), Box<dyn std::error::Error>> {
        let params = crate::Params::default();
        for input in [
            "018E4282-D0BF-8007-8C3A-5D2E9B1F0A47",
            "20be0ffc-314a-bd53-7a50-013a65ca76d2",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
            "36a016b019df3543ab",
            "1050118621198921728",
            "0",
        ] {
            let decoded: Vec<Decoded> =
                crate::Format::ALL.iter().filter_map(|&f| crate::parse(f, input, &params).ok()).collect();
            assert!(!decoded.is_empty(), "{input}");
            for d in &decoded {
                let mut ours = Vec::new();
                write_canonical(d, &mut ours)?;
                assert_eq!(String::from_utf8(ours)?, d.to_string(), "{input} as {}", d.format());
                let mut object = Vec::new();
                write_object(d, &mut object)?;
                let v: serde_json::Value = serde_json::from_slice(&object)?;
                assert_eq!(v["canonical"], d.to_string());
            }
        }
        Ok(())
    }

    #[test]
    fn hex_matches_std_formatting() -> Result<(), Box<dyn std::error::Error>> {
        for value in [0u128, 1, 0xf, 0x10, 0xdead_beef, u128::from(u64::MAX), u128::MAX, 1 << 100] {
            for width in [0u8, 1, 4, 7, 8, 14, 16, 17, 32] {
                let mut ours = Vec::new();
                write_hex_str(value, width, &mut ours)?;
                let std = format!("\"{value:0width$x}\"", width = usize::from(width));
                assert_eq!(String::from_utf8(ours)?, std, "{value:#x} width {width}");
            }
        }
        Ok(())
    }
}
