//! Message: a gRPC call's first message, read before its route's id can
//! be (`id: { grpc_field: "2.1" }`). A message on the wire is a 5-byte
//! prefix (a compressed flag, a big-endian length) and the message:
//!
//! ```text
//! | 0 | length (4 bytes) | message (length bytes) | next message ...
//! ```
//!
//! At most `server.request_buffer_bytes` of it is held: a larger first
//! message is refused (`413`, `RESOURCE_EXHAUSTED` to a gRPC client), never
//! routed by a part of it; so is a compressed one, whose fields cannot be
//! read. What was read goes upstream first, the rest as it comes.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http_body_util::BodyExt;

use super::error::ProxyError;
use crate::routing::Table;
use crate::upstream::body::Pace;
use crate::upstream::RequestBody;

/// The 5-byte prefix of a gRPC message.
const PREFIX: usize = 5;

/// What was read of a call's body: its first message, and maybe more.
#[derive(Debug)]
pub(super) struct First {
    read: Bytes,
    len: usize,
}

impl First {
    /// The first message, without its prefix.
    pub(super) fn message(&self) -> &[u8] {
        self.read.get(PREFIX..PREFIX + self.len).unwrap_or_default()
    }
}

/// Reads `body` until its first message is whole, within `limit` bytes of
/// message and the body's `pace`; the message, and the body to send
/// upstream (what was read, then the rest).
pub(super) async fn first(mut body: RequestBody, limit: usize, pace: Pace) -> Result<(First, RequestBody), ProxyError> {
    let bad = |detail: &str| ProxyError::BadMessage { detail: detail.to_string() };
    let mut read = BytesMut::new();
    loop {
        if let Some(prefix) = read.get(..PREFIX) {
            if prefix[0] != 0 {
                return Err(bad("the first message is compressed (grpc-encoding), so its fields cannot be read"));
            }
            let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
            if len > limit {
                return Err(ProxyError::MessageTooLarge { limit });
            }
            if read.len() >= PREFIX + len {
                let read = read.freeze();
                return Ok((First { read: read.clone(), len }, RequestBody::Resumed(Some(read), Box::new(body))));
            }
        }
        let next = body.frame();
        let frame = match pace.deadline(read.len() as u64) {
            Some(at) => tokio::time::timeout_at(at.into(), next).await.map_err(|_| ProxyError::BodyTimeout)?,
            None => next.await,
        };
        match frame {
            None => return Err(bad("the call ended before its first message did")),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => {
                return Err(ProxyError::ClientBody { detail: "the request body could not be read from the client" })
            }
        }
    }
}

/// For a gRPC call whose route reads its id from the first message (and
/// only then): that message, and the body to send upstream.
pub(super) async fn if_routed_by(
    table: &Table,
    parts: &Parts,
    started: Instant,
    body: RequestBody,
) -> Result<(Option<First>, RequestBody), ProxyError> {
    if !super::locate::matched(table, parts).is_some_and(super::locate::reads_message) {
        return Ok((None, body));
    }
    let server = &table.settings().server;
    let pace = Pace { since: started, grace: server.body_timeout, min_rate: server.body_min_rate };
    let (first, body) = first(body, server.request_buffer_bytes, pace).await?;
    Ok((Some(first), body))
}
