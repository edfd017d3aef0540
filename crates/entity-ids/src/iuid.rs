//! iUID: inDrive's Universal Entity Identifier, a UUIDv8 that carries the
//! country and the service entity of the row it names (spec §3).
//!
//! ```text
//! tttttttt-tttt-8Vcc-XXXX-XXXXXXXXXXXX
//! ts (48) | ver 8 (4) | ver1 (4) | country (8) | var 10 (2) | service_entity (8) | rand (54)
//! ```
//!
//! Parse, read the fields, format; mint with an injected clock:
//!
//! ```
//! use entity_ids::{Iuid, IuidMinter, ManualClock};
//!
//! let text = Iuid::from_fields(1_710_512_853_183, 7, 3, 0x2e_9b1f_0a47).to_string();
//! assert_eq!(text, "018e4282-d0bf-8007-80c0-002e9b1f0a47");
//! let id = Iuid::parse(&text)?;
//! assert_eq!((id.country(), id.service_entity(), id.unix_ts_ms()), (7, 3, 1_710_512_853_183));
//!
//! let minter = IuidMinter::new(ManualClock::from_millis(1_710_512_853_183));
//! let mut rng = rand::rng();
//! let minted = minter.mint(7, 3, &mut rng);
//! assert_eq!((minted.country(), minted.service_entity(), minted.unix_ts_ms()), (7, 3, 1_710_512_853_183));
//! assert!(minter.mint(7, 3, &mut rng) > minted, "increasing within a millisecond");
//! # Ok::<(), entity_ids::IdError>(())
//! ```

use std::fmt;

use rand_core::RngCore;

use super::clock::{Clock, Monotonic, COUNTER_BITS};
use super::{text, Field, Format, IdError, Key, Reason};

/// A valid iUID (version 8, RFC variant, `ver1` = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Iuid(u128);

const RAND_BITS: u32 = 54;
const RAND_MASK: u128 = (1 << RAND_BITS) - 1;

impl Iuid {
    /// Parses the 36-character text form (hex case-insensitive).
    ///
    /// Checks, in order: length (`bad_length`), shape (`bad_format`),
    /// version digit `8` (`version_not_8`), variant `10` (`variant_not_10`),
    /// sub-version `0` (`unsupported_ver1`).
    pub fn parse(s: &str) -> Result<Iuid, IdError> {
        let err = |r| IdError::new(Format::Iuid, r);
        let v = text::parse_uuid(s).map_err(err)?;
        Self::from_u128(v).map_err(err)
    }

    /// Checks the fixed bits of a 128-bit value.
    pub fn from_u128(v: u128) -> Result<Iuid, Reason> {
        if (v >> 76) & 0xf != 8 {
            return Err(Reason::VersionNot8);
        }
        if (v >> 62) & 0b11 != 0b10 {
            return Err(Reason::VariantNot10);
        }
        if (v >> 72) & 0xf != 0 {
            return Err(Reason::UnsupportedVer1);
        }
        Ok(Iuid(v))
    }

    /// Builds an iUID from its fields; `unix_ts_ms` and `rand` are truncated
    /// to 48 and 54 bits.
    pub const fn from_fields(unix_ts_ms: u64, country: u8, service_entity: u8, rand: u64) -> Iuid {
        let v = ((unix_ts_ms as u128 & 0xffff_ffff_ffff) << 80)
            | (8 << 76)
            | ((country as u128) << 64)
            | (0b10 << 62)
            | ((service_entity as u128) << 54)
            | (rand as u128 & RAND_MASK);
        Iuid(v)
    }

    /// The 128-bit big-endian value.
    pub const fn as_u128(&self) -> u128 {
        self.0
    }

