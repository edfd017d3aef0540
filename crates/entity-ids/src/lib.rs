//! Entity ids that say where their entity lives: parse, read fields, format,
//! mint. The codecs behind the shardgate proxy, as a library a service links
//! to mint and read the same ids (no async runtime, no HTTP, no
//! configuration types).
//!
//! Every format has the same shape:
//!
//! * `Type::parse(&str) -> Result<Type, IdError>` validates every character
//!   position before converting anything (no `+`, no whitespace, no trimming,
//!   no Unicode digits), never allocates and never panics;
//! * field accessors (`country()`, `shard()`, `timestamp_ms()`, ...);
//! * `Display` writes the canonical (lowercase) text form;
//! * mintable formats have a `*Minter` that takes an injected [`Clock`] and a
//!   random source, and is safe to share between threads without a lock
//!   (with the `rand` feature, `mint_random` uses the thread-local RNG).
//!
//! | format | module | fields | mint |
//! |---|---|---|---|
//! | iUID (UUIDv8) | [`iuid`] | time, country, service entity, random | yes |
//! | Locality UUID (version `b`) | [`locality`] | counter, pid, MAC fragment, time | yes |
//! | uniqid with shard prefix | [`uniqid`] | shard, random prefix, seconds, microseconds | yes |
//! | UUIDv7 | [`uuid7`] | time, random | yes |
//! | Snowflake, Sonyflake, Instagram | [`snowflake`] | time, machine/shard, sequence | no |
//!
//! The exact rules, with the pitfalls of the reference implementations, are in
//! shardgate's `docs/id-formats.md`; the golden vectors the tests check are in
//! `tests/data/`.
//!
//! Shapes overlap (a 36-character UUID may be an iUID, a UUIDv7 or a Locality
//! UUID; a decimal string may be any of the 64-bit formats), so the format is
//! always chosen by the caller, never guessed. [`Format`] names them.
//!
//! Features: `rand` (default) mints with the thread-local RNG; `serde`
//! serializes ids as their canonical text (module `serde_text`).

/// A field's [`Key`]: its name, and the name as a JSON object key with the
/// punctuation around it, spelt out at compile time.
macro_rules! key {
    ($name:literal) => {
        &$crate::Key { name: $name, json: concat!(",\"", $name, "\":") }
    };
}

pub mod clock;
pub mod iuid;
pub mod json;
pub mod locality;
#[cfg(feature = "serde")]
pub mod serde_text;
pub mod snowflake;
mod text;
pub mod uniqid;
pub mod uuid7;

use std::fmt;

pub use clock::{Clock, ManualClock, SystemClock};
pub use iuid::{Iuid, IuidMinter};
pub use locality::{parse_mac_fragment, LocalityMinter, LocalityMode, LocalityUuid, NodeIdentity};
pub use snowflake::{Instagram, InstagramLayout, Snowflake, SnowflakeLayout, Sonyflake, SonyflakeFlavor};
pub use uniqid::{UniqidMinter, UniqidShard};
pub use uuid7::{Uuid7, Uuid7Minter};

/// The id formats this crate knows.
///
/// The names (`iuid`, `locality`, ...) are the ones used in routing tables,
/// on the command line and in JSON output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// inDrive Universal Entity Identifier: UUIDv8 carrying country and service entity.
    Iuid,
    /// Groupon Locality UUID, version `b`.
    Locality,
    /// PHP `uniqid()` with a decimal shard-number prefix.
    Uniqid,
    /// RFC 9562 UUIDv7.
    Uuidv7,
    /// Twitter Snowflake (64-bit, decimal).
    Snowflake,
    /// Sony Sonyflake (64-bit, decimal).
    Sonyflake,
    /// Instagram sharded id (64-bit, decimal).
    Instagram,
}

