//! `shardgate check -c FILE [--region R] [--print]`: every problem of a
//! table file with its line, or the compiled table's summary. With
//! `--region` the file is checked as an instance serving that region runs
//! it (a fleet's shared table that sends to `local` needs one).

use std::io::Write;
use std::path::Path;

use super::exit;
use crate::config::instance::InstanceFlags;
use crate::routing::shared::sha256_hex;
use crate::routing::Table;

/// Checks a routing table file.
///
/// Returns 0 and writes a one-line summary to `out` when the file is valid
/// (with `print`, the effective table with defaults filled in, as YAML, on
/// `out` alone, the verdict on `err`);
/// returns [`exit::CONFIG`] and writes every problem to `err`, one per line as
/// `file:line:col: path: message (hint: ...)`, when it is not.
pub fn run(path: &Path, flags: &InstanceFlags, print: bool, out: &mut impl Write, err: &mut impl Write) -> i32 {
    match flags.load_file(path) {
        Err(errors) => {
            let _ = writeln!(err, "{errors}");
            let n = errors.len();
            let _ = writeln!(err, "{}: {n} problem{}", path.display(), if n == 1 { "" } else { "s" });
            exit::CONFIG
        }
        Ok((cfg, text)) => {
            let table = Table::compile(&cfg);
            let sha = sha256_hex(&text);
            // With `--print` the table alone goes to standard output (so it can be
            // redirected to a file); the verdict goes beside the warnings.
            let verdict: &mut dyn Write = if print { &mut *err } else { &mut *out };
            let _ = writeln!(verdict, "{}: ok: {} (sha256 {})", path.display(), table.summary(), &sha[..12]);
            if !cfg.variables.is_empty() {
                let _ =
                    writeln!(verdict, "{}: environment variables read: {}", path.display(), cfg.variables.join(", "));
            }
            for warning in cfg.warnings() {
                let _ = writeln!(err, "{}: warning: {warning}", path.display());
            }
            if print {
                let written = crate::config::as_written(&text, &path.display().to_string(), flags);
                match written
                    .map_err(|e| e.to_string())
                    .and_then(|f| yaml_serde::to_string(&f).map_err(|e| e.to_string()))
                {
                    Ok(yaml) => {
                        let _ = write!(out, "{yaml}");
                    }
                    Err(e) => {
                        let _ = writeln!(err, "cannot print the effective table: {e}");
                        return exit::FAILURE;
                    }
                }
            }
            exit::OK
        }
    }
}
