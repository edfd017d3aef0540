//! The command line: one subcommand per file, each a thin layer over the
//! library that maps its outcome to an exit code ([`exit`]).
//!
//! * `serve` (the default): [`crate::app::serve`], the daemon;
//! * [`check`]: validate a table file;
//! * [`plan`]: what a new table moves, and the traffic it carried;
//! * [`audit`]: verify an audit trail's hash chain;
//! * [`rehome`]: `move`, a placement unit re-homed across a fleet (hold, barrier, switch);
//! * [`decode`] and [`mint`]: the id tools support engineers and scripts run;
//! * [`demo`]: the proxy on an embedded table with in-process [`backend`]s;
//! * [`backend`]: the demo's regional backend on its own;
//! * [`probe`]: one GET, the container image's health check.

pub mod audit;
pub mod backend;
pub mod check;
pub mod decode;
pub mod demo;
pub mod exit;
pub mod mint;
pub mod plan;
pub mod probe;
pub mod rehome;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::app::{Exit, ServeError};
use crate::config::instance::InstanceFlags;

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
    Serve(Box<ServeArgs>),
    /// Validate a routing table: every problem with file:line:col, exit 78 if any.
    Check {
        /// The routing table (YAML).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Check it as an instance serving this region runs it (`serve --region`).
        #[arg(long, env = "SHARDGATE_REGION")]
        region: Option<String>,
        /// Print the effective table with defaults filled in.
        #[arg(long)]
        print: bool,
    },
    /// List every placement unit a new table moves and the traffic it
    /// carried, and the re-homed units' fences it gives up; exit 0 when
    /// nothing moves, 1 when something does or a fence is given up, 69 when
    /// the instance cannot be reached, 78 when invalid.
    Plan(plan::PlanArgs),
    /// Re-home a placement unit across the fleet following an etcd key: put the
    /// hold table, wait until every instance holds, then put the switch table
    /// (or call the hold off). Exit 0 switched, 1 aborted or refused, 2 a
    /// usage error (a barrier not shorter than a hold), 69 etcd unreachable,
    /// 78 a table invalid.
    Move(rehome::MoveArgs),
    /// Audit trail tools.
    Audit {
        /// What to do.
        #[command(subcommand)]
        command: AuditCommand,
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

/// `shardgate serve`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The routing table (YAML), watched for changes.
    #[arg(short = 'c', long = "config", required_unless_present = "source", conflicts_with = "source")]
    pub config: Option<PathBuf>,
    /// The table from etcd instead: etcd://HOST:PORT[,HOST:PORT...]/KEY, followed by revision.
    #[arg(long, env = "SHARDGATE_SOURCE")]
    pub source: Option<String>,
    /// This instance's proxy listener, over the table's `listen`.
    #[arg(long, env = "SHARDGATE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// This instance's admin listener, over the table's `admin`.
    #[arg(long, env = "SHARDGATE_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// This instance's name, over the table's `instance`.
    #[arg(long, env = "SHARDGATE_INSTANCE")]
    pub instance: Option<String>,
    /// The region this instance serves, over the table's `region`.
    #[arg(long, env = "SHARDGATE_REGION")]
    pub region: Option<String>,
    /// Append every table applied or rejected to this hash-chained JSON-lines file.
    #[arg(long, env = "SHARDGATE_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,
    /// With --source: where the last good table is kept, to start from when etcd is unreachable.
    #[arg(long, env = "SHARDGATE_LOCAL_COPY", default_value = "shardgate-table.json")]
    pub local_copy: PathBuf,
    /// With --source: how often etcd is asked whether the running table is still the latest.
    #[arg(long, default_value = "2s", value_parser = crate::config::duration::parse_duration)]
    pub progress: std::time::Duration,
    /// With --source: PEM CA file of etcd's server certificates (TLS to etcd).
    #[arg(long, env = "SHARDGATE_ETCD_CA")]
    pub etcd_ca: Option<String>,
    /// With --source: PEM client certificate for etcd (with --etcd-key).
    #[arg(long, env = "SHARDGATE_ETCD_CERT", requires = "etcd_key")]
    pub etcd_cert: Option<String>,
    /// With --source: PEM private key of --etcd-cert.
    #[arg(long, env = "SHARDGATE_ETCD_KEY", requires = "etcd_cert")]
    pub etcd_key: Option<String>,
    /// With --source: etcd user (the password from SHARDGATE_ETCD_PASSWORD).
    #[arg(long, env = "SHARDGATE_ETCD_USER")]
    pub etcd_user: Option<String>,
}

impl ServeArgs {
    /// Serving the table file `config`, nothing else given.
    pub fn file(config: PathBuf) -> ServeArgs {
        ServeArgs {
            config: Some(config),
            source: None,
            listen: None,
            admin: None,
            instance: None,
            region: None,
            audit_log: None,
            local_copy: PathBuf::from("shardgate-table.json"),
            progress: std::time::Duration::from_secs(2),
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: None,
        }
    }

