//! What the process tells the outside about itself, besides its metrics:
//! the log (this file: `tracing` with text or JSON lines on standard error,
//! filtered by `RUST_LOG`, default `info`, at most `debug` in a release
//! build, which compiles trace-level events out; the access log in a file of its
//! own when one is set, [`access`]) and the traces ([`traces`], exported
//! through the queue of [`export`]).
//!
//! No request waits on the log. Its lines are queued ([`QUEUE`] at most)
//! for a thread of their own that writes them; a reader that stops (a log
//! collector stalled on a full pipe, a slow disk) costs the lines that
//! find the queue full ([`dropped_lines`]), never a request. The queue is
//! written out when the process exits ([`LogGuard`]).

pub mod access;
pub mod export;
pub mod traces;

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use access::ACCESS_FILE;

/// The access log's target.
pub const ACCESS: &str = "shardgate::access";

/// Log lines queued at most for each writer (standard error, the access
/// file): about 30 MiB of typical lines.
pub const QUEUE: usize = 128_000;

/// The dropped-line counters of the writers [`init`] installed.
static DROPPED: OnceLock<[ErrorCounter; 2]> = OnceLock::new();

/// Log lines dropped because the queue was full: the log's reader did not
/// keep up.
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |all| all.iter().map(|c| u64::try_from(c.dropped_lines()).unwrap_or(u64::MAX)).sum())
}

/// Keeps the log's writing threads; dropped (as the command ends), it
/// waits up to a second for each to write out what is queued.
#[derive(Debug)]
#[must_use = "dropping it stops the log's writing"]
pub struct LogGuard {
    _writers: [WorkerGuard; 2],
}

/// A queue of lines for `writer`, written by a thread of its own.
fn queued<W: std::io::Write + Send + 'static>(writer: W) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default().lossy(true).buffered_lines_limit(QUEUE).thread_name("shardgate-log").finish(writer)
}

/// Installs the global subscriber (once; later calls install nothing). Text
/// lines are coloured only when standard error is a terminal, so files and
/// log collectors get plain text. Access lines go to the access-log file
/// while one is set, as flat JSON objects, and to standard error otherwise.
pub fn init(json: bool) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (stderr, stderr_guard) = queued(std::io::stderr());
    let (file, file_guard) = queued((&ACCESS_FILE).make_writer());
    let _ = DROPPED.set([stderr.error_counter(), file.error_counter()]);
    let to_stderr = tracing_subscriber::fmt::layer().with_writer(stderr);
    let to_stderr =
        if json { to_stderr.json().boxed() } else { to_stderr.with_ansi(std::io::stderr().is_terminal()).boxed() };
    let to_stderr = to_stderr.with_filter(filter_fn(|m| !(m.target() == ACCESS && ACCESS_FILE.is_on())));
    let to_file = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(file)
        .with_filter(filter_fn(|m| m.target() == ACCESS && ACCESS_FILE.is_on()));
    let _ = tracing_subscriber::registry().with(filter).with(to_stderr).with(to_file).try_init();
    LogGuard { _writers: [stderr_guard, file_guard] }
}
