//! What the process tells the outside about itself, besides its metrics:
//! the log (this file: `tracing` with text or JSON lines on standard error,
//! filtered by `RUST_LOG`, default `info`, at most `debug` in a release
//! build, which compiles trace-level events out; the access log in a file of its
//! own when one is set, [`access`]) and the traces ([`traces`], exported
//! through the queue of [`export`]).

pub mod access;
pub mod export;
pub mod traces;

use std::io::IsTerminal;

use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use access::ACCESS_FILE;

/// The access log's target.
pub const ACCESS: &str = "shardgate::access";

/// Installs the global subscriber (once; later calls do nothing). Text
/// lines are coloured only when standard error is a terminal, so files and
/// log collectors get plain text. Access lines go to the access-log file
/// while one is set, as flat JSON objects, and to standard error otherwise.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let to_stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let to_stderr =
        if json { to_stderr.json().boxed() } else { to_stderr.with_ansi(std::io::stderr().is_terminal()).boxed() };
    let to_stderr = to_stderr.with_filter(filter_fn(|m| !(m.target() == ACCESS && ACCESS_FILE.is_on())));
    let to_file = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(&ACCESS_FILE)
        .with_filter(filter_fn(|m| m.target() == ACCESS && ACCESS_FILE.is_on()));
    let _ = tracing_subscriber::registry().with(filter).with(to_stderr).with(to_file).try_init();
}
