//! TLS PSKs for NVMe/TCP (NVMe/TCP Transport Specification 1.0, section
//! 3.6.1): the PSK identity a host presents in its ClientHello, and the
//! derivation from a configured PSK (`NVMeTLSkey-1:HH:...`, as `nvme
//! gen-tls-key` prints it) to the TLS PSK both sides feed to TLS 1.3.
//!
//! # The derivation
//!
//! 1. Retained PSK = HKDF-Expand-Label(HKDF-Extract(0, configured),
//!    "HostNQN", host NQN, L), with the hash the key's `HH` names (01
//!    SHA-256, 02 SHA-384); L is the key's length.
//! 2. TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, retained),
//!    "nvme-tls-psk", context, L), where the context is the identity
//!    itself for identity version 0 (`NVMe0R01 <hostnqn> <subnqn>`) and
//!    `"<HH> <digest>"` for version 1 (`NVMe1R01 <hostnqn> <subnqn>
//!    <digest>`), the digest being the base64 HMAC of `"<hostnqn>
//!    <subnqn> NVMe-over-Fabrics"` under the retained PSK.
//!
//! libnvme (which `nvme gen-tls-key --insert` and `nvme connect --tls`
//! use to put the TLS PSK in the kernel's keyring) up to at least 1.13
//! (nvme-cli 2.13, Debian trixie) builds the HKDF label without the
//! label's and the context's length bytes and writes L little-endian:
//! [`Derivation::Compat`], the default here, pinned by a test against the
//! digest libnvme 1.13 printed for a known key. Later libnvme builds it as
//! RFC 8446 section 7.1 says and keeps the old one behind `nvme
//! gen-tls-key --compat`: [`Derivation::Rfc8446`].

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::hash::HashFn;
use crate::secret::TlsPsk;

/// Which HKDF-Expand-Label construction derives the keys (see the module
/// doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Derivation {
    /// What libnvme 1.13 and earlier do (the default; later libnvme's
    /// `--compat`).
    #[default]
    Compat,
    /// RFC 8446 section 7.1, as later libnvme does by default.
    Rfc8446,
}

impl std::str::FromStr for Derivation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "compat" => Ok(Derivation::Compat),
            "rfc8446" => Ok(Derivation::Rfc8446),
            other => Err(format!("unknown TLS PSK derivation {other:?} (compat or rfc8446)")),
        }
    }
}

/// A PSK identity (NVMe/TCP 1.0, section 3.6.1.3): `NVMe<v>R<HH> <hostnqn>
/// <subnqn>[ <digest>]`. Only retained PSKs (`R`) are accepted; generated
/// ones (`G`, from secure channel concatenation) are not supported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PskIdentity {
    /// 0 (no digest) or 1 (with digest).
    pub version: u8,
    /// The hash of the TLS cipher suite the PSK is for.
    pub hash: HashFn,
    /// The host NQN.
    pub hostnqn: String,
    /// The subsystem NQN.
    pub subnqn: String,
    /// The PSK digest (version 1 only).
    pub digest: Option<String>,
}

/// Why a PSK identity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// Not `NVMe<v><R|G><HH> <hostnqn> <subnqn>[ <digest>]`.
    #[error("PSK identity is not of the form 'NVMe<v>R<HH> <hostnqn> <subnqn>[ <digest>]'")]
    Shape,
    /// A version other than 0 and 1, or a digest that does not fit it.
    #[error("PSK identity version {0} is not supported (0 and 1 are)")]
    Version(u8),
    /// A generated PSK (`G`): secure channel concatenation.
    #[error("generated PSKs (secure channel concatenation) are not supported")]
    Generated,
    /// A hash other than 01 (SHA-256) and 02 (SHA-384).
    #[error("PSK identity hash {0:02} is not supported (01 SHA-256, 02 SHA-384)")]
    Hash(u8),
    /// The configured PSK is for another hash than the identity names.
    #[error("the host's PSK is for {key}, the identity asks for {identity}")]
    HashMismatch {
        /// The configured PSK's hash.
        key: &'static str,
        /// The identity's.
        identity: &'static str,
    },
    /// A version 1 identity whose digest is not the one of the host's PSK.
    #[error("the PSK digest in the identity is not the one of the host's PSK")]
    Digest,
}

