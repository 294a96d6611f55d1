//! The KV store's SSD log, recovered from a damaged device: an image made
//! once through the store's API (values that say which key they belong
//! to, overwrites, deletes, segments reclaimed), then bytes flipped and
//! ranges zeroed per the input, then opened and read.
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
const KEYS: u64 = 60;

#[derive(Arbitrary, Debug)]
struct Damage {
    flips: Vec<(u32, u8)>,
    zeroes: Vec<(u32, u16)>,
}

fn cfg() -> KvConfig {
    KvConfig { dram_bytes: 16 << 10, admit: Admit::All, segment_bytes: 64 << 10 }
}

fn value(key: u64, version: u64) -> Vec<u8> {
    let len = 500 + (key as usize * 97 + version as usize * 13) % 3000;
    (0..len).map(|i| (key as usize * 7 + version as usize * 131 + i) as u8).collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The image: six rounds of puts and deletes through a 16 KiB DRAM tier
/// into a log of 64 KiB segments, so that segments were reclaimed.
fn base() -> &'static Vec<u8> {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        rt().block_on(async {
            let dev = Arc::new(MemDevice::new(4096, DEV / 4096));
            let s = KvStore::open(cfg(), Some(dev.clone() as Arc<dyn BlockDevice>)).await.unwrap();
            for round in 0..6u64 {
                for k in 0..KEYS {
                    if (k + round) % 7 == 0 {
                        s.delete(b"", &k.to_le_bytes()).unwrap();
                    } else {
                        s.put(b"", &k.to_le_bytes(), value(k, round).into(), PutOpts::default()).await.unwrap();
                    }
                }
            }
            s.flush(true).await.unwrap();
            drop(s);
            let (img, r) = dev.read(0, IoBuf::zeroed(DEV as usize)).await;
            r.unwrap();
            img.to_vec()
        })
    })
}

fuzz_target!(|d: Damage| {
    let img = base();
    let mut img = img.clone();
    for (at, x) in d.flips.iter().take(64) {
        let at = *at as usize % img.len();
        img[at] ^= x | 1;
    }
    for (at, len) in d.zeroes.iter().take(8) {
        let at = *at as usize % img.len();
        let end = (at + *len as usize).min(img.len());
        img[at..end].fill(0);
    }
    rt().block_on(async {
        let dev = Arc::new(MemDevice::new(4096, DEV / 4096));
        let (_, r) = dev.write(0, IoBuf::from_slice(&img), false).await;
        r.unwrap();
        let Ok(s) = KvStore::open(cfg(), Some(dev as Arc<dyn BlockDevice>)).await else { return };
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
        s.check_invariants();
    });
});
