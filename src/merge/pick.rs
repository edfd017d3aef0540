//! One field of a JSON object, found without building the object: the
//! other fields are skipped as the parser passes them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The raw value of field `name` of the JSON object `text` (`None` when it
/// has no such field; an error when `text` is not a JSON object). A
/// repeated field gives its last value, as most JSON readers do.
pub(super) fn field<'b>(text: &'b str, name: &str) -> Result<Option<&'b RawValue>, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let found = Pick { name }.deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(found)
}

struct Pick<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for Pick<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Pick<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_it) = map.next_key_seed(KeyIs { name: self.name })? {
            if is_it {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key is `name`, compared where it lies (no copy of the key).
struct KeyIs<'n> {
    name: &'n str,
}

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<bool, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.name)
    }
}

/// [`field`] for text already known to be valid JSON (an element the
/// array's parse returned): the object's members are walked byte by byte,
/// each value skipped by its brackets and strings, without the parser's
/// checks. Written by hand because a profile of a fan-out found `field`'s
/// full parse of every element, after the array's parse had checked the
/// same bytes, to be a third of the merge's instructions. Anything the walk
/// does not expect (a key with escapes, text that is not an object) is
/// handed to `field`, so the answer and its errors are `field`'s.
pub(super) fn member<'b>(valid: &'b str, name: &str) -> Result<Option<&'b str>, String> {
    match walk(valid.as_bytes(), name.as_bytes()) {
        Some(found) => Ok(found.and_then(|(start, end)| valid.get(start..end))),
        None => field(valid, name).map(|found| found.map(RawValue::get)),
    }
}

/// The byte range of the last value of member `name` in the object `b`
/// (`Some(None)`: no such member); `None` where `b` is not the plain
/// object this walk reads.
fn walk(b: &[u8], name: &[u8]) -> Option<Option<(usize, usize)>> {
    let mut i = blank(b, 0);
    if *b.get(i)? != b'{' {
        return None;
    }
    let mut found = None;
    i = blank(b, i + 1);
    if *b.get(i)? == b'}' {
        return Some(None);
    }
    loop {
        if *b.get(i)? != b'"' {
            return None;
        }
        let (end, escaped) = string_end(b, i)?;
        if escaped {
            return None;
        }
        let key = b.get(i + 1..end)?;
        i = blank(b, end + 1);
        if *b.get(i)? != b':' {
            return None;
        }
        let start = blank(b, i + 1);
        let stop = value_end(b, start)?;
        if key == name {
            found = Some((start, stop));
        }
        i = blank(b, stop);
        match *b.get(i)? {
            b',' => i = blank(b, i + 1),
            b'}' => return Some(found),
            _ => return None,
        }
    }
}

/// The first index at or after `i` that is not JSON whitespace.
fn blank(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index of the quote that closes the string opening at `i`, and
/// whether the string has escapes. A loop over the bytes: the strings of a
/// list's elements are short, and a `memchr` call costs more than it saves
/// on them.
fn string_end(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let (mut j, mut escaped) = (i + 1, false);
    loop {
        match *b.get(j)? {
            b'"' => return Some((j, escaped)),
            b'\\' => (j, escaped) = (j + 2, true),
            _ => j += 1,
        }
    }
}

/// The index just past the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i).map(|(e, _)| e + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => j = string_end(b, j)?.0,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let len = b.get(i..)?.iter().position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(i + len.unwrap_or(b.len() - i))
        }
    }
}

/// A JSON string's text: borrowed from the input unless it has escapes.
pub(super) fn string<'b>(raw: &'b str) -> Result<Cow<'b, str>, serde_json::Error> {
    // Without escapes, quotes or control characters inside its quotes, a
    // string is the text between them (the common id, read without the parser).
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        if super::split::plain_run(inner.as_bytes(), 0) == inner.len() {
            return Ok(Cow::Borrowed(inner));
        }
    }
    serde_json::Deserializer::from_str(raw).deserialize_str(Text)
}

struct Text;

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk's answer is the parser's on every object, and it hands
    /// what it does not read to the parser.
    #[test]
    fn member_is_field_on_valid_json() {
        let objects = [
            r#"{"id":"a","n":1}"#,
            r#"{ "n" : 1 , "id" : "a" }"#,
            "{\n\t\"id\"\r\n:\n\"a\"\n}",
            r#"{}"#,
            r#"{ }"#,
            r#"{"x":{"id":"inner","y":[1,{"id":2}]},"id":"outer"}"#,
            r#"{"x":"a \"quoted\" } ] , id","id":"after"}"#,
            r#"{"x":"ends with a backslash \\","id":"b"}"#,
            r#"{"id":"first","id":"last"}"#,
            r#"{"id":{"a":[1,2,{"b":"}"}]},"z":null}"#,
            r#"{"id":[]}"#,
            r#"{"id":-1.5e+3,"z":true}"#,
            r#"{"id":false}"#,
            r#"{"id":null,"n":0}"#,
            r#"{"other":1}"#,
            r#"{"i\u0064":"escaped key"}"#,
            r#"{"idx":"a","i":"b"}"#,
            r#"{"id":"ünïcödé ✓","n":"😀"}"#,
            r#"[1,2]"#,
            r#""id""#,
            r#"42"#,
        ];
        for text in objects {
            let parsed = field(text, "id").map(|f| f.map(RawValue::get));
            assert_eq!(member(text, "id"), parsed, "{text}");
        }
        assert_eq!(member(r#"{"x":{"id":"inner"},"id":"outer"}"#, "id"), Ok(Some(r#""outer""#)));
        assert_eq!(walk(br#"{"i\u0064":1}"#, b"id"), None, "an escaped key is the parser's");
        assert!(member("[1]", "id").is_err());
    }
}
