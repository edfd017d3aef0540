//! The client's request body on its way upstream. A small one is read
//! whole before any upstream connection is taken ([`take`]), so a client
//! that sends slowly holds no connection an endpoint's other clients need;
//! a larger one is passed on as it arrives, watched: whether the client is
//! being waited for, when the last bytes went, how many have come, whether
//! the client broke it. The attempt's timeouts ([`super::attempt`]), the
//! client's pace ([`Pace`]) and the blame for a failure (the client's 400 or
//! 408, or a failure held against the upstream) are read from here. The
//! body itself is a [`RequestBody`], whichever of the proxy's servers read
//! the request: HTTP/2 (its stream) or HTTP/1.1 (its connection).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use super::recv::{RecvBody, TakeIn};
use crate::http1;

/// A client's request body as the server that read the request hands it on.
pub enum RequestBody {
    /// No body.
    Empty,
    /// The client's HTTP/2 stream (`server::h2`).
    H2(RecvBody),
    /// Read by the proxy's own HTTP/1.1 server from the client's connection.
    Http1(Pin<Box<dyn Body<Data = Bytes, Error = RequestBodyError> + Send>>),
    /// Read in part already (a gRPC call's first message, to route it by):
    /// those bytes (`None` once gone), then the rest.
    Resumed(Option<Bytes>, Box<RequestBody>),
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestBody::Empty => f.write_str("RequestBody::Empty"),
            RequestBody::H2(b) => f.debug_tuple("RequestBody::H2").field(&b.size_hint()).finish(),
            RequestBody::Http1(b) => f.debug_tuple("RequestBody::Http1").field(&b.size_hint()).finish(),
            RequestBody::Resumed(read, rest) => f.debug_tuple("RequestBody::Resumed").field(read).field(rest).finish(),
        }
    }
}

/// Why a client's request body could not be read to its end.
#[derive(Debug)]
pub enum RequestBodyError {
    /// Its HTTP/2 stream failed: the client reset it, its connection
    /// ended, or it broke the stream's rules (a length it did not keep).
    H2(h2::Error),
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
            RequestBodyError::H2(e) => e.reason() != Some(h2::Reason::PROTOCOL_ERROR),
            RequestBodyError::Framing(e) => e.reason == http1::Reason::BodyIncomplete,
            RequestBodyError::Io(_) | RequestBodyError::Detached => true,
        }
    }
}