impl Format {
    /// The reasons a parse of this format may reject an input with.
    pub const fn reasons(self) -> &'static [Reason] {
        use Reason as R;
        match self {
            Format::Iuid => &[R::BadLength, R::BadFormat, R::VersionNot8, R::VariantNot10, R::UnsupportedVer1],
            Format::Uuidv7 => &[R::BadLength, R::BadFormat, R::VersionNot7, R::VariantNot10],
            Format::Locality => &[R::BadLength, R::BadFormat, R::VersionNotB],
            Format::Uniqid => &[
                R::TooShort,
                R::NonHexInUniqPart,
                R::UppercaseHexInUniqPart,
                R::BadShardPrefix,
                R::MicrosecondsOutOfRange,
                R::ShardOutOfRange,
                R::ShardPrefixMismatch,
            ],
            Format::Snowflake => &[R::NotCanonicalDecimal, R::SignBitSet],
            Format::Sonyflake => &[R::NotCanonicalDecimal, R::MsbSet],
            Format::Instagram => &[R::NotCanonicalDecimal],
        }
    }

    /// Every format, in the order `decode` reports them.
    pub const ALL: [Format; 7] = [
        Format::Iuid,
        Format::Locality,
        Format::Uniqid,
        Format::Uuidv7,
        Format::Snowflake,
        Format::Sonyflake,
        Format::Instagram,
    ];

    /// The configuration name of the format.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Iuid => "iuid",
            Format::Locality => "locality",
            Format::Uniqid => "uniqid",
            Format::Uuidv7 => "uuidv7",
            Format::Snowflake => "snowflake",
            Format::Sonyflake => "sonyflake",
            Format::Instagram => "instagram",
        }
    }

    /// Looks a format up by its configuration name (exact, lowercase).
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// A short description for people (help texts, the dashboard).
    pub const fn title(self) -> &'static str {
        match self {
            Format::Iuid => "inDrive iUID (UUIDv8 with country and service entity)",
            Format::Locality => "Groupon Locality UUID, version b",
            Format::Uniqid => "PHP uniqid with a shard-number prefix",
            Format::Uuidv7 => "RFC 9562 UUIDv7",
            Format::Snowflake => "Twitter Snowflake",
            Format::Sonyflake => "Sony Sonyflake",
            Format::Instagram => "Instagram sharded id",
        }
    }

    /// Whether shardgate can mint ids of this format (the 64-bit formats are read only).
    pub const fn can_mint(self) -> bool {
        matches!(self, Format::Iuid | Format::Locality | Format::Uniqid | Format::Uuidv7)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an input is not a valid id of a format.
///
/// The codes ([`Reason::code`]) are stable: they are the `reason` values of
/// the golden vectors, of `shardgate decode --json` and of the proxy's
/// problem+json bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Not the length the format requires.
    BadLength,
    /// A character outside the format's alphabet, or a hyphen out of place.
    BadFormat,
    /// UUID version digit is not `8` (iUID).
    VersionNot8,
    /// UUID version digit is not `7` (UUIDv7).
    VersionNot7,
    /// UUID version digit is not `b`/`B` (Locality UUID).
    VersionNotB,
    /// UUID variant bits are not `10`.
    VariantNot10,
    /// A well-formed UUIDv8 with an iUID sub-version this proxy does not know.
    UnsupportedVer1,
    /// uniqid: fewer than 18 characters.
    TooShort,
    /// uniqid: a non-hex character in the last 17 characters.
    NonHexInUniqPart,
    /// uniqid: an uppercase hex digit in the last 17 characters.
    UppercaseHexInUniqPart,
    /// uniqid: the decimal shard prefix is empty, has a leading zero or a non-digit.
    BadShardPrefix,
    /// uniqid: the microsecond field exceeds 999999.
    MicrosecondsOutOfRange,
    /// uniqid: the shard is not below the configured shard count.
    ShardOutOfRange,
    /// uniqid: the shard prefix is not `microseconds % total_shards`.
    ShardPrefixMismatch,
    /// 64-bit formats: not `0` or `[1-9][0-9]{0,19}` within u64.
    NotCanonicalDecimal,
    /// Snowflake: bit 63 is set (the value does not fit a signed 64-bit integer).
    SignBitSet,
    /// Sonyflake: bit 63 is set.
    MsbSet,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 17] = [
        Reason::BadLength,
        Reason::BadFormat,
        Reason::VersionNot8,
        Reason::VersionNot7,
        Reason::VersionNotB,
        Reason::VariantNot10,
        Reason::UnsupportedVer1,
        Reason::TooShort,
        Reason::NonHexInUniqPart,
        Reason::UppercaseHexInUniqPart,
        Reason::BadShardPrefix,
        Reason::MicrosecondsOutOfRange,
        Reason::ShardOutOfRange,
        Reason::ShardPrefixMismatch,
        Reason::NotCanonicalDecimal,
        Reason::SignBitSet,
        Reason::MsbSet,
    ];

    /// The stable snake_case code.
    pub const fn code(self) -> &'static str {
        match self {
            Reason::BadLength => "bad_length",
            Reason::BadFormat => "bad_format",
            Reason::VersionNot8 => "version_not_8",
            Reason::VersionNot7 => "version_not_7",
            Reason::VersionNotB => "version_not_b",
            Reason::VariantNot10 => "variant_not_10",
            Reason::UnsupportedVer1 => "unsupported_ver1",
            Reason::TooShort => "too_short",
            Reason::NonHexInUniqPart => "non_hex_in_uniq_part",
            Reason::UppercaseHexInUniqPart => "uppercase_hex_in_uniq_part",
            Reason::BadShardPrefix => "bad_shard_prefix",
            Reason::MicrosecondsOutOfRange => "microseconds_out_of_range",
            Reason::ShardOutOfRange => "shard_out_of_range",
            Reason::ShardPrefixMismatch => "shard_prefix_mismatch",
            Reason::NotCanonicalDecimal => "not_canonical_decimal",
            Reason::SignBitSet => "sign_bit_set",
            Reason::MsbSet => "msb_set",
        }
    }

    /// A one-line, lowercase explanation of the rule that was broken.
    pub const fn explain(self) -> &'static str {
        match self {
            Reason::BadLength => "wrong length",
            Reason::BadFormat => "unexpected character or misplaced hyphen",
            Reason::VersionNot8 => "uuid version digit (offset 14) is not 8",
            Reason::VersionNot7 => "uuid version digit (offset 14) is not 7",
            Reason::VersionNotB => "uuid version digit (offset 14) is not b",
            Reason::VariantNot10 => "uuid variant bits (offset 19) are not 10",
            Reason::UnsupportedVer1 => "iuid sub-version (offset 15) is not 0",
            Reason::TooShort => "shorter than 18 characters",
            Reason::NonHexInUniqPart => "non-hex character in the last 17 characters",
            Reason::UppercaseHexInUniqPart => "uppercase hex in the last 17 characters",
            Reason::BadShardPrefix => "shard prefix is not a canonical decimal number",
            Reason::MicrosecondsOutOfRange => "microsecond field exceeds 999999",
            Reason::ShardOutOfRange => "shard is not below the shard count",
            Reason::ShardPrefixMismatch => "shard prefix is not microseconds modulo the shard count",
            Reason::NotCanonicalDecimal => "not a canonical unsigned 64-bit decimal number",
            Reason::SignBitSet => "bit 63 is set",
            Reason::MsbSet => "bit 63 is set",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A rejected id: which format rejected it and why.
///
/// Cheap to create and copy (two bytes); it does not hold the input, so the
/// hot path never allocates. Callers that show an error to a person add the
/// (truncated, escaped) input themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdError {
    /// The format the input was checked against.
    pub format: Format,
    /// The rule it broke.
    pub reason: Reason,
}

