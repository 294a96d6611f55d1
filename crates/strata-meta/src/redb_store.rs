//! The embedded backend: one redb file, `DATA_DIR/meta.redb`.
//!
//! # Layout
//!
//! | table | key | value |
//! |---|---|---|
//! | `volumes` | volume name (`&str`) | versioned JSON record ([`crate::format`]) |
//! | `counters` | `next_volume_id` | the next id to hand out (`u64`, starts at 1) |
//! | `counters` | `store_format` | [`STORE_FORMAT_VERSION`] of the table layout |
//! | `config` | config key (`&str`) | versioned JSON holding the bytes |
//!
//! # Atomicity and durability
//!
//! Every mutating call is one redb write transaction, committed with redb's
//! default `Durability::Immediate` (fsync before `commit` returns). A call
//! that fails returns before commit, so the transaction aborts on drop and
//! nothing changes. Creating a volume reads and bumps `next_volume_id` and
//! inserts the record in the same transaction; the counter only grows, so
//! ids are never reused, and a failed create does not consume one.
//!
//! # Async calls on a blocking store
//!
//! redb is synchronous and its commits fsync, which must not stall a
//! runtime thread. Each [`MetaStore`] call therefore runs its transaction
//! under `tokio::task::spawn_blocking`, on a thread of its own, and the
//! future only waits for the result. Dropping that future does not stop
//! the thread: the transaction commits or aborts as it would have, which
//! is what the trait's cancel-safety contract asks. Opening the store
//! ([`RedbMetaStore::open`]) is synchronous and may fsync: call it before
//! the runtime starts or under `spawn_blocking`.
//!
//! # One process at a time
//!
//! redb's default `ExclusiveWriter` mode locks the whole file, so a second
//! open (another process, or another handle in this one) fails; that is
//! reported as [`MetaError::InUse`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition};

use crate::error::MetaError;
use crate::format::{decode_config, decode_volume, encode_config, encode_volume};
use crate::record::{Identity, NewVolume, VolumeRecord};
use crate::store::{MetaFuture, MetaStore, allocate_nsid, check_config, check_new, prepare_new, prepare_update};
use crate::sys::now_unix;
use crate::validate::validate_volume_name;

/// The store's file name inside the data dir.
pub const META_FILE_NAME: &str = "meta.redb";

/// The version of the table layout above. A file with a newer one is refused.
pub const STORE_FORMAT_VERSION: u64 = 1;

pub(crate) const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");
pub(crate) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
pub(crate) const CONFIG: TableDefinition<&str, &[u8]> = TableDefinition::new("config");

const NEXT_VOLUME_ID: &str = "next_volume_id";
const STORE_FORMAT: &str = "store_format";

/// Wraps any redb error with what the store was doing.
fn redb_err<E: Into<redb::Error>>(op: &'static str) -> impl FnOnce(E) -> MetaError {
    move |e| MetaError::Redb { op, source: e.into() }
}

/// The metadata store in a redb file.
///
/// Cheap to share: the database lives behind an `Arc` so that each call
/// can hand it to a blocking thread (see the module doc).
#[derive(Debug)]
pub struct RedbMetaStore {
    inner: Arc<Inner>,
}

/// The open database; the synchronous implementation of every call.
#[derive(Debug)]
struct Inner {
    db: Database,
    path: PathBuf,
}

