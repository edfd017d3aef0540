//! Protobuf field walker fuzz target: `grpc::field::find` on arbitrary
//! bytes. The first byte picks the path (one to three levels of fields 1 to
//! 4); the rest is the message. No input may panic, and:
//! * a value found lies inside the message;
//! * wrapped as field 5 of an outer message, the message gives the same
//!   answer at `5.<path>`;
//! * a varint field 6 appended to a message that read cleanly changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::grpc::field::{find, FieldPath};

fuzz_target!(|data: &[u8]| {
    let Some((&first, message)) = data.split_first() else { return };
    let levels = usize::from(first % 3) + 1;
    let numbers: Vec<String> = (0..levels).map(|i| ((first >> (2 + 2 * i)) % 4 + 1).to_string()).collect();
    let Ok(path) = FieldPath::parse(&numbers.join(".")) else { return };
    let found = find(message, &path);
    if let Ok(Some(value)) = found {
        let range = message.as_ptr_range();
        assert!(range.start <= value.as_ptr() && value.as_ptr_range().end <= range.end);
    }
    let mut wrapped = vec![5 << 3 | 2];
    let mut len = message.len();
    while len >= 0x80 {
        wrapped.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    wrapped.push(len as u8);
    wrapped.extend_from_slice(message);
    let Ok(outer) = FieldPath::parse(&format!("5.{}", numbers.join("."))) else { return };
    assert_eq!(find(&wrapped, &outer), found);
    if found.is_ok() {
        let mut longer = message.to_vec();
        longer.extend_from_slice(&[6 << 3, 1]);
        assert_eq!(find(&longer, &path), found);
    }
});
