//! Crash semantics (issue 25): after a crash a key reads as its newest
//! acknowledged value or a miss, never an older one.
//!
//! The bug these pin down: `SET k v1`, `KV.FLUSH ALL`, `SET k v2`
//! (acknowledged), kill -9, restart: `GET k` returned v1, in 5 of 5
//! trials; `DEL k` and `KV.DELNS` the same (the deleted value came back).
//! The tombstone that deletes v1 sat in the log's write buffer when the
//! overwrite was acknowledged. Now a change that makes a log record stale
//! waits until what invalidates it is on the device.
//!
//! Two ways to crash:
//! - in process, a power loss: [`Volatile`] keeps writes in a volatile
//!   cache until a flush, and at the crash lands a random subset of what
//!   was not flushed (some writes whole, some torn at a block), over both
//!   log tiers; many rounds of random overwrites, deletes, namespace
//!   deletions and `FLUSHALL`s against a model of what was acknowledged;
//! - a real server in a child process (this test binary run again, with
//!   [`CHILD_ENV`] naming its directory) on a file, killed with SIGKILL
//!   right after the acknowledgement, many times.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata_block::{BlockDevice, IoBuf, MemDevice};
use strata_kv::client::Client;
use strata_kv::resp::Reply;
use strata_kv::{Admit, KvConfig, KvStore, PutOpts, Tiers};
use strata_rand::Rng;

/// A block device with a volatile write cache: a write is readable at
/// once and durable after the next flush. [`Volatile::crash`] is what a
/// power loss leaves.
struct Volatile {
    /// What the device reads: every write applied.
    now: MemDevice,
    /// What a power loss keeps: flushed writes only.
    durable: Mutex<Vec<u8>>,
    /// Writes since the last flush, in order: (byte offset, bytes).
    cached: Mutex<Vec<(usize, Vec<u8>)>>,
}

impl Volatile {
    fn new(bytes: u64) -> Arc<Volatile> {
        Arc::new(Volatile {
            now: MemDevice::new(4096, bytes / 4096),
            durable: Mutex::new(vec![0; bytes as usize]),
            cached: Mutex::new(Vec::new()),
        })
    }

    /// The device after a power loss now: the flushed image, plus each
    /// cached write with even odds, whole or torn at a block boundary
    /// (a drive writes blocks atomically, a multi-block write need not
    /// land whole).
    fn crash(&self, rng: &mut Rng) -> Arc<Volatile> {
        let mut img = self.durable.lock().unwrap().clone();
        for (at, bytes) in self.cached.lock().unwrap().iter() {
            if rng.chance(50) {
                let blocks = bytes.len() / 4096;
                let keep = if rng.chance(75) { blocks } else { rng.below(blocks as u64 + 1) as usize };
                img[*at..*at + keep * 4096].copy_from_slice(&bytes[..keep * 4096]);
            }
        }
        let dev = Volatile::new(img.len() as u64);
        *dev.durable.lock().unwrap() = img.clone();
        // MemDevice futures complete on their first poll.
        let fut = dev.now.write(0, IoBuf::from_slice(&img), false);
        let (_, r) = futures_util::FutureExt::now_or_never(fut).expect("a MemDevice write completes at once");
        r.unwrap();
        dev
    }
}

impl BlockDevice for Volatile {
    fn geometry(&self) -> strata_block::Geometry {
        self.now.geometry()
    }
    fn usage(&self) -> strata_block::DeviceUsage {
        self.now.usage()
    }
    fn read(
        &self,
        lba: u64,
        buf: IoBuf,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        self.now.read(lba, buf)
    }
    fn write(
        &self,
        lba: u64,
        buf: IoBuf,
        fua: bool,
    ) -> strata_block::BlockFuture<'_, (IoBuf, Result<(), strata_block::BlockError>)> {
        let at = lba as usize * 4096;
        if fua {
            self.durable.lock().unwrap()[at..at + buf.len()].copy_from_slice(&buf);
        } else {
            self.cached.lock().unwrap().push((at, buf.to_vec()));
        }
        self.now.write(lba, buf, fua)
    }
    fn write_zeroes(
        &self,
        lba: u64,
        blocks: u64,
        d: bool,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.cached.lock().unwrap().push((lba as usize * 4096, vec![0; blocks as usize * 4096]));
        self.now.write_zeroes(lba, blocks, d)
    }
    fn deallocate(
        &self,
        ranges: Vec<(u64, u64)>,
    ) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        self.now.deallocate(ranges)
    }
    fn flush(&self) -> strata_block::BlockFuture<'_, Result<(), strata_block::BlockError>> {
        let cached = std::mem::take(&mut *self.cached.lock().unwrap());
        let mut img = self.durable.lock().unwrap();
        for (at, bytes) in cached {
            img[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Box::pin(async { Ok(()) })
    }
}

