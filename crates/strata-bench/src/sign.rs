//! Signed reports: Ed25519 keys, signing a report body, and verifying that
//! not one byte of a signed report changed since.
//!
//! # Signed file format
//!
//! A signed report is the report body (see [`crate::report`]) wrapped in an
//! envelope, written exactly as
//!
//! ```text
//! {"signature":{"algorithm":"ed25519","public_key":"<64 hex>","value":"<128 hex>"},
//! "signed":<BODY>}
//! ```
//!
//! followed by one `\n`, where `<BODY>` is the body's bytes verbatim (pretty
//! JSON, so `jq .signed` still reads the report). The signature is Ed25519
//! (RFC 8032, verified strictly) over [`SIGNING_CONTEXT`] followed by the
//! body bytes; the context keeps a report signature from being valid as
//! anything else signed with the same key.
//!
//! # Why there is no canonicalisation
//!
//! The signature covers the exact body bytes, located with
//! `serde_json::value::RawValue`, not a re-serialisation of parsed JSON:
//! reordered keys, changed whitespace or an equivalent escape in the body
//! are different bytes, so they fail. Everything outside the body is
//! checked by rebuilding the envelope from its parsed parts and requiring
//! the file to equal it byte for byte, so whitespace, extra keys or trailing
//! bytes outside the body fail too. The rule is therefore simple to state:
//! any change to the file makes `verify` fail.
//!
//! # Key files
//!
//! - secret: one line `strata-bench-ed25519-secret-key:<64 hex>` (the 32-byte
//!   seed), created with mode 0600; loading refuses a key file that group or
//!   others can read, as ssh does.
//! - public: one line `strata-bench-ed25519-public-key:<64 hex>`, written
//!   beside the secret key as `KEYFILE.pub`. A bare 64-hex string is
//!   accepted wherever a public key is expected.
//!
//! Keys come from the operating system through the `getrandom` crate, the
//! project's one random-bytes source.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Prefixed to the body bytes before signing.
pub const SIGNING_CONTEXT: &[u8] = b"strata-bench-report-v1\0";
/// First part of a secret key file.
pub const SECRET_KEY_TAG: &str = "strata-bench-ed25519-secret-key:";
/// First part of a public key file.
pub const PUBLIC_KEY_TAG: &str = "strata-bench-ed25519-public-key:";
const ALGORITHM: &str = "ed25519";

/// Decodes exactly `N` bytes of lower-case hex. Upper case is refused:
/// signing writes lower case, so an upper-case digit is a changed byte.
fn from_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// Why a key could not be made, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// keygen would overwrite a key.
    #[error("{path} exists; not overwriting a key (remove it first)")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a key of the expected kind.
    #[error("{what} is not a strata bench {kind} key: {reason}")]
    Format {
        /// File name or the text given.
        what: String,
        /// "secret" or "public".
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A secret key others can read.
    #[error("{path} is readable by group or others (mode {mode:o}); run chmod 600 {path}")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
}

/// An Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0.as_bytes()))
    }
}

impl PublicKey {
    /// Parses a public key file's text, or bare hex.
    ///
    /// # Errors
    ///
    /// [`KeyError::Format`] when it is neither, or not a valid point.
    pub fn parse(text: &str, what: &str) -> Result<PublicKey, KeyError> {
        let err = |reason: &str| KeyError::Format { what: what.into(), kind: "public", reason: reason.into() };
        let t = text.trim();
        if t.starts_with(SECRET_KEY_TAG) {
            return Err(err("this is a secret key; give the .pub file written beside it"));
        }
        let hex = t.strip_prefix(PUBLIC_KEY_TAG).unwrap_or(t);
        let bytes = from_hex::<32>(hex).ok_or_else(|| err("expected 64 lower-case hex digits"))?;
        VerifyingKey::from_bytes(&bytes).map(PublicKey).map_err(|_| err("not a valid Ed25519 public key"))
    }

