//! A real process crash: a child process (this test binary, re-executed
//! with `STRATA_KILL9_CHILD` set) writes and flushes rounds of patterns to
//! a file drive, recording each flushed round in a progress file, then
//! keeps writing without flushing. The parent SIGKILLs it mid-way,
//! reopens the drive and checks that every flushed round reads back.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_block::{BlockDevice, IoBuf};
use strata_store::{DriveKind, DriveSpec, Store, StoreConfig};

const CHILD_ENV: &str = "STRATA_KILL9_CHILD";
const EXT: u32 = 64 * 1024;
const BLOCKS_PER_ROUND: u64 = 24;
const ROUNDS: u64 = 60;
const VOL_BYTES: u64 = ROUNDS * BLOCKS_PER_ROUND * 4096 + (1 << 20);

fn block(round: u64, lba: u64) -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    for (i, chunk) in v.chunks_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&round.to_le_bytes());
        chunk[8..].copy_from_slice(&(lba * 1000 + i as u64).to_le_bytes());
    }
    v
}

fn cfg(drive: &Path, create: bool) -> StoreConfig {
    let size = create.then_some(64 << 20);
    let mut c = StoreConfig::new(vec![DriveSpec { kind: DriveKind::File { path: drive.to_owned(), size } }]);
    c.extent_size = EXT;
    c
}

/// Round `r` writes blocks `r*B..(r+1)*B` in a few requests that cross
/// extent boundaries.
async fn write_round(v: &strata_store::Volume, r: u64) {
    let first = r * BLOCKS_PER_ROUND;
    let mut lba = first;
    while lba < first + BLOCKS_PER_ROUND {
        let n = (1 + (lba % 7)).min(first + BLOCKS_PER_ROUND - lba);
        let mut data = Vec::new();
        for b in lba..lba + n {
            data.extend(block(r, b));
        }
        let (_, res) = v.write(lba, IoBuf::from_slice(&data), false).await;
        res.unwrap();
        lba += n;
    }
}

fn child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = Store::open(cfg(&dir.join("drive.img"), true)).unwrap();
    let v = store.open_volume(5, VOL_BYTES, 4096).unwrap();
    let mut progress = std::fs::File::create(dir.join("progress")).unwrap();
    rt.block_on(async {
        for r in 0..ROUNDS {
            write_round(&v, r).await;
            v.flush().await.unwrap();
            // Only after the flush completed is the round durable.
            writeln!(progress, "{r}").unwrap();
        }
        // Unflushed writes, overwriting the last region, until killed.
        let mut r = ROUNDS;
        loop {
            write_round(&v, ROUNDS + (r % 2)).await;
            r += 1;
        }
    });
}

#[test]
fn flushed_data_survives_sigkill() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "flushed_data_survives_sigkill", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let progress: PathBuf = dir.path().join("progress");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Kill once a good number of rounds were flushed, while the child is
    // still writing.
    let flushed = |p: &Path| std::fs::read_to_string(p).map(|s| s.lines().count() as u64).unwrap_or(0);
    while flushed(&progress) < ROUNDS / 3 {
        assert!(Instant::now() < deadline, "child made no progress");
        if let Some(status) = proc.try_wait().unwrap() {
            panic!("child exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    proc.kill().unwrap(); // SIGKILL
    proc.wait().unwrap();
    let done = flushed(&progress);
    assert!(done >= ROUNDS / 3);

    let store = Store::open(cfg(&dir.path().join("drive.img"), false)).unwrap();
    let v = store.open_volume(5, VOL_BYTES, 4096).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        for r in 0..done {
            let first = r * BLOCKS_PER_ROUND;
            let (buf, res) = v.read(first, IoBuf::zeroed(BLOCKS_PER_ROUND as usize * 4096)).await;
            res.unwrap();
            for i in 0..BLOCKS_PER_ROUND {
                let got = &buf[i as usize * 4096..(i as usize + 1) * 4096];
                assert!(got == block(r, first + i), "round {r} block {} lost after SIGKILL", first + i);
            }
        }
    });
}
