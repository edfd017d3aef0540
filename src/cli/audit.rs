//! `shardgate audit verify FILE [--head HASH]`: checks an audit trail's hash
//! chain (and, with `--head`, that it ends at the hash the log last
//! recorded, so lines cut from its end are found). Exit 0 with the number of
//! lines when it is intact, 1 with the first line that breaks it otherwise.

use std::io::{BufReader, Write};
use std::path::Path;

use super::exit;
use crate::routing::audit::verify;

/// Verifies the trail at `path`; returns the exit code.
pub fn verify_file(path: &Path, head: Option<&str>, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "shardgate audit: {}: {e}", path.display());
            return exit::FAILURE;
        }
    };
    match verify(BufReader::new(file)) {
        Ok((n, last)) if head.is_some_and(|h| h != last) => {
            let _ = writeln!(
                err,
                "{}: {n} entries intact, but the last hash is {last}, not the head given",
                path.display()
            );
            exit::FAILURE
        }
        Ok((n, last)) => {
            let _ = writeln!(out, "{}: {n} entries, chain intact, head {last}", path.display());
            exit::OK
        }
        Err(b) => {
            let _ = writeln!(err, "{}:{}: chain broken: {}", path.display(), b.line, b.reason);
            exit::FAILURE
        }
    }
}
