//! Byte-level checks shared by the codecs. Written by hand because the
//! standard integer parsers accept a leading `+` (spec §0.1) and the `uuid`
//! crate accepts braces, URNs and the 32-digit form; these accept exactly one
//! shape and check every position before converting.

use super::Reason;

#[cfg(test)]
const INVALID: u8 = 0xff;

/// Value of an ASCII hex digit (either case), or `INVALID` (the reference
/// the SWAR decoder [`hex8`] is tested against).
#[cfg(test)]
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

/// Parses the 36-character `8-4-4-4-12` UUID text form (hex case-insensitive)
/// into its 128-bit big-endian value. No braces, URN prefix or hyphenless form.
///
/// Every position is checked (the four hyphens, and the 32 hex digits by
/// [`hex8`], eight at a time) before the value is used; any failure is
/// `BadFormat`. This is the hot path of every UUID-shaped route, hence the
/// SWAR decoding: a per-character loop took about twice as long as
/// `uuid::Uuid::parse_str` (benches/ids.rs), this takes well under half.
pub(crate) fn parse_uuid(s: &str) -> Result<u128, Reason> {
    let b: &[u8; 36] = s.as_bytes().try_into().map_err(|_| Reason::BadLength)?;
    let hyphens = (b[8] == b'-') & (b[13] == b'-') & (b[18] == b'-') & (b[23] == b'-');
    // The 32 hex digits as four runs of 8, each little-endian in a u64 (first
    // character in the low byte): offsets 0..8, 9..13 + 14..18, 19..23 + 24..28, 28..36.
    let w = [load8(b, 0), load4(b, 9) | (load4(b, 14) << 32), load4(b, 19) | (load4(b, 24) << 32), load8(b, 28)];
    // hex8 needs ASCII bytes: a non-ASCII byte has its top bit set.
    if (w[0] | w[1] | w[2] | w[3]) & HIGH != 0 {
        return Err(Reason::BadFormat);
    }
    // Written as a loop over an array of four independent lanes so that the
    // compiler can run two of them at once in SSE2 registers.
    let mut class = [0u64; 4];
    let mut v = [0u64; 4];
    for i in 0..4 {
        (v[i], class[i]) = hex8(w[i]);
    }
    if hyphens & (class[0] & class[1] & class[2] & class[3] & HIGH == HIGH) {
        Ok((u128::from(v[0]) << 96) | (u128::from(v[1]) << 64) | (u128::from(v[2]) << 32) | u128::from(v[3]))
    } else {
        Err(Reason::BadFormat)
    }
}

#[inline(always)]
fn load8(b: &[u8; 36], i: usize) -> u64 {
    u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]])
}

#[inline(always)]
fn load4(b: &[u8; 36], i: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]))
}

/// 0x01 in every byte.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The top bit of every byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Decodes eight ASCII characters packed little-endian in `x` (first
/// character in the low byte; every byte below 0x80, which the caller
/// checks) as hex digits of either case. Returns the 32-bit value (first
/// character in the top nibble) and a mask whose byte has its top bit set
/// exactly when that byte is `[0-9A-Fa-f]` (its other bits are noise); the
/// value is meaningless unless all eight are.
///
/// SWAR ("SIMD within a register"): all eight bytes are classified and
/// converted with a handful of 64-bit operations, with no table and no
/// branch. For a byte below 0x80, adding `0x80 - k` sets its top bit exactly
/// when the byte is `>= k`, and never carries into the next byte
/// (0x7f + 0x80 - k < 0x100 for every k used here).
#[inline(always)]
fn hex8(x: u64) -> (u64, u64) {
    let digit = (x + ONES * (0x80 - b'0' as u64)) & !(x + ONES * (0x80 - b':' as u64));
    let lower = x | (ONES * 0x20); // 'A'..='F' -> 'a'..='f'; nothing else lands in that range
    let letter = (lower + ONES * (0x80 - b'a' as u64)) & !(lower + ONES * (0x80 - b'g' as u64));
    // '0'..='9' -> 0..=9 from the low nibble; 'a'/'A' (low nibble 1) ..= 'f'/'F' (6) -> +9.
    // Of the valid characters, exactly the letters have bit 6 set; reading
    // it instead of `letter` keeps the two computations independent.
    let l = (x >> 6) & ONES;
    let mut n = (x & (ONES * 0x0f)) + (l << 3) + l;
    // One nibble per byte -> 32 bits, earlier characters more significant:
    // merge neighbouring bytes, then pairs, then quads.
    n = ((n << 4) | (n >> 8)) & 0x00ff_00ff_00ff_00ff;
    n = ((n << 8) | (n >> 16)) & 0x0000_ffff_0000_ffff;
    n = ((n << 16) | (n >> 32)) & 0x0000_0000_ffff_ffff;
    (n, digit | letter)
}

