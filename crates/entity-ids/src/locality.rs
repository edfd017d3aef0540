//! Groupon Locality UUID, version `b` (spec §1).
//!
//! ```text
//! CCCCCCCC-PPPP-bMMM-MMMM-TTTTTTTTTTTT
//! counter field (32) | pid (16) | version b (4) | MAC fragment (28) | Unix ms (48)
//! ```
//!
//! A vB id has no RFC variant (octet 8 holds MAC bits). The parser accepts
//! exactly Java's `isValidUUID` shape (no trimming) and then requires the
//! version digit `b`/`B`.
//!
//! Parse, read the fields, format; mint with an injected clock (no random
//! source: the counter and the node identity make ids unique):
//!
//! ```
//! use entity_ids::{LocalityMinter, LocalityUuid, ManualClock, NodeIdentity};
//!
//! let text = LocalityUuid::from_fields(0x1234_5678, 4464, 0x0c1_1002, 1_700_000_000_000).to_string();
//! let id = LocalityUuid::parse(&text)?;
//! assert_eq!((id.pid(), id.mac_fragment(), id.timestamp_ms()), (4464, 0x0c1_1002, 1_700_000_000_000));
//! assert_eq!(id.to_string(), text);
//!
//! let node = NodeIdentity { pid: 4464, mac_fragment: 0x0c1_1002 };
//! let minter = LocalityMinter::new(ManualClock::from_millis(1_700_000_000_000), node, 0);
//! let minted = minter.mint();
//! assert_eq!((minted.pid(), minted.timestamp_ms()), (4464, 1_700_000_000_000));
//! assert_ne!(minter.mint(), minted);
//! # Ok::<(), entity_ids::IdError>(())
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use md5::{Digest, Md5};

use super::clock::{iso8601, Clock};
use super::{text, Field, Format, IdError, Key, Reason};

/// The prime added to the counter before each id in variable mode.
pub const INCREMENT: u32 = 198_491_317;

/// A valid Locality UUID vB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalityUuid(u128);

impl LocalityUuid {
    /// Parses the 36-character text form (hex case-insensitive, no trimming).
    pub fn parse(s: &str) -> Result<LocalityUuid, IdError> {
        let err = |r| IdError::new(Format::Locality, r);
        let v = text::parse_uuid(s).map_err(err)?;
        Self::from_u128(v).map_err(err)
    }

    /// Checks the version nibble of a 128-bit value.
    pub fn from_u128(v: u128) -> Result<LocalityUuid, Reason> {
        if (v >> 76) & 0xf != 0xb {
            return Err(Reason::VersionNotB);
        }
        Ok(LocalityUuid(v))
    }

    /// Builds an id from its raw fields (`mac_fragment` truncated to 28 bits,
    /// `timestamp_ms` to 48).
    pub const fn from_fields(counter_field: u32, pid: u16, mac_fragment: u32, timestamp_ms: u64) -> LocalityUuid {
        LocalityUuid(
            ((counter_field as u128) << 96)
                | ((pid as u128) << 80)
                | (0xb << 76)
                | ((mac_fragment as u128 & 0x0fff_ffff) << 48)
                | (timestamp_ms as u128 & 0xffff_ffff_ffff),
        )
    }

    /// The 128-bit big-endian value.
    pub const fn as_u128(&self) -> u128 {
        self.0
    }

    /// Octets 0–3 as written (offsets 0–7): opaque; the id does not say
    /// which mode produced it.
    pub const fn counter_field(&self) -> u32 {
        (self.0 >> 96) as u32
    }

    /// The counter as variable mode wrote it: the field's 8 hex characters
    /// reversed (wrong for Java ids whose counter had bit 31 set).
    pub const fn counter_decoded_reversed(&self) -> u32 {
        reverse_nibbles(self.counter_field())
    }

    /// Process id modulo 65536.
    pub const fn pid(&self) -> u16 {
        (self.0 >> 80) as u16
    }

    /// The low 28 bits of the minting host's MAC address.
    pub const fn mac_fragment(&self) -> u32 {
        ((self.0 >> 48) & 0x0fff_ffff) as u32
    }

    /// Unix time in milliseconds.
    pub const fn timestamp_ms(&self) -> u64 {
        (self.0 & 0xffff_ffff_ffff) as u64
    }

