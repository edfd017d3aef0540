//! Injected time, and the lock-free monotonic state shared by the
//! time-first UUID minters (iUID and UUIDv7).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time. Minters take one so tests can fix the time.
pub trait Clock: Send + Sync {
    /// Microseconds since the Unix epoch (UTC).
    fn unix_micros(&self) -> u64;

    /// Milliseconds since the Unix epoch (UTC).
    fn unix_millis(&self) -> u64 {
        self.unix_micros() / 1000
    }
}

/// The system's real-time clock. A clock before 1970 reads as 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_micros(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
    }
}

impl SystemClock {
    /// Whole Unix seconds (for once-per-second bookkeeping).
    pub fn unix_secs(&self) -> u64 {
        self.unix_micros() / 1_000_000
    }
}

/// A clock that only moves when told to; for tests and reproducible output.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock showing `unix_micros`.
    pub fn new(unix_micros: u64) -> Self {
        ManualClock(AtomicU64::new(unix_micros))
    }

    /// A clock showing `unix_millis` (at the start of that millisecond).
    pub fn from_millis(unix_millis: u64) -> Self {
        Self::new(unix_millis.saturating_mul(1000))
    }

    /// Sets the time.
    pub fn set_micros(&self, unix_micros: u64) {
        self.0.store(unix_micros, Ordering::SeqCst);
    }

    /// Moves the clock forward (or backward, with a negative step).
    pub fn advance_micros(&self, delta: i64) {
        let _ = self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(t.saturating_add_signed(delta)));
    }
}