/// The lowercase `8-4-4-4-12` form of `v`, as ASCII bytes.
#[inline]
pub(crate) fn uuid_ascii(v: u128) -> [u8; 36] {
    let high = hex16((v >> 64) as u64);
    let low = hex16(v as u64);
    let mut out = [b'-'; 36];
    out[0..8].copy_from_slice(&high[0..8]);
    out[9..13].copy_from_slice(&high[8..12]);
    out[14..18].copy_from_slice(&high[12..16]);
    out[19..23].copy_from_slice(&low[0..4]);
    out[24..36].copy_from_slice(&low[4..16]);
    out
}

/// The 32 lowercase hex digits of `v`, most significant first.
#[inline]
pub(crate) fn hex32(v: u128) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&hex16((v >> 64) as u64));
    out[16..].copy_from_slice(&hex16(v as u64));
    out
}

/// One in every byte of a `u128`.
const LANES: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;

/// The 16 lowercase hex digits of `x`, most significant first, computed in
/// one 128-bit register: the nibbles are spread one per byte (halves, then
/// quarters, then bytes, then nibbles), then each byte `d` becomes
/// `'0' + d`, plus 39 (`'a' - '0' - 10`) when `d > 9`. Every byte it makes
/// is one of `0-9a-f`.
#[inline]
fn hex16(x: u64) -> [u8; 16] {
    let mut n = u128::from(x);
    n = (n & 0xffff_ffff) | ((n & 0xffff_ffff_0000_0000) << 32);
    n = (n & 0x0000_0000_0000_ffff_0000_0000_0000_ffff) | ((n & 0x0000_0000_ffff_0000_0000_0000_ffff_0000) << 16);
    n = (n & 0x0000_00ff_0000_00ff_0000_00ff_0000_00ff) | ((n & 0x0000_ff00_0000_ff00_0000_ff00_0000_ff00) << 8);
    n = (n & (LANES * 0x0f)) | ((n & (LANES * 0xf0)) << 4);
    // A digit above 9 carries into bit 4 of its byte when 6 is added.
    let letters = ((n + LANES * 6) >> 4) & LANES;
    (n + LANES * u128::from(b'0') + letters * 39).to_be_bytes()
}

