//! Property tests of the id codecs (issue 2, "How we will know"):
//!
//! * format(parse(s)) == lowercase(s) for every valid id of every format;
//! * parse(mint()) returns the fields the id was minted with;
//! * minted ids are strictly increasing per generator, also when the clock
//!   stands still or steps backwards;
//! * no parser panics on any string, every rejection names one of the
//!   documented reason codes, and nothing is trimmed;
//! * two threads minting 5 million iUIDs each (and 1 million UUIDv7s each)
//!   from one shared minter produce no duplicate.

use std::collections::HashSet;
use std::sync::Arc;

use entity_ids as ids;
use entity_ids::{
    Format, Instagram, InstagramLayout, Iuid, IuidMinter, LocalityMinter, LocalityMode, LocalityUuid, ManualClock,
    NodeIdentity, Params, Reason, Snowflake, Sonyflake, SonyflakeFlavor, SystemClock, UniqidMinter, UniqidShard, Uuid7,
    Uuid7Minter,
};
use proptest::prelude::*;
use rand::RngCore;

// ---------------------------------------------------------------------------
// helpers

const MS_48: u64 = (1 << 48) - 1;
/// The minters' monotonic state holds 42 bits of milliseconds (up to the
/// year 2109) and clamps later clock readings there; mint tests stay below.
const MINT_MS: u64 = (1 << 42) - 1;
const RAND_54: u64 = (1 << 54) - 1;

/// Uppercases the characters whose index bit is set in `mask` (hex letters
/// only change; digits and hyphens stay).
fn random_case(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| if i < 64 && (mask >> i) & 1 == 1 { c.to_ascii_uppercase() } else { c })
        .collect()
}

/// Parses `s` as `format` with `params` and checks everything a parse must
/// satisfy: no panic (implicitly), a documented reason code for the format
/// on rejection, and a canonical lowercase form on success.
fn check_parse(format: Format, s: &str, params: &Params) -> Result<Option<String>, TestCaseError> {
    match ids::parse(format, s, params) {
        Ok(d) => {
            prop_assert_eq!(d.format(), format);
            let canonical = d.to_string();
            prop_assert_eq!(&canonical, &s.to_ascii_lowercase(), "{} {:?}", format, s);
            Ok(Some(canonical))
        }
        Err(e) => {
            prop_assert_eq!(e.format, format);
            prop_assert!(format.reasons().contains(&e.reason), "{} rejected {:?} with {}", format, s, e.reason.code());
            prop_assert!(!e.reason.explain().is_empty());
            prop_assert!(!e.to_string().contains('\n'));
            Ok(None)
        }
    }
}

/// Runs every parser (with default and with strict uniqid parameters) on `s`.
fn check_all_parsers(s: &str, total_shards: u32) -> Result<(), TestCaseError> {
    let strict = Params { uniqid_total_shards: Some(total_shards), ..Params::default() };
    let v2 = Params { sonyflake: SonyflakeFlavor::V2, ..Params::default() };
    for format in Format::ALL {
        check_parse(format, s, &Params::default())?;
        check_parse(format, s, &strict)?;
        check_parse(format, s, &v2)?;
    }
    // The typed entry points agree with `ids::parse`.
    prop_assert_eq!(Iuid::parse(s).is_ok(), ids::parse(Format::Iuid, s, &Params::default()).is_ok());
    prop_assert_eq!(Uuid7::parse(s).is_ok(), ids::parse(Format::Uuidv7, s, &Params::default()).is_ok());
    prop_assert_eq!(LocalityUuid::parse(s).is_ok(), ids::parse(Format::Locality, s, &Params::default()).is_ok());
    prop_assert_eq!(UniqidShard::parse(s).is_ok(), ids::parse(Format::Uniqid, s, &Params::default()).is_ok());
    prop_assert_eq!(Snowflake::parse(s).is_ok(), ids::parse(Format::Snowflake, s, &Params::default()).is_ok());
    // Parsing several formats at once (the UUID text decoded once) gives
    // what each format's own parse gives, in either order.
    for params in [Params::default(), strict, v2] {
        let one_by_one: Vec<_> = Format::ALL.iter().map(|&f| ids::parse(f, s, &params)).collect();
        let mut at_once = Vec::new();
        ids::parse_each(&Format::ALL, s, &params, |r| at_once.push(r));
        prop_assert_eq!(&at_once, &one_by_one);
        let reversed: Vec<Format> = Format::ALL.iter().rev().copied().collect();
        let mut backwards = Vec::new();
        ids::parse_each(&reversed, s, &params, |r| backwards.push(r));
        backwards.reverse();
        prop_assert_eq!(&backwards, &one_by_one);
        let first = one_by_one.iter().find(|r| r.is_ok()).unwrap_or(&one_by_one[0]);
        prop_assert_eq!(&ids::parse_any(&Format::ALL, s, &params), first);
    }
    let _ = ids::escape_for_display(s, 80);
    Ok(())
}

