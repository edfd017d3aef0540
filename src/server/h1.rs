//! The client leg's HTTP/1.1 server: one connection, its requests in turn
//! (RFC 9112), each handed to the [`Handler`]:
//!
//! ```text
//! read    head (httparse, once complete; header_read_timeout from the wait's start)
//!           │ malformed ─▶ 400/431 problem+json, Connection: close
//! handle  request ─▶ Handler::handle ─▶ answer
//!           │ the body, if any, reads from the socket meanwhile (100-continue
//!           │ sent on its first read); the socket comes back when handle returns
//! write   head + body (Content-Length, else chunked, else until close) in as
//!         few writes as the body allows
//! next    keep-alive and the body read to its end ─▶ next head (pipelined
//!         bytes are in the buffer already); 101 ─▶ the socket leaves for the
//!         tunnel; otherwise close (writes shut, the client's last bytes drained)
//! ```
//!
//! Why by hand, not hyper's server: its dispatcher, header map encoding and
//! wake-ups were most of the proxy's remaining per-request CPU (as
//! `benches/load/instructions.py` shows). HTTP/2 is `h2`'s (`listen.rs`
//! tells the two apart by the client's preface); the admin listener stays
//! hyper's.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{Method, Request, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::conn::{ConnInfo, ServerOptions};
use super::upgrade::{ClientIo, PendingUpgrade, Rewound};
use super::{Answer, AnswerBody, Handler, Refused};
use crate::http1::{self, framing, Decoded, Decoder, Framing, HeadScan, Reason, RequestHead, RequestLimits};
use crate::upstream::{RequestBody, RequestBodyError, TakeIn};
use crate::wire::{self, BodyError};

mod head;
mod waits;
pub(super) use head::http_date;
use head::{write_head, Asked, Framed, Ours};
use waits::{Ended, HeadWaits};

/// Room made in a client connection's read buffer when it runs low (half
/// the upstream leg's: client heads are small, and there are many clients).
const READ_CHUNK: usize = 8 * 1024;
/// Body bytes copied into the write buffer behind the head; a larger frame
/// is written from where it lies.
const COALESCE: usize = 16 * 1024;
/// How long a closing connection waits for the client to finish sending,
/// so that closing does not reset it before it has read the answer.
const LINGER: Duration = Duration::from_millis(500);
/// Sent before the first read of a body whose client asked `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client socket and the bytes read from it not yet used.
#[derive(Debug)]
pub(super) struct Wire {
    io: Box<dyn ClientIo>,
    buf: BytesMut,
}

impl Wire {
    /// `io`, with `buf` read from it already.
    pub(super) fn new(io: Box<dyn ClientIo>, buf: BytesMut) -> Wire {
        Wire { io, buf }
    }
}

/// Serves HTTP/1.1 requests on `wire` until the client closes, a response
/// closes the connection, the head read times out, or `shutdown` turns true
/// while no request is in flight.
pub(super) async fn serve<H: Handler>(
    handler: Arc<H>,
    mut wire: Wire,
    info: ConnInfo,
    opts: ServerOptions,
    shutdown: watch::Receiver<bool>,
) {
    let limits = RequestLimits {
        max_head_bytes: opts.max_header_bytes,
        // Both limits are restart-only, so the listener's copy is the
        // table's. (Under 128 fields the parser's slots are on the stack.)
        max_headers: opts.max_headers,
    };
    let mut conn = Server {
        handler,
        info,
        limits,
        header_read_timeout: opts.header_read_timeout,
        waits: HeadWaits::new(opts.header_read_timeout, &shutdown),
        shutdown,
        out: Vec::with_capacity(1024),
    };
    loop {
        let head = match conn.read_head(&mut wire).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(e) => return conn.refuse(wire, e).await,
        };
        match conn.exchange(wire, head).await {
            Some(next) => wire = next,
            None => return,
        }
    }
}

/// One connection's server state, kept across its requests.
struct Server<H> {
    handler: Arc<H>,
    info: ConnInfo,
    limits: RequestLimits,
    header_read_timeout: Duration,
    shutdown: watch::Receiver<bool>,
    /// What a wait for the next head races: its deadline and shutdown.
    waits: HeadWaits,
    /// The response being written, reused.
    out: Vec<u8>,
}

