//! Locality UUID vB parser: no panic; parse -> Display -> parse is the
//! identity; Display is the lowercased input; fields rebuild the same id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{locality, Format, LocalityUuid};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    match LocalityUuid::parse(&s) {
        Ok(id) => {
            let shown = id.to_string();
            common::check_uuid_display(&s, &shown);
            assert_eq!(LocalityUuid::parse(&shown), Ok(id));
            let rebuilt = LocalityUuid::from_fields(id.counter_field(), id.pid(), id.mac_fragment(), id.timestamp_ms());
            assert_eq!(rebuilt, id);
            // nibble reversal is an involution
            assert_eq!(locality::reverse_nibbles(id.counter_decoded_reversed()), id.counter_field());
        }
        Err(e) => {
            common::check_rejection(&e, Format::Locality);
            if s.len() != 36 {
                assert_eq!(e.reason.code(), "bad_length");
            }
        }
    }
});
