//! The undo log of an erasure-coded shard (strata-pool's `UndoDevice`):
//! a valid log image, built once through the device's own API (logged
//! writes that wrap the ring, commits, a reopen), is damaged per the input
//! (bytes changed anywhere: header, records, stale ring blocks), then
//! opened, rolled back, and opened again.
//!
//! Invariants: never panics; a damaged log either fails to open with an
//! error or opens to records it can roll back; after a roll back a reopen
//! finds no record left and the same committed mark.
#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_block::{BlockDevice, IoBuf, MemDevice, UndoLog};
use strata_pool::erasure::UndoDevice;

const BS: u32 = 512;
const LOG_BLOCKS: u64 = 24;
const DATA_BLOCKS: u64 = 16;

#[derive(Arbitrary, Debug)]
struct Damage {
    changes: Vec<(u16, u8)>,
}

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

async fn image_of(dev: &MemDevice, blocks: u64) -> Vec<u8> {
    let (b, r) = dev.read(0, IoBuf::zeroed((blocks * u64::from(BS)) as usize)).await;
    r.expect("read a RAM device");
    b.to_vec()
}

/// The log and data images after a history that wraps the ring.
fn images() -> &'static (Vec<u8>, Vec<u8>) {
    static IMAGES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    IMAGES.get_or_init(|| {
        rt().block_on(async {
            let log = Arc::new(MemDevice::new(BS, LOG_BLOCKS));
            let data = Arc::new(MemDevice::new(BS, DATA_BLOCKS));
            let dev = UndoDevice::open(data.clone(), log.clone()).await.expect("a fresh log");
            for seq in 1..40u64 {
                let lba = seq * 7 % (DATA_BLOCKS - 2);
                let blocks = 1 + seq % 2;
                let buf = IoBuf::from_slice(&vec![seq as u8; (blocks * u64::from(BS)) as usize]);
                let (_, r) = dev.write_logged(seq, 0, lba, buf).await;
                r.expect("logged write");
                if seq % 5 == 0 {
                    dev.commit(seq - 2).await.expect("commit");
                }
            }
            drop(dev);
            (image_of(&log, LOG_BLOCKS).await, image_of(&data, DATA_BLOCKS).await)
        })
    })
}

async fn device_with(image: &[u8], blocks: u64) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(BS, blocks));
    let (_, r) = dev.write(0, IoBuf::from_slice(image), false).await;
    r.expect("write a RAM device");
    dev
}

fuzz_target!(|damage: Damage| {
    let (log_image, data_image) = images();
    let mut log_image = log_image.clone();
    for &(at, xor) in damage.changes.iter().take(32) {
        let i = usize::from(at) % log_image.len();
        log_image[i] ^= xor;
    }
    rt().block_on(async {
        let log = device_with(&log_image, LOG_BLOCKS).await;
        let data = device_with(data_image, DATA_BLOCKS).await;
        let Ok(dev) = UndoDevice::open(data.clone(), log.clone()).await else { return };
        let mark = dev.committed();
        if dev.roll_back(mark).await.is_err() {
            return;
        }
        drop(dev);
        let again = UndoDevice::open(data, log).await.expect("a log this device wrote opens again");
        assert!(again.ring_records().is_empty(), "a roll back leaves no record");
        assert_eq!(again.committed(), mark, "the committed mark survives");
    });
});