/// A deterministic random source for minters (the minters only need `RngCore`).
struct Fixed(u64);

impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(self.0 as u8);
    }
}

// ---------------------------------------------------------------------------
// strategies

fn iuid_text() -> impl Strategy<Value = String> {
    (0..=MS_48, any::<u8>(), any::<u8>(), any::<u64>())
        .prop_map(|(ts, c, e, r)| Iuid::from_fields(ts, c, e, r).to_string())
}

fn uuid7_text() -> impl Strategy<Value = String> {
    (0..=MS_48, any::<u16>(), any::<u64>()).prop_map(|(ts, a, b)| Uuid7::from_fields(ts, a, b).to_string())
}

fn locality_text() -> impl Strategy<Value = String> {
    (any::<u32>(), any::<u16>(), any::<u32>(), 0..=MS_48)
        .prop_map(|(c, p, m, ts)| LocalityUuid::from_fields(c, p, m, ts).to_string())
}

fn uuid_shaped_text() -> impl Strategy<Value = String> {
    prop_oneof![
        iuid_text(),
        uuid7_text(),
        locality_text(),
        any::<u128>().prop_map(|v| uuid::Uuid::from_u128(v).to_string())
    ]
}

/// Characters that break parsers that are not strict enough.
fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        Just('+'),
        Just('-'),
        Just(' '),
        Just('\t'),
        Just('\n'),
        Just('\r'),
        Just('\0'),
        Just('_'),
        Just('{'),
        Just('g'),
        Just('G'),
        Just('x'),
        Just('０'),       // fullwidth zero
        Just('９'),       // fullwidth nine
        Just('٣'),        // Arabic-Indic three
        Just('\u{ff21}'), // fullwidth A
        Just('é'),
        Just('\u{feff}'), // BOM
        any::<char>(),
        (b'0'..=b'z').prop_map(char::from),
    ]
}

/// A valid id with one or two characters replaced, inserted or removed.
fn near_miss(base: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (base, prop::collection::vec((any::<prop::sample::Index>(), nasty_char(), 0..3u8), 1..3)).prop_map(|(s, edits)| {
        let mut chars: Vec<char> = s.chars().collect();
        for (at, c, op) in edits {
            let i = at.index(chars.len() + 1);
            match op {
                0 if i < chars.len() => chars[i] = c,
                1 if i < chars.len() => {
                    chars.remove(i);
                }
                _ => chars.insert(i, c),
            }
        }
        chars.into_iter().collect()
    })
}

fn uniqid() -> impl Strategy<Value = UniqidShard> {
    (any::<u32>(), any::<u16>(), any::<u32>(), 0..=999_999u32)
        .prop_filter_map("micros in range", |(sh, p, s, us)| UniqidShard::from_fields(sh, p, s, us))
}

