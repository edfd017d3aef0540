//! Shared driver of the HTTP/1 fuzz targets (included with `#[path]`, not a target).

use bytes::BytesMut;

/// Runs `parse` over `input` fed `step` bytes at a time, as a socket would
/// deliver it, until it finishes or errs, or the input runs out.
pub fn piecemeal<T, E>(
    input: &[u8],
    step: usize,
    mut parse: impl FnMut(&mut BytesMut) -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    loop {
        match parse(&mut buf) {
            Ok(None) if fed < input.len() => {
                let n = step.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            other => return other,
        }
    }
}
