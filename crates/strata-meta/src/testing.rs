//! The conformance suite every [`MetaStore`] backend must pass.
//!
//! Backends call [`check_conformance`] from their tests with a factory that
//! makes a fresh, empty store. The suite checks the behaviour the trait
//! promises, not the backend's internals; persistence, locking and
//! corruption are backend-specific and tested beside each backend.
//!
//! Available in this crate's tests and, to other crates, with the
//! `test-utils` feature. It panics on the first broken promise, as tests do.

use crate::error::MetaError;
use crate::record::{NewVolume, VolumeRecord};
use crate::store::{MAX_CONFIG_VALUE_LEN, MetaStore};
use crate::validate::DISCOVERY_NQN;

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e";
const HOST_B: &str = "nqn.2026-11.io.example:host-b";

/// Runs every conformance check, each on a fresh store from `make`. The
/// second value `make` returns (a temp dir, say) is kept alive until that
/// check ends.
///
/// # Panics
///
/// On the first behaviour that breaks the [`MetaStore`] contract.
pub fn check_conformance<G>(mut make: impl FnMut() -> (Box<dyn MetaStore>, G)) {
    type Check = fn(&dyn MetaStore);
    let checks: [(&str, Check); 11] = [
        ("round_trip", round_trip),
        ("defaults", defaults),
        ("duplicate_name", duplicate_name),
        ("ids_never_reused", ids_never_reused),
        ("invalid_requests", invalid_requests),
        ("generation_conflict", generation_conflict),
        ("update_rules", update_rules),
        ("shared_subsystem_nsids", shared_subsystem_nsids),
        ("missing_volumes", missing_volumes),
        ("config", config),
        ("list_is_sorted", list_is_sorted),
    ];
    for (name, check) in checks {
        let (store, guard) = make();
        eprintln!("conformance: {name}");
        check(store.as_ref());
        drop(guard);
    }
}

fn round_trip(s: &dyn MetaStore) {
    assert_eq!(s.list_volumes().unwrap(), vec![]);
    let created = s.create_volume(NewVolume::new("vol1", 8 << 30)).unwrap();
    assert_eq!(s.get_volume("vol1").unwrap(), Some(created.clone()));
    assert_eq!(s.list_volumes().unwrap(), vec![created.clone()]);

    let mut grown = created.clone();
    grown.size_bytes = 16 << 30;
    grown.allowed_hosts = vec![HOST_A.into(), HOST_B.into()];
    let updated = s.update_volume(&grown).unwrap();
    assert_eq!(updated.generation, created.generation + 1);
    assert_eq!(updated.size_bytes, 16 << 30);
    assert_eq!(s.get_volume("vol1").unwrap(), Some(updated.clone()));

    assert_eq!(s.delete_volume("vol1").unwrap(), updated);
    assert_eq!(s.get_volume("vol1").unwrap(), None);
    assert_eq!(s.list_volumes().unwrap(), vec![]);
}

fn defaults(s: &dyn MetaStore) {
    let r = s.create_volume(NewVolume::new("vol1", 4096)).unwrap();
    assert_eq!(r.name, "vol1");
    assert_eq!(r.nqn, "nqn.2026-11.io.strata:vol1");
    assert_eq!(r.nsid, 1);
    assert_eq!(r.block_size, 4096);
    assert_eq!(r.generation, 0);
    assert!(r.allowed_hosts.is_empty());
    assert_ne!(r.nguid, [0; 16]);
    assert_eq!(r.uuid[6] >> 4, 4, "UUID must be version 4");
    assert!(r.created_unix > 1_700_000_000, "created_unix must be the wall clock");
    let other = s
        .create_volume(NewVolume {
            block_size: 512,
            nqn: Some("nqn.2026-11.io.example:custom".into()),
            allowed_hosts: vec![HOST_A.into()],
            ..NewVolume::new("vol2", 512)
        })
        .unwrap();
    assert_eq!(other.nqn, "nqn.2026-11.io.example:custom");
    assert_eq!(other.block_size, 512);
    assert_eq!(other.allowed_hosts, vec![HOST_A.to_string()]);
    assert_ne!(other.id, r.id);
    assert_ne!(other.nguid, r.nguid);
    assert_ne!(other.uuid, r.uuid);
}