    /// Reads a public key from a file, or, when `arg` is no file, parses
    /// it as hex.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the file cannot be read or holds no public key.
    pub fn load_or_parse(arg: &str) -> Result<PublicKey, KeyError> {
        let path = Path::new(arg);
        if path.exists() {
            let text =
                std::fs::read_to_string(path).map_err(|source| KeyError::Io { path: path.to_path_buf(), source })?;
            PublicKey::parse(&text, arg)
        } else {
            PublicKey::parse(arg, "the --pubkey value (no such file, and not hex)")
        }
    }

    /// The text of a public key file.
    pub fn to_file_text(&self) -> String {
        format!("{PUBLIC_KEY_TAG}{self}\n")
    }
}

/// An Ed25519 signing key (zeroed on drop by `ed25519-dalek`).
pub struct SecretKey(SigningKey);

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey(public {})", self.public())
    }
}

impl SecretKey {
    /// The key for a 32-byte seed (tests; deterministic).
    pub fn from_seed(seed: [u8; 32]) -> SecretKey {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// A new random key.
    ///
    /// # Errors
    ///
    /// [`KeyError::Io`] when the operating system's random source fails.
    pub fn generate() -> Result<SecretKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Io {
            path: "the operating system's random source (getrandom)".into(),
            source: e.into(),
        })?;
        let key = SecretKey::from_seed(seed);
        seed.fill(0);
        Ok(key)
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Parses a secret key file's text.
    ///
    /// # Errors
    ///
    /// [`KeyError::Format`] when it is not one.
    pub fn parse(text: &str, what: &str) -> Result<SecretKey, KeyError> {
        let err = |reason: &str| KeyError::Format { what: what.into(), kind: "secret", reason: reason.into() };
        let t = text.trim();
        if t.starts_with(PUBLIC_KEY_TAG) {
            return Err(err("this is a public key; signing needs the secret key file"));
        }
        let hex =
            t.strip_prefix(SECRET_KEY_TAG).ok_or_else(|| err(&format!("does not start with {SECRET_KEY_TAG}")))?;
        from_hex::<32>(hex).map(SecretKey::from_seed).ok_or_else(|| err("expected 64 lower-case hex digits"))
    }

    /// Reads a secret key file, refusing one that group or others can
    /// read.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the file cannot be read, is too open, or holds no
    /// secret key.
    pub fn load(path: &Path) -> Result<SecretKey, KeyError> {
        let io = |source| KeyError::Io { path: path.to_path_buf(), source };
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions { path: path.to_path_buf(), mode: mode & 0o7777 });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        SecretKey::parse(&text, &path.display().to_string())
    }

    /// Writes the key to `path` (mode 0600, never overwriting) and its
    /// public key to `path.pub`.
    ///
    /// # Errors
    ///
    /// [`KeyError::Exists`] when either file exists, [`KeyError::Io`] when
    /// writing fails.
    pub fn write_new(&self, path: &Path) -> Result<PathBuf, KeyError> {
        let mut pub_path = path.as_os_str().to_owned();
        pub_path.push(".pub");
        let pub_path = PathBuf::from(pub_path);
        for p in [path, &pub_path] {
            if p.exists() {
                return Err(KeyError::Exists { path: p.to_path_buf() });
            }
        }
        fn io(p: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
            move |source| KeyError::Io { path: p.to_path_buf(), source }
        }
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                KeyError::Exists { path: path.to_path_buf() }
            } else {
                io(path)(e)
            }
        })?;
        let text = format!("{SECRET_KEY_TAG}{}\n", hex::encode(self.0.as_bytes()));
        f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(io(path))?;
        std::fs::write(&pub_path, self.public().to_file_text()).map_err(io(&pub_path))?;
        Ok(pub_path)
    }
}

/// The `signature` object of a signed report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureBlock {
    algorithm: String,
    public_key: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedFile<'a> {
    signature: SignatureBlock,
    #[serde(borrow)]
    signed: &'a RawValue,
}

#[derive(Deserialize)]
struct Probe {
    signed: Option<serde::de::IgnoredAny>,
    signature: Option<serde::de::IgnoredAny>,
}

