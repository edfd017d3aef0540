//! Reading an HTTP/1.1 connection, for both legs: the client's socket
//! (the proxy's own server) and an upstream's (the exchange). Every read
//! goes through [`fill`]; a body, a request's or a response's, is read
//! under its framing by [`poll_body`].

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncRead;

use crate::http1::{self, Decoded, Decoder};

/// Reads from `io` into `buf`, first making room for `chunk` bytes when
/// less than 1 KiB is left: the number of bytes read (0: closed). Every
/// read of an HTTP/1.1 connection, on both legs, goes through here.
pub fn fill<S: AsyncRead + Unpin>(
    cx: &mut Context<'_>,
    io: &mut S,
    buf: &mut BytesMut,
    chunk: usize,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(chunk);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, buf)
}

/// The next piece of a body framed as `decoder` says: from `buf`, else
/// read from `io` into it (see [`fill`] for `chunk`). `None`: the body's
/// end (what follows it stays in `buf`). A request body on the client leg
/// and a response body on the upstream leg are read alike.
pub fn poll_body<S: AsyncRead + Unpin>(
    cx: &mut Context<'_>,
    decoder: &mut Decoder,
    io: &mut S,
    buf: &mut BytesMut,
    chunk: usize,
) -> Poll<Result<Option<Bytes>, BodyError>> {
    loop {
        match decoder.decode(buf) {
            Ok(Decoded::Data(data)) => return Poll::Ready(Ok(Some(data))),
            Ok(Decoded::Done) => return Poll::Ready(Ok(None)),
            Ok(Decoded::NeedMore) => {}
            Err(e) => return Poll::Ready(Err(BodyError::Framing(e))),
        }
        match ready!(fill(cx, io, buf, chunk)) {
            Ok(0) => return Poll::Ready(decoder.eof().map(|()| None).map_err(BodyError::Framing)),
            Ok(_) => {}
            Err(e) => return Poll::Ready(Err(BodyError::Io(e))),
        }
    }
}

/// Why a body could not be read to its end.
#[derive(Debug)]
pub enum BodyError {
    /// The connection failed.
    Io(io::Error),
    /// The body's framing is broken, or the peer closed before its end.
    Framing(http1::Error),
    /// An HTTP/2 stream failed (reset, or its connection went).
    Stream(h2::Error),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Io(e) => write!(f, "body: the connection failed: {e}"),
            BodyError::Framing(e) => write!(f, "body: {e}"),
            BodyError::Stream(e) => write!(f, "body: the stream failed: {e}"),
        }
    }
}

impl std::error::Error for BodyError {}