/// Strings around the decimal shapes: signs, Unicode digits, whitespace,
/// leading zeros, values around 2^63 and 2^64.
fn decimal_ish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[+-]?[0-9]{1,22}",
        "[0-9０-９٠-٩]{1,21}",
        "[ \t\n\r\u{0}]?[0-9]{1,20}[ \t\n\r\u{0}]?",
        "0[0-9]{0,20}",
        (9_223_372_036_854_775_000u64..=u64::MAX).prop_map(|v| v.to_string()),
        (0u64..2000).prop_map(|d| format!("1844674407370955{d:04}")),
        any::<u64>().prop_map(|v| format!("{v}\n")),
        any::<u64>().prop_map(|v| format!("+{v}")),
    ]
}

/// Strings around the uniqid shape.
fn uniqid_ish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,4}[0-9a-fA-F]{15,19}",
        "[+0-9 ]{0,3}[0-9a-f]{17}\n?",
        uniqid().prop_map(|u| u.to_string()),
        near_miss(uniqid().prop_map(|u| u.to_string())),
    ]
}

// ---------------------------------------------------------------------------
// format(parse(s)) == lowercase(s)

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn iuid_round_trips(ts in 0..=MS_48, country: u8, entity: u8, rand: u64, case: u64) {
        let s = random_case(&Iuid::from_fields(ts, country, entity, rand).to_string(), case);
        let id = Iuid::parse(&s).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
        prop_assert_eq!(id.to_string(), s.to_ascii_lowercase());
        prop_assert_eq!(
            (id.unix_ts_ms(), id.ver1(), id.country(), id.service_entity(), id.rand()),
            (ts, 0, country, entity, rand & RAND_54)
        );
        prop_assert_eq!(check_parse(Format::Iuid, &s, &Params::default())?, Some(s.to_ascii_lowercase()));
    }

    #[test]
    fn uuid7_round_trips(ts in 0..=MS_48, rand_a: u16, rand_b: u64, case: u64) {
        let s = random_case(&Uuid7::from_fields(ts, rand_a, rand_b).to_string(), case);
        let id = Uuid7::parse(&s).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
        prop_assert_eq!(id.to_string(), s.to_ascii_lowercase());
        prop_assert_eq!((id.unix_ts_ms(), id.rand_a(), id.rand_b()), (ts, rand_a & 0xfff, rand_b & ((1 << 62) - 1)));
        // the uuid crate reads the same value, version and variant
        let u = uuid::Uuid::try_parse(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!((u.as_u128(), u.get_version_num()), (id.as_u128(), 7));
    }

    #[test]
    fn locality_round_trips(counter: u32, pid: u16, mac: u32, ts in 0..=MS_48, case: u64) {
        let s = random_case(&LocalityUuid::from_fields(counter, pid, mac, ts).to_string(), case);
        let id = LocalityUuid::parse(&s).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
        prop_assert_eq!(id.to_string(), s.to_ascii_lowercase());
        prop_assert_eq!(
            (id.counter_field(), id.pid(), id.mac_fragment(), id.timestamp_ms()),
            (counter, pid, mac & 0x0fff_ffff, ts)
        );
    }

    #[test]
    fn uniqid_round_trips(id in uniqid(), case: u64) {
        let s = id.to_string();
        prop_assert_eq!(UniqidShard::parse(&s), Ok(id));
        prop_assert_eq!(check_parse(Format::Uniqid, &s, &Params::default())?, Some(s.clone()));
        // strict mode accepts exactly the ids whose prefix is micros % total
        for total in [1u32, 2, 7, 16, 1000] {
            let strict = UniqidShard::parse_with(&s, Some(total)).map_err(|e| e.reason);
            let expected = if id.shard() >= total {
                Err(Reason::ShardOutOfRange)
            } else if id.microseconds() % total != id.shard() {
                Err(Reason::ShardPrefixMismatch)
            } else {
                Ok(id)
            };
            prop_assert_eq!(strict, expected);
        }
        // the scheme only emits lowercase: an uppercase hex letter in the
        // 17-character part is rejected, never folded
        let upper = random_case(&s, case);
        let tail_changed = upper[upper.len() - 17..] != s[s.len() - 17..];
        let got = UniqidShard::parse(&upper).map_err(|e| e.reason);
        if tail_changed {
            prop_assert_eq!(got, Err(Reason::UppercaseHexInUniqPart));
        } else {
            prop_assert_eq!(got, Ok(id));
        }
    }

    #[test]
    fn decimal_formats_round_trip(v: u64) {
        let s = v.to_string();
        let sf = Snowflake::parse(&s).map(|i| i.to_string()).map_err(|e| e.reason);
        prop_assert_eq!(sf, if v >> 63 == 0 { Ok(s.clone()) } else { Err(Reason::SignBitSet) });
        for flavor in [SonyflakeFlavor::V1, SonyflakeFlavor::V2] {
            let so = Sonyflake::parse_with(&s, flavor).map(|i| i.to_string()).map_err(|e| e.reason);
            prop_assert_eq!(so, if v >> 63 == 0 { Ok(s.clone()) } else { Err(Reason::MsbSet) });
        }
        let ig = Instagram::parse_with(&s, InstagramLayout::default()).map(|i| (i.value(), i.to_string()));
        prop_assert_eq!(ig.map_err(|e| e.reason), Ok((v, s.clone())));
        for format in [Format::Snowflake, Format::Sonyflake, Format::Instagram] {
            check_parse(format, &s, &Params::default())?;
        }
    }

    #[test]
    fn every_valid_uuid_shape_round_trips_in_every_format(s in uuid_shaped_text(), case: u64) {
        let s = random_case(&s, case);
        for format in Format::ALL {
            check_parse(format, &s, &Params::default())?;
        }
    }
}

