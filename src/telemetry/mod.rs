//! What the process tells the outside about itself, besides its metrics:
//! the log (this file: `tracing` with text or JSON lines on standard error,
//! filtered by `RUST_LOG`, default `info`) and the traces ([`traces`],
//! exported through the queue of [`export`]).

pub mod export;
pub mod traces;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once; later calls do nothing). Text
/// lines are coloured only when standard error is a terminal, so files and
/// log collectors get plain text.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
