//! The DH-HMAC-CHAP computations (NVMe Base 2.0, section 8.13.5.4; Linux
//! `drivers/nvme/host/auth.c` and `drivers/nvme/target/auth.c`).
//!
//! ```text
//! host response  = HMAC(Kh', Ca1 || S1 || T_ID || SC_C || "HostHost"   || NQNh || 00h || NQNc)
//! ctrl response  = HMAC(Kc', Ca2 || S2 || T_ID || SC_C || "Controller" || NQNc || 00h || NQNh)
//! Ca             = C                         with the NULL group
//!                = HMAC(H(g^xy mod p), C)    with an FFDHE group
//! ```
//!
//! Kh' and Kc' are the host's and the controller's secrets transformed for
//! the host's and the subsystem's NQN ([`crate::DhchapSecret::transformed`]);
//! S and T_ID are little-endian, SC_C one byte.

use crate::hash::HashFn;
use crate::secret::DhchapSecret;

/// Whose response: the host's or the controller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Host,
    Controller,
}

/// What one response is computed over.
pub(crate) struct Exchange<'a> {
    pub hash: HashFn,
    /// The transformed key of the side answering.
    pub key: &'a [u8],
    /// The (augmented) challenge.
    pub challenge: &'a [u8],
    pub seqnum: u32,
    pub t_id: u16,
    pub sc_c: u8,
    pub hostnqn: &'a str,
    pub subnqn: &'a str,
}

/// The response of `side` to the exchange.
pub(crate) fn response(side: Side, x: &Exchange<'_>) -> Vec<u8> {
    let (label, first, second): (&[u8], &str, &str) = match side {
        Side::Host => (b"HostHost", x.hostnqn, x.subnqn),
        Side::Controller => (b"Controller", x.subnqn, x.hostnqn),
    };
    x.hash.hmac(
        x.key,
        &[
            x.challenge,
            &x.seqnum.to_le_bytes(),
            &x.t_id.to_le_bytes(),
            &[x.sc_c],
            label,
            first.as_bytes(),
            &[0],
            second.as_bytes(),
        ],
    )
}

/// One transaction's context: everything a response covers but the
/// challenge, its sequence number and the key.
pub(crate) struct Transaction<'a> {
    pub hash: HashFn,
    pub t_id: u16,
    pub hostnqn: &'a str,
    pub subnqn: &'a str,
    /// The DH session key; `None` with the NULL group.
    pub session: Option<&'a [u8]>,
}

impl Transaction<'_> {
    /// The response `side` owes to `challenge` and `seqnum`: `secret`
    /// transformed for that side's NQN, the challenge augmented with the
    /// session key.
    pub(crate) fn response(&self, side: Side, secret: &DhchapSecret, challenge: &[u8], seqnum: u32) -> Vec<u8> {
        let key = secret.transformed(if side == Side::Host { self.hostnqn } else { self.subnqn });
        let aug = augment(self.hash, self.session, challenge);
        let x = Exchange {
            hash: self.hash,
            key: &key,
            challenge: &aug,
            seqnum,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: self.hostnqn,
            subnqn: self.subnqn,
        };
        response(side, &x)
    }
}

/// The challenge augmented with the session key, or as it is without one.
pub(crate) fn augment(hash: HashFn, session: Option<&[u8]>, challenge: &[u8]) -> Vec<u8> {
    match session {
        None => challenge.to_vec(),
        Some(s) => hash.hmac(&hash.digest(s), &[challenge]),
    }
}

/// A random nonzero sequence number.
pub(crate) fn seqnum() -> u32 {
    loop {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).expect("the OS random source failed");
        let s = u32::from_le_bytes(b);
        if s != 0 {
            return s;
        }
    }
}

/// `n` random bytes (a challenge).
pub(crate) fn challenge(n: usize) -> Vec<u8> {
    let mut c = vec![0; n];
    getrandom::fill(&mut c).expect("the OS random source failed");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_cover_every_field_in_order() {
        let x = Exchange {
            hash: HashFn::Sha256,
            key: b"k",
            challenge: &[0xCC; 32],
            seqnum: 0x01020304,
            t_id: 0x0506,
            sc_c: 0,
            hostnqn: "nqn.h",
            subnqn: "nqn.s",
        };
        let mut flat = vec![0xCC; 32];
        flat.extend_from_slice(&[4, 3, 2, 1, 6, 5, 0]);
        flat.extend_from_slice(b"HostHostnqn.h\0nqn.s");
        assert_eq!(response(Side::Host, &x), HashFn::Sha256.hmac(b"k", &[&flat]));
        let mut flat = vec![0xCC; 32];
        flat.extend_from_slice(&[4, 3, 2, 1, 6, 5, 0]);
        flat.extend_from_slice(b"Controllernqn.s\0nqn.h");
        assert_eq!(response(Side::Controller, &x), HashFn::Sha256.hmac(b"k", &[&flat]));
        // Each input matters.
        let other = Exchange { t_id: 0x0507, ..x };
        assert_ne!(response(Side::Host, &other), response(Side::Host, &x));
    }

    #[test]
    fn augmenting_keys_the_hmac_with_the_hashed_session_key() {
        let c = [7u8; 48];
        assert_eq!(augment(HashFn::Sha384, None, &c), c.to_vec());
        let s = [9u8; 256];
        assert_eq!(augment(HashFn::Sha384, Some(&s), &c), HashFn::Sha384.hmac(&HashFn::Sha384.digest(&s), &[&c]));
    }
}