    /// The daemon's options, or why they are not usable.
    pub fn options(self) -> Result<crate::app::ServeOptions, String> {
        use crate::app::{EtcdOptions, ServeOptions, TableFrom};
        let table = match (self.config, self.source) {
            (Some(path), _) => TableFrom::File(path),
            (None, Some(source)) => {
                let target = crate::source::etcd::Target::parse(&source)?;
                if self.progress < std::time::Duration::from_millis(10) {
                    return Err(format!("--progress {:?} is too short: at least 10ms", self.progress));
                }
                let tls = (self.etcd_ca.is_some() || self.etcd_cert.is_some()).then_some(
                    crate::config::schema::UpstreamTls { ca: self.etcd_ca, cert: self.etcd_cert, key: self.etcd_key },
                );
                let password = || std::env::var("SHARDGATE_ETCD_PASSWORD").unwrap_or_default();
                let user = self.etcd_user.map(|u| (u, password()));
                TableFrom::Etcd(EtcdOptions { target, tls, user, local_copy: self.local_copy, progress: self.progress })
            }
            (None, None) => return Err("give a table: -c FILE or --source etcd://HOST:PORT/KEY".into()),
        };
        // Instances sharing a table from etcd each need a name of their own
        // (their fleet reports are kept under it): the host's, unless given.
        let instance = match (&table, self.instance) {
            (_, Some(name)) => Some(name),
            (TableFrom::Etcd(_), None) => Some(host_name()),
            (TableFrom::File(_), None) => None,
        };
        let flags = InstanceFlags { listen: self.listen, admin: self.admin, instance, region: self.region };
        Ok(ServeOptions { table, flags, audit: self.audit_log })
    }
}

/// This host's name (`/proc/sys/kernel/hostname`, `HOSTNAME`), else `shardgate-<pid>`.
fn host_name() -> String {
    let read = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().or_else(|| std::env::var("HOSTNAME").ok());
    match read.map(|h| h.trim().to_string()).filter(|h| !h.is_empty()) {
        Some(h) => h,
        None => format!("shardgate-{}", std::process::id()),
    }
}

/// `shardgate audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain of an audit trail: exit 0 when intact, 1 at the first broken line.
    Verify {
        /// The trail (JSON lines).
        file: PathBuf,
        /// The hash of its last line as the log recorded it ("audit trail appended"):
        /// the trail must end there.
        #[arg(long)]
        head: Option<String>,
    },
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let command = match (cli.command, cli.config) {
        (Some(c), _) => c,
        (None, Some(config)) => Command::Serve(Box::new(ServeArgs::file(config))),
        (None, None) => {
            eprintln!("shardgate: nothing to do: give a routing table with -c FILE, or a subcommand (see --help)");
            return exit::USAGE;
        }
    };
    let result = match command {
        Command::Decode(args) => decode::run(args),
        Command::Mint(args) => mint::run(args),
        Command::Probe { url, timeout } => Ok(probe::run(&url, timeout)),
        Command::Check { config, region, print } => {
            let stdout = io::stdout();
            let stderr = io::stderr();
            let flags = InstanceFlags::in_region(region);
            Ok(check::run(&config, &flags, print, &mut stdout.lock(), &mut stderr.lock()))
        }
        Command::Move(args) => Ok(rehome::run(&args, &mut io::stdout().lock(), &mut io::stderr().lock())),
        Command::Plan(args) => Ok(plan::run(&args, &mut io::stdout().lock(), &mut io::stderr().lock())),
        Command::Audit { command: AuditCommand::Verify { file, head } } => {
            Ok(audit::verify_file(&file, head.as_deref(), &mut io::stdout().lock(), &mut io::stderr().lock()))
        }
        Command::Serve(args) => match args.options() {
            Ok(options) => {
                // The log written out before the exit's own words.
                let result = {
                    let _log = crate::telemetry::init(cli.log_json);
                    block_on(cli.threads, crate::app::serve(options))
                };
                result.map(served)
            }
            Err(e) => {
                eprintln!("shardgate serve: {e}");
                return exit::USAGE;
            }
        },
        Command::Demo { listen } => {
            let _log = crate::telemetry::init(cli.log_json);
            block_on(cli.threads, demo::run(listen)).and_then(|r| r)
        }
        Command::Backend { region, listen } => {
            let _log = crate::telemetry::init(cli.log_json);
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
                ServeError::Bind { .. } | ServeError::Io(_) | ServeError::Source(_) => exit::FAILURE,
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
    let out = rt.block_on(fut);
    // A blocking task stuck in a stalled write (the access log's file on a
    // hung disk) does not keep the process from exiting.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(out)
}