fn duplicate_name(s: &dyn MetaStore) {
    let first = s.create_volume(NewVolume::new("vol1", 4096)).unwrap();
    let err = s.create_volume(NewVolume::new("vol1", 8192)).unwrap_err();
    assert!(matches!(&err, MetaError::AlreadyExists { name } if name == "vol1"), "{err:?}");
    assert_eq!(s.get_volume("vol1").unwrap(), Some(first));
}

fn ids_never_reused(s: &dyn MetaStore) {
    let a = s.create_volume(NewVolume::new("a", 4096)).unwrap();
    let b = s.create_volume(NewVolume::new("b", 4096)).unwrap();
    assert!(b.id > a.id);
    s.delete_volume("b").unwrap();
    s.delete_volume("a").unwrap();
    let again = s.create_volume(NewVolume::new("a", 4096)).unwrap();
    assert!(again.id > b.id, "id {} reused after delete", again.id);
}

fn invalid_requests(s: &dyn MetaStore) {
    let try_create = |req: NewVolume| s.create_volume(req).unwrap_err();
    let base = || NewVolume::new("vol1", 1 << 20);
    for name in ["", ".x", "-x", "a/b", "a b", &"a".repeat(65)] {
        let e = try_create(NewVolume { name: name.into(), ..base() });
        assert!(matches!(e, MetaError::InvalidName(_)), "{name:?}: {e:?}");
    }
    for (size, bs) in [(0, 4096), (4097, 4096), (512, 4096), (1000, 512)] {
        let e = try_create(NewVolume { size_bytes: size, block_size: bs, ..base() });
        assert!(matches!(e, MetaError::InvalidSize { .. }), "{size}/{bs}: {e:?}");
    }
    for bs in [0, 1024, 8192] {
        let e = try_create(NewVolume { block_size: bs, ..base() });
        assert!(matches!(e, MetaError::InvalidBlockSize { .. }), "{bs}: {e:?}");
    }
    for nqn in ["vol1", "nqn.bogus", DISCOVERY_NQN] {
        let e = try_create(NewVolume { nqn: Some(nqn.into()), ..base() });
        assert!(matches!(e, MetaError::InvalidNqn(_)), "{nqn}: {e:?}");
    }
    let e = try_create(NewVolume { allowed_hosts: vec!["host".into()], ..base() });
    assert!(matches!(e, MetaError::InvalidHostNqn(_)), "{e:?}");
    let e = try_create(NewVolume { allowed_hosts: vec![HOST_A.into(), HOST_A.into()], ..base() });
    assert!(matches!(e, MetaError::DuplicateHost { .. }), "{e:?}");
    assert_eq!(s.list_volumes().unwrap(), vec![], "a rejected create must store nothing");

    let e = s.get_volume("../etc").unwrap_err();
    assert!(matches!(e, MetaError::InvalidName(_)), "{e:?}");
    let e = s.delete_volume("").unwrap_err();
    assert!(matches!(e, MetaError::InvalidName(_)), "{e:?}");
}

fn generation_conflict(s: &dyn MetaStore) {
    let read_by_a = s.create_volume(NewVolume::new("vol1", 4096)).unwrap();
    let read_by_b = read_by_a.clone();
    let mut a = read_by_a;
    a.size_bytes = 8192;
    let stored = s.update_volume(&a).unwrap();
    let mut b = read_by_b;
    b.size_bytes = 12288;
    let e = s.update_volume(&b).unwrap_err();
    assert!(matches!(&e, MetaError::Conflict { expected: 0, found: 1, name } if name == "vol1"), "{e:?}");
    assert_eq!(s.get_volume("vol1").unwrap(), Some(stored.clone()));
    // Retrying from a fresh read works.
    let mut retry = stored;
    retry.size_bytes = 12288;
    assert_eq!(s.update_volume(&retry).unwrap().generation, 2);
}

