//! A body's frames onto an HTTP/2 stream under the peer's flow control:
//! a request body to an `h2c://` or `h2://` endpoint ([`super::h2`]), and
//! an answer to an HTTP/2 client (`server::h2`).
//!
//! ```text
//!  request body ─► send_body ─► (whole: one DATA frame)
//!                            └► (arriving: a task) ─► pipe ─► SendStream
//!                                  held by the answer's Piping
//! ```

use std::time::Duration;

use bytes::Bytes;
use h2::SendStream;
use hyper::body::Body;
use tokio::sync::oneshot;

use super::body::UpstreamBody;
use super::recv::{Arrived, TakeIn};

/// Sends a request's body on its stream (nothing, when its head ended
/// the stream): one read whole at once (the
/// connection buffers it, at most `server.request_buffer_bytes`, until the
/// server's window takes it); one still arriving from its client from a
/// task of its own, each chunk as the server's window allows, its trailers
/// after, while the request's task reads the answer; its [`Piping`] is
/// held by the answer. A client body that fails resets the stream; a
/// stream the server resets stops the piping. Once the answer has ended,
/// the rest of the body has `linger` to go, its stream still counted.
pub(super) fn send_body<T: Send + 'static>(
    body: UpstreamBody,
    mut tx: SendStream<Bytes>,
    linger: Duration,
) -> Piping<T> {
    match body {
        // Its head said it was all there was.
        body if body.is_end_stream() => Piping(None),
        UpstreamBody::Whole(Some(data)) => {
            // A failure here is the stream's, and the answer reports it.
            let _ = tx.send_data(data, true);
            Piping(None)
        }
        body => {
            let (stop, stopped) = oneshot::channel();
            let (hand, handed) = oneshot::channel::<T>();
            tokio::spawn(async move {
                let piped = {
                    let mut piping = std::pin::pin!(pipe(body, &mut tx, Some(stopped), None));
                    tokio::select! {
                        piped = &mut piping => piped,
                        Ok(_counted) = handed => tokio::time::timeout(linger, piping).await.unwrap_or(Err(Stopped)),
                    }
                };
                if piped.is_err() {
                    tx.send_reset(h2::Reason::CANCEL);
                }
            });
            Piping(Some((stop, hand)))
        }
    }
}

/// The hold on a request body's piping task ([`send_body`]): dropped
/// before the answer has ended (the client gone, a timeout), the piping
/// stops and resets the stream; let go once the answer has ended, the rest
/// of the body still goes, its stream handed to the task.
#[derive(Debug)]
pub(super) struct Piping<T>(Option<(oneshot::Sender<()>, oneshot::Sender<T>)>);

impl<T> Piping<T> {
    /// The answer has ended: the body's piping goes on by itself, and
    /// counts `stream` on its connection until it ends.
    pub(super) fn let_go(&mut self, stream: T) {
        if let Some((_, hand)) = self.0.take() {
            let _ = hand.send(stream);
        }
    }
}