impl<H: Handler> Server<H> {
    /// The next request head; `None` when the connection should just end
    /// (the client closed between requests, the head did not arrive within
    /// `header_read_timeout`, or shutdown began while idle).
    async fn read_head(&mut self, wire: &mut Wire) -> Result<Option<RequestHead>, http1::Error> {
        let mut scan = HeadScan::default();
        let mut armed = false;
        loop {
            if scan.ready(&wire.buf, self.limits.max_head_bytes) {
                if let Some(head) = http1::parse_request(&mut wire.buf, &self.limits)? {
                    return Ok(Some(head));
                }
            }
            if !armed {
                armed = true;
                self.waits.arm(tokio::time::Instant::now() + self.header_read_timeout);
            }
            let idle = wire.buf.is_empty();
            if idle && *self.shutdown.borrow() {
                return Ok(None);
            }
            let (waits, shutdown) = (&mut self.waits, &self.shutdown);
            let read = std::future::poll_fn(|cx| {
                if let Poll::Ready(read) = wire::fill(cx, &mut wire.io, &mut wire.buf, READ_CHUNK) {
                    return Poll::Ready(Ok(read));
                }
                waits.poll(cx, idle, shutdown).map(Err)
            })
            .await;
            let read = match read {
                Ok(read) => read,
                Err(Ended::TimedOut) => {
                    tracing::debug!(peer = %self.info.peer, "no request head within server.header_read_timeout; closing");
                    return Ok(None);
                }
                Err(Ended::Stopping) => return Ok(None),
            };
            match read {
                Ok(0) if wire.buf.is_empty() => return Ok(None),
                Ok(0) => return Err(http1::Error::new(http1::Part::RequestHead, Reason::HeadIncomplete)),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(peer = %self.info.peer, error = %e, "client connection failed");
                    return Ok(None);
                }
            }
        }
    }

    /// Answers a head that cannot be read with problem+json (nothing for a
    /// client that left in the middle of it) and closes.
    async fn refuse(&mut self, mut wire: Wire, e: http1::Error) {
        let err = match e.reason {
            Reason::HeadIncomplete => return,
            Reason::HeadTooLarge => Refused::HeadTooLarge { limit: self.limits.max_head_bytes },
            Reason::TooManyHeaders => Refused::TooManyHeaders { limit: self.limits.max_headers },
            _ => Refused::Malformed { detail: e.to_string() },
        };
        tracing::debug!(peer = %self.info.peer, error = %e, "unreadable request head refused");
        let answer = crate::problem::http1_answer(&err, self.handler.name());
        if wire.io.write_all(&answer).await.is_ok() {
            linger(wire).await;
        }
    }

    /// One request: handed to the proxy with its body reading from the
    /// socket, answered, and the socket back for the next (`None`: closed,
    /// or gone to an upgrade's tunnel).
    async fn exchange(&mut self, wire: Wire, head: RequestHead) -> Option<Wire> {
        let RequestHead { method, uri, version, headers, framing, keep_alive, expect_continue } = head;
        let http11 = version == Version::HTTP_11;
        let upgrade = (http11 && super::upgrade::asked(&headers)).then(PendingUpgrade::new);
        let asked = Asked { head: method == Method::HEAD, http11, keep_alive };
        // The head stays here, in this future, while the proxy borrows it.
        let (mut head, ()) = Request::new(()).into_parts();
        head.method = method;
        head.uri = uri;
        head.version = version;
        head.headers = headers;
        let mut body = RequestBody::Empty;
        let (mut wire, slot) = if framing == Framing::Empty {
            (Some(wire), None)
        } else {
            let reader = Reader {
                wire,
                decoder: Decoder::new(framing),
                continued: if expect_continue && http11 { 0 } else { CONTINUE.len() },
                unflushed: false,
                failed: false,
            };
            let slot = Arc::new(Mutex::new(Some(reader)));
            let remaining = match framing {
                Framing::Length(n) => Some(n),
                _ => None,
            };
            body = RequestBody::Http1(Box::pin(H1Body { slot: Arc::clone(&slot), remaining, done: false }));
            (None, Some(slot))
        };
        let tunnel = upgrade.map(|(pending, tx)| {
            head.extensions.insert(pending);
            tx
        });
        // The response lives in this block: it ends (with an upstream
        // connection its body may still hold) before any linger below.
        let (wire, keep, switching) = {
            let mut answer = match wire.as_mut() {
                Some(w) => self.handle_watching(&mut head, w).await?,
                None => self.handler.handle(&mut head, body, self.info).await,
            };
            let (mut wire, body_done, interim) = match slot {
                Some(slot) => Reader::give_back(&slot)?,
                None => (wire?, true, &[][..]),
            };
            if !interim.is_empty() && wire.io.write_all(interim).await.is_err() {
                return None;
            }
            let asked = Asked { keep_alive: asked.keep_alive && body_done && !*self.shutdown.borrow(), ..asked };
            let switching = answer.response.status() == StatusCode::SWITCHING_PROTOCOLS;
            let keep = match self.respond(&mut wire, &mut answer, asked).await {
                Ok(keep) => keep,
                Err(e) => {
                    tracing::debug!(peer = %self.info.peer, error = %e, "writing the response failed");
                    return None;
                }
            };
            (wire, keep, switching)
        };
        if switching {
            if let Some(tx) = tunnel {
                let _ = tx.send(Rewound::new(wire.buf, wire.io));
            }
            return None;
        }
        if keep {
            return Some(wire);
        }
        linger(wire).await;
        None
    }

    /// Hands a request without a body to the proxy while watching its
    /// socket: a client that closes before its answer abandons the request
    /// (the upstream attempt is dropped, as hyper's server did), and bytes
    /// it pipelines meanwhile wait in the buffer, up to one head's worth.
    /// `None`: the client left.
    async fn handle_watching(&mut self, head: &mut Parts, w: &mut Wire) -> Option<Answer> {
        // Pinned where it is made (`tokio::pin!` would move it once more).
        let mut handled = std::pin::pin!(self.handler.handle(head, RequestBody::Empty, self.info));
        loop {
            let room = w.buf.len() < self.limits.max_head_bytes;
            tokio::select! {
                biased;
                resp = handled.as_mut() => return Some(resp),
                read = std::future::poll_fn(|cx| wire::fill(cx, &mut w.io, &mut w.buf, READ_CHUNK)), if room => match read {
                    Ok(0) | Err(_) => {
                        tracing::debug!(peer = %self.info.peer, "client closed before its answer; request abandoned");
                        return None;
                    }
                    Ok(_) => {}
                },
            }
        }
    }

    /// Writes `answer` (its request id, and to an upstream's answer this
    /// instance's `Via`): its head in one buffer with the body's first
    /// bytes, the rest as it arrives. Returns whether the connection stays open.
    async fn respond(&mut self, wire: &mut Wire, answer: &mut Answer, asked: Asked) -> io::Result<bool> {
        // Borrowed, not moved: an answer moved into this future would be
        // copied into it.
        let resp = &mut answer.response;
        let status = resp.status();
        let out = &mut self.out;
        out.clear();
        let via = answer.from_upstream.then(|| self.handler.via());
        let ours = Ours { request_id: answer.request_id.as_ref(), via, rules: &answer.rules };
        let (framed, keep) = write_head(out, status, resp.headers(), resp.body(), ours, asked);
        let body = resp.body_mut();
        if framed == Framed::None {
            // Let a finished upstream body give its connection back to the pool.
            if body.is_end_stream() {
                let _ = now_or_never(body).await;
            }
            wire.io.write_all(out).await?;
            wire.io.flush().await?;
            return Ok(keep);
        }
        // Bytes still owed under Content-Length.
        let mut owed = match framed {
            Framed::Length(n) => Some(n),
            _ => None,
        };
        loop {
            let frame = match now_or_never(body).await {
                Some(frame) => frame,
                None => {
                    // Nothing yet: what is written so far goes now (flushed:
                    // TLS may hold records back until asked).
                    write_taking_in(&mut wire.io, out, body, true).await?;
                    out.clear();
                    body.frame().await
                }
            };
            match frame {
                Some(Ok(frame)) => {
                    let Ok(mut data) = frame.into_data() else { continue };
                    let mut over = false;
                    if let Some(left) = owed.as_mut() {
                        over = data.len() as u64 > *left;
                        data.truncate(usize::try_from(*left).unwrap_or(usize::MAX));
                        *left -= data.len() as u64;
                    }
                    put_data(&mut wire.io, out, data, framed, body).await?;
                    if over {
                        tracing::debug!(peer = %self.info.peer, "response body longer than its Content-Length; cut");
                        write_out(&mut wire.io, out).await?;
                        wire.io.flush().await?;
                        return Ok(false);
                    }
                }
                None => {
                    if framed == Framed::Chunked {
                        out.extend_from_slice(framing::LAST_CHUNK);
                    }
                    write_out(&mut wire.io, out).await?;
                    wire.io.flush().await?;
                    // A body shorter than announced: only a close tells the client.
                    return Ok(keep && owed.is_none_or(|left| left == 0));
                }
                Some(Err(e)) => {
                    // The client sees a body cut short (no last chunk, or
                    // fewer bytes than announced) and the connection closes.
                    tracing::debug!(peer = %self.info.peer, error = %e, "response body failed mid-stream");
                    write_out(&mut wire.io, out).await?;
                    return Ok(false);
                }
            }
        }
    }
}

