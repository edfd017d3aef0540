//! What a client connection is to the request path: who is on the other end
//! ([`ConnInfo`]) and the limits its listener serves it under
//! ([`ServerOptions`]). Shared by the accept loop (`server`), the HTTP/1.1
//! server (`h1`) and the header stages, so none of them imports another.

use std::net::SocketAddr;
use std::time::Duration;

/// Connection-level limits, fixed when the listener starts.
#[derive(Clone, Copy, Debug)]
pub struct ServerOptions {
    /// Time allowed to receive a request head (slowloris); on HTTP/1.1 it
    /// also bounds how long an idle keep-alive connection waits for its next
    /// request.
    pub header_read_timeout: Duration,
    /// Largest request head in bytes (beyond it: 431).
    pub max_header_bytes: usize,
    /// Most header fields (beyond it: 431).
    pub max_headers: usize,
    /// How long in-flight requests may take to finish after shutdown starts.
    pub shutdown_timeout: Duration,
    /// A connection on which no byte moves in either direction for this long
    /// is closed, whatever it is doing: a request body that stalls, a client
    /// that stops reading its response. Upgraded (WebSocket) tunnels are
    /// not covered; idle keep-alive waits end at `header_read_timeout`.
    pub idle_timeout: Duration,
    /// Bytes a second a client must take of what waits to be sent to it:
    /// one that took fewer over a whole `idle_timeout` during which a write
    /// to it waited at every look is closed (a reader that takes a byte now
    /// and then keeps `idle_timeout` from seeing it idle). 0: no limit.
    pub answer_min_rate: u64,
    /// Most client connections open at once; beyond it a new connection is
    /// answered `503` problem+json with `Connection: close` and closed.
    pub max_connections: usize,
    /// The same limit for the admin listener, which shares the timeouts above.
    pub admin_max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            shutdown_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            answer_min_rate: 1024,
            max_connections: 10_000,
            admin_max_connections: 64,
        }
    }
}

/// What the accept loop knows about a request's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// Whether the listener asks for client certificates (`server.tls.client_ca`).
    pub client_auth: bool,
    /// Whether the client presented a certificate that verified against `server.tls.client_ca`.
    pub client_verified: bool,
}

impl ConnInfo {
    /// A plain-HTTP connection from `peer`.
    pub fn plain(peer: SocketAddr) -> ConnInfo {
        ConnInfo { peer, tls: false, client_auth: false, client_verified: false }
    }

    /// Whether the connection comes from an authenticated peer shardgate,
    /// whose mesh headers (`Forwarded` with `by=`, `X-Shardgate-Hops`,
    /// `X-Shardgate-Failover`, a relayed minted id) are honoured. On a
    /// listener that asks for client certificates, only a verified
    /// certificate authenticates; elsewhere only a source address in
    /// `mesh.trusted_peers` does.
    pub fn is_mesh_peer(&self, trusted_peers: &[crate::config::values::Cidr]) -> bool {
        if self.client_auth {
            self.client_verified
        } else {
            trusted_peers.iter().any(|c| c.contains(self.peer.ip()))
        }
    }
}

impl From<SocketAddr> for ConnInfo {
    fn from(peer: SocketAddr) -> ConnInfo {
        ConnInfo::plain(peer)
    }
}