impl Clock for ManualClock {
    fn unix_micros(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn unix_micros(&self) -> u64 {
        (**self).unix_micros()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn unix_micros(&self) -> u64 {
        (**self).unix_micros()
    }
}

/// Number of counter bits kept beside the millisecond in [`Monotonic`].
pub(crate) const COUNTER_BITS: u32 = 22;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;
/// Largest millisecond [`Monotonic`] can hold: 2^42 - 1 ms is in the year 2109.
pub(crate) const MAX_MS: u64 = (1 << (64 - COUNTER_BITS)) - 1;

/// RFC 9562 §6.2 "Method 1" state: a millisecond and a 22-bit counter packed
/// in one `AtomicU64`, advanced with a compare-and-swap loop (no lock).
///
/// At a new millisecond the counter is seeded with 21 random bits (its top
/// bit is a guard bit left at zero, so at least 2^21 ids fit in every
/// millisecond); within the same millisecond it is incremented by one. When
/// it overflows, the carry moves the timestamp one millisecond ahead of real
/// time (the RFC's "increment the timestamp" option), so values stay strictly
/// increasing and unique for the life of the process, even if the wall clock
/// steps backwards.
///
/// Why method 1: it keeps the full 48-bit timestamp exact (method 3 would
/// spend the counter bits on sub-millisecond time that the clock may not
/// have), it needs one atomic word, and the remaining 32 random bits per id
/// keep ids from different processes apart.
#[derive(Debug, Default)]
pub(crate) struct Monotonic(AtomicU64);

impl Monotonic {
    /// Returns the next `(unix_ms, counter)` pair, strictly greater than every
    /// pair returned before by this state.
    pub(crate) fn next(&self, now_ms: u64, seed: u32) -> (u64, u32) {
        let fresh = (now_ms.min(MAX_MS) << COUNTER_BITS) | (u64::from(seed) & (COUNTER_MASK >> 1));
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let next = if fresh > cur { fresh } else { cur.wrapping_add(1) };
            match self.0.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return (next >> COUNTER_BITS, (next & COUNTER_MASK) as u32),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// Writes a Unix time in microseconds as ISO-8601 UTC (`2024-03-15T14:27:33.183Z`)
/// with 3 (milliseconds) or 6 (microseconds) fraction digits. Returns `None`
/// when the year would exceed 9999.
pub fn iso8601(unix_micros: u64, fraction_digits: u8) -> Option<Iso8601> {
    let secs = unix_micros / 1_000_000;
    let days = secs / 86_400;
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        return None;
    }
    let sod = secs % 86_400;
    Some(Iso8601 {
        year: y as u16,
        month: m,
        day: d,
        hour: (sod / 3600) as u8,
        minute: (sod / 60 % 60) as u8,
        second: (sod % 60) as u8,
        micros: (unix_micros % 1_000_000) as u32,
        fraction_digits,
    })
}

/// A broken-down UTC time that displays as ISO-8601 (see [`iso8601`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iso8601 {
    year: u16,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    micros: u32,
    fraction_digits: u8,
}

impl Iso8601 {
    /// The `yyyyMMddHHm` string of this time (the Locality sequential-mode window).
    pub(crate) fn ten_minute_window(&self) -> [u8; 11] {
        let mut out = [0u8; 11];
        let digits = [
            self.year / 1000,
            self.year / 100 % 10,
            self.year / 10 % 10,
            self.year % 10,
            u16::from(self.month / 10),
            u16::from(self.month % 10),
            u16::from(self.day / 10),
            u16::from(self.day % 10),
            u16::from(self.hour / 10),
            u16::from(self.hour % 10),
            u16::from(self.minute / 10),
        ];
        for (o, d) in out.iter_mut().zip(digits) {
            *o = b'0' + d as u8;
        }
        out
    }
}

impl Iso8601 {
    /// The ISO-8601 text as ASCII bytes (at most 27: `9999-12-31T23:59:59.999999Z`)
    /// and its length. Formatted by hand: `decode --json` writes one or two of
    /// these per id, and `write!` with padded integers cost more than the
    /// rest of the line (see `benches/decode_throughput.sh`).
    pub fn to_ascii(&self) -> ([u8; 27], usize) {
        let mut out = [0u8; 27];
        put_pair(&mut out, 0, u32::from(self.year) / 100);
        put_pair(&mut out, 2, u32::from(self.year));
        out[4] = b'-';
        put_pair(&mut out, 5, u32::from(self.month));
        out[7] = b'-';
        put_pair(&mut out, 8, u32::from(self.day));
        out[10] = b'T';
        put_pair(&mut out, 11, u32::from(self.hour));
        out[13] = b':';
        put_pair(&mut out, 14, u32::from(self.minute));
        out[16] = b':';
        put_pair(&mut out, 17, u32::from(self.second));
        let len = match self.fraction_digits {
            0 => 19,
            6 => {
                out[19] = b'.';
                put_pair(&mut out, 20, self.micros / 10_000);
                put_pair(&mut out, 22, self.micros / 100);
                put_pair(&mut out, 24, self.micros);
                26
            }
            _ => {
                let millis = self.micros / 1000;
                out[19] = b'.';
                out[20] = b'0' + (millis / 100 % 10) as u8;
                put_pair(&mut out, 21, millis);
                23
            }
        };
        out[len] = b'Z';
        (out, len + 1)
    }
}

/// The two-digit decimal forms of 0 to 99.
const DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut t = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        t[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    t
};

/// Writes the last two decimal digits of `v` at `at`: one table load per
/// pair instead of a division per digit (the time is a sixth of a
/// `decode --json` line).
#[inline(always)]
fn put_pair(out: &mut [u8; 27], at: usize, v: u32) {
    out[at..at + 2].copy_from_slice(&DIGIT_PAIRS[(v % 100) as usize]);
}

impl fmt::Display for Iso8601 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (bytes, len) = self.to_ascii();
        // Every byte written by to_ascii is an ASCII digit or separator.
        f.write_str(std::str::from_utf8(&bytes[..len]).map_err(|_| fmt::Error)?)
    }
}

