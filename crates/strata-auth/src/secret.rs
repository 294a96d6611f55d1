//! Keys in the NVMe interchange formats `nvme gen-dhchap-key` and `nvme
//! gen-tls-key` print (NVMe Base 2.0, section 8.13.5.8; NVMe/TCP 1.0,
//! section 3.6.1.5):
//!
//! ```text
//! DHHC-1:HH:BASE64:        a DH-HMAC-CHAP secret
//! NVMeTLSkey-1:HH:BASE64:  a TLS pre-shared key
//! ```
//!
//! `BASE64` holds the key followed by the CRC-32 (IEEE) of the key,
//! little-endian. For a DH-HMAC-CHAP secret `HH` names the hash that
//! transforms the key before use (00: none, 01-03: SHA-256/384/512) and
//! the key is 32, 48 or 64 bytes; for a TLS PSK `HH` names the PSK's hash
//! (01: SHA-256, 32 bytes; 02: SHA-384, 48 bytes).
//!
//! `Debug` never shows key bytes; the interchange text is available only
//! through [`DhchapSecret::to_interchange`] and [`TlsPsk::to_interchange`].

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::hash::HashFn;

/// The label appended to the NQN when a secret is transformed.
const TRANSFORM_LABEL: &[u8] = b"NVMe-over-Fabrics";

/// Why a key's text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFormatError {
    /// Not `PREFIX:HH:BASE64:`.
    #[error("not a key of the form {0}:HH:BASE64: (as nvme gen-dhchap-key / gen-tls-key print)")]
    Shape(&'static str),
    /// `HH` names no hash this format allows.
    #[error("hash indicator {0:?} is not one of {1}")]
    Hash(String, &'static str),
    /// The base64 part does not decode.
    #[error("the key's base64 does not decode")]
    Base64,
    /// The key has a length the format does not allow.
    #[error("a {got}-byte key; this format takes {allowed}")]
    Length {
        /// Bytes decoded, less the CRC.
        got: usize,
        /// The lengths allowed.
        allowed: &'static str,
    },
    /// The CRC-32 after the key does not match it.
    #[error("the key's CRC-32 does not match (mistyped or truncated key)")]
    Crc,
}

/// Splits `PREFIX:HH:BASE64:` and checks the CRC; returns `HH` and the key.
fn parse(text: &str, prefix: &'static str) -> Result<(u8, Vec<u8>), KeyFormatError> {
    let text = text.trim();
    let mut it = text.split(':');
    let (Some(p), Some(hh), Some(b64), Some(""), None) = (it.next(), it.next(), it.next(), it.next(), it.next()) else {
        return Err(KeyFormatError::Shape(prefix));
    };
    if p != prefix || hh.len() != 2 {
        return Err(KeyFormatError::Shape(prefix));
    }
    let hh = u8::from_str_radix(hh, 16).map_err(|_| KeyFormatError::Hash(hh.to_owned(), "00-03"))?;
    let raw = STANDARD.decode(b64).map_err(|_| KeyFormatError::Base64)?;
    let Some(split) = raw.len().checked_sub(4) else {
        return Err(KeyFormatError::Length { got: 0, allowed: "32, 48 or 64 bytes" });
    };
    let (key, crc) = raw.split_at(split);
    if crc32fast::hash(key).to_le_bytes() != crc {
        return Err(KeyFormatError::Crc);
    }
    Ok((hh, key.to_vec()))
}

fn format(prefix: &str, hh: u8, key: &[u8]) -> String {
    let mut raw = key.to_vec();
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    format!("{prefix}:{hh:02x}:{}:", STANDARD.encode(raw))
}

fn random(n: usize) -> Vec<u8> {
    let mut key = vec![0; n];
    // The OS random source failing is not something to serve through.
    getrandom::fill(&mut key).expect("the OS random source failed");
    key
}

/// A DH-HMAC-CHAP secret.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    /// The hash that transforms the key before use; `None` for `00`.
    transform: Option<HashFn>,
    key: Vec<u8>,
}

impl std::fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DhchapSecret({} bytes, transform {:?})", self.key.len(), self.transform)
    }
}

