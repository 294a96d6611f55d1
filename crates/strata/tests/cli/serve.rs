//! End-to-end tests of the `strata` binary: a real `strata serve` process
//! on loopback, driven by strata's own NVMe/TCP initiator and the volume
//! CLI. These pin the behaviour a user relies on: volumes and data survive
//! a clean restart, everything flushed survives kill -9, the CLI manages
//! volumes on a live node, and IPv6 listeners work. (A drive on a file
//! system without O_DIRECT is checked in the VM test: this host's tmpfs
//! supports O_DIRECT, the guest kernel's does not.)

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use strata_host::{Controller, HostConfig};
use strata_testkit::Proc;

const BIN: &str = env!("CARGO_BIN_EXE_strata");
const NQN: &str = "nqn.2026-11.io.strata:default";
const BS: usize = 4096;

fn free_port(ip: &str) -> u16 {
    // Bind port 0 and release it: another process could take it in between,
    // which on a test machine is rare enough.
    TcpListener::bind((ip, 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A `strata serve` process: a [`Proc`] (its log in `DATA_DIR/serve.log`,
/// killed on drop) with its addresses.
struct Server {
    proc: Proc,
    io: SocketAddr,
    api: String,
    /// Its admin token's file.
    token_file: String,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        Self::start_on("127.0.0.1", dir, extra)
    }

    fn start_on(ip: &str, dir: &Path, extra: &[&str]) -> Server {
        let io_port = free_port(ip);
        let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
        let io: SocketAddr = format!("{host}:{io_port}").parse().unwrap();
        let api = format!("127.0.0.1:{}", free_port("127.0.0.1"));
        let mut args: Vec<String> = vec![
            BIN.into(),
            "serve".into(),
            "--data-dir".into(),
            dir.display().to_string(),
            "--listen".into(),
            io.to_string(),
            "--discovery".into(),
            format!("{host}:{}", free_port(ip)),
            "--http".into(),
            api.clone(),
            "--default-volume-size".into(),
            "64M".into(),
        ];
        if !extra.contains(&"--drive") {
            args.push("--drive".into());
            args.push(format!("{}:256M", dir.join("drive0.img").display()));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let token_file = dir.join("api-token").display().to_string();
        let mut s = Server { proc: Proc::spawn("strata-serve", args, dir.join("serve.log")), io, api, token_file };
        s.wait_ready();
        s
    }

    fn wait_ready(&mut self) {
        let api: SocketAddr = self.api.parse().unwrap();
        if let Err(e) = self.proc.wait_listening(&[self.io, api], Duration::from_secs(20)) {
            panic!("strata serve: {e}");
        }
    }

    /// The same server again, on the same data dir and ports (after it
    /// exited or was killed).
    fn restart(mut self) -> Server {
        self.proc.restart().expect("restart strata serve");
        self.wait_ready();
        self
    }

    fn sigterm(&mut self) -> std::process::ExitStatus {
        assert!(self.proc.signal("-TERM"));
        self.proc.wait_exit(Duration::from_secs(60)).expect("strata serve exits on SIGTERM")
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("volume")
            .args(args)
            .args(["--api", &format!("http://{}", self.api), "--token-file", &self.token_file])
            .output()
            .expect("cli")
    }
}

/// A block's content: identifies the block, the round and the writer, so a
/// misplaced or stale block cannot pass for another.
fn pattern(lba: u64, round: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (i, chunk) in b.chunks_mut(8).enumerate() {
        let v = lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ i as u64;
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    b
}

async fn connect(addr: SocketAddr) -> Controller {
    let cfg = HostConfig { io_queues: 2, ..HostConfig::default() };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Controller::connect(addr, NQN, &cfg).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("connect: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_and_data_survive_a_clean_restart() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let before = server.cli(&["list", "--json"]);
    assert!(before.status.success());
    let ctrl = connect(server.io).await;
    let lbas: Vec<u64> = (0..64).map(|i| i * 257 % 16384).collect();
    for &lba in &lbas {
        ctrl.write(1, lba, pattern(lba, 1), false).await.unwrap();
    }
    // No explicit flush: a clean shutdown must flush on its own.
    drop(ctrl);
    let status = server.sigterm();
    assert!(status.success(), "SIGTERM exit: {status}");
    let server = server.restart();
    let after = server.cli(&["list", "--json"]);
    let identity = |out: &Output| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON list");
        let keys = ["name", "id", "uuid", "nguid", "nqn", "nsid", "size_bytes", "created_unix"];
        v.as_array().unwrap().iter().map(|vol| serde_json::json!(keys.map(|k| vol[k].clone()))).collect()
    };
    assert_eq!(identity(&before), identity(&after), "volume identity changed across restart");
    assert_eq!(identity(&after).len(), 1);
    let ctrl = connect(server.io).await;
    for &lba in &lbas {
        assert_eq!(&ctrl.read(1, lba, 1).await.unwrap()[..], &pattern(lba, 1)[..], "lba {lba}");
    }
    // Never-written blocks read as zeros.
    assert!(ctrl.read(1, 1, 1).await.unwrap().iter().all(|&b| b == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_after_flush_loses_nothing_acknowledged() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ctrl = connect(server.io).await;
    // Model: the last flushed round of each block, and rounds written after
    // the last flush (which may or may not survive).
    let mut durable: std::collections::HashMap<u64, u64> = Default::default();
    let mut unflushed: std::collections::HashMap<u64, Vec<u64>> = Default::default();
    let mut rng = 0x1234_5678_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 1..=6u64 {
        for _ in 0..48 {
            let lba = next() % 16384;
            ctrl.write(1, lba, pattern(lba, round), false).await.unwrap();
            unflushed.entry(lba).or_default().push(round);
        }
        if round < 6 {
            ctrl.flush(1).await.unwrap();
            for (lba, rounds) in unflushed.drain() {
                durable.insert(lba, *rounds.last().unwrap());
            }
        }
    }
    // Round 6 is in flight as far as durability goes; FUA writes are not.
    for i in 0..8u64 {
        let lba = 16300 + i;
        ctrl.write(1, lba, pattern(lba, 7), true).await.unwrap();
        durable.insert(lba, 7);
    }
    let mut server = server;
    server.proc.kill9();
    let server = server.restart();
    let ctrl = connect(server.io).await;
    for (&lba, &round) in &durable {
        let got = ctrl.read(1, lba, 1).await.unwrap();
        let mut allowed = vec![round];
        allowed.extend(unflushed.get(&lba).cloned().unwrap_or_default());
        assert!(
            allowed.iter().any(|&r| got[..] == pattern(lba, r)[..]),
            "lba {lba}: flushed round {round} lost (allowed rounds {allowed:?})"
        );
    }
    for (&lba, rounds) in &unflushed {
        if durable.contains_key(&lba) {
            continue;
        }
        let got = ctrl.read(1, lba, 1).await.unwrap();
        let zero = got.iter().all(|&b| b == 0);
        assert!(zero || rounds.iter().any(|&r| got[..] == pattern(lba, r)[..]), "lba {lba}: torn or foreign data");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_cli_manages_volumes_on_a_live_node() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let out = server.cli(&["create", "scratch", "--size", "32M", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nqn"], "nqn.2026-11.io.strata:scratch");
    assert_eq!(v["size_bytes"], 32 << 20);

    let cfg = HostConfig::default();
    let ctrl = Controller::connect(server.io, "nqn.2026-11.io.strata:scratch", &cfg).await.unwrap();
    assert_eq!(ctrl.identify_namespace(1).await.unwrap().nsze, (32 << 20) / 4096);

    let dup = server.cli(&["create", "scratch", "--size", "32M"]);
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("409"), "{}", String::from_utf8_lossy(&dup.stderr));

    let out = server.cli(&["resize", "scratch", "--size", "48M"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ctrl.identify_namespace(1).await.unwrap().nsze, (48 << 20) / 4096, "a connected host sees the growth");
    let shrink = server.cli(&["resize", "scratch", "--size", "16M"]);
    assert!(!shrink.status.success() && String::from_utf8_lossy(&shrink.stderr).contains("--shrink"));

    let list = server.cli(&["list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("scratch") && text.contains("48 MiB") && text.contains("default"), "{text}");
    // A reader that goes away (`strata volume list | head -0`) ends the
    // command quietly, not with a panic.
    let mut child = Command::new(BIN)
        .args(["volume", "list", "--api", &format!("http://{}", server.api), "--token-file", &server.token_file])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");

    let out = server.cli(&["delete", "scratch"]);
    assert!(out.status.success());
    let gone = server.cli(&["delete", "scratch"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("404"));
    assert!(Controller::connect(server.io, "nqn.2026-11.io.strata:scratch", &cfg).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_ipv6() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_on("::1", dir.path(), &[]);
    let ctrl = connect(server.io).await;
    ctrl.write(1, 5, pattern(5, 1), false).await.unwrap();
    assert_eq!(&ctrl.read(1, 5, 1).await.unwrap()[..], &pattern(5, 1)[..]);
    let entries = strata_host::discover(server.io, &HostConfig::default()).await.unwrap();
    let e = entries.iter().find(|e| e.subnqn == NQN).expect("listed");
    assert_eq!((e.adrfam, e.traddr.as_str()), (strata_nvme::log_page::ADRFAM_IPV6, "::1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_drive_fails_writes_with_capacity_exceeded_and_keeps_data() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    // A 16 MiB drive under a 64 MiB thin volume: it fills after a few extents.
    let drive = format!("{}:16M", dir.path().join("small.img").display());
    let server = Server::start(dir.path(), &["--drive", &drive]);
    let ctrl = connect(server.io).await;
    let mut written = Vec::new();
    let mut full = None;
    // One block per 1 MiB extent, until the pool runs out.
    for mib in 0..64u64 {
        let lba = mib * 256;
        match ctrl.write(1, lba, pattern(lba, 1), false).await {
            Ok(()) => written.push(lba),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let e = full.expect("a 16 MiB drive cannot hold 64 extents");
    assert!(e.is_status(strata_nvme::status::Status::CAPACITY_EXCEEDED), "{e}");
    assert!(!written.is_empty());
    ctrl.flush(1).await.unwrap();
    for &lba in &written {
        assert_eq!(&ctrl.read(1, lba, 1).await.unwrap()[..], &pattern(lba, 1)[..]);
    }
    // Space given back by deallocation is usable again.
    ctrl.deallocate(1, &[(written[0], 256)]).await.unwrap();
    ctrl.flush(1).await.unwrap();
    let lba = 63 * 256;
    ctrl.write(1, lba, pattern(lba, 2), false).await.expect("freed extent is reusable");
    assert_eq!(&ctrl.read(1, lba, 1).await.unwrap()[..], &pattern(lba, 2)[..]);
}

/// A block of round `round` of `lba`, decodable from any of its words, so
/// that a read can tell which write it saw and whether it is torn.
fn stamped(lba: u64, round: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (i, chunk) in b.chunks_mut(8).enumerate() {
        let v = lba.rotate_left(40) ^ round.rotate_left(20) ^ i as u64;
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// The round a block holds, if it is a whole, untorn `stamped` block of
/// `lba` (0 for a never-written, all-zero block).
fn round_of(block: &[u8], lba: u64) -> Option<u64> {
    if block.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let w0 = u64::from_le_bytes(block[..8].try_into().unwrap());
    let round = (w0 ^ lba.rotate_left(40)).rotate_right(20);
    (block == &stamped(lba, round)[..]).then_some(round)
}

fn mem_server(dir: &Path) -> Server {
    Server::start(dir, &["--drive", "mem:256M"])
}

/// On a RAM drive, reads are served from the drive's own memory (lent,
/// not copied) while writers hit the same blocks: every read must see a
/// whole block of one write, never older than a write that completed
/// before the read was issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_lent_from_a_ram_drive_are_never_torn_or_stale() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = mem_server(dir.path());
    let ctrl = std::sync::Arc::new(connect(server.io).await);
    const BLOCKS: u64 = 48; // 192 KiB: a few 64 KiB stripes of one chunk
    let done: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>> =
        std::sync::Arc::new((0..BLOCKS).map(|_| std::sync::atomic::AtomicU64::new(0)).collect());
    let until = Instant::now() + Duration::from_secs(3);
    let writer = {
        let (ctrl, done) = (ctrl.clone(), done.clone());
        tokio::spawn(async move {
            let mut round = 0;
            while Instant::now() < until {
                round += 1;
                // Whole range in one command, then single blocks.
                let all: Vec<u8> = (0..BLOCKS).flat_map(|l| stamped(l, round)).collect();
                ctrl.write(1, 0, all, false).await.expect("write");
                for l in 0..BLOCKS {
                    done[l as usize].store(round, std::sync::atomic::Ordering::Release);
                }
                round += 1;
                for l in (0..BLOCKS).step_by(5) {
                    ctrl.write(1, l, stamped(l, round), false).await.expect("write");
                    done[l as usize].store(round, std::sync::atomic::Ordering::Release);
                }
            }
            round
        })
    };
    let mut readers = Vec::new();
    for r in 0..3u64 {
        let (ctrl, done) = (ctrl.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            let mut rng = strata_rand::Rng::new(r);
            while Instant::now() < until {
                let lba = rng.below(BLOCKS);
                let n = if rng.chance(50) { 1 } else { (BLOCKS - lba).min(16) };
                let floor: Vec<u64> =
                    (lba..lba + n).map(|l| done[l as usize].load(std::sync::atomic::Ordering::Acquire)).collect();
                let data = ctrl.read(1, lba, n as u32).await.expect("read");
                for (k, block) in data.chunks(BS).enumerate() {
                    let l = lba + k as u64;
                    let got = round_of(block, l).unwrap_or_else(|| panic!("block {l} is torn or foreign"));
                    assert!(got >= floor[k], "block {l}: read round {got} after round {} completed", floor[k]);
                }
                reads += 1;
            }
            reads
        }));
    }
    let rounds = writer.await.unwrap();
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    assert!(rounds > 2 && reads > 10, "the test did too little: {rounds} rounds, {reads} reads");
}

/// A host that stops reading its socket holds reads the target has not
/// sent yet. Lent data must not wait for it: a write to the same blocks
/// from another host completes, and the stuck host, once it reads again,
/// gets whole blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_reading_does_not_block_writers_to_what_it_read() {
    let _group = strata_testkit::group(module_path!());
    use strata_nvme::command::{ReadWrite, Sqe, io};
    let dir = tempfile::tempdir().unwrap();
    let server = mem_server(dir.path());
    let writer = connect(server.io).await;
    const CHUNK_BLOCKS: u32 = 256; // 1 MiB per read
    const SPAN: u64 = 16 * 256; // 16 MiB
    for lba in (0..SPAN).step_by(CHUNK_BLOCKS as usize) {
        let data: Vec<u8> = (lba..lba + u64::from(CHUNK_BLOCKS)).flat_map(|l| stamped(l, 1)).collect();
        writer.write(1, lba, data, false).await.expect("prefill");
    }
    let cfg = HostConfig { io_queues: 1, io_queue_size: 64, ..HostConfig::default() };
    let (_stuck_ctrl, mut drivers) =
        Controller::connect_with_drivers::<u64>(server.io, NQN, &cfg).await.expect("connect");
    let mut d = drivers.remove(0);
    // 64 MiB of reads: far more than the socket buffers hold.
    let mut submitted = Vec::new();
    for k in 0..64u64 {
        let lba = (k % 16) * u64::from(CHUNK_BLOCKS);
        let mut sqe = Sqe::new(io::READ, 0);
        sqe.set_nsid(1);
        ReadWrite { slba: lba, nlb: CHUNK_BLOCKS, fua: false, limited_retry: false }.encode(&mut sqe);
        d.submit(lba, sqe, None, CHUNK_BLOCKS as usize * BS).expect("submit");
        submitted.push(lba);
    }
    let mut done = Vec::new();
    // Send the commands and take the first completion, then stop reading.
    tokio::time::timeout(Duration::from_secs(10), d.poll(&mut done)).await.expect("first completion").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Every block the stuck host asked for gets overwritten from elsewhere.
    let rewrite = async {
        for lba in (0..SPAN).step_by(CHUNK_BLOCKS as usize) {
            let data: Vec<u8> = (lba..lba + u64::from(CHUNK_BLOCKS)).flat_map(|l| stamped(l, 2)).collect();
            writer.write(1, lba, data, false).await.expect("write");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), rewrite)
        .await
        .expect("writes to blocks a stuck host read must not wait for that host");
    // The stuck host reads again and gets every completion, all whole.
    while done.len() < submitted.len() {
        tokio::time::timeout(Duration::from_secs(10), d.poll(&mut done)).await.expect("completions").unwrap();
    }
    for (lba, res) in done {
        let c = res.expect("read");
        assert!(c.cqe.status.is_success(), "{:?}", c.cqe.status);
        for (k, block) in c.data.chunks(BS).enumerate() {
            let l = lba + k as u64;
            let round = round_of(block, l).unwrap_or_else(|| panic!("block {l} is torn"));
            assert!(round == 1 || round == 2, "block {l}: round {round}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_a_host_reads_was_written_to_that_block() {
    let _group = strata_testkit::group(module_path!());
    // Buffers are recycled between commands and volumes; a read path that
    // failed to overwrite part of one would send another command's bytes.
    // This debug binary fills recycled buffers with POISON, so such a path
    // sends poison here rather than plausible data. Two volumes on a file
    // drive and a RAM drive, 64 KiB extents: reads cross extents, holes,
    // deallocated and zeroed ranges, lent and copied data.
    let dir = tempfile::tempdir().unwrap();
    let file = format!("{}:256M", dir.path().join("drive0.img").display());
    let server = Server::start(dir.path(), &["--drive", &file, "--drive", "mem:256M", "--extent-size", "64K"]);
    let out = server.cli(&["create", "other", "--size", "16M"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = HostConfig { io_queues: 2, ..HostConfig::default() };
    let vols = [
        Controller::connect(server.io, NQN, &cfg).await.unwrap(),
        Controller::connect(server.io, "nqn.2026-11.io.strata:other", &cfg).await.unwrap(),
    ];
    const BLOCKS: u64 = 4096;
    // What each block must read as: `Some(round)` or `None` for zeros.
    let mut model = vec![vec![None::<u64>; BLOCKS as usize]; 2];
    let mut rng = 0x9e37_79b9_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for op in 0..600u64 {
        let v = (op % 2) as usize;
        let lba = next(BLOCKS - 64);
        let n = 1 + next(48);
        match next(8) {
            0 => {
                vols[v].deallocate(1, &[(lba, n as u32)]).await.unwrap();
                model[v][lba as usize..(lba + n) as usize].fill(None);
            }
            1 => {
                vols[v].write_zeroes(1, lba, n as u32, false).await.unwrap();
                model[v][lba as usize..(lba + n) as usize].fill(None);
            }
            _ => {
                let round = (v as u64 + 1) << 32 | op;
                let data: Vec<u8> = (lba..lba + n).flat_map(|l| pattern(l, round)).collect();
                vols[v].write(1, lba, data, false).await.unwrap();
                model[v][lba as usize..(lba + n) as usize].fill(Some(round));
            }
        }
    }
    for _ in 0..200 {
        let v = next(2) as usize;
        let lba = next(BLOCKS - 256);
        let n = 1 + next(256);
        let got = vols[v].read(1, lba, n as u32).await.unwrap();
        assert!(!strata_block::IoBuf::holds_poison(&got), "volume {v}: poison in a read at {lba}+{n}");
        for (i, block) in got.chunks(BS).enumerate() {
            let l = lba + i as u64;
            let want = match model[v][l as usize] {
                Some(round) => pattern(l, round),
                None => vec![0; BS],
            };
            assert!(block == &want[..], "volume {v} block {l}: not what was written there");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_on_a_new_volumes_list_never_gets_in() {
    let _group = strata_testkit::group(module_path!());
    // Regression: a new subsystem was added with an empty access list (any
    // host) and got its real list afterwards; a host that connected in
    // between stayed connected. An intruder tries to connect to each new
    // volume for as long as its creation takes, and must never succeed.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000a110";
    for round in 0..8 {
        let name = format!("fenced{round}");
        let nqn = format!("nqn.2026-11.io.strata:{name}");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let intruder = {
            let (done, nqn, io) = (done.clone(), nqn.clone(), server.io);
            tokio::spawn(async move {
                let cfg = HostConfig { connect_timeout: Duration::from_secs(2), ..HostConfig::default() };
                let mut attempts = 0u32;
                while !done.load(std::sync::atomic::Ordering::Acquire) || attempts < 5 {
                    attempts += 1;
                    if let Ok(c) = Controller::connect(io, &nqn, &cfg).await {
                        return Err(format!("intruder connected to {nqn} (cntlid {})", c.cntlid()));
                    }
                }
                Ok(attempts)
            })
        };
        let out = server.cli(&["create", &name, "--size", "16M", "--allow-host", allowed]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        done.store(true, std::sync::atomic::Ordering::Release);
        let attempts = intruder.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert!(attempts >= 5);
        let cfg = HostConfig { hostnqn: allowed.into(), ..HostConfig::default() };
        Controller::connect(server.io, &nqn, &cfg)
            .await
            .expect("the allowed host connects")
            .disconnect()
            .await
            .unwrap();
    }
}

/// A reservation command from `c` on namespace 1: its status, and the
/// data it returned.
async fn reservation(c: &Controller, opcode: u8, cdw10: u32, cdw11: u32, data: &[u8], read: usize) -> (u16, Vec<u8>) {
    let mut sqe = strata_nvme::command::Sqe::new(opcode, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(cdw10);
    sqe.set_cdw11(cdw11);
    let out = (!data.is_empty()).then(|| bytes::Bytes::copy_from_slice(data));
    let (cqe, back) = c.io_queue(0).unwrap().io_command(sqe, out, read).await.expect("transport");
    (cqe.status.code(), back.to_vec())
}

fn two_keys(a: u64, b: u64) -> Vec<u8> {
    [a.to_le_bytes(), b.to_le_bytes()].concat()
}

async fn report(c: &Controller) -> strata_nvme::reservation::ReservationStatus {
    let (status, data) = reservation(c, strata_nvme::reservation::opcode::REPORT, 1023, 1, &[], 4096).await;
    assert_eq!(status, 0, "report");
    strata_nvme::reservation::ReservationStatus::decode(&data).expect("a report")
}

async fn connect_as(addr: SocketAddr, id: u8) -> Controller {
    let cfg = HostConfig {
        hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{id:02x}"),
        hostid: [id; 16],
        ..HostConfig::default()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Controller::connect(addr, NQN, &cfg).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("connect: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Reservations a host asked to persist through power loss (CPTPL = 11b,
/// as Linux asks at every register) are in the metadata store before the
/// command completes: after kill -9 and a restart the holder still holds
/// the reservation and the other host's writes still conflict. Once a
/// host clears PTPL, the next restart starts with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_that_persist_through_power_loss_survive_kill_9() {
    use strata_nvme::reservation::{ReservationType, opcode};
    let _group = strata_testkit::group(module_path!());
    const CONFLICT: u16 = 0x83;
    const PTPL_SET: u32 = 3 << 30;
    const PTPL_CLEAR: u32 = 2 << 30;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (a, b) = (connect_as(server.io, 0xa).await, connect_as(server.io, 0xb).await);
    assert_eq!(a.identify_namespace(1).await.unwrap().rescap & 1, 1, "RESCAP announces PTPL");
    assert_eq!(reservation(&a, opcode::REGISTER, PTPL_SET, 0, &two_keys(0, 0xaaaa), 0).await.0, 0);
    assert_eq!(reservation(&b, opcode::REGISTER, 0, 0, &two_keys(0, 0xbbbb), 0).await.0, 0);
    let we = u32::from(ReservationType::WriteExclusive.code()) << 8;
    assert_eq!(reservation(&a, opcode::ACQUIRE, we, 0, &two_keys(0xaaaa, 0), 0).await.0, 0);
    let e = b.write(1, 9, pattern(9, 1), false).await.expect_err("b writes under a's reservation");
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT));
    drop((a, b));

    let mut server = server;
    server.proc.kill9();
    let server = server.restart();
    let (a, b) = (connect_as(server.io, 0xa).await, connect_as(server.io, 0xb).await);
    let s = report(&b).await;
    assert!(s.persist, "PTPLS");
    assert_eq!(s.rtype, Some(ReservationType::WriteExclusive));
    let held: Vec<([u8; 16], bool, u64)> = s.registrants.iter().map(|r| (r.hostid, r.holds, r.key)).collect();
    assert_eq!(held, vec![([0xa; 16], true, 0xaaaa), ([0xb; 16], false, 0xbbbb)]);
    let e = b.write(1, 9, pattern(9, 2), false).await.expect_err("b writes after the restart");
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT));
    a.write(1, 9, pattern(9, 3), false).await.expect("the holder writes");

    // PTPL cleared: the next power loss ends it all.
    assert_eq!(reservation(&a, opcode::REGISTER, 2 | PTPL_CLEAR, 0, &two_keys(0xaaaa, 0xaaab), 0).await.0, 0);
    drop((a, b));
    let mut server = server;
    server.proc.kill9();
    let server = server.restart();
    let b = connect_as(server.io, 0xb).await;
    let s = report(&b).await;
    assert_eq!((s.rtype, s.registrants.len(), s.persist), (None, 0, false));
    b.write(1, 9, pattern(9, 4), false).await.expect("no reservation after a restart without PTPL");
}

/// `curl` to the API: the status code and body.
fn curl(method: &str, url: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}", "-X", method, url]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = String::from_utf8(cmd.output().expect("curl").stdout).unwrap();
    let (body, code) = out.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

#[test]
fn the_api_needs_a_token_and_a_reader_token_only_reads() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base = format!("http://{}", server.api);
    let admin = std::fs::read_to_string(&server.token_file).unwrap().trim().to_string();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&server.token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the local admin token is the owner's only");
    }
    // No token, a wrong one, junk: refused, for reads and writes, and
    // nothing changes.
    for token in [None, Some("strata_0123456789abcdef_".to_string() + &"0".repeat(64)), Some("x".into())] {
        let (code, body) = curl("GET", &format!("{base}/api/v1/volumes"), token.as_deref());
        assert_eq!(code, 401, "{body}");
        let (code, _) = curl("DELETE", &format!("{base}/api/v1/volumes/default"), token.as_deref());
        assert_eq!(code, 401);
        let (code, _) = curl("GET", &format!("{base}/metrics"), token.as_deref());
        assert_eq!(code, 401);
    }
    let (code, body) = curl("GET", &format!("{base}/api/v1/volumes"), Some(&admin));
    assert!(code == 200 && body.contains("default"), "{code} {body}");

    // A reader token, made with the CLI: reads, and is refused writes.
    let token_cli = |args: &[&str]| {
        Command::new(BIN)
            .arg("token")
            .args(args)
            .args(["--api", &base, "--token-file", &server.token_file])
            .output()
            .unwrap()
    };
    let made = token_cli(&["create", "--role", "reader", "--name", "dashboard"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let reader = String::from_utf8(made.stdout).unwrap().trim().to_string();
    assert!(reader.starts_with("strata_"), "{reader}");
    let (code, _) = curl("GET", &format!("{base}/api/v1/volumes"), Some(&reader));
    assert_eq!(code, 200);
    let (code, _) = curl("GET", &format!("{base}/metrics"), Some(&reader));
    assert_eq!(code, 200);
    let (code, body) = curl("DELETE", &format!("{base}/api/v1/volumes/default"), Some(&reader));
    assert!(code == 403 && body.contains("may only read"), "{code} {body}");
    let (code, _) = curl("GET", &format!("{base}/api/v1/tokens"), Some(&reader));
    assert_eq!(code, 403, "a reader cannot see the tokens");
    let (code, body) = curl("GET", &format!("{base}/api/v1/volumes/default"), Some(&admin));
    assert_eq!(code, 200, "still there: {body}");

    // Listed without its secret, then revoked: refused from then on.
    let listed = token_cli(&["list", "--json"]);
    let text = String::from_utf8(listed.stdout).unwrap();
    let id = &reader["strata_".len().."strata_".len() + 16];
    assert!(text.contains(id) && text.contains("dashboard") && !text.contains(&reader[24..]), "{text}");
    assert!(token_cli(&["revoke", id]).status.success());
    let (code, _) = curl("GET", &format!("{base}/api/v1/volumes"), Some(&reader));
    assert_eq!(code, 401, "revoked");

    // The CLI without a token says how to get one.
    let out = Command::new(BIN)
        .current_dir(dir.path().parent().unwrap())
        .env_remove("STRATA_TOKEN_FILE")
        .args(["volume", "list", "--api", &base])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("needs a token") && err.contains("api-token"), "{err}");
}

#[test]
fn the_api_refuses_a_routable_address_unless_told() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--data-dir", &dir.path().display().to_string(), "--drive", "mem:64M"])
        .args(["--listen", "127.0.0.1:0", "--discovery", "127.0.0.1:0", "--http", "0.0.0.0:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--allow-remote-api"), "{err}");
}

/// `strata host add/set/list/remove` on a live node: a host given a
/// DH-HMAC-CHAP secret must authenticate (strata's initiator with the key
/// printed by `--dhchap-secret generate` does verified I/O; without it, or
/// with a stale one after a rotation, it is refused), the keys survive a
/// restart, a listing never shows them, and a reader token may list but
/// not change hosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_with_keys_must_authenticate_and_keep_their_keys_across_restarts() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base = format!("http://{}", server.api);
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000dcaf0";
    let token_file = server.token_file.clone();
    let host_cli = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("host")
            .args(args)
            .args(["--api", &base, "--token-file", &token_file])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, out, err) = host_cli(&["add", hostnqn, "--dhchap-secret", "generate"]);
    assert!(ok, "{err}");
    let key = out.lines().find_map(|l| l.strip_prefix("dhchap-secret: ")).expect("the generated key").to_string();
    let secret = strata_host::DhchapSecret::parse(&key).expect("a DHHC-1 key");
    let cfg = |s: Option<&strata_host::DhchapSecret>| HostConfig {
        hostnqn: hostnqn.into(),
        io_queues: 2,
        dhchap_secret: s.cloned(),
        ..HostConfig::default()
    };
    let c = Controller::connect(server.io, NQN, &cfg(Some(&secret))).await.expect("the right key");
    c.write(1, 3, pattern(3, 1), true).await.unwrap();
    assert!(c.read(1, 3, 1).await.unwrap()[..] == pattern(3, 1)[..]);
    let refused = Controller::connect(server.io, NQN, &cfg(None)).await;
    assert!(matches!(refused, Err(strata_host::HostError::Authentication(_))), "{refused:?}");

    let (ok, listed, _) = host_cli(&["list", "--json"]);
    assert!(ok && listed.contains(hostnqn) && listed.contains("\"dhchap\": true"), "{listed}");
    assert!(!listed.contains(&key[10..40]), "the key is never shown back: {listed}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("meta.redb")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the store holding the keys is the owner's only");
    }

    // A reader lists hosts but cannot change them.
    let made = Command::new(BIN)
        .args([
            "token",
            "create",
            "--role",
            "reader",
            "--name",
            "r",
            "--api",
            &base,
            "--token-file",
            &server.token_file,
        ])
        .output()
        .unwrap();
    let reader = String::from_utf8(made.stdout).unwrap().trim().to_string();
    assert_eq!(curl("GET", &format!("{base}/api/v1/hosts"), Some(&reader)).0, 200);
    assert_eq!(curl("DELETE", &format!("{base}/api/v1/hosts/{hostnqn}"), Some(&reader)).0, 403);

    // Bad keys are refused with the option named, and change nothing.
    let (ok, _, err) = host_cli(&["set", hostnqn, "--dhchap-secret", "DHHC-1:01:bm9wZQ==:"]);
    assert!(!ok && err.contains("--dhchap-secret"), "{err}");

    // The key survives a restart; then a rotation: the connected
    // controller keeps working, the old key is refused, the new one works.
    drop(c);
    let server = server.restart();
    let c = Controller::connect(server.io, NQN, &cfg(Some(&secret))).await.expect("the key after a restart");
    assert!(c.read(1, 3, 1).await.unwrap()[..] == pattern(3, 1)[..], "FUA data after a restart");
    assert!(Controller::connect(server.io, NQN, &cfg(None)).await.is_err(), "still enforced after a restart");
    let new = strata_host::DhchapSecret::generate(None);
    let (ok, _, err) = host_cli(&["set", hostnqn, "--dhchap-secret", &new.to_interchange()]);
    assert!(ok, "{err}");
    c.write(1, 4, pattern(4, 1), false).await.expect("connected through a rotation");
    assert!(Controller::connect(server.io, NQN, &cfg(Some(&secret))).await.is_err(), "the old key");
    let c2 = Controller::connect(server.io, NQN, &cfg(Some(&new))).await.expect("the new key");
    assert!(c2.read(1, 4, 1).await.unwrap()[..] == pattern(4, 1)[..]);

    // Removed: the host connects without authenticating again.
    let (ok, _, err) = host_cli(&["remove", hostnqn]);
    assert!(ok, "{err}");
    Controller::connect(server.io, NQN, &cfg(None)).await.expect("no keys any more");
}

/// The audit log: refused and accepted API changes and a host's connect,
/// refused connect and authentication results are recorded, `strata audit
/// verify` passes on the untouched log, and fails once a record is edited
/// (and once records are cut off its end, after a restart too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_access_and_changes_and_detects_tampering() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base = format!("http://{}", server.api);
    let audit = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("audit")
            .args(args)
            .args(["--api", &base, "--token-file", &server.token_file])
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    // A refused API call, an accepted change, a host with a key that
    // connects once without it and once with it.
    assert_eq!(curl("DELETE", &format!("{base}/api/v1/volumes/default"), None).0, 401);
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000a0d17";
    let key = strata_host::DhchapSecret::generate(None);
    let out = Command::new(BIN)
        .args(["host", "add", hostnqn, "--dhchap-secret", &key.to_interchange(), "--api", &base])
        .args(["--token-file", &server.token_file])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = |k: Option<&strata_host::DhchapSecret>| HostConfig {
        hostnqn: hostnqn.into(),
        dhchap_secret: k.cloned(),
        ..HostConfig::default()
    };
    assert!(Controller::connect(server.io, NQN, &cfg(None)).await.is_err());
    let c = Controller::connect(server.io, NQN, &cfg(Some(&key))).await.expect("with the key");
    drop(c);
    let wanted = ["\"api\"", "\"auth-failed\"", "\"auth-ok\"", "\"connect\""];
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (ok, text) = audit(&["tail", "-n", "100", "--json"]);
        assert!(ok);
        if wanted.iter().all(|w| text.contains(w)) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for w in wanted {
        assert!(text.contains(w), "no {w} record in:\n{text}");
    }
    assert!(text.contains("DELETE /api/v1/volumes/default") && text.contains("\"401\""), "{text}");
    assert!(text.contains("POST /api/v1/hosts") && text.contains(hostnqn), "{text}");
    assert!(!text.contains(&key.to_interchange()), "a key in the audit log");
    let (ok, out) = audit(&["verify"]);
    assert!(ok, "{out}");
    assert!(out.contains("intact"), "{out}");

    // Edit one record's outcome: verify fails and names it.
    let path = dir.path().join("audit.log");
    let log = std::fs::read_to_string(&path).unwrap();
    let edited = log.replacen("\"401\"", "\"200\"", 1);
    assert_ne!(edited, log);
    std::fs::write(&path, &edited).unwrap();
    let (ok, out) = audit(&["verify"]);
    assert!(!ok && out.contains("edited"), "{out}");
    // Put it back, cut the last record off, restart: still caught.
    std::fs::write(&path, &log).unwrap();
    assert!(audit(&["verify"]).0);
    drop(server);
    let cut = &log[..log[..log.len() - 1].rfind('\n').unwrap() + 1];
    std::fs::write(&path, cut).unwrap();
    let server = Server::start(dir.path(), &[]);
    let out = Command::new(BIN)
        .args([
            "audit",
            "verify",
            "--json",
            "--api",
            &format!("http://{}", server.api),
            "--token-file",
            &server.token_file,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("cut off the end"), "{text}");
}

/// Volumes that share a subsystem are masked to their own hosts: each
/// host sees only its volume's namespace, and a host on neither list is
/// refused at the door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_sharing_a_subsystem_are_masked_to_their_hosts() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let shared = "nqn.2026-11.io.strata:shared";
    let a = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-0000000000aa";
    let b = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-0000000000bb";
    let mut nsid = std::collections::HashMap::new();
    for (name, host) in [("ma", a), ("mb", b)] {
        let out = server.cli(&["create", name, "--size", "16M", "--nqn", shared, "--allow-host", host, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        nsid.insert(host, v["nsid"].as_u64().unwrap() as u32);
    }
    for host in [a, b] {
        let cfg = HostConfig { hostnqn: host.into(), ..HostConfig::default() };
        let c = Controller::connect(server.io, shared, &cfg).await.expect("an allowed host");
        assert_eq!(c.active_namespaces().await.unwrap(), vec![nsid[host]], "{host} sees its own volume only");
        c.write(nsid[host], 0, pattern(0, 1), true).await.unwrap();
    }
    let intruder = HostConfig::default();
    assert!(Controller::connect(server.io, shared, &intruder).await.is_err(), "a host on neither list");
}

/// The HTTP API over TLS: the CLI reaches it at `https://` when it trusts
/// the certificate (`STRATA_API_CA`), refuses it otherwise, plain HTTP to
/// it gets nowhere, and a key file others may read is refused at start.
#[test]
fn the_api_over_tls_is_reached_only_through_a_trusted_certificate() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::self_signed(dir.path(), "api");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let data = dir.path().join("data");
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let tls_args = ["--http-tls-cert", c.as_str(), "--http-tls-key", k.as_str()];
    let refused = Command::new(BIN)
        .args(["serve", "--data-dir", &data.display().to_string(), "--drive", "mem:64M"])
        .args(["--listen", "127.0.0.1:0", "--discovery", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(tls_args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("readable by others"), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start(&data, &tls_args);
    let list = |scheme: &str, ca: Option<&std::path::Path>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "volume",
            "list",
            "--api",
            &format!("{scheme}://{}", server.api),
            "--token-file",
            &server.token_file,
        ]);
        cmd.env_remove("STRATA_API_CA");
        if let Some(ca) = ca {
            cmd.env("STRATA_API_CA", ca);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, out, err) = list("https", Some(&cert));
    assert!(ok && out.contains("default"), "{out}{err}");
    let (ok, _, err) = list("https", None);
    assert!(!ok && err.contains("STRATA_API_CA"), "an untrusted certificate was accepted: {err}");
    let (ok, _, err) = list("http", Some(&cert));
    assert!(!ok, "plain HTTP reached the HTTPS API: {err}");
}

/// `GET /metrics` with the admin token, parsed by the Prometheus client's
/// own parser (`tests/metrics_parse.py`, which also checks the histograms'
/// and counters' conventions): every sample, by name.
fn scrape(server: &Server) -> serde_json::Map<String, serde_json::Value> {
    let token = std::fs::read_to_string(&server.token_file).unwrap();
    let (code, text) = curl("GET", &format!("http://{}/metrics", server.api), Some(token.trim()));
    assert_eq!(code, 200, "{text}");
    crate::parse_metrics(&text)
}

use crate::sample;

/// A known workload (100 4 KiB writes, 50 8 KiB reads, one read past the
/// end, 3 flushes) shows up exactly in the volume's and the host's
/// families, the latency histograms count every command, and
/// `--no-io-metrics` records none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposition_counts_a_known_workload_exactly() {
    let _group = strata_testkit::group(module_path!());
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0000-metrics-test";
    let cfg = HostConfig { hostnqn: HOST.into(), io_queues: 2, ..HostConfig::default() };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ctrl = Controller::connect(server.io, NQN, &cfg).await.expect("connect");
    for i in 0..100u64 {
        ctrl.write(1, i * 3, pattern(i, 1), false).await.unwrap();
    }
    for i in 0..50u64 {
        assert_eq!(ctrl.read(1, i * 2, 2).await.unwrap().len(), 2 * BS);
    }
    // 64 MiB of 4 KiB blocks: block 16384 is past the end.
    assert!(ctrl.read(1, 16384, 1).await.is_err());
    for _ in 0..3 {
        ctrl.flush(1).await.unwrap();
    }
    let m = scrape(&server);
    for (what, name) in [("volume", "default"), ("host", HOST)] {
        let total = format!("strata_{what}_io_total");
        let bytes = format!("strata_{what}_io_bytes_total");
        let count = format!("strata_{what}_io_latency_seconds_count");
        let bucket = format!("strata_{what}_io_latency_seconds_bucket");
        for (op, n, b) in [("write", 100.0, 100.0 * 4096.0), ("read", 51.0, 50.0 * 8192.0), ("flush", 3.0, 0.0)] {
            let l = [(what, name), ("op", op)];
            assert_eq!(sample(&m, &total, &l), n, "{what} {op} commands");
            assert_eq!(sample(&m, &bytes, &l), b, "{what} {op} bytes");
            assert_eq!(sample(&m, &count, &l), n, "{what} {op} histogram count");
            assert_eq!(sample(&m, &bucket, &[(what, name), ("op", op), ("le", "+Inf")]), n);
            // Loopback and a file drive: every command under 10 s.
            assert_eq!(sample(&m, &bucket, &[(what, name), ("op", op), ("le", "10")]), n);
        }
        assert_eq!(sample(&m, &total, &[(what, name), ("op", "other")]), 0.0);
        let errors = format!("strata_{what}_io_errors_total");
        assert_eq!(sample(&m, &errors, &[(what, name), ("status", "0x080")]), 1.0, "LBA out of range");
        assert_eq!(sample(&m, &format!("strata_{what}_io_in_flight"), &[(what, name)]), 0.0);
    }
    assert_eq!(sample(&m, "strata_host_controllers", &[("host", HOST)]), 1.0);
    assert_eq!(sample(&m, "strata_host_connections", &[("host", HOST)]), 3.0, "admin + 2 I/O queues");
    assert_eq!(sample(&m, "strata_volume_size_bytes", &[("volume", "default")]), 64.0 * 1024.0 * 1024.0);
    assert!(m.contains_key("strata_target_keep_alive_expiries_total"));
    // Every series the sample Grafana dashboard and alert rules ask for
    // is one this node exports (a renamed family breaks them silently).
    for file in ["dist/grafana/strata.json", "dist/prometheus/strata-alerts.yml"] {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_string() + file).unwrap();
        let mut names: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("strata_") && !w.starts_with("strata_pool_"))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() >= 8, "{file}: {names:?}");
        for n in names {
            assert!(m.contains_key(n), "{file} asks for {n}, which /metrics does not export");
        }
    }
    drop(ctrl);
    drop(server);

    // Recording off: the same families, and no series for the volume.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--no-io-metrics"]);
    let ctrl = Controller::connect(server.io, NQN, &cfg).await.expect("connect");
    ctrl.write(1, 0, pattern(0, 1), false).await.unwrap();
    let m = scrape(&server);
    assert!(!m.contains_key("strata_volume_io_total"), "recorded with --no-io-metrics");
    assert_eq!(sample(&m, "strata_host_connections", &[("host", HOST)]), 3.0);
}

/// `strata events` against a live node: a host's connect and disconnect,
/// a refused connect with its reason, and a volume made and deleted
/// through the CLI arrive on a follower as they happen (server-sent
/// events) and are listed afterwards in order, numbered without gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tell_connects_refusals_and_volume_changes_as_they_happen() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let api = format!("http://{}", server.api);
    let events = |extra: &[&str]| {
        let mut c = Command::new(BIN);
        c.arg("events").args(["--api", &api, "--token-file", &server.token_file]).args(extra);
        c
    };
    let mut follower =
        events(&["--json", "--follow", "--last", "0"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).expect("a JSON event per line")).is_err() {
                return;
            }
        }
    });
    let next = |kind: &str| loop {
        let e = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no {kind} event within 20 s"));
        if e["kind"] == kind {
            return e;
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // the follower is subscribed

    let cfg = HostConfig { io_queues: 1, ..HostConfig::default() };
    let ctrl = connect(server.io).await;
    let e = next("host.connected");
    assert_eq!(e["severity"], "info");
    assert!(e["message"].as_str().unwrap().contains(NQN), "{e}");
    drop(ctrl);
    let e = next("host.disconnected");
    assert!(e["reason"].as_str().unwrap().contains("removed"), "{e}");

    let refused = Controller::connect(server.io, "nqn.2026-11.io.strata:no-such-volume", &cfg).await;
    assert!(refused.is_err());
    let e = next("host.refused");
    assert_eq!(e["severity"], "warning");
    assert_eq!(e["host"], cfg.hostnqn.as_str());
    assert!(!e["reason"].as_str().unwrap_or("").is_empty(), "a refusal says why: {e}");

    assert!(server.cli(&["create", "ev1", "--size", "16M"]).status.success());
    let e = next("volume.created");
    assert_eq!(e["volume"], "ev1");
    assert!(server.cli(&["delete", "ev1"]).status.success());
    assert_eq!(next("volume.deleted")["volume"], "ev1");
    let _ = follower.kill();
    let _ = follower.wait();

    // Listed afterwards: the same events, oldest first, numbered 1, 2, ...
    let out = events(&["--json", "--last", "100"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let seqs: Vec<u64> = listed.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "numbered without gaps from 1");
    let kinds: Vec<&str> = listed.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in ["host.connected", "host.disconnected", "host.refused", "volume.created", "volume.deleted"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(pos("host.connected") < pos("host.disconnected") && pos("volume.created") < pos("volume.deleted"));
    // A person's view: one line each, no JSON.
    let out = events(&[]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.contains("volume.deleted") && l.contains("volume ev1 deleted")), "{text}");
    assert!(!text.contains('{'), "no JSON in the view for people: {text}");
}
