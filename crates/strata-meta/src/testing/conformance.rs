//! The conformance suite every [`MetaStore`] backend must pass.
//!
//! Backends call [`check_conformance`] from their tests with a factory that
//! makes a fresh, empty store. The suite checks the behaviour the trait
//! promises, not the backend's internals; persistence, locking and
//! corruption are backend-specific and tested beside each backend.
//!
//! It needs a multi-threaded tokio runtime (the concurrency checks run
//! calls on several tasks at once). It panics on the first broken promise,
//! as tests do.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::MetaError;
use crate::record::{NewVolume, VolumeRecord};
use crate::store::{MAX_CONFIG_VALUE_LEN, MetaStore};
use crate::validate::DISCOVERY_NQN;

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e";
const HOST_B: &str = "nqn.2026-11.io.example:host-b";

type Store = Arc<dyn MetaStore>;
type Check = fn(Store) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs every conformance check, each on a fresh store from `make`. The
/// second value `make` returns (a temp dir, say) is kept alive until that
/// check ends.
///
/// # Panics
///
/// On the first behaviour that breaks the [`MetaStore`] contract.
pub async fn check_conformance<G, F, Fut>(mut make: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (Arc<dyn MetaStore>, G)>,
{
    let checks: [(&str, Check); 14] = [
        ("round_trip", |s| Box::pin(round_trip(s))),
        ("defaults", |s| Box::pin(defaults(s))),
        ("duplicate_name", |s| Box::pin(duplicate_name(s))),
        ("ids_never_reused", |s| Box::pin(ids_never_reused(s))),
        ("invalid_requests", |s| Box::pin(invalid_requests(s))),
        ("generation_conflict", |s| Box::pin(generation_conflict(s))),
        ("update_rules", |s| Box::pin(update_rules(s))),
        ("shared_subsystem_nsids", |s| Box::pin(shared_subsystem_nsids(s))),
        ("missing_volumes", |s| Box::pin(missing_volumes(s))),
        ("config", |s| Box::pin(config(s))),
        ("list_is_sorted", |s| Box::pin(list_is_sorted(s))),
        ("concurrent_creates", |s| Box::pin(concurrent_creates(s))),
        ("concurrent_updates", |s| Box::pin(concurrent_updates(s))),
        ("cancelled_calls_are_all_or_nothing", |s| Box::pin(cancelled_calls_are_all_or_nothing(s))),
    ];
    for (name, check) in checks {
        let (store, guard) = make().await;
        eprintln!("conformance: {name}");
        check(store).await;
        drop(guard);
    }
}

async fn round_trip(s: Store) {
    assert_eq!(s.list_volumes().await.unwrap(), vec![]);
    let created = s.create_volume(NewVolume::new("vol1", 8 << 30)).await.unwrap();
    assert_eq!(s.get_volume("vol1").await.unwrap(), Some(created.clone()));
    assert_eq!(s.list_volumes().await.unwrap(), vec![created.clone()]);

    let mut grown = created.clone();
    grown.size_bytes = 16 << 30;
    grown.allowed_hosts = vec![HOST_A.into(), HOST_B.into()];
    let updated = s.update_volume(&grown).await.unwrap();
    assert_eq!(updated.generation, created.generation + 1);
    assert_eq!(updated.size_bytes, 16 << 30);
    assert_eq!(s.get_volume("vol1").await.unwrap(), Some(updated.clone()));

    assert_eq!(s.delete_volume("vol1").await.unwrap(), updated);
    assert_eq!(s.get_volume("vol1").await.unwrap(), None);
    assert_eq!(s.list_volumes().await.unwrap(), vec![]);
}

async fn defaults(s: Store) {
    let r = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
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
        .await
        .unwrap();
    assert_eq!(other.nqn, "nqn.2026-11.io.example:custom");
    assert_eq!(other.block_size, 512);
    assert_eq!(other.allowed_hosts, vec![HOST_A.to_string()]);
    assert_ne!(other.id, r.id);
    assert_ne!(other.nguid, r.nguid);
    assert_ne!(other.uuid, r.uuid);
}

async fn duplicate_name(s: Store) {
    let first = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
    let err = s.create_volume(NewVolume::new("vol1", 8192)).await.unwrap_err();
    assert!(matches!(&err, MetaError::AlreadyExists { name } if name == "vol1"), "{err:?}");
    assert_eq!(s.get_volume("vol1").await.unwrap(), Some(first));
}

async fn ids_never_reused(s: Store) {
    let a = s.create_volume(NewVolume::new("a", 4096)).await.unwrap();
    let b = s.create_volume(NewVolume::new("b", 4096)).await.unwrap();
    assert!(b.id > a.id);
    s.delete_volume("b").await.unwrap();
    s.delete_volume("a").await.unwrap();
    let again = s.create_volume(NewVolume::new("a", 4096)).await.unwrap();
    assert!(again.id > b.id, "id {} reused after delete", again.id);
}

async fn invalid_requests(s: Store) {
    let base = || NewVolume::new("vol1", 1 << 20);
    type Expect = fn(&MetaError) -> bool;
    let mut cases: Vec<(NewVolume, Expect)> = Vec::new();
    for name in ["", ".x", "-x", "a/b", "a b", &"a".repeat(65)] {
        cases.push((NewVolume { name: name.into(), ..base() }, |e| matches!(e, MetaError::InvalidName(_))));
    }
    for (size, bs) in [(0, 4096), (4097, 4096), (512, 4096), (1000, 512)] {
        let req = NewVolume { size_bytes: size, block_size: bs, ..base() };
        cases.push((req, |e| matches!(e, MetaError::InvalidSize { .. })));
    }
    for bs in [0, 1024, 8192] {
        cases.push((NewVolume { block_size: bs, ..base() }, |e| matches!(e, MetaError::InvalidBlockSize { .. })));
    }
    for nqn in ["vol1", "nqn.bogus", DISCOVERY_NQN] {
        cases.push((NewVolume { nqn: Some(nqn.into()), ..base() }, |e| matches!(e, MetaError::InvalidNqn(_))));
    }
    cases.push((NewVolume { allowed_hosts: vec!["host".into()], ..base() }, |e| {
        matches!(e, MetaError::InvalidHostNqn(_))
    }));
    cases.push((NewVolume { allowed_hosts: vec![HOST_A.into(), HOST_A.into()], ..base() }, |e| {
        matches!(e, MetaError::DuplicateHost { .. })
    }));
    for (req, is_expected) in cases {
        let shown = format!("{req:?}");
        let e = s.create_volume(req).await.unwrap_err();
        assert!(is_expected(&e), "{shown}: {e:?}");
    }
    assert_eq!(s.list_volumes().await.unwrap(), vec![], "a rejected create must store nothing");

    let e = s.get_volume("../etc").await.unwrap_err();
    assert!(matches!(e, MetaError::InvalidName(_)), "{e:?}");
    let e = s.delete_volume("").await.unwrap_err();
    assert!(matches!(e, MetaError::InvalidName(_)), "{e:?}");
}

async fn generation_conflict(s: Store) {
    let read_by_a = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
    let read_by_b = read_by_a.clone();
    let mut a = read_by_a;
    a.size_bytes = 8192;
    let stored = s.update_volume(&a).await.unwrap();
    let mut b = read_by_b;
    b.size_bytes = 12288;
    let e = s.update_volume(&b).await.unwrap_err();
    assert!(matches!(&e, MetaError::Conflict { expected: 0, found: 1, name } if name == "vol1"), "{e:?}");
    assert_eq!(s.get_volume("vol1").await.unwrap(), Some(stored.clone()));
    // Retrying from a fresh read works.
    let mut retry = stored;
    retry.size_bytes = 12288;
    assert_eq!(s.update_volume(&retry).await.unwrap().generation, 2);
}

async fn update_rules(s: Store) {
    let r = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
    type Edit = fn(&mut VolumeRecord);
    type Expect = fn(&MetaError) -> bool;
    let cases: [(Edit, Expect); 9] = [
        (|x| x.block_size = 512, |e| matches!(e, MetaError::Immutable { field: "block_size", .. })),
        (|x| x.nguid[3] ^= 1, |e| matches!(e, MetaError::Immutable { field: "nguid", .. })),
        (|x| x.uuid[3] ^= 1, |e| matches!(e, MetaError::Immutable { field: "uuid", .. })),
        (|x| x.eui64[3] ^= 1, |e| matches!(e, MetaError::Immutable { field: "eui64", .. })),
        (|x| x.created_unix += 1, |e| matches!(e, MetaError::Immutable { field: "created_unix", .. })),
        (|x| x.size_bytes = 4095, |e| matches!(e, MetaError::InvalidSize { .. })),
        (|x| x.nqn = "bad".into(), |e| matches!(e, MetaError::InvalidNqn(_))),
        (|x| x.nsid = 0, |e| matches!(e, MetaError::InvalidNsid { nsid: 0 })),
        (|x| x.name = "missing".into(), |e| matches!(e, MetaError::NotFound { .. })),
    ];
    for (i, (edit, is_expected)) in cases.into_iter().enumerate() {
        let mut x = r.clone();
        edit(&mut x);
        let e = s.update_volume(&x).await.unwrap_err();
        assert!(is_expected(&e), "case {i}: {e:?}");
        assert_eq!(s.get_volume("vol1").await.unwrap().as_ref(), Some(&r), "a rejected update must change nothing");
    }

    // Deleted and recreated under the same name: the old record is stale
    // even though both are at generation 0.
    s.delete_volume("vol1").await.unwrap();
    let fresh = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
    let e = s.update_volume(&r).await.unwrap_err();
    assert!(matches!(e, MetaError::Replaced { .. }), "{e:?}");
    assert_eq!(s.get_volume("vol1").await.unwrap(), Some(fresh));
}

async fn shared_subsystem_nsids(s: Store) {
    let shared = "nqn.2026-11.io.strata:shared";
    let mk = |name: &str| NewVolume { nqn: Some(shared.into()), ..NewVolume::new(name, 4096) };
    assert_eq!(s.create_volume(mk("a")).await.unwrap().nsid, 1);
    let b = s.create_volume(mk("b")).await.unwrap();
    assert_eq!(b.nsid, 2);
    s.delete_volume("a").await.unwrap();
    // Namespace ids are per-subsystem slots and may be reused; volume ids not.
    assert_eq!(s.create_volume(mk("c")).await.unwrap().nsid, 1);
    let mut clash = b.clone();
    clash.nsid = 1;
    let e = s.update_volume(&clash).await.unwrap_err();
    assert!(matches!(&e, MetaError::NsidInUse { nsid: 1, holder, .. } if holder == "c"), "{e:?}");
    let mut free = b;
    free.nsid = 7;
    assert_eq!(s.update_volume(&free).await.unwrap().nsid, 7);
}

async fn missing_volumes(s: Store) {
    assert_eq!(s.get_volume("nope").await.unwrap(), None);
    let e = s.delete_volume("nope").await.unwrap_err();
    assert!(matches!(&e, MetaError::NotFound { name } if name == "nope"), "{e:?}");
}

async fn config(s: Store) {
    assert_eq!(s.get_config("node.uuid").await.unwrap(), None);
    s.put_config("node.uuid", b"\x00\x01\xff").await.unwrap();
    assert_eq!(s.get_config("node.uuid").await.unwrap(), Some(b"\x00\x01\xff".to_vec()));
    s.put_config("node.uuid", b"").await.unwrap();
    assert_eq!(s.get_config("node.uuid").await.unwrap(), Some(vec![]));
    s.put_config("serial", &vec![7; MAX_CONFIG_VALUE_LEN]).await.unwrap();
    let e = s.put_config("serial", &vec![7; MAX_CONFIG_VALUE_LEN + 1]).await.unwrap_err();
    assert!(matches!(e, MetaError::ConfigValueTooLarge { .. }), "{e:?}");
    assert_eq!(s.get_config("serial").await.unwrap().map(|v| v.len()), Some(MAX_CONFIG_VALUE_LEN));
    for bad in ["", "has space", "tab\t"] {
        let e = s.put_config(bad, b"x").await.unwrap_err();
        assert!(matches!(e, MetaError::InvalidConfigKey { .. }), "{bad:?}: {e:?}");
        let e = s.get_config(bad).await.unwrap_err();
        assert!(matches!(e, MetaError::InvalidConfigKey { .. }), "{bad:?}: {e:?}");
    }
    // Listing by prefix, in key order; deleting.
    for k in ["tok/b", "tok/a", "tok", "tokz", "to"] {
        s.put_config(k, k.as_bytes()).await.unwrap();
    }
    let listed: Vec<(String, Vec<u8>)> = s.list_config("tok/").await.unwrap();
    assert_eq!(listed, vec![("tok/a".into(), b"tok/a".to_vec()), ("tok/b".into(), b"tok/b".to_vec())]);
    assert_eq!(s.list_config("tok").await.unwrap().len(), 4);
    assert!(s.delete_config("tok/a").await.unwrap());
    assert!(!s.delete_config("tok/a").await.unwrap(), "already gone");
    assert_eq!(s.get_config("tok/a").await.unwrap(), None);
    assert_eq!(s.list_config("tok/").await.unwrap().len(), 1);
    assert!(matches!(s.list_config("has space").await.unwrap_err(), MetaError::InvalidConfigKey { .. }));
}

async fn list_is_sorted(s: Store) {
    for name in ["b", "C", "a", "a1", "_z"] {
        s.create_volume(NewVolume::new(name, 4096)).await.unwrap();
    }
    let names: Vec<String> = s.list_volumes().await.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["C", "_z", "a", "a1", "b"]);
}