impl DhchapSecret {
    /// Parses `DHHC-1:HH:BASE64:`.
    pub fn parse(text: &str) -> Result<DhchapSecret, KeyFormatError> {
        let (hh, key) = parse(text, "DHHC-1")?;
        let transform = match hh {
            0 => None,
            id => Some(HashFn::from_id(id).ok_or(KeyFormatError::Hash(format!("{hh:02x}"), "00-03"))?),
        };
        if ![32, 48, 64].contains(&key.len()) {
            return Err(KeyFormatError::Length { got: key.len(), allowed: "32, 48 or 64 bytes" });
        }
        Ok(DhchapSecret { transform, key })
    }

    /// A new random secret of the transform's length (32 bytes without one),
    /// as `nvme gen-dhchap-key --hmac=N` makes.
    pub fn generate(transform: Option<HashFn>) -> DhchapSecret {
        DhchapSecret { transform, key: random(transform.map_or(32, HashFn::output_len)) }
    }

    /// The interchange text.
    pub fn to_interchange(&self) -> String {
        format("DHHC-1", self.transform.map_or(0, HashFn::id), &self.key)
    }

    /// The key to use for the entity named `nqn` (NVMe Base 2.0, section
    /// 8.13.5.8): HMAC over `nqn || "NVMe-over-Fabrics"` keyed with the
    /// secret, or the secret itself without a transform.
    pub fn transformed(&self, nqn: &str) -> Vec<u8> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), TRANSFORM_LABEL]),
        }
    }

    /// The transform hash, `None` for `00`.
    pub fn transform(&self) -> Option<HashFn> {
        self.transform
    }
}

/// A TLS pre-shared key in the NVMe interchange format.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPsk {
    hash: HashFn,
    key: Vec<u8>,
}

impl std::fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsPsk({}, {} bytes)", self.hash, self.key.len())
    }
}

impl TlsPsk {
    /// Parses `NVMeTLSkey-1:HH:BASE64:`.
    pub fn parse(text: &str) -> Result<TlsPsk, KeyFormatError> {
        let (hh, key) = parse(text, "NVMeTLSkey-1")?;
        let hash = match hh {
            1 => HashFn::Sha256,
            2 => HashFn::Sha384,
            _ => return Err(KeyFormatError::Hash(format!("{hh:02x}"), "01 (SHA-256) or 02 (SHA-384)")),
        };
        if key.len() != hash.output_len() {
            return Err(KeyFormatError::Length {
                got: key.len(),
                allowed: if hash == HashFn::Sha256 { "32 bytes with 01" } else { "48 bytes with 02" },
            });
        }
        Ok(TlsPsk { hash, key })
    }

    /// A new random PSK for `hash` (SHA-256 or SHA-384).
    pub fn generate(hash: HashFn) -> TlsPsk {
        let hash = if hash == HashFn::Sha512 { HashFn::Sha384 } else { hash };
        TlsPsk { hash, key: random(hash.output_len()) }
    }

    /// The interchange text.
    pub fn to_interchange(&self) -> String {
        format("NVMeTLSkey-1", self.hash.id(), &self.key)
    }

