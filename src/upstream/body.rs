//! The client's request body on its way upstream, watched: whether the
//! client is being waited for, when the last bytes went, whether the client
//! broke it. The attempt's timeout ([`super::attempt`]) and the blame for a
//! failure (the client's 400, or a failure held against the upstream) are
//! read from here.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{Either, Empty};
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// Body sent upstream: the client's streamed body, or nothing (which can be
/// sent again on a retry).
pub type UpstreamBody = Either<ClientBody, Empty<Bytes>>;

/// Where a client's body stands on its way upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPhase {
    /// The proxy is waiting for the client's next bytes.
    WaitingOnClient,
    /// The last bytes went upstream at this time; the upstream has not asked for more since.
    Flowing(Instant),
    /// The whole body was passed on at this time.
    Finished(Instant),
}

/// What the proxy saw of a client's body while passing it upstream, shared
/// between the connection that sends it and the request that waits for the
/// answer.
#[derive(Debug)]
pub struct BodyWatch {
    origin: Instant,
    /// Milliseconds after `origin` of the last frame passed on.
    last_ms: AtomicU64,
    state: AtomicU8,
}

const WAITING: u8 = 1;
const FINISHED: u8 = 2;
const ABORTED: u8 = 4;
const MALFORMED: u8 = 8;

impl BodyWatch {
    fn new() -> BodyWatch {
        BodyWatch { origin: Instant::now(), last_ms: AtomicU64::new(0), state: AtomicU8::new(0) }
    }

    fn touch(&self, set: u8) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
        let state = self.state.load(Ordering::Relaxed);
        self.state.store((state & !WAITING) | set, Ordering::Relaxed);
    }

    /// Where the body stands.
    pub fn phase(&self) -> BodyPhase {
        let state = self.state.load(Ordering::Relaxed);
        let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        if state & FINISHED != 0 {
            BodyPhase::Finished(last)
        } else if state & WAITING != 0 {
            BodyPhase::WaitingOnClient
        } else {
            BodyPhase::Flowing(last)
        }
    }

    /// Why the client's body failed, if it did.
    pub fn client_failure(&self) -> Option<&'static str> {
        let state = self.state.load(Ordering::Relaxed);
        if state & MALFORMED != 0 {
            Some("the request body is malformed (its framing could not be read)")
        } else if state & ABORTED != 0 {
            Some("the client stopped sending the request body before its end")
        } else {
            None
        }
    }
}

/// The client's request body on its way upstream, reporting into a
/// [`BodyWatch`] what it sees: so an attempt's timeout does not run while
/// the client is still sending, and a body the client broke (malformed
/// framing, an upload cut short) is the client's 400, not a failure held
/// against the upstream.
#[derive(Debug)]
pub struct ClientBody {
    inner: Incoming,
    watch: Arc<BodyWatch>,
}

impl ClientBody {
    /// Watches `inner`.
    pub fn new(inner: Incoming) -> ClientBody {
        ClientBody { inner, watch: Arc::new(BodyWatch::new()) }
    }

    /// What it has seen, shared.
    pub fn watch(&self) -> Arc<BodyWatch> {
        Arc::clone(&self.watch)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        let w = &self.watch;
        match &polled {
            Poll::Pending => {
                w.state.fetch_or(WAITING, Ordering::Relaxed);
            }
            Poll::Ready(Some(Ok(_))) => w.touch(0),
            Poll::Ready(None) => w.touch(FINISHED),
            Poll::Ready(Some(Err(e))) => w.touch(if e.is_incomplete_message() { ABORTED } else { MALFORMED }),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
