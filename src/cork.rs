//! An HTTP/2 connection's writes held while its task polls it, and sent
//! together when the poll ends: one system call a poll, not one a frame.
//!
//! ```text
//! h2 ── poll_write ──▶ Corked ── copied ──▶ held (past HELD_MAX: sent at once)
//! h2 ── poll_flush ──▶ Corked: nothing yet, the poll has not ended
//! the poll ends ─────▶ uncorked: the held bytes to the socket, one write
//! ```
//!
//! `h2` does not copy a DATA frame's payload of 256 bytes or more into its
//! write buffer: it writes the buffer and that payload together, one
//! frame at a time. Ten streams answered in one poll of their connection
//! were ten `writev` calls (a unary gRPC call through both legs made 1.2
//! write calls; HAProxy, which copies, 0.3). Held here, they are one.
//!
//! Both HTTP/2 legs use it, the server's connection to its client
//! (`server::h2`) and an upstream connection (`upstream::h2`): `h2` is
//! given the [`Corked`] half and the connection's own task drives it
//! through [`uncorked`], which sends what a poll wrote as the poll ends.
//! Only that task touches the socket, so the lock the two halves share is
//! never contended. A socket that takes no more wakes the task when it
//! does; `h2` waits (its writes are refused) only once [`HELD_MAX`] bytes
//! are held.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes held before a write is sent at once, within the poll; a write
/// larger than this alone (a full DATA frame) goes straight to the socket.
/// The size of `h2`'s own write buffer, and the memory a connection keeps
/// for it: allocated at its first write and kept (one freed and allocated
/// again each poll raised the proxy's peak memory over a large upload).
pub const HELD_MAX: usize = 16 * 1024;

/// The socket and the bytes written to it but not yet sent.
#[derive(Debug)]
struct Held<S> {
    io: S,
    /// [`HELD_MAX`] bytes, allocated at the first write.
    bytes: Vec<u8>,
    /// A send that failed after `h2`'s poll had ended: reported to its
    /// next write or flush.
    failed: Option<io::Error>,
}

/// The half `h2` reads and writes: reads go to the socket, writes are held.
#[derive(Debug)]
pub struct Corked<S>(Arc<Mutex<Held<S>>>);

/// The half the connection's task keeps, to send what was held ([`uncorked`]).
#[derive(Debug)]
pub struct Cork<S>(Arc<Mutex<Held<S>>>);

/// `io` split into the half for `h2` and the half that sends its writes.
pub fn cork<S>(io: S) -> (Corked<S>, Cork<S>) {
    let held = Arc::new(Mutex::new(Held { io, bytes: Vec::new(), failed: None }));
    (Corked(Arc::clone(&held)), Cork(held))
}

fn lock<S>(held: &Mutex<Held<S>>) -> MutexGuard<'_, Held<S>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drives `conn`, sending after each poll of it what that poll wrote.
/// A send that fails is reported to `h2` by its next write or flush (the
/// task is woken for it), as the socket's own error would have been.
pub async fn uncorked<S: AsyncWrite + Unpin, F: Future>(cork: Cork<S>, conn: F) -> F::Output {
    let mut conn = pin!(conn);
    poll_fn(|cx| {
        let polled = conn.as_mut().poll(cx);
        let mut held = lock(&cork.0);
        if let Poll::Ready(Err(e)) = held.send(cx) {
            held.failed = Some(e);
            cx.waker().wake_by_ref();
        }
        polled
    })
    .await
}