impl IdError {
    pub(crate) const fn new(format: Format, reason: Reason) -> Self {
        IdError { format, reason }
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a valid {} id: {} ({})", self.format, self.reason.explain(), self.reason.code())
    }
}

impl std::error::Error for IdError {}

/// Parameters some formats need to parse or decode (epochs, bit layouts,
/// the historical shard count). The defaults are the public ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Params {
    /// When set, uniqid ids are checked strictly against this shard count
    /// (spec §2.3 rules 5 and 6). Unset: route on the embedded prefix.
    pub uniqid_total_shards: Option<u32>,
    /// Snowflake epoch and bit split.
    pub snowflake: SnowflakeLayout,
    /// Sonyflake flavour (start time).
    pub sonyflake: SonyflakeFlavor,
    /// Instagram epoch.
    pub instagram: InstagramLayout,
}

/// A decoded id of any format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An iUID.
    Iuid(Iuid),
    /// A Locality UUID vB.
    Locality(LocalityUuid),
    /// A shard-prefixed uniqid.
    Uniqid(UniqidShard),
    /// A UUIDv7.
    Uuidv7(Uuid7),
    /// A Snowflake.
    Snowflake(Snowflake),
    /// A Sonyflake.
    Sonyflake(Sonyflake),
    /// An Instagram id.
    Instagram(Instagram),
}

