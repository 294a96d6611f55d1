//! The cluster backend: the metadata store in etcd, under a key prefix.
//!
//! # Layout
//!
//! Every key starts with the store's prefix (default [`DEFAULT_ETCD_PREFIX`],
//! `/strata/`), so several stores can share one etcd:
//!
//! | key | value |
//! |---|---|
//! | `<prefix>format` | [`ETCD_STORE_FORMAT_VERSION`] of this layout, decimal |
//! | `<prefix>counters/next_volume_id` | the next volume id to hand out, decimal (absent = 1) |
//! | `<prefix>volumes/<name>` | versioned JSON record ([`crate::format`]), as in redb |
//! | `<prefix>config/<key>` | versioned JSON holding the bytes, as in redb |
//!
//! Values use the same encoding as the redb backend, so a record means the
//! same thing wherever it is stored.
//!
//! # Atomicity
//!
//! Every mutation is one etcd transaction, built as an optimistic
//! compare-and-swap: read a consistent snapshot (one read-only txn, at one
//! revision R), decide with the shared rules of [`crate::store`], then
//! commit on condition that what was read has not changed:
//! - create: no key under `volumes/` changed after R (so the name is still
//!   free and the nsid still unused) and the counter's mod revision is the
//!   one read; it writes the record and the bumped counter together;
//! - update: the record's mod revision is the one read (so it was neither
//!   updated nor deleted meanwhile); when the volume moves to another
//!   (NQN, nsid), also no key under `volumes/` changed after R;
//! - delete: the record's mod revision is the one read;
//! - config: a plain put, atomic by itself.
//!
//! A commit whose condition fails changed nothing; the call reads again
//! and retries, up to [`MAX_CAS_ATTEMPTS`] times with a jittered backoff, then
//! gives up with [`MetaError::Contention`]. A retry that now finds a
//! conflict (the generation moved, the name was taken) answers that, as
//! the other backends do. The id counter only grows and is bumped in the
//! same transaction that uses the id, so ids are never reused, even
//! between processes.
//!
//! # Time
//!
//! Each etcd request has the client's deadline; a call makes two requests
//! per attempt (three for an update that moves the volume), at most
//! [`MAX_CAS_ATTEMPTS`] attempts, plus backoff sleeps; usually one attempt.
//!
//! # Cancel safety
//!
//! Only the final transaction writes, and etcd applies it whole or not at
//! all, so a dropped call happened completely or not at all.

use std::time::Duration;

use crate::error::MetaError;
use crate::etcd::{Compare, EtcdClient, EtcdError, KeyRange, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse};
use crate::format::{decode_config, decode_volume, encode_config, encode_volume};
use crate::record::{Identity, NewVolume, VolumeRecord};
use crate::store::{MetaFuture, MetaStore, allocate_nsid, check_config, check_new, prepare_new, prepare_update};
use crate::sys::now_unix;
use crate::validate::validate_volume_name;

/// The key prefix a store uses unless told otherwise.
pub const DEFAULT_ETCD_PREFIX: &str = "/strata/";

/// The version of the key layout above. A store with a newer one is refused.
pub const ETCD_STORE_FORMAT_VERSION: u64 = 1;

/// How many times a compare-and-swap is tried before [`MetaError::Contention`].
pub const MAX_CAS_ATTEMPTS: u32 = 20;

const FORMAT_KEY: &str = "format";
const COUNTER_KEY: &str = "counters/next_volume_id";
const VOLUMES: &str = "volumes/";
const CONFIG: &str = "config/";

/// The metadata store in etcd. See the module documentation.
#[derive(Debug, Clone)]
pub struct EtcdMetaStore {
    client: EtcdClient,
    prefix: String,
}

/// Wraps an etcd error with what the store was doing.
fn etcd_err(op: &'static str) -> impl FnOnce(EtcdError) -> MetaError {
    move |source| MetaError::Etcd { op, source }
}