impl PskIdentity {
    /// Parses the identity bytes a ClientHello carried.
    ///
    /// # Errors
    ///
    /// [`IdentityError`] saying what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<PskIdentity, IdentityError> {
        let text = std::str::from_utf8(bytes).map_err(|_| IdentityError::Shape)?;
        let text = text.trim_end_matches('\0');
        let mut fields = text.split(' ');
        let head = fields.next().ok_or(IdentityError::Shape)?.as_bytes();
        if head.len() != 8 || &head[..4] != b"NVMe" || !head[4].is_ascii_digit() {
            return Err(IdentityError::Shape);
        }
        let version = head[4] - b'0';
        match head[5] {
            b'R' => {}
            b'G' => return Err(IdentityError::Generated),
            _ => return Err(IdentityError::Shape),
        }
        let hh = std::str::from_utf8(&head[6..8])
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u8>().ok())
            .ok_or(IdentityError::Shape)?;
        let hash = match hh {
            1 => HashFn::Sha256,
            2 => HashFn::Sha384,
            other => return Err(IdentityError::Hash(other)),
        };
        let nqn = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned).ok_or(IdentityError::Shape);
        let hostnqn = nqn(fields.next())?;
        let subnqn = nqn(fields.next())?;
        let digest = fields.next().map(str::to_owned);
        if fields.next().is_some() {
            return Err(IdentityError::Shape);
        }
        match (version, &digest) {
            (0, None) => {}
            (1, Some(d)) if !d.is_empty() => {}
            (0 | 1, _) => return Err(IdentityError::Shape),
            (v, _) => return Err(IdentityError::Version(v)),
        }
        Ok(PskIdentity { version, hash, hostnqn, subnqn, digest })
    }
}

impl std::fmt::Display for PskIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NVMe{}R{:02} {} {}", self.version, self.hash.id(), self.hostnqn, self.subnqn)?;
        if let Some(d) = &self.digest {
            write!(f, " {d}")?;
        }
        Ok(())
    }
}

/// HKDF-Extract with a salt of zeros (RFC 5869 section 2.2).
fn extract(hash: HashFn, ikm: &[u8]) -> Vec<u8> {
    hash.hmac(&vec![0u8; hash.output_len()], &[ikm])
}

/// HKDF-Expand (RFC 5869 section 2.3) to `len` bytes (at most 255 blocks).
fn expand(hash: HashFn, prk: &[u8], info: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut t: Vec<u8> = Vec::new();
    let mut counter = 1u8;
    while out.len() < len {
        t = hash.hmac(prk, &[&t, info, &[counter]]);
        out.extend_from_slice(&t);
        counter = counter.wrapping_add(1);
    }
    out.truncate(len);
    out
}

/// The HKDF info of HKDF-Expand-Label(`label`, `context`, `len`) in the
/// construction `d` (label without the "tls13 " prefix). Lengths that do
/// not fit their byte wrap, as libnvme's do.
fn label_info(d: Derivation, label: &str, context: &[u8], len: usize) -> Vec<u8> {
    let full = format!("tls13 {label}");
    let mut info = Vec::with_capacity(4 + full.len() + context.len());
    match d {
        Derivation::Rfc8446 => {
            // L as a big-endian u16.
            info.extend_from_slice(&[(len >> 8) as u8, len as u8]);
            info.push(full.len() as u8);
            info.extend_from_slice(full.as_bytes());
            info.push(context.len() as u8);
        }
        Derivation::Compat => {
            // L as a little-endian u16.
            info.extend_from_slice(&[len as u8, (len >> 8) as u8]);
            info.extend_from_slice(full.as_bytes());
        }
    }
    info.extend_from_slice(context);
    info
}

fn expand_label(hash: HashFn, d: Derivation, secret: &[u8], label: &str, context: &[u8], len: usize) -> Vec<u8> {
    expand(hash, &extract(hash, secret), &label_info(d, label, context, len), len)
}

impl TlsPsk {
    /// The retained PSK for `hostnqn` (step 1 of the module doc).
    pub fn retained(&self, hostnqn: &str, d: Derivation) -> Vec<u8> {
        expand_label(self.hash(), d, self.key(), "HostNQN", hostnqn.as_bytes(), self.key().len())
    }

    /// The PSK digest of a version 1 identity.
    fn digest(&self, retained: &[u8], hostnqn: &str, subnqn: &str) -> String {
        let mac =
            self.hash().hmac(retained, &[hostnqn.as_bytes(), b" ", subnqn.as_bytes(), b" ", b"NVMe-over-Fabrics"]);
        STANDARD.encode(mac)
    }

    /// The identity a host with this PSK presents to `subnqn`.
    pub fn identity(&self, hostnqn: &str, subnqn: &str, version: u8, d: Derivation) -> PskIdentity {
        let digest = (version == 1).then(|| self.digest(&self.retained(hostnqn, d), hostnqn, subnqn));
        PskIdentity { version, hash: self.hash(), hostnqn: hostnqn.into(), subnqn: subnqn.into(), digest }
    }

