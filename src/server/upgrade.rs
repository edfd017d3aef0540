//! The client's side of an upgrade (WebSocket): the proxy's HTTP/1.1
//! server hands its socket over once the `101` is written (HTTP/2 has no
//! upgrade). Also the socket type
//! that server works on, and [`Rewound`], a socket whose first bytes were
//! read already (the HTTP/2 preface sniffed, a tunnel's early bytes).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use http::{header, Extensions, HeaderMap};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// Whether a request asks for a protocol upgrade (`Connection: upgrade`
/// and an `Upgrade` field).
pub fn asked(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// A client connection's byte stream (TCP, or TLS over TCP), boxed once
/// per connection so the HTTP/1.1 server and the request body are not
/// generic over it.
pub trait ClientIo: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug> ClientIo for T {}

/// A socket with bytes already read from it in front: they are read first.
#[derive(Debug)]
pub struct Rewound<S> {
    pre: BytesMut,
    io: S,
}

impl<S> Rewound<S> {
    /// `io`, with `pre` read from it already.
    pub fn new(pre: BytesMut, io: S) -> Rewound<S> {
        Rewound { pre, io }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A client socket handed over after a `101`, with what the client sent
/// after its request head.
pub type Upgraded = Rewound<Box<dyn ClientIo>>;

/// What the HTTP/1.1 server puts in an upgrade request's extensions: where
/// the socket arrives once the `101` is written. (Extensions must be
/// `Clone`; only the first taker gets the socket.)
#[derive(Clone, Debug)]
pub struct PendingUpgrade(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

impl PendingUpgrade {
    /// A pending upgrade, and the sender the server hands the socket to.
    pub fn new() -> (PendingUpgrade, oneshot::Sender<Upgraded>) {
        let (tx, rx) = oneshot::channel();
        (PendingUpgrade(Arc::new(Mutex::new(Some(rx)))), tx)
    }
}

/// The client's side of an upgrade, resolved once its `101` is written.
#[derive(Debug)]
pub struct ClientUpgrade(pub oneshot::Receiver<Upgraded>);

impl ClientUpgrade {
    /// Whether a request's extensions hold an upgrade its client asked for
    /// (and can switch to: HTTP/1.1), not yet taken.
    pub fn asked(extensions: &Extensions) -> bool {
        extensions.get::<PendingUpgrade>().is_some()
    }

    /// Takes the client's side of an upgrade out of a request's extensions.
    pub fn take(extensions: &mut Extensions) -> Option<ClientUpgrade> {
        let pending = extensions.remove::<PendingUpgrade>()?;
        let rx = pending.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()?;
        Some(ClientUpgrade(rx))
    }
}
