//! The tiered store through its public API: capacity, eviction order,
//! demotion and promotion, admission, recovery, corruption, pins, TTLs
//! and concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use strata_block::{BlockDevice, IoBuf, MemDevice};
use strata_kv::store::Presence;
use strata_kv::store::{COPY_SMALL_BELOW, ENTRY_OVERHEAD, dram_size};
use strata_kv::{Admit, KvConfig, KvError, KvStore, Pin, PutOpts};

const SEG: u64 = 256 << 10;

/// A value that says which key and version it belongs to.
fn value(key: u64, version: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    for (i, chunk) in v.chunks_mut(8).enumerate() {
        let w = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.rotate_left(17) ^ i as u64;
        chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
    }
    Bytes::from(v)
}

fn k(i: u64) -> Vec<u8> {
    format!("block-{i:06}").into_bytes()
}

fn cfg(dram: u64, admit: Admit) -> KvConfig {
    KvConfig { dram_bytes: dram, admit, segment_bytes: SEG }
}

fn mem(bytes: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(4096, bytes / 4096))
}

async fn open(c: KvConfig, dev: &Arc<MemDevice>) -> Arc<KvStore> {
    KvStore::open(c, Some(dev.clone() as Arc<dyn BlockDevice>)).await.unwrap()
}

#[tokio::test]
async fn dram_only_capacity_holds_and_values_come_back_whole() {
    let s = KvStore::open(cfg(1 << 20, Admit::Reused), None).await.unwrap();
    for i in 0..2000u64 {
        s.put(b"", &k(i), value(i, 0, 1000 + (i as usize % 3000)), PutOpts::default()).await.unwrap();
        assert!(s.stats().dram_used <= 1 << 20);
    }
    let mut present = 0;
    for i in 0..2000u64 {
        if let Some(v) = s.get(b"", &k(i)).await.unwrap() {
            assert_eq!(v, value(i, 0, 1000 + (i as usize % 3000)));
            present += 1;
        }
    }
    assert!(present > 100, "only {present} blocks kept in 1 MiB");
    let st = s.stats();
    assert_eq!(st.keys, present);
    assert_eq!(st.ssd_keys, 0);
    s.check_invariants();
    // A value larger than DRAM is refused, not half stored.
    assert!(matches!(
        s.put(b"", b"huge", Bytes::from(vec![0; 2 << 20]), PutOpts::default()).await,
        Err(KvError::TooLarge { .. })
    ));
}

#[tokio::test]
async fn blocks_move_down_when_dram_is_full_and_back_up_when_read() {
    let dev = mem(8 << 20);
    let s = open(cfg(256 << 10, Admit::All), &dev).await;
    for i in 0..100u64 {
        s.put(b"", &k(i), value(i, 0, 8192), PutOpts::default()).await.unwrap();
    }
    let st = s.stats();
    assert!(st.dram_used <= 256 << 10);
    assert!(st.demoted > 60, "{st:?}");
    assert_eq!(st.keys, 100, "every block is in some tier");
    s.flush(false).await.unwrap();
    // The first block left DRAM long ago: it is read from SSD, checked,
    // and promoted.
    assert_eq!(s.get(b"", &k(0)).await.unwrap().unwrap(), value(0, 0, 8192));
    let st = s.stats();
    assert_eq!((st.hits_ssd, st.promoted), (1, 1));
    assert_eq!(s.get(b"", &k(0)).await.unwrap().unwrap(), value(0, 0, 8192));
    assert_eq!(s.stats().hits_dram, 1);
    // Every block reads back right from whichever tier holds it.
    for i in 0..100u64 {
        assert_eq!(s.get(b"", &k(i)).await.unwrap().unwrap(), value(i, 0, 8192), "block {i}");
    }
    s.check_invariants();
}

#[tokio::test]
async fn one_hit_blocks_do_not_wear_the_drive() {
    let dev = mem(8 << 20);
    let s = open(cfg(128 << 10, Admit::Reused), &dev).await;
    // Blocks 0..8 are read back while in DRAM; the rest are put once.
    for i in 0..8u64 {
        s.put(b"", &k(i), value(i, 0, 4096), PutOpts::default()).await.unwrap();
        s.get(b"", &k(i)).await.unwrap().unwrap();
    }
    for i in 8..200u64 {
        s.put(b"", &k(i), value(i, 0, 4096), PutOpts::default()).await.unwrap();
    }
    let st = s.stats();
    assert!(st.not_admitted > 100, "{st:?}");
    // The reused blocks were kept in DRAM's main queue or written down:
    // either way they are all still there.
    for i in 0..8u64 {
        assert_eq!(s.get(b"", &k(i)).await.unwrap().unwrap(), value(i, 0, 4096));
    }
    assert!(st.demoted <= 8, "one-hit blocks were written: {st:?}");
    s.check_invariants();
}

#[tokio::test]
async fn a_value_below_64_kib_does_not_keep_the_buffer_it_arrived_in() {
    // DRAM counts a value's bytes: one that came as a slice of a larger
    // buffer (a receive buffer holding other requests) must not keep all
    // of it alive. Below COPY_SMALL_BELOW it is copied; a large value is
    // kept as it came.
    let s = open(cfg(16 << 20, Admit::All), &mem(4 << 20)).await;
    let buf = bytes::Bytes::from(vec![5u8; 1 << 20]);
    for (key, range) in [(&b"small"[..], 1000..1000 + 20_000), (&b"large"[..], 4096..4096 + COPY_SMALL_BELOW)] {
        let value = buf.slice(range);
        s.put(b"", key, value.clone(), PutOpts::default()).await.unwrap();
        let got = s.get(b"", key).await.unwrap().unwrap();
        assert_eq!(got, value);
        let shared = got.as_ptr() == value.as_ptr();
        assert_eq!(shared, value.len() >= COPY_SMALL_BELOW, "{}", String::from_utf8_lossy(key));
    }
}

#[tokio::test]
async fn the_ssd_tier_holds_its_capacity_and_drops_its_oldest_segment() {
    let dev = mem(4 << 20);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    fill(&s, 1000, 16 << 10).await;
    s.flush(false).await.unwrap();
    let st = s.stats();
    assert!(st.ssd_live <= st.ssd_capacity, "{st:?}");
    assert!(st.ssd_live > st.ssd_capacity / 2, "the log is mostly live: {st:?}");
    assert!(st.dropped_ssd > 500, "{st:?}");
    assert!(s.get(b"", &k(0)).await.unwrap().is_none(), "the oldest blocks are gone");
    assert_eq!(s.get(b"", &k(990)).await.unwrap().unwrap(), value(990, 0, 16 << 10));
    s.check_invariants();
}

