//! UUIDv7 (RFC 9562 §5.7): 48-bit Unix milliseconds, then random bits.
//! No routing field: route it by time range or by a hash of all 128 bits.
//!
//! ```text
//! tttttttt-tttt-7aaa-VBBB-BBBBBBBBBBBB
//! unix_ts_ms (48) | ver 7 (4) | rand_a (12) | var 10 (2) | rand_b (62)
//! ```
//!
//! Parse, read the fields, format; mint with an injected clock:
//!
//! ```
//! use entity_ids::{ManualClock, Uuid7, Uuid7Minter};
//!
//! let text = Uuid7::from_fields(1_645_557_742_000, 0xcc3, 0x18c4_dc0c_0c07_398f).to_string();
//! assert_eq!(text, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
//! let id = Uuid7::parse(&text)?;
//! assert_eq!((id.unix_ts_ms(), id.rand_a()), (1_645_557_742_000, 0xcc3));
//!
//! let minter = Uuid7Minter::new(ManualClock::from_millis(1_645_557_742_000));
//! let mut rng = rand::rng();
//! let minted = minter.mint(&mut rng);
//! assert_eq!(minted.unix_ts_ms(), 1_645_557_742_000);
//! assert!(minter.mint(&mut rng) > minted, "increasing within a millisecond");
//! # Ok::<(), entity_ids::IdError>(())
//! ```

use std::fmt;

use rand_core::RngCore;

use super::clock::{Clock, Monotonic};
use super::{text, Field, Format, IdError, Key, Reason};

/// A valid UUIDv7 (version 7, RFC variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid7(u128);

impl Uuid7 {
    /// Parses the 36-character text form (hex case-insensitive).
    pub fn parse(s: &str) -> Result<Uuid7, IdError> {
        let err = |r| IdError::new(Format::Uuidv7, r);
        let v = text::parse_uuid(s).map_err(err)?;
        Self::from_u128(v).map_err(err)
    }

    /// Checks the version and variant bits of a 128-bit value.
    pub fn from_u128(v: u128) -> Result<Uuid7, Reason> {
        if (v >> 76) & 0xf != 7 {
            return Err(Reason::VersionNot7);
        }
        if (v >> 62) & 0b11 != 0b10 {
            return Err(Reason::VariantNot10);
        }
        Ok(Uuid7(v))
    }

    /// Builds a UUIDv7 from its fields (truncated to 48, 12 and 62 bits).
    pub const fn from_fields(unix_ts_ms: u64, rand_a: u16, rand_b: u64) -> Uuid7 {
        Uuid7(
            ((unix_ts_ms as u128 & 0xffff_ffff_ffff) << 80)
                | (7 << 76)
                | ((rand_a as u128 & 0xfff) << 64)
                | (0b10 << 62)
                | (rand_b as u128 & ((1 << 62) - 1)),
        )
    }

    /// The canonical lowercase text as bytes, without allocating.
    pub fn to_ascii(&self) -> [u8; 36] {
        text::uuid_ascii(self.0)
    }

    /// The 128-bit big-endian value.
    pub const fn as_u128(&self) -> u128 {
        self.0
    }

    /// Unix time in milliseconds.
    pub const fn unix_ts_ms(&self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The 12 bits after the version.
    pub const fn rand_a(&self) -> u16 {
        ((self.0 >> 64) & 0xfff) as u16
    }

    /// The 62 bits after the variant.
    pub const fn rand_b(&self) -> u64 {
        (self.0 & ((1 << 62) - 1)) as u64
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        f(key!("unix_ts_ms"), Field::Int(self.unix_ts_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.unix_ts_ms()));
        f(key!("version"), Field::Int(7));
        f(key!("variant_bits"), Field::Str("10"));
        f(key!("rand_a"), Field::Int(u64::from(self.rand_a())));
        f(key!("rand_b"), Field::Int(self.rand_b()));
        f(key!("rand_b_hex"), Field::Hex { value: u128::from(self.rand_b()), width: 16 });
        f(key!("bytes_hex"), Field::Hex { value: self.0, width: 32 });
    }
}

impl fmt::Display for Uuid7 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        text::write_uuid(self.0, f)
    }
}

/// Mints UUIDv7s that are strictly increasing within the process, without a lock.
///
/// RFC 9562 §6.2 Method 1 with a 22-bit counter: `rand_a` (12 bits) and the
/// top 10 bits of `rand_b`, seeded randomly (guard bit clear) at each new
/// millisecond and incremented within it; overflow advances the timestamp.
/// The remaining 52 bits of `rand_b` are random per id. See
/// [`crate::clock`] for why this method.
#[derive(Debug, Default)]
pub struct Uuid7Minter<C: Clock> {
    clock: C,
    state: Monotonic,
}

impl<C: Clock> Uuid7Minter<C> {
    /// A minter reading time from `clock`.
    pub fn new(clock: C) -> Self {
        Uuid7Minter { clock, state: Monotonic::default() }
    }

    /// A fresh UUIDv7.
    pub fn mint<R: RngCore + ?Sized>(&self, rng: &mut R) -> Uuid7 {
        let r = rng.next_u64();
        let (ms, counter) = self.state.next(self.clock.unix_millis(), (r >> 32) as u32);
        let rand_a = (counter >> 10) as u16;
        let rand_b = (u64::from(counter & 0x3ff) << 52) | (rng.next_u64() & ((1 << 52) - 1));
        Uuid7::from_fields(ms, rand_a, rand_b)
    }

    /// [`Uuid7Minter::mint`] with the thread-local RNG (`rand::rng()`).
    #[cfg(feature = "rand")]
    pub fn mint_random(&self) -> Uuid7 {
        self.mint(&mut rand::rng())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_9562_appendix_a6() {
        let id = Uuid7::parse("017F22E2-79B0-7CC3-98C4-DC0C0C07398F");
        let id = id.as_ref().map(|i| (i.unix_ts_ms(), i.rand_a(), i.rand_b(), i.to_string()));
        assert_eq!(
            id,
            Ok((1_645_557_742_000, 0xcc3, 0x18c4_dc0c_0c07_398f, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f".to_string()))
        );
    }
}
