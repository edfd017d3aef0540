//! Upstream response fuzz target: what the proxy reads from an upstream
//! (`http1::parse_response`, then the body through `framing::Decoder`).
//! The first byte picks the request method (HEAD or GET) and how many bytes
//! arrive per read; the rest is the upstream's bytes. No input may panic,
//! and:
//! * the head parses to the same outcome read at once or piecemeal;
//! * every field it keeps goes into a header map (what an HTTP/2 client
//!   gets) as it is written to an HTTP/1.1 one;
//! * the body yields at most the bytes that followed the head, and the
//!   same bytes whether they arrive at once or piecemeal.
#![no_main]

use bytes::{Bytes, BytesMut};
use http::Method;
use libfuzzer_sys::fuzz_target;

#[path = "http1_common.rs"]
mod common;
use shardgate::http1::{parse_response, Decoded, Decoder};

/// Body bytes out of `rest`, fed `step` bytes at a time; `None` on a framing error.
fn body(decoder: &mut Decoder, rest: &[u8], step: usize) -> Option<Vec<u8>> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut fed = 0;
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Data(d)) => out.extend_from_slice(&d),
            Ok(Decoded::Done) => return Some(out),
            Ok(Decoded::NeedMore) if fed < rest.len() => {
                let n = step.min(rest.len() - fed);
                buf.extend_from_slice(&rest[fed..fed + n]);
                fed += n;
            }
            Ok(Decoded::NeedMore) => return decoder.eof().ok().map(|()| out),
            Err(_) => return None,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else { return };
    let method = if first & 1 == 1 { Method::HEAD } else { Method::GET };
    let step = usize::from(first >> 1).max(1);

    let mut whole = BytesMut::from(input);
    let at_once = parse_response(&mut whole, &method);

    let by_pieces =
        common::piecemeal(input, step, shardgate::http1::response::MAX_HEAD_BYTES, |b| parse_response(b, &method));
    match (&at_once, &by_pieces) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!((a.status, a.framing, a.keep_alive), (b.status, b.framing, b.keep_alive));
            assert_eq!(a.fields, b.fields);
            // Every kept field survives the move into a header map (the
            // HTTP/2 path), as it is written on the HTTP/1.1 one: the
            // parser's checks are at least the map's.
            let kept = a.fields.len();
            let mut map = http::HeaderMap::new();
            a.fields.clone().move_into(&mut map);
            assert_eq!(map.len(), kept, "{:?}", a.fields);
            let rest: Bytes = whole.freeze();
            let mut d1 = Decoder::new(a.framing);
            let mut d2 = Decoder::new(a.framing);
            let one = body(&mut d1, &rest, rest.len().max(1));
            let many = body(&mut d2, &rest, step);
            if let Some(b) = &one {
                assert!(b.len() <= rest.len());
            }
            assert_eq!(one, many, "the body depends on how its bytes arrive");
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        // A head too large may be seen as such before or after completion.
        _ => assert!(input.len() > shardgate::http1::response::MAX_HEAD_BYTES, "{at_once:?} vs {by_pieces:?}"),
    }
});
