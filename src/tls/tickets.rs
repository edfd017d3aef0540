//! Stateless TLS session tickets whose keys rotate
//! (`server.tls.session_tickets`, `ticket_key_rotation`).
//!
//! A ticket is the session state sealed with ChaCha20-Poly1305 under the
//! current key:
//!
//! ```text
//! key name (16 random bytes) | nonce (12 random bytes) | sealed state | tag (16)
//! ```
//!
//! The key name is also the AEAD's associated data, so a ticket opens only
//! under the key that sealed it. `TicketKeys` holds two keys: the current
//! one seals for one period, then becomes the previous one, which opens
//! tickets for one period more and is then erased, so no ticket opens more
//! than two periods after it was sealed, however long the listener was
//! idle (the keys are rolled on every use and by `TicketKeys::roll`,
//! which the listener calls every second). rustls's own ticketer fixes the
//! period at six hours and rolls one step per use; a front door chooses the
//! period, so the keys are made here, with `ring` (the provider rustls
//! already uses). The clock is injected, so the rotation is tested without
//! waiting.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

use super::TlsError;

const KEY_NAME_LEN: usize = 16;

/// One ticket key: it seals tickets while current, opens them while current or previous.
struct TicketKey {
    name: [u8; KEY_NAME_LEN],
    key: LessSafeKey,
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key itself.
        f.debug_struct("TicketKey").finish_non_exhaustive()
    }
}

impl TicketKey {
    /// A new random key (`None`: the system has no randomness to give).
    fn generate() -> Option<TicketKey> {
        let rng = SystemRandom::new();
        let mut secret = [0u8; 32];
        let mut name = [0u8; KEY_NAME_LEN];
        rng.fill(&mut secret).ok()?;
        rng.fill(&mut name).ok()?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &secret).ok()?;
        Some(TicketKey { name, key: LessSafeKey::new(key) })
    }
}

impl ProducesTickets for TicketKey {
    fn enabled(&self) -> bool {
        true
    }

    /// Not used: the rotator answers the lifetime.
    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).ok()?;
        let tag_len = CHACHA20_POLY1305.tag_len();
        let mut out = Vec::with_capacity(KEY_NAME_LEN + NONCE_LEN + plain.len() + tag_len);
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.name),
                &mut out[KEY_NAME_LEN + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    /// Opens a ticket sealed by this key; anything else (another key's,
    /// too short, altered) is `None`, and the client gets a full handshake.
    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (name, rest) = ticket.split_at_checked(KEY_NAME_LEN)?;
        if name != self.name {
            return None;
        }
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(self.name), &mut buf).ok()?.len();
        buf.truncate(plain);
        Some(buf)
    }
}

/// The current and previous ticket keys, rolled by the clock.
pub(super) struct TicketKeys {
    period: u64,
    clock: fn() -> u64,
    state: RwLock<Keys>,
}

struct Keys {
    /// `None` after the system had no randomness for a new key: no ticket
    /// is sealed or opened until it has.
    current: Option<TicketKey>,
    previous: Option<TicketKey>,
    /// When `current` stops sealing (clock seconds).
    until: u64,
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKeys").field("period", &self.period).finish_non_exhaustive()
    }
}

/// Seconds on a clock that never steps back (from this process's first
/// call): keys roll every period whatever is done to the wall clock.
fn process_seconds() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs()
}

impl TicketKeys {
    /// Keys that roll every `period` (whole seconds, 1 s to a day) by a monotonic clock.
    pub(super) fn new(period: Duration) -> Result<Arc<TicketKeys>, TlsError> {
        TicketKeys::with_clock(period, process_seconds)
    }

    fn with_clock(period: Duration, clock: fn() -> u64) -> Result<Arc<TicketKeys>, TlsError> {
        let period = period.as_secs().clamp(1, 24 * 3600);
        let current = TicketKey::generate().ok_or_else(no_randomness)?;
        let state = Keys { current: Some(current), previous: None, until: clock().saturating_add(period) };
        Ok(Arc::new(TicketKeys { period, clock, state: RwLock::new(state) }))
    }

