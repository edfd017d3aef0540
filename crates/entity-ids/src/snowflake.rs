//! The 64-bit decimal family: Twitter Snowflake, Sony Sonyflake and
//! Instagram sharded ids (spec §5–7). Read only: shardgate routes them but
//! does not mint them. All three are indistinguishable by shape and differ
//! in epoch and bit layout, which therefore come from configuration.
//!
//! Read only: parse and read the fields, with the layout the issuer used.
//!
//! ```
//! use entity_ids::{Instagram, InstagramLayout, Snowflake, Sonyflake, SonyflakeFlavor};
//!
//! let id = Snowflake::parse("1050118621198921728")?;
//! assert_eq!((id.unix_ts_ms(), id.datacenter_id(), id.worker_id(), id.sequence()), (1_539_202_764_211, 10, 27, 0));
//! assert_eq!(id.to_string(), "1050118621198921728");
//!
//! let sony = Sonyflake::parse_with("1050118621198921728", SonyflakeFlavor::V1)?;
//! assert_eq!(sony.to_string(), "1050118621198921728");
//! let insta = Instagram::parse_with("1050118621198921728", InstagramLayout::default())?;
//! assert_eq!(insta.to_string(), "1050118621198921728");
//! # Ok::<(), entity_ids::IdError>(())
//! ```

use std::fmt;

use super::{text, Field, Format, IdError, Key, Reason};

/// Epoch and bit split of a Snowflake. The default is Twitter's:
/// epoch 1288834974657 (2010-11-04T01:42:54.657Z), 5 datacenter bits,
/// 5 worker bits, 12 sequence bits. Discord uses epoch 1420070400000.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnowflakeLayout {
    /// Unix milliseconds of timestamp zero.
    pub epoch_ms: u64,
    /// Width of the datacenter field (above the worker field).
    pub datacenter_bits: u8,
    /// Width of the worker field (above the sequence).
    pub worker_bits: u8,
    /// Width of the sequence (lowest bits).
    pub sequence_bits: u8,
}

impl Default for SnowflakeLayout {
    fn default() -> Self {
        SnowflakeLayout { epoch_ms: 1_288_834_974_657, datacenter_bits: 5, worker_bits: 5, sequence_bits: 12 }
    }
}

impl SnowflakeLayout {
    /// Whether the three fields leave at least one timestamp bit below bit 63.
    pub const fn is_valid(&self) -> bool {
        (self.datacenter_bits as u32 + self.worker_bits as u32 + self.sequence_bits as u32) < 63
    }
}

const fn field(v: u64, shift: u32, bits: u8) -> u64 {
    if bits == 0 || shift >= 64 {
        0
    } else {
        (v >> shift) & (u64::MAX >> (64 - bits as u32))
    }
}

/// A canonical decimal below 2^63: Snowflake-style ids keep the top bit
/// clear so they fit a signed 64-bit column. `top_bit` names the reason when
/// it is set (the formats' specs word it differently).
fn parse_below_2_63(s: &str, format: Format, top_bit: Reason) -> Result<u64, IdError> {
    let value = text::parse_decimal_u64(s).ok_or(IdError::new(format, Reason::NotCanonicalDecimal))?;
    if value >> 63 != 0 {
        return Err(IdError::new(format, top_bit));
    }
    Ok(value)
}

/// A Snowflake id read with a [`SnowflakeLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snowflake {
    value: u64,
    layout: SnowflakeLayout,
}

impl Snowflake {
    /// Parses with the Twitter layout.
    pub fn parse(s: &str) -> Result<Snowflake, IdError> {
        Self::parse_with(s, SnowflakeLayout::default())
    }

    /// Parses a canonical decimal (`0` or `[1-9][0-9]*`) below 2^63.
    pub fn parse_with(s: &str, layout: SnowflakeLayout) -> Result<Snowflake, IdError> {
        let value = parse_below_2_63(s, Format::Snowflake, Reason::SignBitSet)?;
        Ok(Snowflake { value, layout })
    }

    /// The integer value.
    pub const fn value(&self) -> u64 {
        self.value
    }

