//! The drain: the shared "we are going away" flag. The proxy adds
//! `Connection: close` to HTTP/1.1 responses once it is set, `/ready` and
//! `/.shardgate/ready` answer 503, and `app` closes the listener after the
//! drain delay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

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
