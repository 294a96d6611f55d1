//! The [`MetaStore`] contract, and the rules every backend shares.
//!
//! Backends (redb, etcd, memory for tests) differ only in how
//! they make an operation atomic. What an operation checks and produces is
//! decided here, once, by [`prepare_new`], [`allocate_nsid`],
//! [`prepare_update`] and [`check_config`], so that every backend gives the
//! same answer to the same request. `testing::check_conformance` (feature
//! `test-utils`) holds each backend to it.

use std::pin::Pin;

use crate::error::MetaError;
use crate::record::{Identity, NewVolume, VolumeRecord, check_geometry, check_hosts, check_record};
use crate::validate::{default_nqn, validate_subsystem_nqn, validate_volume_name};

/// The longest config key, in bytes.
pub const MAX_CONFIG_KEY_LEN: usize = 128;

/// The largest config value, in bytes. Config holds small node-level
/// settings (node UUID, serial number), not data.
pub const MAX_CONFIG_VALUE_LEN: usize = 64 * 1024;

/// The future a [`MetaStore`] call returns: boxed so that the trait stays
/// usable as `Arc<dyn MetaStore>`, and `Send` so that callers can hold it
/// across their own `.await`s on a multi-threaded runtime.
pub type MetaFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, MetaError>> + Send + 'a>>;

/// The metadata store: volumes and node-level settings.
///
/// # Contract
///
/// Every implementation MUST:
/// - make each call atomic: a call that returns an error changed nothing
///   (except where the error says the outcome is unknown, see below), and
///   concurrent callers never see half of an operation;
/// - make a successful call durable before it returns (on the backend's
///   terms: fsync for redb, a committed raft entry for etcd);
/// - never hand out a volume id twice, even after the volume is deleted,
///   and even when callers in several processes create volumes at once;
/// - persist only records that pass the checks of this crate, and report
///   persisted bytes it cannot decode as [`MetaError::Corrupt`], never panic;
/// - reject an update whose `generation` differs from the stored one with
///   [`MetaError::Conflict`];
/// - not block the async runtime's threads: work that blocks (file I/O,
///   fsync) runs elsewhere, e.g. under `tokio::task::spawn_blocking`;
/// - do nothing until the returned future is first polled.
///
/// Callers may share one store between tasks and threads (`Send + Sync`,
/// usable as `Arc<dyn MetaStore>`) and MUST poll the futures inside a tokio
/// runtime. A caller that updates a volume MUST pass the record as it read
/// it, changed only in mutable fields (size, NQN, nsid, allowed hosts), with
/// its generation untouched.
///
/// # Cancel safety
///
/// A call's future may be dropped at any `.await` (a deadline fired, the
/// client went away). The operation then either happened completely or not
/// at all, never half; the caller cannot tell which without reading again
/// (an update's generation, or whether a created name exists, tells).
/// Implementations MUST keep this: the redb backend runs each transaction
/// to completion on a blocking thread whatever happens to the future; the
/// etcd backend mutates only in one etcd transaction, which etcd applies
/// whole or not at all. The same holds for the errors that say the outcome
/// is unknown (an etcd timeout or a connection lost after sending). A
/// retried create may therefore answer [`MetaError::AlreadyExists`] for the
/// caller's own earlier attempt, and a retried update
/// [`MetaError::Conflict`].
pub trait MetaStore: Send + Sync {
    /// All volumes, sorted by name (bytewise).
    ///
    /// # Errors
    ///
    /// [`MetaError::Corrupt`] if any stored record cannot be decoded; backend errors.
    fn list_volumes(&self) -> MetaFuture<'_, Vec<VolumeRecord>>;

    /// The volume called `name`, or `None`.
    ///
    /// # Errors
    ///
    /// [`MetaError::InvalidName`] if `name` could never be a volume name;
    /// [`MetaError::Corrupt`]; backend errors.
    fn get_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, Option<VolumeRecord>>;

    /// Creates a volume: allocates a fresh id, a random NGUID and UUID, the
    /// lowest namespace id free in its subsystem (1 for a volume alone in
    /// its subsystem), and records the creation time. Generation starts at 0.
    ///
    /// # Errors
    ///
    /// [`MetaError::AlreadyExists`] if the name is taken; `InvalidName`,
    /// `InvalidSize`, `InvalidBlockSize`, `InvalidNqn`, `InvalidHostNqn` or
    /// `DuplicateHost` for a bad request; `NoFreeNsid`; `Corrupt`; backend errors.
    fn create_volume(&self, req: NewVolume) -> MetaFuture<'_, VolumeRecord>;