impl Decoded {
    /// The format of this id.
    pub const fn format(&self) -> Format {
        match self {
            Decoded::Iuid(_) => Format::Iuid,
            Decoded::Locality(_) => Format::Locality,
            Decoded::Uniqid(_) => Format::Uniqid,
            Decoded::Uuidv7(_) => Format::Uuidv7,
            Decoded::Snowflake(_) => Format::Snowflake,
            Decoded::Sonyflake(_) => Format::Sonyflake,
            Decoded::Instagram(_) => Format::Instagram,
        }
    }

    /// Unix time in milliseconds embedded in the id (floored for coarser formats).
    pub fn unix_ms(&self) -> u64 {
        match self {
            Decoded::Iuid(id) => id.unix_ts_ms(),
            Decoded::Locality(id) => id.timestamp_ms(),
            Decoded::Uniqid(id) => id.timestamp_us() / 1000,
            Decoded::Uuidv7(id) => id.unix_ts_ms(),
            Decoded::Snowflake(id) => id.unix_ts_ms(),
            Decoded::Sonyflake(id) => id.unix_ts_ms(),
            Decoded::Instagram(id) => id.unix_ts_ms(),
        }
    }

    /// A stable 64-bit hash of the whole id value, for key ranges and
    /// rendezvous hashing over ids that carry no location field.
    ///
    /// For the 128-bit formats this mixes all 128 bits (hashing a leading
    /// prefix would group ids by time, spec §4); the 64-bit formats are mixed
    /// too, so that consecutive ids spread.
    pub fn key_hash(&self) -> u64 {
        match self {
            Decoded::Iuid(id) => mix128(id.as_u128()),
            Decoded::Locality(id) => mix128(id.as_u128()),
            Decoded::Uuidv7(id) => mix128(id.as_u128()),
            Decoded::Uniqid(id) => mix128(id.key_bits()),
            Decoded::Snowflake(id) => mix64(id.value()),
            Decoded::Sonyflake(id) => mix64(id.value()),
            Decoded::Instagram(id) => mix64(id.value()),
        }
    }

    /// Calls `f` with every decoded field, under the snake_case names the
    /// golden vector files use for the format.
    pub fn for_each_field(&self, f: &mut dyn FnMut(&'static str, Field)) {
        self.for_each_key(&mut |key, value| f(key.name, value));
    }

    /// [`Decoded::for_each_field`] with each name's [`Key`].
    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        match self {
            Decoded::Iuid(id) => id.for_each_key(f),
            Decoded::Locality(id) => id.for_each_key(f),
            Decoded::Uniqid(id) => id.for_each_key(f),
            Decoded::Uuidv7(id) => id.for_each_key(f),
            Decoded::Snowflake(id) => id.for_each_key(f),
            Decoded::Sonyflake(id) => id.for_each_key(f),
            Decoded::Instagram(id) => id.for_each_key(f),
        }
    }
}

/// A decoded field's name, with the same name ready to write as a JSON
/// object key: `,"name":`, punctuation included. [`json`] then writes a
/// field's name in one piece instead of three (each write into a buffered
/// writer costs about as much as the bytes it copies; the three were a
/// tenth of a `decode --json` line). Made only by the `key!` macro.
#[derive(Debug)]
pub(crate) struct Key {
    /// The snake_case name.
    pub name: &'static str,
    /// `,"name":`.
    pub json: &'static str,
}

impl fmt::Display for Decoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decoded::Iuid(id) => id.fmt(f),
            Decoded::Locality(id) => id.fmt(f),
            Decoded::Uniqid(id) => id.fmt(f),
            Decoded::Uuidv7(id) => id.fmt(f),
            Decoded::Snowflake(id) => id.fmt(f),
            Decoded::Sonyflake(id) => id.fmt(f),
            Decoded::Instagram(id) => id.fmt(f),
        }
    }
}

/// One decoded field value, as reported by `decode` and `/explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// An unsigned integer.
    Int(u64),
    /// A boolean.
    Bool(bool),
    /// An integer shown as lowercase hex, zero-padded to `width` digits.
    Hex {
        /// The value.
        value: u128,
        /// Number of hex digits.
        width: u8,
    },
    /// A short static string (e.g. a flavour name).
    Str(&'static str),
    /// A Unix time in milliseconds, shown as ISO-8601 UTC with milliseconds.
    TimeMs(u64),
    /// A Unix time in microseconds, shown as ISO-8601 UTC with microseconds.
    TimeUs(u64),
}

/// Parses `input` as `format`.
pub fn parse(format: Format, input: &str, params: &Params) -> Result<Decoded, IdError> {
    Attempts::new(input, params).parse(format)
}