    /// Rolls the keys the clock says are due: one period past `until` the
    /// current key becomes the previous one; two periods past, both are
    /// replaced (the previous one erased). Called on every use and by the
    /// listener every second, so an idle listener erases keys on time.
    pub(super) fn roll(&self) {
        let now = (self.clock)();
        if self.state.read().is_ok_and(|k| now < k.until) {
            return;
        }
        let Ok(mut keys) = self.state.write() else { return };
        if now < keys.until {
            return;
        }
        let next = TicketKey::generate();
        if next.is_none() {
            // No new key: stop issuing and accepting rather than keep an old one.
            tracing::error!("no randomness for a new tls ticket key; tickets stop until there is");
            keys.current = None;
            keys.previous = None;
            return;
        }
        let stale = now >= keys.until.saturating_add(self.period);
        let old = std::mem::replace(&mut keys.current, next);
        keys.previous = if stale { None } else { old };
        keys.until = now.saturating_add(self.period);
    }
}

fn no_randomness() -> TlsError {
    TlsError("cannot make a tls session ticket key: no randomness".into())
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    /// What clients are told: a ticket lives two periods at most.
    fn lifetime(&self) -> u32 {
        u32::try_from(self.period * 2).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.roll();
        self.state.read().ok()?.current.as_ref()?.encrypt(plain)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.roll();
        let keys = self.state.read().ok()?;
        keys.current.as_ref()?.decrypt(ticket).or_else(|| keys.previous.as_ref()?.decrypt(ticket))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn a_ticket_opens_under_its_key_only() -> Result<(), Box<dyn std::error::Error>> {
        let a = TicketKey::generate().ok_or("no randomness")?;
        let b = TicketKey::generate().ok_or("no randomness")?;
        let ticket = a.encrypt(b"session state").ok_or("sealing failed")?;
        assert_eq!(a.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        assert_eq!(b.decrypt(&ticket), None, "another key's ticket");
        let mut altered = ticket.clone();
        if let Some(last) = altered.last_mut() {
            *last ^= 1;
        }
        assert_eq!(a.decrypt(&altered), None, "an altered ticket");
        for len in 0..KEY_NAME_LEN + NONCE_LEN + 16 {
            assert_eq!(a.decrypt(&ticket[..len]), None, "cut to {len} bytes");
        }
        Ok(())
    }

    static NOW: AtomicU64 = AtomicU64::new(1_000_000);

    fn fake_clock() -> u64 {
        NOW.load(Ordering::SeqCst)
    }

    #[test]
    fn keys_roll_and_a_ticket_opens_for_two_periods_at_most() -> Result<(), Box<dyn std::error::Error>> {
        let keys = TicketKeys::with_clock(Duration::from_secs(60), fake_clock)?;
        assert_eq!(keys.lifetime(), 120);
        let t0 = keys.encrypt(b"x").ok_or("sealing failed")?;
        NOW.fetch_add(59, Ordering::SeqCst);
        assert!(keys.decrypt(&t0).is_some(), "within its key's period");
        NOW.fetch_add(2, Ordering::SeqCst); // one period: the key is the previous one
        assert!(keys.decrypt(&t0).is_some(), "under the previous key");
        let t1 = keys.encrypt(b"y").ok_or("sealing failed")?;
        NOW.fetch_add(60, Ordering::SeqCst); // two periods: erased
        assert!(keys.decrypt(&t0).is_none(), "two periods old");
        assert!(keys.decrypt(&t1).is_some());
        // Idle for a week, nothing used: the next use finds both keys too old.
        let t2 = keys.encrypt(b"z").ok_or("sealing failed")?;
        NOW.fetch_add(7 * 24 * 3600, Ordering::SeqCst);
        assert!(keys.decrypt(&t2).is_none(), "a week-old ticket after an idle week");
        assert!(keys.decrypt(&[]).is_none() && keys.decrypt(&[0; 100]).is_none());
        Ok(())
    }
}