// ---------------------------------------------------------------------------
// no panic on any input; documented reasons; no trimming

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn no_parser_panics_on_any_string(s in any::<String>(), total in 1..2000u32) {
        check_all_parsers(&s, total)?;
    }

    #[test]
    fn no_parser_panics_on_near_uuids(s in near_miss(uuid_shaped_text()), total in 1..64u32) {
        check_all_parsers(&s, total)?;
    }

    #[test]
    fn no_parser_panics_around_decimals(s in decimal_ish(), total in 1..64u32) {
        check_all_parsers(&s, total)?;
        // every accepted decimal is canonical ASCII: no sign, no Unicode digit, no padding
        if Instagram::parse_with(&s, InstagramLayout::default()).is_ok() {
            prop_assert!(s.bytes().all(|b| b.is_ascii_digit()));
            prop_assert!(s == "0" || !s.starts_with('0'));
        }
    }

    #[test]
    fn no_parser_panics_around_uniqids(s in uniqid_ish(), total in 1..64u32) {
        check_all_parsers(&s, total)?;
    }

    #[test]
    fn nothing_is_trimmed(s in prop_oneof![uuid_shaped_text(), uniqid().prop_map(|u| u.to_string()), any::<u64>().prop_map(|v| v.to_string())],
                          pad in prop::sample::select(vec![" ", "\t", "\n", "\r\n", "\0", "\u{feff}", "\u{a0}"]),
                          before: bool) {
        let padded = if before { format!("{pad}{s}") } else { format!("{s}{pad}") };
        for format in Format::ALL {
            prop_assert!(ids::parse(format, &padded, &Params::default()).is_err(), "{} accepted {:?}", format, padded);
        }
    }

    /// Differential check against the `uuid` crate on 36-character inputs:
    /// we accept an iUID exactly when uuid reads version 8, the RFC variant
    /// and ver1 = 0 (and a UUIDv7 when it reads version 7 and the RFC
    /// variant), and then both read the same 128 bits.
    #[test]
    fn uuid_parsers_agree_with_the_uuid_crate(s in prop_oneof![uuid_shaped_text(), near_miss(uuid_shaped_text())], case: u64) {
        let s = random_case(&s, case);
        let theirs = if s.len() == 36 { uuid::Uuid::try_parse(&s).ok() } else { None };
        let rfc = |u: &uuid::Uuid| u.get_variant() == uuid::Variant::RFC4122;
        let want_iuid = theirs.filter(|u| u.get_version_num() == 8 && rfc(u) && (u.as_u128() >> 72) & 0xf == 0);
        prop_assert_eq!(Iuid::parse(&s).ok().map(|i| i.as_u128()), want_iuid.map(|u| u.as_u128()), "{:?}", s);
        let want_v7 = theirs.filter(|u| u.get_version_num() == 7 && rfc(u));
        prop_assert_eq!(Uuid7::parse(&s).ok().map(|i| i.as_u128()), want_v7.map(|u| u.as_u128()), "{:?}", s);
        let want_loc = theirs.filter(|u| u.get_version_num() == 11);
        prop_assert_eq!(LocalityUuid::parse(&s).ok().map(|i| i.as_u128()), want_loc.map(|u| u.as_u128()), "{:?}", s);
    }
}

