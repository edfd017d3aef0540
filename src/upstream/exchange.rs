//! One HTTP/1.1 exchange on a connection the request's task owns: the
//! request head written once, the body streamed under its framing, the
//! response head parsed with `httparse`, the response body handed to the
//! client leg as it arrives (RFC 9112):
//!
//! ```text
//! write   head ─ body (Content-Length: as is │ unknown length: chunked)
//!           │ (bytes arriving meanwhile: a 100 is skipped, a final head
//!           │  ends the upload early and the connection is not kept)
//! read    1xx… ─ final head ─ body (length │ chunked │ until close │ none)
//!                     │ 101: the connection leaves for the tunnel
//! end     body read to its end and keep-alive ─▶ back to the pool
//! ```
//!
//! There is no connection task and no channel: the request's task drives
//! the socket, and the response body ([`ResponseBody`]) reads from it while
//! the client leg polls it. Body bytes are never copied on the way down
//! (they are split off the read buffer); on the way up a frame is copied
//! once into the write buffer with its chunk framing, so a small request
//! leaves in one system call.

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{Method, Response};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use super::h2::Answer;
use super::outgoing::Outgoing;
use super::pool::{Conn, ConnState};
use super::recv::TakeIn;
use crate::http1::response::MAX_HEAD_BYTES;
use crate::http1::{self, framing, Decoder, Fields, Framing, HeadScan, ResponseHead};
pub use crate::wire::BodyError;
use crate::wire::{fill, poll_body};

/// Most bytes read from an upstream socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// Why an exchange failed.
#[derive(Debug)]
pub enum ExchangeError {
    /// A kept connection turned out closed before it answered a request
    /// whose repeat does no harm: the server closed it while it was idle.
    /// The request goes out again on another connection, and the endpoint
    /// is not blamed, if its body can go again: untouched (`taken` false),
    /// or held whole by the caller.
    Stale {
        /// What the socket said.
        error: String,
        /// Whether frames of the body were taken (and are gone with the connection).
        taken: bool,
    },
    /// The connection failed (reset, closed) after the request was, or may
    /// have been, sent.
    Io(String),
    /// The upstream's response is not valid HTTP/1.1.
    BadResponse(http1::Error),
    /// The client's body failed (malformed framing, cut short).
    ClientBody(String),
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExchangeError::Stale { error, .. } => write!(f, "kept connection closed before use: {error}"),
            ExchangeError::Io(e) => write!(f, "upstream connection failed: {e}"),
            ExchangeError::BadResponse(e) => write!(f, "invalid upstream response: {e}"),
            ExchangeError::ClientBody(e) => write!(f, "client body failed: {e}"),
        }
    }
}

/// How the request body goes upstream, chosen from its headers and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Upload {
    None,
    Length,
    Chunked,
}

/// Sends the request (`out` and `body`) on `conn` and reads the response
/// head. The body is borrowed: on [`ExchangeError::Stale`] it can go out
/// again as it is unless it says it was taken. The response's body reads the
/// rest from the connection, and gives the connection back to the pool
/// when it ends, if the connection can carry another request.
pub async fn exchange<B>(
    mut conn: Conn,
    out: &Outgoing<'_>,
    body: &mut B,
) -> Result<Response<ResponseBody>, ExchangeError>
where
    B: Body<Data = Bytes> + TakeIn + Unpin,
    B::Error: fmt::Display,
{
    let upload = write_head(&mut conn.write, out, body);
    let mut send = Send {
        upload,
        written: 0,
        body_done: upload == Upload::None,
        touched: false,
        early: None,
        scan: HeadScan::default(),
    };
    let sent = std::future::poll_fn(|cx| send.poll(cx, &mut conn, body, out.method)).await;
    let stale = |send: &Send, conn: &Conn, e: String| {
        // A kept connection that failed before any answer: the server
        // closed it while idle. It may still have seen the request, so only
        // a method whose repeat does no harm (RFC 9110 §9.2.2) goes out again.
        if conn.reused && conn.read.is_empty() && super::retry::is_idempotent(out.method) {
            ExchangeError::Stale { error: e, taken: send.touched }
        } else {
            ExchangeError::Io(e)
        }
    };
    // The body has gone (or will not go): the connection no longer waits on a client.
    conn.upload_done();
    let early = match sent {
        Ok(()) => send.early.take(),
        Err(SendError::Io(e)) => return Err(stale(&send, &conn, e)),
        Err(SendError::Client(e)) => return Err(ExchangeError::ClientBody(e)),
        Err(SendError::Bad(e)) => return Err(ExchangeError::BadResponse(e)),
    };
    // An answer that came before the whole body went: the rest of the body
    // is never sent, so the connection cannot carry another request.
    let finished_upload = early.is_none();
    let head = match early {
        Some(head) => head,
        None => {
            let c: &mut ConnState = &mut conn;
            match std::future::poll_fn(|cx| poll_head(cx, &mut c.io, &mut c.read, out.method, &mut send.scan)).await {
                Ok(head) => head,
                Err(HeadError::Io(e)) => return Err(stale(&send, &conn, e)),
                Err(HeadError::Bad(e)) => return Err(ExchangeError::BadResponse(e)),
            }
        }
    };
    Ok(response(head, conn, finished_upload))
}

