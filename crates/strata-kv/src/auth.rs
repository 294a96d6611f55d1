//! Who may use the KV port: Redis-style users, passwords and namespaces,
//! sans I/O.
//!
//! [`Access`] holds the users. With none, the port is open (Redis's
//! `default` user with `nopass`): every connection starts authenticated
//! as `default` with every namespace, which is why the server then only
//! listens on loopback. With users, a connection starts unauthenticated
//! and may only `AUTH`, `HELLO ... AUTH` or `QUIT` until a name and
//! password match ([`Access::check`]).
//!
//! A user may be limited to some namespaces: it starts in the first, may
//! switch (`KV.NS`) only among them, and may not run the commands that
//! reach every namespace (`FLUSHALL`, quotas, deleting another
//! namespace); see [`Grant`].
//!
//! Passwords are kept as SHA-256 digests and compared in constant time;
//! neither they nor their digests are printed (`Debug` shows names).

use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The user `AUTH password` (one argument) names, as in Redis.
pub const DEFAULT_USER: &str = "default";

/// One user.
#[derive(Clone)]
struct User {
    name: String,
    digest: [u8; 32],
    namespaces: Option<Arc<[Bytes]>>,
}

/// The users of a KV port. See the module documentation.
#[derive(Clone, Default)]
pub struct Access {
    users: Vec<User>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("users", &self.users.iter().map(|u| &u.name).collect::<Vec<_>>()).finish()
    }
}

/// Why a user cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// A name must be 1-128 printable ASCII characters without spaces.
    #[error("user name {0:?}: 1-128 printable ASCII characters, no spaces")]
    BadName(String),
    /// The same name twice.
    #[error("user {0:?} is defined twice")]
    Duplicate(String),
    /// An empty password would let anyone in.
    #[error("user {0:?} has an empty password")]
    EmptyPassword(String),
    /// A namespace list that is given must name at least one.
    #[error("user {0:?} has an empty namespace list (leave it out for every namespace)")]
    NoNamespaces(String),
}

fn digest(password: &[u8]) -> [u8; 32] {
    Sha256::digest(password).into()
}

impl Access {
    /// No users: an open port.
    pub fn open() -> Access {
        Access::default()
    }

    /// Whether connections must authenticate.
    pub fn required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Adds a user of every namespace.
    ///
    /// # Errors
    ///
    /// [`AccessError`]: a bad or repeated name, or an empty password.
    pub fn add_user(&mut self, name: &str, password: &[u8]) -> Result<(), AccessError> {
        self.add(name, password, None)
    }

    /// Adds a user kept to `namespaces` (it starts in the first).
    ///
    /// # Errors
    ///
    /// [`AccessError`]: a bad or repeated name, an empty password or an
    /// empty namespace list.
    pub fn add_tenant<N: AsRef<[u8]>>(
        &mut self,
        name: &str,
        password: &[u8],
        namespaces: &[N],
    ) -> Result<(), AccessError> {
        self.add(name, password, Some(namespaces.iter().map(|n| Bytes::copy_from_slice(n.as_ref())).collect()))
    }

    fn add(&mut self, name: &str, password: &[u8], namespaces: Option<Vec<Bytes>>) -> Result<(), AccessError> {
        if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AccessError::BadName(name.to_string()));
        }
        if self.users.iter().any(|u| u.name == name) {
            return Err(AccessError::Duplicate(name.to_string()));
        }
        if password.is_empty() {
            return Err(AccessError::EmptyPassword(name.to_string()));
        }
        if namespaces.as_ref().is_some_and(Vec::is_empty) {
            return Err(AccessError::NoNamespaces(name.to_string()));
        }
        self.users.push(User {
            name: name.to_string(),
            digest: digest(password),
            namespaces: namespaces.map(Arc::from),
        });
        Ok(())
    }

    /// What an unauthenticated connection may do: everything when the
    /// port is open, nothing otherwise.
    pub fn initial(&self) -> Option<Grant> {
        (!self.required()).then(|| Grant { user: DEFAULT_USER.into(), namespaces: None })
    }

    /// The grant of `user` (`None`: [`DEFAULT_USER`]) when `password` is
    /// its password. On an open port, `default` with any password is let
    /// in, as Redis's `nopass` default user is. Every user's digest is
    /// compared, so the time does not tell which names exist.
    pub fn check(&self, user: Option<&[u8]>, password: &[u8]) -> Option<Grant> {
        let name = user.unwrap_or(DEFAULT_USER.as_bytes());
        if !self.required() {
            return (name == DEFAULT_USER.as_bytes()).then(|| Grant { user: DEFAULT_USER.into(), namespaces: None });
        }
        let d = digest(password);
        let mut found = None;
        for u in &self.users {
            let ok: bool = u.digest.ct_eq(&d).into();
            if ok && u.name.as_bytes() == name {
                found = Some(Grant { user: u.name.clone(), namespaces: u.namespaces.clone() });
            }
        }
        found
    }
}

