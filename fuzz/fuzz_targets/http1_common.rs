//! Shared driver of the HTTP/1 fuzz targets (included with `#[path]`, not a target).

use bytes::BytesMut;
use shardgate::http1::HeadScan;

/// Runs `parse` over `input` fed `step` bytes at a time, as a socket would
/// deliver it, parsing when `HeadScan` says a head may be complete (as the
/// proxy does), until it finishes or errs, or the input runs out.
pub fn piecemeal<T, E>(
    input: &[u8],
    step: usize,
    max: usize,
    mut parse: impl FnMut(&mut BytesMut) -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    let mut buf = BytesMut::new();
    let mut scan = HeadScan::default();
    let mut fed = 0;
    loop {
        if scan.ready(&buf, max) {
            match parse(&mut buf) {
                Ok(None) => {}
                other => return other,
            }
        }
        if fed == input.len() {
            return parse(&mut buf);
        }
        let n = step.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
}