async fn concurrent_creates(s: Store) {
    // Distinct names at once: all succeed, with distinct ids.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.create_volume(NewVolume::new(format!("c{i}"), 4096)).await })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap().unwrap().id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8, "concurrent creates got the same id");

    // One name at once: exactly one wins, the others hear AlreadyExists.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.create_volume(NewVolume::new("same", 4096)).await })
        })
        .collect();
    let mut won = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => won.push(rec),
            Err(MetaError::AlreadyExists { name }) => assert_eq!(name, "same"),
            Err(e) => panic!("a concurrent create of one name failed with {e:?}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(s.get_volume("same").await.unwrap(), won.pop());
    // The subsystem of each volume got nsid 1: no two share an NQN.
    assert!(s.list_volumes().await.unwrap().iter().all(|r| r.nsid == 1));
}

async fn concurrent_updates(s: Store) {
    let read = s.create_volume(NewVolume::new("vol1", 4096)).await.unwrap();
    let tasks: Vec<_> = (1..=4u64)
        .map(|i| {
            let (s, mut rec) = (s.clone(), read.clone());
            rec.size_bytes = 4096 * (i + 1);
            tokio::spawn(async move { s.update_volume(&rec).await })
        })
        .collect();
    let mut won = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => won.push(rec),
            Err(MetaError::Conflict { expected: 0, found: 1, .. }) => {}
            Err(e) => panic!("a concurrent update failed with {e:?}"),
        }
    }
    assert_eq!(won.len(), 1, "updates from one read: exactly one may win, got {won:?}");
    assert_eq!(s.get_volume("vol1").await.unwrap(), won.pop());
}

