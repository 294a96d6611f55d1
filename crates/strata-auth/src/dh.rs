//! Diffie-Hellman over the RFC 7919 FFDHE groups, as DH-HMAC-CHAP uses it
//! to augment its challenges: each side sends `g^x mod p` (g = 2) as a
//! big-endian value as long as `p`, and both hash the shared `g^xy mod p`,
//! also padded to the length of `p`, into the session key.
//!
//! Private exponents are random, of [`DhGroup::exponent_bits`]: above the
//! minimum RFC 7919 (section 5.2) gives for each group (225 bits for
//! ffdhe2048 up to 400 for ffdhe8192), with a margin. A shorter exponent
//! is what makes the smaller groups cheap: each side computes two modular
//! exponentiations per transaction.

use std::sync::OnceLock;

use num_bigint::BigUint;

use crate::primes;

/// A DH group DH-HMAC-CHAP can use; the discriminant is its wire ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DhGroup {
    /// No DH exchange: the challenge is used as it is.
    Null = 0,
    /// ffdhe2048.
    Ffdhe2048 = 1,
    /// ffdhe3072.
    Ffdhe3072 = 2,
    /// ffdhe4096.
    Ffdhe4096 = 3,
    /// ffdhe6144.
    Ffdhe6144 = 4,
    /// ffdhe8192.
    Ffdhe8192 = 5,
}

/// Why a peer's DH value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DhError {
    /// Longer than the group's modulus.
    #[error("DH value of {got} bytes for a {group} group of {size}")]
    Length {
        /// Bytes received.
        got: usize,
        /// The group.
        group: DhGroup,
        /// Its modulus length.
        size: usize,
    },
    /// 0, 1, p - 1 or more: a value that would force a known shared secret.
    #[error("DH value outside 2..=p-2")]
    Range,
}

impl DhGroup {
    /// All six, NULL first, then by size: the order a host offers them in.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The group with wire ID `id`.
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    /// The wire ID.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The name Linux and nvme-cli use.
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Length of the modulus, and of every DH value, in bytes (0 for NULL).
    pub fn size(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    /// Bits of a private exponent in this group.
    pub fn exponent_bits(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 320,
            DhGroup::Ffdhe4096 => 384,
            DhGroup::Ffdhe6144 => 448,
            DhGroup::Ffdhe8192 => 512,
        }
    }

    fn hex(self) -> Option<&'static str> {
        match self {
            DhGroup::Null => None,
            DhGroup::Ffdhe2048 => Some(primes::FFDHE2048),
            DhGroup::Ffdhe3072 => Some(primes::FFDHE3072),
            DhGroup::Ffdhe4096 => Some(primes::FFDHE4096),
            DhGroup::Ffdhe6144 => Some(primes::FFDHE6144),
            DhGroup::Ffdhe8192 => Some(primes::FFDHE8192),
        }
    }

    /// The modulus; `None` for NULL.
    fn prime(self) -> Option<&'static BigUint> {
        static PRIMES: [OnceLock<BigUint>; 6] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let hex = self.hex()?;
        Some(PRIMES[usize::from(self.id())].get_or_init(|| {
            BigUint::parse_bytes(hex.as_bytes(), 16).expect("the embedded primes are hex (pinned by a test)")
        }))
    }
}

impl std::fmt::Display for DhGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DhGroup {
    type Err = String;

    fn from_str(s: &str) -> Result<DhGroup, String> {
        DhGroup::ALL.into_iter().find(|g| g.name() == s).ok_or_else(|| {
            format!("DH group {s:?}: expected null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192")
        })
    }
}

/// One side's ephemeral key pair in a group other than NULL.
pub struct Ephemeral {
    group: DhGroup,
    p: &'static BigUint,
    x: BigUint,
    public: Vec<u8>,
}

impl std::fmt::Debug for Ephemeral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ephemeral({})", self.group)
    }
}

