//! Body framing (RFC 9112 §6 and §7.1): how a message's body is delimited,
//! and the incremental decoder that takes its bytes out of a connection's
//! read buffer.
//!
//! ```text
//! Length(n)   n bytes, then the next message
//! Chunked     chunk  = 1*HEXDIG [ BWS ";" ext ] CRLF data CRLF
//!             last   = 1*"0" [ ext ] CRLF *( field-line CRLF ) CRLF
//! UntilClose  everything until the peer closes (responses only)
//! ```
//!
//! The chunked rules follow hyper's decoder, so the proxy's two HTTP/1
//! paths agree on what a body is: a size that fits 64 bits (leading zeros
//! allowed),
//! spaces or tabs only between the size and `;` or CR, extensions skipped
//! but bounded and never containing a bare LF, every line ended by CRLF,
//! trailer fields parsed (and then dropped) with the same limits as a head.
//!
//! The decoder never copies body bytes: data comes out as slices split off
//! the read buffer.

use bytes::{Buf, Bytes, BytesMut};

use super::{Error, Reason};

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (`Content-Length: 0`, a request without length, `HEAD`, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the peer closes the connection (a response with neither).
    UntilClose,
}

/// Most bytes of chunk extensions in one body (hyper's limit).
const MAX_EXTENSION_BYTES: u64 = 16 * 1024;
/// Most bytes of trailer fields (hyper's limit).
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Most trailer fields (hyper's limit).
const MAX_TRAILERS: usize = 100;

/// Where a chunked body's decoder stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Before a chunk size's first digit.
    Start,
    /// Reading the size's hex digits.
    Size {
        size: u64,
    },
    /// Spaces after the size.
    SizeSpace {
        size: u64,
    },
    /// In an extension, until CR.
    Extension {
        size: u64,
    },
    /// After the size line's CR.
    SizeLf {
        size: u64,
    },
    /// In a chunk's data.
    Data {
        left: u64,
    },
    /// After a chunk's data: CR, then LF.
    DataCr,
    DataLf,
    /// After the last chunk's size line: CR (the end) or a trailer field.
    EndCr,
    /// Inside a trailer field line, until CR.
    Trailer,
    /// After a trailer field's CR.
    TrailerLf,
    /// After the final CR.
    EndLf,
}

/// The decoder's state.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// What one call of [`Decoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes, split off the read buffer.
    Data(Bytes),
    /// The buffer holds no more of the body: read more, then call again.
    NeedMore,
    /// The body is complete; the buffer starts at the next message.
    Done,
}

/// An incremental body decoder for one message.
#[derive(Clone, Debug)]
pub struct Decoder {
    state: State,
    /// Extension bytes seen so far (bounded).
    extension_bytes: u64,
    /// Trailer field lines kept for validation (empty without trailers).
    trailers: Vec<u8>,
}

