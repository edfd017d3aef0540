//! `shardgate audit verify FILE`: checks an audit trail's hash chain.
//! Exit 0 with the number of lines when it is intact, 1 with the first line
//! that breaks it otherwise.

use std::io::{BufReader, Write};
use std::path::Path;

use super::exit;
use crate::routing::audit::verify;

/// Verifies the trail at `path`; returns the exit code.
pub fn verify_file(path: &Path, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(err, "shardgate audit: {}: {e}", path.display());
            return exit::FAILURE;
        }
    };
    match verify(BufReader::new(file)) {
        Ok(n) => {
            let _ = writeln!(out, "{}: {n} entries, chain intact", path.display());
            exit::OK
        }
        Err(b) => {
            let _ = writeln!(err, "{}:{}: chain broken: {}", path.display(), b.line, b.reason);
            exit::FAILURE
        }
    }
}
