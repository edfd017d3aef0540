//! # shardgate
//!
//! A reverse proxy that routes HTTP requests by the entity id they carry.
//!
//! ## The request path
//!
//! One stage per file, in flow order:
//!
//! ```text
//!  accept ─► admit ─► match ─► extract ─► decode ─► place ─► (mint) ─► dispatch ─► forward ─► respond
//!  server:: proxy::  routing::proxy::    ids::     routing:: proxy::   proxy::     proxy::    proxy::
//!  listen   headers  Table    extract    parse_any place     mint     dispatch    forward    respond
//!                     └──────── proxy::locate (pure, no I/O) ────────┘             └ upstream::
//!                                                                           attempt, pool, exchange
//! ```
//!
//! * [`server::listen`] accepts; a connection that opens with the HTTP/2
//!   preface is served by `server::h2` (on the `h2` crate, a task per
//!   stream), any other by the proxy's own HTTP/1.1 server (`server::h1`,
//!   heads parsed by [`http1`]); each hands every request to its
//!   [`server::Handler`], the proxy, with its body reading from the
//!   connection, and sends the [`server::Answer`] back.
//!   The request head stays where the server built it: every stage borrows
//!   it (a move would copy it into each stage's future), and only the body
//!   moves on to the upstream leg.
//! * A request loads the routing table once (an `Arc` snapshot taken from an
//!   `ArcSwap`, [`routing::shared`]) and uses that snapshot to the end, so a
//!   reload never mixes old and new tables within one request. It carries
//!   one context through the stages (`proxy::ctx`): that snapshot, its
//!   connection, how it arrived, and a journal the stages write as they go
//!   (route, region, rule, attempts, legs) and `proxy::respond` reads once
//!   for the metrics, the trace, the debug headers and the access log.
//! * Matching, extraction, decoding and placement are pure, synchronous
//!   functions without I/O, run together by [`proxy::locate`]; that is where
//!   the routing logic lives and where it is tested (and benched, and
//!   fuzzed) without sockets.
//! * [`proxy::dispatch`] picks the endpoints (local, peer, failover chain);
//!   [`proxy::forward`] makes the attempts over [`upstream`]'s kept-alive,
//!   health-judged connections, one [`upstream::exchange`] each, on the
//!   request's own task: head and body out, the answer's head parsed by
//!   [`http1`], its fields kept as the bytes they came in ([`http1::Fields`]);
//!   an `h2c://` or `h2://` endpoint's (gRPC) as a stream on one of its few HTTP/2
//!   connections ([`upstream::h2`]), messages and trailers passed as frames.
//! * A fan-out route's plan goes to every region of its rule and the
//!   answers are merged by [`merge`]; a `placement: search` route's id is
//!   asked of the regions and the region remembered
//!   ([`routing::Found`]); both send their legs through the same forward
//!   stage, one region each.
//! * Errors the proxy answers itself are one table, [`proxy::error`] (the
//!   admin listener's are its own), made into RFC 9457 problem+json with an
//!   RFC 9209 `Proxy-Status` by [`problem`], and written by
//!   `proxy::respond`; every way a request can end is one
//!   [`outcome::Outcome`], the label of its metrics and log line.
//!
//! ## Modules, lowest layer first
//!
//! Each imports only from the layers below it (checked by
//! `cargo test --test integration structure`).
//!
//! * [`ids`]: the id codecs (iUID, Locality UUID, uniqid with shard,
//!   UUIDv7, Snowflake, Sonyflake, Instagram): parse, fields, format, mint,
//!   JSON. A library of its own (`crates/entity-ids`, which services link
//!   too): no network, runtime or configuration types.
//! * [`http1`]: HTTP/1.1 on the wire, for both legs: request and response
//!   heads parsed with `httparse` into one buffer, body framing and its
//!   incremental decoder, heads written into one buffer. No I/O.
//! * [`wire`]: reading an HTTP/1.1 connection, for both legs.
//! * [`cork`]: an HTTP/2 connection's writes held while its task polls it
//!   and sent as the poll ends, for both legs.
//! * [`grpc`]: what the proxy reads of a gRPC call (a field of a protobuf
//!   message by its field numbers, without the schema) and the statuses it
//!   answers one with. No I/O.
//! * [`merge`]: the JSON arrays of a fan-out's regions as one array in one
//!   order, a page at a time, with the cursor of the next page. No I/O.
//! * [`outcome`]: how a request ended, as the metrics label it.
//! * [`problem`]: how a failure becomes its problem+json answer, on every listener.
//! * [`config`]: the routing table file: YAML walk, schema, validation per
//!   section, the typed [`config::Config`], restart-only keys.
//! * [`routing`]: the compiled table, placement, the shared snapshot and live reload.
//! * [`tls`]: rustls configurations: the listener (certificate reload,
//!   client certificates) and `https://` upstreams and peers.
//! * [`metrics`]: Prometheus metrics, label values from the table.
//! * [`telemetry`]: the log's setup, and the traces: a server span per
//!   request, a client span per upstream attempt, a span per fan-out or
//!   search leg, W3C `traceparent` continued and passed on, exported over
//!   OTLP/HTTP from a bounded queue (off unless configured).
//! * [`mesh`]: hop, loop and failover headers between regional shardgates.
//! * [`upstream`]: the client side: connector, pool, exchange, attempts, retries, health.
//! * [`server`]: the server side: listeners, connection limits, the
//!   HTTP/1.1 server, idle deadlines, the drain; it hands requests to a
//!   [`server::Handler`].
//! * [`proxy`]: the request path above: the handler of the proxy listener.
//! * [`source`]: tables from an etcd key (watched by revision, kept on
//!   local disk) and the fleet view every instance publishes there.
//! * [`admin`]: the admin listener: probes, metrics, the table, reload,
//!   drain, `explain`.
//! * [`app`]: assembly of the daemon: table, proxy, admin, reload triggers,
//!   signals, and the tasks that follow the published table off the request path.
//! * [`cli`]: the command line: `serve` (via [`app`]), `check`, `decode`,
//!   `mint`, `demo`, `backend`, `probe`; exit codes.
//!
//! ## Tests
//!
//! A module's unit tests are a `tests` module at the end of its file, or a
//! `tests.rs` beside it when they would take the file past 700 lines. The
//! integration tests (`tests/it/`, one file per behaviour, fixtures in
//! `tests/it/support/`) run the proxy on real sockets against real servers.

/// The id codecs: the `entity-ids` crate (crates/entity-ids), under the name
/// the rest of the proxy has always used.
pub use entity_ids as ids;

pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod cork;
pub mod grpc;
pub mod http1;
pub mod merge;
pub mod mesh;
pub mod metrics;
pub mod outcome;
pub mod problem;
pub mod proxy;
pub mod routing;
pub mod server;
pub mod source;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod wire;
