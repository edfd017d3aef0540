//! The client leg's HTTP/2 server, on the `h2` crate: one connection, each
//! of its streams handed to the [`Handler`] on a task of its own:
//!
//! ```text
//! accept  stream (h2: frames, HPACK, flow control, SETTINGS) ─▶ task
//! handle  request ─▶ Handler::handle ─▶ answer (the client's RST_STREAM drops it)
//! send    head (no connection fields; Date; Content-Length of a body of
//!         known size) ─▶ body under the client's window (reset when it
//!         stays shut, or nothing moves either way, for idle_timeout) ─▶ trailers
//! close   shutdown ─▶ GOAWAY; the streams in flight finish, then the connection
//! ```
//!
//! Why `h2` itself and not hyper's server on it: hyper wraps each stream's
//! handling in a state machine of its own and pipes every answer's body
//! through a second one; here the stream's task goes from the handler's
//! answer straight to its frames, as the upstream leg (`upstream::h2`) goes
//! from its request to its stream. The settings are hyper's server's, but
//! for the flow-control windows: a stream's is smaller, and the
//! connection's is every stream's, so that one stream's body never holds
//! up the others.

use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::{header, HeaderValue, Method, Request, Response};
use hyper::body::Body;
use tokio::sync::watch;

use super::conn::{ConnInfo, ServerOptions};
use super::upgrade::ClientIo;
use super::{AnswerBody, Handler};
use crate::cork::{self, Corked};
use crate::http1::HOP_BY_HOP;
use crate::upstream::pipe::{pipe, Stall};
use crate::upstream::{RecvBody, RequestBody};

/// A stream's flow-control window: what one request body may hold at the
/// proxy while its upstream does not take it.
const WINDOW: u32 = 256 * 1024;
/// Streams a client may have open at once.
const MAX_STREAMS: u32 = 200;
/// The connection's flow-control window: every stream's window, so that a
/// body its upstream does not take (a region slow to read, an upload waiting
/// for a connection) holds only its own stream's window, never the other
/// streams of the connection (a front door carries many clients on one).
const CONNECTION_WINDOW: u32 = MAX_STREAMS * WINDOW;
/// The largest frame the client may send.
const MAX_FRAME: u32 = 16 * 1024;
/// Answer bytes a stream buffers before its body waits for the client's window.
const SEND_BUFFER: usize = 400 * 1024;
/// Streams this server may reset for a client's errors before it ends the
/// connection (a client provoking resets to load the server).
const MAX_LOCAL_RESETS: usize = 1024;

/// Serves HTTP/2 on `io` (its preface unread) until the client closes it,
/// it fails, or `stop` says to stop: then a GOAWAY, and the streams in
/// flight finish. Each stream's request reaches `handler` with `info`.
/// What a poll of the connection writes is sent as the poll ends ([`cork`]).
pub(super) async fn serve<H: Handler, S: ClientIo + 'static>(
    io: S,
    handler: Arc<H>,
    info: ConnInfo,
    opts: ServerOptions,
    stop: watch::Receiver<bool>,
) -> Result<(), h2::Error> {
    let (io, held) = cork::cork(io);
    cork::uncorked(held, accept(io, handler, info, opts, stop)).await
}