fn padded(v: &BigUint, size: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0; size.saturating_sub(b.len())];
    out.extend_from_slice(&b);
    out
}

impl Ephemeral {
    /// A fresh key pair; `None` for the NULL group.
    pub fn generate(group: DhGroup) -> Option<Ephemeral> {
        let p = group.prime()?;
        let mut bytes = vec![0u8; group.exponent_bits() / 8];
        getrandom::fill(&mut bytes).expect("the OS random source failed");
        bytes[0] |= 0x80; // a full-size exponent
        let x = BigUint::from_bytes_be(&bytes);
        let public = padded(&BigUint::from(2u32).modpow(&x, p), group.size());
        Some(Ephemeral { group, p, x, public })
    }

    /// `g^x mod p`, as long as `p`.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret with the peer's value `peer`, as long as `p`.
    pub fn shared(&self, peer: &[u8]) -> Result<Vec<u8>, DhError> {
        let size = self.group.size();
        if peer.len() > size {
            return Err(DhError::Length { got: peer.len(), group: self.group, size });
        }
        let y = BigUint::from_bytes_be(peer);
        let one = BigUint::from(1u32);
        if y <= one || y >= self.p - &one {
            return Err(DhError::Range);
        }
        Ok(padded(&y.modpow(&self.x, self.p), size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// floor(e * 2^bits), from the series sum 1/k!.
    fn e_fixed(bits: usize) -> BigUint {
        let one = BigUint::from(1u32) << (bits + 64);
        let (mut sum, mut term, mut k) = (BigUint::ZERO, one, 0u32);
        while term != BigUint::ZERO {
            sum += &term;
            k += 1;
            term /= k;
        }
        sum >> 64
    }

    /// Each embedded prime is RFC 7919's: p = 2^b - 2^(b-64) +
    /// (floor(2^(b-130) e) + X) * 2^64 - 1 with the RFC's X.
    #[test]
    fn the_primes_are_rfc_7919s() {
        let x = [(DhGroup::Ffdhe2048, 560316u32), (DhGroup::Ffdhe3072, 2625351), (DhGroup::Ffdhe4096, 5736041)];
        let big = [(DhGroup::Ffdhe6144, 15705020u32), (DhGroup::Ffdhe8192, 10965728)];
        for (g, x) in x.into_iter().chain(big) {
            let b = g.size() * 8;
            let one = BigUint::from(1u32);
            let p = (&one << b) - (&one << (b - 64)) + ((e_fixed(b - 130) + x) << 64) - &one;
            assert_eq!(g.prime(), Some(&p), "{g}");
            assert_eq!(padded(&p, g.size()).len(), g.size());
        }
        assert!(DhGroup::Null.prime().is_none());
    }

    #[test]
    fn both_sides_reach_the_same_secret_and_bad_values_are_refused() {
        for g in [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072] {
            let (a, b) = (Ephemeral::generate(g).unwrap(), Ephemeral::generate(g).unwrap());
            assert_eq!(a.public().len(), g.size());
            let s = a.shared(b.public()).unwrap();
            assert_eq!(s, b.shared(a.public()).unwrap());
            assert_eq!(s.len(), g.size());
            assert_ne!(a.public(), b.public());
            assert_eq!(a.shared(&[]), Err(DhError::Range));
            assert_eq!(a.shared(&[1]), Err(DhError::Range));
            let p_minus_1 = padded(&(g.prime().unwrap() - 1u32), g.size());
            assert_eq!(a.shared(&p_minus_1), Err(DhError::Range));
            assert!(matches!(a.shared(&vec![1; g.size() + 1]), Err(DhError::Length { .. })));
        }
        assert!(Ephemeral::generate(DhGroup::Null).is_none());
    }

    #[test]
    fn ids_and_names() {
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(g.name().parse::<DhGroup>(), Ok(g));
        }
        assert_eq!(DhGroup::from_id(6), None);
    }
}
