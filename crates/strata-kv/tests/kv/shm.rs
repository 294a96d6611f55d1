//! The same-host fast path over a real Unix socket and real shared
//! memory: blocks round-trip, misses and refusals are clean, and several
//! clients reading and writing at once never see a mixed or torn block,
//! nor a leased block's bytes change under its reader.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use strata_kv::shm::wire::PutStatus;
use strata_kv::shm::{ShmClient, ShmConfig, ShmServer};
use strata_kv::{Admit, KvConfig, KvStore};

/// A store of `dram` bytes of DRAM (no log tier) and its fast path.
async fn start(dram: u64, region: u64) -> (tempfile::TempDir, std::path::PathBuf, Arc<KvStore>) {
    start_with(dram, region, 1024).await
}

async fn start_with(dram: u64, region: u64, clients: usize) -> (tempfile::TempDir, std::path::PathBuf, Arc<KvStore>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sock");
    let kv = KvConfig { dram_bytes: dram, admit: Admit::All, segment_bytes: 1 << 20 };
    let store = KvStore::open(kv, None).await.unwrap();
    let cfg = ShmConfig { region_bytes: region, max_clients: clients, ..ShmConfig::for_dram(path.clone(), dram) };
    let server = ShmServer::bind(store.clone(), cfg).unwrap();
    tokio::spawn(server.serve(std::future::pending()));
    (dir, path, store)
}

/// A block that names its key and version in every 16 bytes, so that a
/// block of two versions (or two keys) is caught anywhere in it.
fn block(key: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut i = 0u64;
    while v.len() < len {
        let word = [u64::from(key) << 32 | u64::from(version), i];
        for w in word {
            v.extend_from_slice(&w.to_le_bytes());
        }
        i += 1;
    }
    v.truncate(len);
    v
}