/// Writes the request head into `w` and chooses the body's framing:
/// `Transfer-Encoding` (set by the caller for a body of unknown length)
/// means chunked; `Content-Length` is kept; a body whose size is known gets
/// one; a finished body has none; any other gets chunked, except on
/// methods that never carry one without saying so (hyper's rule).
fn write_head<B: Body>(w: &mut Vec<u8>, out: &Outgoing<'_>, body: &B) -> Upload {
    w.clear();
    let framing = http1::write::request_head(w, out.method, out.target.as_str(), out.host, out.headers, out.added);
    let upload = if framing.chunked {
        Upload::Chunked
    } else if framing.length {
        Upload::Length
    } else if body.is_end_stream() {
        Upload::None
    } else if let Some(n) = body.size_hint().exact() {
        http1::write::field(w, "content-length", itoa::Buffer::new().format(n).as_bytes());
        Upload::Length
    } else if matches!(*out.method, Method::GET | Method::HEAD | Method::CONNECT) {
        Upload::None
    } else {
        http1::write::field(w, "transfer-encoding", b"chunked");
        Upload::Chunked
    };
    w.extend_from_slice(b"\r\n");
    upload
}

/// The upload's state, polled by [`exchange`].
struct Send {
    upload: Upload,
    /// Bytes of the connection's write buffer already written.
    written: usize,
    /// Whether the body's end has been put in the write buffer.
    body_done: bool,
    /// Whether a frame was taken from the body.
    touched: bool,
    /// A final response head that arrived before the upload ended.
    early: Option<ResponseHead>,
    /// Where the search for the end of a response head stands.
    scan: HeadScan,
}

enum SendError {
    Io(String),
    Client(String),
    Bad(http1::Error),
}

impl Send {
    /// Writes the buffer, refills it from the body, and meanwhile watches
    /// the socket for an answer; ready when everything is sent and flushed,
    /// or when a final answer came first.
    fn poll<B>(
        &mut self,
        cx: &mut Context<'_>,
        conn: &mut ConnState,
        body: &mut B,
        method: &Method,
    ) -> Poll<Result<(), SendError>>
    where
        B: Body<Data = Bytes> + TakeIn + Unpin,
        B::Error: fmt::Display,
    {
        loop {
            while self.written < conn.write.len() {
                match Pin::new(&mut conn.io).poll_write(cx, &conn.write[self.written..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(SendError::Io("connection closed while writing".into())))
                    }
                    Poll::Ready(Ok(n)) => self.written += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Io(e.to_string()))),
                    Poll::Pending => {
                        // A body read off a shared (HTTP/2) connection
                        // must not hold that connection while this one is full.
                        Pin::new(&mut *body).take_in(cx);
                        return self.watch(cx, conn, method);
                    }
                }
            }
            conn.write.clear();
            self.written = 0;
            if self.body_done {
                return match Pin::new(&mut conn.io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(SendError::Io(e.to_string()))),
                    Poll::Pending => self.watch(cx, conn, method),
                };
            }
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    self.touched = true;
                    // Trailers are not forwarded (the upstream leg sends none).
                    if let Ok(data) = frame.into_data() {
                        self.frame(&mut conn.write, &data);
                    }
                }
                Poll::Ready(None) => {
                    if self.upload == Upload::Chunked {
                        conn.write.extend_from_slice(framing::LAST_CHUNK);
                    }
                    self.body_done = true;
                }
                Poll::Ready(Some(Err(e))) => {
                    self.touched = true;
                    return Poll::Ready(Err(SendError::Client(e.to_string())));
                }
                Poll::Pending => {
                    // What is written may sit in TLS's buffer: push it out.
                    if let Poll::Ready(Err(e)) = Pin::new(&mut conn.io).poll_flush(cx) {
                        return Poll::Ready(Err(SendError::Io(e.to_string())));
                    }
                    return self.watch(cx, conn, method);
                }
            }
        }
    }

    /// A data frame into the write buffer, in the upload's framing.
    fn frame(&self, w: &mut Vec<u8>, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match self.upload {
            Upload::Chunked => {
                framing::chunk_head(w, data.len());
                w.extend_from_slice(data);
                w.extend_from_slice(framing::CHUNK_END);
            }
            Upload::Length => w.extend_from_slice(data),
            // A body the head announced as none is not sent.
            Upload::None => {}
        }
    }

    /// While the upload waits: reads what the upstream sends meanwhile. A
    /// `100 Continue` is skipped; a final head ends the upload (the server
    /// answered without the rest); a close is an error.
    fn watch(&mut self, cx: &mut Context<'_>, conn: &mut ConnState, method: &Method) -> Poll<Result<(), SendError>> {
        loop {
            match fill(cx, &mut conn.io, &mut conn.read, READ_CHUNK) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(SendError::Io("connection closed by upstream".into()))),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Io(e.to_string()))),
                Poll::Ready(Ok(_)) => {}
            }
            match next_head(&mut conn.read, method, &mut self.scan) {
                Ok(Some(h)) => {
                    self.early = Some(h);
                    return Poll::Ready(Ok(()));
                }
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(SendError::Bad(e))),
            }
        }
    }
}