fn update_rules(s: &dyn MetaStore) {
    let r = s.create_volume(NewVolume::new("vol1", 4096)).unwrap();
    let rejected = |f: &dyn Fn(&mut VolumeRecord)| {
        let mut x = r.clone();
        f(&mut x);
        let e = s.update_volume(&x).unwrap_err();
        assert_eq!(s.get_volume("vol1").unwrap().as_ref(), Some(&r), "a rejected update must change nothing");
        e
    };
    let e = rejected(&|x| x.block_size = 512);
    assert!(matches!(e, MetaError::Immutable { field: "block_size", .. }), "{e:?}");
    let e = rejected(&|x| x.nguid[3] ^= 1);
    assert!(matches!(e, MetaError::Immutable { field: "nguid", .. }), "{e:?}");
    let e = rejected(&|x| x.uuid[3] ^= 1);
    assert!(matches!(e, MetaError::Immutable { field: "uuid", .. }), "{e:?}");
    let e = rejected(&|x| x.eui64[3] ^= 1);
    assert!(matches!(e, MetaError::Immutable { field: "eui64", .. }), "{e:?}");
    let e = rejected(&|x| x.created_unix += 1);
    assert!(matches!(e, MetaError::Immutable { field: "created_unix", .. }), "{e:?}");
    let e = rejected(&|x| x.size_bytes = 4095);
    assert!(matches!(e, MetaError::InvalidSize { .. }), "{e:?}");
    let e = rejected(&|x| x.nqn = "bad".into());
    assert!(matches!(e, MetaError::InvalidNqn(_)), "{e:?}");
    let e = rejected(&|x| x.nsid = 0);
    assert!(matches!(e, MetaError::InvalidNsid { nsid: 0 }), "{e:?}");
    let e = rejected(&|x| x.name = "missing".into());
    assert!(matches!(e, MetaError::NotFound { .. }), "{e:?}");

    // Deleted and recreated under the same name: the old record is stale
    // even though both are at generation 0.
    s.delete_volume("vol1").unwrap();
    let fresh = s.create_volume(NewVolume::new("vol1", 4096)).unwrap();
    let e = s.update_volume(&r).unwrap_err();
    assert!(matches!(e, MetaError::Replaced { .. }), "{e:?}");
    assert_eq!(s.get_volume("vol1").unwrap(), Some(fresh));
}

fn shared_subsystem_nsids(s: &dyn MetaStore) {
    let shared = "nqn.2026-11.io.strata:shared";
    let mk =
        |name: &str| s.create_volume(NewVolume { nqn: Some(shared.into()), ..NewVolume::new(name, 4096) }).unwrap();
    assert_eq!(mk("a").nsid, 1);
    let b = mk("b");
    assert_eq!(b.nsid, 2);
    s.delete_volume("a").unwrap();
    // Namespace ids are per-subsystem slots and may be reused; volume ids not.
    assert_eq!(mk("c").nsid, 1);
    let mut clash = b.clone();
    clash.nsid = 1;
    let e = s.update_volume(&clash).unwrap_err();
    assert!(matches!(&e, MetaError::NsidInUse { nsid: 1, holder, .. } if holder == "c"), "{e:?}");
    let mut free = b;
    free.nsid = 7;
    assert_eq!(s.update_volume(&free).unwrap().nsid, 7);
}

fn missing_volumes(s: &dyn MetaStore) {
    assert_eq!(s.get_volume("nope").unwrap(), None);
    let e = s.delete_volume("nope").unwrap_err();
    assert!(matches!(&e, MetaError::NotFound { name } if name == "nope"), "{e:?}");
}

fn config(s: &dyn MetaStore) {
    assert_eq!(s.get_config("node.uuid").unwrap(), None);
    s.put_config("node.uuid", b"\x00\x01\xff").unwrap();
    assert_eq!(s.get_config("node.uuid").unwrap(), Some(b"\x00\x01\xff".to_vec()));
    s.put_config("node.uuid", b"").unwrap();
    assert_eq!(s.get_config("node.uuid").unwrap(), Some(vec![]));
    s.put_config("serial", &vec![7; MAX_CONFIG_VALUE_LEN]).unwrap();
    let e = s.put_config("serial", &vec![7; MAX_CONFIG_VALUE_LEN + 1]).unwrap_err();
    assert!(matches!(e, MetaError::ConfigValueTooLarge { .. }), "{e:?}");
    assert_eq!(s.get_config("serial").unwrap().map(|v| v.len()), Some(MAX_CONFIG_VALUE_LEN));
    for bad in ["", "has space", "tab\t"] {
        let e = s.put_config(bad, b"x").unwrap_err();
        assert!(matches!(e, MetaError::InvalidConfigKey { .. }), "{bad:?}: {e:?}");
        let e = s.get_config(bad).unwrap_err();
        assert!(matches!(e, MetaError::InvalidConfigKey { .. }), "{bad:?}: {e:?}");
    }
}

fn list_is_sorted(s: &dyn MetaStore) {
    for name in ["b", "C", "a", "a1", "_z"] {
        s.create_volume(NewVolume::new(name, 4096)).unwrap();
    }
    let names: Vec<String> = s.list_volumes().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["C", "_z", "a", "a1", "b"]);
}
