//! Ticket ids derived from the place in line, so they need not be stored.
//!
//! `id = HMAC-SHA256(key, room ‖ 0x00 ‖ seq as u64 big-endian)[..16]`,
//! written as 32 lowercase hex digits. Without the key the ids are
//! indistinguishable from random 128-bit values, which is all the contract
//! asks of them; with it the room can check an id against its `seq` without
//! remembering either. A gateway keeps one key in its `data_dir` (made once),
//! so tickets from before a restart match the places it restored; a room
//! that lives in memory only draws a fresh key, and tickets of an earlier
//! process (whose places are gone) no longer match.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The secret the room derives ticket ids with: kept as the HMAC state
/// after the key's inner and outer pads, so each id costs two SHA-256
/// blocks instead of four (one per poll and join).
#[derive(Clone)]
pub struct TicketIdKey(Hmac<Sha256>);

impl TicketIdKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(<Hmac<Sha256> as Mac>::new_from_slice(&bytes).expect("HMAC takes keys of any length"))
    }

    /// The fair-start seed of `room` opening at `opens_at_ms`: secret
    /// while the key is, and the same after a restart, so the draw a
    /// restarted gateway makes is the one it committed to.
    pub fn fair_start_seed(&self, room: &str, opens_at_ms: u64) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(b"fair-start\0");
        mac.update(room.as_bytes());
        mac.update(&[0]);
        mac.update(&opens_at_ms.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The id of place `seq` in `room`.
    pub fn derive(&self, room: &str, seq: u64) -> TicketId {
        let mut mac = self.0.clone();
        mac.update(room.as_bytes());
        mac.update(&[0]);
        mac.update(&seq.to_be_bytes());
        let out = mac.finalize().into_bytes();
        let mut id = [0u8; 16];
        id.copy_from_slice(&out[..16]);
        TicketId(id)
    }
}

impl fmt::Debug for TicketIdKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TicketIdKey(..)")
    }
}

/// A ticket's 128-bit id, the JWT `sub`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TicketId([u8; 16]);

impl TicketId {
    /// Parses the 32-hex-digit form; anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut id = [0u8; 16];
        hex::decode_to_slice(text, &mut id).ok()?;
        Some(Self(id))
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TicketId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_by_seq_room_and_key_and_round_trip() {
        let k = TicketIdKey::new([7; 32]);
        let a = k.derive("drop", 1);
        assert_ne!(a, k.derive("drop", 2));
        assert_ne!(a, k.derive("drop2", 1));
        assert_ne!(a, TicketIdKey::new([8; 32]).derive("drop", 1));
        assert_eq!(a, k.derive("drop", 1));
        let text = a.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(TicketId::parse(&text), Some(a));
        assert_eq!(TicketId::parse("xyz"), None);
    }

    #[test]
    fn the_prepared_key_derives_what_a_fresh_hmac_does() {
        // Tickets issued before an upgrade must keep matching their places:
        // the derivation is HMAC-SHA256(key, room ‖ 0 ‖ seq)[..16], however
        // the key's state is kept.
        let bytes = [0x5a; 32];
        let k = TicketIdKey::new(bytes);
        for (room, seq) in [("drop", 0u64), ("drop", 1), ("a-room", u64::MAX)] {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&bytes).unwrap();
            mac.update(room.as_bytes());
            mac.update(&[0]);
            mac.update(&seq.to_be_bytes());
            let full = mac.finalize().into_bytes();
            assert_eq!(k.derive(room, seq).as_bytes()[..], full[..16]);
        }
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&bytes).unwrap();
        mac.update(b"fair-start\0drop\0");
        mac.update(&42u64.to_be_bytes());
        assert_eq!(
            k.fair_start_seed("drop", 42)[..],
            mac.finalize().into_bytes()[..]
        );
    }
}