/// The first final response head in `buf` (a 1xx other than 101 is taken
/// out and skipped), parsed once `scan` sees one may be complete; `None`:
/// read more.
fn next_head(buf: &mut BytesMut, method: &Method, scan: &mut HeadScan) -> Result<Option<ResponseHead>, http1::Error> {
    while scan.ready(buf, MAX_HEAD_BYTES) {
        match http1::parse_response(buf, method)? {
            Some(h) if h.status.is_informational() && h.status != http::StatusCode::SWITCHING_PROTOCOLS => scan.reset(),
            Some(h) => return Ok(Some(h)),
            None => break,
        }
    }
    Ok(None)
}

/// Why no response head was read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The connection failed or closed before any byte of an answer.
    Io(String),
    /// What arrived is not a response head (or stopped in the middle of one).
    Bad(http1::Error),
}

/// Reads from `io` into `buf` until a final response head (1xx other than
/// 101 skipped). The exchange and the one-shot client (`super::client`)
/// both read heads this way.
pub(crate) fn poll_head<S: AsyncRead + Unpin>(
    cx: &mut Context<'_>,
    io: &mut S,
    buf: &mut BytesMut,
    method: &Method,
    scan: &mut HeadScan,
) -> Poll<Result<ResponseHead, HeadError>> {
    loop {
        match next_head(buf, method, scan) {
            Ok(Some(h)) => return Poll::Ready(Ok(h)),
            Ok(None) => {}
            Err(e) => return Poll::Ready(Err(HeadError::Bad(e))),
        }
        match ready!(fill(cx, io, buf, READ_CHUNK)) {
            Ok(0) if buf.is_empty() => {
                return Poll::Ready(Err(HeadError::Io("connection closed before any response".into())))
            }
            Ok(0) => {
                let e = http1::Error::new(http1::Part::ResponseHead, http1::Reason::HeadIncomplete);
                return Poll::Ready(Err(HeadError::Bad(e)));
            }
            Ok(_) => {}
            Err(e) => return Poll::Ready(Err(HeadError::Io(format!("read error: {e}")))),
        }
    }
}

/// The response for the client leg: the head as parsed, the body reading
/// the rest from `conn`. The upstream's fields travel with the body, as
/// bytes ([`ResponseBody::fields`]); the header map starts empty, for the
/// fields the proxy adds.
fn response(head: ResponseHead, conn: Conn, finished_upload: bool) -> Response<ResponseBody> {
    let upgrade = head.status == http::StatusCode::SWITCHING_PROTOCOLS;
    let decoder = Decoder::new(head.framing);
    let reusable = head.keep_alive && finished_upload && !upgrade;
    let mut body = ResponseBody { conn: Some(conn), decoder, reusable, upgrade, fields: head.fields, h2: None };
    if !upgrade && body.decoder.is_done() {
        body.finish();
    }
    let mut resp = Response::new(body);
    *resp.status_mut() = head.status;
    *resp.version_mut() = head.version;
    resp
}

