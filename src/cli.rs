//! The command line: `decode`, `mint` (and, as they land, `serve`, `check`, `demo`).
//!
//! Exit codes: 0 success (also after a graceful drain), 1 runtime failure
//! (or an id that did not decode), 2 usage error (clap), 78 invalid
//! configuration (EX_CONFIG), 130 interrupted by SIGINT.

use std::io::{self, BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::decode::{self, DecodeOptions};
use crate::ids::{
    self, Format, IuidMinter, LocalityMinter, LocalityMode, NodeIdentity, Params, SnowflakeLayout, SonyflakeFlavor,
    SystemClock, UniqidMinter, Uuid7Minter,
};

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for a runtime failure, or an id that did not decode.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for a usage error.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for an invalid configuration (sysexits.h EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;
/// Exit code after SIGINT (Ctrl-C): 128 + 2, the shell convention.
pub const EXIT_INTERRUPTED: i32 = 130;

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
    Decode(DecodeArgs),
    /// Mint fresh ids, one per line.
    Mint(MintArgs),
    /// GET a URL and exit 0 on a 2xx answer, 1 otherwise (health checks in the container image).
    Probe {
        /// The URL (plain http), e.g. http://127.0.0.1:9901/ready.
        url: String,
        /// Give up after this long (e.g. 2s, 500ms).
        #[arg(long, default_value = "2s", value_parser = crate::config::duration::parse_duration)]
        timeout: std::time::Duration,
    },
}

/// A format name on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// inDrive iUID (UUIDv8).
    Iuid,
    /// Groupon Locality UUID vB.
    Locality,
    /// PHP uniqid with shard prefix.
    Uniqid,
    /// RFC 9562 UUIDv7.
    Uuidv7,
    /// Twitter Snowflake.
    Snowflake,
    /// Sony Sonyflake.
    Sonyflake,
    /// Instagram sharded id.
    Instagram,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Iuid => Format::Iuid,
            FormatArg::Locality => Format::Locality,
            FormatArg::Uniqid => Format::Uniqid,
            FormatArg::Uuidv7 => Format::Uuidv7,
            FormatArg::Snowflake => Format::Snowflake,
            FormatArg::Sonyflake => Format::Sonyflake,
            FormatArg::Instagram => Format::Instagram,
        }
    }
}

/// Arguments of `decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Only try this format (repeatable). Default: every format, and report each one the id is valid in.
    #[arg(long, short = 'f', value_enum)]
    pub format: Vec<FormatArg>,
    /// Print one JSON object per input line.
    #[arg(long)]
    pub json: bool,
    /// uniqid: check the shard prefix strictly against this shard count.
    #[arg(long)]
    pub total_shards: Option<u32>,
    /// Snowflake and Instagram: epoch in Unix milliseconds (default: Twitter's / Instagram's).
    #[arg(long)]
    pub epoch: Option<u64>,
    /// Snowflake bit split as DATACENTER,WORKER,SEQUENCE widths (default 5,5,12).
    #[arg(long, value_parser = parse_bit_split)]
    pub snowflake_bits: Option<(u8, u8, u8)>,
    /// Sonyflake flavour: v1 (start 2014-09-01) or v2 (start 2025-01-01).
    #[arg(long, value_parser = ["v1", "v2"], default_value = "v1")]
    pub sonyflake_flavor: String,
    /// Ids to decode. With none, read one id per line from standard input.
    pub ids: Vec<String>,
}

fn parse_bit_split(s: &str) -> Result<(u8, u8, u8), String> {
    let parts: Vec<&str> = s.split(',').collect();
    let [d, w, q] = parts.as_slice() else {
        return Err(format!("expected DATACENTER,WORKER,SEQUENCE, got {s:?}"));
    };
    let p =
        |x: &str| -> Result<u8, String> { ids::text_decimal_u8(x).ok_or_else(|| format!("not a bit width: {x:?}")) };
    let layout = (p(d)?, p(w)?, p(q)?);
    if u32::from(layout.0) + u32::from(layout.1) + u32::from(layout.2) >= 63 {
        return Err("the three widths must add up to less than 63".into());
    }
    Ok(layout)
}

