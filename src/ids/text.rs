//! Byte-level checks shared by the codecs. Written by hand because the
//! standard integer parsers accept a leading `+` (spec §0.1) and the `uuid`
//! crate accepts braces, URNs and the 32-digit form; these accept exactly one
//! shape and check every position before converting.

use super::Reason;

const INVALID: u8 = 0xff;

/// Value of an ASCII hex digit (either case), or `INVALID`.
const HEX: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";

/// Parses the 36-character `8-4-4-4-12` UUID text form (hex case-insensitive)
/// into its 128-bit big-endian value. No braces, URN prefix or hyphenless form.
pub(crate) fn parse_uuid(s: &str) -> Result<u128, Reason> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return Err(Reason::BadLength);
    }
    let mut v: u128 = 0;
    let mut bad = false;
    for (i, &c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            bad |= c != b'-';
        } else {
            let d = HEX[c as usize];
            bad |= d == INVALID;
            v = (v << 4) | u128::from(d & 0x0f);
        }
    }
    if bad {
        Err(Reason::BadFormat)
    } else {
        Ok(v)
    }
}

/// Writes `v` in the lowercase `8-4-4-4-12` form.
pub(crate) fn write_uuid(v: u128, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let mut out = [0u8; 36];
    let mut k = 0;
    for (i, o) in out.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            *o = b'-';
        } else {
            *o = LOWER_HEX[((v >> (124 - 4 * k)) & 0xf) as usize];
            k += 1;
        }
    }
    // Every byte written above is ASCII.
    f.write_str(std::str::from_utf8(&out).map_err(|_| std::fmt::Error)?)
}

/// Parses a canonical unsigned decimal: `0` or `[1-9][0-9]*`, fitting in u64.
pub(crate) fn parse_decimal_u64(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 20 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_rejects_what_std_accepts() {
        assert_eq!(parse_decimal_u64("+5"), None);
        assert_eq!(parse_decimal_u64(" 5"), None);
        assert_eq!(parse_decimal_u64("05"), None);
        assert_eq!(parse_decimal_u64("0"), Some(0));
        assert_eq!(parse_decimal_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_decimal_u64("18446744073709551616"), None);
        assert_eq!(parse_decimal_u64("\u{661}"), None); // Arabic-Indic one
    }

    #[test]
    fn uuid_shape() {
        assert_eq!(parse_uuid("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"), Ok(0x017F22E279B07CC398C4DC0C0C07398F));
        assert_eq!(parse_uuid("017F22E2-79B0-7CC3-98C4-DC0C0C07398"), Err(Reason::BadLength));
        assert_eq!(parse_uuid("017F22E2+79B0-7CC3-98C4-DC0C0C07398F"), Err(Reason::BadFormat));
        assert_eq!(parse_uuid("017F22E2-79B0-7CC3-98C4-DC0C0C07398g"), Err(Reason::BadFormat));
    }
}