/// Parses an RFC 3339 timestamp into Unix milliseconds (years 1970-9999):
/// the inverse of [`iso8601`], offsets allowed.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = b.get(r)?;
        if !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        s.iter().try_fold(0i64, |acc, d| Some(acc * 10 + i64::from(d - b'0')))
    };
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, min, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        let n = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        for k in 0..3 {
            millis = millis * 10 + if k < n { i64::from(b[start + k] - b'0') } else { 0 };
        }
        i = start + n;
    }
    let offset_min = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let oh = digits(i + 1..i + 3)?;
            let om = digits(i + 4..i + 6)?;
            let _ = (h1, h2, m1, m2);
            if oh > 23 || om > 59 {
                return None;
            }
            let v = oh * 60 + om;
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset_min * 60;
    let ms = secs.checked_mul(1000)?.checked_add(millis)?;
    u64::try_from(ms).ok()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`; the inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`, unsigned form).
fn civil_from_days(days: u64) -> (u64, u8, u8) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_parses_what_iso8601_writes() {
        for ms in [0u64, 1_700_000_000_123, 951_782_400_000, 4_102_444_799_999] {
            let text = iso8601(ms * 1000, 3).map(|t| t.to_string()).unwrap_or_default();
            assert_eq!(parse_rfc3339(&text), Some(ms), "{text}");
        }
        assert_eq!(parse_rfc3339("2024-01-01T01:00:00+01:00"), Some(1_704_067_200_000));
        for bad in ["2024-02-30T00:00:00Z", "2024-01-01 00:00:00Z", "2024-01-01T00:00:00", "1969-12-31T23:59:59Z"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn iso_formats_known_instants() {
        let t = iso8601(1_710_512_853_183_000, 3).map(|t| t.to_string());
        assert_eq!(t.as_deref(), Some("2024-03-15T14:27:33.183Z"));
        let t = iso8601(0, 6).map(|t| t.to_string());
        assert_eq!(t.as_deref(), Some("1970-01-01T00:00:00.000000Z"));
        let t = iso8601(951_782_400_000_000, 3).map(|t| t.to_string());
        assert_eq!(t.as_deref(), Some("2000-02-29T00:00:00.000Z"));
        assert_eq!(iso8601((1u64 << 48) * 1000, 3), None);
        let t = iso8601(253_402_300_799_999_999, 6).map(|t| t.to_string());
        assert_eq!(t.as_deref(), Some("9999-12-31T23:59:59.999999Z"));
        let t = iso8601(1_710_512_853_000_007, 0).map(|t| t.to_string());
        assert_eq!(t.as_deref(), Some("2024-03-15T14:27:33Z"));
    }

    #[test]
    fn digit_pairs_match_padded_formatting() -> Result<(), String> {
        let mut us = 1u64;
        while us < 253_402_300_800_000_000 {
            for digits in [0u8, 3, 6] {
                let t = iso8601(us, digits).ok_or(format!("{us} µs is before year 10000"))?;
                let fraction = match digits {
                    0 => String::new(),
                    6 => format!(".{:06}", t.micros),
                    _ => format!(".{:03}", t.micros / 1000),
                };
                let padded = format!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}Z",
                    t.year, t.month, t.day, t.hour, t.minute, t.second
                );
                assert_eq!(t.to_string(), padded, "{us} µs, {digits} digits");
            }
            us = us * 3 + 7_919;
        }
        Ok(())
    }

    #[test]
    fn monotonic_is_strictly_increasing_and_carries() {
        let m = Monotonic::default();
        let a = m.next(1000, 5);
        assert_eq!(a, (1000, 5));
        assert_eq!(m.next(1000, 0), (1000, 6));
        // clock going backwards keeps increasing
        assert_eq!(m.next(999, 0), (1000, 7));
        // a new millisecond reseeds
        assert_eq!(m.next(1001, 3), (1001, 3));
        // the seed's guard bit is cleared
        let m = Monotonic::default();
        let (_, c) = m.next(7, u32::MAX);
        assert_eq!(c, (1 << 21) - 1);
        // overflow carries into the timestamp
        let m = Monotonic::default();
        m.0.store((7 << COUNTER_BITS) | COUNTER_MASK, Ordering::SeqCst);
        assert_eq!(m.next(7, 0), (8, 0));
    }
}
