//! Bearer tokens for the management API.
//!
//! A token is `strata_<ID>_<SECRET>`: a 16-hex-digit ID and 32 random
//! bytes in hex. The metadata store keeps, under `api-tokens/<ID>`, the
//! token's name, role and creation time and the SHA-256 of its secret,
//! never the secret: it is shown once, when the token is made. On a
//! cluster the store is etcd, so every node accepts every token.
//!
//! Roles: a `reader` may `GET`; an `admin` may do everything, tokens
//! included. Each node keeps an admin token of its own in its data dir
//! (`api-token`, mode 0600, [`Tokens::ensure_local`]), made at the first
//! start and kept while it checks out, so the CLI on the same machine
//! needs no setup.
//!
//! A check compares digests in constant time. Answers are cached for
//! [`CACHE_FOR`] so that the API keeps answering through a short etcd
//! outage; a revoked token is refused everywhere within that time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_meta::MetaStore;
use subtle::ConstantTimeEq;

/// Where token records live in the metadata store's config.
const PREFIX: &str = "api-tokens/";
/// The local admin token's file in a data dir.
pub const LOCAL_TOKEN_FILE: &str = "api-token";
/// How long a check's answer is reused.
pub const CACHE_FOR: Duration = Duration::from_secs(30);

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read only (`GET`).
    Reader,
    /// Everything.
    Admin,
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "reader" => Ok(Role::Reader),
            "admin" => Ok(Role::Admin),
            other => Err(format!("role {other:?}: expected admin or reader")),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Reader => "reader",
            Role::Admin => "admin",
        })
    }
}

/// A token as the store keeps it (no secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The ID (16 hex digits), the part of the token before its secret.
    pub id: String,
    /// What it is for (free text).
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it was made, Unix seconds.
    pub created_unix: u64,
    /// SHA-256 of the secret, hex.
    sha256: String,
}

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A name must be 1-64 printable characters.
    #[error("token name {0:?}: 1-64 printable characters")]
    BadName(String),
    /// No token with that ID.
    #[error("no token {0}")]
    NotFound(String),
    /// The metadata store failed.
    #[error("the token store: {0}")]
    Store(#[from] strata_meta::MetaError),
    /// A record that does not decode.
    #[error("token record {id}: {reason}")]
    Corrupt {
        /// The ID.
        id: String,
        /// Why.
        reason: String,
    },
    /// The local token file.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No randomness.
    #[error("random: {0}")]
    Random(String),
}

fn digest_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Splits `strata_<ID>_<SECRET>`; `None` for anything else.
fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix("strata_")?;
    let (id, secret) = rest.split_once('_')?;
    let hexy = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexy(id, 16) && hexy(secret, 64)).then_some((id, secret))
}

fn random_hex(bytes: usize) -> Result<String, TokenError> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(hex::encode(b))
}

/// The API's tokens, over a metadata store.
pub struct Tokens {
    meta: Arc<dyn MetaStore>,
    /// Recent checks: token digest -> (record, when checked).
    cache: Mutex<HashMap<String, (Option<TokenRecord>, Instant)>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    /// Tokens kept in `meta`.
    pub fn new(meta: Arc<dyn MetaStore>) -> Tokens {
        Tokens { meta, cache: Mutex::new(HashMap::new()) }
    }

