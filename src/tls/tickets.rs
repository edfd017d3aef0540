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
//! under the key that sealed it. [`rotating`] wraps one key per period in
//! rustls's `TicketRotator`: a new key every period, the previous one kept
//! to open tickets for one more period, then erased. rustls's own ticketer
//! fixes that period at six hours; a front door chooses it, so the key is
//! made here, with `ring` (the provider rustls already uses).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;
use rustls::ticketer::TicketRotator;

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
    /// A new random key (the `TicketRotator`'s generator).
    fn generate() -> Result<Box<dyn ProducesTickets>, rustls::crypto::GetRandomFailed> {
        let rng = SystemRandom::new();
        let mut secret = [0u8; 32];
        let mut name = [0u8; KEY_NAME_LEN];
        rng.fill(&mut secret).map_err(|_| rustls::crypto::GetRandomFailed)?;
        rng.fill(&mut name).map_err(|_| rustls::crypto::GetRandomFailed)?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &secret).map_err(|_| rustls::crypto::GetRandomFailed)?;
        Ok(Box::new(TicketKey { name, key: LessSafeKey::new(key) }))
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

/// A ticketer with a new key every `period` (whole seconds, at least one),
/// tickets accepted for at most two periods.
pub(super) fn rotating(period: Duration) -> Result<Arc<dyn ProducesTickets>, TlsError> {
    let secs = u32::try_from(period.as_secs().max(1)).unwrap_or(u32::MAX / 2);
    TicketRotator::new(secs, TicketKey::generate)
        .map(|r| Arc::new(r) as Arc<dyn ProducesTickets>)
        .map_err(|e| TlsError(format!("cannot make tls session ticket keys: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_under_its_key_only() -> Result<(), Box<dyn std::error::Error>> {
        let a = TicketKey::generate().map_err(|_| "no randomness")?;
        let b = TicketKey::generate().map_err(|_| "no randomness")?;
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
        let r = rotating(Duration::from_secs(3600))?;
        let t = r.encrypt(b"x").ok_or("sealing failed")?;
        assert_eq!((r.decrypt(&t).as_deref(), r.lifetime()), (Some(&b"x"[..]), 7200));
        Ok(())
    }
}
