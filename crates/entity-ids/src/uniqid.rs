//! PHP `uniqid()` ids with a decimal shard-number prefix (spec §2).
//!
//! ```text
//! id = SHARD RRRR SSSSSSSS UUUUU
//!      decimal, then 17 lowercase hex: random prefix (4), seconds (8), microseconds (5)
//! ```
//!
//! Only the fixed 17-character suffix separates the shard from the random
//! prefix (both may start with digits), so parsing works from the end.
//!
//! Parse, read the fields, format; mint with an injected clock:
//!
//! ```
//! use entity_ids::{ManualClock, UniqidMinter, UniqidShard};
//!
//! // Lenient (no shard count): the prefix is the shard.
//! let id = UniqidShard::parse("36a016b019df3543ab")?;
//! assert_eq!(id.shard(), 3);
//! assert_eq!(id.to_string(), "36a016b019df3543ab");
//!
//! let minter = UniqidMinter::new(ManualClock::from_millis(1_700_000_000_000), 64);
//! let minted = minter.mint(&mut rand::rng());
//! assert_eq!(u64::from(minted.unix_seconds()), 1_700_000_000);
//! assert!(minted.shard() < 64);
//! assert_eq!(UniqidShard::parse_with(&minted.to_string(), Some(64))?, minted);
//! # Ok::<(), entity_ids::IdError>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use rand_core::RngCore;

use super::clock::Clock;
use super::{Field, Format, IdError, Key, Reason};

const UNIQ_LEN: usize = 17;
const MAX_MICROS: u32 = 999_999;

/// A valid shard-prefixed uniqid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UniqidShard {
    shard: u32,
    random_prefix: u16,
    seconds: u32,
    micros: u32,
}

impl UniqidShard {
    /// Parses without the shard-count checks (spec §2.3 rules 1–4): routes on
    /// the embedded prefix, which stays right after re-sharding.
    pub fn parse(s: &str) -> Result<UniqidShard, IdError> {
        Self::parse_with(s, None)
    }

    /// Parses, and with `total_shards` also applies the strict rules 5–6
    /// (`shard < total_shards`, `shard == microseconds % total_shards`).
    pub fn parse_with(s: &str, total_shards: Option<u32>) -> Result<UniqidShard, IdError> {
        Self::parse_inner(s.as_bytes(), total_shards).map_err(|r| IdError::new(Format::Uniqid, r))
    }

    fn parse_inner(b: &[u8], total_shards: Option<u32>) -> Result<UniqidShard, Reason> {
        if b.len() < UNIQ_LEN + 1 {
            return Err(Reason::TooShort);
        }
        let (prefix, uniq) = b.split_at(b.len() - UNIQ_LEN);
        let mut v: u128 = 0;
        for &c in uniq {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => return Err(Reason::UppercaseHexInUniqPart),
                _ => return Err(Reason::NonHexInUniqPart),
            };
            v = (v << 4) | u128::from(d);
        }
        let shard = parse_shard_prefix(prefix)?;
        let micros = (v & 0xf_ffff) as u32;
        if micros > MAX_MICROS {
            return Err(Reason::MicrosecondsOutOfRange);
        }
        let shard = u32::try_from(shard).map_err(|_| Reason::ShardOutOfRange)?;
        if let Some(total) = total_shards {
            if shard >= total {
                return Err(Reason::ShardOutOfRange);
            }
            if micros % total != shard {
                return Err(Reason::ShardPrefixMismatch);
            }
        }
        Ok(UniqidShard { shard, random_prefix: (v >> 52) as u16, seconds: (v >> 20) as u32, micros })
    }

    /// Builds an id from its fields (`micros` must be at most 999999).
    pub fn from_fields(shard: u32, random_prefix: u16, seconds: u32, micros: u32) -> Option<UniqidShard> {
        (micros <= MAX_MICROS).then_some(UniqidShard { shard, random_prefix, seconds, micros })
    }

    /// The shard number (the decimal prefix).
    pub const fn shard(&self) -> u32 {
        self.shard
    }

    /// The 4-hex-digit random prefix.
    pub const fn random_prefix(&self) -> u16 {
        self.random_prefix
    }

    /// Unix seconds as PHP wrote them (32 bits, wraps in 2106).
    pub const fn unix_seconds(&self) -> u32 {
        self.seconds
    }

    /// The microsecond field (0..=999999).
    pub const fn microseconds(&self) -> u32 {
        self.micros
    }

    /// Unix time in microseconds.
    pub const fn timestamp_us(&self) -> u64 {
        self.seconds as u64 * 1_000_000 + self.micros as u64
    }

    /// All fields packed, for hashing.
    pub(crate) const fn key_bits(&self) -> u128 {
        ((self.shard as u128) << 68) | self.uniq_bits()
    }

    const fn uniq_bits(&self) -> u128 {
        ((self.random_prefix as u128) << 52) | ((self.seconds as u128) << 20) | self.micros as u128
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        f(key!("shard"), Field::Int(u64::from(self.shard)));
        f(key!("uniq"), Field::Hex { value: self.uniq_bits(), width: 17 });
        f(key!("random_prefix"), Field::Hex { value: u128::from(self.random_prefix), width: 4 });
        f(key!("uniqid"), Field::Hex { value: self.uniq_bits() & ((1 << 52) - 1), width: 13 });
        f(key!("seconds_hex"), Field::Hex { value: u128::from(self.seconds), width: 8 });
        f(key!("unix_seconds"), Field::Int(u64::from(self.seconds)));
        f(key!("microseconds_hex"), Field::Hex { value: u128::from(self.micros), width: 5 });
        f(key!("microseconds"), Field::Int(u64::from(self.micros)));
        f(key!("timestamp_us"), Field::Int(self.timestamp_us()));
        f(key!("timestamp_iso"), Field::TimeUs(self.timestamp_us()));
    }
}