fn cfg() -> KvConfig {
    KvConfig { dram_bytes: 96 << 10, admit: Admit::All, segment_bytes: 128 << 10 }
}

async fn open(ssd: &Arc<Volatile>, pool: &Arc<Volatile>) -> Arc<KvStore> {
    let (ssd, pool): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (ssd.clone(), pool.clone());
    let tiers = Tiers { ssd: Some(ssd), pool: Some(pool), peers: Vec::new() };
    KvStore::open_tiers(cfg(), tiers, Box::new(strata_kv::store::unix_ms)).await.unwrap()
}

/// A value naming its namespace, key and write.
fn value(ns: u8, key: u64, write: u64, len: usize) -> Bytes {
    let tag = format!("ns{ns}/k{key}/w{write}/");
    Bytes::from(tag.bytes().cycle().take(len.max(tag.len())).collect::<Vec<u8>>())
}

const NAMESPACES: [&[u8]; 2] = [b"a", b"b"];
const KEYS: u64 = 12;

/// What was acknowledged: each key's newest value (`None`: deleted).
type Model = HashMap<(u8, u64), Option<Bytes>>;

/// Random changes, each acknowledged before the next; some flushes, so
/// that old values are on the logs when they are overwritten.
async fn random_changes(s: &KvStore, rng: &mut Rng, model: &mut Model, write: &mut u64) {
    for _ in 0..rng.range(10, 120) {
        let ns = rng.below(2) as u8;
        let key = rng.below(KEYS);
        let name = format!("k{key}").into_bytes();
        match rng.below(100) {
            0..=54 => {
                *write += 1;
                let v = value(ns, key, *write, rng.range(100, 9000) as usize);
                s.put(NAMESPACES[ns as usize], &name, v.clone(), PutOpts::default()).await.unwrap();
                model.insert((ns, key), Some(v));
            }
            55..=69 => {
                s.delete(NAMESPACES[ns as usize], &name).await.unwrap();
                model.insert((ns, key), None);
            }
            70..=73 => {
                s.delete_namespace(NAMESPACES[ns as usize]).await.unwrap();
                for k in 0..KEYS {
                    model.insert((ns, k), None);
                }
            }
            74..=75 => {
                s.delete_all().await.unwrap();
                for v in model.values_mut() {
                    *v = None;
                }
            }
            76..=81 => {
                // An expiry far away, or none: the value stays.
                let at = if rng.chance(50) { strata_kv::store::unix_ms() + 3_600_000 } else { 0 };
                s.set_expiry(NAMESPACES[ns as usize], &name, at).await.unwrap();
            }
            82..=89 => s.flush(rng.chance(50)).await.unwrap(),
            _ => {
                // A read promotes a block back into DRAM (it keeps its log copies).
                s.get(NAMESPACES[ns as usize], &name).await.unwrap();
            }
        }
    }
}

