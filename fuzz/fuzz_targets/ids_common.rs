//! Shared checks of the id fuzz targets (included with `#[path]`, not a target).

#![allow(dead_code)]

use shardgate::ids::{Format, IdError};

/// The fuzz input as text. Invalid UTF-8 is replaced (U+FFFD), so every
/// input reaches the parsers; the parsers only ever see `&str`.
pub fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// A rejection: the format's own, with one of the reasons that format
/// documents ([`Format::reasons`]), on one line.
pub fn check_rejection(e: &IdError, format: Format) {
    assert_eq!(e.format, format);
    assert!(format.reasons().contains(&e.reason), "{format} rejected with {}", e.reason.code());
    assert!(!e.to_string().contains('\n'));
}

/// A UUID-shaped id's Display must be the lowercased input, and parse back.
pub fn check_uuid_display(input: &str, display: &str) {
    assert_eq!(display, input.to_ascii_lowercase(), "display of {input:?}");
    assert_eq!(display.len(), 36);
}
