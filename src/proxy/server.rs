//! Server: the accept loop. HTTP/1.1 and h2c (prior knowledge) on one
//! port, upgrades allowed, every connection watched for graceful shutdown.
//! The listener and the shutdown signal are passed in, so tests bind port 0.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use super::Proxy;

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
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `proxy` on `listener` until `shutdown` resolves, then stops
/// accepting, lets in-flight requests finish (up to the shutdown timeout)
/// and returns.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout)
        // Above the configured count the proxy answers 431 problem+json
        // itself; far above it hyper refuses the head (a bare 431).
        .max_headers(opts.max_headers.saturating_mul(2).saturating_add(8))
        // hyper's floor for the read buffer is 8 KiB.
        .max_buf_size(opts.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(opts.max_header_bytes).unwrap_or(u32::MAX));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let proxy = Arc::clone(&proxy);
        let service = service_fn(move |req| {
            let proxy = Arc::clone(&proxy);
            async move { Ok::<_, Infallible>(proxy.handle(req, peer).await) }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(opts.shutdown_timeout, graceful.shutdown()).await.is_err() {
        tracing::warn!(timeout = ?opts.shutdown_timeout, "in-flight requests did not finish before the shutdown timeout");
    }
    Ok(())
}