/// A format `mint` can mint (the 64-bit formats are read only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MintFormat {
    /// inDrive iUID (UUIDv8): needs --country and --entity.
    Iuid,
    /// Groupon Locality UUID vB: takes --pid, --mac-fragment, --sequential.
    Locality,
    /// PHP uniqid with shard prefix: needs --shard-count, takes --shard.
    Uniqid,
    /// RFC 9562 UUIDv7: takes no other option.
    Uuidv7,
}

/// Arguments of `mint`.
#[derive(Debug, Args)]
pub struct MintArgs {
    /// Format to mint.
    #[arg(long, short = 'f', value_enum)]
    pub format: MintFormat,
    /// How many ids.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub count: u64,
    /// iuid: country id (0-255).
    #[arg(long)]
    pub country: Option<u8>,
    /// iuid: service entity code (0-255).
    #[arg(long)]
    pub entity: Option<u8>,
    /// uniqid: total shard count.
    #[arg(long)]
    pub shard_count: Option<u32>,
    /// uniqid: mint into this shard (default: microseconds % shard count).
    #[arg(long)]
    pub shard: Option<u32>,
    /// locality: pid field (0-65535; default 0).
    #[arg(long)]
    pub pid: Option<u16>,
    /// locality: MAC fragment, 7 hex digits, the low 28 bits of the MAC (default 0000000).
    #[arg(long, value_parser = parse_mac_fragment)]
    pub mac_fragment: Option<u32>,
    /// locality: sequential mode instead of variable.
    #[arg(long)]
    pub sequential: bool,
}

fn parse_mac_fragment(s: &str) -> Result<u32, String> {
    if s.len() != 7 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("expected 7 hex digits, got {:?}", ids::escape_for_display(s, 40)));
    }
    u32::from_str_radix(s, 16).map_err(|e| e.to_string())
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let command = match (cli.command, cli.config) {
        (Some(c), _) => c,
        (None, Some(config)) => Command::Serve { config },
        (None, None) => {
            eprintln!("shardgate: nothing to do: give a routing table with -c FILE, or a subcommand (see --help)");
            return EXIT_USAGE;
        }
    };
    let result = match command {
        Command::Decode(args) => run_decode(args),
        Command::Mint(args) => run_mint(args),
        Command::Probe { url, timeout } => Ok(crate::probe::run(&url, timeout)),
        Command::Check { config, print } => {
            let stdout = io::stdout();
            let stderr = io::stderr();
            Ok(crate::config::check::run_check(&config, print, &mut stdout.lock(), &mut stderr.lock()))
        }
        Command::Serve { config } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, crate::app::serve(config))
        }
        Command::Demo { listen } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, crate::app::demo(listen))
        }
        Command::Backend { region, listen } => {
            crate::telemetry::init(cli.log_json);
            block_on(cli.threads, async move {
                let listener = match tokio::net::TcpListener::bind(listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("shardgate: cannot listen on {listen}: {e}");
                        return EXIT_FAILURE;
                    }
                };
                tracing::info!(%listen, %region, "demo backend serving");
                crate::app::until_signal(|stop| crate::backend::serve(listener, region, stop)).await
            })
        }
    };
    match result {
        Ok(code) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            eprintln!("shardgate: {e}");
            EXIT_FAILURE
        }
    }
}

fn run_decode(args: DecodeArgs) -> io::Result<i32> {
    let mut params = Params { uniqid_total_shards: args.total_shards, ..Params::default() };
    if let Some(epoch) = args.epoch {
        params.snowflake.epoch_ms = epoch;
        params.instagram.epoch_ms = epoch;
    }
    if let Some((d, w, q)) = args.snowflake_bits {
        params.snowflake = SnowflakeLayout { datacenter_bits: d, worker_bits: w, sequence_bits: q, ..params.snowflake };
    }
    if args.sonyflake_flavor == "v2" {
        params.sonyflake = SonyflakeFlavor::V2;
    }
    let opts = DecodeOptions { formats: args.format.into_iter().map(Format::from).collect(), json: args.json, params };
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut all_valid = true;
    if args.ids.is_empty() {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::with_capacity(64);
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            // The line terminator is not part of the id; nothing else is trimmed.
            if line.last() == Some(&b'\n') {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
            }
            let text = String::from_utf8_lossy(&line);
            all_valid &= decode::write_report(&text, &opts, &mut out)?;
        }
    } else {
        for id in &args.ids {
            all_valid &= decode::write_report(id, &opts, &mut out)?;
        }
    }
    out.flush()?;
    Ok(if all_valid { EXIT_OK } else { EXIT_FAILURE })
}