/// `0` or `[1-9][0-9]*`; values beyond u64 saturate (and then fail the u32 check).
fn parse_shard_prefix(b: &[u8]) -> Result<u64, Reason> {
    if b.is_empty() || (b.len() > 1 && b[0] == b'0') || !b.iter().all(u8::is_ascii_digit) {
        return Err(Reason::BadShardPrefix);
    }
    Ok(b.iter().fold(0u64, |v, &c| v.saturating_mul(10).saturating_add(u64::from(c - b'0'))))
}

impl fmt::Display for UniqidShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:04x}{:08x}{:05x}", self.shard, self.random_prefix, self.seconds, self.micros)
    }
}

/// Mints shard-prefixed uniqids. Like PHP's `uniqid()` it never repeats a
/// (seconds, microseconds) pair within the process: the last microsecond is
/// one `AtomicU64` advanced by compare-and-swap, bumped forward when the
/// clock has not moved (or moved back).
#[derive(Debug)]
pub struct UniqidMinter<C: Clock> {
    clock: C,
    total_shards: u32,
    last_us: AtomicU64,
}

impl<C: Clock> UniqidMinter<C> {
    /// A minter for `total_shards` shards (at least 1).
    pub fn new(clock: C, total_shards: u32) -> Self {
        UniqidMinter { clock, total_shards: total_shards.max(1), last_us: AtomicU64::new(0) }
    }

    /// The shard count ids are minted for.
    pub const fn total_shards(&self) -> u32 {
        self.total_shards
    }

    /// [`UniqidMinter::mint`] with the thread-local RNG (`rand::rng()`).
    #[cfg(feature = "rand")]
    pub fn mint_random(&self) -> UniqidShard {
        self.mint(&mut rand::rng())
    }

    /// A fresh id; its shard is `microseconds % total_shards`, as in the scheme.
    pub fn mint<R: RngCore + ?Sized>(&self, rng: &mut R) -> UniqidShard {
        let us = self.next_us(|_| true);
        self.build(us, rng)
    }

    /// A fresh id in `shard`: the microsecond is moved forward to the next
    /// value with `microseconds % total_shards == shard`, so the id also
    /// passes the strict checks. `None` when `shard >= total_shards`.
    pub fn mint_for_shard<R: RngCore + ?Sized>(&self, shard: u32, rng: &mut R) -> Option<UniqidShard> {
        if shard >= self.total_shards {
            return None;
        }
        let total = self.total_shards;
        let us = self.next_us(|us| (us % 1_000_000) as u32 % total == shard);
        Some(self.build(us, rng))
    }

    /// Like [`mint_for_shard`](Self::mint_for_shard) for another shard count
    /// (a reloaded table may change it): the (seconds, microseconds)
    /// uniqueness holds across counts because the state is shared.
    pub fn mint_in<R: RngCore + ?Sized>(&self, total_shards: u32, shard: u32, rng: &mut R) -> Option<UniqidShard> {
        if shard >= total_shards {
            return None;
        }
        let us = self.next_us(|us| (us % 1_000_000) as u32 % total_shards == shard);
        let micros = (us % 1_000_000) as u32;
        Some(UniqidShard { shard, random_prefix: rng.next_u32() as u16, seconds: (us / 1_000_000) as u32, micros })
    }

    fn next_us(&self, fits: impl Fn(u64) -> bool) -> u64 {
        let now = self.clock.unix_micros();
        let mut cur = self.last_us.load(Ordering::Relaxed);
        loop {
            let mut next = now.max(cur.saturating_add(1));
            // At most total_shards + 1 steps (the residue cycle restarts at
            // each second, where 10^6 is not a multiple of the count).
            while !fits(next) {
                next = next.saturating_add(1);
            }
            match self.last_us.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => cur = seen,
            }
        }
    }

    fn build<R: RngCore + ?Sized>(&self, us: u64, rng: &mut R) -> UniqidShard {
        let micros = (us % 1_000_000) as u32;
        UniqidShard {
            shard: micros % self.total_shards,
            random_prefix: rng.next_u32() as u16,
            // PHP casts tv_sec to a C int and prints it as unsigned 32-bit.
            seconds: (us / 1_000_000) as u32,
            micros,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn prefix_boundary_comes_from_the_suffix_length() {
        let id = UniqidShard::parse("10f25d6b019ca982e7a");
        assert_eq!(id.map(|i| (i.shard(), i.random_prefix())), Ok((10, 0xf25d)));
    }

    #[test]
    fn mint_for_shard_hits_the_shard_and_never_repeats() {
        let clock = ManualClock::new(1_700_000_000_999_990);
        let m = UniqidMinter::new(&clock, 7);
        let mut rng = rand::rng();
        let mut last = 0;
        for i in 0..100u32 {
            let shard = i % 7;
            let id = m.mint_for_shard(shard, &mut rng);
            assert!(id.is_some(), "shard {shard} is in range");
            let Some(id) = id else { return };
            assert_eq!(id.shard(), shard);
            assert!(UniqidShard::parse_with(&id.to_string(), Some(7)).is_ok());
            assert!(id.timestamp_us() > last);
            last = id.timestamp_us();
        }
        assert!(m.mint_for_shard(7, &mut rng).is_none());
    }
}