impl RedbMetaStore {
    /// Opens (creating if needed) the store `data_dir/meta.redb`, creating
    /// `data_dir` if it does not exist.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open), plus [`MetaError::Io`] if the dir cannot be created.
    pub fn open_in_dir(data_dir: impl AsRef<Path>) -> Result<Self, MetaError> {
        let dir = data_dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| MetaError::Io {
            what: "creating data dir",
            path: dir.to_path_buf(),
            source,
        })?;
        Self::open(dir.join(META_FILE_NAME))
    }

    /// Opens the store file at `path`, creating an empty store if the file
    /// does not exist or is empty.
    ///
    /// # Errors
    ///
    /// [`MetaError::InUse`] if another handle holds the file;
    /// [`MetaError::Io`] if it cannot be opened; [`MetaError::Corrupt`] if it
    /// is not a redb file or has a newer layout; [`MetaError::Redb`] otherwise.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MetaError> {
        let path = path.as_ref().to_path_buf();
        // The store holds hosts' DH-HMAC-CHAP secrets and TLS PSKs: owner
        // only, created so (no window with wider permissions) and kept so.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let io = |source| MetaError::Io { what: "securing metadata store", path: path.clone(), source };
            match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let mode = std::fs::metadata(&path).map_err(io)?.permissions().mode();
                    if mode & 0o077 != 0 {
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700)).map_err(io)?;
                    }
                }
                Err(e) => return Err(io(e)),
            }
        }
        let db = Database::create(&path).map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => MetaError::InUse {
                dir: path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
                path: path.clone(),
            },
            DatabaseError::Storage(StorageError::Io(source)) => {
                MetaError::Io { what: "opening metadata store", path: path.clone(), source }
            }
            DatabaseError::Storage(StorageError::Corrupted(reason)) => MetaError::Corrupt {
                key: path.display().to_string(),
                reason: format!("not a readable redb file: {reason}"),
            },
            other => redb_err("opening the store")(other),
        })?;
        let inner = Inner { db, path };
        inner.init()?;
        Ok(RedbMetaStore { inner: Arc::new(inner) })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `call` on tokio's blocking pool and returns its result. The
    /// call runs to completion even if the future is dropped first.
    fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        call: impl FnOnce(&Inner) -> Result<T, MetaError> + Send + 'static,
    ) -> MetaFuture<'static, T> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || call(&inner)).await {
                Ok(result) => result,
                // A panic in redb or in this crate is a bug: let it reach
                // the caller as a panic, as if the call had run inline.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Err(MetaError::Abandoned { op }),
            }
        })
    }
}