    /// Replaces a volume's mutable fields (size, NQN, nsid, allowed hosts)
    /// with those of `rec` and returns the stored record, whose generation
    /// is `rec.generation + 1`.
    ///
    /// # Errors
    ///
    /// [`MetaError::NotFound`]; [`MetaError::Replaced`] if the volume was
    /// deleted and recreated since `rec` was read; [`MetaError::Conflict`] if
    /// it was updated since; [`MetaError::Immutable`] if `rec` changes a fixed
    /// field; [`MetaError::NsidInUse`]; the validation errors of
    /// [`create_volume`](Self::create_volume); `Corrupt`; backend errors.
    fn update_volume<'a>(&'a self, rec: &'a VolumeRecord) -> MetaFuture<'a, VolumeRecord>;

    /// Deletes a volume and returns its last record. Its id is never reused.
    ///
    /// # Errors
    ///
    /// [`MetaError::NotFound`]; `InvalidName`; `Corrupt` if the stored record
    /// cannot be decoded (nothing is removed then); backend errors.
    fn delete_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, VolumeRecord>;

    /// The config value under `key`, or `None`.
    ///
    /// # Errors
    ///
    /// [`MetaError::InvalidConfigKey`]; `Corrupt`; backend errors.
    fn get_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<Vec<u8>>>;

    /// Sets the config value under `key`, replacing any previous one.
    ///
    /// # Errors
    ///
    /// [`MetaError::InvalidConfigKey`]; [`MetaError::ConfigValueTooLarge`]
    /// above [`MAX_CONFIG_VALUE_LEN`]; backend errors.
    fn put_config<'a>(&'a self, key: &'a str, value: &'a [u8]) -> MetaFuture<'a, ()>;

    /// Removes the config value under `key`; whether there was one.
    ///
    /// # Errors
    ///
    /// [`MetaError::InvalidConfigKey`]; backend errors.
    fn delete_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, bool>;

    /// Every config key starting with `prefix` and its value, in key
    /// order.
    ///
    /// # Errors
    ///
    /// [`MetaError::InvalidConfigKey`] for a bad prefix; `Corrupt`;
    /// backend errors.
    fn list_config<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Vec<(String, Vec<u8>)>>;
}

/// Checks a create request on its own (before any store access) and returns
/// the NQN the volume will have.
pub(crate) fn check_new(req: &NewVolume) -> Result<String, MetaError> {
    validate_volume_name(&req.name)?;
    check_geometry(req.size_bytes, req.block_size)?;
    let nqn = req.nqn.clone().unwrap_or_else(|| default_nqn(&req.name));
    validate_subsystem_nqn(&nqn).map_err(MetaError::InvalidNqn)?;
    check_hosts(&req.allowed_hosts)?;
    Ok(nqn)
}

/// The lowest namespace id that no volume in `others` uses under `nqn`.
pub(crate) fn allocate_nsid<'a>(
    nqn: &str,
    others: impl IntoIterator<Item = &'a VolumeRecord>,
) -> Result<u32, MetaError> {
    let mut used: Vec<u32> = others.into_iter().filter(|r| r.nqn == nqn).map(|r| r.nsid).collect();
    used.sort_unstable();
    let mut candidate = 1u32;
    for nsid in used {
        if nsid == candidate {
            candidate = candidate.saturating_add(1);
        } else if nsid > candidate {
            break;
        }
    }
    if candidate == u32::MAX {
        return Err(MetaError::NoFreeNsid { nqn: nqn.to_owned() });
    }
    Ok(candidate)
}

/// Builds the record of a new volume. `req` must have passed [`check_new`],
/// which returned `nqn`.
pub(crate) fn prepare_new(
    req: NewVolume,
    nqn: String,
    id: u64,
    nsid: u32,
    identity: Identity,
    now_unix: u64,
) -> VolumeRecord {
    VolumeRecord {
        id,
        name: req.name,
        size_bytes: req.size_bytes,
        block_size: req.block_size,
        nqn,
        nsid,
        nguid: identity.nguid,
        uuid: identity.uuid,
        eui64: identity.eui64,
        allowed_hosts: req.allowed_hosts,
        created_unix: now_unix,
        generation: 0,
    }
}

