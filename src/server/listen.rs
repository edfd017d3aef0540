//! The proxy listener: the accept loop, one path for plain and TLS
//! connections. HTTP/1.1 and h2c (prior knowledge) on one port, or TLS
//! with ALPN h2 and http/1.1 (`server.tls`), upgrades allowed, every
//! connection watched for graceful shutdown and idleness. A connection
//! whose first bytes are the HTTP/2 preface is served by the HTTP/2
//! server (`h2`); any other by the HTTP/1.1 server (`h1`). Each request reaches the
//! [`Handler`] with its connection's [`ConnInfo`]. The listener and the
//! shutdown signal are passed in, so tests bind port 0.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::accept::{Acceptor, Slot};
use super::conn::{ConnInfo, ServerOptions};
use super::idle::{until_idle, Activity, Watched};
use super::upgrade::{ClientIo, Rewound};
use super::{Handler, Refused};
use crate::tls::ServerTls;

/// The first byte of a TLS handshake record (RFC 8446 §5.1); a plain
/// HTTP request on a TLS port starts with a method's letter instead.
const TLS_HANDSHAKE: u8 = 0x16;

/// The first byte the client sent, left in the socket (`None`: it closed, or failed).
async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves `handler` on `listener` until `shutdown` resolves: HTTP/1.1 and h2c
/// (prior knowledge), or, with `tls`, TLS with ALPN h2 and http/1.1 (the
/// handshake bounded by `header_read_timeout`, the certificate files checked
/// for changes every [`crate::tls::RELOAD_CHECK_INTERVAL`]). Then it stops
/// accepting and lets in-flight requests finish for the grace period the
/// shutdown future yields (read when the drain ends, so
/// `server.shutdown_timeout` reloads live). Connections are counted in
/// `metrics`. Returns `true` when every connection finished within it.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    metrics: Arc<crate::metrics::Metrics>,
    opts: ServerOptions,
    tls: Option<Arc<ServerTls>>,
    shutdown: impl Future<Output = Duration>,
) -> io::Result<bool> {
    let _cert_watch = tls.as_ref().map(|t| t.watch(crate::tls::RELOAD_CHECK_INTERVAL));
    // The connections' shutdown signal: HTTP/1.1 ones finish the request
    // in flight and close when idle, HTTP/2 ones send GOAWAY and finish
    // their streams; each drops its receiver when it ends.
    let (stop_tx, stop) = watch::channel(false);
    let refused = Refused::TooManyConnections { limit: opts.max_connections, listener: "proxy" };
    let refusal: Arc<[u8]> = crate::problem::http1_answer(&refused, handler.name()).into();
    let mut acceptor = Acceptor::new(listener, "proxy", opts.max_connections, refusal, Arc::clone(&metrics));
    tokio::pin!(shutdown);
    let grace = loop {
        let (stream, peer, slot) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            grace = &mut shutdown => break grace,
        };
        let conn = Connection {
            handler: Arc::clone(&handler),
            stop: stop.clone(),
            opts,
            peer,
            _open: metrics.connection_opened("proxy"),
            _slot: slot,
        };
        tokio::spawn(conn.run(stream, tls.clone()));
    };
    // From here on new connections are refused by the kernel.
    drop(acceptor);
    drop(stop);
    stop_tx.send_replace(true);
    let finished = tokio::time::timeout(grace, stop_tx.closed()).await.is_ok();
    if !finished {
        tracing::warn!(timeout = ?grace, "in-flight requests did not finish before the shutdown timeout");
    }
    Ok(finished)
}

/// One accepted client connection, with its places under the limits
/// (given up when it ends).
struct Connection<H> {
    handler: Arc<H>,
    stop: watch::Receiver<bool>,
    opts: ServerOptions,
    peer: SocketAddr,
    _open: crate::metrics::ConnectionGuard,
    _slot: Slot,
}

impl<H: Handler> Connection<H> {
    /// Serves the connection to its end: plain, or after the TLS handshake.
    async fn run(self, mut stream: TcpStream, tls: Option<Arc<ServerTls>>) {
        let peer = self.peer;
        if tls.is_some() {
            let first = tokio::time::timeout(self.opts.header_read_timeout, first_byte(&stream)).await;
            if let Ok(Some(b)) = first {
                if b != TLS_HANDSHAKE && b.is_ascii_alphabetic() {
                    tracing::debug!(%peer, "plain HTTP on the TLS listener; answered 400");
                    let answer = crate::problem::http1_answer(&Refused::PlainHttpToTls, self.handler.name());
                    let _ = tokio::time::timeout(super::accept::REFUSAL_TIMEOUT, stream.write_all(&answer)).await;
                    return;
                }
            }
        }
        let stream = Watched::new(stream);
        let activity = Arc::clone(&stream.activity);
        let Some(tls) = tls else {
            let info = ConnInfo::plain(self.peer);
            return self.serve(stream, info, true, &activity).await;
        };
        let client_auth = tls.client_auth();
        let stream = match tokio::time::timeout(self.opts.header_read_timeout, tls.acceptor().accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return tracing::debug!(error = %e, %peer, "tls handshake failed"),
            Err(_) => return tracing::debug!(%peer, "tls handshake timed out (server.header_read_timeout)"),
        };
        let verified = client_auth && stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
        let info = ConnInfo { peer, tls: true, client_auth, client_verified: verified };
        let h2 = tls.h2_allowed(stream.get_ref().1.alpn_protocol());
        self.serve(stream, info, h2, &activity).await;
    }

    /// Serves HTTP on `io` until it ends or idles out: HTTP/2 when
    /// `h2` allows it and the client's first bytes are its preface, else
    /// HTTP/1.1 (the proxy's own server); each request reaches the handler
    /// with `info`.
    async fn serve<S: ClientIo + 'static>(self, mut io: S, info: ConnInfo, h2: bool, activity: &Activity) {
        let Connection { handler, mut stop, opts, peer, _open, _slot } = self;
        let conn = async move {
            let mut buf = BytesMut::with_capacity(8 * 1024);
            loop {
                // A connection that has sent nothing yet ends when shutdown begins.
                let read = tokio::select! {
                    read = io.read_buf(&mut buf) => read.map_err(|e| e.to_string())?,
                    _ = stop.wait_for(|stopping| *stopping), if buf.is_empty() => return Ok(()),
                };
                if read == 0 {
                    return Ok(());
                }
                let sniffed = buf.len().min(PREFACE.len());
                if !h2 || buf[..sniffed] != PREFACE[..sniffed] {
                    let wire = super::h1::Wire::new(Box::new(io), buf);
                    super::h1::serve(handler, wire, info, opts, stop).await;
                    return Ok(());
                }
                if sniffed == PREFACE.len() {
                    break;
                }
            }
            super::h2::serve(Rewound::new(buf, io), handler, info, opts, stop).await.map_err(|e| e.to_string())
        };
        until_idle(conn, activity, opts, peer).await;
    }
}