/// Adds a body frame to the write buffer, or, past [`COALESCE`], writes
/// the buffer and the frame where it lies (while `body` takes in).
async fn put_data(
    io: &mut Box<dyn ClientIo>,
    out: &mut Vec<u8>,
    data: Bytes,
    framed: Framed,
    body: &mut AnswerBody,
) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let chunked = framed == Framed::Chunked;
    if chunked {
        framing::chunk_head(out, data.len());
    }
    if out.len() + data.len() <= COALESCE {
        out.extend_from_slice(&data);
    } else {
        write_taking_in(io, out, body, false).await?;
        out.clear();
        write_taking_in(io, &data, body, false).await?;
    }
    if chunked {
        out.extend_from_slice(framing::CHUNK_END);
    }
    Ok(())
}

/// Writes `buf` whole (then, with `flush`, flushes it: TLS may hold records
/// back until asked) while the answer's `body` may still be arriving:
/// whenever the client takes no more, `body` takes in what arrives
/// meanwhile, so an HTTP/2 upstream's answer leaves nothing unread on the
/// connection its other streams share while this client takes its time.
/// Polled here rather than by wrapping `write_all`: a wrapped future is
/// moved into the wrapper, a copy on every write.
async fn write_taking_in(io: &mut Box<dyn ClientIo>, buf: &[u8], body: &mut AnswerBody, flush: bool) -> io::Result<()> {
    let mut left = buf;
    std::future::poll_fn(|cx| {
        let polled = loop {
            if left.is_empty() {
                break if flush { Pin::new(&mut **io).poll_flush(cx) } else { Poll::Ready(Ok(())) };
            }
            match Pin::new(&mut **io).poll_write(cx, left) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => left = left.get(n..).unwrap_or_default(),
                other => break other.map_ok(|_| ()),
            }
        };
        if polled.is_pending() {
            Pin::new(&mut *body).take_in(cx);
        }
        polled
    })
    .await
}

