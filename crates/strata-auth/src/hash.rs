//! The hash functions of DH-HMAC-CHAP (NVMe Base 2.0, figure 187) and the
//! HMAC and digest over each.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};

/// A hash function DH-HMAC-CHAP can use; the discriminant is its ID on the
/// wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashFn {
    /// SHA-256 (ID 01h), 32-byte output.
    Sha256 = 1,
    /// SHA-384 (ID 02h), 48-byte output.
    Sha384 = 2,
    /// SHA-512 (ID 03h), 64-byte output.
    Sha512 = 3,
}

impl HashFn {
    /// All three, weakest first: the order a host offers them in.
    pub const ALL: [HashFn; 3] = [HashFn::Sha256, HashFn::Sha384, HashFn::Sha512];

    /// The function with wire ID `id`.
    pub fn from_id(id: u8) -> Option<HashFn> {
        HashFn::ALL.into_iter().find(|h| h.id() == id)
    }

    /// The wire ID.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Output length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            HashFn::Sha256 => 32,
            HashFn::Sha384 => 48,
            HashFn::Sha512 => 64,
        }
    }

    /// The name `nvme-cli` and Linux use (`hmac(sha256)` is `sha256` here).
    pub fn name(self) -> &'static str {
        match self {
            HashFn::Sha256 => "sha256",
            HashFn::Sha384 => "sha384",
            HashFn::Sha512 => "sha512",
        }
    }

    /// HMAC keyed with `key` over the concatenation of `parts`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes keys of any length: new_from_slice cannot fail.
            let Ok(mut m) = <M as KeyInit>::new_from_slice(key) else { unreachable!("HMAC accepts any key length") };
            for p in parts {
                m.update(p);
            }
            m.finalize().into_bytes().to_vec()
        }
        match self {
            HashFn::Sha256 => run::<Hmac<Sha256>>(key, parts),
            HashFn::Sha384 => run::<Hmac<Sha384>>(key, parts),
            HashFn::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }

    /// The plain digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            HashFn::Sha256 => Sha256::digest(data).to_vec(),
            HashFn::Sha384 => Sha384::digest(data).to_vec(),
            HashFn::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

impl std::fmt::Display for HashFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for HashFn {
    type Err = String;

    fn from_str(s: &str) -> Result<HashFn, String> {
        let s = s.strip_prefix("hmac(").and_then(|s| s.strip_suffix(')')).unwrap_or(s);
        HashFn::ALL
            .into_iter()
            .find(|h| h.name() == s)
            .ok_or_else(|| format!("hash {s:?}: expected sha256, sha384 or sha512"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 ("Jefe").
    #[test]
    fn hmac_matches_rfc_4231() {
        let parts: [&[u8]; 2] = [b"what do ya want ", b"for nothing?"];
        assert_eq!(
            hex(&HashFn::Sha256.hmac(b"Jefe", &parts)),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&HashFn::Sha512.hmac(b"Jefe", &parts)),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
             9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
        assert_eq!(HashFn::Sha384.hmac(b"k", &[]).len(), 48);
    }

    #[test]
    fn ids_names_and_lengths() {
        for h in HashFn::ALL {
            assert_eq!(HashFn::from_id(h.id()), Some(h));
            assert_eq!(h.name().parse::<HashFn>(), Ok(h));
            assert_eq!(format!("hmac({h})").parse::<HashFn>(), Ok(h));
            assert_eq!(h.digest(b"").len(), h.output_len());
        }
        assert_eq!(HashFn::from_id(0), None);
        assert!("md5".parse::<HashFn>().is_err());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
