//! `shardgate mint`: fresh ids, one per line, from the same minters the
//! proxy uses (an injected system clock, the default random source).

use std::io::{self, Write};

use clap::Args;

use super::decode::format_parser;
use super::exit;
use crate::ids::{
    self, Format, IuidMinter, LocalityMinter, LocalityMode, NodeIdentity, SystemClock, UniqidMinter, Uuid7Minter,
};

/// Arguments of `mint`.
#[derive(Debug, Args)]
pub struct MintArgs {
    /// Format to mint (the 64-bit formats are read only).
    #[arg(long, short = 'f', value_parser = format_parser(Format::can_mint))]
    pub format: Format,
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
    /// locality: pid field (0-65535; 0 when only --mac-fragment is given).
    #[arg(long)]
    pub pid: Option<u16>,
    /// locality: MAC fragment, 7 hex digits, the low 28 bits of the MAC (0000000 when only --pid is given).
    #[arg(long, value_parser = mac_fragment)]
    pub mac_fragment: Option<u32>,
    /// locality: sequential mode instead of variable.
    #[arg(long)]
    pub sequential: bool,
}

fn mac_fragment(s: &str) -> Result<u32, String> {
    ids::parse_mac_fragment(s).ok_or_else(|| format!("expected 7 hex digits, got {:?}", ids::escape_for_display(s, 40)))
}

impl MintArgs {
    /// The options given that `format` does not take, as `--flag` names.
    fn stray_options(&self) -> Vec<&'static str> {
        let given = [
            ("--country", self.country.is_some(), Format::Iuid),
            ("--entity", self.entity.is_some(), Format::Iuid),
            ("--shard-count", self.shard_count.is_some(), Format::Uniqid),
            ("--shard", self.shard.is_some(), Format::Uniqid),
            ("--pid", self.pid.is_some(), Format::Locality),
            ("--mac-fragment", self.mac_fragment.is_some(), Format::Locality),
            ("--sequential", self.sequential, Format::Locality),
        ];
        given.into_iter().filter(|&(_, set, owner)| set && owner != self.format).map(|(name, _, _)| name).collect()
    }
}

/// `shardgate mint`: exit 0, or 2 for options that do not fit the format.
pub fn run(args: MintArgs) -> io::Result<i32> {
    let stray = args.stray_options();
    if !stray.is_empty() {
        eprintln!(
            "shardgate: mint --format {} does not take {} (see `shardgate mint --help`)",
            args.format,
            stray.join(", ")
        );
        return Ok(exit::USAGE);
    }
    let mut rng = rand::rng();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match args.format {
        Format::Iuid => {
            let (Some(country), Some(entity)) = (args.country, args.entity) else {
                eprintln!("shardgate: mint --format iuid needs --country and --entity (0-255 each)");
                return Ok(exit::USAGE);
            };
            let m = IuidMinter::new(SystemClock);
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint(country, entity, &mut rng))?;
            }
        }
        Format::Uuidv7 => {
            let m = Uuid7Minter::new(SystemClock);
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint(&mut rng))?;
            }
        }
        Format::Uniqid => {
            let Some(total) = args.shard_count.filter(|&n| n > 0) else {
                eprintln!("shardgate: mint --format uniqid needs --shard-count (at least 1)");
                return Ok(exit::USAGE);
            };
            let m = UniqidMinter::new(SystemClock, total);
            for _ in 0..args.count {
                let id = match args.shard {
                    Some(s) => match m.mint_for_shard(s, &mut rng) {
                        Some(id) => id,
                        None => {
                            eprintln!("shardgate: --shard {s} is not below --shard-count {total}");
                            return Ok(exit::USAGE);
                        }
                    },
                    None => m.mint(&mut rng),
                };
                writeln!(out, "{id}")?;
            }
        }
        Format::Locality => {
            if args.pid.is_none() && args.mac_fragment.is_none() {
                eprintln!(
                    "shardgate: mint --format locality needs --mac-fragment or --pid (or both): the node the ids \
                     name, which routing reads (nodes.locality_mac, nodes.locality_pid)"
                );
                return Ok(exit::USAGE);
            }
            let node = NodeIdentity { pid: args.pid.unwrap_or(0), mac_fragment: args.mac_fragment.unwrap_or(0) };
            let m = LocalityMinter::new(SystemClock, node, rand::random());
            if args.sequential {
                m.set_mode(LocalityMode::Sequential);
            }
            for _ in 0..args.count {
                writeln!(out, "{}", m.mint())?;
            }
        }
        // The parser offers only mintable formats.
        Format::Snowflake | Format::Sonyflake | Format::Instagram => {
            eprintln!("shardgate: {} ids are read only", args.format);
            return Ok(exit::USAGE);
        }
    }
    out.flush()?;
    Ok(exit::OK)
}