// ---------------------------------------------------------------------------
// parse(mint()) returns what was minted

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn minted_iuids_carry_their_fields(country: u8, entity: u8, start_ms in 0..MINT_MS - 1_000, seed: u64) {
        let clock = ManualClock::from_millis(start_ms);
        let m = IuidMinter::new(&clock);
        let mut rng = Fixed(seed);
        for _ in 0..8 {
            let id = m.mint(country, entity, &mut rng);
            let back = Iuid::parse(&id.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, id);
            prop_assert_eq!((back.country(), back.service_entity(), back.ver1()), (country, entity, 0));
            // 8 ids cannot overflow the counter (seeded below 2^21): the clock's time
            prop_assert_eq!(back.unix_ts_ms(), start_ms);
            // the low 32 random bits come from the random source
            prop_assert_eq!(back.rand() & 0xffff_ffff, seed & 0xffff_ffff);
        }
        let real = IuidMinter::new(SystemClock).mint(country, entity, &mut rand::rng());
        prop_assert_eq!(Iuid::parse(&real.to_string()).map(|i| (i.country(), i.service_entity())), Ok((country, entity)));
    }

    #[test]
    fn minted_uuid7s_carry_their_time(start_ms in 0..MINT_MS - 1_000) {
        let clock = ManualClock::from_millis(start_ms);
        let m = Uuid7Minter::new(&clock);
        let id = m.mint(&mut rand::rng());
        let back = Uuid7::parse(&id.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, id);
        prop_assert_eq!(back.unix_ts_ms(), start_ms);
        let u = uuid::Uuid::try_parse(&id.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(u.get_version_num(), 7);
    }

    #[test]
    fn minted_uniqids_land_in_their_shard(total in 1..=1000u32, shard_pick: prop::sample::Index,
                                          start_us in 1_000_000u64..4_000_000_000_000_000) {
        let shard = shard_pick.index(total as usize) as u32;
        let clock = ManualClock::new(start_us);
        let m = UniqidMinter::new(&clock, total);
        let mut rng = rand::rng();
        for _ in 0..4 {
            let Some(id) = m.mint_for_shard(shard, &mut rng) else {
                return Err(TestCaseError::fail("shard below total refused"));
            };
            let s = id.to_string();
            let back = UniqidShard::parse_with(&s, Some(total)).map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
            prop_assert_eq!(back, id);
            prop_assert_eq!(back.shard(), shard);
            prop_assert!(back.timestamp_us() >= start_us);
            // the free-running mint also passes the strict check
            let free = m.mint(&mut rng);
            prop_assert_eq!(UniqidShard::parse_with(&free.to_string(), Some(total)), Ok(free));
        }
        prop_assert!(m.mint_for_shard(total, &mut rng).is_none());
    }

    #[test]
    fn minted_locality_ids_carry_the_node(pid: u16, mac: u32, start_ms in 0..MS_48, counter: u32,
                                          sequential: bool, java: bool) {
        let clock = ManualClock::from_millis(start_ms);
        let node = NodeIdentity { pid, mac_fragment: mac & 0x0fff_ffff };
        let m = LocalityMinter::new(&clock, node, counter).java_compat(java);
        if sequential {
            m.set_mode(LocalityMode::Sequential);
        }
        let mut seen = HashSet::new();
        for i in 0..16u32 {
            let id = m.mint();
            let back = LocalityUuid::parse(&id.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, id);
            prop_assert_eq!((back.pid(), back.mac_fragment(), back.timestamp_ms()), (pid, mac & 0x0fff_ffff, start_ms));
            if !sequential && !java {
                let c = counter.wrapping_add(locality_increment().wrapping_mul(i + 1));
                prop_assert_eq!(back.counter_decoded_reversed(), c);
            }
            if !java {
                // without the Java quirk, distinct counters give distinct ids
                prop_assert!(seen.insert(back.as_u128()));
            }
        }
    }
}