    pub(crate) fn for_each_key(&self, f: &mut dyn FnMut(&'static Key, Field)) {
        f(key!("version"), Field::Str("b"));
        f(key!("is_vb"), Field::Bool(true));
        f(key!("counter_field_hex"), Field::Hex { value: u128::from(self.counter_field()), width: 8 });
        f(key!("counter_decoded_reversed"), Field::Int(u64::from(self.counter_decoded_reversed())));
        f(key!("counter_decoded_sequential"), Field::Int(u64::from(self.counter_field())));
        f(key!("pid"), Field::Int(u64::from(self.pid())));
        f(key!("mac_fragment_hex"), Field::Hex { value: u128::from(self.mac_fragment()), width: 7 });
        f(key!("timestamp_ms"), Field::Int(self.timestamp_ms()));
        f(key!("timestamp_iso"), Field::TimeMs(self.timestamp_ms()));
        f(key!("bytes_hex"), Field::Hex { value: self.0, width: 32 });
    }
}

impl fmt::Display for LocalityUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        text::write_uuid(self.0, f)
    }
}

/// The hex characters of `c` in reverse order: hex digit `i` of the result
/// (from the left) is nibble `i` of `c` counted from the least-significant
/// end. Not a byte swap: `0x12345678` → `0x87654321`.
pub const fn reverse_nibbles(c: u32) -> u32 {
    let mut out = 0u32;
    let mut i = 0;
    while i < 8 {
        out = (out << 4) | ((c >> (4 * i)) & 0xf);
        i += 1;
    }
    out
}

/// Which counter encoding a [`LocalityMinter`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LocalityMode {
    /// Counter advanced by [`INCREMENT`], written nibble-reversed (spreads
    /// consecutive ids over key-hash shards).
    #[default]
    Variable,
    /// Counter seeded from the UTC 10-minute window, +1 per id, written
    /// big-endian (ids of one window share their first characters).
    Sequential,
}

/// The node identity written into minted ids. Take it from configuration:
/// in containers every process tends to be pid 1 and MACs are random, which
/// defeats the format's uniqueness argument (spec §1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NodeIdentity {
    /// Process id field (pid modulo 65536).
    pub pid: u16,
    /// Low 28 bits of the MAC address (higher bits are ignored).
    pub mac_fragment: u32,
}