impl EtcdMetaStore {
    /// Opens the store under `prefix` (e.g. [`DEFAULT_ETCD_PREFIX`]),
    /// writing the layout version if the prefix is empty.
    ///
    /// # Errors
    ///
    /// [`MetaError::Etcd`] with [`EtcdError::InvalidConfig`] if `prefix`
    /// does not start and end with `/` or holds other than printable
    /// ASCII; [`MetaError::Corrupt`] if the prefix holds a newer or
    /// unreadable layout version; [`MetaError::Etcd`] if etcd fails.
    pub async fn open(client: EtcdClient, prefix: &str) -> Result<Self, MetaError> {
        let op = "opening the store";
        if !(prefix.starts_with('/') && prefix.ends_with('/') && prefix.bytes().all(|b| b.is_ascii_graphic())) {
            return Err(etcd_err(op)(EtcdError::InvalidConfig(format!(
                "key prefix {prefix:?} must start and end with '/' and hold only printable ASCII, e.g. /strata/"
            ))));
        }
        let store = EtcdMetaStore { client, prefix: prefix.to_owned() };
        let key = store.key(FORMAT_KEY);
        let version = ETCD_STORE_FORMAT_VERSION.to_string().into_bytes();
        let txn = Txn {
            compare: vec![Compare::missing(key.clone())],
            success: vec![TxnOp::Put { key: key.clone(), value: version, lease: None }],
            failure: vec![TxnOp::Range(KeyRange::key(key))],
        };
        let resp = store.client.txn(&txn).await.map_err(etcd_err(op))?;
        if !resp.succeeded {
            let found = single_range(resp, 0).and_then(|r| r.into_iter().next());
            let label = FORMAT_KEY.to_owned();
            let text = found.map(|kv| kv.value).unwrap_or_default();
            match std::str::from_utf8(&text).ok().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) if (1..=ETCD_STORE_FORMAT_VERSION).contains(&v) => {}
                Some(v) => {
                    return Err(MetaError::corrupt(
                        label,
                        format!(
                            "store layout version {v} is not one this build of strata understands \
                             (up to {ETCD_STORE_FORMAT_VERSION}); upgrade strata"
                        ),
                    ));
                }
                None => return Err(MetaError::corrupt(label, format!("not a layout version: {:?}", lossy(&text)))),
            }
        }
        Ok(store)
    }

    /// The client the store talks through.
    pub fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, relative: &str) -> Vec<u8> {
        format!("{}{relative}", self.prefix).into_bytes()
    }

    fn volume_key(&self, name: &str) -> Vec<u8> {
        self.key(&format!("{VOLUMES}{name}"))
    }

    /// Decodes the records of a range over `volumes/`.
    fn decode_volumes(&self, kvs: Vec<KeyValue>) -> Result<Vec<VolumeRecord>, MetaError> {
        let skip = self.prefix.len() + VOLUMES.len();
        kvs.into_iter()
            .map(|kv| {
                let name = std::str::from_utf8(&kv.key[skip.min(kv.key.len())..]).map_err(|_| {
                    MetaError::corrupt(
                        format!("{VOLUMES}{}", lossy(&kv.key[skip.min(kv.key.len())..])),
                        "key is not UTF-8",
                    )
                })?;
                decode_volume(name, &kv.value)
            })
            .collect()
    }

    /// Reads every volume and the id counter at one revision: `(revision,
    /// volumes, counter value, counter mod revision)`.
    async fn snapshot(&self, op: &'static str) -> Result<(i64, Vec<VolumeRecord>, u64, i64), MetaError> {
        let txn = Txn {
            compare: Vec::new(),
            success: vec![
                TxnOp::Range(KeyRange::prefix(self.key(VOLUMES))),
                TxnOp::Range(KeyRange::key(self.key(COUNTER_KEY))),
            ],
            failure: Vec::new(),
        };
        let resp = self.client.txn(&txn).await.map_err(etcd_err(op))?;
        let revision = resp.revision;
        let mut ranges = ranges(op, resp)?.into_iter();
        let (Some(volumes), Some(counter), None) = (ranges.next(), ranges.next(), ranges.next()) else {
            return Err(etcd_err(op)(EtcdError::malformed("txn", "expected two range results")));
        };
        let volumes = self.decode_volumes(volumes)?;
        let (next_id, counter_rev) = match counter.into_iter().next() {
            None => (1, 0),
            Some(kv) => {
                let id = std::str::from_utf8(&kv.value).ok().and_then(|t| t.parse::<u64>().ok()).filter(|&v| v > 0);
                let id = id.ok_or_else(|| {
                    MetaError::corrupt(COUNTER_KEY, format!("not a volume id: {:?}", lossy(&kv.value)))
                })?;
                (id, kv.mod_revision)
            }
        };
        Ok((revision, volumes, next_id, counter_rev))
    }

    async fn create(&self, req: NewVolume) -> Result<VolumeRecord, MetaError> {
        let op = "creating a volume";
        let nqn = check_new(&req)?;
        let identity = Identity::generate()?;
        let (req, nqn) = (&req, &nqn);
        self.compare_and_swap(op, move || async move {
            let (revision, volumes, id, counter_rev) = self.snapshot(op).await?;
            if volumes.iter().any(|r| r.name == req.name) {
                return Err(MetaError::AlreadyExists { name: req.name.clone() });
            }
            let nsid = allocate_nsid(nqn, &volumes)?;
            let next = id.checked_add(1).ok_or_else(|| MetaError::corrupt(COUNTER_KEY, "volume ids are exhausted"))?;
            let rec = prepare_new(req.clone(), nqn.clone(), id, nsid, identity, now_unix());
            let txn = Txn {
                compare: vec![
                    Compare::unchanged_since(self.key(VOLUMES), revision),
                    Compare::mod_revision_is(self.key(COUNTER_KEY), counter_rev),
                ],
                success: vec![
                    TxnOp::Put { key: self.key(COUNTER_KEY), value: next.to_string().into_bytes(), lease: None },
                    TxnOp::Put { key: self.volume_key(&rec.name), value: encode_volume(&rec), lease: None },
                ],
                failure: Vec::new(),
            };
            Ok((txn, rec))
        })
        .await
    }

    async fn update(&self, rec: &VolumeRecord) -> Result<VolumeRecord, MetaError> {
        let op = "updating a volume";
        validate_volume_name(&rec.name)?;
        let key = &self.volume_key(&rec.name);
        self.compare_and_swap(op, move || async move {
            let kv = self.client.get(key).await.map_err(etcd_err(op))?;
            let kv = kv.ok_or_else(|| MetaError::NotFound { name: rec.name.clone() })?;
            let stored = decode_volume(&rec.name, &kv.value)?;
            let moves = (stored.nqn.as_str(), stored.nsid) != (rec.nqn.as_str(), rec.nsid);
            // The record must still be the one read: not updated, and not
            // deleted (a prefix compare cannot see a deleted key).
            let mut compare = vec![Compare::mod_revision_is(key.clone(), kv.mod_revision)];
            let updated = if moves {
                // The new (NQN, nsid) must be free: decide on a snapshot of
                // every volume and commit only if none changed since.
                let (revision, volumes, _, _) = self.snapshot(op).await?;
                let Some(stored) = volumes.iter().find(|r| r.name == rec.name) else {
                    return Err(MetaError::NotFound { name: rec.name.clone() });
                };
                compare.push(Compare::unchanged_since(self.key(VOLUMES), revision));
                prepare_update(stored, rec, volumes.iter().filter(|r| r.name != rec.name))?
            } else {
                // Only a move needs the other records, so a corrupt
                // unrelated record does not block a resize (as in redb).
                prepare_update(&stored, rec, [])?
            };
            let put = TxnOp::Put { key: key.clone(), value: encode_volume(&updated), lease: None };
            Ok((Txn { compare, success: vec![put], failure: Vec::new() }, updated))
        })
        .await
    }

    async fn delete(&self, name: &str) -> Result<VolumeRecord, MetaError> {
        let op = "deleting a volume";
        validate_volume_name(name)?;
        let key = &self.volume_key(name);
        self.compare_and_swap(op, move || async move {
            let kv = self.client.get(key).await.map_err(etcd_err(op))?;
            let kv = kv.ok_or_else(|| MetaError::NotFound { name: name.to_owned() })?;
            // Undecodable: Corrupt, and nothing is removed.
            let rec = decode_volume(name, &kv.value)?;
            let txn = Txn {
                compare: vec![Compare::mod_revision_is(key.clone(), kv.mod_revision)],
                success: vec![TxnOp::Delete(KeyRange::key(key.clone()))],
                failure: Vec::new(),
            };
            Ok((txn, rec))
        })
        .await
    }

    /// Plans a transaction from a fresh read and commits it, until a
    /// commit's compares hold (then returns what `plan` returned with it)
    /// or [`MAX_CAS_ATTEMPTS`] commits failed. An error from `plan` (a
    /// conflict seen in the fresh read, say) ends it at once.
    async fn compare_and_swap<T, Fut>(&self, op: &'static str, mut plan: impl FnMut() -> Fut) -> Result<T, MetaError>
    where
        Fut: Future<Output = Result<(Txn, T), MetaError>>,
    {
        for attempt in 0..MAX_CAS_ATTEMPTS {
            let (txn, value) = plan().await?;
            if self.client.txn(&txn).await.map_err(etcd_err(op))?.succeeded {
                return Ok(value);
            }
            backoff(attempt).await;
        }
        Err(MetaError::Contention { op, attempts: MAX_CAS_ATTEMPTS })
    }
}

