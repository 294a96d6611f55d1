//! Hosts as objects: the NVMe hosts a node knows by NQN, with their
//! DH-HMAC-CHAP secrets and TLS PSK.
//!
//! Each host is a record in the metadata store's config under
//! `hosts/<first 32 hex digits of SHA-256(NQN)>` (an NQN can be longer than
//! a config key may be); on a cluster the store is etcd, so every node
//! knows every host. Secrets are kept in the interchange text they came in
//! (`DHHC-1:..`, `NVMeTLSkey-1:..`): the target needs them, not digests.
//! The store's file is the node's `meta.redb`, owner-only; a listing never
//! shows a secret, only whether one is set.
//!
//! The target learns the keys from [`Hosts::apply`], called after every
//! change made here and, on a cluster, every [`REFRESH`] by the task of
//! [`Hosts::spawn_refresh`], so that a change made through any node
//! reaches all of them. If the store cannot be read the target keeps the
//! keys it has: connected hosts are never dropped by a rotation or an
//! outage, and a new connection needs the keys of the last good read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_auth::{DhGroup, DhchapSecret, HashFn, HostKeys, TlsPsk};
use strata_meta::MetaStore;
use strata_target::Target;

/// Where host records live in the metadata store's config.
const PREFIX: &str = "hosts/";
/// How often a cluster node rereads the hosts.
pub const REFRESH: Duration = Duration::from_secs(2);

/// A host as the store keeps it, secrets included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct HostRecord {
    nqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dhchap_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dhchap_ctrl_secret: Option<String>,
    dhchap_hash: String,
    dhchap_dhgroup: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls_psk: Option<String>,
    created_unix: u64,
    updated_unix: u64,
}

/// A host as a listing shows it: which keys it has, never the keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostView {
    /// The host NQN.
    pub nqn: String,
    /// It must authenticate with DH-HMAC-CHAP.
    pub dhchap: bool,
    /// It may ask the controller to authenticate too.
    pub dhchap_bidirectional: bool,
    /// The hash used when the host offers it.
    pub dhchap_hash: String,
    /// The DH group used when the host offers it.
    pub dhchap_dhgroup: String,
    /// It has a TLS pre-shared key.
    pub tls_psk: bool,
    /// When it was added, Unix seconds.
    pub created_unix: u64,
    /// When it last changed, Unix seconds.
    pub updated_unix: u64,
}

