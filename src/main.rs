//! The `shardgate` binary: parse the command line, run, exit with its code.

use clap::Parser;

fn main() {
    let cli = shardgate::cli::Cli::parse();
    std::process::exit(shardgate::cli::run(cli));
}
