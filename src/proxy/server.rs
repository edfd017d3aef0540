//! Server: the accept loop. HTTP/1.1 and h2c (prior knowledge) on one
//! port, upgrades allowed, every connection watched for graceful shutdown.
//! The listener and the shutdown signal are passed in, so tests bind port 0.
//!
//! [`Drain`] is the shared "we are going away" flag: the proxy adds
//! `Connection: close` to HTTP/1.1 responses once it is set, the admin
//! listener's `/ready` answers 503, and `app` closes the listener after the
//! drain delay.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

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

/// The drain state shared by the proxy, the admin listener and the signal
/// handlers. Cloning shares it; starting it twice is harmless.
#[derive(Clone, Debug)]
pub struct Drain {
    inner: Arc<DrainInner>,
}

#[derive(Debug)]
struct DrainInner {
    flag: AtomicBool,
    tx: watch::Sender<bool>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    /// Not draining.
    pub fn new() -> Drain {
        Drain { inner: Arc::new(DrainInner { flag: AtomicBool::new(false), tx: watch::Sender::new(false) }) }
    }

    /// Starts draining; returns `false` when it had already started.
    pub fn start(&self) -> bool {
        let first = !self.inner.flag.swap(true, Ordering::SeqCst);
        if first {
            self.inner.tx.send_replace(true);
        }
        first
    }

    /// Whether draining has started.
    pub fn is_draining(&self) -> bool {
        self.inner.flag.load(Ordering::Relaxed)
    }

    /// Resolves once draining has started.
    pub async fn started(&self) {
        let mut rx = self.inner.tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
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
    let timeout = opts.shutdown_timeout;
    serve_counted(listener, proxy, opts, async move {
        shutdown.await;
        timeout
    })
    .await
    .map(|_| ())
}

/// Like [`serve`], but the shutdown future yields the grace period for
/// in-flight requests, so it can be read from the table in force when the
/// drain ends (`server.shutdown_timeout` reloads live). Returns `true` when
/// every connection finished within it.
pub async fn serve_counted(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    opts: ServerOptions,
    shutdown: impl Future<Output = Duration>,
) -> io::Result<bool> {
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
    let grace = loop {
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
            grace = &mut shutdown => break grace,
        };
        let _ = stream.set_nodelay(true);
        let open = proxy.metrics().connection_opened("proxy");
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
            drop(open);
        });
    };
    // From here on new connections are refused by the kernel.
    drop(listener);
    let finished = tokio::time::timeout(grace, graceful.shutdown()).await.is_ok();
    if !finished {
        tracing::warn!(timeout = ?grace, "in-flight requests did not finish before the shutdown timeout");
    }
    Ok(finished)
}
