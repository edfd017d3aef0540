//! The client side: how the proxy reaches upstreams and peers.
//!
//! * [`connect`]: the connector (`http://`, `https://`) and its start-up settings;
//! * [`pool`]: kept-alive HTTP/1.1 connections per endpoint, shared by every
//!   runtime thread, capped per endpoint (with shares for uploads and
//!   tunnels) with a bounded wait queue and wait;
//! * [`exchange`]: one HTTP/1.1 exchange on a connection the request's
//!   task owns (no connection task): head and body out, head and body back;
//! * [`h2`]: HTTP/2 to `h2c://` and `h2://` endpoints: a few multiplexed connections
//!   each, bodies and trailers passed as frames (gRPC);
//! * [`pipe`]: a body's frames onto an HTTP/2 stream as the peer's window
//!   allows (request bodies to those endpoints, answers to HTTP/2 clients);
//! * [`body`]: the client's body on its way upstream: a small one read
//!   whole first, a larger one watched, so timeouts and blame follow what
//!   each side did;
//! * [`recv`]: an HTTP/2 stream's body (either leg), taken off its shared
//!   connection as it arrives, its window given back as it goes on;
//! * [`balance`]: which of a region's backends a request goes to;
//! * [`attempt`]: one attempt at one endpoint: its timeout, the endpoint's
//!   passive health, the retry budget;
//! * [`retry`]: when a request may be sent again;
//! * [`health`]: every endpoint's health: active checks and passive ejection;
//! * [`dns`]: named endpoints re-resolved by TTL, each address an endpoint;
//! * [`client`]: one GET on a connection of its own (health checks, `probe`).

pub mod attempt;
pub mod balance;
pub mod body;
pub mod client;
pub mod connect;
pub mod dns;
pub mod exchange;
pub mod h2;
pub mod health;
pub mod outgoing;
pub mod pipe;
pub mod pool;
pub mod recv;
pub mod retry;

pub use attempt::{Attempt, AttemptError, AttemptSettings, Failure, Upstreams};
pub use body::{ClientBody, RequestBody, RequestBodyError, UpstreamBody};
pub use connect::{connector, ClientSettings, Connector};
pub use exchange::{fields_into_map, ResponseBody};
pub use health::{Admit, Health};
pub use pool::{Conn, Full, Limits, Use};
pub use recv::{Arrived, RecvBody, TakeIn};
