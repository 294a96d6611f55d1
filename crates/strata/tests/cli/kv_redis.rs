//! `strata kv serve` as a process, driven by the real `redis-cli` and
//! `redis-benchmark` (Debian's redis-tools; CI installs them) and by
//! strata's own client: the Redis commands users type, a short load, and
//! kill -9 with recovery of everything flushed.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_kv::client::Client;
use strata_testkit::Proc;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn tool(name: &str) -> String {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().expect("sh");
    assert!(found.status.success(), "{name} is not installed: apt-get install redis-tools (CI's .ci/run does)");
    name.to_string()
}

struct Kv {
    proc: Proc,
    addr: SocketAddr,
}

impl Kv {
    /// Starts `strata kv serve` on a port it picks (port 0: no race with
    /// other tests for a free port) and reads the port from its log.
    fn start(dir: &Path, dram: &str, extra: &[&str]) -> Kv {
        Kv::start_sized(dir, dram, "64M", extra)
    }

    /// As [`Kv::start`], with an SSD tier of `ssd_size`.
    fn start_sized(dir: &Path, dram: &str, ssd_size: &str, extra: &[&str]) -> Kv {
        let ssd = format!("{}:{ssd_size}", dir.join("ssd.log").display());
        let mut args = vec![BIN, "kv", "serve", "--dram", dram, "--ssd", &ssd, "--ssd-segment", "4M"];
        args.extend(["--listen", "127.0.0.1:0"]);
        args.extend(extra);
        let mut proc = Proc::spawn("kv", args, dir.join("kv.log"));
        // The log is appended across starts: read this start's part.
        let listening = proc.wait_until("serving", Duration::from_secs(60), |log| {
            let this_start = log.rsplit("===== kv: start #").next().unwrap_or(log);
            this_start
                .lines()
                .find_map(|l| l.split_once("serving (RESP2/RESP3) on ").and_then(|(_, a)| a.split_whitespace().next()))
                .map(|a| a.parse::<SocketAddr>().expect("address in the log"))
        });
        let (addr, _) = listening.unwrap_or_else(|e| panic!("strata kv serve: {e}"));
        Kv { proc, addr }
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(tool("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.addr.port().to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    fn kill9(mut self) {
        self.proc.kill9();
    }
}

fn block(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j * 7 + (j >> 9)) as u8).collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn redis_cli_drives_the_commands_users_type() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let kv = Kv::start(dir.path(), "4M", &[]);
    assert_eq!(kv.cli(&["PING"]), "PONG");
    assert_eq!(kv.cli(&["SET", "greeting", "hello world"]), "OK");
    assert_eq!(kv.cli(&["GET", "greeting"]), "hello world");
    assert_eq!(kv.cli(&["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(kv.cli(&["MGET", "a", "b", "nope"]), "1\n2"); // nil prints as an empty line
    assert_eq!(kv.cli(&["EXISTS", "a", "b", "nope"]), "2");
    assert_eq!(kv.cli(&["KV.LOOKUP", "a", "b", "nope", "greeting"]), "2");
    assert_eq!(kv.cli(&["DEL", "a", "nope"]), "1");
    assert_eq!(kv.cli(&["SET", "t", "v", "EX", "100"]), "OK");
    let ttl: i64 = kv.cli(&["TTL", "t"]).parse().unwrap();
    assert!((99..=100).contains(&ttl));
    assert_eq!(kv.cli(&["TTL", "greeting"]), "-1");
    assert_eq!(kv.cli(&["SET", "t", "w", "NX"]), "");
    assert_eq!(kv.cli(&["DBSIZE"]), "3");
    assert!(kv.cli(&["NOSUCH"]).starts_with("ERR unknown command"));
    assert_eq!(kv.cli(&["KV.PIN", "HARD", "greeting"]), "1");
    // Namespaces are per connection: redis-cli sends stdin's commands on
    // one.
    let mut child = Command::new(tool("redis-cli"))
        .args(["-p", &kv.addr.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"KV.NS tenant1\nKV.QUOTA tenant1 1000000\nSET greeting other\nGET greeting\nKV.QUOTA tenant1\n")
        .unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    // One entry: 96 bytes of overhead, the namespaced key (1 + 7 + 8) and
    // the value (5).
    let used = 96 + (1 + 7 + 8) + 5;
    assert_eq!(out, format!("OK\nOK\nOK\nother\nkeys\n1\nused_bytes\n{used}\nquota_bytes\n1000000\n"));
    assert_eq!(kv.cli(&["GET", "greeting"]), "hello world", "the default namespace is apart");
    let stats = kv.cli(&["KV.STATS"]);
    assert!(stats.contains("dram_capacity_bytes\n4194304"), "{stats}");
    // Binary-safe values through -x (stdin as the last argument).
    let bin: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let mut child = Command::new(tool("redis-cli"))
        .args(["-p", &kv.addr.port().to_string(), "-x", "SET", "bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bin).unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    let back = rt().block_on(async { Client::connect(kv.addr).await.unwrap().get(b"bin").await.unwrap() });
    assert_eq!(back.as_deref(), Some(&bin[..]));
    // RESP3.
    let hello = kv.cli(&["-3", "HELLO", "3"]);
    assert!(hello.contains("proto") && hello.contains('3'), "{hello}");
}

#[test]
fn redis_benchmark_runs_a_short_load() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let kv = Kv::start(dir.path(), "64M", &[]);
    let port = kv.addr.port().to_string();
    for extra in [&["-d", "4096"][..], &["-d", "4096", "-P", "16"], &["-d", "1048576", "-n", "200"]] {
        // A bound on the run: redis-benchmark spins forever on a server
        // that went away.
        let out = Command::new("timeout")
            .args(["120", &tool("redis-benchmark")])
            .args(["-p", &port, "-t", "set,get,mset", "-n", "2000", "-r", "1000", "-c", "8", "--csv"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        let csv = String::from_utf8_lossy(&out.stdout);
        // "test","rps",...: every test ran with a positive rate.
        let rows: Vec<&str> = csv.lines().skip(1).collect();
        assert_eq!(rows.len(), 3, "{csv}");
        for row in rows {
            let rps: f64 = row.split(',').nth(1).unwrap().trim_matches('"').parse().unwrap();
            assert!(rps > 0.0, "{row}");
        }
    }
    // Every SET and MSET key arrived, and DRAM held its capacity (the
    // 1 MiB values overflow 64 MiB: most left without being reused).
    let stats = kv.cli(&["KV.STATS"]);
    let stat = |name: &str| -> u64 {
        let mut it = stats.lines();
        it.find(|l| *l == name).and_then(|_| it.next()).and_then(|v| v.parse().ok()).unwrap()
    };
    // Two runs of 2,000 SETs and 2,000 MSETs of 10 keys, one of 200 and 200.
    assert_eq!(stat("puts"), 2 * (2000 + 2000 * 10) + (200 + 200 * 10), "{stats}");
    assert!(stat("dram_used_bytes") <= 64 << 20);
    // At most 1,000 distinct keys per run (-r 1000): the SSD tier holds
    // over a tenth of that working set, so `--admit auto` writes every
    // block that leaves DRAM, and turns none away.
    assert!(stat("working_set_bytes") > 0 && stat("working_set_bytes") < 2 << 30, "{stats}");
    assert!(stat("demoted") > 0, "{stats}");
    assert_eq!(stat("not_admitted"), 0, "{stats}");
}

/// Debian's Python with Debian's redis-py (`python3-redis`): the worked
/// example needs nothing else.
fn python_with_redis() -> &'static str {
    const PYTHON: &str = "/usr/bin/python3";
    let found = Command::new(PYTHON).args(["-c", "import redis"]).output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "{PYTHON} cannot import redis: apt-get install python3-redis (CI's .ci/run does)"
    );
    PYTHON
}

fn python_example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python/strata_kv_example.py")
}

#[test]
fn the_python_worked_example_runs_unmodified_against_the_server() {
    let _group = strata_testkit::group(module_path!());
    // docs/kv.md's example: redis-py with pooled connections in a
    // namespace, prefix lookups, leases, pipelines, a 32 MiB value, and
    // LMCache's Redis connector's access pattern over redis.asyncio. It
    // checks every value it reads and exits non-zero on a difference.
    let dir = tempfile::tempdir().unwrap();
    let kv = Kv::start(dir.path(), "256M", &[]);
    let out = Command::new("timeout")
        .args(["300", python_with_redis()])
        .arg(python_example())
        .args(["--host", "127.0.0.1", "--port", &kv.addr.port().to_string()])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the example failed: {text}");
    assert!(text.contains("repeat found 10/10 pages, shared prefix found 6/9"), "{text}");
    assert!(text.lines().last() == Some("ok"), "{text}");
    // What it stored in its namespace it deleted again; the server is
    // still serving.
    assert_eq!(kv.cli(&["DBSIZE"]), "0");
}

#[test]
fn python_and_rust_compute_the_same_reference_keys() {
    let _group = strata_testkit::group(module_path!());
    // A key that differs between processes is a silent zero hit rate:
    // the example's Python implementation of the scheme and the Rust one
    // must agree on an input with every context field, unsorted tags,
    // several pages, a token id at u32::MAX and a trailing partial page.
    let out = Command::new(python_with_redis()).arg(python_example()).arg("--keys-only").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let python: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect();
    let ctx = strata_kv::key::KeyContext {
        model: "meta-llama/Llama-3.1-8B".into(),
        revision: "main".into(),
        dtype: "bf16".into(),
        layout: "NHD".into(),
        page_size: 16,
        tp_rank: 1,
        tp_size: 2,
        tags: vec![("rope".into(), "yarn-4x".into()), ("lora".into(), "adapter-7".into())],
    };
    let mut tokens: Vec<u32> = (0..100u32).map(|i| (i * 7919 + 13) % 128_256).collect();
    tokens.push(u32::MAX);
    let rust = ctx.chain(&tokens);
    assert_eq!(rust.len(), 6, "101 tokens make 6 whole pages of 16");
    assert_eq!(python, rust);
}

#[test]
fn kill_9_keeps_every_flushed_block_and_its_accounting() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let kv = Kv::start(dir.path(), "4M", &["--admit", "all"]);
    // 24 MiB of 64 KiB blocks through 4 MiB of DRAM: most go to the SSD.
    let n = 384u32;
    let stats = rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        put_range(&mut c, 0..n).await;
        assert_eq!(c.call(&["KV.FLUSH"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        c.stats().await.unwrap()
    });
    let get = |k: &str| stats.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap();
    let (ssd_keys, ssd_live) = (get("ssd_keys"), get("ssd_live_bytes"));
    assert!(ssd_keys > 300, "{stats:?}");
    // Blocks written after the flush may or may not survive; none may
    // come back wrong.
    rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        for i in n..n + 20 {
            c.set(format!("blk{i}").as_bytes(), &block(i, 64 << 10)).await.unwrap();
        }
    });
    kv.kill9();
    let kv = Kv::start(dir.path(), "4M", &["--admit", "all"]);
    rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        let st = c.stats().await.unwrap();
        let get = |k: &str| st.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap();
        assert!(get("ssd_keys") >= ssd_keys, "before {ssd_keys} after {st:?}");
        assert!(get("ssd_live_bytes") >= ssd_live);
        assert_eq!(get("keys"), get("ssd_keys"), "after a restart everything is on SSD");
        let mut present = 0;
        for i in 0..n + 20 {
            if let Some(v) = c.get(format!("blk{i}").as_bytes()).await.unwrap() {
                assert_eq!(&v[..], &block(i, 64 << 10)[..], "blk{i} came back wrong");
                present += 1;
            }
        }
        assert!(present as i64 >= ssd_keys, "{present} of {ssd_keys} flushed blocks");
    });
}