    /// The 16 octets.
    pub const fn to_bytes(&self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Unix time in milliseconds (bits 0–47).
    pub const fn unix_ts_ms(&self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The layout sub-version (always 0 for a parsed iUID).
    pub const fn ver1(&self) -> u8 {
        ((self.0 >> 72) & 0xf) as u8
    }

    /// The inDrive country id (octet 7).
    pub const fn country(&self) -> u8 {
        (self.0 >> 64) as u8
    }

    /// The service entity code (bits 66–73).
    pub const fn service_entity(&self) -> u8 {
        (self.0 >> 54) as u8
    }

    /// The 54 random bits.
    pub const fn rand(&self) -> u64 {
        (self.0 & RAND_MASK) as u64
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        let v = self.0;
        f(key!("unix_ts_ms"), Field::Int(self.unix_ts_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.unix_ts_ms()));
        f(key!("version"), Field::Int(8));
        f(key!("ver1"), Field::Int(u64::from(self.ver1())));
        f(key!("country"), Field::Int(u64::from(self.country())));
        f(key!("variant_bits"), Field::Str("10"));
        f(key!("service_entity"), Field::Int(u64::from(self.service_entity())));
        f(key!("rand"), Field::Int(self.rand()));
        f(key!("rand_hex"), Field::Hex { value: u128::from(self.rand()), width: 14 });
        f(key!("custom_a"), Field::Int((v >> 80) as u64));
        f(key!("custom_b"), Field::Int(((v >> 64) & 0xfff) as u64));
        f(key!("custom_c"), Field::Int((v & ((1 << 62) - 1)) as u64));
        f(key!("bytes_hex"), Field::Hex { value: v, width: 32 });
    }
}

impl fmt::Display for Iuid {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        text::write_uuid(self.0, f)
    }
}

/// Mints iUIDs: strictly increasing within the process, unique under any
/// number of threads, without a lock.
///
/// The top 22 bits of the 54-bit random field are an RFC 9562 §6.2
/// "Method 1" counter (see `Monotonic` in the clock module): reseeded with random bits at each
/// new millisecond, +1 for each id inside it. One state is shared by all
/// countries and entities, so every id of a minter has a distinct
/// (timestamp, counter) pair and ids are unique even across countries. The
/// low 32 bits are fresh random bits from the injected source, which keeps
/// ids of different processes apart (the spec's §3.3 recommendation).
#[derive(Debug, Default)]
pub struct IuidMinter<C: Clock> {
    clock: C,
    state: Monotonic,
}

impl<C: Clock> IuidMinter<C> {
    /// A minter reading time from `clock`.
    pub fn new(clock: C) -> Self {
        IuidMinter { clock, state: Monotonic::default() }
    }

    /// A fresh iUID for `country` and `service_entity`.
    pub fn mint<R: RngCore + ?Sized>(&self, country: u8, service_entity: u8, rng: &mut R) -> Iuid {
        let r = rng.next_u64();
        let (ms, counter) = self.state.next(self.clock.unix_millis(), (r >> 32) as u32);
        let rand = (u64::from(counter) << (RAND_BITS - COUNTER_BITS)) | (r & 0xffff_ffff);
        Iuid::from_fields(ms, country, service_entity, rand)
    }

    /// [`IuidMinter::mint`] with the thread-local RNG (`rand::rng()`).
    #[cfg(feature = "rand")]
    pub fn mint_random(&self, country: u8, service_entity: u8) -> Iuid {
        self.mint(country, service_entity, &mut rand::rng())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn service_entity_is_not_nibble_aligned() {
        // spec §3.1: fourth group with rand = 0
        for (se, group) in [(0u8, "8000"), (255, "bfc0"), (0x3f, "8fc0"), (0xc0, "b000"), (3, "80c0")] {
            let s = Iuid::from_fields(0, 0, se, 0).to_string();
            assert_eq!(&s[19..23], group, "se {se}");
            assert_eq!(Iuid::parse(&s).map(|i| i.service_entity()), Ok(se));
        }
    }

    #[test]
    fn rejects_in_rule_order() {
        let e = |s: &str| Iuid::parse(s).map_err(|e| e.reason);
        assert_eq!(e("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"), Err(Reason::VersionNot8));
        assert_eq!(e("017f22e2-79b0-80c3-18c4-dc0c0c07398f"), Err(Reason::VariantNot10));
        assert_eq!(e("017f22e2-79b0-81c3-98c4-dc0c0c07398f"), Err(Reason::UnsupportedVer1));
        assert_eq!(e(" 017f22e2-79b0-80c3-98c4-dc0c0c07398f"), Err(Reason::BadLength));
    }

    #[test]
    fn minted_ids_increase_within_one_millisecond() {
        let m = IuidMinter::new(ManualClock::from_millis(1_700_000_000_000));
        let mut rng = rand::rng();
        let mut last = m.mint(7, 3, &mut rng);
        for _ in 0..10_000 {
            let next = m.mint(7, 3, &mut rng);
            assert!(next > last);
            assert_eq!((next.country(), next.service_entity()), (7, 3));
            last = next;
        }
        assert_eq!(last.unix_ts_ms(), 1_700_000_000_000);
    }
}