/// A MAC fragment as written in tables and on the command line: exactly 7
/// hex digits (28 bits), either case.
pub fn parse_mac_fragment(text: &str) -> Option<u32> {
    if text.len() != 7 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

impl NodeIdentity {
    /// The identity Groupon's libraries derive from a 48-bit MAC and an OS pid.
    pub fn from_mac(mac: [u8; 6], os_pid: u32) -> NodeIdentity {
        let fragment =
            (u32::from(mac[2] & 0x0f) << 24) | (u32::from(mac[3]) << 16) | (u32::from(mac[4]) << 8) | u32::from(mac[5]);
        NodeIdentity { pid: (os_pid % 65_536) as u16, mac_fragment: fragment }
    }
}

/// The sequential-mode seed for a UTC time: MD5 of the ASCII `yyyyMMddHHm`
/// string (the first 11 characters of `yyyyMMddHHmm`, so it changes every 10
/// minutes), first four digest bytes read little-endian.
pub fn sequential_seed(unix_ms: u64) -> u32 {
    match iso8601(unix_ms.saturating_mul(1000), 3) {
        Some(t) => sequential_seed_from_window(&t.ten_minute_window()),
        // Beyond year 9999 the Java format would have more digits; any fixed
        // seed keeps minting working.
        None => sequential_seed_from_window(b"99991231235"),
    }
}

/// The sequential-mode seed for a `yyyyMMddHHm` window string.
pub fn sequential_seed_from_window(window: &[u8]) -> u32 {
    let d = Md5::digest(window);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// Mints Locality UUIDs like Groupon's libraries, without a lock: the
/// counter is one `AtomicU32` advanced with `fetch_add` (wrapping modulo
/// 2^32, as the spec recommends), so every id of a process has a distinct
/// counter value until 2^32 ids have been minted within one millisecond.
#[derive(Debug)]
pub struct LocalityMinter<C: Clock> {
    clock: C,
    node: NodeIdentity,
    counter: AtomicU32,
    mode: AtomicU8,
    java_compat: bool,
}

impl<C: Clock> LocalityMinter<C> {
    /// A variable-mode minter for `node`, starting from the random
    /// `start_counter` (the first id uses `start_counter + INCREMENT`).
    pub fn new(clock: C, node: NodeIdentity, start_counter: u32) -> Self {
        LocalityMinter {
            clock,
            node,
            counter: AtomicU32::new(start_counter),
            mode: AtomicU8::new(0),
            java_compat: false,
        }
    }

    /// Reproduce the Java library's sign-extension quirk (offset 6 forced to
    /// `f` when bit 31 of the counter is set), so ids match Java byte for
    /// byte. Off by default: the quirk maps 16 counters to one id.
    pub fn java_compat(mut self, on: bool) -> Self {
        self.java_compat = on;
        self
    }

    /// The current mode.
    pub fn mode(&self) -> LocalityMode {
        if self.mode.load(Ordering::Acquire) == 1 {
            LocalityMode::Sequential
        } else {
            LocalityMode::Variable
        }
    }

    /// Switches mode like the libraries' toggles: switching to sequential
    /// reseeds from the current 10-minute window (doing it while already
    /// sequential does nothing); switching to variable continues from the
    /// current counter.
    pub fn set_mode(&self, mode: LocalityMode) {
        match mode {
            LocalityMode::Variable => self.mode.store(0, Ordering::Release),
            LocalityMode::Sequential => {
                if self.mode.swap(1, Ordering::AcqRel) == 0 {
                    self.counter.store(sequential_seed(self.clock.unix_millis()), Ordering::Release);
                }
            }
        }
    }

    /// Sets the counter (the next id advances from this value).
    pub fn set_counter(&self, value: u32) {
        self.counter.store(value, Ordering::Release);
    }

    /// A fresh id.
    pub fn mint(&self) -> LocalityUuid {
        let field = match self.mode() {
            LocalityMode::Sequential => self.counter.fetch_add(1, Ordering::AcqRel).wrapping_add(1),
            LocalityMode::Variable => {
                let c = self.counter.fetch_add(INCREMENT, Ordering::AcqRel).wrapping_add(INCREMENT);
                let field = reverse_nibbles(c);
                if self.java_compat && c & 0x8000_0000 != 0 {
                    // Java shifts `c & 0xF0000000` arithmetically: ones fill
                    // the high nibble of octet 3 (string offset 6).
                    field | 0x0000_00f0
                } else {
                    field
                }
            }
        };
        LocalityUuid::from_fields(field, self.node.pid, self.node.mac_fragment, self.clock.unix_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn reversal_is_of_characters_not_bytes() {
        assert_eq!(reverse_nibbles(0x1234_5678), 0x8765_4321);
    }

    #[test]
    fn java_quirk_examples_from_the_spec() {
        let m = LocalityMinter::new(ManualClock::from_millis(0), NodeIdentity::default(), 0).java_compat(true);
        for (c, field) in [(0x8000_0000u32, 0x0000_00f8u32), (0xdead_beef, 0xfeeb_dafd), (0x7fff_ffff, 0xffff_fff7)] {
            m.set_counter(c.wrapping_sub(INCREMENT));
            assert_eq!(m.mint().counter_field(), field, "counter {c:#x}");
        }
    }

    #[test]
    fn readme_sequential_seed() {
        assert_eq!(sequential_seed_from_window(b"20130428010"), 0xf516_6775);
        assert_eq!(sequential_seed_from_window(b"20240315142"), 0xbd5e_ae43);
        // 2024-03-15T14:27:33Z lies in window "20240315142"
        assert_eq!(sequential_seed(1_710_512_853_183), 0xbd5e_ae43);
    }

    #[test]
    fn readme_example_decodes() {
        let id = LocalityUuid::parse("20be0ffc-314a-bd53-7a50-013a65ca76d2");
        let f = id.map(|i| (i.counter_decoded_reversed(), i.pid(), i.mac_fragment(), i.timestamp_ms()));
        assert_eq!(f, Ok((3_488_672_514, 12_618, 0x0d53_7a50, 1_350_327_498_450)));
    }
}