/// Writes and empties the buffer.
async fn write_out(io: &mut Box<dyn ClientIo>, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// The body's next frame if it is ready now; `None`: it is not.
async fn now_or_never<B: Body + Unpin>(body: &mut B) -> Option<Option<Result<Frame<B::Data>, B::Error>>> {
    std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Some(frame)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Closes a connection politely: writes shut, then what the client still
/// sends is read and dropped (for at most [`LINGER`]), so closing with
/// unread bytes does not reset the connection before the client has read
/// its answer.
async fn linger(mut wire: Wire) {
    let _ = tokio::time::timeout(LINGER, async {
        wire.io.shutdown().await?;
        // On the heap: an array here would live in this future, and so in
        // every connection's task (the exchange awaits this at its end),
        // making each 4 KiB larger for the few that linger.
        let mut sink = vec![0u8; 4096];
        while wire.io.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
}

/// The socket while a request's body is read from it, shared between the
/// body and the connection (which takes it back when the request is answered).
#[derive(Debug)]
struct Reader {
    wire: Wire,
    decoder: Decoder,
    /// How much of `100 Continue` is written (all of it when not asked for).
    continued: usize,
    /// Whether `100 Continue` bytes were written and not flushed yet (TLS
    /// holds records until asked).
    unflushed: bool,
    /// Whether reading the body failed: what follows in the buffer is not
    /// a message boundary the connection can go on from.
    failed: bool,
}

/// A request body read from the client's connection as the upstream leg asks for it.
#[derive(Debug)]
struct H1Body {
    slot: Arc<Mutex<Option<Reader>>>,
    /// Bytes still to come, when the framing says.
    remaining: Option<u64>,
    done: bool,
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            match slot.as_mut() {
                Some(reader) => reader.poll_data(cx),
                None => Poll::Ready(Err(RequestBodyError::Detached)),
            }
        };
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(data))) => {
                if let Some(left) = self.remaining.as_mut() {
                    *left = left.saturating_sub(data.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Ok(None)) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Err(e)) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.remaining == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Reader {
    /// The socket back from the body (which may outlive the request: it
    /// then reads nothing more), whether the body was read to its end (its
    /// rest unread, the connection cannot carry another request), and what
    /// of a `100 Continue` a full socket cut short: it is finished first,
    /// or the final answer would run into it. `None`: already taken.
    fn give_back(slot: &Mutex<Option<Reader>>) -> Option<(Wire, bool, &'static [u8])> {
        let mut reader = slot.lock().unwrap_or_else(PoisonError::into_inner).take()?;
        let body_done = reader.skip_buffered_rest();
        let interim = CONTINUE.get(reader.continued..).filter(|_| reader.continued > 0).unwrap_or(&[]);
        Some((reader.wire, body_done, interim))
    }

    /// Whether the body has been read to its end, after skipping what of
    /// its rest is in the buffer already: a small body the proxy answered
    /// without reading (a `404` to a `POST`) then leaves the connection
    /// reusable. What has not arrived is not waited for.
    fn skip_buffered_rest(&mut self) -> bool {
        if self.failed || !self.continued_or_not_asked() {
            // The client waits for `100 Continue` before it sends the body;
            // it may still send it, so the connection cannot go on.
            return false;
        }
        loop {
            match self.decoder.decode(&mut self.wire.buf) {
                Ok(Decoded::Data(_)) => {}
                Ok(Decoded::Done) => return true,
                Ok(Decoded::NeedMore) | Err(_) => return false,
            }
        }
    }

    fn continued_or_not_asked(&self) -> bool {
        self.continued >= CONTINUE.len()
    }

    /// The body's next bytes (`None` at its end), reading the socket as
    /// needed; a failure is remembered (see `skip_buffered_rest`).
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, RequestBodyError>> {
        let polled = self.poll_continue(cx).map_err(RequestBodyError::Io);
        let polled = match polled {
            Poll::Ready(Ok(())) => self.poll_body(cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        };
        if let Poll::Ready(Err(_)) = polled {
            self.failed = true;
        }
        polled
    }

    /// Writes and flushes `100 Continue` when the client asked for it and it has not gone yet.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(rest) = CONTINUE.get(self.continued..).filter(|r| !r.is_empty()) {
            match Pin::new(&mut self.wire.io).poll_write(cx, rest) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.continued += n;
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.unflushed {
            std::task::ready!(Pin::new(&mut self.wire.io).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }

    /// The body's next bytes from the buffer, or from the socket.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, RequestBodyError>> {
        let wire = &mut self.wire;
        wire::poll_body(cx, &mut self.decoder, &mut wire.io, &mut wire.buf, READ_CHUNK).map_err(|e| match e {
            BodyError::Io(e) => RequestBodyError::Io(e),
            BodyError::Framing(e) => RequestBodyError::Framing(e),
            // Not reached: an HTTP/1.1 body has no HTTP/2 stream to fail.
            BodyError::Stream(e) => RequestBodyError::H2(e),
        })
    }
}