/// The connection on `h2`: each stream accepted onto a task of its own.
async fn accept<H: Handler, S: ClientIo + 'static>(
    io: Corked<S>,
    handler: Arc<H>,
    info: ConnInfo,
    opts: ServerOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<(), h2::Error> {
    let mut conn = h2::server::Builder::new()
        .initial_window_size(WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(u32::try_from(opts.max_header_bytes).unwrap_or(u32::MAX))
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        .max_send_buffer_size(SEND_BUFFER)
        .max_concurrent_streams(MAX_STREAMS)
        .handshake::<_, Bytes>(io)
        .await?;
    let mut closing = false;
    loop {
        tokio::select! {
            accepted = conn.accept() => match accepted {
                Some(Ok((req, respond))) => {
                    // Boxed: spawning moves a pointer, not the stream's state,
                    // which is made in its box (`Box::pin(stream(..))` would
                    // make it on the stack and copy its kilobytes there).
                    let stream = stream(Arc::clone(&handler), req, respond, info, opts.idle_timeout);
                    let task = Box::write(Box::new_uninit(), stream);
                    tokio::spawn(Box::into_pin(task));
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            // Shutdown (or its sender gone): no new streams.
            _ = stop.wait_for(|stopping| *stopping), if !closing => {
                closing = true;
                conn.graceful_shutdown();
            }
        }
    }
}

/// One stream: its request handled, its answer sent. A client that resets
/// the stream before the answer drops the handling (and the upstream's
/// stream or connection with it); an answer that gets no window, or
/// whose stream moves no byte either way, for `stall`
/// (`server.idle_timeout`) is reset.
async fn stream<H: Handler>(
    handler: Arc<H>,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    info: ConnInfo,
    stall: Duration,
) {
    let head_only = req.method() == Method::HEAD;
    let mut arrived = None;
    let answer = {
        let (mut head, recv) = req.into_parts();
        // A CONNECT stream would carry a tunnel, not a body (none is opened
        // over HTTP/2); its request goes on without one, as hyper's did.
        let body = if recv.is_end_stream() || head.method == Method::CONNECT {
            RequestBody::Empty
        } else {
            let mut body = RecvBody::new(recv, &head.headers);
            arrived = Some(body.arrived());
            RequestBody::H2(body)
        };
        // In the task's own state, which is boxed as it is spawned: one
        // allocation and one copy a stream, not a second box for this.
        let mut handling = std::pin::pin!(handler.handle(&mut head, body, info));
        poll_fn(|cx| {
            if let Poll::Ready(answer) = handling.as_mut().poll(cx) {
                return Poll::Ready(Some(answer));
            }
            respond.poll_reset(cx).map(|_| None)
        })
        .await
    };
    let Some(answer) = answer else { return };
    send(respond, answer.into_response(handler.via()), head_only, Stall { after: stall, arrived }).await;
}

/// Sends `response` on the stream: its head, then (unless `head_only`, the
/// answer to a HEAD) its body as the client's window takes it, and its
/// trailers. A head `h2` refuses, a body that fails, or a [`Stall`] (its
/// window shut, or nothing moving either way, for `server.idle_timeout`),
/// resets the stream.
async fn send(mut respond: SendResponse<Bytes>, response: Response<AnswerBody>, head_only: bool, stall: Stall) {
    let (mut parts, body) = response.into_parts();
    let headers = &mut parts.headers;
    // HTTP/2 has no connection fields (RFC 9113, 8.2.2); `h2` refuses a
    // head that carries one. The proxy removes them from every answer, so
    // this finds none unless something slipped through.
    if headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
    }
    if let header::Entry::Vacant(date) = headers.entry(header::DATE) {
        if let Ok(now) = HeaderValue::from_bytes(&super::h1::http_date()) {
            date.insert(now);
        }
    }
    let empty = body.is_end_stream();
    if let (false, Some(n)) = (empty, body.size_hint().exact()) {
        headers.entry(header::CONTENT_LENGTH).or_insert_with(|| HeaderValue::from(n));
    }
    let end = empty || head_only;
    let mut tx = match respond.send_response(Response::from_parts(parts, ()), end) {
        Ok(tx) => tx,
        Err(e) => {
            tracing::debug!(error = %e, "http2 answer head refused; stream reset");
            return respond.send_reset(h2::Reason::INTERNAL_ERROR);
        }
    };
    if !end && pipe(body, &mut tx, None, Some(stall)).await.is_err() {
        tracing::debug!("http2 answer body failed; stream reset");
        tx.send_reset(h2::Reason::INTERNAL_ERROR);
    }
}