    const fn time_shift(&self) -> u32 {
        self.layout.datacenter_bits as u32 + self.layout.worker_bits as u32 + self.layout.sequence_bits as u32
    }

    /// Milliseconds since the layout's epoch.
    pub const fn ms_since_epoch(&self) -> u64 {
        if self.time_shift() >= 64 {
            0
        } else {
            self.value >> self.time_shift()
        }
    }

    /// Unix time in milliseconds.
    pub const fn unix_ts_ms(&self) -> u64 {
        self.ms_since_epoch().saturating_add(self.layout.epoch_ms)
    }

    /// The datacenter id (Twitter bits 17–21; `@sapphire/snowflake` calls it `workerId`).
    pub const fn datacenter_id(&self) -> u64 {
        let l = self.layout;
        field(self.value, l.worker_bits as u32 + l.sequence_bits as u32, l.datacenter_bits)
    }

    /// The worker id (Twitter bits 12–16; `@sapphire/snowflake` calls it `processId`).
    pub const fn worker_id(&self) -> u64 {
        field(self.value, self.layout.sequence_bits as u32, self.layout.worker_bits)
    }

    /// The per-millisecond sequence.
    pub const fn sequence(&self) -> u64 {
        field(self.value, 0, self.layout.sequence_bits)
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        let l = self.layout;
        f(key!("id"), Field::Int(self.value));
        f(key!("ms_since_epoch"), Field::Int(self.ms_since_epoch()));
        f(key!("unix_ts_ms"), Field::Int(self.unix_ts_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.unix_ts_ms()));
        f(key!("datacenter_id"), Field::Int(self.datacenter_id()));
        f(key!("worker_id"), Field::Int(self.worker_id()));
        f(key!("sequence"), Field::Int(self.sequence()));
        f(
            key!("instance_10bit"),
            Field::Int(field(self.value, l.sequence_bits as u32, l.datacenter_bits + l.worker_bits)),
        );
        f(key!("epoch_ms"), Field::Int(l.epoch_ms));
    }
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)
    }
}

/// The Sonyflake start time (the only difference between the flavours'
/// default layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SonyflakeFlavor {
    /// sony/sonyflake v1: start 2014-09-01T00:00:00Z.
    #[default]
    V1,
    /// sony/sonyflake v2: start 2025-01-01T00:00:00Z.
    V2,
}

impl SonyflakeFlavor {
    /// Unix milliseconds of the start time.
    pub const fn start_time_ms(self) -> u64 {
        match self {
            SonyflakeFlavor::V1 => 1_409_529_600_000,
            SonyflakeFlavor::V2 => 1_735_689_600_000,
        }
    }

    /// `v1` or `v2`.
    pub const fn name(self) -> &'static str {
        match self {
            SonyflakeFlavor::V1 => "v1",
            SonyflakeFlavor::V2 => "v2",
        }
    }

    const fn other(self) -> SonyflakeFlavor {
        match self {
            SonyflakeFlavor::V1 => SonyflakeFlavor::V2,
            SonyflakeFlavor::V2 => SonyflakeFlavor::V1,
        }
    }
}

/// A Sonyflake: 39-bit time in 10 ms units | 8-bit sequence | 16-bit machine id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sonyflake {
    value: u64,
    flavor: SonyflakeFlavor,
}

impl Sonyflake {
    /// Parses a canonical decimal below 2^63.
    pub fn parse_with(s: &str, flavor: SonyflakeFlavor) -> Result<Sonyflake, IdError> {
        let value = parse_below_2_63(s, Format::Sonyflake, Reason::MsbSet)?;
        Ok(Sonyflake { value, flavor })
    }

    /// The integer value.
    pub const fn value(&self) -> u64 {
        self.value
    }

    /// Elapsed 10 ms units since the start time.
    pub const fn time_units_10ms(&self) -> u64 {
        self.value >> 24
    }

    /// Sequence within the 10 ms tick.
    pub const fn sequence(&self) -> u8 {
        (self.value >> 16) as u8
    }

