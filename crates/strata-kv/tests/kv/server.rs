//! The RESP server over real sockets: concurrency, pipelining, large
//! values, RESP3, and peers that misbehave.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strata_block::{BlockDevice, MemDevice};
use strata_kv::client::Client;
use strata_kv::resp::{Limits, Reply, parse_reply};
use strata_kv::server::{ServerConfig, serve};
use strata_kv::{Admit, KvConfig, KvStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(dram: u64, ssd: Option<u64>) -> (SocketAddr, Arc<KvStore>) {
    start_with(dram, ssd, ServerConfig::default()).await
}

async fn start_with(dram: u64, ssd: Option<u64>, cfg: ServerConfig) -> (SocketAddr, Arc<KvStore>) {
    let dev = ssd.map(|b| Arc::new(MemDevice::new(4096, b / 4096)) as Arc<dyn BlockDevice>);
    let kv = KvConfig { dram_bytes: dram, admit: Admit::All, segment_bytes: 1 << 20 };
    let store = KvStore::open(kv, dev).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(store.clone(), listener, cfg, std::future::pending()));
    (addr, store)
}

fn value(key: &str, len: usize) -> Vec<u8> {
    key.bytes().cycle().take(len).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pipelined_clients_get_their_own_values() {
    let (addr, store) = start(2 << 20, Some(32 << 20)).await;
    let mut tasks = Vec::new();
    for c in 0..16 {
        tasks.push(tokio::spawn(async move {
            let mut cl = Client::connect(addr).await.unwrap();
            for round in 0..10 {
                let keys: Vec<String> = (0..20).map(|i| format!("c{c}-r{round}-k{i}")).collect();
                let pairs: Vec<(Vec<u8>, Vec<u8>)> =
                    keys.iter().map(|k| (k.clone().into_bytes(), value(k, 1000 + round * 500))).collect();
                cl.mset(&pairs).await.unwrap();
                // Pipelined GETs of this round and the first round.
                let reqs: Vec<Vec<&[u8]>> = keys.iter().map(|k| vec![&b"GET"[..], k.as_bytes()]).collect();
                let replies = cl.pipeline(&reqs).await.unwrap();
                for (k, r) in keys.iter().zip(replies) {
                    assert_eq!(r, Reply::Bulk(Bytes::from(value(k, 1000 + round * 500))), "{k}");
                }
                let first: Vec<String> = (0..20).map(|i| format!("c{c}-r0-k{i}")).collect();
                for (k, v) in first.iter().zip(cl.mget(&first).await.unwrap()) {
                    // Still stored in some tier, never another key's bytes.
                    assert_eq!(v.as_deref(), Some(&value(k, 1000)[..]), "{k}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let st = store.stats();
    assert!(st.demoted > 0 && st.hits_ssd > 0, "{st:?}");
    assert!(st.dram_used <= 2 << 20);
    store.check_invariants();
}

#[tokio::test]
async fn a_peer_sending_garbage_is_answered_and_closed_without_harming_others() {
    let (addr, _store) = start(1 << 20, None).await;
    let mut good = Client::connect(addr).await.unwrap();
    good.set(b"k", b"v").await.unwrap();
    for garbage in [&b"*2\r\n$3\r\nGET\r\n:12\r\n"[..], b"*1\r\n$-7\r\n", b"GET \"abc\r\n", b"*1\r\n$3\r\nGETxx\r\n"] {
        let mut bad = TcpStream::connect(addr).await.unwrap();
        bad.write_all(garbage).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), bad.read_to_end(&mut got)).await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("-ERR Protocol error"), "{garbage:?} -> {text:?}");
    }
    // A peer that leaves halfway through a large value.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nh\r\n$1000000\r\nabc").await.unwrap();
    drop(half);
    assert_eq!(good.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(good.get(b"h").await.unwrap(), None);
    // Unknown commands and bad arguments are replies, not disconnects.
    assert!(matches!(good.call(&["NOSUCH"]).await.unwrap(), Reply::Error(e) if e.starts_with("ERR unknown command")));
    assert!(matches!(good.call(&["GET"]).await.unwrap(), Reply::Error(_)));
    assert_eq!(good.call(&["PING"]).await.unwrap(), Reply::Simple("PONG".into()));
}

#[tokio::test]
async fn resp3_clients_get_resp3_types() {
    let (addr, _store) = start(1 << 20, None).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"HELLO 3\r\nGET missing\r\nKV.STATS\r\n").await.unwrap();
    let mut buf = BytesMut::new();
    let mut replies = Vec::new();
    while replies.len() < 3 {
        s.read_buf(&mut buf).await.unwrap();
        while let Some(r) = parse_reply(&mut buf, &Limits::default()).unwrap() {
            replies.push(r);
        }
    }
    assert!(
        matches!(&replies[0], Reply::Map(p) if p.iter().any(|(k, v)| *k == Reply::text("proto") && *v == Reply::Int(3)))
    );
    assert_eq!(replies[1], Reply::Nil);
    assert!(matches!(&replies[2], Reply::Map(p) if p.len() > 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_128_mib_round_trip() {
    let (addr, store) = start(512 << 20, None).await;
    let mut c = Client::connect(addr).await.unwrap();
    let big: Vec<u8> = (0..128u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    c.set(b"big", &big).await.unwrap();
    let back = c.get(b"big").await.unwrap().unwrap();
    assert!(back.len() == big.len() && back[..] == big[..]);
    assert!(store.stats().dram_used >= 128 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_off_and_others_go_on() {
    let cfg = ServerConfig { write_stall: Duration::from_millis(500), ..ServerConfig::default() };
    let (addr, _store) = start_with(64 << 20, None, cfg).await;
    let mut c = Client::connect(addr).await.unwrap();
    c.set(b"big", &vec![7u8; 4 << 20]).await.unwrap();
    // Ask for 64 MiB of replies and read none of them.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(&b"GET big\r\n".repeat(16)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The server gave up on it: what it sent is less than asked, and the
    // connection ends.
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let read_all = async {
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read_all).await.expect("the stalled connection was closed");
    assert!(got < 16 * (4 << 20), "{got}");
    assert_eq!(c.get(b"big").await.unwrap().map(|v| v.len()), Some(4 << 20));
}

/// Sends the start of a `SET key <len bytes>`: the header and `sent`
/// bytes of the value.
async fn half_set(addr: SocketAddr, key: &str, len: usize, sent: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${len}\r\n", key.len());
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b'x'; sent]).await.unwrap();
    s
}

/// Sends the last `n` bytes of a value [`half_set`] started, and its end.
async fn finish_set(s: &mut TcpStream, n: usize) {
    s.write_all(&vec![b'x'; n]).await.unwrap();
    s.write_all(b"\r\n").await.unwrap();
}

/// Reads one reply line.
async fn reply_line(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut b)).await.unwrap().unwrap();
        if n == 0 {
            break;
        }
        got.push(b[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

const MB: usize = 1 << 20;

/// A server whose requests in progress share 10 MiB, each waiting up to
/// `wait` for its share.
async fn start_budgeted(wait: Duration) -> (SocketAddr, Arc<KvStore>) {
    let cfg = ServerConfig { request_memory: 10 * MB as u64, request_memory_wait: wait, ..ServerConfig::default() };
    start_with(64 << 20, None, cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_progress_share_one_memory_budget_and_a_client_that_cannot_fit_is_refused() {
    let (addr, store) = start_budgeted(Duration::from_millis(500)).await;
    // A holds about 6 MiB of the 10 with a value half sent.
    let mut a = half_set(addr, "a", 6 * MB, 3 * MB).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // B announces 6 MiB more: it waits, gets no share in time, and is
    // answered with an error and closed. Others go on meanwhile.
    let mut b = half_set(addr, "b", 6 * MB, 0).await;
    let mut other = Client::connect(addr).await.unwrap();
    other.set(b"small", b"v").await.unwrap();
    let line = reply_line(&mut b).await;
    assert!(line.starts_with("-OOM") && line.contains("memory for requests"), "{line:?}");
    assert_eq!(b.read(&mut [0u8; 16]).await.unwrap(), 0, "refused and closed");
    // A finishes: stored, and its share is given back.
    finish_set(&mut a, 3 * MB).await;
    assert_eq!(reply_line(&mut a).await, "+OK\r\n");
    assert_eq!(store.get(b"", b"a").await.unwrap().map(|v| v.len()), Some(6 * MB));
    // Now C's 6 MiB fits.
    let mut c = half_set(addr, "c", 6 * MB, 0).await;
    finish_set(&mut c, 6 * MB).await;
    assert_eq!(reply_line(&mut c).await, "+OK\r\n");
    // With a longer wait, a client behind a value in progress gets its
    // share once that value completes.
    let (addr2, store2) = start_budgeted(Duration::from_secs(30)).await;
    let mut d = half_set(addr2, "d", 6 * MB, MB).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut e = half_set(addr2, "e", 6 * MB, 0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    finish_set(&mut d, 5 * MB).await;
    assert_eq!(reply_line(&mut d).await, "+OK\r\n");
    finish_set(&mut e, 6 * MB).await;
    assert_eq!(reply_line(&mut e).await, "+OK\r\n");
    assert_eq!(store2.get(b"", b"e").await.unwrap().map(|v| v.len()), Some(6 * MB));
    assert_eq!(other.get(b"small").await.unwrap().as_deref(), Some(&b"v"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_vanish_mid_value_or_while_waiting_give_their_share_back() {
    // The budget is returned by whoever held it, however the connection
    // ends: a share that leaked would refuse every large value after a
    // few clients went away.
    let (addr, store) = start_budgeted(Duration::from_millis(500)).await;
    // Five clients in turn hold 6 MiB of the 10 with half a value sent,
    // then vanish: had any share leaked, the last ones would be refused.
    for i in 0..5 {
        let s = half_set(addr, &format!("gone{i}"), 6 * MB, 3 * MB).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(s);
    }
    // A client waiting for its share vanishes while it waits.
    let mut a = half_set(addr, "a", 6 * MB, 3 * MB).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(half_set(addr, "waiting", 6 * MB, 0).await);
    tokio::time::sleep(Duration::from_millis(700)).await;
    finish_set(&mut a, 3 * MB).await;
    assert_eq!(reply_line(&mut a).await, "+OK\r\n");
    // The whole budget is there again: 6 MiB, then 9 MiB in one value.
    for (key, len) in [("b", 6 * MB), ("c", 9 * MB)] {
        let mut s = half_set(addr, key, len, 0).await;
        finish_set(&mut s, len).await;
        assert_eq!(reply_line(&mut s).await, "+OK\r\n", "{key}");
        assert_eq!(store.get(b"", key.as_bytes()).await.unwrap().map(|v| v.len()), Some(len));
    }
    // Nothing of the vanished clients' values was stored.
    for key in ["gone0", "gone4", "waiting"] {
        assert_eq!(store.get(b"", key.as_bytes()).await.unwrap(), None, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_get_returns_the_value_it_replaced_even_under_racing_writers() {
    // A 64 KiB DRAM tier over SSD: the old value is often on the SSD, so
    // reading it takes I/O while other writers race.
    let (addr, _store) = start(64 << 10, Some(8 << 20)).await;
    let mut first = Client::connect(addr).await.unwrap();
    first.set(b"k", &value("init", 9000)).await.unwrap();
    let mut tasks = Vec::new();
    for c in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut cl = Client::connect(addr).await.unwrap();
            let mut got = Vec::new();
            for i in 0..40 {
                let mine = format!("c{c}-{i}");
                // Other keys push the old value out of DRAM now and then.
                cl.set(format!("filler-{c}-{i}").as_bytes(), &value("f", 9000)).await.unwrap();
                match cl.call(&[&b"SET"[..], b"k", &value(&mine, 9000), b"GET"]).await.unwrap() {
                    Reply::Bulk(old) => got.push(old),
                    other => panic!("SET GET answered {other:?}"),
                }
            }
            got
        }));
    }
    let mut olds = Vec::new();
    for t in tasks {
        olds.extend(t.await.unwrap());
    }
    // Every SET replaced exactly one value: the initial one and each
    // written value but the last are returned once each, never twice.
    let last = first.get(b"k").await.unwrap().unwrap();
    let mut written: Vec<Bytes> =
        (0..8).flat_map(|c| (0..40).map(move |i| Bytes::from(value(&format!("c{c}-{i}"), 9000)))).collect();
    written.push(Bytes::from(value("init", 9000)));
    written.retain(|v| *v != last);
    written.sort();
    olds.sort();
    assert_eq!(olds.len(), written.len());
    assert!(olds == written, "a value was returned twice or one that was never replaced");
}

fn err_text(r: Reply) -> String {
    match r {
        Reply::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A port with users: nothing runs before AUTH, wrong passwords and
/// names are refused, `HELLO 3 AUTH` works in one step, and a user kept
/// to namespaces starts in its own and cannot reach the others.
#[tokio::test]
async fn with_users_nothing_runs_before_auth_and_tenants_keep_to_their_namespaces() {
    let mut access = strata_kv::auth::Access::open();
    access.add_user("default", b"s3cret").unwrap();
    access.add_tenant("tenant-a", b"pa", &["a"]).unwrap();
    let (addr, store) = start_with(1 << 20, None, ServerConfig { access, ..ServerConfig::default() }).await;

    let mut c = Client::connect(addr).await.unwrap();
    for cmd in [&["SET", "k", "v"][..], &["GET", "k"], &["PING"], &["KV.NS", "a"], &["FLUSHALL"]] {
        assert_eq!(err_text(c.call(cmd).await.unwrap()), "NOAUTH Authentication required.", "{cmd:?}");
    }
    assert!(err_text(c.call(&["HELLO", "3"]).await.unwrap()).starts_with("NOAUTH HELLO must be called"));
    assert!(err_text(c.call(&["AUTH", "wrong"]).await.unwrap()).starts_with("WRONGPASS"));
    assert!(err_text(c.call(&["AUTH", "tenant-a", "s3cret"]).await.unwrap()).starts_with("WRONGPASS"));
    assert!(err_text(c.call(&["HELLO", "3", "AUTH", "default", "anything"]).await.unwrap()).starts_with("WRONGPASS"));
    assert_eq!(store.stats().keys, 0, "nothing ran");
    c.auth(None, b"s3cret").await.unwrap();
    c.set(b"k", b"v").await.unwrap();
    assert_eq!(c.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));

    // HELLO 3 AUTH in one step; RESP3 from then on.
    let mut h = Client::connect(addr).await.unwrap();
    assert!(matches!(h.call(&["HELLO", "3", "AUTH", "default", "s3cret"]).await.unwrap(), Reply::Map(_)));
    assert_eq!(h.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]));

    // A tenant: lands in "a", cannot leave it or reach everything.
    let mut t = Client::connect(addr).await.unwrap();
    t.auth(Some("tenant-a"), b"pa").await.unwrap();
    assert_eq!(t.call(&["KV.NS"]).await.unwrap(), Reply::Bulk(Bytes::from("a")));
    assert_eq!(t.get(b"k").await.unwrap(), None, "the default namespace's key is not in 'a'");
    t.set(b"k", b"tenant").await.unwrap();
    for cmd in [&["KV.NS", ""][..], &["KV.NS", "b"], &["KV.DELNS", ""], &["FLUSHALL"], &["KV.QUOTA", "a", "100"]] {
        assert!(err_text(t.call(cmd).await.unwrap()).starts_with("NOPERM User tenant-a"), "{cmd:?}");
    }
    assert_eq!(c.get(b"k").await.unwrap().as_deref(), Some(&b"v"[..]), "the default namespace is untouched");
    assert_eq!(store.stats().keys, 2);
}

/// A port without users answers `AUTH password` as Redis does without a
/// password, and lets `HELLO 3 AUTH default ...` in (the default user has
/// no password); any other user is refused.
#[tokio::test]
async fn an_open_port_answers_auth_as_redis_without_a_password() {
    let (addr, _store) = start(1 << 20, None).await;
    let mut c = Client::connect(addr).await.unwrap();
    assert!(err_text(c.call(&["AUTH", "x"]).await.unwrap()).contains("without any password configured"));
    assert!(matches!(c.call(&["HELLO", "3", "AUTH", "default", "x"]).await.unwrap(), Reply::Map(_)));
    assert!(err_text(c.call(&["AUTH", "someone", "x"]).await.unwrap()).starts_with("WRONGPASS"));
    c.set(b"k", b"v").await.unwrap();
}

/// What a web page can make a browser send: a POST whose body is Redis
/// commands. The connection closes at the request line: the body's SET
/// never runs, with or without a password, and other clients go on.
#[tokio::test]
async fn an_http_post_closes_the_connection_before_its_body_runs() {
    for host_first in [false, true] {
        let (addr, store) = start(1 << 20, None).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = if host_first {
            "Host: 127.0.0.1:6380\r\nSET pwned yes\r\n".to_string()
        } else {
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:6380\r\nContent-Length: 15\r\n\r\nSET pwned yes\r\n".to_string()
        };
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        // A close (or a reset: the rest of the request was never read).
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await.expect("closed");
        assert!(got.is_empty(), "no answer, just a close: {:?}", String::from_utf8_lossy(&got));
        let mut c = Client::connect(addr).await.unwrap();
        assert_eq!(c.get(b"pwned").await.unwrap(), None, "the POST's body ran");
        assert_eq!(store.stats().keys, 0);
    }
}