/// What an authenticated connection may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    user: String,
    /// `None`: every namespace.
    namespaces: Option<Arc<[Bytes]>>,
}

impl Grant {
    /// The user's name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Whether the user may work in namespace `ns`.
    pub fn allows(&self, ns: &[u8]) -> bool {
        self.namespaces.as_ref().is_none_or(|list| list.iter().any(|n| n.as_ref() == ns))
    }

    /// Whether the user may run commands that reach every namespace.
    pub fn is_admin(&self) -> bool {
        self.namespaces.is_none()
    }

    /// The namespace a connection starts in after authenticating: the
    /// first allowed, or the default (empty) one.
    pub fn home(&self) -> Bytes {
        self.namespaces.as_ref().and_then(|l| l.first().cloned()).unwrap_or_default()
    }
}

/// Whether a request's first word is one no Redis client sends but a web
/// browser does (an HTTP `POST` request line or a `Host:` header): a web
/// page talking to the port across protocols. redis-server closes such
/// a connection at once, and so does strata.
pub fn looks_like_http(command: &[u8]) -> bool {
    command.eq_ignore_ascii_case(b"POST") || command.eq_ignore_ascii_case(b"HOST:")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        let mut a = Access::open();
        a.add_user("default", b"s3cret").unwrap();
        a.add_tenant("tenant-a", b"pa", &["a", "a2"]).unwrap();
        a
    }

    #[test]
    fn an_open_port_lets_the_default_user_in_with_any_password_and_no_one_else() {
        let a = Access::open();
        assert!(!a.required());
        assert_eq!(a.initial().map(|g| g.is_admin()), Some(true));
        assert!(a.check(None, b"anything").is_some());
        assert!(a.check(Some(b"default"), b"").is_some());
        assert!(a.check(Some(b"someone"), b"x").is_none());
    }

    #[test]
    fn with_users_only_the_right_name_and_password_get_in() {
        let a = access();
        assert!(a.required());
        assert_eq!(a.initial(), None, "unauthenticated until AUTH");
        assert_eq!(a.check(None, b"s3cret").map(|g| g.user().to_string()), Some("default".into()));
        assert!(a.check(None, b"s3cret!").is_none());
        assert!(a.check(None, b"pa").is_none(), "another user's password is not the default user's");
        assert!(a.check(Some(b"tenant-a"), b"s3cret").is_none());
        assert!(a.check(Some(b"nobody"), b"pa").is_none());
        let t = a.check(Some(b"tenant-a"), b"pa").expect("tenant-a");
        assert!(!t.is_admin());
        assert!(t.allows(b"a") && t.allows(b"a2") && !t.allows(b"b") && !t.allows(b""));
        assert_eq!(t.home(), Bytes::from("a"));
        let d = a.check(Some(b"default"), b"s3cret").unwrap();
        assert!(d.is_admin() && d.allows(b"anything") && d.home().is_empty());
    }

    #[test]
    fn bad_users_are_refused_and_secrets_never_print() {
        let mut a = access();
        assert_eq!(a.add_user("default", b"x"), Err(AccessError::Duplicate("default".into())));
        assert_eq!(a.add_user("b c", b"x"), Err(AccessError::BadName("b c".into())));
        assert_eq!(a.add_user("", b"x"), Err(AccessError::BadName(String::new())));
        assert_eq!(a.add_user("e", b""), Err(AccessError::EmptyPassword("e".into())));
        assert_eq!(a.add_tenant::<&str>("n", b"x", &[]), Err(AccessError::NoNamespaces("n".into())));
        let shown = format!("{a:?}");
        assert!(shown.contains("tenant-a") && !shown.contains("s3cret") && !shown.contains("digest"), "{shown}");
    }

    #[test]
    fn http_request_lines_and_host_headers_are_recognised() {
        for w in ["POST", "post", "Host:", "HOST:"] {
            assert!(looks_like_http(w.as_bytes()), "{w}");
        }
        for w in ["GET", "SET", "HOST", "PING", ""] {
            assert!(!looks_like_http(w.as_bytes()), "{w}");
        }
    }
}