    /// The machine id (lowest 16 bits).
    pub const fn machine_id(&self) -> u16 {
        self.value as u16
    }

    /// Unix milliseconds, floored to 10 ms.
    pub const fn unix_ts_ms(&self) -> u64 {
        self.flavor.start_time_ms() + self.time_units_10ms() * 10
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        f(key!("flavor"), Field::Str(self.flavor.name()));
        f(key!("id"), Field::Int(self.value));
        f(key!("time_units_10ms"), Field::Int(self.time_units_10ms()));
        f(key!("sequence"), Field::Int(u64::from(self.sequence())));
        f(key!("machine_id"), Field::Int(u64::from(self.machine_id())));
        f(key!("start_time_ms"), Field::Int(self.flavor.start_time_ms()));
        f(key!("unix_ts_ms_floor"), Field::Int(self.unix_ts_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.unix_ts_ms()));
        let other = self.flavor.other().start_time_ms() + self.time_units_10ms() * 10;
        f(key!("unix_ts_ms_floor_if_other_flavor"), Field::Int(other));
    }
}

impl fmt::Display for Sonyflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)
    }
}

/// Instagram's epoch. The default is the value of the published PL/pgSQL
/// `next_id()` (2011-08-24T21:07:01.721Z), not the blog prose's 2011-01-01.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InstagramLayout {
    /// Unix milliseconds of timestamp zero.
    pub epoch_ms: u64,
}

impl Default for InstagramLayout {
    fn default() -> Self {
        InstagramLayout { epoch_ms: 1_314_220_021_721 }
    }
}

/// An Instagram id: 41-bit ms since the epoch | 13-bit logical shard | 10-bit sequence.
/// All 64 bits are used (parse as u64; in a signed BIGINT they turn negative
/// in 2046).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instagram {
    value: u64,
    layout: InstagramLayout,
}

impl Instagram {
    /// Parses a canonical unsigned decimal (the whole u64 range).
    pub fn parse_with(s: &str, layout: InstagramLayout) -> Result<Instagram, IdError> {
        let value = text::parse_decimal_u64(s).ok_or(IdError::new(Format::Instagram, Reason::NotCanonicalDecimal))?;
        Ok(Instagram { value, layout })
    }

    /// The integer value.
    pub const fn value(&self) -> u64 {
        self.value
    }

    /// Milliseconds since the epoch.
    pub const fn ms_since_epoch(&self) -> u64 {
        self.value >> 23
    }

    /// Unix time in milliseconds.
    pub const fn unix_ts_ms(&self) -> u64 {
        self.ms_since_epoch().saturating_add(self.layout.epoch_ms)
    }

    /// The logical shard (13 bits).
    pub const fn shard_id(&self) -> u16 {
        ((self.value >> 10) & 0x1fff) as u16
    }

    /// The per-table sequence modulo 1024.
    pub const fn sequence(&self) -> u16 {
        (self.value & 0x3ff) as u16
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        f(key!("id"), Field::Int(self.value));
        f(key!("ms_since_epoch"), Field::Int(self.ms_since_epoch()));
        f(key!("unix_ts_ms"), Field::Int(self.unix_ts_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.unix_ts_ms()));
        f(key!("shard_id"), Field::Int(u64::from(self.shard_id())));
        f(key!("sequence"), Field::Int(u64::from(self.sequence())));
        f(key!("epoch_ms"), Field::Int(self.layout.epoch_ms));
    }
}

impl fmt::Display for Instagram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_tweet_id() {
        let id = Snowflake::parse("1050118621198921728");
        let got = id.map(|i| (i.unix_ts_ms(), i.datacenter_id(), i.worker_id()));
        // 2018-10-10T20:19:24.211Z
        assert_eq!(got, Ok((1_539_202_764_211, 10, 27)));
    }

    #[test]
    fn instagram_uses_all_64_bits() {
        let id = Instagram::parse_with("18446744073709551615", InstagramLayout::default());
        assert_eq!(id.map(|i| (i.shard_id(), i.sequence())), Ok((8191, 1023)));
    }
}