fn locality_increment() -> u32 {
    ids::locality::INCREMENT
}

// ---------------------------------------------------------------------------
// strictly increasing per generator, whatever the clock does

/// Clock moves: stand still, step forward, step backwards (by up to 5 s).
fn clock_steps() -> impl Strategy<Value = Vec<(i64, u8)>> {
    prop::collection::vec(
        (prop_oneof![Just(0i64), -5_000_000i64..0, 0i64..5_000_000, -1_500i64..1_500], 1..40u8),
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn iuids_strictly_increase(steps in clock_steps(), country: u8, entity: u8, start_ms in 10_000..MINT_MS - 1_000_000) {
        let clock = ManualClock::from_millis(start_ms);
        let m = IuidMinter::new(&clock);
        let mut rng = rand::rng();
        let mut last = m.mint(country, entity, &mut rng);
        for (delta, n) in steps {
            clock.advance_micros(delta);
            for _ in 0..n {
                let next = m.mint(country, entity, &mut rng);
                prop_assert!(next > last, "{} !> {}", next, last);
                // the text form sorts the same way
                prop_assert!(next.to_string() > last.to_string());
                last = next;
            }
        }
    }

    /// Across countries and entities the (timestamp, counter) pair increases:
    /// one state per minter, so ids never collide across countries either.
    #[test]
    fn iuid_time_and_counter_strictly_increase_across_countries(steps in clock_steps(), start_ms in 10_000..MINT_MS - 1_000_000) {
        let clock = ManualClock::from_millis(start_ms);
        let m = IuidMinter::new(&clock);
        let mut rng = rand::rng();
        let key = |i: Iuid| (i.unix_ts_ms(), i.rand() >> 32);
        let mut last = key(m.mint(0, 0, &mut rng));
        for (k, (delta, n)) in steps.into_iter().enumerate() {
            clock.advance_micros(delta);
            for j in 0..n {
                let next = key(m.mint(k as u8, j, &mut rng));
                prop_assert!(next > last);
                last = next;
            }
        }
    }

    #[test]
    fn uuid7s_strictly_increase(steps in clock_steps(), start_ms in 10_000..MINT_MS - 1_000_000) {
        let clock = ManualClock::from_millis(start_ms);
        let m = Uuid7Minter::new(&clock);
        let mut rng = rand::rng();
        let mut last = m.mint(&mut rng);
        for (delta, n) in steps {
            clock.advance_micros(delta);
            for _ in 0..n {
                let next = m.mint(&mut rng);
                prop_assert!(next > last, "{} !> {}", next, last);
                last = next;
            }
        }
    }

    #[test]
    fn uniqid_timestamps_strictly_increase(steps in clock_steps(), total in 1..100u32, start_us in 10_000_000u64..4_000_000_000_000_000) {
        let clock = ManualClock::new(start_us);
        let m = UniqidMinter::new(&clock, total);
        let mut rng = rand::rng();
        let mut last = m.mint(&mut rng).timestamp_us();
        for (k, (delta, n)) in steps.into_iter().enumerate() {
            clock.advance_micros(delta);
            for _ in 0..n {
                let id = if k % 2 == 0 {
                    m.mint(&mut rng)
                } else {
                    let shard = u32::from(n) % total;
                    m.mint_for_shard(shard, &mut rng).ok_or_else(|| TestCaseError::fail("shard refused"))?
                };
                prop_assert!(id.timestamp_us() > last);
                last = id.timestamp_us();
            }
        }
    }
}

/// A clock that stands still for more ids than fit in one millisecond: the
/// counter overflows and carries into the timestamp, and ids keep increasing.
#[test]
fn iuid_counter_overflow_carries_into_the_timestamp() {
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let m = IuidMinter::new(&clock);
    // A seed of all ones starts the counter at 2^21 - 1 (guard bit clear),
    // so the millisecond holds exactly 2^21 + 1 ids.
    let mut rng = Fixed(u64::MAX);
    let mut last = m.mint(1, 2, &mut rng);
    let per_ms = (1u32 << 21) + 1;
    for i in 1..per_ms + 10 {
        let next = m.mint(1, 2, &mut rng);
        assert!(next > last, "id {i}");
        let expected_ms = if i < per_ms { 1_700_000_000_000 } else { 1_700_000_000_001 };
        assert_eq!(next.unix_ts_ms(), expected_ms, "id {i}");
        last = next;
    }
    // the clock catching up continues from the carried state
    clock.advance_micros(1_000);
    assert!(m.mint(1, 2, &mut rng) > last);
}

// ---------------------------------------------------------------------------
// concurrency: no duplicate under two threads on one shared minter

/// Mints `per_thread` ids on each of two threads from one shared minter and
/// returns them all, sorted.
fn mint_on_two_threads<M: Send + Sync + 'static>(
    minter: M,
    per_thread: usize,
    mint: fn(&M, &mut rand::rngs::ThreadRng) -> u128,
) -> Vec<u128> {
    let minter = Arc::new(minter);
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let minter = Arc::clone(&minter);
            std::thread::spawn(move || {
                let mut rng = rand::rng();
                let mut out = Vec::with_capacity(per_thread);
                for _ in 0..per_thread {
                    out.push(mint(&minter, &mut rng));
                }
                out
            })
        })
        .collect();
    let mut all = Vec::with_capacity(2 * per_thread);
    for h in handles {
        match h.join() {
            Ok(v) => {
                // each thread sees its own ids strictly increasing
                assert!(v.windows(2).all(|w| w[0] < w[1]), "a thread's ids are not increasing");
                all.extend(v);
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    all.sort_unstable();
    all
}

fn count_duplicates(sorted: &[u128]) -> usize {
    sorted.windows(2).filter(|w| w[0] == w[1]).count()
}

#[test]
fn two_threads_mint_10_million_iuids_without_duplicate() {
    let ids = mint_on_two_threads(IuidMinter::new(SystemClock), 5_000_000, |m, rng| m.mint(7, 3, rng).as_u128());
    assert_eq!(ids.len(), 10_000_000);
    assert_eq!(count_duplicates(&ids), 0);
}

#[test]
fn two_threads_mint_2_million_uuid7s_without_duplicate() {
    let ids = mint_on_two_threads(Uuid7Minter::new(SystemClock), 1_000_000, |m, rng| m.mint(rng).as_u128());
    assert_eq!(ids.len(), 2_000_000);
    assert_eq!(count_duplicates(&ids), 0);
}

/// Past the monotonic state's range (2^42 ms, year 2109) minting does not
/// fail or wrap: the timestamp stays at the last representable millisecond
/// and the counter (then the clamped time) keeps ids increasing.
#[test]
fn minting_past_2109_clamps_the_timestamp_and_still_increases() {
    let clock = ManualClock::from_millis(MS_48);
    let m = IuidMinter::new(&clock);
    let mut rng = rand::rng();
    let a = m.mint(1, 1, &mut rng);
    let b = m.mint(1, 1, &mut rng);
    assert_eq!(a.unix_ts_ms(), MINT_MS);
    assert!(b > a);
}