fn envelope(block: &SignatureBlock, body: &[u8]) -> Vec<u8> {
    // A struct of three strings always serializes.
    let block = serde_json::to_string(block).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + block.len() + 32);
    out.extend_from_slice(b"{\"signature\":");
    out.extend_from_slice(block.as_bytes());
    out.extend_from_slice(b",\n\"signed\":");
    out.extend_from_slice(body);
    out.extend_from_slice(b"}\n");
    out
}

/// Signs a report body; returns the bytes of the signed report file.
///
/// `body` must be one JSON value (a report's [`crate::Report::to_json`]);
/// trailing whitespace is dropped, since JSON cannot keep it inside the
/// envelope.
pub fn sign_report(body: &[u8], key: &SecretKey) -> Vec<u8> {
    let body = body.trim_ascii();
    let mut msg = Vec::with_capacity(SIGNING_CONTEXT.len() + body.len());
    msg.extend_from_slice(SIGNING_CONTEXT);
    msg.extend_from_slice(body);
    let sig = key.0.sign(&msg);
    let block = SignatureBlock {
        algorithm: ALGORITHM.into(),
        public_key: key.public().to_string(),
        value: hex::encode(sig.to_bytes()),
    };
    envelope(&block, body)
}

/// Why a report failed verification.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Not a JSON object (a changed byte often does this).
    #[error("the file is not a JSON report ({0}): it was damaged or changed")]
    NotJson(serde_json::Error),
    /// A report without a signature.
    #[error("the report is not signed (write it with --sign KEYFILE)")]
    Unsigned,
    /// The envelope has the wrong shape.
    #[error("the signed report's envelope is malformed: {0}")]
    Malformed(String),
    /// Something other than Ed25519.
    #[error("unsupported signature algorithm {0:?} (only ed25519)")]
    UnknownAlgorithm(String),
    /// The embedded key or signature is not valid hex of the right length.
    #[error("the embedded {0} is not valid: the signature block was changed")]
    BadEncoding(&'static str),
    /// Bytes outside the signed body differ from what signing wrote.
    #[error("the file was changed outside the signed body (first difference at byte {offset})")]
    NotCanonical {
        /// Offset of the first differing byte.
        offset: usize,
    },
    /// The signature does not match the body.
    #[error("BAD SIGNATURE: the signed report was changed after it was signed")]
    BadSignature,
    /// Signed, correctly, by someone else.
    #[error("signed by key {found}, not by the expected key {expected}")]
    WrongKey {
        /// The key asked for, hex.
        expected: String,
        /// The key that signed, hex.
        found: String,
    },
}

/// A report file, opened: the body bytes and who signed them.
#[derive(Debug)]
pub struct Opened<'a> {
    /// The report body.
    pub body: &'a [u8],
    /// The key whose valid signature covers `body`, or `None` if unsigned.
    pub signer: Option<PublicKey>,
}

/// Opens a report file, signed or not, checking the signature when there
/// is one.
///
/// # Errors
///
/// Any [`VerifyError`] but `Unsigned` (an unsigned file opens with
/// `signer: None`).
pub fn open(file: &[u8]) -> Result<Opened<'_>, VerifyError> {
    let probe: Probe = serde_json::from_slice(file).map_err(VerifyError::NotJson)?;
    if probe.signed.is_none() && probe.signature.is_none() {
        return Ok(Opened { body: file, signer: None });
    }
    let parsed: SignedFile<'_> = serde_json::from_slice(file).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    let body = parsed.signed.get().as_bytes();
    let rebuilt = envelope(&parsed.signature, body);
    if rebuilt != file {
        let offset = rebuilt.iter().zip(file).position(|(a, b)| a != b).unwrap_or(rebuilt.len().min(file.len()));
        return Err(VerifyError::NotCanonical { offset });
    }
    if parsed.signature.algorithm != ALGORITHM {
        return Err(VerifyError::UnknownAlgorithm(parsed.signature.algorithm));
    }
    let key = from_hex::<32>(&parsed.signature.public_key)
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or(VerifyError::BadEncoding("public key"))?;
    let sig = from_hex::<64>(&parsed.signature.value).ok_or(VerifyError::BadEncoding("signature"))?;
    let sig = Signature::from_bytes(&sig);
    let mut msg = Vec::with_capacity(SIGNING_CONTEXT.len() + body.len());
    msg.extend_from_slice(SIGNING_CONTEXT);
    msg.extend_from_slice(body);
    key.verify_strict(&msg, &sig).map_err(|_| VerifyError::BadSignature)?;
    Ok(Opened { body, signer: Some(PublicKey(key)) })
}

