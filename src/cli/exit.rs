//! The process exit codes, in one leaf module that every command uses.

/// Success (also after a graceful stop).
pub const OK: i32 = 0;
/// A runtime failure, or an id that did not decode.
pub const FAILURE: i32 = 1;
/// A usage error (clap's own errors exit 2 as well).
pub const USAGE: i32 = 2;
/// A service needed is unavailable (sysexits.h `EX_UNAVAILABLE`): `plan`'s instance.
pub const UNAVAILABLE: i32 = 69;
/// An invalid configuration (sysexits.h `EX_CONFIG`).
pub const CONFIG: i32 = 78;
/// Interrupted by SIGINT (Ctrl-C): 128 + 2, the shell convention.
pub const INTERRUPTED: i32 = 130;
