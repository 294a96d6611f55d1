//! Redis compatibility where clients need it (issue 25), over real
//! sockets: MULTI / EXEC / DISCARD (queued, applied together or not at
//! all, no other client's command in between), SCAN with MATCH and
//! COUNT, KEYS, the TTL commands, GETDEL, TYPE, empty requests ignored,
//! CONFIG SET refused, an honest INFO; and redis-py driving all of it
//! (`redis_py.py`, Debian's python3-redis).
//!
//! The bugs these pin down: MULTI and EXEC were unknown commands, but the
//! commands between them ran anyway (redis-py's default `pipeline()`
//! raised after its SETs had been applied); DISCARD applied what it
//! should have dropped; `*0` got an error; CONFIG SET answered OK and
//! did nothing; INFO claimed Redis 7.2.0 and `expires=0`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_block::{BlockDevice, MemDevice};
use strata_kv::client::Client;
use strata_kv::resp::Reply;
use strata_kv::server::{ServerConfig, serve};
use strata_kv::{Admit, KvConfig, KvStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(dram: u64, ssd: Option<u64>, cfg: ServerConfig) -> (SocketAddr, Arc<KvStore>) {
    let dev = ssd.map(|b| Arc::new(MemDevice::new(4096, b / 4096)) as Arc<dyn BlockDevice>);
    let kv = KvConfig { dram_bytes: dram, admit: Admit::All, segment_bytes: 1 << 20 };
    let store = KvStore::open(kv, dev).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(store.clone(), listener, cfg, std::future::pending()));
    (addr, store)
}

async fn call(c: &mut Client, args: &[&str]) -> Reply {
    c.call(args).await.unwrap()
}

fn ok(r: &Reply) -> bool {
    matches!(r, Reply::Simple(s) if s == "OK") || *r == Reply::Ok
}

