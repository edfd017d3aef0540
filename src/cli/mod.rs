//! The command line: one subcommand per file, each a thin layer over the
//! library that maps its outcome to an exit code ([`exit`]).
//!
//! * `serve` (the default): [`crate::app::serve`], the daemon;
//! * [`check`]: validate a table file;
//! * [`decode`] and [`mint`]: the id tools support engineers and scripts run;
//! * [`demo`]: the proxy on an embedded table with in-process [`backend`]s;
//! * [`backend`]: the demo's regional backend on its own;
//! * [`probe`]: one GET, the container image's health check.

pub mod backend;
pub mod check;
pub mod decode;
pub mod demo;
pub mod exit;
pub mod mint;
pub mod probe;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::app::{Exit, ServeError};

/// shardgate: a reverse proxy that routes HTTP requests by the entity id they carry.
#[derive(Debug, Parser)]
#[command(name = "shardgate", version, about)]
pub struct Cli {
    /// Routing table to serve when no subcommand is given (same as `serve -c FILE`).
    #[arg(short = 'c', long = "config", global = false)]
    pub config: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long, global = true)]
    pub log_json: bool,
    /// Runtime worker threads (default: one per core). `1` runs everything on
    /// one thread, like a single nginx worker.
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy with a routing table (the default command).
    Serve {
        /// The routing table (YAML).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Validate a routing table: every problem with file:line:col, exit 78 if any.
    Check {
        /// The routing table (YAML).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Print the effective table with defaults filled in.
        #[arg(long)]
        print: bool,
    },
    /// Run the proxy on an embedded demo table with three in-process regional backends.
    Demo {
        /// Where the demo proxy listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Run a demo regional backend that echoes requests as JSON naming its region.
    Backend {
        /// The region name it reports.
        #[arg(long)]
        region: String,
        /// Where it listens.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
    },
    /// Decode ids (arguments, or one per line on standard input) and show their fields.
    Decode(decode::DecodeArgs),
    /// Mint fresh ids, one per line.
    Mint(mint::MintArgs),
    /// GET a URL and exit 0 on a 2xx answer, 1 otherwise (health checks in the container image).
    Probe {
        /// The URL (plain http), e.g. http://127.0.0.1:9901/ready.
        url: String,
        /// Give up after this long (e.g. 2s, 500ms).
        #[arg(long, default_value = "2s", value_parser = crate::config::duration::parse_duration)]
        timeout: std::time::Duration,
    },
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let command = match (cli.command, cli.config) {
        (Some(c), _) => c,
        (None, Some(config)) => Command::Serve { config },
        (None, None) => {
            eprintln!("shardgate: nothing to do: give a routing table with -c FILE, or a subcommand (see --help)");
            return exit::USAGE;
        }
    };
    let result = match command {
        Command::Decode(args) => decode::run(args),
        Command::Mint(args) => mint::run(args),
        Command::Probe { url, timeout } => Ok(probe::run(&url, timeout)),
        Command::Check { config, print } => {
            let stdout = io::stdout();
            let stderr = io::stderr();
            Ok(check::run(&config, print, &mut stdout.lock(), &mut stderr.lock()))
        }
        Command::Serve { config } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, crate::app::serve(config)).map(served)
        }
        Command::Demo { listen } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, demo::run(listen)).and_then(|r| r)
        }
        Command::Backend { region, listen } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, backend::run(region, listen)).and_then(|r| r)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("shardgate: {e}");
            exit::FAILURE
        }
    }
}

/// The exit code of a stop.
pub fn stopped(exit: Exit) -> i32 {
    match exit {
        Exit::Stopped => exit::OK,
        Exit::Interrupted => exit::INTERRUPTED,
    }
}

/// The exit code of `serve`'s outcome, printing why it failed.
fn served(result: Result<Exit, ServeError>) -> i32 {
    match result {
        Ok(exit) => stopped(exit),
        Err(e) => {
            eprintln!("shardgate: {e}");
            match e {
                ServeError::Config { .. } | ServeError::Tls(_) => exit::CONFIG,
                ServeError::Bind { .. } | ServeError::Io(_) => exit::FAILURE,
            }
        }
    }
}

/// Runs `fut` on a tokio runtime with `threads` workers (current-thread for 1).
fn block_on<T>(threads: Option<usize>, fut: impl std::future::Future<Output = T>) -> Result<T, io::Error> {
    let rt = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        Some(n) => tokio::runtime::Builder::new_multi_thread().worker_threads(n.max(1)).enable_all().build()?,
        None => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
    };
    Ok(rt.block_on(fut))
}