impl fmt::Display for RequestBodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("client body: ")?;
        match self {
            RequestBodyError::H2(e) => e.fmt(f),
            RequestBodyError::Framing(e) => e.fmt(f),
            RequestBodyError::Io(e) => e.fmt(f),
            RequestBodyError::Detached => f.write_str("the request was answered already"),
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
            RequestBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(RequestBodyError::H2),
            RequestBody::Http1(b) => b.as_mut().poll_frame(cx),
            RequestBody::Resumed(read, rest) => match read.take() {
                Some(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                None => Pin::new(rest.as_mut()).poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::H2(b) => b.is_end_stream(),
            RequestBody::Http1(b) => b.is_end_stream(),
            RequestBody::Resumed(read, rest) => read.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::H2(b) => b.size_hint(),
            RequestBody::Http1(b) => b.size_hint(),
            RequestBody::Resumed(read, rest) => {
                let (read, rest) = (read.as_ref().map_or(0, |r| r.len() as u64), rest.size_hint());
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
        }
    }
}

/// The body sent upstream.
#[derive(Debug)]
pub enum UpstreamBody {
    /// None: a request that is sent again goes as it is.
    Empty,
    /// Read whole from the client before a connection was taken (`None`
    /// once its one frame has gone).
    Whole(Option<Bytes>),
    /// Still arriving from the client, passed on as it comes.
    Streamed(ClientBody),
}

impl UpstreamBody {
    /// A copy to send again: none of a body still arriving from its client
    /// (it cannot be sent twice); one read whole costs a count, not a copy.
    pub fn again(&self) -> Option<UpstreamBody> {
        match self {
            UpstreamBody::Empty => Some(UpstreamBody::Empty),
            UpstreamBody::Whole(b) => Some(UpstreamBody::Whole(b.clone())),
            UpstreamBody::Streamed(_) => None,
        }
    }

    /// The watch of a body still arriving from its client.
    pub fn watch(&self) -> Option<Arc<BodyWatch>> {
        match self {
            UpstreamBody::Streamed(b) => Some(b.watch()),
            _ => None,
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match self.get_mut() {
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Whole(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            UpstreamBody::Streamed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Empty => true,
            UpstreamBody::Whole(b) => b.is_none(),
            UpstreamBody::Streamed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Empty => SizeHint::with_exact(0),
            UpstreamBody::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            UpstreamBody::Streamed(b) => b.size_hint(),
        }
    }
}

/// How fast a client must send its body: its first [`Pace::grace`] after
/// the request arrived, and a second more for every [`Pace::min_rate`]
/// bytes that have come (Apache's `mod_reqtimeout` rule). A body that falls
/// behind is the client's `408`, never a failure held against an upstream.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// When the request arrived.
    pub since: Instant,
    /// Time allowed before the rate counts (`server.body_timeout`).
    pub grace: Duration,
    /// Bytes a second the body must keep up on average (`server.body_min_rate`); 0: no limit.
    pub min_rate: u64,
}

impl Pace {
    /// When a body of which `received` bytes have come is too slow (`None`: never).
    pub fn deadline(&self, received: u64) -> Option<Instant> {
        if self.min_rate == 0 {
            return None;
        }
        let rest = received % self.min_rate;
        let part = match rest.checked_mul(1_000_000_000) {
            Some(scaled) => scaled / self.min_rate,
            None => nanos_of_a_vast_rate(rest, self.min_rate),
        };
        let earned = Duration::from_secs(received / self.min_rate) + Duration::from_nanos(part);
        Some(self.since + self.grace + earned)
    }
}

/// `rest * 10^9 / rate` for a rate past 2^64 / 10^9 bytes a second (the
/// table takes any 64-bit number), in 128 bits; below a billion again.
/// Out of line: no table worth running has such a rate.
#[cold]
fn nanos_of_a_vast_rate(rest: u64, rate: u64) -> u64 {
    (u128::from(rest) * 1_000_000_000 / u128::from(rate)) as u64
}

/// Why a client's body could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// The client broke it (malformed framing, cut short): what went wrong.
    Broken(&'static str),
    /// It came slower than its [`Pace`].
    TooSlow,
}

/// A client's body that stopped before its end, for people.
const CUT_SHORT: &str = "the client stopped sending the request body before its end";
/// A client's body whose framing is broken, for people.
const MALFORMED: &str = "the request body is malformed (its framing could not be read)";

/// What a failed client body was, for people.
fn broken(e: &RequestBodyError) -> &'static str {
    if e.is_incomplete() {
        CUT_SHORT
    } else {
        MALFORMED
    }
}

/// The client's body, ready for the upstream leg: none; read whole when it
/// is at most `limit` bytes (`server.request_buffer_bytes`), within its
/// `pace`; else passed on as it arrives, with what was read of it first.
pub async fn take(mut body: RequestBody, limit: usize, pace: Pace) -> Result<UpstreamBody, BodyFault> {
    if body.is_end_stream() {
        return Ok(UpstreamBody::Empty);
    }
    if body.size_hint().lower() > limit as u64 {
        return Ok(UpstreamBody::Streamed(ClientBody::new(body, None)));
    }
    let mut read = ReadSoFar::Nothing;
    loop {
        let next = body.frame();
        let frame = match pace.deadline(read.len() as u64) {
            Some(at) => tokio::time::timeout_at(at.into(), next).await.map_err(|_| BodyFault::TooSlow)?,
            None => next.await,
        };
        match frame {
            None => return Ok(UpstreamBody::Whole(Some(read.bytes().unwrap_or_default()))),
            Some(Ok(frame)) => {
                // Trailers are not forwarded (the upstream leg sends none).
                if let Ok(data) = frame.into_data() {
                    read = read.and(data);
                }
                if read.len() > limit {
                    return Ok(UpstreamBody::Streamed(ClientBody::new(body, read.bytes())));
                }
            }
            Some(Err(e)) => return Err(BodyFault::Broken(broken(&e))),
        }
    }
}

/// A gRPC call's body as the upstream leg takes it: whole when its client
/// has sent all of it by now (a unary call's one message mostly comes with
/// the call's head), so that it goes with the call's head, from the
/// request's own task; else passed on as it arrives, behind what was read
/// of it. Only what is at hand is read, never waited for: a streaming
/// call's next message may wait on the answers.
pub fn at_hand(mut body: RequestBody, limit: usize) -> Result<UpstreamBody, BodyFault> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut read = ReadSoFar::Nothing;
    loop {
        if body.is_end_stream() {
            return Ok(read.whole());
        }
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                // Trailers at hand end the body and are not forwarded (as by
                // `take`); gRPC clients send none.
                let Ok(data) = frame.into_data() else { return Ok(read.whole()) };
                read = read.and(data);
                if read.len() > limit {
                    return Ok(UpstreamBody::Streamed(ClientBody::new(body, read.bytes())));
                }
            }
            Poll::Ready(None) => return Ok(read.whole()),
            Poll::Ready(Some(Err(e))) => return Err(BodyFault::Broken(broken(&e))),
            Poll::Pending => return Ok(UpstreamBody::Streamed(ClientBody::new(body, read.bytes()))),
        }
    }
}

/// What [`take`] or [`at_hand`] has read of a body: one frame kept as it
/// came (the usual case, no copy), or more copied into one buffer.
enum ReadSoFar {
    Nothing,
    One(Bytes),
    More(BytesMut),
}