/// Verifies a signed report: it must be signed, unchanged, and (when
/// `expected` is given) signed by that key. Returns the body bytes.
///
/// # Errors
///
/// [`VerifyError`] saying what is wrong; [`VerifyError::Unsigned`] for an
/// unsigned report.
pub fn verify<'a>(file: &'a [u8], expected: Option<&PublicKey>) -> Result<Opened<'a>, VerifyError> {
    let opened = open(file)?;
    let Some(found) = opened.signer else { return Err(VerifyError::Unsigned) };
    if let Some(expected) = expected
        && *expected != found
    {
        return Err(VerifyError::WrongKey { expected: expected.to_string(), found: found.to_string() });
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Report;
    use crate::report::tests::sample_report;

    fn key(n: u8) -> SecretKey {
        SecretKey::from_seed([n; 32])
    }

    fn signed() -> (Vec<u8>, Vec<u8>) {
        let body = sample_report().to_json();
        let file = sign_report(&body, &key(1));
        (body, file)
    }

    #[test]
    fn sign_then_verify_passes_and_returns_the_exact_body() {
        let (body, file) = signed();
        let ok = verify(&file, Some(&key(1).public())).unwrap();
        assert_eq!(ok.body, body.trim_ascii());
        assert_eq!(ok.signer, Some(key(1).public()));
        assert_eq!(Report::from_json(ok.body).unwrap(), sample_report());
        // Without an expected key it still proves integrity.
        assert!(verify(&file, None).is_ok());
        // The envelope is ordinary JSON: tools can read the body.
        let v: serde_json::Value = serde_json::from_slice(&file).unwrap();
        assert_eq!(v["signed"]["name"], "nightly");
    }

    #[test]
    fn flipping_any_single_byte_fails_verification() {
        let (_, file) = signed();
        let body_start = file.windows(10).position(|w| w == b"\"signed\":{").unwrap() + 9;
        // Every position in the signature block and the framing, and a
        // stride through the body, with two kinds of change each.
        let mut positions: Vec<usize> = (0..body_start + 1).collect();
        positions.extend((body_start..file.len()).step_by(37));
        positions.extend(file.len() - 3..file.len());
        for &i in &positions {
            for new in [file[i] ^ 0x01, if file[i] == b' ' { b'\n' } else { b' ' }] {
                if new == file[i] {
                    continue;
                }
                let mut bad = file.clone();
                bad[i] = new;
                assert!(
                    verify(&bad, None).is_err(),
                    "byte {i} changed from {:?} to {:?} still verified",
                    file[i] as char,
                    new as char
                );
            }
        }
    }

    #[test]
    fn a_valid_json_edit_of_a_number_is_caught_by_the_signature() {
        let (_, file) = signed();
        let text = String::from_utf8(file).unwrap();
        // 120000 IOPS -> 920000 IOPS: still valid JSON, still canonical.
        let at = text.find("\"iops\": 120000").unwrap() + "\"iops\": ".len();
        let mut bad = text.into_bytes();
        bad[at] = b'9';
        assert!(matches!(verify(&bad, None), Err(VerifyError::BadSignature)));
    }

    #[test]
    fn whitespace_and_key_order_changes_fail() {
        let (_, file) = signed();
        let text = String::from_utf8(file).unwrap();
        // Re-indent the body: same JSON value, different bytes.
        let reindented = text.replace("\n  \"", "\n   \"");
        assert!(matches!(verify(reindented.as_bytes(), None), Err(VerifyError::BadSignature)));
        // Whitespace outside the body.
        let spaced = text.replacen("{\"signature\":", "{ \"signature\":", 1);
        assert!(matches!(verify(spaced.as_bytes(), None), Err(VerifyError::NotCanonical { offset: 1 })));
        // An extra key, and trailing bytes.
        let extra = text.replacen("{\"signature\":", "{\"note\":1,\"signature\":", 1);
        assert!(verify(extra.as_bytes(), None).is_err());
        assert!(verify(format!("{text}\n").as_bytes(), None).is_err());
        // Swapping the envelope's key order.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let swapped = format!("{{\"signed\":{},\"signature\":{}}}\n", v["signed"], v["signature"]);
        assert!(verify(swapped.as_bytes(), None).is_err());
    }

    #[test]
    fn the_wrong_public_key_fails() {
        let (_, file) = signed();
        let e = verify(&file, Some(&key(2).public())).unwrap_err();
        assert!(matches!(e, VerifyError::WrongKey { .. }), "{e}");
        // Re-signing a changed body with another key and claiming it is
        // someone else's is caught by the expected key.
        let mut forged = sample_report();
        forged.workloads[0].result.as_mut().unwrap().iops *= 10.0;
        let forged = sign_report(&forged.to_json(), &key(2));
        assert!(verify(&forged, None).is_ok(), "valid for its own key");
        assert!(matches!(verify(&forged, Some(&key(1).public())), Err(VerifyError::WrongKey { .. })));
    }

    #[test]
    fn an_unsigned_report_says_unsigned() {
        let body = sample_report().to_json();
        assert!(matches!(verify(&body, None), Err(VerifyError::Unsigned)));
        assert!(verify(&body, None).unwrap_err().to_string().contains("not signed"));
        let opened = open(&body).unwrap();
        assert!(opened.signer.is_none());
        assert!(matches!(verify(b"not json", None), Err(VerifyError::NotJson(_))));
    }

    #[test]
    fn key_files_round_trip_with_private_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.key");
        let k = SecretKey::generate().unwrap();
        let pub_path = k.write_new(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let loaded = SecretKey::load(&path).unwrap();
        assert_eq!(loaded.public(), k.public());
        assert_eq!(PublicKey::load_or_parse(pub_path.to_str().unwrap()).unwrap(), k.public());
        assert_eq!(PublicKey::load_or_parse(&k.public().to_string()).unwrap(), k.public());
        assert!(matches!(k.write_new(&path), Err(KeyError::Exists { .. })), "never overwrites");
        assert_ne!(SecretKey::generate().unwrap().public(), k.public(), "keys are random");
    }

    #[test]
    fn hex_is_exact_length_and_lower_case_only() {
        assert_eq!(from_hex::<2>("00ff"), Some([0, 0xff]));
        assert_eq!(from_hex::<2>("00FF"), None);
        assert_eq!(from_hex::<2>("00f"), None);
        assert_eq!(from_hex::<2>("00ff00"), None);
        assert_eq!(from_hex::<2>("00fg"), None);
        assert_eq!(from_hex::<1>("é"), None);
    }

    #[test]
    fn bad_key_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("open.key");
        std::fs::write(&path, format!("{SECRET_KEY_TAG}{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(SecretKey::load(&path), Err(KeyError::Permissions { .. })));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(SecretKey::load(&path).is_ok());
        assert!(matches!(SecretKey::parse("ab", "x"), Err(KeyError::Format { .. })));
        assert!(matches!(SecretKey::parse(&key(1).public().to_file_text(), "x"), Err(KeyError::Format { .. })));
        assert!(matches!(PublicKey::parse(&format!("{SECRET_KEY_TAG}00"), "x"), Err(KeyError::Format { .. })));
        assert!(matches!(PublicKey::parse(&"AB".repeat(32), "x"), Err(KeyError::Format { .. })));
        assert!(matches!(PublicKey::load_or_parse("/nonexistent/key.pub"), Err(KeyError::Format { .. })));
    }
}