fn simple(s: &str) -> Reply {
    Reply::Simple(s.into())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn err(r: Reply) -> String {
    match r {
        Reply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn multi_queues_commands_and_exec_runs_them_and_answers_each() {
    let (addr, _) = start(1 << 20, None, ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    assert_eq!(call(&mut c, &["SET", "a", "1"]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["GET", "a"]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["SET", "b", "2", "NX"]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["DEL", "nothing"]).await, simple("QUEUED"));
    // Nothing ran yet: another client does not see it.
    let mut other = Client::connect(addr).await.unwrap();
    assert_eq!(other.get(b"a").await.unwrap(), None);
    // A nested MULTI is an error that leaves the transaction as it was.
    assert_eq!(err(call(&mut c, &["MULTI"]).await), "ERR MULTI calls can not be nested");
    match call(&mut c, &["EXEC"]).await {
        Reply::Array(r) => {
            assert_eq!(r.len(), 4);
            assert!(ok(&r[0]));
            assert_eq!(r[1], bulk("1"));
            assert!(ok(&r[2]));
            assert_eq!(r[3], Reply::Int(0));
        }
        other => panic!("EXEC answered {other:?}"),
    }
    assert_eq!(other.get(b"b").await.unwrap().as_deref(), Some(&b"2"[..]));
    // An empty transaction answers an empty array; a runtime error is
    // its command's element, and the rest still runs (no rollback).
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    assert_eq!(call(&mut c, &["EXEC"]).await, Reply::Array(vec![]));
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    let big = "x".repeat(2 << 20);
    assert_eq!(call(&mut c, &["SET", "huge", &big]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["SET", "after", "yes"]).await, simple("QUEUED"));
    match call(&mut c, &["EXEC"]).await {
        Reply::Array(r) => {
            assert!(err(r[0].clone()).starts_with("OOM"), "{:?}", r[0]);
            assert!(ok(&r[1]));
        }
        other => panic!("EXEC answered {other:?}"),
    }
    assert_eq!(c.get(b"after").await.unwrap().as_deref(), Some(&b"yes"[..]));
}

#[tokio::test]
async fn a_command_that_cannot_be_queued_aborts_its_transaction_before_anything_runs() {
    let (addr, store) = start(1 << 20, None, ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    // An unknown command, a wrong arity, a bad option, WATCH inside MULTI:
    // each is refused when sent, and EXEC then runs nothing.
    let bad: [&[&str]; 4] = [&["NOPE", "x"], &["GET"], &["SET", "k", "v", "EX", "zero"], &["WATCH", "a"]];
    for b in bad {
        assert!(ok(&call(&mut c, &["MULTI"]).await));
        assert_eq!(call(&mut c, &["SET", "first", "1"]).await, simple("QUEUED"));
        assert!(err(call(&mut c, b).await).starts_with("ERR"), "{b:?}");
        assert_eq!(call(&mut c, &["SET", "last", "1"]).await, simple("QUEUED"));
        assert_eq!(err(call(&mut c, &["EXEC"]).await), "EXECABORT Transaction discarded because of previous errors.");
        assert_eq!(store.stats().keys, 0, "{b:?}: a command of an aborted transaction ran");
    }
    // The connection is out of the transaction afterwards.
    assert_eq!(err(call(&mut c, &["EXEC"]).await), "ERR EXEC without MULTI");
    c.set(b"k", b"v").await.unwrap();
}

#[tokio::test]
async fn discard_drops_the_queue_and_exec_or_discard_without_multi_are_errors() {
    let (addr, store) = start(1 << 20, None, ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    assert_eq!(err(call(&mut c, &["DISCARD"]).await), "ERR DISCARD without MULTI");
    assert_eq!(err(call(&mut c, &["EXEC"]).await), "ERR EXEC without MULTI");
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    assert_eq!(call(&mut c, &["SET", "a", "1"]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["FLUSHALL"]).await, simple("QUEUED"));
    assert!(ok(&call(&mut c, &["DISCARD"]).await));
    assert_eq!(store.stats().keys, 0);
    assert_eq!(c.get(b"a").await.unwrap(), None);
    // RESET drops a transaction too, at once.
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    assert_eq!(call(&mut c, &["SET", "a", "1"]).await, simple("QUEUED"));
    assert_eq!(call(&mut c, &["RESET"]).await, simple("RESET"));
    assert_eq!(err(call(&mut c, &["EXEC"]).await), "ERR EXEC without MULTI");
    assert_eq!(store.stats().keys, 0);
    // WATCH is refused outside a transaction too; UNWATCH is harmless.
    assert!(err(call(&mut c, &["WATCH", "a"]).await).contains("WATCH is not supported"));
    assert!(ok(&call(&mut c, &["UNWATCH"]).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_other_clients_command_comes_between_a_transactions_commands() {
    // Values that leave DRAM, so that reads await the SSD and a command
    // of another client would find room to come between.
    let (addr, _) = start(256 << 10, Some(32 << 20), ServerConfig::default()).await;
    let value = |round: u32| format!("{round:08}").repeat(2048);
    let writer = tokio::spawn(async move {
        let mut c = Client::connect(addr).await.unwrap();
        for round in 0..150u32 {
            let v = value(round);
            let replies = c
                .pipeline(&[
                    &["MULTI"][..],
                    &["SET", "pair-a", &v],
                    &["SET", "filler", &"f".repeat(100_000)],
                    &["SET", "pair-b", &v],
                    &["EXEC"],
                ])
                .await
                .unwrap();
            assert!(matches!(replies.last(), Some(Reply::Array(r)) if r.len() == 3), "{:?}", replies.last());
        }
    });
    let mut readers = Vec::new();
    for transactional in [false, true] {
        readers.push(tokio::spawn(async move {
            let mut c = Client::connect(addr).await.unwrap();
            let mut seen = 0;
            for _ in 0..300 {
                let (a, b) = if transactional {
                    let r =
                        c.pipeline(&[&["MULTI"][..], &["GET", "pair-a"], &["GET", "pair-b"], &["EXEC"]]).await.unwrap();
                    match r.into_iter().last() {
                        Some(Reply::Array(mut v)) if v.len() == 2 => {
                            let b = v.pop().unwrap();
                            (v.pop().unwrap(), b)
                        }
                        other => panic!("EXEC answered {other:?}"),
                    }
                } else {
                    let mut v = c.mget(&["pair-a", "pair-b"]).await.unwrap();
                    let b = v.pop().unwrap().map(Reply::Bulk).unwrap_or(Reply::Nil);
                    (v.pop().unwrap().map(Reply::Bulk).unwrap_or(Reply::Nil), b)
                };
                if a != Reply::Nil {
                    let head = |r: &Reply| match r {
                        Reply::Bulk(v) => String::from_utf8_lossy(&v[..8.min(v.len())]).into_owned(),
                        other => format!("{other:?}"),
                    };
                    assert!(a == b, "a reader saw one half of a transaction: {} and {}", head(&a), head(&b));
                    seen += 1;
                }
            }
            seen
        }));
    }
    writer.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn empty_and_null_requests_are_ignored_as_redis_ignores_them() {
    let (addr, _) = start(1 << 20, None, ServerConfig::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n*0\r\n*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut got = vec![0u8; 14];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(&got, b"+PONG\r\n+PONG\r\n");
    // Nothing else comes: the connection is still open and answering.
    s.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut more = vec![0u8; 7];
    s.read_exact(&mut more).await.unwrap();
    assert_eq!(&more, b"+PONG\r\n");
}

async fn scan_all(c: &mut Client, pattern: Option<&str>, count: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let mut args = vec!["SCAN", &cursor];
        if let Some(p) = pattern {
            args.extend(["MATCH", p]);
        }
        args.extend(["COUNT", count]);
        let Reply::Array(mut r) = call(c, &args).await else { panic!("SCAN answered no array") };
        let Some(Reply::Array(page)) = r.pop() else { panic!("SCAN answered no keys") };
        let Some(Reply::Bulk(next)) = r.pop() else { panic!("SCAN answered no cursor") };
        keys.extend(page.into_iter().map(|k| match k {
            Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("a key that is not a bulk string: {other:?}"),
        }));
        cursor = String::from_utf8(next.to_vec()).unwrap();
        assert!(cursor.parse::<i64>().is_ok(), "a cursor that is not a signed 64-bit number: {cursor}");
        if cursor == "0" {
            return keys;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_visits_every_key_present_throughout_while_others_come_and_go() {
    let (addr, _) = start(64 << 20, None, ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    let stable: Vec<String> = (0..3000).map(|i| format!("key:{i}")).collect();
    for chunk in stable.chunks(500) {
        let pairs: Vec<(&str, &str)> = chunk.iter().map(|k| (k.as_str(), "v")).collect();
        c.mset(&pairs).await.unwrap();
    }
    // Another namespace's keys are never listed.
    let mut ns = Client::connect(addr).await.unwrap();
    assert!(ok(&call(&mut ns, &["KV.NS", "elsewhere"]).await));
    ns.set(b"key:elsewhere", b"v").await.unwrap();
    // Churn while the scans run: keys added and deleted.
    let churn = tokio::spawn(async move {
        let mut c = Client::connect(addr).await.unwrap();
        for i in 0..2000 {
            let k = format!("churn:{i}");
            c.set(k.as_bytes(), b"x").await.unwrap();
            if i % 3 != 0 {
                call(&mut c, &["DEL", &k]).await;
            }
        }
    });
    for count in ["1", "10", "100", "5000"] {
        let got = scan_all(&mut c, Some("key:*"), count).await;
        let set: HashSet<&String> = got.iter().collect();
        assert!(stable.iter().all(|k| set.contains(k)), "COUNT {count}: a key present throughout was not returned");
        assert!(got.iter().all(|k| k.starts_with("key:")), "COUNT {count}: a key not matching");
        assert!(!set.contains(&"key:elsewhere".to_string()));
    }
    churn.await.unwrap();
    // Patterns as in Redis; KEYS agrees with SCAN.
    let mut ones = scan_all(&mut c, Some("key:1?"), "50").await;
    ones.sort();
    let mut want: Vec<String> = (10..20).map(|i| format!("key:{i}")).collect();
    want.sort();
    assert_eq!(ones, want);
    let Reply::Array(keys) = call(&mut c, &["KEYS", "key:2[0-4]9"]).await else { panic!() };
    let mut keys: Vec<Reply> = keys;
    keys.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(keys, (0..5).map(|i| bulk(&format!("key:2{i}9"))).collect::<Vec<_>>());
    let all = scan_all(&mut c, None, "1000").await;
    assert_eq!(all.len(), 3000 + 2000 / 3 + 1);
    // TYPE: only strings exist.
    let Reply::Array(r) = call(&mut c, &["SCAN", "0", "COUNT", "5000", "TYPE", "hash"]).await else { panic!() };
    assert_eq!(r[1], Reply::Array(vec![]));
}

#[tokio::test]
async fn ttl_commands_getdel_and_type_behave_as_in_redis() {
    let (addr, store) = start(1 << 20, Some(16 << 20), ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    assert!(ok(&call(&mut c, &["SETEX", "s", "100", "v"]).await));
    let Reply::Int(ttl) = call(&mut c, &["TTL", "s"]).await else { panic!() };
    assert!((99..=100).contains(&ttl), "{ttl}");
    assert!(ok(&call(&mut c, &["PSETEX", "short", "150", "v"]).await));
    assert!(ok(&call(&mut c, &["SET", "px", "v", "PX", "150"]).await));
    assert_eq!(store.stats().expires, 3);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.get(b"short").await.unwrap(), None);
    assert_eq!(call(&mut c, &["TTL", "px"]).await, Reply::Int(-2));
    // GETEX sets and removes expiries, answering the value.
    c.set(b"g", b"val").await.unwrap();
    assert_eq!(call(&mut c, &["TTL", "g"]).await, Reply::Int(-1));
    assert_eq!(call(&mut c, &["GETEX", "g", "EX", "50"]).await, bulk("val"));
    assert_eq!(call(&mut c, &["TTL", "g"]).await, Reply::Int(50));
    assert_eq!(call(&mut c, &["GETEX", "g", "PERSIST"]).await, bulk("val"));
    assert_eq!(call(&mut c, &["TTL", "g"]).await, Reply::Int(-1));
    assert_eq!(call(&mut c, &["GETEX", "g"]).await, bulk("val"));
    assert_eq!(call(&mut c, &["GETEX", "missing", "EX", "5"]).await, Reply::Nil);
    // PERSIST: 1 only when it removed an expiry.
    assert_eq!(call(&mut c, &["PERSIST", "g"]).await, Reply::Int(0));
    assert_eq!(call(&mut c, &["EXPIRE", "g", "30"]).await, Reply::Int(1));
    assert_eq!(call(&mut c, &["PERSIST", "g"]).await, Reply::Int(1));
    // A time in the past deletes the key, as in Redis.
    assert_eq!(call(&mut c, &["EXPIRE", "g", "-1"]).await, Reply::Int(1));
    assert_eq!(c.get(b"g").await.unwrap(), None);
    c.set(b"g", b"val").await.unwrap();
    assert_eq!(call(&mut c, &["PEXPIREAT", "g", "1000"]).await, Reply::Int(1));
    assert_eq!(call(&mut c, &["EXISTS", "g"]).await, Reply::Int(0));
    assert_eq!(call(&mut c, &["EXPIRE", "g", "10"]).await, Reply::Int(0), "absent");
    // GETDEL, TYPE.
    c.set(b"d", b"gone").await.unwrap();
    assert_eq!(call(&mut c, &["TYPE", "d"]).await, simple("string"));
    assert_eq!(call(&mut c, &["GETDEL", "d"]).await, bulk("gone"));
    assert_eq!(call(&mut c, &["GETDEL", "d"]).await, Reply::Nil);
    assert_eq!(call(&mut c, &["TYPE", "d"]).await, simple("none"));
    assert_eq!(store.stats().expires, 1, "only s has an expiry left");
    store.check_invariants();
}

#[tokio::test]
async fn config_set_is_refused_and_info_and_config_get_are_honest() {
    let (addr, _) = start(8 << 20, None, ServerConfig::default()).await;
    let mut c = Client::connect(addr).await.unwrap();
    let e = err(call(&mut c, &["CONFIG", "SET", "maxmemory", "1"]).await);
    assert!(e.starts_with("ERR CONFIG SET maxmemory is not supported"), "{e}");
    assert!(err(call(&mut c, &["CONFIG", "RESETSTAT"]).await).contains("not supported"));
    assert_eq!(
        call(&mut c, &["CONFIG", "GET", "max*"]).await,
        Reply::Array(vec![bulk("maxmemory"), bulk(&(8u64 << 20).to_string())])
    );
    assert_eq!(call(&mut c, &["CONFIG", "GET", "nothing-like-it"]).await, Reply::Array(vec![]));
    c.set(b"plain", b"v").await.unwrap();
    assert!(ok(&call(&mut c, &["SETEX", "timed", "1000", "v"]).await));
    let Reply::Bulk(info) = call(&mut c, &["INFO"]).await else { panic!() };
    let info = String::from_utf8(info.to_vec()).unwrap();
    assert!(info.contains(&format!("strata_version:{}", env!("CARGO_PKG_VERSION"))), "{info}");
    assert!(!info.contains("redis_version"), "INFO claims a Redis version: {info}");
    let keyspace = info.lines().find(|l| l.starts_with("db0:")).unwrap();
    assert!(keyspace.starts_with("db0:keys=2,expires=1,avg_ttl="), "{keyspace}");
    let avg: u64 = keyspace.rsplit('=').next().unwrap().parse().unwrap();
    assert!(avg > 990_000 && avg <= 1_000_000, "{keyspace}");
    let Reply::Bulk(ks) = call(&mut c, &["INFO", "keyspace"]).await else { panic!() };
    assert!(String::from_utf8_lossy(&ks).starts_with("# Keyspace\r\ndb0:keys=2"), "{ks:?}");
    // HELLO names strata too.
    let Reply::Map(hello) = call(&mut c, &["HELLO", "3"]).await else { panic!() };
    assert!(hello.contains(&(bulk("server"), bulk("strata"))), "{hello:?}");
}

#[tokio::test]
async fn a_command_a_user_may_not_run_aborts_the_transaction_it_is_queued_in() {
    let mut access = strata_kv::auth::Access::open();
    access.add_tenant("tenant-a", b"pa", &["a"]).unwrap();
    let (addr, store) = start(1 << 20, None, ServerConfig { access, ..ServerConfig::default() }).await;
    let mut c = Client::connect(addr).await.unwrap();
    assert!(err(call(&mut c, &["MULTI"]).await).starts_with("NOAUTH"));
    c.auth(Some("tenant-a"), b"pa").await.unwrap();
    assert!(ok(&call(&mut c, &["MULTI"]).await));
    assert_eq!(call(&mut c, &["SET", "k", "v"]).await, simple("QUEUED"));
    assert!(err(call(&mut c, &["FLUSHALL"]).await).starts_with("NOPERM"));
    assert!(err(call(&mut c, &["EXEC"]).await).starts_with("EXECABORT"));
    assert_eq!(store.stats().keys, 0);
}

/// Debian's Python with Debian's redis-py (`python3-redis`).
fn python_with_redis() -> &'static str {
    const PYTHON: &str = "/usr/bin/python3";
    let found = std::process::Command::new(PYTHON).args(["-c", "import redis"]).output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "{PYTHON} cannot import redis: apt-get install python3-redis (CI's .ci/run does)"
    );
    PYTHON
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_drives_transactions_discard_scan_and_expiry() {
    let (addr, store) = start(64 << 20, Some(64 << 20), ServerConfig::default()).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kv/redis_py.py");
    let python = python_with_redis();
    let run = move || std::process::Command::new(python).arg(script).arg(addr.port().to_string()).output();
    let out = tokio::task::spawn_blocking(run).await.unwrap().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-py run failed:\n{text}");
    assert!(text.contains("redis-py: all checks passed"), "{text}");
    store.check_invariants();
}
