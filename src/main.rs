//! The `shardgate` binary: parse the command line, run, exit with its code.

use clap::Parser;

/// mimalloc for the binary (the library leaves the choice to its users):
/// cheaper than glibc malloc for the proxy's many small per-request blocks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = shardgate::cli::Cli::parse();
    std::process::exit(shardgate::cli::run(cli));
}