impl ReadSoFar {
    fn and(self, data: Bytes) -> ReadSoFar {
        match self {
            ReadSoFar::Nothing => ReadSoFar::One(data),
            ReadSoFar::One(first) => {
                let mut more = BytesMut::with_capacity(first.len() + data.len());
                more.extend_from_slice(&first);
                more.extend_from_slice(&data);
                ReadSoFar::More(more)
            }
            ReadSoFar::More(mut more) => {
                more.extend_from_slice(&data);
                ReadSoFar::More(more)
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            ReadSoFar::Nothing => 0,
            ReadSoFar::One(b) => b.len(),
            ReadSoFar::More(b) => b.len(),
        }
    }

    fn bytes(self) -> Option<Bytes> {
        match self {
            ReadSoFar::Nothing => None,
            ReadSoFar::One(b) => Some(b),
            ReadSoFar::More(b) => Some(b.freeze()),
        }
    }

    /// The body, all of it read.
    fn whole(self) -> UpstreamBody {
        match self.bytes() {
            Some(b) => UpstreamBody::Whole(Some(b)),
            None => UpstreamBody::Empty,
        }
    }
}

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
    /// Body bytes passed on so far.
    received: AtomicU64,
    state: AtomicU8,
}

const WAITING: u8 = 1;
const FINISHED: u8 = 2;
const ABORTED: u8 = 4;
const FAILED_MALFORMED: u8 = 8;

impl BodyWatch {
    fn new() -> BodyWatch {
        BodyWatch {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            received: AtomicU64::new(0),
            state: AtomicU8::new(0),
        }
    }

    /// Body bytes passed on so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
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
        if state & FAILED_MALFORMED != 0 {
            Some(MALFORMED)
        } else if state & ABORTED != 0 {
            Some(CUT_SHORT)
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
    /// What was read of it before it went upstream, passed on first.
    read: Option<Bytes>,
    inner: RequestBody,
    watch: Arc<BodyWatch>,
}

impl ClientBody {
    /// Watches `inner`, of which `read` was read already.
    pub fn new(inner: RequestBody, read: Option<Bytes>) -> ClientBody {
        let watch = Arc::new(BodyWatch::new());
        if let Some(r) = &read {
            watch.received.store(r.len() as u64, Ordering::Relaxed);
        }
        ClientBody { read, inner, watch }
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
        // A frame that ends the body finishes it: a reader that stops at
        // `is_end_stream` never polls for the end.
        if let Some(read) = self.read.take() {
            self.watch.touch(if self.inner.is_end_stream() { FINISHED } else { 0 });
            return Poll::Ready(Some(Ok(Frame::data(read))));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let w = &self.watch;
        match &polled {
            Poll::Pending => {
                w.state.fetch_or(WAITING, Ordering::Relaxed);
            }
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                w.received.fetch_add(n, Ordering::Relaxed);
                w.touch(if self.inner.is_end_stream() { FINISHED } else { 0 });
            }
            Poll::Ready(None) => w.touch(FINISHED),
            Poll::Ready(Some(Err(e))) => w.touch(if e.is_incomplete() { ABORTED } else { FAILED_MALFORMED }),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let read = self.read.as_ref().map_or(0, |r| r.len() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + read);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}

impl TakeIn for RequestBody {
    fn take_in(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        match self.get_mut() {
            RequestBody::H2(b) => Pin::new(b).take_in(cx),
            RequestBody::Resumed(_, rest) => Pin::new(rest.as_mut()).take_in(cx),
            RequestBody::Empty | RequestBody::Http1(_) => {}
        }
    }
}

impl TakeIn for UpstreamBody {
    fn take_in(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        if let UpstreamBody::Streamed(b) = self.get_mut() {
            Pin::new(&mut b.inner).take_in(cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `body` once, with a waker that is never woken.
    fn poll_once(body: &mut ClientBody) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        Pin::new(body).poll_frame(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_pace_earns_a_second_per_rate_and_any_rate_the_table_gives_is_safe() {
        let since = Instant::now();
        let pace = |grace: Duration, min_rate: u64| Pace { since, grace, min_rate };
        let grace = Duration::from_secs(10);
        assert_eq!(pace(grace, 0).deadline(5), None);
        assert_eq!(pace(grace, 1000).deadline(2500), Some(since + Duration::from_millis(12_500)));
        // A rate past 2^64 / 10^9 bytes a second: the part of a second is right.
        let rate = u64::MAX;
        assert_eq!(pace(grace, rate).deadline(rate / 2), Some(since + grace + Duration::from_nanos(499_999_999)));
    }

    #[test]
    fn a_frame_that_ends_the_body_finishes_it_without_a_poll_for_the_end() {
        let last = || Some(Bytes::from_static(b"hello"));
        // The frame read before the body went upstream, and one read after.
        for mut body in [
            ClientBody::new(RequestBody::Empty, last()),
            ClientBody::new(RequestBody::Resumed(last(), Box::new(RequestBody::Empty)), None),
        ] {
            assert!(matches!(body.watch().phase(), BodyPhase::Flowing(_)));
            assert!(matches!(poll_once(&mut body), Poll::Ready(Some(Ok(_)))));
            assert!(body.is_end_stream());
            assert!(matches!(body.watch().phase(), BodyPhase::Finished(_)), "{:?}", body.watch().phase());
        }
    }
}
