//! An HTTP/2 stream's body and trailers as frames, on either leg: an
//! upstream's answer (`upstream::h2`), a client's request (`server::h2`).
//!
//! ```text
//! connection ─▶ h2's frames ─take in─▶ held (frames as they came, short ones joined)
//!            ─read─▶ the other leg, and only then the peer's window back
//! ```

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

use crate::http1;

/// A stream's body and trailers as frames, on either leg (an upstream's
/// answer, a client's request). Its connection carries other streams, and
/// `h2` ends a connection that holds too many small frames unread (what
/// they cost it beyond their bytes), so what has arrived is taken off the
/// connection whenever the body is polled, and by [`TakeIn`] while its
/// reader waits on its own peer; what arrives together goes on as one
/// piece. The peer's window is given back only as the bytes go on, so
/// what a stream holds stays within its window, and a reader that stops
/// reading stops only its own stream.
#[derive(Debug)]
pub struct RecvBody {
    recv: h2::RecvStream,
    /// Bytes still to come, when the head said (`content-length`).
    remaining: Option<u64>,
    /// Taken off the connection, not yet read; its window not yet given back.
    held: Held,
    /// Taking data off ended with this: read once `held` is.
    failed: Option<h2::Error>,
    /// The data is taken in; trailers (or the end) come next.
    data_done: bool,
    done: bool,
}

impl RecvBody {
    /// The body of the stream `recv`, whose head is `headers`.
    pub fn new(recv: h2::RecvStream, headers: &http::HeaderMap) -> RecvBody {
        let said = headers.get(http::header::CONTENT_LENGTH).and_then(|v| http1::content_length(v.as_bytes()));
        // A message that came whole with its head (no body) has nothing to come.
        let remaining = said.or(recv.is_end_stream().then_some(0));
        RecvBody { recv, remaining, held: Held::Nothing, failed: None, data_done: false, done: false }
    }

    /// Takes every data frame that has arrived off the connection.
    fn take_frames(&mut self, cx: &mut Context<'_>) {
        while !self.data_done {
            match self.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => self.held.push(data),
                Poll::Ready(Some(Err(e))) => {
                    self.failed = Some(e);
                    self.data_done = true;
                }
                Poll::Ready(None) => self.data_done = true,
                Poll::Pending => return,
            }
        }
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
        this.take_frames(cx);
        if let Some(data) = this.held.take() {
            // Going on now: the peer may send as much again.
            let _ = this.recv.flow_control().release_capacity(data.len());
            if let Some(n) = this.remaining.as_mut() {
                *n = n.saturating_sub(data.len() as u64);
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(e) = this.failed.take() {
            this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        if !this.data_done {
            return Poll::Pending;
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
        self.done || (self.held.is_empty() && self.failed.is_none() && self.recv.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Frames shorter than this are joined when several are held: each frame
/// held costs memory beyond its bytes, and `h2` counts it against the
/// connection under 256 bytes. Longer ones are held as they came (no copy).
const JOIN_BELOW: usize = 1024;

/// Data taken off a connection and not yet read, in order: one frame as it
/// came (the usual case, a reader that keeps up), or several, runs of short
/// ones joined.
#[derive(Debug, Default)]
enum Held {
    #[default]
    Nothing,
    One(Bytes),
    Many {
        /// Held before `joining`.
        pieces: VecDeque<Bytes>,
        /// Short frames after the last piece, joined.
        joining: BytesMut,
    },
}

impl Held {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match self {
            Held::Nothing => *self = Held::One(data),
            Held::One(first) => {
                let first = std::mem::take(first);
                let (mut pieces, mut joining) = (VecDeque::new(), BytesMut::new());
                if first.len() < JOIN_BELOW && data.len() < JOIN_BELOW {
                    joining.reserve(first.len() + data.len());
                    joining.extend_from_slice(&first);
                    joining.extend_from_slice(&data);
                } else {
                    pieces.push_back(first);
                    pieces.push_back(data);
                }
                *self = Held::Many { pieces, joining };
            }
            Held::Many { pieces, joining } => {
                if data.len() < JOIN_BELOW {
                    joining.extend_from_slice(&data);
                } else {
                    if !joining.is_empty() {
                        pieces.push_back(joining.split().freeze());
                    }
                    pieces.push_back(data);
                }
            }
        }
    }

    fn take(&mut self) -> Option<Bytes> {
        match self {
            Held::Nothing => None,
            Held::One(_) => match std::mem::take(self) {
                Held::One(data) => Some(data),
                _ => None,
            },
            Held::Many { pieces, joining } => {
                let next = pieces.pop_front().or_else(|| (!joining.is_empty()).then(|| joining.split().freeze()));
                if pieces.is_empty() && joining.is_empty() {
                    *self = Held::Nothing;
                }
                next
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Held::Nothing)
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
        assert!(!held.is_empty());
        assert_eq!(taken(&mut held), vec![b"ab".to_vec(), vec![b'L'; JOIN_BELOW], b"c".to_vec()]);
        assert!(held.is_empty());
    }

    #[test]
    fn one_frame_held_is_the_frame_itself() {
        let frame = Bytes::from(vec![7u8; 3 * JOIN_BELOW]);
        let mut held = Held::default();
        held.push(frame.clone());
        let back = held.take();
        assert_eq!(back.as_ref().map(|b| b.as_ptr()), Some(frame.as_ptr()), "copied");
        assert!(held.is_empty() && held.take().is_none());
    }

    #[test]
    fn a_long_frame_after_a_short_one_keeps_both_as_they_came() {
        let mut held = Held::default();
        held.push(Bytes::from_static(b"s"));
        held.push(Bytes::from(vec![1u8; JOIN_BELOW]));
        held.push(Bytes::from_static(b"t"));
        held.push(Bytes::from_static(b"u"));
        assert_eq!(taken(&mut held), vec![b"s".to_vec(), vec![1u8; JOIN_BELOW], b"tu".to_vec()]);
    }
}
