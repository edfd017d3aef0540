//! An HTTP/2 stream's body and trailers as frames, on either leg: an
//! upstream's answer (`upstream::h2`), a client's request (`server::h2`).
//!
//! ```text
//! reader keeps up:  h2's frames ─read───────────────────▶ other leg, window back
//! reader waits:     h2's frames ─take in─▶ held ─read─▶ other leg, window back
//! ```

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

use crate::http1;

/// A stream's body and trailers as frames, on either leg (an upstream's
/// answer, a client's request). Its connection carries other streams, and
/// `h2` ends a connection that holds too many small frames unread (what
/// they cost it beyond their bytes), so while its reader waits on its own
/// peer, [`TakeIn`] takes what arrives off the connection, to be read
/// first. The peer's window is given back only as the bytes are read, so
/// what a stream holds stays within its window, and a reader that stops
/// reading stops only its own stream. A reader that keeps up reads each
/// frame as it came, and nothing is held.
#[derive(Debug)]
pub struct RecvBody {
    recv: h2::RecvStream,
    /// Bytes still to come, when the head said (`content-length`); else
    /// [`UNSAID`]. Not an `Option`: the body, moved with its request, stays
    /// as small as it can (no body is 2^64 - 1 bytes long).
    remaining: u64,
    /// Taken in while the reader waited, not yet read (boxed: only a
    /// stream whose reader falls behind has one, and the body, moved with
    /// its request, stays small).
    held: Option<Box<Held>>,
    /// The data is taken off; trailers (or the end) come next.
    data_done: bool,
    done: bool,
    /// A client's request body: what has arrived, for its stream's answer.
    arrived: Option<Arrived>,
}

/// [`RecvBody::remaining`] when the head gave no length.
const UNSAID: u64 = u64::MAX;

/// How many bytes of a client's request body have arrived on its stream,
/// shared by its [`RecvBody`] and the stream's answer: an answer whose
/// upstream stays quiet is waited on while the client's body still moves
/// (`upstream::pipe::Stall`), as an HTTP/1.1 connection is while any byte
/// moves either way.
#[derive(Clone, Debug, Default)]
pub struct Arrived(Arc<AtomicU64>);

impl Arrived {
    /// The bytes that have arrived so far.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl RecvBody {
    /// The body of the stream `recv`, whose head is `headers`.
    pub fn new(recv: h2::RecvStream, headers: &http::HeaderMap) -> RecvBody {
        let said = headers.get(http::header::CONTENT_LENGTH).and_then(|v| http1::content_length(v.as_bytes()));
        // A message that came whole with its head (no body) has nothing to come.
        let remaining = said.or(recv.is_end_stream().then_some(0)).unwrap_or(UNSAID);
        RecvBody { recv, remaining, held: None, data_done: false, done: false, arrived: None }
    }

    /// What arrives of this body from now on, counted for its stream's answer.
    pub fn arrived(&mut self) -> Arrived {
        self.arrived.get_or_insert_with(Arrived::default).clone()
    }

    /// `data` came off the stream.
    fn came(&self, data: &Bytes) {
        if let Some(arrived) = &self.arrived {
            arrived.add(data.len());
        }
    }

    /// Takes every data frame that has arrived off the connection.
    fn take_frames(&mut self, cx: &mut Context<'_>) {
        while !self.data_done {
            let Poll::Ready(got) = self.recv.poll_data(cx) else { return };
            let Some(got) = got else {
                self.data_done = true;
                return;
            };
            if let Ok(data) = &got {
                self.came(data);
            }
            let held = self.held.get_or_insert_with(Box::default);
            match got {
                Ok(data) => held.push(data),
                Err(e) => {
                    held.failed = Some(e);
                    self.data_done = true;
                }
            }
        }
    }

