//! Request head fuzz target: `http1::parse_request` and the chunked body
//! decoder on a client's bytes. The first byte picks how many bytes arrive
//! per read; the rest is the client's bytes. No input may panic, and:
//! * the head parses to the same outcome read at once or piecemeal;
//! * an accepted head never has both Content-Length and Transfer-Encoding,
//!   and its framing is never "until close" (a request's body is delimited).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

#[path = "http1_common.rs"]
mod common;
use shardgate::http1::{parse_request, Framing, RequestLimits};

const LIMITS: RequestLimits = RequestLimits { max_head_bytes: 16 * 1024, max_headers: 64 };

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else { return };
    let step = usize::from(first).max(1);
    let mut whole = BytesMut::from(input);
    let at_once = parse_request(&mut whole, &LIMITS);
    let by_pieces = common::piecemeal(input, step, LIMITS.max_head_bytes, |b| parse_request(b, &LIMITS));
    match (&at_once, &by_pieces) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!((&a.method, &a.uri, a.version, a.framing), (&b.method, &b.uri, b.version, b.framing));
            assert_eq!(a.headers, b.headers);
            assert!(!(a.headers.contains_key("content-length") && a.headers.contains_key("transfer-encoding")));
            assert_ne!(a.framing, Framing::UntilClose);
            if a.framing == Framing::Chunked {
                let mut d = shardgate::http1::Decoder::new(Framing::Chunked);
                let mut rest = whole.clone();
                while let Ok(shardgate::http1::Decoded::Data(_)) = d.decode(&mut rest) {}
            }
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        _ => assert!(input.len() > LIMITS.max_head_bytes, "{at_once:?} vs {by_pieces:?}"),
    }
});