impl MintArgs {
    /// The options given that `format` does not take, as `--flag` names.
    fn stray_options(&self) -> Vec<&'static str> {
        let given = [
            ("--country", self.country.is_some(), MintFormat::Iuid),
            ("--entity", self.entity.is_some(), MintFormat::Iuid),
            ("--shard-count", self.shard_count.is_some(), MintFormat::Uniqid),
            ("--shard", self.shard.is_some(), MintFormat::Uniqid),
            ("--pid", self.pid.is_some(), MintFormat::Locality),
            ("--mac-fragment", self.mac_fragment.is_some(), MintFormat::Locality),
            ("--sequential", self.sequential, MintFormat::Locality),
        ];
        given.into_iter().filter(|&(_, set, owner)| set && owner != self.format).map(|(name, _, _)| name).collect()
    }
}

fn run_mint(args: MintArgs) -> io::Result<i32> {
    let stray = args.stray_options();
    if !stray.is_empty() {
        let format = Format::from(args.format);
        eprintln!("shardgate: mint --format {format} does not take {} (see `shardgate mint --help`)", stray.join(", "));
        return Ok(EXIT_USAGE);
    }
    let mut rng = rand::rng();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match args.format {
        MintFormat::Iuid => {
            let (Some(country), Some(entity)) = (args.country, args.entity) else {
                eprintln!("shardgate: mint --format iuid needs --country and --entity (0-255 each)");
                return Ok(EXIT_USAGE);
            };
            let m = IuidMinter::new(SystemClock);
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint(country, entity, &mut rng))?;
            }
        }
        MintFormat::Uuidv7 => {
            let m = Uuid7Minter::new(SystemClock);
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint(&mut rng))?;
            }
        }
        MintFormat::Uniqid => {
            let Some(total) = args.shard_count.filter(|&n| n > 0) else {
                eprintln!("shardgate: mint --format uniqid needs --shard-count (at least 1)");
                return Ok(EXIT_USAGE);
            };
            let m = UniqidMinter::new(SystemClock, total);
            for _ in 0..args.count {
                let id = match args.shard {
                    Some(s) => match m.mint_for_shard(s, &mut rng) {
                        Some(id) => id,
                        None => {
                            eprintln!("shardgate: --shard {s} is not below --shard-count {total}");
                            return Ok(EXIT_USAGE);
                        }
                    },
                    None => m.mint(&mut rng),
                };
                writeln!(out, "{id}")?;
            }
        }
        MintFormat::Locality => {
            let node = NodeIdentity { pid: args.pid.unwrap_or(0), mac_fragment: args.mac_fragment.unwrap_or(0) };
            let m = LocalityMinter::new(SystemClock, node, rand::random());
            if args.sequential {
                m.set_mode(LocalityMode::Sequential);
            }
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint())?;
            }
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

impl From<MintFormat> for Format {
    fn from(f: MintFormat) -> Format {
        match f {
            MintFormat::Iuid => Format::Iuid,
            MintFormat::Locality => Format::Locality,
            MintFormat::Uniqid => Format::Uniqid,
            MintFormat::Uuidv7 => Format::Uuidv7,
        }
    }
}

/// Runs `fut` on a tokio runtime with `threads` workers (current-thread for 1).
fn block_on(threads: Option<usize>, fut: impl std::future::Future<Output = i32>) -> Result<i32, io::Error> {
    let rt = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        Some(n) => tokio::runtime::Builder::new_multi_thread().worker_threads(n.max(1)).enable_all().build()?,
        None => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
    };
    Ok(rt.block_on(fut))
}