/// A change to a host: `None` leaves a field as it is; for a secret,
/// `Some("")` removes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// The host's DH-HMAC-CHAP secret (`DHHC-1:..`).
    #[serde(default)]
    pub dhchap_secret: Option<String>,
    /// The controller's secret for this host (`DHHC-1:..`).
    #[serde(default)]
    pub dhchap_ctrl_secret: Option<String>,
    /// sha256, sha384 or sha512.
    #[serde(default)]
    pub dhchap_hash: Option<String>,
    /// null or ffdhe2048 .. ffdhe8192.
    #[serde(default)]
    pub dhchap_dhgroup: Option<String>,
    /// The host's TLS PSK (`NVMeTLSkey-1:..`).
    #[serde(default)]
    pub tls_psk: Option<String>,
}

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostsError {
    /// The NQN is malformed.
    #[error("host NQN {nqn:?}: {reason}")]
    BadNqn {
        /// As given.
        nqn: String,
        /// Why.
        reason: String,
    },
    /// A key or choice that does not parse.
    #[error("{field}: {reason}")]
    BadValue {
        /// Which option.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// `add` of a host that exists.
    #[error("host {0} exists already (change it with strata host set)")]
    Exists(String),
    /// No such host.
    #[error("no host {0}")]
    NotFound(String),
    /// The metadata store failed.
    #[error("the host store: {0}")]
    Store(#[from] strata_meta::MetaError),
    /// A record that does not decode.
    #[error("host record {key}: {reason}")]
    Corrupt {
        /// Its config key.
        key: String,
        /// Why.
        reason: String,
    },
}

fn key_of(nqn: &str) -> String {
    let digest = Sha256::digest(nqn.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{hex}")
}

fn now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn bad(field: &'static str) -> impl Fn(String) -> HostsError {
    move |reason| HostsError::BadValue { field, reason }
}

impl HostRecord {
    fn view(&self) -> HostView {
        HostView {
            nqn: self.nqn.clone(),
            dhchap: self.dhchap_secret.is_some(),
            dhchap_bidirectional: self.dhchap_ctrl_secret.is_some(),
            dhchap_hash: self.dhchap_hash.clone(),
            dhchap_dhgroup: self.dhchap_dhgroup.clone(),
            tls_psk: self.tls_psk.is_some(),
            created_unix: self.created_unix,
            updated_unix: self.updated_unix,
        }
    }

    /// Applies `spec` and checks the result.
    fn apply(&mut self, spec: &HostSpec) -> Result<(), HostsError> {
        let set = |cur: &mut Option<String>, new: &Option<String>| {
            if let Some(v) = new {
                *cur = (!v.trim().is_empty()).then(|| v.trim().to_string());
            }
        };
        set(&mut self.dhchap_secret, &spec.dhchap_secret);
        set(&mut self.dhchap_ctrl_secret, &spec.dhchap_ctrl_secret);
        set(&mut self.tls_psk, &spec.tls_psk);
        if let Some(h) = &spec.dhchap_hash {
            self.dhchap_hash = h.parse::<HashFn>().map_err(bad("--dhchap-hash"))?.name().to_string();
        }
        if let Some(g) = &spec.dhchap_dhgroup {
            self.dhchap_dhgroup = g.parse::<DhGroup>().map_err(bad("--dhchap-dhgroup"))?.name().to_string();
        }
        self.keys()?;
        if let Some(psk) = &self.tls_psk {
            let psk = TlsPsk::parse(psk).map_err(|e| bad("--tls-psk")(e.to_string()))?;
            if psk.hash() != HashFn::Sha256 {
                return Err(bad("--tls-psk")(
                    "SHA-384 PSKs (NVMeTLSkey-1:02:) are not supported yet: make one with nvme gen-tls-key --hmac=1"
                        .to_string(),
                ));
            }
        }
        Ok(())
    }

    /// The target's view of the record; `None` without a host secret.
    fn keys(&self) -> Result<Option<HostKeys>, HostsError> {
        let parse = |field: &'static str, text: &Option<String>| {
            text.as_deref().map(DhchapSecret::parse).transpose().map_err(|e| bad(field)(e.to_string()))
        };
        let secret = parse("--dhchap-secret", &self.dhchap_secret)?;
        let ctrl = parse("--dhchap-ctrl-secret", &self.dhchap_ctrl_secret)?;
        let hash = self.dhchap_hash.parse::<HashFn>().map_err(bad("--dhchap-hash"))?;
        let dhgroup = self.dhchap_dhgroup.parse::<DhGroup>().map_err(bad("--dhchap-dhgroup"))?;
        match (secret, ctrl) {
            (None, Some(_)) => Err(bad("--dhchap-ctrl-secret")(
                "a controller secret needs a host secret (--dhchap-secret) too".to_string(),
            )),
            (None, None) => Ok(None),
            (Some(secret), ctrl_secret) => Ok(Some(HostKeys { secret, ctrl_secret, hash, dhgroup })),
        }
    }
}

/// The hosts of a node (or of the cluster), over its metadata store.
pub struct Hosts {
    meta: Arc<dyn MetaStore>,
    target: Target,
}

impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosts").finish_non_exhaustive()
    }
}

impl Hosts {
    /// Hosts kept in `meta`, whose keys go to `target`.
    pub fn new(meta: Arc<dyn MetaStore>, target: Target) -> Hosts {
        Hosts { meta, target }
    }

    async fn records(&self) -> Result<Vec<HostRecord>, HostsError> {
        let entries = self.meta.list_config(PREFIX).await?;
        let mut out = Vec::with_capacity(entries.len());
        for (key, v) in entries {
            let rec: HostRecord = serde_json::from_slice(&v)
                .map_err(|e| HostsError::Corrupt { key: key.clone(), reason: e.to_string() })?;
            out.push(rec);
        }
        out.sort_by(|a, b| a.nqn.cmp(&b.nqn));
        Ok(out)
    }

    async fn record(&self, nqn: &str) -> Result<Option<HostRecord>, HostsError> {
        let key = key_of(nqn);
        match self.meta.get_config(&key).await? {
            None => Ok(None),
            Some(v) => {
                serde_json::from_slice(&v).map(Some).map_err(|e| HostsError::Corrupt { key, reason: e.to_string() })
            }
        }
    }

    async fn store(&self, rec: &HostRecord) -> Result<(), HostsError> {
        let bytes = serde_json::to_vec(rec)
            .map_err(|e| HostsError::Corrupt { key: key_of(&rec.nqn), reason: e.to_string() })?;
        self.meta.put_config(&key_of(&rec.nqn), &bytes).await?;
        Ok(())
    }

