//! # shardgate
//!
//! A reverse proxy that routes HTTP requests by the entity id they carry.
//!
//! ## The request path
//!
//! One stage per module, in flow order:
//!
//! ```text
//!  accept ─► match route ─► extract id ─► decode id ─► place ─► (mint) ─► dispatch ─► forward ─► respond
//!  proxy::   routing::      proxy::        ids::        routing:: ids::    local pool  proxy::     metrics,
//!  server    Table snapshot extract        parse_any    place()   *Minter  or peer     forward     access log
//! ```
//!
//! * A request loads the routing table once (an `Arc` snapshot taken from an
//!   `ArcSwap`) and uses that snapshot to the end, so a reload never mixes
//!   old and new tables within one request.
//! * Matching, extraction, decoding and placement are pure, synchronous
//!   functions without I/O; that is where the routing logic lives and where
//!   it is tested without sockets.
//! * Errors the proxy itself produces become HTTP responses in one place
//!   (RFC 9457 problem+json plus an RFC 9209 `Proxy-Status` header).
//!
//! ## Modules
//!
//! * [`ids`]: the id codecs (iUID, Locality UUID, uniqid with shard,
//!   UUIDv7, Snowflake, Sonyflake, Instagram): parse, fields, format, mint.
//!   Pure code, no network or configuration types.
//! * [`cli`]: the command line (`serve`, `check`, `decode`, `mint`, `demo`).
//! * [`decode`]: the `decode` and `mint` commands' output (human table and JSON lines).

pub mod cli;
pub mod config;
pub mod decode;
pub mod ids;
pub mod routing;