/// Drops calls at several points in flight (STYLE: "drop the future after
/// 1, 2, ... N polls", here by time since real backends do I/O) and checks
/// that each happened completely or not at all, and stays that way.
async fn cancelled_calls_are_all_or_nothing(s: Store) {
    let delays_us = [0u64, 50, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000];
    let mut max_id = 0;
    for (i, us) in delays_us.into_iter().enumerate() {
        let name = format!("c{i}");
        let create = s.create_volume(NewVolume::new(name.clone(), 8192));
        let finished = tokio::time::timeout(Duration::from_micros(us), create).await;
        if let Ok(result) = finished {
            max_id = max_id.max(result.unwrap().id);
        }
        // A dropped create may still land a little later (redb's runs on
        // its own thread): look twice; each time it is whole or absent.
        for _ in 0..2 {
            if let Some(r) = s.get_volume(&name).await.unwrap() {
                assert_eq!((r.size_bytes, r.generation, r.nsid), (8192, 0, 1), "{r:?}");
                max_id = max_id.max(r.id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let name = format!("u{i}");
        let before = s.create_volume(NewVolume::new(name.clone(), 4096)).await.unwrap();
        max_id = max_id.max(before.id);
        let mut grown = before.clone();
        grown.size_bytes = 16384;
        grown.allowed_hosts = vec![HOST_B.into()];
        let after = VolumeRecord { generation: 1, ..grown.clone() };
        let finished = tokio::time::timeout(Duration::from_micros(us), s.update_volume(&grown)).await;
        if let Ok(result) = finished {
            assert_eq!(result.unwrap(), after);
        }
        let mut landed = false;
        for _ in 0..2 {
            let now = s.get_volume(&name).await.unwrap().unwrap();
            if landed {
                assert_eq!(now, after, "a cancelled update was undone");
            } else {
                assert!(now == before || now == after, "half an update is visible: {now:?}");
                landed = now == after;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let last = s.create_volume(NewVolume::new("last", 4096)).await.unwrap();
    assert!(last.id > max_id, "id {} handed out again after cancelled calls", last.id);
}