    /// Every host, by NQN.
    ///
    /// # Errors
    ///
    /// The store; a record that does not decode.
    pub async fn list(&self) -> Result<Vec<HostView>, HostsError> {
        Ok(self.records().await?.iter().map(HostRecord::view).collect())
    }

    /// Adds host `nqn` with `spec`.
    ///
    /// # Errors
    ///
    /// A bad NQN or key; [`HostsError::Exists`]; the store.
    pub async fn add(&self, nqn: &str, spec: &HostSpec) -> Result<HostView, HostsError> {
        strata_meta::validate_nqn(nqn)
            .map_err(|e| HostsError::BadNqn { nqn: nqn.to_string(), reason: e.to_string() })?;
        if self.record(nqn).await?.is_some() {
            return Err(HostsError::Exists(nqn.to_string()));
        }
        let t = now();
        let mut rec = HostRecord {
            nqn: nqn.to_string(),
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            dhchap_hash: HashFn::Sha256.name().into(),
            dhchap_dhgroup: DhGroup::Ffdhe2048.name().into(),
            tls_psk: None,
            created_unix: t,
            updated_unix: t,
        };
        rec.apply(spec)?;
        self.store(&rec).await?;
        tracing::info!(
            hostnqn = nqn,
            dhchap = rec.dhchap_secret.is_some(),
            tls_psk = rec.tls_psk.is_some(),
            "host added"
        );
        self.apply().await?;
        Ok(rec.view())
    }

    /// Changes host `nqn` (a key rotation, say): connected hosts stay
    /// connected; new connections need the new keys.
    ///
    /// # Errors
    ///
    /// A bad key; [`HostsError::NotFound`]; the store.
    pub async fn set(&self, nqn: &str, spec: &HostSpec) -> Result<HostView, HostsError> {
        let Some(mut rec) = self.record(nqn).await? else {
            return Err(HostsError::NotFound(nqn.to_string()));
        };
        rec.apply(spec)?;
        rec.updated_unix = now();
        self.store(&rec).await?;
        tracing::info!(
            hostnqn = nqn,
            dhchap = rec.dhchap_secret.is_some(),
            tls_psk = rec.tls_psk.is_some(),
            "host changed"
        );
        self.apply().await?;
        Ok(rec.view())
    }

    /// Removes host `nqn`: from now on it connects without authenticating
    /// (where its NQN is allowed).
    ///
    /// # Errors
    ///
    /// [`HostsError::NotFound`]; the store.
    pub async fn remove(&self, nqn: &str) -> Result<HostView, HostsError> {
        let Some(rec) = self.record(nqn).await? else {
            return Err(HostsError::NotFound(nqn.to_string()));
        };
        self.meta.delete_config(&key_of(nqn)).await?;
        tracing::info!(hostnqn = nqn, "host removed");
        self.apply().await?;
        Ok(rec.view())
    }

    /// Hands every host's keys (DH-HMAC-CHAP and TLS PSK) to the target.
    ///
    /// # Errors
    ///
    /// The store (the target keeps the keys it had).
    pub async fn apply(&self) -> Result<(), HostsError> {
        let mut keys = HashMap::new();
        let mut psks = HashMap::new();
        for rec in self.records().await? {
            // A PSK that does not parse (checked when written) leaves the
            // host without one: its TLS handshakes fail.
            match rec.tls_psk.as_deref().map(TlsPsk::parse) {
                Some(Ok(psk)) => {
                    psks.insert(rec.nqn.clone(), psk);
                }
                Some(Err(e)) => tracing::error!(hostnqn = %rec.nqn, "host TLS PSK unusable, TLS refused: {e}"),
                None => {}
            }
            match rec.keys() {
                Ok(Some(k)) => {
                    keys.insert(rec.nqn.clone(), k);
                }
                Ok(None) => {}
                // A record that was checked when written does not fail
                // here; if one does, refusing that host is the safe side.
                Err(e) => {
                    tracing::error!(hostnqn = %rec.nqn, "host record unusable, the host is refused: {e}");
                    keys.insert(rec.nqn.clone(), refuse_all());
                }
            }
        }
        self.target.replace_host_keys(keys);
        self.target.replace_tls_psks(psks);
        Ok(())
    }