impl Decoder {
    /// A decoder for a body framed as `framing`.
    pub fn new(framing: Framing) -> Decoder {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunk::Start),
            Framing::UntilClose => State::UntilClose,
        };
        Decoder { state, extension_bytes: 0, trailers: Vec::new() }
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes still to come, when the framing says (a `Content-Length` body).
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Takes the next piece of the body out of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, Error> {
        match self.state {
            State::Done => Ok(Decoded::Done),
            State::Length(left) => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                let left = left - n as u64;
                self.state = if left == 0 { State::Done } else { State::Length(left) };
                Ok(Decoded::Data(buf.split_to(n).freeze()))
            }
            State::UntilClose => {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                Ok(Decoded::Data(buf.split().freeze()))
            }
            State::Chunked(chunk) => self.chunked(chunk, buf),
        }
    }

    /// The peer closed the connection: the end of an [`Framing::UntilClose`]
    /// body, an error for every other unfinished one.
    pub fn eof(&mut self) -> Result<(), Error> {
        match self.state {
            State::Done => Ok(()),
            State::UntilClose => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Error::body(Reason::BodyIncomplete)),
        }
    }

    /// Runs the chunked state machine over `buf` until data, the end, or
    /// the end of the buffer.
    fn chunked(&mut self, mut chunk: Chunk, buf: &mut BytesMut) -> Result<Decoded, Error> {
        let mut used = 0;
        let result = loop {
            if let Chunk::Data { left } = chunk {
                buf.advance(used);
                used = 0;
                if buf.is_empty() {
                    break Ok(Decoded::NeedMore);
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                let left = left - n as u64;
                chunk = if left == 0 { Chunk::DataCr } else { Chunk::Data { left } };
                self.state = State::Chunked(chunk);
                return Ok(Decoded::Data(buf.split_to(n).freeze()));
            }
            let Some(&b) = buf.get(used) else { break Ok(Decoded::NeedMore) };
            used += 1;
            chunk = match self.step(chunk, b) {
                Ok(Some(next)) => next,
                Ok(None) => {
                    self.state = State::Done;
                    buf.advance(used);
                    self.check_trailers()?;
                    return Ok(Decoded::Done);
                }
                Err(e) => break Err(e),
            };
        };
        buf.advance(used);
        self.state = State::Chunked(chunk);
        result
    }

    /// One byte of chunk framing; `None` at the body's end.
    fn step(&mut self, chunk: Chunk, b: u8) -> Result<Option<Chunk>, Error> {
        let err = |r| Err(Error::body(r));
        Ok(Some(match chunk {
            Chunk::Start => match hex(b) {
                Some(d) => Chunk::Size { size: u64::from(d) },
                None => return err(Reason::ChunkSize),
            },
            Chunk::Size { size } => match (hex(b), b) {
                // Leading zeros are fine; a value beyond 64 bits is not.
                (Some(_), _) if size >> 60 != 0 => return err(Reason::ChunkSizeOverflow),
                (Some(d), _) => Chunk::Size { size: (size << 4) | u64::from(d) },
                (None, b' ' | b'\t') => Chunk::SizeSpace { size },
                (None, b';') => Chunk::Extension { size },
                (None, b'\r') => Chunk::SizeLf { size },
                _ => return err(Reason::ChunkSize),
            },
            Chunk::SizeSpace { size } => match b {
                b' ' | b'\t' => Chunk::SizeSpace { size },
                b';' => Chunk::Extension { size },
                b'\r' => Chunk::SizeLf { size },
                _ => return err(Reason::ChunkSize),
            },
            Chunk::Extension { size } => match b {
                b'\r' => Chunk::SizeLf { size },
                b'\n' => return err(Reason::ChunkExtension),
                _ => {
                    self.extension_bytes += 1;
                    if self.extension_bytes >= MAX_EXTENSION_BYTES {
                        return err(Reason::ChunkExtension);
                    }
                    Chunk::Extension { size }
                }
            },
            Chunk::SizeLf { size } => match (b, size) {
                (b'\n', 0) => Chunk::EndCr,
                (b'\n', left) => Chunk::Data { left },
                _ => return err(Reason::ChunkLineEnd),
            },
            // Handled by the caller (data is split off, not stepped through).
            Chunk::Data { left } => Chunk::Data { left },
            Chunk::DataCr if b == b'\r' => Chunk::DataLf,
            Chunk::DataLf if b == b'\n' => Chunk::Start,
            Chunk::DataCr | Chunk::DataLf => return err(Reason::ChunkLineEnd),
            // A bare LF ends no line here either: read as a trailer's
            // start, it would take what follows the body (a pipelined
            // request) as trailer fields.
            Chunk::EndCr => match b {
                b'\r' => Chunk::EndLf,
                b'\n' => return err(Reason::ChunkLineEnd),
                _ => {
                    self.keep_trailer_byte(b)?;
                    Chunk::Trailer
                }
            },
            Chunk::Trailer => {
                if b == b'\n' {
                    return err(Reason::ChunkLineEnd);
                }
                self.keep_trailer_byte(b)?;
                if b == b'\r' {
                    Chunk::TrailerLf
                } else {
                    Chunk::Trailer
                }
            }
            Chunk::TrailerLf => match b {
                b'\n' => {
                    self.keep_trailer_byte(b)?;
                    Chunk::EndCr
                }
                _ => return err(Reason::ChunkLineEnd),
            },
            Chunk::EndLf => match b {
                b'\n' => return Ok(None),
                _ => return err(Reason::ChunkLineEnd),
            },
        }))
    }

    fn keep_trailer_byte(&mut self, b: u8) -> Result<(), Error> {
        if self.trailers.len() >= MAX_TRAILER_BYTES {
            return Err(Error::body(Reason::TrailersTooLarge));
        }
        self.trailers.push(b);
        Ok(())
    }

    /// Trailer fields must parse as header fields (they are then dropped:
    /// the proxy does not forward trailers).
    fn check_trailers(&mut self) -> Result<(), Error> {
        if self.trailers.is_empty() {
            return Ok(());
        }
        let lines = self.trailers.iter().filter(|&&b| b == b'\n').count();
        if lines > MAX_TRAILERS {
            return Err(Error::body(Reason::TrailersTooLarge));
        }
        let mut trailers = std::mem::take(&mut self.trailers);
        trailers.extend_from_slice(b"\r\n");
        let mut fields = vec![httparse::EMPTY_HEADER; lines];
        match httparse::parse_headers(&trailers, &mut fields) {
            Ok(httparse::Status::Complete(_)) => Ok(()),
            _ => Err(Error::body(Reason::Trailer)),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Writes the size line of a chunk of `len` bytes (`1a2b\r\n`).
pub fn chunk_head(out: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// The end of a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";
/// The last chunk of a chunked body, without trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Decodes `input` fed in pieces of `step` bytes; the body, or the error.
    fn decode_in_steps(framing: Framing, input: &[u8], step: usize) -> Result<(Vec<u8>, BytesMut), Error> {
        let mut d = Decoder::new(framing);
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => body.extend_from_slice(&b),
                Decoded::Done => return Ok((body, buf)),
                Decoded::NeedMore if fed < input.len() => {
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                Decoded::NeedMore => {
                    d.eof()?;
                    return Ok((body, buf));
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_the_same_in_any_split() -> TestResult {
        let input = b"5\r\nhello\r\n1;name=value\r\n \r\n000\r\nX-Sum: 1\r\n\r\nNEXT";
        for step in 1..input.len() {
            let (body, rest) = decode_in_steps(Framing::Chunked, input, step)?;
            assert_eq!(body, b"hello ", "step {step}");
            // Whatever followed the body stays for the next message.
            assert!(b"NEXT".starts_with(&rest), "step {step}: {rest:?}");
        }
        Ok(())
    }

    #[test]
    fn length_and_close_delimited_bodies() -> TestResult {
        assert_eq!(decode_in_steps(Framing::Length(3), b"abcdef", 2)?.0, b"abc");
        assert_eq!(decode_in_steps(Framing::UntilClose, b"abcdef", 4)?.0, b"abcdef");
        assert!(matches!(decode_in_steps(Framing::Length(9), b"abc", 2), Err(e) if e.reason == Reason::BodyIncomplete));
        assert_eq!(decode_in_steps(Framing::Empty, b"abc", 1)?.0, b"");
        Ok(())
    }

    #[test]
    fn malformed_chunk_framing_is_refused() {
        let cases: [(&[u8], Reason); 13] = [
            (b"0\r\n\nGET /next HTTP/1.1\r\n\r\n", Reason::ChunkLineEnd),
            (b"0\r\nX-Sum: 1\nGET /next HTTP/1.1\r\n\r\n", Reason::ChunkLineEnd),
            (b"x\r\n", Reason::ChunkSize),
            (b"\r\n", Reason::ChunkSize),
            (b"5\nhello\r\n0\r\n\r\n", Reason::ChunkSize),
            (b"5 x\r\n", Reason::ChunkSize),
            (b"5;a\nb\r\n", Reason::ChunkExtension),
            (b"5\rhello", Reason::ChunkLineEnd),
            (b"5\r\nhelloX\r\n", Reason::ChunkLineEnd),
            (b"5\r\nhello\rX", Reason::ChunkLineEnd),
            (b"10000000000000000\r\n", Reason::ChunkSizeOverflow),
            (b"0\r\nbad trailer\r\n\r\n", Reason::Trailer),
            (b"0\r\n\rX", Reason::ChunkLineEnd),
        ];
        for (input, want) in cases {
            let got = decode_in_steps(Framing::Chunked, input, input.len()).map(|(b, _)| b);
            assert!(matches!(&got, Err(e) if e.reason == want), "{:?}: {got:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn sizes_fit_64_bits_whatever_their_leading_zeros() -> TestResult {
        for ok in [&b"ffffffffffffffff\r\n"[..], b"00000000000000000000000a\r\n"] {
            let mut buf = BytesMut::from(ok);
            assert_eq!(Decoder::new(Framing::Chunked).decode(&mut buf)?, Decoded::NeedMore);
        }
        let mut buf = BytesMut::from(&b"10000000000000000\r\n"[..]);
        assert!(Decoder::new(Framing::Chunked).decode(&mut buf).is_err());
        Ok(())
    }

    #[test]
    fn chunk_heads_are_lowercase_hex() {
        for (len, want) in [(0, "0\r\n"), (10, "a\r\n"), (4096, "1000\r\n"), (usize::MAX, "ffffffffffffffff\r\n")] {
            let mut out = Vec::new();
            chunk_head(&mut out, len);
            assert_eq!(out, want.as_bytes());
        }
    }
}