impl<T> Drop for Piping<T> {
    fn drop(&mut self) {
        if let Some((stop, _)) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// What ended a body's piping early: the body failed, the stream did (its
/// connection gone), the piping was told to stop, or it stalled.
#[derive(Debug)]
pub struct Stopped;

/// How long an answer to an HTTP/2 client may go with nothing moving
/// (`server.idle_timeout`): no window from the client for it, or no byte
/// from its upstream while none of the request's body arrives either.
/// Its connection may be busy with other streams and pings, so the
/// connection's idleness never ends it: without this, a stalled upstream
/// would hold its connection for as long as it liked.
#[derive(Clone, Debug)]
pub struct Stall {
    /// The time nothing may move.
    pub after: Duration,
    /// What arrives of the request's body, when it has one.
    pub arrived: Option<Arrived>,
}

impl Stall {
    /// `next` (the body's next frame), unless nothing arrives of it, or of
    /// the request's body, for `after` (no bound without a `stall`).
    async fn wait<T>(
        stall: Option<&Stall>,
        next: impl std::future::Future<Output = Result<T, Stopped>>,
    ) -> Result<T, Stopped> {
        let mut next = std::pin::pin!(next);
        let Some(stall) = stall else { return next.await };
        // The clock is read only when the frame is not there already.
        if let Some(ready) = futures_util::FutureExt::now_or_never(next.as_mut()) {
            return ready;
        }
        // Looked at eight times a period, as a connection's idleness is:
        // reset at most an eighth of it after `after` with nothing moving.
        let arrived = || stall.arrived.as_ref().map_or(0, Arrived::bytes);
        let (mut seen, mut quiet) = (arrived(), 0);
        while quiet < 8 {
            if let Ok(ready) = tokio::time::timeout(stall.after / 8, next.as_mut()).await {
                return ready;
            }
            let now = arrived();
            quiet = if now == seen { quiet + 1 } else { 0 };
            seen = now;
        }
        Err(Stopped)
    }
}

/// What the piping found first.
enum Next<F> {
    Frame(F),
    /// The server reset the stream: nothing more goes.
    Reset,
}

/// `body`'s frames onto `tx` under the peer's flow control, until the
/// end (a last chunk carries it when the body says it is the last), its
/// trailers, the peer's reset, word from `stop` (a request body's
/// `Piping`) to stop, or a [`Stall`] (a client that takes nothing of its
/// answer, or an upstream that sends nothing of it, holds no upstream
/// connection past it): `send_body`'s task, and the client leg's answers
/// (`server::h2`).
pub async fn pipe<B>(
    body: B,
    tx: &mut SendStream<Bytes>,
    stop: Option<oneshot::Receiver<()>>,
    stall: Option<Stall>,
) -> Result<(), Stopped>
where
    B: Body<Data = Bytes> + TakeIn,
{
    use std::future::{poll_fn, Future};
    use std::pin::Pin;
    use std::task::Poll;
    let mut body = std::pin::pin!(body);
    // Watched until the hold is let go (its sender dropped without a word).
    let mut stop = stop;
    let mut stopped = move |cx: &mut std::task::Context<'_>| match stop.as_mut().map(|s| Pin::new(s).poll(cx)) {
        Some(Poll::Ready(Ok(()))) => true,
        Some(Poll::Ready(Err(_))) => {
            stop = None;
            false
        }
        Some(Poll::Pending) | None => false,
    };
    loop {
        let next = poll_fn(|cx| {
            if stopped(cx) {
                return Poll::Ready(Err(Stopped));
            }
            if tx.poll_reset(cx).is_ready() {
                return Poll::Ready(Ok(Next::Reset));
            }
            body.as_mut().poll_frame(cx).map(|f| Ok(Next::Frame(f)))
        });
        let next = Stall::wait(stall.as_ref(), next).await?;
        let frame = match next {
            Next::Reset => return Ok(()),
            Next::Frame(None) => return tx.send_data(Bytes::new(), true).map_err(|_| Stopped),
            Next::Frame(Some(Ok(frame))) => frame,
            Next::Frame(Some(Err(_))) => return Err(Stopped),
        };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => return tx.send_trailers(trailers).map_err(|_| Stopped),
                Err(_) => continue,
            },
        };
        while !data.is_empty() {
            tx.reserve_capacity(data.len());
            let waiting = poll_fn(|cx| {
                if stopped(cx) {
                    return Poll::Ready(None);
                }
                // What arrives meanwhile leaves the body's connection.
                body.as_mut().take_in(cx);
                tx.poll_capacity(cx)
            });
            // The stall's clock is read only when the window is shut.
            let mut waiting = std::pin::pin!(waiting);
            let room = match (&stall, futures_util::FutureExt::now_or_never(waiting.as_mut())) {
                (_, Some(room)) => room,
                (Some(stall), None) => tokio::time::timeout(stall.after, waiting).await.map_err(|_| Stopped)?,
                (None, None) => waiting.await,
            };
            match room {
                Some(Ok(room)) if room > 0 => {
                    let chunk = data.split_to(room.min(data.len()));
                    let last = data.is_empty() && body.is_end_stream();
                    tx.send_data(chunk, last).map_err(|_| Stopped)?;
                    if last {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Err(Stopped),
            }
        }
    }
}
