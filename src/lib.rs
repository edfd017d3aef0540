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
//!  proxy::   routing::      proxy::        ids::        routing:: ids::    local pool  proxy::     proxy::
//!  server    Table snapshot extract        parse_any    place()   *Minter  or peer     forward     error
//! ```
//!
//! * A request loads the routing table once (an `Arc` snapshot taken from an
//!   `ArcSwap`, [`routing::shared`]) and uses that snapshot to the end, so a
//!   reload never mixes old and new tables within one request.
//! * Matching, extraction, decoding and placement are pure, synchronous
//!   functions without I/O, run together by [`proxy::locate`]; that is where
//!   the routing logic lives and where it is tested (and benched, and
//!   fuzzed) without sockets.
//! * Forwarding reuses keep-alive connections per endpoint ([`proxy::pool`]).
//! * Errors the proxy itself produces become HTTP responses in one place,
//!   [`proxy::error`] (RFC 9457 problem+json plus an RFC 9209 `Proxy-Status`).
//!
//! ## Modules
//!
//! * [`ids`]: the id codecs (iUID, Locality UUID, uniqid with shard,
//!   UUIDv7, Snowflake, Sonyflake, Instagram): parse, fields, format, mint.
//!   Pure code, no network or configuration types.
//! * [`config`]: the routing table file: schema, spans, validation with every
//!   error at once, `check`.
//! * [`routing`]: the compiled table, placement, the shared snapshot and live reload.
//! * [`proxy`]: server, locate, extract, mint, forward, pool, headers, errors.
//! * [`mesh`]: hop and loop headers between regional shardgates.
//! * [`app`]: assembly of listener, table, reload triggers and signals; `demo`.
//! * [`cli`]: the command line (`serve`, `check`, `decode`, `mint`, `demo`, `backend`).
//! * [`decode`]: the `decode` command's output (human table and JSON lines).
//! * [`backend`]: the demo regional backend (echoes requests as JSON).
//! * [`probe`]: `shardgate probe URL`, the container image's health check.
//! * [`demo`]: the demo's example requests.
//! * [`telemetry`]: logging setup.
//! * [`tls`]: rustls configurations: the listener (certificate reload,
//!   client certificates) and `https://` upstreams and peers.

pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod ids;
pub mod mesh;
pub mod metrics;
pub mod proxy;
pub mod routing;
pub mod telemetry;
pub mod tls;
pub mod upstream;
