//! `serde` support (feature `serde`): every id serializes as its canonical
//! text; the formats that parse without configuration deserialize from it
//! (Snowflake with Twitter's layout, uniqid leniently, without a shard
//! count). Sonyflake and Instagram ids need their issuer's layout to be
//! read, so they serialize only.
//!
//! ```
//! # #[cfg(feature = "serde")] {
//! use entity_ids::Iuid;
//! let id = Iuid::from_fields(1_710_512_853_183, 7, 3, 0x2e_9b1f_0a47);
//! let json = serde_json::to_string(&id).unwrap_or_default();
//! assert_eq!(json, "\"018e4282-d0bf-8007-80c0-002e9b1f0a47\"");
//! assert_eq!(serde_json::from_str::<Iuid>(&json).ok(), Some(id));
//! assert!(serde_json::from_str::<Iuid>("\"not-an-id\"").is_err());
//! # }
//! ```

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

use crate::{Instagram, Iuid, LocalityUuid, Snowflake, Sonyflake, UniqidShard, Uuid7};

macro_rules! as_text {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }
    )*};
}

macro_rules! from_text {
    ($($t:ty => $what:literal),*) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Text;
                impl Visitor<'_> for Text {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$t, E> {
                        <$t>::parse(s).map_err(|e| E::custom(format_args!("{}: {}", e.reason.code(), e.reason)))
                    }
                }
                deserializer.deserialize_str(Text)
            }
        }
    )*};
}

as_text!(Iuid, Uuid7, LocalityUuid, UniqidShard, Snowflake, Sonyflake, Instagram);
from_text!(
    Iuid => "an iUID in its 8-4-4-4-12 text form",
    Uuid7 => "a UUIDv7 in its 8-4-4-4-12 text form",
    LocalityUuid => "a locality UUID in its 8-4-4-4-12 text form",
    UniqidShard => "a uniqid with a shard prefix",
    Snowflake => "a Snowflake id in decimal"
);