/// The (key, version) a whole block names, or `None` for a mixed one.
fn named(b: &[u8]) -> Option<(u32, u32)> {
    let first = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let want = block((first >> 32) as u32, first as u32, b.len());
    (want == b).then_some(((first >> 32) as u32, first as u32))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_round_trip_and_misses_and_bad_ranges_are_clean() {
    let (_dir, path, store) = start(64 << 20, 64 << 20).await;
    tokio::task::spawn_blocking(move || {
        let mut c = ShmClient::connect(&path, 8 << 20).unwrap();
        assert_eq!(c.staging_bytes(), 8 << 20);
        let a = block(1, 1, 300_000);
        let b = block(2, 1, 4096);
        let st = c.put(b"m", &[b"a", b"b"], &[&a, &b]).unwrap();
        assert_eq!(st, vec![PutStatus::Stored, PutStatus::Stored]);
        assert_eq!(c.exists(b"m", &[b"a", b"x", b"b"]).unwrap(), vec![true, false, true]);
        assert_eq!(c.lookup(b"m", &[b"a", b"b", b"x", b"a"]).unwrap(), 2);
        let (mut ba, mut bb, mut bx) = (vec![0; 300_000], vec![0; 8192], vec![0; 10]);
        let got = c.get_into(b"m", &[b"a", b"b", b"x"], &mut [&mut ba, &mut bb, &mut bx]).unwrap();
        assert_eq!(got, vec![Some(300_000), Some(4096), None]);
        assert!(ba == a && bb[..4096] == b[..]);
        // A buffer too short is an error, and leaves no lease behind.
        let mut tiny = vec![0; 10];
        assert!(c.get_into(b"m", &[b"a"], &mut [&mut tiny]).is_err());
        // Another namespace is another key.
        assert_eq!(c.exists(b"n", &[b"a"]).unwrap(), vec![false]);
        // A namespace the wire cannot carry is refused, not cut short.
        assert!(c.exists(&[b'n'; 300], &[b"a"]).is_err());
        assert_eq!(c.exists(b"m", &[b"a"]).unwrap(), vec![true], "and the connection still works");
        // Bigger than the staging area: refused before anything is sent.
        assert!(c.put(b"m", &[b"big"], &[&vec![0; 9 << 20]]).is_err());
    })
    .await
    .unwrap();
    // Put through the fast path, read over the store's API: the same bytes.
    assert_eq!(store.get(b"m", b"a").await.unwrap().unwrap(), block(1, 1, 300_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_put_over_resp_is_copied_into_the_region_while_leased() {
    let (_dir, path, store) = start(8 << 20, 8 << 20).await;
    store.put(b"", b"k", bytes::Bytes::from(block(7, 3, 5000)), Default::default()).await.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut c = ShmClient::connect(&path, 1 << 20).unwrap();
        let l = c.lease(b"", &[b"k"]).unwrap();
        let l = l[0].expect("a hit");
        assert_eq!(named(c.leased(&l)), Some((7, 3)));
        assert_eq!(c.release(&[l]).unwrap(), 1);
        assert_eq!(c.release(&[l]).unwrap(), 0, "released once");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_on_the_socket_gets_an_error_not_a_crash() {
    use std::io::{Read, Write};
    let (_dir, path, _store) = start(1 << 20, 1 << 20).await;
    tokio::task::spawn_blocking(move || {
        // A request before Hello.
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.write_all(&strata_kv::shm::wire::Request::Exists { ns: b"", keys: vec![b"k"] }.encode()).unwrap();
        let mut head = [0; 4];
        s.read_exact(&mut head).unwrap();
        let mut body = vec![0; u32::from_le_bytes(head) as usize];
        s.read_exact(&mut body).unwrap();
        assert!(matches!(strata_kv::shm::wire::Reply::decode(&body), Ok(strata_kv::shm::wire::Reply::Error(_))));
        // A frame too large: an error, then the socket closes.
        s.write_all(&u32::MAX.to_le_bytes()).unwrap();
        s.read_exact(&mut head).unwrap();
        let mut body = vec![0; u32::from_le_bytes(head) as usize];
        s.read_exact(&mut body).unwrap();
        assert!(matches!(strata_kv::shm::wire::Reply::decode(&body), Ok(strata_kv::shm::wire::Reply::Error(_))));
        assert_eq!(s.read(&mut head).unwrap(), 0, "closed");
        // The server still serves others.
        assert!(ShmClient::connect(&path, 4096).is_ok());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_past_the_limit_are_refused_and_a_slot_frees_when_one_leaves() {
    let (_dir, path, _store) = start_with(1 << 20, 1 << 20, 2).await;
    tokio::task::spawn_blocking(move || {
        let a = ShmClient::connect(&path, 4096).unwrap();
        let _b = ShmClient::connect(&path, 4096).unwrap();
        match ShmClient::connect(&path, 4096) {
            Err(strata_kv::shm::ShmError::Refused(m)) => assert!(m.contains("already connected"), "{m}"),
            Err(e) => panic!("refused with another error: {e}"),
            Ok(_) => panic!("a third client was let in"),
        }
        drop(a);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while ShmClient::connect(&path, 4096).is_err() {
            assert!(std::time::Instant::now() < deadline, "the slot never freed");
            std::thread::sleep(Duration::from_millis(10));
        }
    })
    .await
    .unwrap();
}

/// Writers overwrite a few keys with new versions while readers read
/// them and hold leases across the churn; the store's DRAM holds a
/// fraction of what is written, so blocks are evicted and their extents
/// reused all the time. Every block read names one key and one version,
/// the version is one written, and a leased block reads the same before
/// and after the churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_at_once_see_whole_blocks_and_leases_hold() {
    const KEYS: u32 = 8;
    const LEN: usize = 64 << 10;
    let (_dir, path, _store) = start(LEN as u64 * 6, LEN as u64 * 64).await;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut threads = Vec::new();
    for w in 0..2u32 {
        let (path, stop, written) = (path.clone(), stop.clone(), written.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = ShmClient::connect(&path, 1 << 20).unwrap();
            let mut version = 1 + w;
            while !stop.load(Ordering::Relaxed) {
                let key = version % KEYS;
                let st = c.put(b"t", &[key.to_string().as_bytes()], &[&block(key, version, LEN)]).unwrap();
                assert_eq!(st, vec![PutStatus::Stored]);
                written.fetch_max(version, Ordering::Relaxed);
                version += 2;
            }
            0u64
        }));
    }
    for _ in 0..2 {
        let (path, stop, written) = (path.clone(), stop.clone(), written.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = ShmClient::connect(&path, 4096).unwrap();
            let mut seen = 0u64;
            let keys: Vec<String> = (0..KEYS).map(|k| k.to_string()).collect();
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            while !stop.load(Ordering::Relaxed) {
                let leases = c.lease(b"t", &keys).unwrap();
                let before: Vec<Option<Vec<u8>>> = leases.iter().map(|l| l.map(|l| c.leased(&l).to_vec())).collect();
                for (k, b) in before.iter().enumerate() {
                    if let Some(b) = b {
                        let (key, version) = named(b).expect("a whole block of one version");
                        assert_eq!(key, k as u32, "the block of its own key");
                        assert!(version <= written.load(Ordering::Relaxed) + 2, "a version written");
                        seen += 1;
                    }
                }
                // Churn while leased, then the same bytes must be there.
                std::thread::sleep(Duration::from_millis(2));
                for (l, b) in leases.iter().zip(&before) {
                    if let (Some(l), Some(b)) = (l, b) {
                        assert!(c.leased(l) == &b[..], "a leased block changed under its reader");
                    }
                }
                c.release(&leases.iter().flatten().copied().collect::<Vec<_>>()).unwrap();
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for t in threads {
        reads += tokio::task::spawn_blocking(move || t.join().unwrap()).await.unwrap();
    }
    assert!(written.load(Ordering::Relaxed) > 2 * 6 * KEYS, "the writers churned DRAM several times over");
    assert!(reads > 100, "the readers read ({reads})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_on_the_ssd_tier_are_read_in_place_into_the_region() {
    use strata_block::{BlockDevice, MemDevice};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sock");
    // DRAM for four of the 40 blocks: the rest live only on the SSD tier.
    let kv = KvConfig { dram_bytes: 4 * 70_000, admit: Admit::All, segment_bytes: 1 << 20 };
    let ssd = Arc::new(MemDevice::new(4096, (16 << 20) / 4096)) as Arc<dyn BlockDevice>;
    let store = KvStore::open(kv, Some(ssd)).await.unwrap();
    let server = ShmServer::bind(store.clone(), ShmConfig::for_dram(path.clone(), 8 << 20)).unwrap();
    tokio::spawn(server.serve(std::future::pending()));
    for i in 0..40u32 {
        store
            .put(b"", format!("k{i}").as_bytes(), bytes::Bytes::from(block(i, 1, 60_000)), Default::default())
            .await
            .unwrap();
    }
    store.flush(true).await.unwrap();
    let before = store.stats();
    tokio::task::spawn_blocking(move || {
        let mut c = ShmClient::connect(&path, 1 << 20).unwrap();
        let names: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let keys: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        let leases = c.lease(b"", &keys).unwrap();
        let mut in_place = 0;
        for (i, l) in leases.iter().enumerate() {
            let l = l.expect("every block is on some tier");
            assert_eq!(named(c.leased(&l)), Some((i as u32, 1)), "block {i}");
            // A block read in place starts after its record's header, not
            // at a page: the O_DIRECT read's own buffer, not a copy.
            in_place += usize::from(l.offset() % 4096 != 0);
        }
        let all: Vec<_> = leases.into_iter().flatten().collect();
        c.release(&all).unwrap();
        // Read again, now that they were promoted (and some evicted again).
        let mut outs: Vec<Vec<u8>> = (0..40).map(|_| vec![0; 60_000]).collect();
        let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        assert!(c.get_into(b"", &keys, &mut refs).unwrap().iter().all(|g| *g == Some(60_000)));
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(named(o), Some((i as u32, 1)), "block {i}, second read");
        }
        in_place
    })
    .await
    .map(|in_place| assert!(in_place >= 30, "only {in_place} of 40 blocks read in place"))
    .unwrap();
    let st = store.stats();
    assert!(st.hits_ssd - before.hits_ssd >= 30, "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_on_huge_pages_serves_clients_or_is_refused_saying_how_to_reserve_them() {
    let free: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("HugePages_Free:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sock");
    let kv = KvConfig { dram_bytes: 4 << 20, admit: Admit::All, segment_bytes: 1 << 20 };
    let store = KvStore::open(kv, None).await.unwrap();
    let cfg =
        |region: u64| ShmConfig { region_bytes: region, hugepages: true, ..ShmConfig::for_dram(path.clone(), 4 << 20) };
    // More than the kernel's pool holds: refused before anything is bound.
    let Err(e) = ShmServer::bind(store.clone(), cfg((free + 1) * (2 << 20))) else { panic!("not refused") };
    assert!(e.to_string().contains("vm.nr_hugepages"), "{e}");
    assert!(!path.exists());
    if free < 4 {
        eprintln!("{free} free huge pages: the served region is not exercised here (CI reserves 32)");
        return;
    }
    let server = ShmServer::bind(store.clone(), cfg(5 << 20)).unwrap();
    assert_eq!(server.region().mapping().len(), 6 << 20, "rounded up to 2 MiB pages");
    tokio::spawn(server.serve(std::future::pending()));
    tokio::task::spawn_blocking(move || {
        let mut c = ShmClient::connect(&path, 1 << 20).unwrap();
        let blocks: Vec<Vec<u8>> = (0..8).map(|i| block(i, 1, 300_000)).collect();
        let refs: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
        let names: Vec<String> = (0..8).map(|i| format!("h{i}")).collect();
        let keys: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        assert!(c.put(b"", &keys, &refs).unwrap().iter().all(|s| *s == PutStatus::Stored));
        let mut outs: Vec<Vec<u8>> = (0..8).map(|_| vec![0; 300_000]).collect();
        let mut bufs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        assert!(c.get_into(b"", &keys, &mut bufs).unwrap().iter().all(|g| *g == Some(300_000)));
        assert!(outs == blocks);
    })
    .await
    .unwrap();
}
