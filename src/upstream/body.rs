//! The client's request body on its way upstream, watched: whether the
//! client is being waited for, when the last bytes went, whether the client
//! broke it. The attempt's timeout ([`super::attempt`]) and the blame for a
//! failure (the client's 400, or a failure held against the upstream) are
//! read from here. The body itself is a [`RequestBody`], whichever server
//! read the request: hyper's (HTTP/2) or the proxy's own HTTP/1.1 one.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{Either, Empty};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::http1;

/// A client's request body as the server that read the request hands it on.
pub enum RequestBody {
    /// No body.
    Empty,
    /// Read by hyper (HTTP/2).
    Hyper(Incoming),
    /// Read by the proxy's own HTTP/1.1 server from the client's connection.
    Http1(Pin<Box<dyn Body<Data = Bytes, Error = RequestBodyError> + Send>>),
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestBody::Empty => f.write_str("RequestBody::Empty"),
            RequestBody::Hyper(b) => f.debug_tuple("RequestBody::Hyper").field(b).finish(),
            RequestBody::Http1(b) => f.debug_tuple("RequestBody::Http1").field(&b.size_hint()).finish(),
        }
    }
}

impl From<Incoming> for RequestBody {
    fn from(body: Incoming) -> RequestBody {
        RequestBody::Hyper(body)
    }
}

/// Why a client's request body could not be read to its end.
#[derive(Debug)]
pub enum RequestBodyError {
    /// hyper's reading of it (HTTP/2) failed.
    Hyper(hyper::Error),
    /// Its HTTP/1.1 framing is broken, or the client closed before its end.
    Framing(http1::Error),
    /// The client's connection failed.
    Io(io::Error),
    /// The request was answered already; the connection went on without this body.
    Detached,
}

impl RequestBodyError {
    /// Whether the client stopped before the body's end (rather than
    /// sending something malformed).
    pub fn is_incomplete(&self) -> bool {
        match self {
            RequestBodyError::Hyper(e) => e.is_incomplete_message(),
            RequestBodyError::Framing(e) => e.reason == http1::Reason::BodyIncomplete,
            RequestBodyError::Io(_) | RequestBodyError::Detached => true,
        }
    }
}

impl fmt::Display for RequestBodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestBodyError::Hyper(e) => write!(f, "client body: {e}"),
            RequestBodyError::Framing(e) => write!(f, "client body: {e}"),
            RequestBodyError::Io(e) => write!(f, "client body: {e}"),
            RequestBodyError::Detached => f.write_str("client body: the request was answered already"),
        }
    }
}

impl std::error::Error for RequestBodyError {}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(RequestBodyError::Hyper),
            RequestBody::Http1(b) => b.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Hyper(b) => b.is_end_stream(),
            RequestBody::Http1(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Hyper(b) => b.size_hint(),
            RequestBody::Http1(b) => b.size_hint(),
        }
    }
}

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
    inner: RequestBody,
    watch: Arc<BodyWatch>,
}

impl ClientBody {
    /// Watches `inner`.
    pub fn new(inner: RequestBody) -> ClientBody {
        ClientBody { inner, watch: Arc::new(BodyWatch::new()) }
    }

    /// What it has seen, shared.
    pub fn watch(&self) -> Arc<BodyWatch> {
        Arc::clone(&self.watch)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let w = &self.watch;
        match &polled {
            Poll::Pending => {
                w.state.fetch_or(WAITING, Ordering::Relaxed);
            }
            Poll::Ready(Some(Ok(_))) => w.touch(0),
            Poll::Ready(None) => w.touch(FINISHED),
            Poll::Ready(Some(Err(e))) => w.touch(if e.is_incomplete() { ABORTED } else { MALFORMED }),
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
