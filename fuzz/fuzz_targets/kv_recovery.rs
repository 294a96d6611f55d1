//! The KV store's two logs (SSD and pool), recovered from damaged
//! devices: images made once through the store's API (values that say
//! which key they belong to, overwrites, deletes, the SSD's segments
//! reclaimed while the larger pool keeps older copies), then bytes
//! flipped and ranges zeroed in either image per the input, then opened
//! and read. Recovery picks each key's newest version across the two
//! logs, a tombstone beating the copies it deletes: damage to one log's
//! newer record may bring back an older version, never foreign bytes.
//! Some values are large (80-100 KiB): a restart reads only their
//! headers and keys, so damage to their values is found on read.
//!
//! The images also hold namespace tombstones (a second namespace is
//! deleted twice and written again) and expiry records (far-off expiries
//! set and cleared), which recovery applies across the two logs.
//!
//! Invariants: never panics; the index and byte counts agree
//! (`check_invariants`); every value read back is one that was written
//! for its key, or a miss: damage is never wrong bytes.
#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_block::{BlockDevice, IoBuf, MemDevice};
use strata_kv::{Admit, KvConfig, KvStore, PutOpts};

const DEV: u64 = 1 << 20;
/// The pool log: 1 MiB segments (its size picks them), of which the
/// records written fill about the first [`POOL_USED`] bytes, where its
/// damage lands.
const POOL: u64 = 8 << 20;
const POOL_USED: usize = 6 << 20;
const KEYS: u64 = 60;
/// Keys of a second namespace, deleted whole now and then.
const OTHER_KEYS: u64 = 10;
const OTHER: &[u8] = b"other";

#[derive(Arbitrary, Debug)]
struct Damage {
    /// (in the pool's image, offset, bits)
    flips: Vec<(bool, u32, u8)>,
    /// (in the pool's image, offset, length)
    zeroes: Vec<(bool, u32, u16)>,
}

fn cfg() -> KvConfig {
    KvConfig { dram_bytes: 256 << 10, admit: Admit::All, segment_bytes: 128 << 10 }
}

fn value(key: u64, version: u64) -> Vec<u8> {
    let len = match key % 8 {
        3 => (80 << 10) + (key as usize * 977 + version as usize * 4099) % (20 << 10),
        _ => 500 + (key as usize * 97 + version as usize * 13) % 3000,
    };
    (0..len).map(|i| (key as usize * 7 + version as usize * 131 + i) as u8).collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn open(ssd: Arc<MemDevice>, pool: Arc<MemDevice>) -> Result<Arc<KvStore>, strata_kv::KvError> {
    let (ssd, pool): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (ssd, pool);
    let tiers = strata_kv::Tiers { ssd: Some(ssd), pool: Some(pool), peers: Vec::new() };
    KvStore::open_tiers(cfg(), tiers, Box::new(strata_kv::store::unix_ms)).await
}

async fn image(dev: &MemDevice, len: u64) -> Vec<u8> {
    let (img, r) = dev.read(0, IoBuf::zeroed(len as usize)).await;
    r.unwrap();
    img.to_vec()
}

async fn device(img: &[u8]) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4096, img.len() as u64 / 4096));
    let (_, r) = dev.write(0, IoBuf::from_slice(img), false).await;
    r.unwrap();
    dev
}

/// The images (SSD, then pool): six rounds of puts and deletes through a
/// 256 KiB DRAM tier into an SSD log of 128 KiB segments, so that the
/// SSD's segments were reclaimed.
fn base() -> &'static Vec<u8> {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        rt().block_on(async {
            let dev = Arc::new(MemDevice::new(4096, DEV / 4096));
            let pool = Arc::new(MemDevice::new(4096, POOL / 4096));
            let s = open(dev.clone(), pool.clone()).await.unwrap();
            for round in 0..6u64 {
                for k in 0..KEYS {
                    if (k + round) % 7 == 0 {
                        s.delete(b"", &k.to_le_bytes()).await.unwrap();
                    } else {
                        s.put(b"", &k.to_le_bytes(), value(k, round).into(), PutOpts::default()).await.unwrap();
                    }
                    if k % 5 == 1 {
                        let at = if round % 2 == 0 { u64::MAX / 2 } else { 0 };
                        s.set_expiry(b"", &k.to_le_bytes(), at).await.unwrap();
                    }
                }
                for k in 0..OTHER_KEYS {
                    s.put(OTHER, &k.to_le_bytes(), value(k + KEYS, round).into(), PutOpts::default()).await.unwrap();
                }
                if round % 3 == 1 {
                    s.delete_namespace(OTHER).await.unwrap();
                }
            }
            s.flush(true).await.unwrap();
            drop(s);
            let mut img = image(&dev, DEV).await;
            img.extend(image(&pool, POOL).await);
            img
        })
    })
}

/// Where offset `at` of the SSD's or the pool's image lands in the two
/// images laid end to end.
fn place(pool: bool, at: u32) -> usize {
    match pool {
        false => at as usize % DEV as usize,
        true => DEV as usize + at as usize % POOL_USED,
    }
}

fuzz_target!(|d: Damage| {
    let mut img = base().clone();
    for &(pool, at, x) in d.flips.iter().take(64) {
        img[place(pool, at)] ^= x | 1;
    }
    for &(pool, at, len) in d.zeroes.iter().take(8) {
        let at = place(pool, at);
        let end = (at + len as usize).min(if pool { img.len() } else { DEV as usize });
        img[at..end].fill(0);
    }
    rt().block_on(async {
        let (ssd, pool) = img.split_at(DEV as usize);
        let Ok(s) = open(device(ssd).await, device(pool).await).await else { return };
        s.check_invariants();
        for k in 0..KEYS {
            if let Some(v) = s.get(b"", &k.to_le_bytes()).await.unwrap() {
                // The latest version, or an older one whose newer record
                // (or tombstone) was damaged; never foreign bytes. (A
                // damaged superblock formats the device afresh: no keys.)
                let ok = (0..6).any(|ver| v[..] == value(k, ver)[..]);
                assert!(ok, "key {k}: bytes that were never written for it");
            }
        }
        for k in 0..OTHER_KEYS {
            if let Some(v) = s.get(OTHER, &k.to_le_bytes()).await.unwrap() {
                let ok = (0..6).any(|ver| v[..] == value(k + KEYS, ver)[..]);
                assert!(ok, "key {k} of the other namespace: bytes that were never written for it");
            }
        }
        s.check_invariants();
    });
});