/// Every key reads as its newest acknowledged value or a miss.
async fn check(s: &KvStore, model: &Model, round: u64) {
    s.check_invariants();
    for ns in 0..2u8 {
        for key in 0..KEYS {
            let got = s.get(NAMESPACES[ns as usize], format!("k{key}").as_bytes()).await.unwrap();
            let Some(got) = got else { continue };
            let want = model.get(&(ns, key)).cloned().flatten();
            assert_eq!(
                Some(&got),
                want.as_ref(),
                "round {round}: ns{ns}/k{key} read {:?}, newest acknowledged {:?}",
                String::from_utf8_lossy(&got[..got.len().min(24)]),
                want.as_ref().map(|w| String::from_utf8_lossy(&w[..w.len().min(24)]).into_owned())
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_power_loss_every_key_reads_as_its_newest_acknowledged_value_or_a_miss() {
    for round in 0..60u64 {
        let mut rng = Rng::new(0x25_0000 + round);
        let (mut ssd, mut pool) = (Volatile::new(1 << 20), Volatile::new(4 << 20));
        let mut model = Model::new();
        let mut write = 0;
        // Three lives: changes, a power loss, recovery; twice over, so
        // that what a recovery owes is tested too.
        for _ in 0..3 {
            let s = open(&ssd, &pool).await;
            check(&s, &model, round).await;
            random_changes(&s, &mut rng, &mut model, &mut write).await;
            let (ssd2, pool2) = (ssd.crash(&mut rng), pool.crash(&mut rng));
            drop(s);
            (ssd, pool) = (ssd2, pool2);
        }
        let s = open(&ssd, &pool).await;
        check(&s, &model, round).await;
    }
}

#[tokio::test]
async fn an_overwrite_a_delete_or_a_namespace_deletion_of_a_flushed_key_survives_a_power_loss() {
    // The reported sequence, with nothing unflushed landing and with all
    // of it landing: the old value never comes back.
    type Change = fn(&KvStore) -> futures_util::future::BoxFuture<'_, ()>;
    let changes: [(&str, Change, Option<&[u8]>); 4] = [
        ("overwrite", |s| Box::pin(async move { put(s, b"v2").await }), Some(b"v2")),
        ("delete", |s| Box::pin(async move { assert!(s.delete(b"a", b"k").await.unwrap()) }), None),
        ("delete namespace", |s| Box::pin(async move { assert_eq!(s.delete_namespace(b"a").await.unwrap(), 1) }), None),
        ("flushall", |s| Box::pin(async move { assert_eq!(s.delete_all().await.unwrap(), 1) }), None),
    ];
    async fn put(s: &KvStore, v: &[u8]) {
        s.put(b"a", b"k", Bytes::copy_from_slice(v), PutOpts::default()).await.unwrap();
    }
    for (what, change, want) in changes {
        for lands in [0, 100] {
            let (ssd, pool) = (Volatile::new(1 << 20), Volatile::new(4 << 20));
            let s = open(&ssd, &pool).await;
            put(&s, b"v1").await;
            s.flush(true).await.unwrap();
            change(&s).await;
            let mut rng = Rng::new(lands);
            let crash = |d: &Volatile, rng: &mut Rng| {
                if lands == 0 {
                    d.cached.lock().unwrap().clear();
                }
                d.crash(rng)
            };
            let (ssd, pool) = (crash(&ssd, &mut rng), crash(&pool, &mut rng));
            drop(s);
            let s = open(&ssd, &pool).await;
            let got = s.get(b"a", b"k").await.unwrap();
            assert!(got.is_none() || got.as_deref() == want, "{what}, then a power loss: {got:?}");
        }
    }
}

/// The environment variable that makes [`kv_server_child`] serve: the
/// directory of its SSD file.
const CHILD_ENV: &str = "STRATA_KV_CRASH_CHILD_DIR";

/// Not a test of its own: the server the kill -9 tests run in a child
/// process (this binary again, with [`CHILD_ENV`] set). Prints its port.
#[test]
#[ignore = "the kill -9 tests run it in a child process"]
fn kv_server_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let path = Path::new(&dir).join("ssd.log");
        let dev = strata_store::RawDevice::open(&path, Some(8 << 20), true).unwrap();
        let kv = KvConfig { dram_bytes: 4 << 20, admit: Admit::All, segment_bytes: 1 << 20 };
        let store = KvStore::open(kv, Some(dev as Arc<dyn BlockDevice>)).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("KV-CHILD-PORT {}", listener.local_addr().unwrap().port());
        strata_kv::server::serve(store, listener, Default::default(), std::future::pending()).await.unwrap();
    });
}

/// A server in a child process on `dir`'s SSD file.
struct ChildServer {
    child: Child,
    port: u16,
}

impl ChildServer {
    fn start(dir: &Path) -> ChildServer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash::kv_server_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("the child ended before it served").unwrap();
            // The harness prints the test's name on the same line.
            if let Some((_, p)) = line.split_once("KV-CHILD-PORT ") {
                break p.trim().parse().unwrap();
            }
        };
        // Keep draining its stdout so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ChildServer { child, port }
    }

    async fn client(&self) -> Client {
        Client::connect(("127.0.0.1", self.port)).await.unwrap()
    }

    /// SIGKILL, and reaped.
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