/// `strata serve` with its default volume, for the pool tier; killed
/// when dropped (a failing test leaves no target behind).
struct Target {
    proc: Proc,
    io: SocketAddr,
}

impl Target {
    fn start(dir: &Path) -> Target {
        let ports = strata_meta::testing::loopback_ports(3);
        let (io, disc, http) = (ports[0], ports[1], ports[2]);
        let io: SocketAddr = format!("127.0.0.1:{io}").parse().unwrap();
        let drive = format!("{}:256M", dir.join("drive0.img").display());
        let (data, io_arg) = (dir.display().to_string(), io.to_string());
        let (disc, http) = (format!("127.0.0.1:{disc}"), format!("127.0.0.1:{http}"));
        let args = [BIN, "serve", "--data-dir", &data, "--listen", &io_arg, "--discovery", &disc, "--http", &http];
        let args = args.into_iter().chain(["--default-volume-size", "96M", "--drive", &drive]);
        let mut t = Target { proc: Proc::spawn("target", args, dir.join("target.log")), io };
        t.wait_ready();
        t
    }

    fn wait_ready(&mut self) {
        if let Err(e) = self.proc.wait_listening(&[self.io], Duration::from_secs(30)) {
            panic!("strata serve: {e}");
        }
    }

    /// The `--pool` argument for its default volume.
    fn pool(&self) -> String {
        format!("tcp://{}/nqn.2026-11.io.strata:default", self.io)
    }