    /// The PSK's hash.
    pub fn hash(&self) -> HashFn {
        self.hash
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed by nvme-cli 2.3 for the secret 00 01 .. 1F: `nvme
    /// gen-dhchap-key --secret=000102..1f --hmac=0`, and with `--hmac=1
    /// --nqn=nqn.x`, where nvme-cli prints the secret already transformed
    /// for that NQN (libnvme's `nvme_gen_dhchap_key`).
    const NVME_CLI_PLAIN: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const NVME_CLI_SHA256: &str = "DHHC-1:01:s58riWX0tutyq+sZhUpTGydCrEosXGCydo5TV2d3t32YRnW5:";

    #[test]
    fn keys_from_nvme_cli_parse_and_print_back() {
        let counting: Vec<u8> = (0..32).collect();
        let plain = DhchapSecret::parse(NVME_CLI_PLAIN).unwrap();
        assert_eq!((plain.transform(), plain.key.clone()), (None, counting.clone()));
        assert_eq!(plain.to_interchange(), NVME_CLI_PLAIN);
        let sha = DhchapSecret::parse(NVME_CLI_SHA256).unwrap();
        assert_eq!(sha.transform(), Some(HashFn::Sha256));
        assert_eq!(
            sha.key,
            HashFn::Sha256.hmac(&counting, &[b"nqn.x", TRANSFORM_LABEL]),
            "libnvme's transform is ours"
        );
        assert_eq!(sha.to_interchange(), NVME_CLI_SHA256);
        for t in [None, Some(HashFn::Sha256), Some(HashFn::Sha384), Some(HashFn::Sha512)] {
            let k = DhchapSecret::generate(t);
            let text = k.to_interchange();
            assert!(text.starts_with(&format!("DHHC-1:{:02x}:", t.map_or(0, HashFn::id))), "{text}");
            assert_eq!(DhchapSecret::parse(&text), Ok(k.clone()));
            assert_eq!(k.transformed("nqn.x").len(), t.map_or(32, HashFn::output_len));
            assert!(!format!("{k:?}").contains(&text[10..20]), "Debug shows no key bytes");
        }
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        let good = DhchapSecret::generate(Some(HashFn::Sha256)).to_interchange();
        assert_eq!(DhchapSecret::parse("hunter2"), Err(KeyFormatError::Shape("DHHC-1")));
        assert_eq!(DhchapSecret::parse(&good.replace("DHHC-1", "DHHC-2")), Err(KeyFormatError::Shape("DHHC-1")));
        assert!(matches!(DhchapSecret::parse(&good.replacen(":01:", ":07:", 1)), Err(KeyFormatError::Hash(..))));
        assert_eq!(DhchapSecret::parse(&good.replacen(":01:", ":01:!!", 1)), Err(KeyFormatError::Base64));
        // One character of the base64 changed: the CRC catches it.
        let mut chars: Vec<char> = good.chars().collect();
        chars[12] = if chars[12] == 'A' { 'B' } else { 'A' };
        assert_eq!(DhchapSecret::parse(&chars.into_iter().collect::<String>()), Err(KeyFormatError::Crc));
        // A 16-byte key with a right CRC is still refused.
        assert!(matches!(
            DhchapSecret::parse(&format("DHHC-1", 1, &[7; 16])),
            Err(KeyFormatError::Length { got: 16, .. })
        ));
        assert!(matches!(DhchapSecret::parse("DHHC-1:00:AAA=:"), Err(KeyFormatError::Length { .. })));
    }

    /// RFC 4231 case 2 again, through the transform: HMAC-SHA-256 keyed
    /// with the secret over NQN || "NVMe-over-Fabrics".
    #[test]
    fn transform_is_hmac_over_nqn_and_label() {
        let k = DhchapSecret { transform: Some(HashFn::Sha256), key: b"Jefe".to_vec() };
        assert_eq!(
            k.transformed("what do ya want for nothing?"),
            HashFn::Sha256.hmac(b"Jefe", &[b"what do ya want for nothing?NVMe-over-Fabrics"])
        );
        let plain = DhchapSecret { transform: None, key: vec![9; 32] };
        assert_eq!(plain.transformed("any"), vec![9; 32]);
    }

    #[test]
    fn tls_psks_round_trip_and_check_lengths() {
        for h in [HashFn::Sha256, HashFn::Sha384] {
            let k = TlsPsk::generate(h);
            let text = k.to_interchange();
            assert!(text.starts_with(&format!("NVMeTLSkey-1:0{}:", h.id())));
            assert_eq!(TlsPsk::parse(&text), Ok(k));
        }
        assert!(matches!(TlsPsk::parse(&format("NVMeTLSkey-1", 1, &[1; 48])), Err(KeyFormatError::Length { .. })));
        assert!(matches!(TlsPsk::parse(&format("NVMeTLSkey-1", 3, &[1; 64])), Err(KeyFormatError::Hash(..))));
        assert_eq!(
            TlsPsk::parse(&DhchapSecret::generate(None).to_interchange()),
            Err(KeyFormatError::Shape("NVMeTLSkey-1"))
        );
    }
}
