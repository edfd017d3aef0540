//! Forward: the upstream leg's ends that belong to the client's exchange:
//! the tunnel an upgrade (WebSocket) opens between client and upstream.

use http::{Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Tunnels an upgraded connection (WebSocket) between client and upstream
/// once both sides have switched protocols.
pub fn spawn_tunnel(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade) {
    tokio::spawn(async move {
        let (Ok(c), Ok(u)) = (client.await, upstream.await) else {
            tracing::debug!("upgrade failed on one side; tunnel not opened");
            return;
        };
        let mut c = TokioIo::new(c);
        let mut u = TokioIo::new(u);
        if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
            tracing::debug!(error = %e, "upgraded tunnel closed with an error");
        }
    });
}

/// Whether an upstream answered `101 Switching Protocols`.
pub fn is_switching<B>(resp: &Response<B>) -> bool {
    resp.status() == StatusCode::SWITCHING_PROTOCOLS
}