impl MetaStore for EtcdMetaStore {
    fn list_volumes(&self) -> MetaFuture<'_, Vec<VolumeRecord>> {
        Box::pin(async move {
            let op = "listing volumes";
            let resp = self.client.range(&KeyRange::prefix(self.key(VOLUMES))).await.map_err(etcd_err(op))?;
            if resp.more {
                return Err(etcd_err(op)(EtcdError::malformed("range", "a range without limit came back partial")));
            }
            self.decode_volumes(resp.kvs)
        })
    }

    fn get_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, Option<VolumeRecord>> {
        Box::pin(async move {
            validate_volume_name(name)?;
            let kv = self.client.get(&self.volume_key(name)).await.map_err(etcd_err("reading a volume"))?;
            kv.map(|kv| decode_volume(name, &kv.value)).transpose()
        })
    }

    fn create_volume(&self, req: NewVolume) -> MetaFuture<'_, VolumeRecord> {
        Box::pin(self.create(req))
    }

    fn update_volume<'a>(&'a self, rec: &'a VolumeRecord) -> MetaFuture<'a, VolumeRecord> {
        Box::pin(self.update(rec))
    }

    fn delete_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, VolumeRecord> {
        Box::pin(self.delete(name))
    }

    fn get_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            check_config(key, None)?;
            let kv = self.client.get(&self.key(&format!("{CONFIG}{key}"))).await.map_err(etcd_err("reading config"))?;
            kv.map(|kv| decode_config(key, &kv.value)).transpose()
        })
    }

    fn put_config<'a>(&'a self, key: &'a str, value: &'a [u8]) -> MetaFuture<'a, ()> {
        Box::pin(async move {
            check_config(key, Some(value))?;
            let full = self.key(&format!("{CONFIG}{key}"));
            self.client.put(&full, &encode_config(value), None).await.map_err(etcd_err("writing config"))?;
            Ok(())
        })
    }

    fn delete_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, bool> {
        Box::pin(async move {
            check_config(key, None)?;
            let full = self.key(&format!("{CONFIG}{key}"));
            let n = self.client.delete(&KeyRange::key(full)).await.map_err(etcd_err("deleting config"))?;
            Ok(n > 0)
        })
    }

    fn list_config<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            check_config(prefix, None)?;
            let op = "listing config";
            let base = self.key(CONFIG);
            let resp = self
                .client
                .range(&KeyRange::prefix(self.key(&format!("{CONFIG}{prefix}"))))
                .await
                .map_err(etcd_err(op))?;
            if resp.more {
                return Err(etcd_err(op)(EtcdError::malformed("range", "a range without limit came back partial")));
            }
            resp.kvs
                .into_iter()
                .map(|kv| {
                    let key =
                        String::from_utf8_lossy(kv.key.strip_prefix(base.as_slice()).unwrap_or(&kv.key)).into_owned();
                    let value = decode_config(&key, &kv.value)?;
                    Ok((key, value))
                })
                .collect()
        })
    }
}

