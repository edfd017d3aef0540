//! Shared checks of the id fuzz targets (included with `#[path]`, not a target).

#![allow(dead_code)]

use shardgate::ids::{Format, IdError};

/// The fuzz input as text. Invalid UTF-8 is replaced (U+FFFD), so every
/// input reaches the parsers; the parsers only ever see `&str`.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// The reason codes each format may reject with (the vectors' `reason` values).
pub fn check_rejection(e: &IdError, format: Format) {
    let allowed: &[&str] = match format {
        Format::Iuid => &["bad_length", "bad_format", "version_not_8", "variant_not_10", "unsupported_ver1"],
        Format::Uuidv7 => &["bad_length", "bad_format", "version_not_7", "variant_not_10"],
        Format::Locality => &["bad_length", "bad_format", "version_not_b"],
        Format::Uniqid => &[
            "too_short",
            "non_hex_in_uniq_part",
            "uppercase_hex_in_uniq_part",
            "bad_shard_prefix",
            "microseconds_out_of_range",
            "shard_out_of_range",
            "shard_prefix_mismatch",
        ],
        Format::Snowflake => &["not_canonical_decimal", "sign_bit_set"],
        Format::Sonyflake => &["not_canonical_decimal", "msb_set"],
        Format::Instagram => &["not_canonical_decimal"],
    };
    assert_eq!(e.format, format);
    assert!(allowed.contains(&e.reason.code()), "{format} rejected with {}", e.reason.code());
    assert!(!e.to_string().contains('\n'));
}

/// A UUID-shaped id's Display must be the lowercased input, and parse back.
pub fn check_uuid_display(input: &str, display: &str) {
    assert_eq!(display, input.to_ascii_lowercase(), "display of {input:?}");
    assert_eq!(display.len(), 36);
}