/// Parses `input` as each of `formats` in order, handing every result to
/// `each`: the results [`parse`] gives format by format, but the 36-character
/// text that iUID, Locality and UUIDv7 share is decoded once, not once per
/// UUID format (`shardgate decode` tries every format on every line).
pub fn parse_each(formats: &[Format], input: &str, params: &Params, mut each: impl FnMut(Result<Decoded, IdError>)) {
    let mut attempts = Attempts::new(input, params);
    for &format in formats {
        each(attempts.parse(format));
    }
}

/// Tries each format in order and returns the first that accepts the input,
/// or the error of the first format when none does (the route's primary
/// format is the one a client most likely meant).
pub fn parse_any(formats: &[Format], input: &str, params: &Params) -> Result<Decoded, IdError> {
    let mut attempts = Attempts::new(input, params);
    let mut first_err = None;
    for &format in formats {
        match attempts.parse(format) {
            Ok(id) => return Ok(id),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or(IdError::new(Format::Iuid, Reason::BadFormat)))
}

/// One input parsed as one format after another, its UUID text decoded at
/// most once (the SWAR decoding is most of a UUID format's parse; the
/// version checks after it are a few instructions).
struct Attempts<'a> {
    input: &'a str,
    params: &'a Params,
    /// The UUID text's value, or why it is not one, once a UUID format asked.
    uuid: Option<Result<u128, Reason>>,
}

impl<'a> Attempts<'a> {
    fn new(input: &'a str, params: &'a Params) -> Self {
        Attempts { input, params, uuid: None }
    }

    /// `input` as `format`: the one place a format name picks its codec.
    #[inline]
    fn parse(&mut self, format: Format) -> Result<Decoded, IdError> {
        let (input, params) = (self.input, self.params);
        // The UUID formats check the shared value; the others parse the text themselves.
        let check: fn(u128) -> Result<Decoded, Reason> = match format {
            Format::Iuid => |v| Iuid::from_u128(v).map(Decoded::Iuid),
            Format::Locality => |v| LocalityUuid::from_u128(v).map(Decoded::Locality),
            Format::Uuidv7 => |v| Uuid7::from_u128(v).map(Decoded::Uuidv7),
            Format::Uniqid => return UniqidShard::parse_with(input, params.uniqid_total_shards).map(Decoded::Uniqid),
            Format::Snowflake => return Snowflake::parse_with(input, params.snowflake).map(Decoded::Snowflake),
            Format::Sonyflake => return Sonyflake::parse_with(input, params.sonyflake).map(Decoded::Sonyflake),
            Format::Instagram => return Instagram::parse_with(input, params.instagram).map(Decoded::Instagram),
        };
        self.uuid.get_or_insert_with(|| text::parse_uuid(input)).and_then(check).map_err(|r| IdError::new(format, r))
    }
}

/// SplitMix64 finaliser: a fast, well-distributed 64-bit mix. Stable
/// across versions: key hashes, and the placements that hash them, depend
/// on it.
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) const fn mix128(v: u128) -> u64 {
    mix64(mix64(v as u64) ^ (v >> 64) as u64)
}

/// Shows untrusted input in a message: at most `max` characters, control and
/// non-ASCII characters escaped (`\n`, `\u{…}`), with `…` when cut.
pub fn escape_for_display(input: &str, max: usize) -> String {
    let mut out = String::with_capacity(input.len().min(max) + 8);
    for (i, c) in input.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// Parses a canonical unsigned decimal (`0` or `[1-9][0-9]*`, no sign, no
/// spaces) that fits in a `u64`. The standard parsers accept a leading `+`.
pub fn parse_canonical_u64(s: &str) -> Option<u64> {
    text::parse_decimal_u64(s)
}

/// Parses a canonical decimal `u8` (`0` or `[1-9][0-9]{0,2}`, at most 255).
pub fn text_decimal_u8(s: &str) -> Option<u8> {
    text::parse_decimal_u64(s).and_then(|v| u8::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::{Format, Reason};

    #[test]
    fn every_reason_belongs_to_a_format_and_has_its_own_code() {
        for reason in Reason::ALL {
            assert!(Format::ALL.iter().any(|f| f.reasons().contains(&reason)), "{reason:?} is no format's");
            assert_eq!(Reason::ALL.iter().filter(|r| r.code() == reason.code()).count(), 1, "{reason:?}");
        }
    }
}
