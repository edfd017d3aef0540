//! `shardgate check -c FILE [--print]`.

use std::io::Write;
use std::path::Path;

use super::load_file;
use crate::routing::shared::sha256_hex;
use crate::routing::Table;

/// Exit status for a bad config (sysexits `EX_CONFIG`).
pub const EX_CONFIG: i32 = 78;

/// Checks a routing table file.
///
/// Returns 0 and writes a one-line summary to `out` when the file is valid
/// (with `print`, also the effective table with defaults filled in, as YAML);
/// returns [`EX_CONFIG`] and writes every problem to `err`, one per line as
/// `file:line:col: path: message (hint: ...)`, when it is not.
pub fn run_check(path: &Path, print: bool, out: &mut impl Write, err: &mut impl Write) -> i32 {
    match load_file(path) {
        Err(errors) => {
            let _ = writeln!(err, "{errors}");
            let n = errors.len();
            let _ = writeln!(err, "{}: {n} problem{}", path.display(), if n == 1 { "" } else { "s" });
            EX_CONFIG
        }
        Ok((mut cfg, text)) => {
            let table = Table::compile(&cfg);
            let sha = sha256_hex(&text);
            let _ = writeln!(out, "{}: ok: {} (sha256 {})", path.display(), table.summary(), &sha[..12]);
            if print {
                cfg.instance = Some(table.settings().instance.clone());
                match yaml_serde::to_string(&cfg) {
                    Ok(yaml) => {
                        let _ = write!(out, "{yaml}");
                    }
                    Err(e) => {
                        let _ = writeln!(err, "cannot print the effective table: {e}");
                        return 1;
                    }
                }
            }
            0
        }
    }
}