    /// `data` goes on to the reader: the peer may send as much again.
    fn hand_out(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let _ = self.recv.flow_control().release_capacity(data.len());
        if self.remaining != UNSAID {
            self.remaining = self.remaining.saturating_sub(data.len() as u64);
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(held) = this.held.as_deref_mut() {
            if let Some(data) = held.take() {
                return this.hand_out(data);
            }
            if let Some(e) = held.failed.take() {
                this.done = true;
                return Poll::Ready(Some(Err(e)));
            }
        }
        if !this.data_done {
            match std::task::ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    this.came(&data);
                    return this.hand_out(data);
                }
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.data_done = true,
            }
        }
        let trailers = std::task::ready!(this.recv.poll_trailers(cx));
        this.done = true;
        Poll::Ready(match trailers {
            Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.held.as_deref().is_none_or(Held::is_empty) && self.recv.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            UNSAID => SizeHint::default(),
            n => SizeHint::with_exact(n),
        }
    }
}

impl Drop for RecvBody {
    /// What was held and never read is given back to the peer's window:
    /// `h2` gives back only what it still buffers, and the stream may go
    /// on (an answer still being sent once its request's body is dropped).
    fn drop(&mut self) {
        let held = self.held.as_deref().map_or(0, Held::len);
        if held > 0 {
            let _ = self.recv.flow_control().release_capacity(held);
        }
    }
}

/// Frames shorter than this are joined when held: each frame held costs
/// memory beyond its bytes, and `h2` counts it against the connection under
/// 256 bytes. Longer ones are held as they came (no copy).
const JOIN_BELOW: usize = 1024;

/// Data taken off a connection and not yet read, in order: frames as they
/// came, runs of short ones joined; then the error that ended the taking.
#[derive(Debug, Default)]
struct Held {
    /// Read before `joining`.
    pieces: VecDeque<Bytes>,
    /// Short frames after the last piece, joined.
    joining: BytesMut,
    failed: Option<h2::Error>,
}

impl Held {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if data.len() < JOIN_BELOW {
            self.joining.extend_from_slice(&data);
        } else {
            if !self.joining.is_empty() {
                self.pieces.push_back(self.joining.split().freeze());
            }
            self.pieces.push_back(data);
        }
    }

    /// The next data to read.
    fn take(&mut self) -> Option<Bytes> {
        self.pieces.pop_front().or_else(|| (!self.joining.is_empty()).then(|| self.joining.split().freeze()))
    }

    fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.joining.is_empty() && self.failed.is_none()
    }

    /// The bytes held.
    fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum::<usize>() + self.joining.len()
    }
}

/// A body whose data may arrive on a connection other streams share
/// ([`RecvBody`]): its reader, while it waits to pass on what it has (on
/// its own peer's window or socket), lets it take in what arrives
/// meanwhile. The other bodies have nothing to take in.
pub trait TakeIn {
    /// Takes what has arrived off its connection, to be read later; `cx`
    /// is woken when more arrives.
    fn take_in(self: Pin<&mut Self>, cx: &mut Context<'_>);
}

impl TakeIn for RecvBody {
    fn take_in(self: Pin<&mut Self>, cx: &mut Context<'_>) {
        self.get_mut().take_frames(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(held: &mut Held) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| held.take()).map(|b| b.to_vec()).collect()
    }

    #[test]
    fn held_frames_come_back_in_order_short_runs_joined() {
        let long = |b: u8| Bytes::from(vec![b; JOIN_BELOW]);
        let mut held = Held::default();
        assert!(held.is_empty());
        for data in
            [Bytes::from_static(b"a"), Bytes::from_static(b"b"), long(b'L'), Bytes::new(), Bytes::from_static(b"c")]
        {
            held.push(data);
        }
        assert_eq!(held.len(), 3 + JOIN_BELOW);
        assert_eq!(taken(&mut held), vec![b"ab".to_vec(), vec![b'L'; JOIN_BELOW], b"c".to_vec()]);
        assert!(held.is_empty());
    }

    #[test]
    fn a_long_frame_held_is_the_frame_itself() {
        let frame = Bytes::from(vec![7u8; 3 * JOIN_BELOW]);
        let mut held = Held::default();
        held.push(frame.clone());
        held.push(Bytes::from_static(b"t"));
        held.push(Bytes::from_static(b"u"));
        let back = held.take();
        assert_eq!(back.as_ref().map(|b| b.as_ptr()), Some(frame.as_ptr()), "copied");
        assert_eq!(taken(&mut held), vec![b"tu".to_vec()]);
        assert!(held.is_empty() && held.take().is_none());
    }
}
