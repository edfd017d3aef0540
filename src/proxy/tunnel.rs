//! The tunnel an upgrade opens (WebSocket): once the upstream answers
//! `101` to the protocol the client asked for and the client's side has
//! switched, the two sockets are copied both ways until either closes, or
//! until no byte has moved for the route's `tunnel_idle_timeout` (or the
//! client takes what is sent to it slower than `server.answer_min_rate`). Its
//! upstream connection counts under the endpoint's `upstream.max_tunnels`
//! until then, never under the connection cap requests need.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderMap, HeaderValue};

use crate::server::idle::{until_idle, Watched};
use crate::server::upgrade::ClientUpgrade;
use crate::server::ServerOptions;
use crate::upstream::exchange;
use crate::upstream::Conn;

/// An upgrade a request asks for: the client's side, the protocols it
/// asked for (as sent upstream), how long the tunnel may idle.
#[derive(Debug)]
pub struct Tunnel {
    /// The client's side, once its `101` is written.
    pub client: ClientUpgrade,
    /// The request's `Upgrade` field.
    pub asked: HeaderValue,
    /// The route's `tunnel_idle_timeout`.
    pub idle: Duration,
    /// `server.answer_min_rate`: what the client must take of what the
    /// upstream sends it.
    pub min_rate: u64,
    /// The client, for the log.
    pub peer: SocketAddr,
}

impl Tunnel {
    /// Whether an answer's `Upgrade` switches to a protocol the request
    /// asked for (compared by name, `websocket` for `websocket/13`).
    pub fn agrees(&self, answer: &HeaderMap) -> bool {
        let name = |p: &str| p.trim().split('/').next().unwrap_or("").to_ascii_lowercase();
        let asked: Vec<String> = self.asked.to_str().unwrap_or("").split(',').map(name).collect();
        let chosen = answer.get_all(header::UPGRADE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(','));
        let mut any = false;
        for p in chosen {
            any = true;
            if !asked.contains(&name(p)) {
                return false;
            }
        }
        any
    }

    /// Copies between the client, once its side has switched, and
    /// `upstream`, in a task of its own.
    pub fn spawn(self, upstream: Conn) {
        let Tunnel { client, idle, min_rate, peer, .. } = self;
        // The idle watch of a connection, with the tunnel's timeout both
        // before and after the client's first byte.
        let opts = ServerOptions {
            idle_timeout: idle,
            header_read_timeout: idle,
            answer_min_rate: min_rate,
            ..ServerOptions::default()
        };
        tokio::spawn(async move {
            match client.0.await {
                Ok(c) => copy(Watched::new(c), upstream, opts, peer).await,
                Err(_) => tracing::debug!("the client's side of the upgrade failed; tunnel not opened"),
            }
        });
    }
}

/// Copies both ways until either side closes or no byte moves for the idle timeout.
async fn copy<C>(client: Watched<C>, upstream: Conn, opts: ServerOptions, peer: SocketAddr)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let activity = Arc::clone(&client.activity);
    let copied = async move {
        exchange::tunnel(client, upstream).await;
        Ok::<(), std::convert::Infallible>(())
    };
    until_idle(copied, &activity, opts, peer).await;
}
