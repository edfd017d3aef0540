//! UUIDv7 parser: no panic; parse -> Display -> parse is the identity;
//! Display is the lowercased input; fields rebuild the same id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{Format, Uuid7};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    match Uuid7::parse(&s) {
        Ok(id) => {
            let shown = id.to_string();
            common::check_uuid_display(&s, &shown);
            assert_eq!(Uuid7::parse(&shown), Ok(id));
            assert_eq!(Uuid7::from_fields(id.unix_ts_ms(), id.rand_a(), id.rand_b()), id);
            assert_eq!(Uuid7::from_u128(id.as_u128()), Ok(id));
        }
        Err(e) => {
            common::check_rejection(&e, Format::Uuidv7);
            if s.len() != 36 {
                assert_eq!(e.reason.code(), "bad_length");
            }
        }
    }
});