/// Writes `v` in the lowercase `8-4-4-4-12` form.
#[inline]
pub(crate) fn write_uuid(v: u128, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let out = uuid_ascii(v);
    // Checking what `uuid_ascii` guarantees cost about a third of
    // `Display` (criterion, `format/iuid_to_string`).
    #[allow(unsafe_code)]
    // SAFETY: `uuid_ascii` writes only `-` and the digits `hex16` makes,
    // all ASCII, so `out` is valid UTF-8; the `uuid_text_is_ascii_and_matches_uuid`
    // test checks it against an independent formatter for every nibble value
    // in every position and for random values.
    let text = unsafe { std::str::from_utf8_unchecked(&out) };
    f.write_str(text)
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

    /// The straightforward per-character parser that [`parse_uuid`] replaced,
    /// kept as the reference the SWAR version is checked against.
    fn parse_uuid_reference(s: &str) -> Result<u128, Reason> {
        let b = s.as_bytes();
        if b.len() != 36 {
            return Err(Reason::BadLength);
        }
        let mut v: u128 = 0;
        for (i, &c) in b.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != b'-' {
                    return Err(Reason::BadFormat);
                }
            } else {
                let d = HEX[c as usize];
                if d == INVALID {
                    return Err(Reason::BadFormat);
                }
                v = (v << 4) | u128::from(d);
            }
        }
        Ok(v)
    }

    #[test]
    fn hex8_agrees_with_the_table_for_every_byte_at_every_position() {
        for pos in 0..8 {
            for byte in 0..=255u8 {
                let mut chars = *b"0123abCD";
                chars[pos] = byte;
                let want: Option<u32> = chars.iter().try_fold(0u32, |v, &c| match HEX[c as usize] {
                    INVALID => None,
                    d => Some((v << 4) | u32::from(d)),
                });
                let x = u64::from_le_bytes(chars);
                if x & HIGH != 0 {
                    assert_eq!(want, None);
                    continue;
                }
                let (got, class) = hex8(x);
                let ok = class & HIGH == HIGH;
                assert_eq!(ok.then_some(got as u32), want, "byte {byte:#04x} at {pos}");
            }
        }
        // two bad bytes that could mask each other, and the extremes
        let hex = |s: &[u8; 8]| {
            let (v, class) = hex8(u64::from_le_bytes(*s));
            (class & HIGH == HIGH).then_some(v)
        };
        assert_eq!(hex(b"ffffffff"), Some(u64::from(u32::MAX)));
        assert_eq!(hex(b"FEDCBA98"), Some(0xfedc_ba98));
        assert_eq!(hex(b"00000000"), Some(0));
        assert_eq!(hex(b"/0000:00"), None);
        assert_eq!(hex(b"@000G0`0"), None);
    }

    #[test]
    fn parse_uuid_agrees_with_the_reference_on_every_byte_at_every_position() {
        let base = "017F22E2-79b0-7cc3-98C4-dc0c0c07398f";
        assert_eq!(parse_uuid(base), parse_uuid_reference(base));
        for pos in 0..36 {
            for byte in 0..=127u8 {
                let mut b = base.as_bytes().to_vec();
                b[pos] = byte;
                let s = String::from_utf8(b).unwrap_or_default();
                assert_eq!(parse_uuid(&s), parse_uuid_reference(&s), "{s:?}");
            }
            // a two-byte character in place of one: wrong length
            let mut s = base.to_string();
            s.replace_range(pos..=pos, "\u{e9}");
            assert_eq!(parse_uuid(&s), Err(Reason::BadLength));
            // three-byte characters (fullwidth digits) replacing three: right length, bad format
            if pos <= 33 {
                let mut s = base.to_string();
                s.replace_range(pos..pos + 3, "\u{ff10}");
                assert_eq!(parse_uuid(&s), Err(Reason::BadFormat), "{s:?}");
            }
        }
    }

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

    /// `v` as std formats it, hyphens inserted: an independent formatter.
    fn std_uuid_text(v: u128) -> String {
        let hex = format!("{v:032x}");
        format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
    }

    #[test]
    fn uuid_text_is_ascii_and_matches_uuid() {
        let mut values = vec![0u128, u128::MAX];
        for position in 0..32 {
            for digit in 0..16u128 {
                values.push(digit << (4 * position));
                values.push(!(digit << (4 * position)));
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834_u128;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x);
        }
        for v in values {
            let out = uuid_ascii(v);
            assert!(out.iter().all(|&b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{v:#x}");
            assert_eq!(std::str::from_utf8(&out).ok(), Some(std_uuid_text(v).as_str()), "{v:#x}");
        }
    }
}
