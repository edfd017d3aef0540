//! Room for the answers that fan-outs hold until their last region
//! answers: `server.fanout_buffer_bytes`, all requests together, so that
//! many fan-outs at once (one client's streams on one HTTP/2 connection,
//! say) cannot take the process's memory. Each answer is gathered into one
//! allocation, and room is taken for all of it, its spare capacity
//! included, before it grows; so is the room its elements take once
//! parsed, as they wait to be merged. The room goes back when the answer
//! is dropped, at the end of its request.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The room all fan-outs share, in bytes.
#[derive(Debug)]
pub(crate) struct Room {
    bytes: Arc<Semaphore>,
    size: usize,
}

impl Room {
    /// Room for `size` bytes.
    pub(crate) fn new(size: usize) -> Room {
        let size = size.min(Semaphore::MAX_PERMITS);
        Room { bytes: Arc::new(Semaphore::new(size)), size }
    }

    /// Its size.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Room for `n` bytes now, held until the [`Taken`] is dropped; `None`
    /// when the fan-outs in flight hold the rest.
    pub(super) fn take_now(&self, n: usize) -> Option<Taken> {
        let mut taken = Taken::default();
        self.take(n, &mut taken).then_some(taken)
    }

    /// `n` more bytes into `taken`; `false` when the fan-outs in flight
    /// hold the rest.
    fn take(&self, n: usize, taken: &mut Taken) -> bool {
        let Ok(n) = u32::try_from(n) else { return false };
        match (Arc::clone(&self.bytes).try_acquire_many_owned(n), &mut taken.0) {
            (Err(_), _) => false,
            (Ok(more), Some(held)) => {
                held.merge(more);
                true
            }
            (Ok(more), held) => {
                *held = Some(more);
                true
            }
        }
    }
}

/// Room taken for one answer, given back when dropped.
#[derive(Debug, Default)]
pub(super) struct Taken(Option<OwnedSemaphorePermit>);

/// Why an answer could not grow.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Short {
    /// It would be longer than its limit.
    Max,
    /// The fan-outs in flight hold the rest of the room.
    Room,
}

/// One answer's bytes as they arrive, in one allocation that never grows
/// beyond `max`: each growth doubles it (or makes it the size the answer
/// said it has), within the room.
#[derive(Debug)]
pub(super) struct Gathered {
    bytes: Vec<u8>,
    expected: usize,
    max: usize,
    taken: Taken,
}

impl Gathered {
    /// An empty answer that says it has `expected` bytes, at most `max`.
    pub(super) fn new(expected: usize, max: usize) -> Gathered {
        Gathered { bytes: Vec::new(), expected: expected.min(max), max, taken: Taken::default() }
    }

    /// Appends `data`.
    pub(super) fn push(&mut self, room: &Room, data: &[u8]) -> Result<(), Short> {
        let need = self.bytes.len() + data.len();
        if need > self.max {
            return Err(Short::Max);
        }
        let capacity = self.bytes.capacity();
        if need > capacity {
            let grown = need.max(capacity * 2).max(self.expected).min(self.max);
            if !room.take(grown - capacity, &mut self.taken) {
                return Err(Short::Room);
            }
            self.bytes.reserve_exact(grown - self.bytes.len());
        }
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    /// The answer, and the room it holds.
    pub(super) fn into_parts(self) -> (Bytes, Taken) {
        (Bytes::from(self.bytes), self.taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_grow_within_the_room_and_give_it_back_when_dropped() {
        let room = Room::new(100);
        let mut a = Gathered::new(0, 64);
        assert_eq!(a.push(&room, &[1; 10]), Ok(()));
        assert_eq!(a.push(&room, &[2; 10]), Ok(()), "doubled to 20");
        assert_eq!(room.bytes.available_permits(), 80);
        assert_eq!(a.push(&room, &[3; 45]), Err(Short::Max), "65 bytes is above its 64");
        // A second answer that says it has 60 bytes takes them at once.
        let mut b = Gathered::new(60, 64);
        assert_eq!(b.push(&room, &[4; 1]), Ok(()));
        assert_eq!(room.bytes.available_permits(), 20);
        let mut c = Gathered::new(0, 64);
        assert_eq!(c.push(&room, &[5; 21]), Err(Short::Room));
        let (bytes, taken) = b.into_parts();
        assert_eq!(&bytes[..], &[4]);
        drop(taken);
        assert_eq!(c.push(&room, &[5; 21]), Ok(()), "b's room is back");
        drop((a, c));
        assert_eq!(room.bytes.available_permits(), 100);
    }
}
