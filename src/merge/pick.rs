//! One field of a JSON object, found without building the object: the
//! other fields are skipped as the parser passes them. The parser's way,
//! for what the one-pass reader (`split`) leaves to it.

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

/// [`field`]'s value as text: the member's value of an element the
/// one-pass reader left to the parser.
pub(super) fn member<'b>(text: &'b str, name: &str) -> Result<Option<&'b str>, String> {
    field(text, name).map(|found| found.map(RawValue::get))
}

/// A JSON string's text: borrowed from the input unless it has escapes.
pub(super) fn string<'b>(raw: &'b str) -> Result<Cow<'b, str>, serde_json::Error> {
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