impl Inner {
    /// Creates the tables and checks or writes the layout version.
    fn init(&self) -> Result<(), MetaError> {
        let txn = self.db.begin_write().map_err(redb_err("initialising"))?;
        {
            txn.open_table(VOLUMES).map_err(redb_err("creating tables"))?;
            txn.open_table(CONFIG).map_err(redb_err("creating tables"))?;
            let mut counters = txn.open_table(COUNTERS).map_err(redb_err("creating tables"))?;
            let found = counters.get(STORE_FORMAT).map_err(redb_err("reading the layout version"))?.map(|g| g.value());
            match found {
                None => {
                    counters
                        .insert(STORE_FORMAT, STORE_FORMAT_VERSION)
                        .map_err(redb_err("writing the layout version"))?;
                }
                Some(v) if v > STORE_FORMAT_VERSION || v == 0 => {
                    return Err(MetaError::corrupt(
                        format!("counters/{STORE_FORMAT}"),
                        format!(
                            "store layout version {v} is not one this build of strata \
                             understands (up to {STORE_FORMAT_VERSION}); upgrade strata"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        txn.commit().map_err(redb_err("initialising"))
    }

    /// Decodes every record of an open volumes table, in name order.
    fn decode_all(table: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Vec<VolumeRecord>, MetaError> {
        let mut out = Vec::new();
        for entry in table.iter().map_err(redb_err("listing volumes"))? {
            let (k, v) = entry.map_err(redb_err("listing volumes"))?;
            out.push(decode_volume(k.value(), v.value())?);
        }
        Ok(out)
    }

    fn list_volumes(&self) -> Result<Vec<VolumeRecord>, MetaError> {
        let txn = self.db.begin_read().map_err(redb_err("listing volumes"))?;
        let table = txn.open_table(VOLUMES).map_err(redb_err("listing volumes"))?;
        Self::decode_all(&table)
    }

    fn get_volume(&self, name: &str) -> Result<Option<VolumeRecord>, MetaError> {
        validate_volume_name(name)?;
        let txn = self.db.begin_read().map_err(redb_err("reading a volume"))?;
        let table = txn.open_table(VOLUMES).map_err(redb_err("reading a volume"))?;
        let found = table.get(name).map_err(redb_err("reading a volume"))?;
        found.map(|g| decode_volume(name, g.value())).transpose()
    }

    fn create_volume(&self, req: NewVolume) -> Result<VolumeRecord, MetaError> {
        let nqn = check_new(&req)?;
        let identity = Identity::generate()?;
        let op = "creating a volume";
        let txn = self.db.begin_write().map_err(redb_err(op))?;
        let rec = {
            let mut volumes = txn.open_table(VOLUMES).map_err(redb_err(op))?;
            if volumes.get(req.name.as_str()).map_err(redb_err(op))?.is_some() {
                return Err(MetaError::AlreadyExists { name: req.name });
            }
            let existing = Self::decode_all(&volumes)?;
            let nsid = allocate_nsid(&nqn, &existing)?;
            let mut counters = txn.open_table(COUNTERS).map_err(redb_err(op))?;
            let id = counters.get(NEXT_VOLUME_ID).map_err(redb_err(op))?.map_or(1, |g| g.value());
            let next = id
                .checked_add(1)
                .ok_or_else(|| MetaError::corrupt(format!("counters/{NEXT_VOLUME_ID}"), "volume ids are exhausted"))?;
            counters.insert(NEXT_VOLUME_ID, next).map_err(redb_err(op))?;
            let rec = prepare_new(req, nqn, id, nsid, identity, now_unix());
            volumes.insert(rec.name.as_str(), encode_volume(&rec).as_slice()).map_err(redb_err(op))?;
            rec
        };
        txn.commit().map_err(redb_err(op))?;
        Ok(rec)
    }

    fn update_volume(&self, rec: &VolumeRecord) -> Result<VolumeRecord, MetaError> {
        validate_volume_name(&rec.name)?;
        let op = "updating a volume";
        let txn = self.db.begin_write().map_err(redb_err(op))?;
        let updated = {
            let mut volumes = txn.open_table(VOLUMES).map_err(redb_err(op))?;
            let stored = volumes
                .get(rec.name.as_str())
                .map_err(redb_err(op))?
                .map(|g| decode_volume(&rec.name, g.value()))
                .transpose()?
                .ok_or_else(|| MetaError::NotFound { name: rec.name.clone() })?;
            // Only a move to another (NQN, nsid) needs the other records, so
            // a corrupt unrelated record does not block a resize.
            let others = if (stored.nqn.as_str(), stored.nsid) != (rec.nqn.as_str(), rec.nsid) {
                Self::decode_all(&volumes)?.into_iter().filter(|r| r.name != rec.name).collect()
            } else {
                Vec::new()
            };
            let updated = prepare_update(&stored, rec, &others)?;
            volumes.insert(updated.name.as_str(), encode_volume(&updated).as_slice()).map_err(redb_err(op))?;
            updated
        };
        txn.commit().map_err(redb_err(op))?;
        Ok(updated)
    }

    fn delete_volume(&self, name: &str) -> Result<VolumeRecord, MetaError> {
        validate_volume_name(name)?;
        let op = "deleting a volume";
        let txn = self.db.begin_write().map_err(redb_err(op))?;
        let removed = {
            let mut volumes = txn.open_table(VOLUMES).map_err(redb_err(op))?;
            let removed = volumes.remove(name).map_err(redb_err(op))?;
            match removed {
                None => {
                    return Err(MetaError::NotFound { name: name.to_owned() });
                }
                // An undecodable record returns Corrupt and the transaction
                // aborts on drop, so nothing is removed.
                Some(guard) => decode_volume(name, guard.value())?,
            }
        };
        txn.commit().map_err(redb_err(op))?;
        Ok(removed)
    }

    fn get_config(&self, key: &str) -> Result<Option<Vec<u8>>, MetaError> {
        check_config(key, None)?;
        let op = "reading config";
        let txn = self.db.begin_read().map_err(redb_err(op))?;
        let table = txn.open_table(CONFIG).map_err(redb_err(op))?;
        let found = table.get(key).map_err(redb_err(op))?;
        found.map(|g| decode_config(key, g.value())).transpose()
    }

    fn put_config(&self, key: &str, value: &[u8]) -> Result<(), MetaError> {
        check_config(key, Some(value))?;
        let op = "writing config";
        let txn = self.db.begin_write().map_err(redb_err(op))?;
        {
            let mut table = txn.open_table(CONFIG).map_err(redb_err(op))?;
            table.insert(key, encode_config(value).as_slice()).map_err(redb_err(op))?;
        }
        txn.commit().map_err(redb_err(op))
    }

    fn delete_config(&self, key: &str) -> Result<bool, MetaError> {
        check_config(key, None)?;
        let op = "deleting config";
        let txn = self.db.begin_write().map_err(redb_err(op))?;
        let removed = {
            let mut table = txn.open_table(CONFIG).map_err(redb_err(op))?;
            table.remove(key).map_err(redb_err(op))?.is_some()
        };
        txn.commit().map_err(redb_err(op))?;
        Ok(removed)
    }

    fn list_config(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, MetaError> {
        check_config(prefix, None)?;
        let op = "listing config";
        let txn = self.db.begin_read().map_err(redb_err(op))?;
        let table = txn.open_table(CONFIG).map_err(redb_err(op))?;
        let mut out = Vec::new();
        for entry in table.range(prefix..).map_err(redb_err(op))? {
            let (k, v) = entry.map_err(redb_err(op))?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_owned(), decode_config(key, v.value())?));
        }
        Ok(out)
    }
}

impl MetaStore for RedbMetaStore {
    fn list_volumes(&self) -> MetaFuture<'_, Vec<VolumeRecord>> {
        self.blocking("listing volumes", |db| db.list_volumes())
    }

    fn get_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, Option<VolumeRecord>> {
        let name = name.to_owned();
        self.blocking("reading a volume", move |db| db.get_volume(&name))
    }

    fn create_volume(&self, req: NewVolume) -> MetaFuture<'_, VolumeRecord> {
        self.blocking("creating a volume", move |db| db.create_volume(req))
    }

    fn update_volume<'a>(&'a self, rec: &'a VolumeRecord) -> MetaFuture<'a, VolumeRecord> {
        let rec = rec.clone();
        self.blocking("updating a volume", move |db| db.update_volume(&rec))
    }

    fn delete_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, VolumeRecord> {
        let name = name.to_owned();
        self.blocking("deleting a volume", move |db| db.delete_volume(&name))
    }

    fn get_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<Vec<u8>>> {
        let key = key.to_owned();
        self.blocking("reading config", move |db| db.get_config(&key))
    }

    fn put_config<'a>(&'a self, key: &'a str, value: &'a [u8]) -> MetaFuture<'a, ()> {
        let (key, value) = (key.to_owned(), value.to_vec());
        self.blocking("writing config", move |db| db.put_config(&key, &value))
    }

    fn delete_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, bool> {
        let key = key.to_owned();
        self.blocking("deleting config", move |db| db.delete_config(&key))
    }

    fn list_config<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Vec<(String, Vec<u8>)>> {
        let prefix = prefix.to_owned();
        self.blocking("listing config", move |db| db.list_config(&prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, RedbMetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
        (dir, s)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        crate::testing::check_conformance(|| async {
            let (dir, s) = store();
            (Arc::new(s) as Arc<dyn MetaStore>, dir)
        })
        .await;
    }

    #[tokio::test]
    async fn volumes_and_config_persist_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = {
            let s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
            let a = s.create_volume(NewVolume::new("a", 1 << 30)).await.unwrap();
            let b = s.create_volume(NewVolume::new("b", 1 << 20)).await.unwrap();
            let mut grown = b.clone();
            grown.size_bytes = 2 << 20;
            let b = s.update_volume(&grown).await.unwrap();
            s.put_config("node.uuid", b"\x01\x02").await.unwrap();
            (a, b)
        };
        let s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
        assert_eq!(s.path(), dir.path().join(META_FILE_NAME));
        assert_eq!(s.list_volumes().await.unwrap(), vec![a, b]);
        assert_eq!(s.get_config("node.uuid").await.unwrap().as_deref(), Some(&b"\x01\x02"[..]));
        // The id counter persisted too.
        assert_eq!(s.create_volume(NewVolume::new("c", 4096)).await.unwrap().id, 3);
    }

    #[tokio::test]
    async fn ids_are_not_reused_after_delete_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
            assert_eq!(s.create_volume(NewVolume::new("a", 4096)).await.unwrap().id, 1);
            assert_eq!(s.create_volume(NewVolume::new("b", 4096)).await.unwrap().id, 2);
            s.delete_volume("b").await.unwrap();
        }
        let s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
        assert_eq!(s.create_volume(NewVolume::new("b", 4096)).await.unwrap().id, 3);
    }

    #[test]
    fn the_store_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let (dir, s) = store();
        let path = dir.path().join(META_FILE_NAME);
        assert_eq!(mode(&path), 0o600);
        drop(s);
        // A store from before (0644) is tightened when opened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _s = RedbMetaStore::open_in_dir(dir.path()).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn second_open_while_first_is_open_is_in_use() {
        let (dir, _first) = store();
        let err = RedbMetaStore::open_in_dir(dir.path()).unwrap_err();
        match &err {
            MetaError::InUse { dir: d, path } => {
                assert_eq!(d, dir.path());
                assert_eq!(path, &dir.path().join(META_FILE_NAME));
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("is in use by another strata process"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    }

    #[test]
    fn released_after_drop() {
        let (dir, first) = store();
        drop(first);
        RedbMetaStore::open_in_dir(dir.path()).unwrap();
    }

    /// Writes raw bytes into a table of a closed store, as a bug or a bad
    /// disk might have.
    fn poke(path: &Path, table: TableDefinition<&str, &[u8]>, key: &str, value: &[u8]) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(table).unwrap().insert(key, value).unwrap();
        txn.commit().unwrap();
    }

    #[tokio::test]
    async fn garbage_value_bytes_are_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(META_FILE_NAME);
        {
            let s = RedbMetaStore::open(&path).unwrap();
            s.create_volume(NewVolume::new("good", 4096)).await.unwrap();
        }
        poke(&path, VOLUMES, "bad", b"\x00\xffnot json at all");
        poke(&path, CONFIG, "k", b"{\"format\":99,\"hex\":\"\"}");
        let s = RedbMetaStore::open(&path).unwrap();
        let is_corrupt = |r: Result<_, MetaError>, want: &str| match r {
            Err(MetaError::Corrupt { key, .. }) => assert_eq!(key, want),
            Err(other) => panic!("expected Corrupt, got {other:?}"),
            Ok(_) => panic!("expected Corrupt, got Ok"),
        };
        is_corrupt(s.get_volume("bad").await.map(|_| ()), "volumes/bad");
        is_corrupt(s.list_volumes().await.map(|_| ()), "volumes/bad");
        is_corrupt(s.delete_volume("bad").await.map(|_| ()), "volumes/bad");
        is_corrupt(s.get_config("k").await.map(|_| ()), "config/k");
        // Creating needs every record (nsid uniqueness), so it refuses too.
        is_corrupt(s.create_volume(NewVolume::new("new", 4096)).await.map(|_| ()), "volumes/bad");
        // The healthy record is still readable, and the failed delete removed nothing.
        assert!(s.get_volume("good").await.unwrap().is_some());
        is_corrupt(s.get_volume("bad").await.map(|_| ()), "volumes/bad");
    }

    #[test]
    fn newer_store_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(META_FILE_NAME);
        drop(RedbMetaStore::open(&path).unwrap());
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(COUNTERS).unwrap().insert(STORE_FORMAT, 2).unwrap();
            txn.commit().unwrap();
        }
        match RedbMetaStore::open(&path) {
            Err(MetaError::Corrupt { reason, .. }) => {
                assert!(reason.contains("upgrade strata"), "{reason}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_file_that_is_not_redb_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(META_FILE_NAME);
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        assert!(RedbMetaStore::open(&path).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_creates_get_distinct_ids() {
        let (_dir, s) = store();
        let s = Arc::new(s);
        let tasks: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for i in 0..5 {
                        ids.push(s.create_volume(NewVolume::new(format!("t{t}-{i}"), 4096)).await.unwrap().id);
                    }
                    ids
                })
            })
            .collect();
        let mut ids = Vec::new();
        for t in tasks {
            ids.extend(t.await.unwrap());
        }
        ids.sort_unstable();
        assert_eq!(ids, (1..=20).collect::<Vec<_>>());
    }

    /// The blocking transaction belongs to the blocking pool, not to the
    /// future: once the future has been polled, dropping it still lets the
    /// create commit (the trait allows either outcome; redb's is "after").
    #[tokio::test]
    async fn a_dropped_create_still_commits_once_started() {
        let (_dir, s) = store();
        let mut fut = s.create_volume(NewVolume::new("v", 4096));
        // One poll spawns the blocking call; it cannot finish within it.
        let polled = futures_poll_once(&mut fut).await;
        drop(fut);
        if polled.is_none() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while s.get_volume("v").await.unwrap().is_none() {
                assert!(std::time::Instant::now() < deadline, "the dropped create never committed");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        assert_eq!(s.get_volume("v").await.unwrap().map(|r| r.id), Some(1));
    }

    /// Polls `fut` once; `Some` if it finished.
    async fn futures_poll_once<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut *fut).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
