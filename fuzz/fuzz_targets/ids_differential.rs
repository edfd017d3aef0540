//! Differential target: our UUID-shaped parsers against `uuid::Uuid::try_parse`.
//!
//! For a 36-character input, `uuid` accepts exactly the hyphenated form. We
//! must accept an iUID exactly when `uuid` reads version 8, the RFC variant
//! and a zero sub-version nibble; a UUIDv7 exactly when it reads version 7
//! and the RFC variant; a Locality id exactly when it reads version 0xb; and
//! then both must agree on every byte and on the lowercase text. Inputs of
//! any other length are rejected by us with `bad_length`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::ids::{Iuid, LocalityUuid, Uuid7};

#[path = "ids_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let s = common::text(data);
    let ours_iuid = Iuid::parse(&s);
    let ours_v7 = Uuid7::parse(&s);
    let ours_loc = LocalityUuid::parse(&s);
    if s.len() != 36 {
        for reason in [ours_iuid.err(), ours_v7.err(), ours_loc.err()] {
            assert_eq!(reason.map(|e| e.reason.code()), Some("bad_length"));
        }
        return;
    }
    let theirs = uuid::Uuid::try_parse(&s).ok();
    let rfc = |u: &uuid::Uuid| u.get_variant() == uuid::Variant::RFC4122;

    let want = theirs.filter(|u| u.get_version_num() == 8 && rfc(u) && u.as_bytes()[6] & 0x0f == 0);
    assert_eq!(ours_iuid.ok().map(|i| i.to_bytes()), want.map(|u| *u.as_bytes()), "iuid {s:?}");
    let want = theirs.filter(|u| u.get_version_num() == 7 && rfc(u));
    assert_eq!(ours_v7.ok().map(|i| i.as_u128()), want.map(|u| u.as_u128()), "uuidv7 {s:?}");
    let want = theirs.filter(|u| u.get_version_num() == 0xb);
    assert_eq!(ours_loc.ok().map(|i| i.as_u128()), want.map(|u| u.as_u128()), "locality {s:?}");

    match theirs {
        // uuid rejects: so must every one of ours, as a shape error
        None => {
            for r in [ours_iuid.err(), ours_v7.err(), ours_loc.err()] {
                assert_eq!(r.map(|e| e.reason.code()), Some("bad_format"), "{s:?}");
            }
        }
        Some(u) => {
            let text = u.hyphenated().to_string();
            if let Ok(id) = ours_iuid {
                assert_eq!(id.to_string(), text);
            }
            if let Ok(id) = ours_v7 {
                assert_eq!(id.to_string(), text);
            }
            if let Ok(id) = ours_loc {
                assert_eq!(id.to_string(), text);
            }
        }
    }
});