impl<S: AsyncWrite + Unpin> Held<S> {
    /// Writes the held bytes to the socket, then flushes it (a TLS stream
    /// sends its last record on flush).
    fn send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut sent = 0;
        while sent < self.bytes.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.bytes[sent..]) {
                Poll::Ready(Ok(n)) if n > 0 => sent += n,
                // An error, or a socket that takes nothing (`WriteZero`).
                Poll::Ready(written) => {
                    self.bytes.clear();
                    return Poll::Ready(Err(written.err().unwrap_or_else(|| io::ErrorKind::WriteZero.into())));
                }
                Poll::Pending => {
                    self.bytes.drain(..sent);
                    return Poll::Pending;
                }
            }
        }
        self.bytes.clear();
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Holds `bufs` unless that would pass [`HELD_MAX`]: then sends what
    /// is held first, and writes a large write (over `HELD_MAX` alone)
    /// straight to the socket.
    fn write(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if self.bytes.len() + len > HELD_MAX {
            ready!(self.send(cx))?;
            if len > HELD_MAX {
                return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            }
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve_exact(HELD_MAX);
        }
        for b in bufs {
            self.bytes.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Corked<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.0).io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Corked<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        lock(&self.0).write(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        lock(&self.0).write(cx, bufs)
    }

    /// Copying costs the same for one slice or several, and `h2` then
    /// copies no payload of its own into its buffer.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Nothing is sent here: the poll that flushes has not ended, and
    /// [`uncorked`] sends when it does.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(lock(&self.0).failed.take().map_or(Ok(()), Err))
    }

    /// What is held goes first, then the socket is shut down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut held = lock(&self.0);
        if let Some(e) = held.failed.take() {
            return Poll::Ready(Err(e));
        }
        ready!(held.send(cx))?;
        Pin::new(&mut held.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
    use tokio::net::{TcpListener, TcpStream};

    use super::{cork, uncorked, HELD_MAX};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A socket that counts the writes made to it.
    struct Counted<S> {
        io: S,
        writes: Arc<AtomicUsize>,
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::Relaxed);
            Pin::new(&mut self.io).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    async fn tcp_pair() -> io::Result<(TcpStream, TcpStream)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let near = TcpStream::connect(listener.local_addr()?).await?;
        Ok((near, listener.accept().await?.0))
    }

    fn frame(i: usize) -> Vec<u8> {
        vec![u8::try_from(i % 251).unwrap_or(0); 1029]
    }

    #[tokio::test]
    async fn the_frames_written_in_one_poll_leave_in_one_write_as_it_ends() -> TestResult {
        let (near, mut far) = tcp_pair().await?;
        let writes = Arc::new(AtomicUsize::new(0));
        let (mut corked, held) = cork(Counted { io: near, writes: Arc::clone(&writes) });
        // As `h2` writes ten answers in one poll: a frame, a flush, the next.
        let conn = async {
            for i in 0..10 {
                corked.write_all(&frame(i)).await?;
                corked.flush().await?;
            }
            io::Result::Ok(())
        };
        uncorked(held, conn).await?;
        assert_eq!(writes.load(Ordering::Relaxed), 1, "ten frames, one write");
        let mut got = vec![0; 10 * 1029];
        far.read_exact(&mut got).await?;
        assert_eq!(got, (0..10).flat_map(frame).collect::<Vec<u8>>());
        Ok(())
    }

    #[tokio::test]
    async fn the_writer_waits_once_the_most_is_held_and_the_socket_takes_no_more() -> TestResult {
        let (near, mut far) = tokio::io::duplex(4096);
        let (mut corked, held) = cork(near);
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        let conn = tokio::spawn(uncorked(held, async move {
            for i in 0..1024 {
                corked.write_all(&frame(i)).await?;
                counted.fetch_add(1029, Ordering::Relaxed);
            }
            corked.shutdown().await
        }));
        // Nobody reads: the writer stops once the next frame would pass
        // HELD_MAX and the socket is full.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let stalled = accepted.load(Ordering::Relaxed);
        assert!(stalled <= HELD_MAX + 4096 + 1029, "{stalled} bytes taken from a writer nobody reads");
        assert!(stalled + 1029 > HELD_MAX, "the writer stopped at {stalled} bytes, with room for another frame");
        // Read: everything arrives, in order, and the writer ends.
        let mut got = Vec::new();
        far.read_to_end(&mut got).await?;
        conn.await??;
        assert_eq!(got, (0..1024).flat_map(frame).collect::<Vec<u8>>());
        Ok(())
    }

    #[tokio::test]
    async fn a_shutdown_sends_what_is_held_first() -> TestResult {
        let (near, mut far) = tcp_pair().await?;
        let (mut corked, held) = cork(near);
        let conn = tokio::spawn(uncorked(held, async move {
            corked.write_all(b"GOAWAY").await?;
            corked.shutdown().await?;
            // The task goes on (`h2` reads to the end): the bytes are out already.
            std::future::pending::<io::Result<()>>().await
        }));
        let mut got = Vec::new();
        far.read_to_end(&mut got).await?;
        assert_eq!(got, b"GOAWAY");
        conn.abort();
        Ok(())
    }

    #[tokio::test]
    async fn a_send_that_fails_after_the_poll_fails_the_next_write() -> TestResult {
        let (near, far) = tokio::io::duplex(4096);
        drop(far);
        let (mut corked, held) = cork(near);
        let conn = async move {
            // Held, and flushed as far as `h2` can tell.
            corked.write_all(b"one").await?;
            corked.flush().await?;
            // The poll ends here: the send fails, and the task is woken.
            tokio::task::yield_now().await;
            corked.write_all(b"two").await
        };
        let failed = uncorked(held, conn).await.err().map(|e| e.kind());
        assert_eq!(failed, Some(io::ErrorKind::BrokenPipe));
        Ok(())
    }
}