/// Checks an update of `stored` to `new` and returns the record to store.
/// `others` are all volumes except `stored`.
pub(crate) fn prepare_update<'a>(
    stored: &VolumeRecord,
    new: &VolumeRecord,
    others: impl IntoIterator<Item = &'a VolumeRecord>,
) -> Result<VolumeRecord, MetaError> {
    check_record(new)?;
    if stored.id != new.id {
        return Err(MetaError::Replaced { name: new.name.clone(), expected_id: new.id, found_id: stored.id });
    }
    if stored.generation != new.generation {
        return Err(MetaError::Conflict { name: new.name.clone(), expected: new.generation, found: stored.generation });
    }
    let fixed: [(&'static str, bool); 5] = [
        ("block_size", stored.block_size == new.block_size),
        ("nguid", stored.nguid == new.nguid),
        ("uuid", stored.uuid == new.uuid),
        ("eui64", stored.eui64 == new.eui64),
        ("created_unix", stored.created_unix == new.created_unix),
    ];
    if let Some((field, _)) = fixed.iter().find(|(_, same)| !same) {
        return Err(MetaError::Immutable { name: new.name.clone(), field });
    }
    let moved = (stored.nqn.as_str(), stored.nsid) != (new.nqn.as_str(), new.nsid);
    let holder = moved.then(|| others.into_iter().find(|r| r.nqn == new.nqn && r.nsid == new.nsid)).flatten();
    if let Some(holder) = holder {
        return Err(MetaError::NsidInUse { nqn: new.nqn.clone(), nsid: new.nsid, holder: holder.name.clone() });
    }
    let generation = stored.generation.checked_add(1).ok_or_else(|| {
        MetaError::corrupt(crate::format::volume_key_label(&stored.name), "generation is at its maximum")
    })?;
    Ok(VolumeRecord { generation, ..new.clone() })
}

/// Checks a config key and, if given, its value.
pub(crate) fn check_config(key: &str, value: Option<&[u8]>) -> Result<(), MetaError> {
    let invalid = |reason| MetaError::InvalidConfigKey { key: key.to_owned(), reason };
    if key.is_empty() {
        return Err(invalid("it is empty; use 1 to 128 printable ASCII characters"));
    }
    if key.len() > MAX_CONFIG_KEY_LEN {
        return Err(invalid("it is longer than 128 bytes"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid("only printable ASCII without spaces is allowed"));
    }
    if let Some(v) = value
        && v.len() > MAX_CONFIG_VALUE_LEN
    {
        return Err(MetaError::ConfigValueTooLarge { key: key.to_owned(), len: v.len(), max: MAX_CONFIG_VALUE_LEN });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str, nqn: &str, nsid: u32) -> VolumeRecord {
        let req = NewVolume { nqn: Some(nqn.into()), ..NewVolume::new(name, 1 << 20) };
        let nqn = check_new(&req).unwrap();
        prepare_new(req, nqn, 1, nsid, Identity::from_random([5; 32]), 0)
    }

    #[test]
    fn nsid_is_lowest_free_in_the_subsystem() {
        let n = "nqn.2026-11.io.strata:shared";
        let o = "nqn.2026-11.io.strata:other";
        assert_eq!(allocate_nsid(n, []).unwrap(), 1);
        let vols = [rec("a", n, 1), rec("b", n, 2), rec("c", n, 4), rec("d", o, 3)];
        assert_eq!(allocate_nsid(n, &vols).unwrap(), 3);
        assert_eq!(allocate_nsid(o, &vols).unwrap(), 1);
    }

    #[test]
    fn update_rules() {
        let n = "nqn.2026-11.io.strata:shared";
        let stored = rec("a", n, 1);
        let other = rec("b", n, 2);
        let mut new = stored.clone();
        new.size_bytes *= 2;
        let out = prepare_update(&stored, &new, [&other]).unwrap();
        assert_eq!(out.generation, 1);
        assert_eq!(out.size_bytes, 2 << 20);

        let mut stale = new.clone();
        stale.generation = 5;
        assert!(matches!(
            prepare_update(&stored, &stale, [&other]),
            Err(MetaError::Conflict { expected: 5, found: 0, .. })
        ));
        let mut other_id = new.clone();
        other_id.id = 99;
        assert!(matches!(prepare_update(&stored, &other_id, [&other]), Err(MetaError::Replaced { .. })));
        let mut bs = new.clone();
        bs.block_size = 512;
        assert!(matches!(
            prepare_update(&stored, &bs, [&other]),
            Err(MetaError::Immutable { field: "block_size", .. })
        ));
        let mut u = new.clone();
        u.uuid[0] ^= 1;
        assert!(matches!(prepare_update(&stored, &u, [&other]), Err(MetaError::Immutable { field: "uuid", .. })));
        let mut clash = new.clone();
        clash.nsid = 2;
        assert!(matches!(
            prepare_update(&stored, &clash, [&other]),
            Err(MetaError::NsidInUse { nsid: 2, ref holder, .. }) if holder == "b"
        ));
        let mut moved = new;
        moved.nqn = "nqn.2026-11.io.strata:elsewhere".into();
        moved.nsid = 2;
        assert_eq!(prepare_update(&stored, &moved, [&other]).unwrap().nsid, 2);
    }

    #[test]
    fn config_keys_and_values_are_bounded() {
        assert!(check_config("node.uuid", Some(b"x")).is_ok());
        assert!(matches!(check_config("", None), Err(MetaError::InvalidConfigKey { .. })));
        assert!(matches!(check_config("a b", None), Err(MetaError::InvalidConfigKey { .. })));
        assert!(matches!(check_config(&"k".repeat(129), None), Err(MetaError::InvalidConfigKey { .. })));
        assert!(matches!(
            check_config("k", Some(&vec![0; MAX_CONFIG_VALUE_LEN + 1])),
            Err(MetaError::ConfigValueTooLarge { .. })
        ));
    }
}