async fn call(c: &mut Client, args: &[&[u8]]) -> Reply {
    c.call(args).await.unwrap()
}

/// `+OK` (the client reads it as a simple string).
fn ok(r: Reply) {
    assert!(matches!(&r, Reply::Simple(s) if s == "OK") || r == Reply::Ok, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_an_acknowledged_overwrite_or_delete_never_brings_back_the_old_value() {
    let dir = tempfile::tempdir().unwrap();
    // (what, the change after v1 is flushed, what GET may read after it)
    type Change<'a> = (&'a str, &'a [&'a [&'a [u8]]], Option<&'a [u8]>);
    let changes: [Change; 4] = [
        ("SET", &[&[b"SET", b"k", b"v2"]], Some(b"v2")),
        ("DEL", &[&[b"DEL", b"k"]], None),
        ("KV.DELNS", &[&[b"KV.DELNS", b""]], None),
        ("FLUSHALL", &[&[b"FLUSHALL"]], None),
    ];
    for round in 0..6 {
        for (what, change, want) in changes {
            let kv = ChildServer::start(dir.path());
            let mut c = kv.client().await;
            let v1 = format!("v1-{round}-{what}");
            ok(call(&mut c, &[b"SET", b"k", v1.as_bytes()]).await);
            ok(call(&mut c, &[b"KV.FLUSH", b"ALL"]).await);
            for args in change {
                let r = call(&mut c, args).await;
                assert!(!matches!(r, Reply::Error(_)), "{what}: {r:?}");
            }
            kv.kill9();
            let kv = ChildServer::start(dir.path());
            let mut c = kv.client().await;
            let got = c.get(b"k").await.unwrap();
            assert!(
                got.is_none() || got.as_deref() == want,
                "round {round}: {what} acknowledged, kill -9, restart: GET k read {got:?}"
            );
            // The next round starts from nothing.
            ok(call(&mut c, &[b"FLUSHALL"]).await);
            kv.kill9();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_of_random_changes_never_yields_an_older_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(25);
    let mut model: HashMap<u64, Option<Vec<u8>>> = HashMap::new();
    let mut write = 0u64;
    for round in 0..12 {
        let kv = ChildServer::start(dir.path());
        let mut c = kv.client().await;
        for key in 0..KEYS {
            let got = c.get(format!("k{key}").as_bytes()).await.unwrap();
            if let Some(got) = got {
                let want = model.get(&key).cloned().flatten();
                assert_eq!(Some(&got[..]), want.as_deref(), "round {round}: k{key} is older than acknowledged");
            }
        }
        for _ in 0..rng.range(5, 60) {
            let key = rng.below(KEYS);
            let name = format!("k{key}");
            match rng.below(10) {
                0..=5 => {
                    write += 1;
                    let v = value(0, key, write, rng.range(10, 20_000) as usize).to_vec();
                    ok(call(&mut c, &[b"SET", name.as_bytes(), &v]).await);
                    model.insert(key, Some(v));
                }
                6..=7 => {
                    assert!(matches!(call(&mut c, &[b"DEL", name.as_bytes()]).await, Reply::Int(_)));
                    model.insert(key, None);
                }
                8 => ok(call(&mut c, &[b"KV.FLUSH", b"ALL"]).await),
                _ => {
                    assert!(matches!(call(&mut c, &[b"KV.DELNS", b""]).await, Reply::Int(_)));
                    model.clear();
                }
            }
        }
        kv.kill9();
    }
}