#[tokio::test]
async fn a_restart_finds_the_ssd_tier_with_its_accounting() {
    let dev = mem(8 << 20);
    let s = open(cfg(128 << 10, Admit::All), &dev).await;
    for i in 0..200u64 {
        s.put(b"ns1", &k(i), value(i, 0, 6000), PutOpts::default()).await.unwrap();
    }
    // A newer version of a demoted key, and a deletion of one: neither
    // may come back as the old value.
    s.put(b"ns1", &k(3), value(3, 1, 6000), PutOpts::default()).await.unwrap();
    assert!(s.delete(b"ns1", &k(4)).await.unwrap());
    s.flush(true).await.unwrap();
    let before = s.stats();
    drop(s);
    let s = open(cfg(128 << 10, Admit::All), &dev).await;
    let after = s.stats();
    assert_eq!(
        (after.keys, after.ssd_keys, after.ssd_live),
        (before.keys, before.keys, before.ssd_live),
        "{before:?} {after:?}"
    );
    s.check_invariants();
    assert_eq!(s.get(b"ns1", &k(3)).await.unwrap().unwrap(), value(3, 1, 6000));
    assert!(s.get(b"ns1", &k(4)).await.unwrap().is_none());
    for i in (0..200u64).filter(|&i| i != 3 && i != 4) {
        assert_eq!(s.get(b"ns1", &k(i)).await.unwrap().unwrap(), value(i, 0, 6000), "block {i}");
    }
    assert_eq!(s.namespace_len(b"ns1"), 199);
    assert!(s.get(b"other", &k(5)).await.unwrap().is_none(), "namespaces are apart");
}

/// Reads the whole device.
async fn image(dev: &MemDevice) -> Vec<u8> {
    let n = dev.geometry().num_blocks;
    let (b, r) = dev.read(0, IoBuf::zeroed((n * 4096) as usize)).await;
    r.unwrap();
    b.to_vec()
}

/// Flips a byte of `needle`'s first copy on `dev`.
async fn damage(dev: &MemDevice, needle: &[u8]) {
    let img = image(dev).await;
    let at = img.windows(needle.len()).position(|w| w == needle).expect("the bytes are on the device");
    let blk = at as u64 / 4096;
    let (mut b, r) = dev.read(blk, IoBuf::zeroed(4096)).await;
    r.unwrap();
    b[at % 4096] ^= 0xff;
    let (_, r) = dev.write(blk, b, false).await;
    r.unwrap();
}

#[tokio::test]
async fn damaged_records_are_misses_never_wrong_bytes() {
    let dev = mem(8 << 20);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    fill(&s, 40, 8192).await;
    s.flush(false).await.unwrap();
    // Flip one byte inside block 2's value on the device.
    damage(&dev, &value(2, 0, 8192)[100..132]).await;
    assert!(s.get(b"", &k(2)).await.unwrap().is_none());
    assert_eq!(s.stats().corrupt, 1);
    assert_eq!(s.get(b"", &k(1)).await.unwrap().unwrap(), value(1, 0, 8192));
    s.check_invariants();
    // A restart's scan stops at the damaged record: what follows it in
    // its segment is a miss, what precedes it is intact.
    drop(s);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    assert!(s.get(b"", &k(2)).await.unwrap().is_none());
    assert_eq!(s.get(b"", &k(1)).await.unwrap().unwrap(), value(1, 0, 8192));
    s.check_invariants();
}

#[tokio::test]
async fn hard_pins_and_leases_stay_in_dram_soft_pins_go_last() {
    let s = KvStore::open(cfg(64 << 10, Admit::Reused), None).await.unwrap();
    let size = dram_size(k(0).len() + 1, 4096);
    s.put(b"", &k(0), value(0, 0, 4096), PutOpts { pin: Pin::Hard, ..Default::default() }).await.unwrap();
    s.put(b"", &k(1), value(1, 0, 4096), PutOpts::default()).await.unwrap();
    assert_eq!(s.pin(b"", &[k(1)], Pin::Soft).unwrap(), 1);
    s.put(b"", &k(2), value(2, 0, 4096), PutOpts::default()).await.unwrap();
    assert_eq!(s.prefetch(b"", &[k(2)], Duration::from_secs(1), 60_000).await.unwrap(), 1);
    for i in 3..100u64 {
        s.put(b"", &k(i), value(i, 0, 4096), PutOpts::default()).await.unwrap();
    }
    for i in 0..3u64 {
        assert!(s.lookup(b"", &[k(i)]).unwrap() == 1, "block {i} was evicted");
    }
    // Fill DRAM with hard pins: the soft pin goes, then puts fail.
    let mut i = 100;
    let err = loop {
        match s.put(b"", &k(i), value(i, 0, 4096), PutOpts { pin: Pin::Hard, ..Default::default() }).await {
            Ok(_) => i += 1,
            Err(e) => break e,
        }
        assert!(i < 200);
    };
    assert!(matches!(err, KvError::Full { .. }), "{err}");
    assert_eq!(s.lookup(b"", &[k(1)]).unwrap(), 0, "the soft pin went first");
    assert_eq!(s.lookup(b"", &[k(0)]).unwrap(), 1);
    assert!(s.stats().dram_used <= 64 << 10);
    assert!(size > ENTRY_OVERHEAD);
    // Unpinned and released, they can go.
    s.pin(b"", &(0..200).map(k).collect::<Vec<_>>(), Pin::None).unwrap();
    assert_eq!(s.release(b"", &[k(2)]).unwrap(), 1);
    s.put(b"", b"after", value(9, 9, 4096), PutOpts::default()).await.unwrap();
    s.check_invariants();
}

#[tokio::test]
async fn lookup_counts_the_present_prefix_without_side_effects() {
    let s = KvStore::open(cfg(1 << 20, Admit::Reused), None).await.unwrap();
    for i in [0u64, 1, 2, 4] {
        s.put(b"m", &k(i), value(i, 0, 100), PutOpts::default()).await.unwrap();
    }
    let chain: Vec<Vec<u8>> = (0..6).map(k).collect();
    assert_eq!(s.lookup(b"m", &chain).unwrap(), 3);
    assert_eq!(s.lookup(b"other", &chain).unwrap(), 0);
    let st = s.stats();
    assert_eq!((st.gets, st.hits_dram), (0, 0), "a lookup is not a use");
}

#[tokio::test]
async fn expired_blocks_are_misses() {
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = now.clone();
    let s =
        KvStore::open_with_clock(cfg(1 << 20, Admit::Reused), None, Box::new(move || clock.load(Ordering::Relaxed)))
            .await
            .unwrap();
    s.put(b"", b"a", Bytes::from_static(b"x"), PutOpts { expires_ms: 1_000_500, ..Default::default() }).await.unwrap();
    s.put(b"", b"b", Bytes::from_static(b"y"), PutOpts::default()).await.unwrap();
    assert_eq!(s.expiry(b"", b"a").unwrap(), Some(1_000_500));
    now.store(1_000_499, Ordering::Relaxed);
    assert!(s.get(b"", b"a").await.unwrap().is_some());
    now.store(1_000_500, Ordering::Relaxed);
    assert!(s.get(b"", b"a").await.unwrap().is_none());
    assert_eq!(s.lookup(b"", &[b"b"]).unwrap(), 1);
    assert_eq!(s.stats().expired, 1);
    s.check_invariants();
}