/// Moves the upstream's fields, kept as bytes in the body, into the
/// response's header map (before the fields already there, which replace
/// same-named ones but `Via`), for whoever reads or sends the map: an
/// HTTP/2 client, a fan-out leg, a tunnel's `101`.
pub fn fields_into_map(resp: &mut Response<ResponseBody>) {
    std::mem::take(&mut resp.body_mut().fields).move_into(resp.headers_mut());
}

/// An upstream response body, read from the connection as the client leg
/// asks for it. At its end the connection goes back to the pool (when
/// keep-alive allows and nothing else was received); dropped before its
/// end, the connection is closed.
#[derive(Debug)]
pub struct ResponseBody {
    conn: Option<Conn>,
    decoder: Decoder,
    reusable: bool,
    /// A `101`: the connection is kept for the tunnel ([`ResponseBody::take_upgrade`]).
    upgrade: bool,
    /// The upstream's header fields, as sent; see [`ResponseBody::fields`].
    fields: Fields,
    /// An HTTP/2 endpoint's answer ([`super::h2`]), its stream counted
    /// while it is read; its fields are in the response's map.
    /// Boxed: an HTTP/1 answer's body, moved about with it, stays small.
    h2: Option<Box<Answer>>,
}

impl ResponseBody {
    /// An HTTP/2 endpoint's answer, read from its stream.
    pub fn h2(resp: Response<Answer>) -> Response<ResponseBody> {
        resp.map(|answer| ResponseBody {
            conn: None,
            decoder: Decoder::new(Framing::Empty),
            reusable: false,
            upgrade: false,
            fields: Fields::default(),
            h2: Some(Box::new(answer)),
        })
    }
}

impl TakeIn for ResponseBody {
    fn take_in(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        if let Some(answer) = self.get_mut().h2.as_deref_mut() {
            Pin::new(answer).take_in(cx);
        }
    }
}

impl ResponseBody {
    /// The upstream's header fields, as they arrived (less the ones that
    /// described its connection), to be written before the response's own
    /// header map, which replaces same-named ones but `Via`. Empty once
    /// moved into the map ([`fields_into_map`]).
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// The upstream's header fields, to drop some.
    pub fn fields_mut(&mut self) -> &mut Fields {
        &mut self.fields
    }

    /// The connection of a `101 Switching Protocols` response, for the
    /// tunnel (its read buffer may already hold the upstream's first bytes),
    /// counted among the endpoint's tunnels from now on.
    pub fn take_upgrade(&mut self) -> Option<Conn> {
        if self.upgrade {
            self.upgrade = false;
            self.conn.take().map(Conn::into_tunnel)
        } else {
            None
        }
    }

    /// The body is complete: the connection goes home or closes.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reusable && conn.read.is_empty() {
                conn.release();
            }
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(answer) = this.h2.as_deref_mut() {
            return Pin::new(answer).poll_frame(cx).map_err(BodyError::Stream);
        }
        if this.upgrade {
            return Poll::Ready(None);
        }
        let Some(conn) = this.conn.as_deref_mut() else { return Poll::Ready(None) };
        match ready!(poll_body(cx, &mut this.decoder, &mut conn.io, &mut conn.read, READ_CHUNK)) {
            Ok(Some(data)) => {
                if this.decoder.is_done() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            // At the body's end, or at the close that ends a body read
            // until close (whose connection is never reusable).
            Ok(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Err(e) => {
                this.conn = None;
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if let Some(answer) = self.h2.as_deref() {
            return answer.is_end_stream();
        }
        self.upgrade || self.conn.is_none() || self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        if let Some(answer) = self.h2.as_deref() {
            return answer.size_hint();
        }
        if self.upgrade {
            return SizeHint::with_exact(0);
        }
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Tunnels an upgraded connection: the upstream's bytes already read go to
/// the client first, then both directions are copied until either closes.
pub async fn tunnel<C>(mut client: C, mut conn: Conn)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    if !conn.read.is_empty() {
        let early = conn.read.split();
        if let Err(e) = client.write_all(&early).await {
            tracing::debug!(error = %e, "upgraded tunnel closed with an error");
            return;
        }
    }
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut conn.io).await {
        tracing::debug!(error = %e, "upgraded tunnel closed with an error");
    }
}

#[cfg(test)]
mod tests;