    /// Makes a token; returns its record and the token itself, which is
    /// never stored or shown again.
    ///
    /// # Errors
    ///
    /// A bad name; the store.
    pub async fn create(&self, name: &str, role: Role) -> Result<(TokenRecord, String), TokenError> {
        if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
            return Err(TokenError::BadName(name.to_string()));
        }
        let (id, secret) = (random_hex(8)?, random_hex(32)?);
        let created_unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let rec =
            TokenRecord { id: id.clone(), name: name.to_string(), role, created_unix, sha256: digest_hex(&secret) };
        let bytes =
            serde_json::to_vec(&rec).map_err(|e| TokenError::Corrupt { id: id.clone(), reason: e.to_string() })?;
        self.meta.put_config(&format!("{PREFIX}{id}"), &bytes).await?;
        tracing::info!(id, name, %role, "API token created");
        Ok((rec, format!("strata_{id}_{secret}")))
    }

    /// Every token, by ID.
    ///
    /// # Errors
    ///
    /// The store; a record that does not decode.
    pub async fn list(&self) -> Result<Vec<TokenRecord>, TokenError> {
        let entries = self.meta.list_config(PREFIX).await?;
        entries.into_iter().map(|(k, v)| decode(k.trim_start_matches(PREFIX), &v)).collect()
    }

    /// Revokes token `id`; returns what it was.
    ///
    /// # Errors
    ///
    /// [`TokenError::NotFound`]; the store.
    pub async fn revoke(&self, id: &str) -> Result<TokenRecord, TokenError> {
        let key = format!("{PREFIX}{id}");
        let rec = match self.meta.get_config(&key).await {
            Ok(Some(v)) => decode(id, &v)?,
            Ok(None) | Err(strata_meta::MetaError::InvalidConfigKey { .. }) => {
                return Err(TokenError::NotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        self.meta.delete_config(&key).await?;
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, (r, _)| r.as_ref().is_none_or(|r| r.id != id));
        tracing::info!(id, name = %rec.name, "API token revoked");
        Ok(rec)
    }

    /// The record of `token` when it is a valid token, `None` when it is
    /// not (malformed, unknown, revoked, wrong secret).
    ///
    /// # Errors
    ///
    /// The store could not be asked (and the answer is not cached).
    pub async fn check(&self, token: &str) -> Result<Option<TokenRecord>, TokenError> {
        let Some((id, secret)) = parse(token) else { return Ok(None) };
        let key = digest_hex(token);
        if let Some((rec, at)) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
            && at.elapsed() < CACHE_FOR
        {
            return Ok(rec.clone());
        }
        let rec = match self.meta.get_config(&format!("{PREFIX}{id}")).await? {
            Some(v) => Some(decode(id, &v)?),
            None => None,
        };
        let found = rec.filter(|r| bool::from(r.sha256.as_bytes().ct_eq(digest_hex(secret).as_bytes())));
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(key, (found.clone(), Instant::now()));
        Ok(found)
    }

    /// Makes sure `dir/api-token` holds a valid admin token: the one it
    /// holds when it still checks out, else a new one (named `name`),
    /// written with mode 0600. Returns the file's path.
    ///
    /// # Errors
    ///
    /// The store; writing the file.
    pub async fn ensure_local(&self, dir: &Path, name: &str) -> Result<PathBuf, TokenError> {
        let path = dir.join(LOCAL_TOKEN_FILE);
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Some(rec) = self.check(text.trim()).await?
            && rec.role == Role::Admin
        {
            return Ok(path);
        }
        let (_, token) = self.create(name, Role::Admin).await?;
        write_private(&path, &format!("{token}\n"))
            .map_err(|source| TokenError::File { path: path.clone(), source })?;
        Ok(path)
    }
}

fn decode(id: &str, bytes: &[u8]) -> Result<TokenRecord, TokenError> {
    serde_json::from_slice(bytes).map_err(|e| TokenError::Corrupt { id: id.to_string(), reason: e.to_string() })
}

/// Writes `text` to `path` readable by its owner only, replacing it
/// whole (a new file renamed over the old).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_meta::MemMetaStore;

    fn tokens() -> Tokens {
        Tokens::new(Arc::new(MemMetaStore::new()))
    }

    #[tokio::test]
    async fn a_token_checks_out_until_it_is_revoked_and_nothing_else_does() {
        let t = tokens();
        let (rec, token) = t.create("ci", Role::Reader).await.unwrap();
        assert_eq!(parse(&token).map(|(id, _)| id.to_string()), Some(rec.id.clone()));
        assert_eq!(t.check(&token).await.unwrap().map(|r| r.role), Some(Role::Reader));
        // A wrong secret, a truncated token, another ID, junk.
        let mut wrong = token.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        for bad in [wrong.as_str(), &token[..token.len() - 1], "strata_0000000000000000_00", "", "Bearer x"] {
            assert_eq!(t.check(bad).await.unwrap(), None, "{bad:?}");
        }
        let other = format!("strata_{}_{}", "0".repeat(16), &token[token.len() - 64..]);
        assert_eq!(t.check(&other).await.unwrap(), None);
        assert_eq!(t.list().await.unwrap(), vec![rec.clone()]);
        assert!(!format!("{:?}", t.list().await.unwrap()).contains(&token[token.len() - 64..]), "no secret kept");
        t.revoke(&rec.id).await.unwrap();
        assert_eq!(t.check(&token).await.unwrap(), None, "revoked (and dropped from the cache)");
        assert!(matches!(t.revoke(&rec.id).await, Err(TokenError::NotFound(_))));
        assert!(matches!(t.revoke("../x y").await, Err(TokenError::NotFound(_))));
        assert!(matches!(t.create("", Role::Admin).await, Err(TokenError::BadName(_))));
    }

    #[tokio::test]
    async fn the_local_token_file_is_private_and_kept_while_it_checks_out() {
        use std::os::unix::fs::PermissionsExt;
        let t = tokens();
        let dir = tempfile::tempdir().unwrap();
        let path = t.ensure_local(dir.path(), "local").await.unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(t.check(first.trim()).await.unwrap().map(|r| r.role), Some(Role::Admin));
        t.ensure_local(dir.path(), "local").await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first, "kept");
        // Another store (a new cluster, a wiped metadata store): replaced.
        let t2 = tokens();
        t2.ensure_local(dir.path(), "local").await.unwrap();
        let second = std::fs::read_to_string(&path).unwrap();
        assert_ne!(second, first);
        assert!(t2.check(second.trim()).await.unwrap().is_some());
    }
}
