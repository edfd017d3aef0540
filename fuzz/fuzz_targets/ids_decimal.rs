//! The 64-bit decimal family (Snowflake, Sonyflake v1/v2, Instagram): no
//! panic; Display is the input; parse -> Display -> parse is the identity;
//! and the strict decimal rule agrees with `u64::from_str` restricted to
//! canonical ASCII digits (std also accepts a leading `+`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{Format, Instagram, InstagramLayout, Snowflake, SnowflakeLayout, Sonyflake, SonyflakeFlavor};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s.len() == 1 || !s.starts_with('0'));
    let expected = if canonical { s.parse::<u64>().ok() } else { None };

    let discord = SnowflakeLayout { epoch_ms: 1_420_070_400_000, ..SnowflakeLayout::default() };
    let odd = SnowflakeLayout { epoch_ms: 0, datacenter_bits: 0, worker_bits: 20, sequence_bits: 42 };
    for layout in [SnowflakeLayout::default(), discord, odd] {
        match Snowflake::parse_with(&s, layout) {
            Ok(id) => {
                assert_eq!(Some(id.value()), expected);
                assert_eq!(id.to_string(), *s);
                assert_eq!(Snowflake::parse_with(&id.to_string(), layout), Ok(id));
                let _ = (id.unix_ts_ms(), id.datacenter_id(), id.worker_id(), id.sequence());
            }
            Err(e) => {
                common::check_rejection(&e, Format::Snowflake);
                assert!(expected.is_none() || expected.is_some_and(|v| v >> 63 == 1));
            }
        }
    }
    for flavor in [SonyflakeFlavor::V1, SonyflakeFlavor::V2] {
        match Sonyflake::parse_with(&s, flavor) {
            Ok(id) => {
                assert_eq!(Some(id.value()), expected);
                assert_eq!(id.to_string(), *s);
                assert_eq!(Sonyflake::parse_with(&id.to_string(), flavor), Ok(id));
                let _ = (id.unix_ts_ms(), id.sequence(), id.machine_id());
            }
            Err(e) => {
                common::check_rejection(&e, Format::Sonyflake);
                assert!(expected.is_none() || expected.is_some_and(|v| v >> 63 == 1));
            }
        }
    }
    match Instagram::parse_with(&s, InstagramLayout::default()) {
        Ok(id) => {
            assert_eq!(Some(id.value()), expected);
            assert_eq!(id.to_string(), *s);
            let _ = (id.unix_ts_ms(), id.shard_id(), id.sequence());
        }
        Err(e) => {
            common::check_rejection(&e, Format::Instagram);
            assert_eq!(expected, None);
        }
    }
});