    /// The TLS PSK for `identity` (step 2 of the module doc), after
    /// checking that the identity fits this PSK (its hash, and for version
    /// 1 its digest).
    ///
    /// # Errors
    ///
    /// [`IdentityError::HashMismatch`] or [`IdentityError::Digest`].
    pub fn tls_psk(&self, identity: &PskIdentity, d: Derivation) -> Result<Vec<u8>, IdentityError> {
        if identity.hash != self.hash() {
            return Err(IdentityError::HashMismatch { key: self.hash().name(), identity: identity.hash.name() });
        }
        let retained = self.retained(&identity.hostnqn, d);
        let context = match (identity.version, &identity.digest) {
            (0, _) => identity.to_string().into_bytes(),
            (1, Some(digest)) => {
                let ours = self.digest(&retained, &identity.hostnqn, &identity.subnqn);
                if !bool::from(subtle::ConstantTimeEq::ct_eq(ours.as_bytes(), digest.as_bytes())) {
                    return Err(IdentityError::Digest);
                }
                format!("{:02} {digest}", identity.hash.id()).into_bytes()
            }
            (v, _) => return Err(IdentityError::Version(v)),
        };
        Ok(expand_label(self.hash(), d, &retained, "nvme-tls-psk", &context, self.key().len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    const SUB: &str = "nqn.2026-12.io.strata:probe";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn hkdf_matches_rfc5869_test_case_3() {
        // RFC 5869 A.3: SHA-256, zero-length salt and info.
        let ikm = [0x0bu8; 22];
        let prk = extract(HashFn::Sha256, &ikm);
        assert_eq!(hex(&prk), "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04");
        let okm = expand(HashFn::Sha256, &prk, &[], 42);
        assert_eq!(hex(&okm), "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8");
    }

    #[test]
    fn the_digest_is_the_one_libnvme_computed_for_a_known_key() {
        // `nvme gen-tls-key --secret=000102..1f --hmac=1 --identity=1
        // --insert` (nvme-cli 2.13, libnvme 1.13) printed this key and put
        // this identity in the keyring.
        let psk = TlsPsk::parse("NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:").unwrap();
        assert_eq!(psk.key(), (0u8..32).collect::<Vec<_>>());
        let id = psk.identity(HOST, SUB, 1, Derivation::Compat);
        assert_eq!(id.to_string(), format!("NVMe1R01 {HOST} {SUB} arsdj6JD3IFJyk+3MjsXR7FmzCDxpVzTmCWWghpVuFY="));
        // The RFC 8446 construction gives another retained key.
        assert_ne!(psk.identity(HOST, SUB, 1, Derivation::Rfc8446), id);
        assert_ne!(psk.retained(HOST, Derivation::Rfc8446), psk.retained(HOST, Derivation::Compat));
    }

    #[test]
    fn identities_parse_and_print_back() {
        for text in [format!("NVMe0R01 {HOST} {SUB}"), format!("NVMe1R02 {HOST} {SUB} abc=")] {
            let id = PskIdentity::parse(text.as_bytes()).unwrap();
            assert_eq!(id.to_string(), text);
        }
        let id = PskIdentity::parse(format!("NVMe0R01 {HOST} {SUB}\0").as_bytes()).unwrap();
        assert_eq!((id.version, id.hash, id.hostnqn.as_str()), (0, HashFn::Sha256, HOST));
        for (bad, err) in [
            ("", IdentityError::Shape),
            ("NVMe0R01", IdentityError::Shape),
            ("NVMe0R01 host", IdentityError::Shape),
            ("NVMe0R01 host sub extra", IdentityError::Shape),
            ("NVMe1R01 host sub", IdentityError::Shape),
            ("NVMe2R01 host sub d", IdentityError::Version(2)),
            ("NVMe0G01 host sub", IdentityError::Generated),
            ("NVMe0R03 host sub", IdentityError::Hash(3)),
            ("NVMe0Rx1 host sub", IdentityError::Shape),
            ("nvme0R01 host sub", IdentityError::Shape),
            ("NVMe0R01  sub", IdentityError::Shape),
        ] {
            assert_eq!(PskIdentity::parse(bad.as_bytes()), Err(err), "{bad:?}");
        }
        assert_eq!(PskIdentity::parse(&[0xff, 0xfe]), Err(IdentityError::Shape));
    }

    #[test]
    fn a_version_1_identity_carries_the_digest_the_psk_checks() {
        let psk = TlsPsk::generate(HashFn::Sha256);
        let id = psk.identity(HOST, SUB, 1, Derivation::Rfc8446);
        assert_eq!(id.digest.as_ref().map(String::len), Some(44));
        let parsed = PskIdentity::parse(id.to_string().as_bytes()).unwrap();
        assert!(psk.tls_psk(&parsed, Derivation::Rfc8446).is_ok());
        let mut forged = parsed.clone();
        forged.digest = Some(STANDARD.encode([7u8; 32]));
        assert_eq!(psk.tls_psk(&forged, Derivation::Rfc8446), Err(IdentityError::Digest));
        // Another host's identity gives another key.
        let other = psk.identity("nqn.2014-08.org.nvmexpress:uuid:other", SUB, 0, Derivation::Rfc8446);
        let mine = psk.identity(HOST, SUB, 0, Derivation::Rfc8446);
        assert_ne!(psk.tls_psk(&other, Derivation::Rfc8446), psk.tls_psk(&mine, Derivation::Rfc8446));
        // A SHA-384 identity does not take a SHA-256 key.
        let mut wrong = mine;
        wrong.hash = HashFn::Sha384;
        assert!(matches!(psk.tls_psk(&wrong, Derivation::Rfc8446), Err(IdentityError::HashMismatch { .. })));
    }
}
