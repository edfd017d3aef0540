//! iUID parser: no panic; parse -> Display -> parse is the identity; Display
//! is the lowercased input; fields rebuild the same id; rejections carry a
//! documented reason.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{Format, Iuid};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    match Iuid::parse(&s) {
        Ok(id) => {
            let shown = id.to_string();
            common::check_uuid_display(&s, &shown);
            assert_eq!(Iuid::parse(&shown), Ok(id));
            assert_eq!(id.ver1(), 0);
            assert_eq!(Iuid::from_fields(id.unix_ts_ms(), id.country(), id.service_entity(), id.rand()), id);
            assert_eq!(Iuid::from_u128(id.as_u128()), Ok(id));
            assert_eq!(u128::from_be_bytes(id.to_bytes()), id.as_u128());
        }
        Err(e) => {
            common::check_rejection(&e, Format::Iuid);
            if s.len() != 36 {
                assert_eq!(e.reason.code(), "bad_length");
            }
        }
    }
});