    /// Rereads the hosts every [`REFRESH`] for as long as the process
    /// runs (a cluster node: changes made through other nodes arrive).
    pub fn spawn_refresh(self: &Arc<Self>) {
        let hosts = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(h) = hosts.upgrade() else { return };
                match h.apply().await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!("cannot reread the hosts (keeping the keys in force): {e}");
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

/// Keys no host can match: a fresh random secret nobody holds.
fn refuse_all() -> HostKeys {
    HostKeys::new(DhchapSecret::generate(None), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_meta::MemMetaStore;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";

    fn hosts() -> Hosts {
        Hosts::new(Arc::new(MemMetaStore::new()), Target::new(Default::default()))
    }

    fn secret() -> String {
        DhchapSecret::generate(Some(HashFn::Sha256)).to_interchange()
    }

    #[tokio::test]
    async fn add_set_list_remove_and_no_secret_is_ever_shown() {
        let h = hosts();
        let s = secret();
        let spec = HostSpec { dhchap_secret: Some(s.clone()), ..Default::default() };
        let v = h.add(NQN, &spec).await.unwrap();
        assert!(v.dhchap && !v.dhchap_bidirectional && !v.tls_psk);
        assert_eq!((v.dhchap_hash.as_str(), v.dhchap_dhgroup.as_str()), ("sha256", "ffdhe2048"));
        assert!(matches!(h.add(NQN, &spec).await, Err(HostsError::Exists(_))));
        let listed = serde_json::to_string(&h.list().await.unwrap()).unwrap();
        assert!(!listed.contains(&s[10..30]), "{listed}");

        let ctrl = secret();
        let psk = TlsPsk::generate(HashFn::Sha256).to_interchange();
        let change = HostSpec {
            dhchap_ctrl_secret: Some(ctrl),
            dhchap_hash: Some("hmac(sha512)".into()),
            dhchap_dhgroup: Some("null".into()),
            tls_psk: Some(psk),
            ..Default::default()
        };
        let v = h.set(NQN, &change).await.unwrap();
        assert!(v.dhchap && v.dhchap_bidirectional && v.tls_psk);
        assert_eq!((v.dhchap_hash.as_str(), v.dhchap_dhgroup.as_str()), ("sha512", "null"));
        // "" removes a secret.
        let v = h
            .set(
                NQN,
                &HostSpec {
                    dhchap_ctrl_secret: Some(String::new()),
                    tls_psk: Some(String::new()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(v.dhchap && !v.dhchap_bidirectional && !v.tls_psk);
        assert_eq!(h.list().await.unwrap().len(), 1);
        h.remove(NQN).await.unwrap();
        assert!(h.list().await.unwrap().is_empty());
        assert!(matches!(h.remove(NQN).await, Err(HostsError::NotFound(_))));
        assert!(matches!(h.set(NQN, &HostSpec::default()).await, Err(HostsError::NotFound(_))));
    }

    #[tokio::test]
    async fn bad_input_is_refused_with_the_option_it_came_in() {
        let h = hosts();
        let cases = [
            (HostSpec { dhchap_secret: Some("hunter2".into()), ..Default::default() }, "--dhchap-secret"),
            (HostSpec { dhchap_ctrl_secret: Some(secret()), ..Default::default() }, "--dhchap-ctrl-secret"),
            (HostSpec { dhchap_hash: Some("md5".into()), ..Default::default() }, "--dhchap-hash"),
            (HostSpec { dhchap_dhgroup: Some("ffdhe1024".into()), ..Default::default() }, "--dhchap-dhgroup"),
            (HostSpec { tls_psk: Some(secret()), ..Default::default() }, "--tls-psk"),
            (
                HostSpec { tls_psk: Some(TlsPsk::generate(HashFn::Sha384).to_interchange()), ..Default::default() },
                "--tls-psk",
            ),
        ];
        for (spec, field) in cases {
            match h.add(NQN, &spec).await {
                Err(HostsError::BadValue { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert!(matches!(h.add("not an nqn", &HostSpec::default()).await, Err(HostsError::BadNqn { .. })));
        assert!(h.list().await.unwrap().is_empty(), "nothing was stored");
    }

    #[test]
    fn keys_fit_the_config_key_limit_for_the_longest_nqn() {
        let long = format!("nqn.2014-08.org.nvmexpress:{}", "x".repeat(190));
        assert!(key_of(&long).len() <= 128);
        assert_ne!(key_of("nqn.a:b"), key_of("nqn.a:c"));
    }
}