/// The key-values of every range result of a txn, in order.
fn ranges(op: &'static str, resp: TxnResponse) -> Result<Vec<Vec<KeyValue>>, MetaError> {
    resp.responses
        .into_iter()
        .map(|r| match r {
            TxnOpResponse::Range(r) if !r.more => Ok(r.kvs),
            _ => Err(etcd_err(op)(EtcdError::malformed("txn", "expected a complete range result"))),
        })
        .collect()
}

/// The key-values of range result `index` of a txn, if it is one.
fn single_range(resp: TxnResponse, index: usize) -> Option<Vec<KeyValue>> {
    match resp.responses.into_iter().nth(index) {
        Some(TxnOpResponse::Range(r)) => Some(r.kvs),
        _ => None,
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits before retry `attempt` (from 0): 2 ms doubling up to 128 ms,
/// times a random factor in [0.5, 1.5) so that contenders spread out.
async fn backoff(attempt: u32) {
    let base = Duration::from_millis(2) * (1u32 << attempt.min(6));
    let jitter = getrandom::u32().unwrap_or(u32::MAX / 2);
    let factor = 0.5 + f64::from(jitter) / f64::from(u32::MAX);
    tokio::time::sleep(base.mul_f64(factor)).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::on_both_etcds;
    use crate::testing::EtcdServer;

    on_both_etcds!(passes_the_conformance_suite, flavor = "multi_thread", worker_threads = 2);
    async fn passes_the_conformance_suite(etcd: impl EtcdServer) {
        let client = etcd.client();
        let mut n = 0;
        // One etcd, a fresh prefix per check.
        crate::testing::check_conformance(|| {
            n += 1;
            let (client, prefix) = (client.clone(), format!("/conformance-{n}/"));
            async move { (Arc::new(EtcdMetaStore::open(client, &prefix).await.unwrap()) as Arc<dyn MetaStore>, ()) }
        })
        .await;
    }

    on_both_etcds!(keys_follow_the_documented_layout);
    async fn keys_follow_the_documented_layout(etcd: impl EtcdServer) {
        let c = etcd.client();
        let s = EtcdMetaStore::open(c.clone(), DEFAULT_ETCD_PREFIX).await.unwrap();
        let rec = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
        s.put_config("node.uuid", b"\x01").await.unwrap();
        let keys: Vec<(String, Vec<u8>)> = c
            .range(&KeyRange::prefix(""))
            .await
            .unwrap()
            .kvs
            .into_iter()
            .map(|kv| (String::from_utf8(kv.key).unwrap(), kv.value))
            .collect();
        let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["/strata/config/node.uuid", "/strata/counters/next_volume_id", "/strata/format", "/strata/volumes/vol1"]
        );
        assert_eq!(keys[1].1, b"2");
        assert_eq!(keys[2].1, b"1");
        assert_eq!(keys[3].1, encode_volume(&rec), "the same encoding as redb");
    }

    on_both_etcds!(stores_under_different_prefixes_are_independent_and_ids_are_shared_by_handles);
    async fn stores_under_different_prefixes_are_independent_and_ids_are_shared_by_handles(etcd: impl EtcdServer) {
        let a = EtcdMetaStore::open(etcd.client(), "/a/").await.unwrap();
        let b = EtcdMetaStore::open(etcd.client(), "/b/").await.unwrap();
        assert_eq!(a.create_volume(NewVolume::new("v", 4096)).await.unwrap().id, 1);
        assert_eq!(b.create_volume(NewVolume::new("v", 4096)).await.unwrap().id, 1);
        assert_eq!(b.list_volumes().await.unwrap().len(), 1);
        // A second handle on the same prefix (another node) continues the
        // counter: ids are never handed out twice, whoever asks.
        let a2 = EtcdMetaStore::open(etcd.client(), "/a/").await.unwrap();
        a.delete_volume("v").await.unwrap();
        assert_eq!(a2.create_volume(NewVolume::new("w", 4096)).await.unwrap().id, 2);
        assert_eq!(a.create_volume(NewVolume::new("v", 4096)).await.unwrap().id, 3);
    }

    on_both_etcds!(bad_prefixes_and_newer_layouts_are_refused);
    async fn bad_prefixes_and_newer_layouts_are_refused(etcd: impl EtcdServer) {
        for bad in ["", "strata/", "/strata", "/str ata/"] {
            let e = EtcdMetaStore::open(etcd.client(), bad).await.unwrap_err();
            assert!(matches!(e, MetaError::Etcd { source: EtcdError::InvalidConfig(_), .. }), "{bad:?}: {e:?}");
        }
        let c = etcd.client();
        c.put(b"/new/format", b"2", None).await.unwrap();
        let e = EtcdMetaStore::open(c.clone(), "/new/").await.unwrap_err();
        assert!(matches!(&e, MetaError::Corrupt { reason, .. } if reason.contains("upgrade strata")), "{e:?}");
        c.put(b"/junk/format", b"one", None).await.unwrap();
        let e = EtcdMetaStore::open(c.clone(), "/junk/").await.unwrap_err();
        assert!(matches!(e, MetaError::Corrupt { .. }), "{e:?}");
        // Opening twice keeps the version.
        EtcdMetaStore::open(c.clone(), "/ok/").await.unwrap();
        EtcdMetaStore::open(c.clone(), "/ok/").await.unwrap();
        assert_eq!(c.get(b"/ok/format").await.unwrap().unwrap().version, 1);
    }

    on_both_etcds!(garbage_in_etcd_is_reported_as_corrupt);
    async fn garbage_in_etcd_is_reported_as_corrupt(etcd: impl EtcdServer) {
        let c = etcd.client();
        let s = EtcdMetaStore::open(c.clone(), DEFAULT_ETCD_PREFIX).await.unwrap();
        s.create_volume(NewVolume::new("good", 4096)).await.unwrap();
        c.put(b"/strata/volumes/bad", b"\x00\xffnot json", None).await.unwrap();
        c.put(b"/strata/config/k", b"{\"format\":99,\"hex\":\"\"}", None).await.unwrap();
        let is_corrupt = |r: Result<(), MetaError>, want: &str| match r {
            Err(MetaError::Corrupt { key, .. }) => assert_eq!(key, want),
            other => panic!("expected Corrupt, got {other:?}"),
        };
        is_corrupt(s.get_volume("bad").await.map(drop), "volumes/bad");
        is_corrupt(s.list_volumes().await.map(drop), "volumes/bad");
        is_corrupt(s.delete_volume("bad").await.map(drop), "volumes/bad");
        is_corrupt(s.get_config("k").await.map(drop), "config/k");
        is_corrupt(s.create_volume(NewVolume::new("new", 4096)).await.map(drop), "volumes/bad");
        // A resize of a healthy volume does not need the others.
        let mut good = s.get_volume("good").await.unwrap().unwrap();
        good.size_bytes = 8192;
        s.update_volume(&good).await.unwrap();
        assert!(c.get(b"/strata/volumes/bad").await.unwrap().is_some(), "the failed delete removed it");
        c.put(b"/strata/counters/next_volume_id", b"0", None).await.unwrap();
        c.delete(&KeyRange::key("/strata/volumes/bad")).await.unwrap();
        is_corrupt(s.create_volume(NewVolume::new("new", 4096)).await.map(drop), "counters/next_volume_id");
    }

    on_both_etcds!(an_unreachable_etcd_is_a_typed_error);
    async fn an_unreachable_etcd_is_a_typed_error(mut etcd: impl EtcdServer) {
        let s = EtcdMetaStore::open(etcd.client(), DEFAULT_ETCD_PREFIX).await.unwrap();
        etcd.kill();
        let e = s.create_volume(NewVolume::new("v", 4096)).await.unwrap_err();
        assert!(matches!(e, MetaError::Etcd { source: EtcdError::Unreachable { .. }, .. }), "{e:?}");
        assert!(!e.outcome_unknown());
        assert!(e.to_string().contains("is running"), "{e}");
    }
}
