//! uniqid-with-shard parser: no panic, lenient and strict; parse -> Display
//! -> parse is the identity and Display is the input (the scheme is
//! lowercase only); the strict rules agree with the fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{Format, UniqidShard};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    match UniqidShard::parse(&s) {
        Ok(id) => {
            let shown = id.to_string();
            assert_eq!(shown, *s, "display of a uniqid is its input");
            assert_eq!(UniqidShard::parse(&shown), Ok(id));
            let rebuilt =
                UniqidShard::from_fields(id.shard(), id.random_prefix(), id.unix_seconds(), id.microseconds());
            assert_eq!(rebuilt, Some(id));
            assert!(id.microseconds() <= 999_999);
            for total in [1, 2, 3, 7, 16, 1000, id.shard().saturating_add(1), u32::MAX] {
                let strict = UniqidShard::parse_with(&s, Some(total)).map_err(|e| e.reason.code());
                let expected = if id.shard() >= total {
                    Err("shard_out_of_range")
                } else if id.microseconds() % total != id.shard() {
                    Err("shard_prefix_mismatch")
                } else {
                    Ok(id)
                };
                assert_eq!(strict, expected, "total {total}");
            }
        }
        Err(e) => {
            common::check_rejection(&e, Format::Uniqid);
            // strict mode never accepts what lenient mode rejects
            assert!(UniqidShard::parse_with(&s, Some(16)).is_err());
        }
    }
});