    fn kill9(&mut self) {
        self.proc.kill9();
    }

    /// Starts it again on the same ports and data.
    fn restart(&mut self) {
        self.proc.restart().expect("restart strata serve");
        self.wait_ready();
    }
}

/// Sets `blk{i}` to [`block`]`(i, 64 KiB)` for each `i` of `r`.
async fn put_range(c: &mut Client, r: std::ops::Range<u32>) {
    for i in r {
        c.set(format!("blk{i}").as_bytes(), &block(i, 64 << 10)).await.unwrap();
    }
}

fn stat(st: &[(String, i64)], k: &str) -> i64 {
    st.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {k} in {st:?}"))
}

#[test]
fn the_pool_tier_is_a_strata_volume_over_nvme_tcp_and_survives_kill_9() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let target_dir = dir.path().join("target");
    std::fs::create_dir_all(&target_dir).unwrap();
    let target = Target::start(&target_dir);
    let pool = target.pool();
    let args = ["--admit", "all", "--pool", pool.as_str()];
    // 32 MiB of 64 KiB blocks through 4 MiB of DRAM and a 12 MiB SSD
    // tier: the SSD ring wraps, the 96 MiB pool volume keeps them all.
    let kv = Kv::start_sized(dir.path(), "4M", "12M", &args);
    let n = 512u32;
    let before = rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        put_range(&mut c, 0..n).await;
        assert_eq!(c.call(&["KV.FLUSH"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        let st = c.stats().await.unwrap();
        assert!(stat(&st, "dropped_ssd") > 100, "the SSD tier wrapped: {st:?}");
        assert!(stat(&st, "pool_keys") > 400, "{st:?}");
        assert!(stat(&st, "pool_live_bytes") <= stat(&st, "pool_capacity_bytes"));
        for i in 0..n {
            let v = c.get(format!("blk{i}").as_bytes()).await.unwrap().unwrap_or_else(|| panic!("blk{i} missing"));
            assert_eq!(&v[..], &block(i, 64 << 10)[..], "blk{i} came back wrong");
        }
        let st = c.stats().await.unwrap();
        assert!(stat(&st, "hits_pool") > 100, "{st:?}");
        // The reads moved blocks through DRAM again: make what they
        // demoted durable, and every block in DRAM too, before the kill.
        assert_eq!(c.call(&["KV.FLUSH", "ALL"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        c.stats().await.unwrap()
    });
    kv.kill9();
    // The flushed blocks come back from both logs, pool copies included.
    let kv = Kv::start_sized(dir.path(), "4M", "12M", &args);
    rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        let st = c.stats().await.unwrap();
        assert!(stat(&st, "pool_keys") >= stat(&before, "pool_keys"), "before {before:?} after {st:?}");
        assert_eq!(stat(&st, "keys"), i64::from(n), "{st:?}");
        for i in (0..n).step_by(3) {
            let v = c.get(format!("blk{i}").as_bytes()).await.unwrap().unwrap_or_else(|| panic!("blk{i} lost"));
            assert_eq!(&v[..], &block(i, 64 << 10)[..], "blk{i} came back wrong");
        }
    });
    drop((kv, target));
}

#[test]
fn two_kv_servers_share_one_pool_volume_and_see_each_others_blocks() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let target_dir = dir.path().join("target");
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&target_dir, &a_dir, &b_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let target = Target::start(&target_dir);
    let pool = target.pool();
    let a = Kv::start(&a_dir, "4M", &["--admit", "all", "--pool", &pool, "--pool-region", "0/2"]);
    let b = Kv::start(&b_dir, "4M", &["--admit", "all", "--pool", &pool, "--pool-region", "1/2"]);
    let keys: Vec<String> = (0..40).map(|i| format!("shared{i}")).collect();
    rt().block_on(async {
        let mut ca = Client::connect(a.addr).await.unwrap();
        for (i, k) in keys.iter().enumerate() {
            ca.set(k.as_bytes(), &block(i as u32, 64 << 10)).await.unwrap();
        }
        // They fit A's DRAM: KV.FLUSH ALL writes them to A's region too.
        assert_eq!(ca.call(&["KV.FLUSH", "ALL"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        // B finds them within a few refreshes, through the real protocol.
        let mut cb = Client::connect(b.addr).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while cb.lookup(&keys).await.unwrap() < keys.len() {
            assert!(Instant::now() < deadline, "B never saw A's blocks: {:?}", cb.stats().await.unwrap());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (i, k) in keys.iter().enumerate() {
            let v = cb.get(k.as_bytes()).await.unwrap().unwrap_or_else(|| panic!("{k} missing on B"));
            assert_eq!(&v[..], &block(i as u32, 64 << 10)[..], "{k} came back wrong on B");
        }
        let st = cb.stats().await.unwrap();
        assert!(st.iter().any(|(n, v)| n == "hits_peer" && *v >= 40), "{st:?}");
    });
    assert_eq!(b.cli(&["EXISTS", "shared0", "nope"]), "1");
    drop((a, b, target));
}

#[test]
fn the_pool_tier_pauses_while_its_target_is_down_and_resumes_when_it_is_back() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let target_dir = dir.path().join("target");
    std::fs::create_dir_all(&target_dir).unwrap();
    let mut target = Target::start(&target_dir);
    let pool = target.pool();
    // A pool command fails over for up to the pool timeout: one second,
    // so that the outage below (three) is longer than a command waits.
    let args = ["--admit", "all", "--pool", pool.as_str(), "--pool-timeout", "1s"];
    // 64 KiB blocks through 2 MiB of DRAM and a 12 MiB SSD tier: older
    // blocks live on the pool only.
    let kv = Kv::start_sized(dir.path(), "2M", "12M", &args);
    rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        put_range(&mut c, 0..200).await;
        assert_eq!(c.call(&["KV.FLUSH", "ALL"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        // The target dies: puts go on (the pool tier pauses), and what it
        // held stays indexed.
        target.kill9();
        put_range(&mut c, 200..300).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let st = c.stats().await.unwrap();
        assert!(stat(&st, "pool_keys") >= 150, "{st:?}");
        // It comes back: within the probe's backoff the pool takes writes
        // again, and KV.FLUSH succeeds.
        target.restart();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            put_range(&mut c, 300..340).await;
            if c.call(&["KV.FLUSH", "ALL"]).await.unwrap() == strata_kv::resp::Reply::Simple("OK".into()) {
                break;
            }
            assert!(Instant::now() < deadline, "the pool tier never resumed: {:?}", c.stats().await.unwrap());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        put_range(&mut c, 340..400).await;
        assert_eq!(c.call(&["KV.FLUSH", "ALL"]).await.unwrap(), strata_kv::resp::Reply::Simple("OK".into()));
        let st = c.stats().await.unwrap();
        assert!(stat(&st, "dropped_ssd") > 0, "the SSD ring wrapped: {st:?}");
        assert!(stat(&st, "lost_pool") + stat(&st, "pool_skipped") > 0, "the cut was felt: {st:?}");
        // Every block is right or a miss; those before the cut and after
        // the return are all there.
        for i in 0..400u32 {
            let v = c.get(format!("blk{i}").as_bytes()).await.unwrap();
            match v {
                Some(v) => assert_eq!(&v[..], &block(i, 64 << 10)[..], "blk{i} came back wrong"),
                None => assert!((200..340).contains(&i), "blk{i} lost: {:?}", c.stats().await.unwrap()),
            }
        }
    });
    kv.kill9();
    // And a restart of the KV server finds them on the pool.
    let kv = Kv::start_sized(dir.path(), "2M", "12M", &args);
    rt().block_on(async {
        let mut c = Client::connect(kv.addr).await.unwrap();
        for i in (0..200u32).chain(340..400) {
            let v = c.get(format!("blk{i}").as_bytes()).await.unwrap().unwrap_or_else(|| panic!("blk{i} lost"));
            assert_eq!(&v[..], &block(i, 64 << 10)[..], "blk{i} came back wrong");
        }
    });
    drop((kv, target));
}

/// Writes `text` to `dir/name` with mode 0600, as secrets must be.
fn secret_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
fn with_a_password_the_port_serves_only_clients_that_authenticate_and_never_an_http_post() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let pass = secret_file(dir.path(), "pass", "correct horse\n");
    let users = secret_file(
        dir.path(),
        "users.toml",
        "[[user]]\nname = \"tenant-a\"\npassword = \"pa\"\nnamespaces = [\"a\"]\n",
    );
    let (pass_arg, users_arg) = (pass.display().to_string(), users.display().to_string());
    let kv = Kv::start(dir.path(), "64M", &["--requirepass-file", &pass_arg, "--users", &users_arg]);

    // redis-cli without a password: refused; with -a: served.
    assert_eq!(kv.cli(&["SET", "k", "v"]), "NOAUTH Authentication required.");
    // A wrong password: redis-cli's AUTH fails, and its GET is refused.
    assert_eq!(kv.cli(&["-a", "wrong", "--no-auth-warning", "GET", "k"]), "NOAUTH Authentication required.");
    assert_eq!(kv.cli(&["-a", "correct horse", "--no-auth-warning", "SET", "k", "v"]), "OK");
    assert_eq!(kv.cli(&["--user", "tenant-a", "--pass", "pa", "--no-auth-warning", "KV.NS"]), "a");

    // redis-py with password= (and username= for a tenant).
    let script = r#"
import sys, redis
port = int(sys.argv[1])
try:
    redis.Redis(port=port).get("k")
    sys.exit("served without a password")
except redis.exceptions.AuthenticationError:
    pass
r = redis.Redis(port=port, password="correct horse")
assert r.get("k") == b"v", r.get("k")
t = redis.Redis(port=port, username="tenant-a", password="pa")
t.set("k", "tenant")
assert t.get("k") == b"tenant"
assert r.get("k") == b"v"
print("ok")
"#;
    let out = Command::new(python_with_redis()).args(["-c", script, &kv.addr.port().to_string()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.trim_end().ends_with("ok"), "redis-py: {text}");

    // What a web page can make a browser send: the body never runs.
    let url = format!("http://127.0.0.1:{}/", kv.addr.port());
    let curl =
        Command::new("curl").args(["-s", "-m", "5", "--data-binary", "SET pwned yes\r\n", &url]).output().unwrap();
    assert!(curl.stdout.is_empty(), "answered an HTTP POST: {}", String::from_utf8_lossy(&curl.stdout));
    assert_eq!(kv.cli(&["-a", "correct horse", "--no-auth-warning", "EXISTS", "pwned"]), "0");
    assert!(kv.proc.log_text().contains("looks like HTTP"), "the attempt is logged");
}

#[test]
fn an_open_port_listens_on_loopback_only_and_secret_files_must_be_private() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out =
            Command::new(BIN).args(["kv", "serve", "--ssd", "none", "--dram", "16M"]).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = run(&["--listen", "0.0.0.0:0"]);
    assert!(!ok && err.contains("refusing to serve 0.0.0.0:0 without a password"), "{err}");
    let open = dir.path().join("pass");
    std::fs::write(&open, "pw\n").unwrap();
    let (ok, err) = run(&["--listen", "127.0.0.1:0", "--requirepass-file", &open.display().to_string()]);
    assert!(!ok && err.contains("readable by others") && err.contains("chmod 600"), "{err}");
    let bad = secret_file(dir.path(), "users.toml", "[[user]]\nname = \"x\"\n");
    let (ok, err) = run(&["--listen", "127.0.0.1:0", "--users", &bad.display().to_string()]);
    assert!(!ok && err.contains("password"), "{err}");
}

/// `--tls-cert`/`--tls-key`: the port speaks TLS only. redis-cli --tls
/// and redis-py with ssl=True, trusting the certificate, store and read
/// back; a plain client gets nothing served.
#[test]
fn with_tls_the_port_serves_redis_cli_and_redis_py_over_tls_only() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::self_signed(dir.path(), "kv");
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let kv = Kv::start(dir.path(), "64M", &["--tls-cert", &cert_s, "--tls-key", &key_s]);
    let port = kv.addr.port().to_string();
    let tls_cli = |args: &[&str]| {
        let out = Command::new(tool("redis-cli"))
            .args(["--tls", "--cacert", &cert_s, "-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    };
    assert_eq!(tls_cli(&["SET", "k", "over tls"]), "OK");
    assert_eq!(tls_cli(&["GET", "k"]), "over tls");
    let script = format!(
        "import redis\nr = redis.Redis(host='127.0.0.1', port={port}, ssl=True, ssl_ca_certs='{cert_s}')\n\
         r.set(b'py', b'x' * 100000)\nassert r.get(b'py') == b'x' * 100000\nassert r.get(b'k') == b'over tls'\nprint('ok')\n"
    );
    let out = Command::new(python_with_redis()).args(["-c", &script]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.trim_end().ends_with("ok"), "{text}");
    // A plain client: no answer it can use, and nothing stored.
    let plain = Command::new(tool("redis-cli"))
        .args(["-h", "127.0.0.1", "-p", &port, "SET", "plain", "1"])
        .output()
        .expect("redis-cli");
    assert_ne!(String::from_utf8_lossy(&plain.stdout).trim(), "OK");
    assert_eq!(tls_cli(&["EXISTS", "plain"]), "0");
    // A key file others may read is refused at start.
    let loose = dir.path().join("loose.key");
    std::fs::copy(&key, &loose).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = Command::new(BIN)
        .args(["kv", "serve", "--listen", "127.0.0.1:0", "--ssd", "none", "--tls-cert", &cert_s, "--tls-key"])
        .arg(&loose)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("readable by others"), "{err}");
}

/// `--metrics`: a known workload (three SETs, two hits and a miss) shows
/// up exactly per tier, parsed by the Prometheus client's own parser.
#[test]
fn kv_metrics_count_gets_per_tier_and_their_bytes_exactly() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("127.0.0.1:{port}");
    let kv = Kv::start(dir.path(), "64M", &["--metrics", &metrics]);
    for (k, n) in [("a", 1000), ("b", 3000), ("c", 5)] {
        assert_eq!(kv.cli(&["SET", k, &"x".repeat(n)]), "OK");
    }
    assert_eq!(kv.cli(&["GET", "c"]), "xxxxx");
    assert_eq!(kv.cli(&["STRLEN", "a"]), "1000");
    let _ = kv.cli(&["GET", "b"]);
    assert_eq!(kv.cli(&["GET", "nope"]), "");
    let out = Command::new("curl").args(["-s", "-m", "5", &format!("http://{metrics}/metrics")]).output().unwrap();
    let m = crate::parse_metrics(&String::from_utf8_lossy(&out.stdout));
    let s = |name: &str, labels: &[(&str, &str)]| crate::sample(&m, name, labels);
    assert_eq!(s("strata_kv_gets_total", &[("tier", "dram")]), 3.0, "GET c, STRLEN a (it reads the block), GET b");
    assert_eq!(s("strata_kv_gets_total", &[("tier", "miss")]), 1.0);
    assert_eq!(s("strata_kv_gets_total", &[("tier", "ssd")]), 0.0);
    assert_eq!(s("strata_kv_get_bytes_total", &[("tier", "dram")]), 4005.0);
    assert_eq!(s("strata_kv_get_latency_seconds_count", &[("tier", "dram")]), 3.0);
    assert_eq!(s("strata_kv_get_latency_seconds_bucket", &[("tier", "miss"), ("le", "+Inf")]), 1.0);
    assert_eq!(s("strata_kv_puts_total", &[]), 3.0);
    assert_eq!(s("strata_kv_keys", &[("tier", "dram")]), 3.0);
    assert_eq!(s("strata_kv_capacity_bytes", &[("tier", "dram")]), 64.0 * 1024.0 * 1024.0);
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{metrics}/other")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    drop(kv);
}