#[tokio::test(start_paused = true)]
async fn expired_blocks_give_their_room_back_without_being_read() {
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = now.clone();
    let dev = mem(8 << 20);
    let c = cfg(256 << 10, Admit::All);
    let s =
        KvStore::open_with_clock(c, Some(dev as Arc<dyn BlockDevice>), Box::new(move || clock.load(Ordering::Relaxed)))
            .await
            .unwrap();
    // 100 blocks with a TTL and 100 without, in DRAM and on SSD.
    for i in 0..200u64 {
        let expires_ms = if i % 2 == 0 { 1_000_500 } else { 0 };
        s.put(b"", &k(i), value(i, 0, 4096), PutOpts { expires_ms, ..Default::default() }).await.unwrap();
    }
    // Block 0 gets a later expiry, block 2 is rewritten without one.
    assert!(s.set_expiry(b"", &k(0), 2_000_000).await.unwrap());
    s.put(b"", &k(2), value(2, 1, 4096), PutOpts::default()).await.unwrap();
    s.flush(false).await.unwrap();
    let before = s.stats();
    assert!(before.ssd_keys > 50 && before.dram_keys > 20, "{before:?}");
    // Time passes; nobody reads: the store's tick deletes them.
    now.store(1_000_600, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = s.stats();
    assert_eq!((st.expired, st.keys), (98, before.keys - 98), "{st:?}");
    assert!(st.dram_used < before.dram_used && st.ssd_live < before.ssd_live, "{before:?} {st:?}");
    s.check_invariants();
    for i in 0..200u64 {
        let got = s.get(b"", &k(i)).await.unwrap();
        match i {
            0 => assert_eq!(got, Some(value(0, 0, 4096))),
            2 => assert_eq!(got, Some(value(2, 1, 4096))),
            i if i % 2 == 1 => assert_eq!(got, Some(value(i, 0, 4096)), "block {i}"),
            i => assert_eq!(got, None, "block {i}"),
        }
    }
    assert_eq!(s.stats().expired, 98, "nothing left for reads to find expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_never_see_lost_or_mixed_values() {
    let dev = mem(16 << 20);
    let s = open(cfg(512 << 10, Admit::All), &dev).await;
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut version = vec![0u64; 64];
            for round in 0..400u64 {
                let i = (round * 7 + t) % 64;
                let key = t * 1000 + i;
                if round % 3 == 0 {
                    version[i as usize] += 1;
                    s.put(
                        b"",
                        &k(key),
                        value(key, version[i as usize], 3000 + (key as usize % 5000)),
                        PutOpts::default(),
                    )
                    .await
                    .unwrap();
                } else if let Some(v) = s.get(b"", &k(key)).await.unwrap() {
                    // Each task owns its keys: what comes back is the
                    // version it wrote last, never another key's bytes.
                    assert_eq!(v, value(key, version[i as usize], 3000 + (key as usize % 5000)), "key {key}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    s.check_invariants();
    let st = s.stats();
    assert!(st.dram_used <= 512 << 10 && st.ssd_live <= st.ssd_capacity);
    assert!(st.hits_ssd > 0 && st.demoted > 0, "both tiers were used: {st:?}");
}

#[tokio::test]
async fn deleting_a_namespace_leaves_the_others() {
    let dev = mem(8 << 20);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    for i in 0..50u64 {
        s.put(b"a", &k(i), value(i, 0, 4000), PutOpts::default()).await.unwrap();
        s.put(b"b", &k(i), value(i, 1, 4000), PutOpts::default()).await.unwrap();
    }
    assert_eq!(s.delete_namespace(b"a").await.unwrap(), 50);
    assert_eq!(s.namespace_len(b"a"), 0);
    assert_eq!(s.namespace_len(b"b"), 50);
    s.flush(false).await.unwrap();
    drop(s);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    assert_eq!(s.namespace_len(b"a"), 0, "tombstones keep the namespace deleted");
    s.check_invariants();
}

#[tokio::test]
async fn a_namespace_quota_holds_in_every_tier_oldest_first() {
    let dev = mem(8 << 20);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    let per = dram_size(1 + 5 + k(0).len(), 4096);
    s.set_quota(b"small", 10 * per).unwrap();
    for i in 0..40u64 {
        s.put(b"small", &k(i), value(i, 0, 4096), PutOpts::default()).await.unwrap();
        s.put(b"big", &k(i), value(i, 1, 4096), PutOpts::default()).await.unwrap();
        let (_, used, quota) = s.namespace_usage(b"small");
        assert!(used <= quota, "{used} > {quota}");
    }
    // The ten newest are kept, across DRAM and SSD; the other namespace
    // lost nothing to the quota.
    assert_eq!(s.namespace_usage(b"small").0, 10);
    assert_eq!(s.lookup(b"small", &(30..40).map(k).collect::<Vec<_>>()).unwrap(), 10);
    assert_eq!(s.lookup(b"small", &[k(29)]).unwrap(), 0);
    assert_eq!(s.namespace_len(b"big"), 40);
    assert_eq!(s.stats().quota_evicted, 30);
    // Pinned blocks stay; when only they are left, the put is refused.
    s.pin(b"small", &(30..40).map(k).collect::<Vec<_>>(), Pin::Hard).unwrap();
    let err = s.put(b"small", b"x", value(1, 1, 4096), PutOpts::default()).await.unwrap_err();
    assert!(matches!(err, KvError::Quota { .. }), "{err}");
    assert!(matches!(
        s.put(b"small", b"huge", value(1, 1, 12 * 4096), PutOpts::default()).await,
        Err(KvError::Quota { .. })
    ));
    s.check_invariants();
    // After a restart the accounting is rebuilt from the log.
    s.flush(true).await.unwrap();
    let before = (s.namespace_usage(b"small"), s.namespace_usage(b"big"));
    drop(s);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    let after = (s.namespace_usage(b"small"), s.namespace_usage(b"big"));
    assert_eq!((before.0.0, before.0.1, before.1.0, before.1.1), (after.0.0, after.0.1, after.1.0, after.1.1));
    s.check_invariants();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_puts_are_atomic_and_failed_puts_change_nothing() {
    let s = KvStore::open(cfg(1 << 20, Admit::Reused), None).await.unwrap();
    let absent = PutOpts { only_if: Some(Presence::Absent), ..Default::default() };
    let mut racers = Vec::new();
    for t in 0..8u64 {
        let s = s.clone();
        racers.push(tokio::spawn(async move { s.put(b"", b"lock", value(t, 0, 100), absent).await.unwrap() }));
    }
    let mut winners = 0;
    for r in racers {
        winners += usize::from(r.await.unwrap());
    }
    assert_eq!(winners, 1, "SET NX let {winners} writers in");
    let present = PutOpts { only_if: Some(Presence::Present), ..Default::default() };
    assert!(!s.put(b"", b"nobody", value(1, 1, 10), present).await.unwrap());
    assert_eq!(s.lookup(b"", &[b"nobody"]).unwrap(), 0);
    // KEEPTTL keeps the old expiry.
    s.put(b"", b"t", value(2, 0, 10), PutOpts { expires_ms: u64::MAX / 2, ..Default::default() }).await.unwrap();
    s.put(b"", b"t", value(2, 1, 10), PutOpts { keep_ttl: true, ..Default::default() }).await.unwrap();
    assert_eq!(s.expiry(b"", b"t").unwrap(), Some(u64::MAX / 2));
    // A put refused by the quota or by DRAM leaves the old value.
    s.set_quota(b"q", 3 * 4096).unwrap();
    s.put(b"q", b"k", value(3, 0, 4096), PutOpts::default()).await.unwrap();
    assert!(s.put(b"q", b"k", value(3, 1, 4 * 4096), PutOpts::default()).await.is_err());
    assert_eq!(s.get(b"q", b"k").await.unwrap().unwrap(), value(3, 0, 4096));
    s.put(b"", b"pinned", value(4, 0, 600_000), PutOpts { pin: Pin::Hard, ..Default::default() }).await.unwrap();
    s.put(b"", b"k2", value(5, 0, 1000), PutOpts { pin: Pin::Hard, ..Default::default() }).await.unwrap();
    assert!(matches!(s.put(b"", b"k2", value(5, 1, 500_000), PutOpts::default()).await, Err(KvError::Full { .. })));
    assert_eq!(s.get(b"", b"k2").await.unwrap().unwrap(), value(5, 0, 1000));
    s.check_invariants();
}

/// Puts blocks `0..n` of `len` bytes (version 0) in the default namespace.
async fn fill(s: &KvStore, n: u64, len: usize) {
    fill_range(s, 0..n, len).await;
}

/// Puts blocks `range` of `len` bytes (version 0) in the default namespace.
async fn fill_range(s: &KvStore, range: std::ops::Range<u64>, len: usize) {
    for i in range {
        s.put(b"", &k(i), value(i, 0, len), PutOpts::default()).await.unwrap();
    }
}

async fn open_pool(c: KvConfig, ssd: &Arc<MemDevice>, pool: Arc<dyn BlockDevice>) -> Arc<KvStore> {
    let ssd = Some(ssd.clone() as Arc<dyn BlockDevice>);
    let tiers = strata_kv::Tiers { ssd, pool: Some(pool), peers: Vec::new() };
    KvStore::open_tiers(c, tiers, Box::new(strata_kv::store::unix_ms)).await.unwrap()
}

#[tokio::test]
async fn the_pool_tier_keeps_what_the_ssd_tier_dropped_within_its_own_capacity() {
    // A 4 MiB SSD tier and a 32 MiB pool: 1000 blocks of 16 KiB (16 MiB)
    // overflow the SSD but fit the pool.
    let ssd = mem(4 << 20);
    let pool = mem(32 << 20);
    let s = open_pool(cfg(64 << 10, Admit::All), &ssd, pool.clone()).await;
    fill(&s, 1000, 16 << 10).await;
    s.flush(false).await.unwrap();
    let st = s.stats();
    assert!(st.dropped_ssd > 500, "the SSD ring wrapped: {st:?}");
    assert!(st.pool_live <= st.pool_capacity && st.ssd_live <= st.ssd_capacity, "{st:?}");
    assert!(st.pool_keys > 900, "{st:?}");
    s.check_invariants();
    // The oldest blocks are on the pool only, the newest on both; every
    // one reads back whole.
    for i in (0..1000u64).step_by(7) {
        assert_eq!(s.get(b"", &k(i)).await.unwrap().unwrap(), value(i, 0, 16 << 10), "block {i}");
    }
    let st = s.stats();
    assert!(st.hits_pool > 50 && st.hits_ssd > 0, "{st:?}");
    // A pool that is too small for everything holds its capacity too.
    let small = mem(8 << 20);
    let s2 = open_pool(cfg(64 << 10, Admit::All), &mem(4 << 20), small).await;
    fill(&s2, 1000, 16 << 10).await;
    let st = s2.stats();
    assert!(st.pool_live <= st.pool_capacity && st.dropped_pool > 0, "{st:?}");
    assert!(s2.get(b"", &k(0)).await.unwrap().is_none());
    s2.check_invariants();
}

#[tokio::test]
async fn a_restart_rebuilds_both_log_tiers_and_the_newest_version_wins() {
    let ssd = mem(2 << 20);
    let pool = mem(16 << 20);
    let s = open_pool(cfg(128 << 10, Admit::All), &ssd, pool.clone()).await;
    for i in 0..300u64 {
        s.put(b"ns", &k(i), value(i, 0, 6000), PutOpts::default()).await.unwrap();
    }
    // Block 3 gets a new value after its old one reached both logs; block
    // 4 is deleted; block 250 (still on the SSD too) is rewritten.
    s.put(b"ns", &k(3), value(3, 1, 6000), PutOpts::default()).await.unwrap();
    assert!(s.delete(b"ns", &k(4)).await.unwrap());
    s.put(b"ns", &k(250), value(250, 1, 6000), PutOpts::default()).await.unwrap();
    s.flush(true).await.unwrap();
    let before = s.stats();
    assert!(before.dropped_ssd > 0, "some blocks are on the pool only: {before:?}");
    drop(s);
    let s = open_pool(cfg(128 << 10, Admit::All), &ssd, pool.clone()).await;
    let after = s.stats();
    assert_eq!(
        (after.keys, after.ssd_keys, after.ssd_live, after.pool_keys, after.pool_live),
        (before.keys, before.ssd_keys, before.ssd_live, before.pool_keys, before.pool_live),
        "{before:?} {after:?}"
    );
    s.check_invariants();
    assert_eq!(s.get(b"ns", &k(3)).await.unwrap().unwrap(), value(3, 1, 6000));
    assert_eq!(s.get(b"ns", &k(250)).await.unwrap().unwrap(), value(250, 1, 6000));
    assert!(s.get(b"ns", &k(4)).await.unwrap().is_none());
    for i in (0..300u64).filter(|i| ![3, 4, 250].contains(i)) {
        assert_eq!(s.get(b"ns", &k(i)).await.unwrap().unwrap(), value(i, 0, 6000), "block {i}");
    }
    // New writes after the restart get versions above every recovered
    // one: an overwrite then a restart keeps the overwrite.
    s.put(b"ns", &k(5), value(5, 2, 6000), PutOpts::default()).await.unwrap();
    s.flush(true).await.unwrap();
    drop(s);
    let s = open_pool(cfg(128 << 10, Admit::All), &ssd, pool).await;
    assert_eq!(s.get(b"ns", &k(5)).await.unwrap().unwrap(), value(5, 2, 6000));
    s.check_invariants();
}

#[tokio::test]
async fn a_damaged_ssd_copy_falls_back_to_the_pool_and_a_damaged_pool_copy_is_a_miss() {
    let ssd = mem(8 << 20);
    let pool = mem(8 << 20);
    let s = open_pool(cfg(64 << 10, Admit::All), &ssd, pool.clone()).await;
    fill(&s, 40, 8192).await;
    s.flush(false).await.unwrap();
    // Block 2: SSD copy damaged, pool copy good.
    damage(&ssd, &value(2, 0, 8192)[100..132]).await;
    assert_eq!(s.get(b"", &k(2)).await.unwrap().unwrap(), value(2, 0, 8192));
    let st = s.stats();
    assert_eq!((st.corrupt, st.hits_pool), (1, 1), "{st:?}");
    // Block 3: both copies damaged.
    damage(&ssd, &value(3, 0, 8192)[100..132]).await;
    damage(&pool, &value(3, 0, 8192)[100..132]).await;
    assert!(s.get(b"", &k(3)).await.unwrap().is_none());
    assert_eq!(s.stats().corrupt, 3);
    assert!(!s.exists(b"", &k(3)).unwrap(), "an entry with no good copy is gone");
    s.check_invariants();
}

/// A device that can be made to stall (a pool volume behind a dead
/// network path: reads or writes wait until the stall is lifted) or to
/// fail its writes and flushes (a volume that answers with errors).
#[derive(Default)]
struct Faulty {
    dev: Option<Arc<MemDevice>>,
    stall_reads: std::sync::atomic::AtomicBool,
    stall_writes: std::sync::atomic::AtomicBool,
    fail_writes: std::sync::atomic::AtomicBool,
    /// Bytes read so far.
    read_bytes: std::sync::atomic::AtomicU64,
}

impl Faulty {
    fn new(bytes: u64) -> Arc<Faulty> {
        Arc::new(Faulty { dev: Some(mem(bytes)), ..Faulty::default() })
    }
    fn dev(&self) -> &Arc<MemDevice> {
        self.dev.as_ref().expect("set by new")
    }
}

async fn while_set(flag: &std::sync::atomic::AtomicBool) {
    while flag.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn io_error() -> strata_block::BlockError {
    std::io::Error::other("injected write failure").into()
}

impl BlockDevice for Faulty {
    fn geometry(&self) -> strata_block::Geometry {
        self.dev().geometry()
    }
    fn usage(&self) -> strata_block::DeviceUsage {
        self.dev().usage()
    }
    fn read(
        &self,
        lba: u64,
        buf: IoBuf,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        Box::pin(async move {
            while_set(&self.stall_reads).await;
            self.read_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
            self.dev().read(lba, buf).await
        })
    }
    fn write(
        &self,
        lba: u64,
        buf: IoBuf,
        fua: bool,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        Box::pin(async move {
            while_set(&self.stall_writes).await;
            if self.fail_writes.load(Ordering::Acquire) {
                return (buf, Err(io_error()));
            }
            self.dev().write(lba, buf, fua).await
        })
    }
    fn write_zeroes(
        &self,
        lba: u64,
        blocks: u64,
        d: bool,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.dev().write_zeroes(lba, blocks, d)
    }
    fn deallocate(
        &self,
        ranges: Vec<(u64, u64)>,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.dev().deallocate(ranges)
    }
    fn flush(&self) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        Box::pin(async move {
            while_set(&self.stall_writes).await;
            if self.fail_writes.load(Ordering::Acquire) {
                return Err(io_error());
            }
            self.dev().flush().await
        })
    }
}

#[tokio::test]
async fn a_restart_reads_the_heads_of_large_records_and_finds_damage_to_their_values_when_read() {
    // 40 blocks of 256 KiB on a 16 MiB log: a restart's scan reads a block
    // or so per record, not every byte, and finds every block. A value
    // damaged on the drive is found when it is read (a miss), and the
    // records after it in its segment are still found; small records
    // are still read and checked whole.
    let dev = Faulty::new(16 << 20);
    let c = KvConfig { dram_bytes: 1 << 20, admit: Admit::All, segment_bytes: 4 << 20 };
    let s = open_pool_only(c.clone(), dev.clone()).await;
    fill(&s, 40, 256 << 10).await;
    s.put(b"", b"small", value(99, 0, 1000), PutOpts::default()).await.unwrap();
    s.flush(true).await.unwrap();
    drop(s);
    damage(dev.dev(), &value(5, 0, 256 << 10)[200_000..200_032]).await;
    let before = dev.read_bytes.load(Ordering::Relaxed);
    let s = open_pool_only(c, dev.clone()).await;
    let scanned = dev.read_bytes.load(Ordering::Relaxed) - before;
    assert!(scanned < 2 << 20, "the scan read {scanned} bytes of 10 MiB of records");
    let st = s.stats();
    assert_eq!(st.pool_keys, 41, "{st:?}");
    assert!(s.get(b"", &k(5)).await.unwrap().is_none(), "the damaged value is a miss");
    assert_eq!(s.stats().corrupt, 1);
    assert_eq!(right_or_missing(&s, 0..40, 256 << 10).await, 39);
    assert_eq!(s.get(b"", b"small").await.unwrap().unwrap(), value(99, 0, 1000));
    s.check_invariants();
}

#[tokio::test(start_paused = true)]
async fn a_stalled_pool_read_is_a_miss_after_its_deadline_and_costs_no_data() {
    let pool = Faulty::new(16 << 20);
    let s = open_pool(cfg(64 << 10, Admit::All), &mem(2 << 20), pool.clone()).await;
    fill(&s, 300, 8192).await;
    s.flush(false).await.unwrap();
    assert!(s.stats().dropped_ssd > 0, "block 0 is on the pool only");
    pool.stall_reads.store(true, Ordering::Release);
    let t0 = tokio::time::Instant::now();
    assert!(s.get(b"", &k(0)).await.unwrap().is_none());
    let waited = t0.elapsed();
    assert!(waited >= strata_kv::store::POOL_READ_DEADLINE && waited < Duration::from_secs(5), "{waited:?}");
    // The index keeps the block: once the pool answers again, it is there.
    pool.stall_reads.store(false, Ordering::Release);
    assert_eq!(s.get(b"", &k(0)).await.unwrap().unwrap(), value(0, 0, 8192));
    assert_eq!(s.stats().corrupt, 0);
    s.check_invariants();
}

#[tokio::test]
async fn stores_sharing_a_pool_volume_see_each_others_blocks_and_never_wrong_bytes() {
    // One 32 MiB pool volume in two regions; each store writes its own
    // and reads the other's. B starts before A has written anything.
    let vol: Arc<dyn BlockDevice> = mem(32 << 20);
    let region = |i| Arc::new(strata_block::Region::nth(vol.clone(), i, 2).unwrap()) as Arc<dyn BlockDevice>;
    let open = |me: u64| {
        let tiers = strata_kv::Tiers {
            ssd: Some(mem(4 << 20) as Arc<dyn BlockDevice>),
            pool: Some(region(me)),
            peers: vec![region(1 - me)],
        };
        KvStore::open_tiers(cfg(64 << 10, Admit::All), tiers, Box::new(strata_kv::store::unix_ms))
    };
    let b = open(1).await.unwrap();
    let a = open(0).await.unwrap();
    fill(&a, 100, 8192).await;
    let chain: Vec<Vec<u8>> = (0..100).map(k).collect();
    assert_eq!(b.lookup(b"", &chain).unwrap(), 0, "nothing is flushed yet");
    a.flush(true).await.unwrap();
    b.refresh_peers().await;
    assert_eq!(b.lookup(b"", &chain).unwrap(), 100);
    for i in 0..100u64 {
        assert_eq!(b.get(b"", &k(i)).await.unwrap().unwrap(), value(i, 0, 8192), "block {i}");
    }
    let st = b.stats();
    assert_eq!(st.peer_keys, 100, "{st:?}");
    assert!(st.hits_peer >= 90, "read from A's region, then from B's own DRAM: {st:?}");
    b.check_invariants();
    // And the other way round.
    b.put(b"", b"from-b", value(7, 7, 5000), PutOpts::default()).await.unwrap();
    b.flush(true).await.unwrap();
    a.refresh_peers().await;
    assert_eq!(a.get(b"", b"from-b").await.unwrap().unwrap(), value(7, 7, 5000));
    // A deletes a block B has not read: after a refresh B does not see it.
    a.put(b"", b"short-lived", value(8, 0, 5000), PutOpts::default()).await.unwrap();
    a.flush(true).await.unwrap();
    b.refresh_peers().await;
    assert!(b.exists(b"", b"short-lived").unwrap());
    assert!(a.delete(b"", b"short-lived").await.unwrap());
    a.flush(true).await.unwrap();
    b.refresh_peers().await;
    assert!(!b.exists(b"", b"short-lived").unwrap());
    // A deletes a whole namespace B has not read: one namespace tombstone
    // in A's log hides every block of it from B, and only those.
    for i in 0..5u64 {
        a.put(b"gone", &k(i), value(i, 9, 3000), PutOpts::default()).await.unwrap();
    }
    a.put(b"kept", &k(0), value(0, 9, 3000), PutOpts::default()).await.unwrap();
    a.flush(true).await.unwrap();
    b.refresh_peers().await;
    assert!(b.exists(b"gone", &k(3)).unwrap() && b.exists(b"kept", &k(0)).unwrap());
    assert_eq!(a.delete_namespace(b"gone").await.unwrap(), 5);
    a.flush(true).await.unwrap();
    b.refresh_peers().await;
    assert!((0..5).all(|i| !b.exists(b"gone", &k(i)).unwrap()));
    assert!(b.exists(b"kept", &k(0)).unwrap());
    // A writes until its region's ring wraps many times over: what B
    // still has indexed from before is read correctly or is a miss.
    for round in 1..4u64 {
        for i in 1000..1600u64 {
            a.put(b"", &k(i), value(i, round, 8192), PutOpts::default()).await.unwrap();
        }
        if round == 1 {
            a.flush(true).await.unwrap();
            b.refresh_peers().await;
        }
    }
    a.flush(true).await.unwrap();
    for i in 1000..1600u64 {
        if let Some(v) = b.get(b"", &k(i)).await.unwrap() {
            assert!((1..4).any(|r| v == value(i, r, 8192)), "block {i} came back wrong");
        }
    }
    b.refresh_peers().await;
    b.check_invariants();
    a.check_invariants();
}

async fn open_pool_only(c: KvConfig, pool: Arc<dyn BlockDevice>) -> Arc<KvStore> {
    let tiers = strata_kv::Tiers { ssd: None, pool: Some(pool), peers: Vec::new() };
    KvStore::open_tiers(c, tiers, Box::new(strata_kv::store::unix_ms)).await.unwrap()
}

/// Every block of `range` reads back as put (version 0), or is a miss;
/// returns how many were there.
async fn right_or_missing(s: &KvStore, range: std::ops::Range<u64>, len: usize) -> u64 {
    let mut n = 0;
    for i in range {
        if let Some(v) = s.get(b"", &k(i)).await.unwrap() {
            assert_eq!(v, value(i, 0, len), "block {i}");
            n += 1;
        }
    }
    n
}

#[tokio::test(start_paused = true)]
async fn a_failed_pool_write_pauses_the_tier_and_it_resumes_when_the_volume_answers() {
    let pool = Faulty::new(16 << 20);
    let s = open_pool_only(cfg(64 << 10, Admit::All), pool.clone()).await;
    fill(&s, 100, 8192).await;
    s.flush(true).await.unwrap();
    // The volume fails: what the log could not write is dropped from the
    // index, never read back as wrong bytes, and puts still work.
    pool.fail_writes.store(true, Ordering::Release);
    for i in 100..200 {
        s.put(b"", &k(i), value(i, 0, 8192), PutOpts::default()).await.unwrap();
    }
    assert!(s.flush(false).await.is_err(), "a sync of a failed tier fails");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = s.stats();
    assert!(st.lost_pool > 0, "{st:?}");
    assert_eq!(right_or_missing(&s, 0..100, 8192).await, 100, "written before the failure");
    right_or_missing(&s, 100..200, 8192).await;
    s.check_invariants();
    // The volume answers again: within the probe's backoff the tier
    // resumes, and new blocks reach it.
    pool.fail_writes.store(false, Ordering::Release);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let lost = s.stats().lost_pool;
    fill_range(&s, 200..300, 8192).await;
    s.flush(false).await.unwrap();
    let st = s.stats();
    assert_eq!(st.lost_pool, lost, "{st:?}");
    assert_eq!(right_or_missing(&s, 200..300, 8192).await, 100, "{st:?}");
    s.check_invariants();
    // A restart finds the blocks from before the failure and after it;
    // the failure's hole is the end of its segment.
    s.flush(true).await.unwrap();
    drop(s);
    let s = open_pool_only(cfg(64 << 10, Admit::All), pool.clone()).await;
    assert_eq!(right_or_missing(&s, 0..100, 8192).await, 100);
    right_or_missing(&s, 100..200, 8192).await;
    assert_eq!(right_or_missing(&s, 200..300, 8192).await, 100);
    s.check_invariants();
}

#[tokio::test(start_paused = true)]
async fn a_stalled_pool_costs_puts_one_wait_then_blocks_skip_it_until_it_moves() {
    let pool = Faulty::new(16 << 20);
    let ssd = mem(8 << 20);
    let s = open_pool(cfg(64 << 10, Admit::All), &ssd, pool.clone()).await;
    pool.stall_writes.store(true, Ordering::Release);
    let t0 = tokio::time::Instant::now();
    fill(&s, 400, 8192).await;
    let waited = t0.elapsed();
    let st = s.stats();
    assert!(st.pool_skipped > 100, "{st:?}");
    assert!(waited <= strata_kv::store::POOL_WRITE_WAIT * 3, "puts waited {waited:?} on a stalled pool");
    // The SSD tier kept every block.
    assert_eq!(right_or_missing(&s, 0..400, 8192).await, 400);
    // The pool moves again: its queued writes land, and demotion goes on.
    pool.stall_writes.store(false, Ordering::Release);
    s.flush(false).await.unwrap();
    let skipped = s.stats().pool_skipped;
    fill_range(&s, 400..500, 8192).await;
    s.flush(false).await.unwrap();
    let st = s.stats();
    assert_eq!(st.pool_skipped, skipped, "{st:?}");
    assert!(st.pool_keys >= 100, "{st:?}");
    s.check_invariants();
}

/// A device whose writes that touch bytes `[from, to)` wait while `hold`
/// is set: a writer's buffers that land late, after later ones.
struct LateWrites {
    dev: Arc<dyn BlockDevice>,
    from: u64,
    to: u64,
    hold: std::sync::atomic::AtomicBool,
}

impl BlockDevice for LateWrites {
    fn geometry(&self) -> strata_block::Geometry {
        self.dev.geometry()
    }
    fn usage(&self) -> strata_block::DeviceUsage {
        self.dev.usage()
    }
    fn read(
        &self,
        lba: u64,
        buf: IoBuf,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        self.dev.read(lba, buf)
    }
    fn write(
        &self,
        lba: u64,
        buf: IoBuf,
        fua: bool,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        let (start, end) = (lba * 4096, lba * 4096 + buf.len() as u64);
        Box::pin(async move {
            if start < self.to && self.from < end {
                while_set(&self.hold).await;
            }
            self.dev.write(lba, buf, fua).await
        })
    }
    fn write_zeroes(
        &self,
        lba: u64,
        blocks: u64,
        d: bool,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.dev.write_zeroes(lba, blocks, d)
    }
    fn deallocate(
        &self,
        ranges: Vec<(u64, u64)>,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.dev.deallocate(ranges)
    }
    fn flush(&self) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.dev.flush()
    }
}

#[tokio::test(start_paused = true)]
async fn a_reader_finds_records_that_land_after_the_writer_moved_to_its_next_segment() {
    // A 32 MiB volume in two regions: 1 MiB segments of 256 KiB buffers.
    // The second half of A's first segment lands late, after A has moved
    // on to its second segment and B has looked.
    let vol: Arc<dyn BlockDevice> = mem(32 << 20);
    let region = |i| Arc::new(strata_block::Region::nth(vol.clone(), i, 2).unwrap()) as Arc<dyn BlockDevice>;
    let late =
        Arc::new(LateWrites { dev: region(0), from: 4096 + (512 << 10), to: 4096 + (1 << 20), hold: true.into() });
    let open = |pool: Arc<dyn BlockDevice>, peer: Arc<dyn BlockDevice>| {
        let tiers = strata_kv::Tiers { ssd: None, pool: Some(pool), peers: vec![peer] };
        KvStore::open_tiers(cfg(64 << 10, Admit::All), tiers, Box::new(strata_kv::store::unix_ms))
    };
    let a = open(late.clone(), region(1)).await.unwrap();
    let b = open(region(1), region(0)).await.unwrap();
    // 100 blocks of 16 KiB: about 1.6 MiB through A's DRAM to its log.
    fill(&a, 100, 16 << 10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.refresh_peers().await;
    let seen = |s: &KvStore| (0..100u64).filter(|&i| s.exists(b"", &k(i)).unwrap()).count();
    let before = seen(&b);
    assert!(before > 20 && before < 90, "B sees A's blocks around the late ones: {before}");
    // The late writes land: B's next looks find what they hold.
    late.hold.store(false, Ordering::Release);
    a.flush(true).await.unwrap();
    for _ in 0..3 {
        b.refresh_peers().await;
    }
    assert_eq!(seen(&b), 100, "B never found the records that landed late");
    for i in 0..100u64 {
        assert_eq!(b.get(b"", &k(i)).await.unwrap().unwrap(), value(i, 0, 16 << 10), "block {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_delete_a_paused_tier_cannot_record_is_refused_and_written_before_the_next_change() {
    // A delete while the pool tier is paused cannot invalidate the pool's
    // copy: it is refused as not durable (the key is gone in memory), so
    // is a put of the key while the pause lasts, and the first change
    // acknowledged after it writes the owed tombstone first. A restart
    // then never brings the deleted value back.
    let pool = Faulty::new(16 << 20);
    let c = cfg(64 << 10, Admit::All);
    let s = open_pool_only(c.clone(), pool.clone()).await;
    s.put(b"", b"k", value(1, 1, 8192), PutOpts::default()).await.unwrap();
    s.flush(true).await.unwrap();
    pool.fail_writes.store(true, Ordering::Release);
    assert!(s.flush(false).await.is_err(), "a failed sync pauses the tier");
    let e = s.delete(b"", b"k").await.unwrap_err();
    assert!(matches!(e, KvError::NotDurable { tier: "pool" }), "{e}");
    assert!(s.get(b"", b"k").await.unwrap().is_none(), "deleted in memory all the same");
    let e = s.put(b"", b"k", value(1, 2, 100), PutOpts::default()).await.unwrap_err();
    assert!(matches!(e, KvError::NotDurable { .. }), "{e}");
    // Other keys are not held up by the pause.
    s.put(b"", b"other", value(2, 1, 100), PutOpts::default()).await.unwrap();
    pool.fail_writes.store(false, Ordering::Release);
    tokio::time::sleep(Duration::from_secs(10)).await;
    s.put(b"", b"k", value(1, 3, 100), PutOpts::default()).await.unwrap();
    s.check_invariants();
    // A crash: the last put was in DRAM only.
    drop(s);
    let s = open_pool_only(c, pool).await;
    assert!(s.get(b"", b"k").await.unwrap().is_none(), "the value deleted while the tier was paused came back");
    s.check_invariants();
}

#[tokio::test(start_paused = true)]
async fn a_stalled_ssd_slows_puts_for_a_bounded_wait_then_drops_are_counted_as_drops() {
    let ssd = Faulty::new(16 << 20);
    let c = KvConfig { dram_bytes: 64 << 10, admit: Admit::All, segment_bytes: SEG };
    let s = KvStore::open(c, Some(ssd.clone() as Arc<dyn BlockDevice>)).await.unwrap();
    ssd.stall_writes.store(true, Ordering::Release);
    let t0 = tokio::time::Instant::now();
    fill(&s, 300, 8192).await;
    let waited = t0.elapsed();
    let st = s.stats();
    // Puts waited for the SSD (bounded), then went on; the blocks no tier
    // took are counted as dropped, not as turned away by admission.
    assert!(waited >= strata_kv::store::SSD_WRITE_WAIT, "puts did not wait for the SSD: {waited:?}");
    assert!(waited <= strata_kv::store::SSD_WRITE_WAIT * 3, "puts waited {waited:?} on a stalled SSD");
    assert!(st.ssd_skipped > 100 && st.demote_dropped > 100, "{st:?}");
    assert_eq!(st.not_admitted, 0, "{st:?}");
    // The SSD moves again: demotion goes on.
    ssd.stall_writes.store(false, Ordering::Release);
    s.flush(false).await.unwrap();
    let before = s.stats();
    fill_range(&s, 300..400, 8192).await;
    let st = s.stats();
    assert_eq!(st.demote_dropped, before.demote_dropped, "{st:?}");
    assert!(st.demoted > before.demoted, "{st:?}");
    s.check_invariants();
}

/// Sets the format version of the superblock and of every segment header
/// of the log on `dev` (the version lies outside their CRCs).
async fn set_format_version(dev: &MemDevice, seg: u64, v: u32) {
    let mut img = image(dev).await;
    img[8..12].copy_from_slice(&v.to_le_bytes());
    let mut at = 4096;
    while at + 12 <= img.len() {
        if &img[at..at + 8] == b"STKVSEG1" {
            img[at + 8..at + 12].copy_from_slice(&v.to_le_bytes());
        }
        at += seg as usize;
    }
    let (_, r) = dev.write(0, IoBuf::from_slice(&img), false).await;
    r.unwrap();
}

#[tokio::test]
async fn a_log_of_format_version_2_is_recovered_and_marked_version_3() {
    // Version 2 is version 3's layout without the namespace and expiry
    // records: read as it is; its superblock says 3 once opened, so that
    // a build that reads only 2 formats it afresh rather than miss a
    // namespace deletion written since.
    let dev = mem(8 << 20);
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    fill(&s, 50, 6000).await;
    s.put(b"", &k(3), value(3, 1, 6000), PutOpts::default()).await.unwrap();
    assert!(s.delete(b"", &k(4)).await.unwrap());
    s.flush(true).await.unwrap();
    drop(s);
    set_format_version(&dev, SEG, 2).await;
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    assert_eq!(s.stats().keys, 49);
    assert_eq!(s.get(b"", &k(3)).await.unwrap().unwrap(), value(3, 1, 6000));
    assert!(s.get(b"", &k(4)).await.unwrap().is_none());
    assert_eq!(right_or_missing(&s, 5..50, 6000).await, 45);
    assert_eq!(&image(&dev).await[8..12], &3u32.to_le_bytes(), "the superblock was not upgraded");
    s.check_invariants();
    // A version this build does not read is formatted afresh: a miss,
    // never bytes read with the wrong layout.
    drop(s);
    set_format_version(&dev, SEG, 7).await;
    let s = open(cfg(64 << 10, Admit::All), &dev).await;
    assert_eq!(s.stats().keys, 0);
    assert!(s.get(b"", &k(5)).await.unwrap().is_none());
}

#[tokio::test]
async fn namespace_deletions_and_expiry_changes_survive_a_restart() {
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = || {
        let now = now.clone();
        Box::new(move || now.load(Ordering::Relaxed)) as Box<dyn Fn() -> u64 + Send + Sync>
    };
    let dev = mem(8 << 20);
    let open_at = |dev: &Arc<MemDevice>| {
        KvStore::open_with_clock(cfg(64 << 10, Admit::All), Some(dev.clone() as Arc<dyn BlockDevice>), clock())
    };
    let s = open_at(&dev).await.unwrap();
    for ns in [&b"a"[..], b"b", b""] {
        for i in 0..30u64 {
            s.put(ns, &k(i), value(i, 0, 3000), PutOpts { expires_ms: 5_000_000, ..Default::default() }).await.unwrap();
        }
    }
    s.flush(true).await.unwrap();
    // Namespace a deleted; in b, block 1 persists, block 2 expires sooner.
    assert_eq!(s.delete_namespace(b"a").await.unwrap(), 30);
    assert!(s.set_expiry(b"b", &k(1), 0).await.unwrap());
    assert!(s.set_expiry(b"b", &k(2), 2_000_000).await.unwrap());
    // A new key in namespace a after its deletion is kept.
    s.put(b"a", b"late", value(99, 0, 100), PutOpts::default()).await.unwrap();
    s.flush(true).await.unwrap();
    drop(s);
    let s = open_at(&dev).await.unwrap();
    s.check_invariants();
    assert_eq!(s.namespace_len(b"a"), 1);
    assert_eq!(s.get(b"a", b"late").await.unwrap().unwrap(), value(99, 0, 100));
    assert_eq!(s.expiry(b"b", &k(1)).unwrap(), Some(0));
    assert_eq!(s.expiry(b"b", &k(2)).unwrap(), Some(2_000_000));
    assert_eq!(s.expiry(b"b", &k(3)).unwrap(), Some(5_000_000));
    assert_eq!(s.namespace_len(b""), 30);
    // Past block 2's new expiry, a restart does not recover it.
    drop(s);
    now.store(3_000_000, Ordering::Relaxed);
    let s = open_at(&dev).await.unwrap();
    assert!(s.get(b"b", &k(2)).await.unwrap().is_none());
    assert_eq!(s.get(b"b", &k(1)).await.unwrap().unwrap(), value(1, 0, 3000));
    assert_eq!(s.namespace_len(b"b"), 29);
    // Every key deleted at once (FLUSHALL) stays deleted.
    assert_eq!(s.delete_all().await.unwrap(), 60);
    drop(s);
    let s = open_at(&dev).await.unwrap();
    assert_eq!(s.stats().keys, 0);
    s.check_invariants();
}
