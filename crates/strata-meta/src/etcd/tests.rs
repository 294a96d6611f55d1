//! The etcd client against a real etcd ([`crate::testing::EtcdProcess`])
//! and, with the same test bodies, against [`crate::testing::FakeEtcd`]:
//! `on_both!(name)` ([`crate::on_both_etcds`]) runs `name(etcd)` as
//! `name::real` and `name::fake`.
//!
//! Each test starts its own etcd (about half a second) unless it only
//! reads and writes under a key prefix of its own.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::on_both_etcds as on_both;
use crate::testing::EtcdServer;

fn short(etcd: &impl EtcdServer) -> EtcdConfig {
    etcd.config().with_request_timeout(Duration::from_millis(800)).with_connect_timeout(Duration::from_millis(300))
}

on_both!(put_range_delete_round_trip);
async fn put_range_delete_round_trip(etcd: impl EtcdServer) {
    let c = etcd.client();
    let rev = c.put(b"t/a", b"1", None).await.unwrap();
    c.put(b"t/b", b"\x00\xff", None).await.unwrap();
    c.put(b"u/c", b"3", None).await.unwrap();
    let r = c.range(&KeyRange::prefix("t/")).await.unwrap();
    assert_eq!(r.kvs.iter().map(|kv| kv.key.as_slice()).collect::<Vec<_>>(), [b"t/a", b"t/b"]);
    assert_eq!(r.kvs[1].value, b"\x00\xff");
    assert_eq!(r.count, 2);
    let a = c.get(b"t/a").await.unwrap().unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (rev, rev, 1));
    assert_eq!(c.get(b"t/none").await.unwrap(), None);
    assert_eq!(c.delete(&KeyRange::prefix("t/")).await.unwrap(), 2);
    assert_eq!(c.range(&KeyRange::prefix("")).await.unwrap().count, 1, "only u/c is left");
}

on_both!(txn_compare_and_swap_detects_a_concurrent_writer);
async fn txn_compare_and_swap_detects_a_concurrent_writer(etcd: impl EtcdServer) {
    let c = etcd.client();
    c.put(b"k", b"v1", None).await.unwrap();
    let read = c.get(b"k").await.unwrap().unwrap();
    let swap = |value: &'static [u8]| Txn {
        compare: vec![Compare::mod_revision_is("k", read.mod_revision)],
        success: vec![TxnOp::Put { key: b"k".to_vec(), value: value.to_vec(), lease: None }],
        failure: vec![TxnOp::Range(KeyRange::key("k"))],
    };
    // Writer A swaps; writer B, who read the same revision, loses and is
    // shown what A wrote.
    let a = c.txn(&swap(b"from-a")).await.unwrap();
    assert!(a.succeeded);
    assert_eq!(a.responses, vec![TxnOpResponse::Put]);
    let b = c.txn(&swap(b"from-b")).await.unwrap();
    assert!(!b.succeeded);
    match &b.responses[..] {
        [TxnOpResponse::Range(r)] => assert_eq!(r.kvs[0].value, b"from-a"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.get(b"k").await.unwrap().unwrap().value, b"from-a");

    // The other compare targets.
    let cur = c.get(b"k").await.unwrap().unwrap();
    let check = |cmp: Compare| Txn { compare: vec![cmp], ..Txn::default() };
    assert!(c.txn(&check(Compare::value_is("k", "from-a"))).await.unwrap().succeeded);
    assert!(!c.txn(&check(Compare::value_is("k", "from-b"))).await.unwrap().succeeded);
    assert!(!c.txn(&check(Compare::value_is("missing", ""))).await.unwrap().succeeded, "VALUE fails on a missing key");
    assert!(c.txn(&check(Compare::missing("missing"))).await.unwrap().succeeded);
    assert!(!c.txn(&check(Compare::missing("k"))).await.unwrap().succeeded);
    let version = |op, v| Compare { range: KeyRange::key("k"), op, target: CompareTarget::Version(v) };
    assert!(c.txn(&check(version(CompareOp::Equal, cur.version))).await.unwrap().succeeded);
    assert!(c.txn(&check(version(CompareOp::Greater, 1))).await.unwrap().succeeded);
    assert!(c.txn(&check(version(CompareOp::NotEqual, 1))).await.unwrap().succeeded);
    assert!(!c.txn(&check(version(CompareOp::Less, 1))).await.unwrap().succeeded);
    let created = Compare {
        range: KeyRange::key("k"),
        op: CompareOp::Equal,
        target: CompareTarget::CreateRevision(cur.create_revision),
    };
    assert!(c.txn(&check(created)).await.unwrap().succeeded);
    // Over a prefix: every key must satisfy it.
    assert!(c.txn(&check(Compare::unchanged_since("k", cur.mod_revision))).await.unwrap().succeeded);
    assert!(!c.txn(&check(Compare::unchanged_since("k", cur.mod_revision - 1))).await.unwrap().succeeded);
    // A delete in a txn reports its count.
    let del = Txn { success: vec![TxnOp::Delete(KeyRange::prefix("k"))], ..Txn::default() };
    assert_eq!(c.txn(&del).await.unwrap().responses, vec![TxnOpResponse::Delete { deleted: 1 }]);
}

on_both!(a_leased_key_disappears_after_the_ttl_once_keepalive_stops);
async fn a_leased_key_disappears_after_the_ttl_once_keepalive_stops(etcd: impl EtcdServer) {
    let c = etcd.client();
    let lease = c.lease_grant(Duration::from_secs(2)).await.unwrap();
    assert!(lease.ttl_secs >= 2, "{lease:?}");
    c.put(b"node/1", b"alive", Some(lease.id)).await.unwrap();
    assert_eq!(c.get(b"node/1").await.unwrap().unwrap().lease, Some(lease.id));
    // Nobody renews it: etcd expires it within TTL plus its check period.
    let start = Instant::now();
    while c.get(b"node/1").await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(8), "the leased key outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(start.elapsed() >= Duration::from_secs(1), "expired after {:?}, before its TTL", start.elapsed());
    assert_eq!(c.lease_time_to_live(lease.id).await.unwrap(), None);
    assert_eq!(c.lease_keep_alive_once(lease.id).await.unwrap(), None, "a gone lease cannot be renewed");
    let e = c.put(b"node/1", b"again", Some(lease.id)).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

on_both!(the_keeper_keeps_a_lease_alive_and_reports_its_loss);
async fn the_keeper_keeps_a_lease_alive_and_reports_its_loss(etcd: impl EtcdServer) {
    let c = etcd.client();
    // 3 s: renewals every second leave a loaded test machine some slack.
    let lease = c.lease_grant(Duration::from_secs(3)).await.unwrap();
    c.put(b"node/1", b"alive", Some(lease.id)).await.unwrap();
    let keeper = c.keep_alive(lease);
    let status = keeper.subscribe();
    // More than two TTLs later the key is still there, renewed several times.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(c.get(b"node/1").await.unwrap().is_some(), "the keeper let the lease expire");
    assert!(matches!(keeper.status(), LeaseStatus::Alive { ttl_secs: 3.., .. }), "{:?}", keeper.status());
    assert!(status.has_changed().unwrap(), "no renewal was reported");

    // Someone revokes it: the keeper hears at its next renewal.
    c.lease_revoke(lease.id).await.unwrap();
    let loss = tokio::time::timeout(Duration::from_secs(3), keeper.lost()).await.expect("loss not reported");
    assert!(matches!(loss, LeaseLoss::Gone), "{loss:?}");
    assert!(c.get(b"node/1").await.unwrap().is_none());
    // Revoking again is not an error: the lease is gone either way.
    c.lease_revoke(lease.id).await.unwrap();

    // revoke() ends a kept lease at once.
    let lease = c.lease_grant(Duration::from_secs(30)).await.unwrap();
    c.put(b"node/2", b"alive", Some(lease.id)).await.unwrap();
    c.keep_alive(lease).revoke().await.unwrap();
    assert!(c.get(b"node/2").await.unwrap().is_none());
}

on_both!(the_keeper_reports_loss_when_etcd_is_gone_before_the_ttl_ends);
async fn the_keeper_reports_loss_when_etcd_is_gone_before_the_ttl_ends(mut etcd: impl EtcdServer) {
    let c = EtcdClient::new(short(&etcd));
    let lease = c.lease_grant(Duration::from_secs(2)).await.unwrap();
    let keeper = c.keep_alive(lease);
    let granted = Instant::now();
    etcd.kill();
    let loss = tokio::time::timeout(Duration::from_secs(5), keeper.lost()).await.expect("loss not reported");
    assert!(matches!(loss, LeaseLoss::Unreachable(_)), "{loss:?}");
    // Reported once the TTL has run out, not long after: the holder must
    // stop acting on the lease by the time etcd may hand it to another.
    let after = granted.elapsed();
    assert!(after >= Duration::from_millis(1500) && after < Duration::from_secs(5), "{after:?}");
}

on_both!(watch_sees_puts_and_deletes_in_order_and_resumes_after_a_restart);
async fn watch_sees_puts_and_deletes_in_order_and_resumes_after_a_restart(mut etcd: impl EtcdServer) {
    let c = etcd.client();
    c.put(b"before", b"x", None).await.unwrap();
    let mut w = c.watch(KeyRange::prefix("w/"), 0);
    let start = match next(&mut w).await {
        WatchUpdate::Connected { revision } => revision,
        other => panic!("{other:?}"),
    };
    c.put(b"w/a", b"1", None).await.unwrap();
    c.put(b"other", b"ignored", None).await.unwrap();
    c.put(b"w/b", b"2", None).await.unwrap();
    c.delete(&KeyRange::key("w/a")).await.unwrap();
    let both = Txn {
        success: vec![
            TxnOp::Put { key: b"w/c".to_vec(), value: b"3".to_vec(), lease: None },
            TxnOp::Put { key: b"w/d".to_vec(), value: b"4".to_vec(), lease: None },
        ],
        ..Txn::default()
    };
    c.txn(&both).await.unwrap();
    let seen = events(&mut w, 5).await;
    let summary: Vec<(&str, &[u8], &[u8])> = seen
        .iter()
        .map(|e| match e {
            WatchEvent::Put(kv) => ("put", kv.key.as_slice(), kv.value.as_slice()),
            WatchEvent::Delete(kv) => ("delete", kv.key.as_slice(), kv.value.as_slice()),
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("put", &b"w/a"[..], &b"1"[..]),
            ("put", b"w/b", b"2"),
            ("delete", b"w/a", b""),
            ("put", b"w/c", b"3"),
            ("put", b"w/d", b"4")
        ]
    );
    let revs: Vec<i64> = seen.iter().map(|e| e.kv().mod_revision).collect();
    assert!(revs[0] > start && revs.windows(2).all(|p| p[0] <= p[1]), "{revs:?}");
    assert_eq!(revs[3], revs[4], "one txn, one revision");

    // etcd restarts: the watcher reconnects and goes on from where it was,
    // without repeating anything.
    etcd.restart();
    c.put(b"w/e", b"5", None).await.unwrap();
    let after = events(&mut w, 1).await;
    assert!(matches!(&after[..], [WatchEvent::Put(kv)] if kv.key == b"w/e"), "{after:?}");
}

on_both!(a_watch_from_a_compacted_revision_reports_compaction_and_ends);
async fn a_watch_from_a_compacted_revision_reports_compaction_and_ends(etcd: impl EtcdServer) {
    let c = etcd.client();
    let first = c.put(b"w/a", b"1", None).await.unwrap();
    c.put(b"w/a", b"2", None).await.unwrap();
    let last = c.put(b"w/a", b"3", None).await.unwrap();
    c.compact(last).await.unwrap();
    let mut w = c.watch(KeyRange::prefix("w/"), first);
    loop {
        match next(&mut w).await {
            WatchUpdate::Connected { .. } => {}
            WatchUpdate::Compacted { compact_revision } => {
                assert_eq!(compact_revision, last);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap(), None);
    // From the compacted revision on, a watch works.
    let mut w = c.watch(KeyRange::prefix("w/"), last + 1);
    c.put(b"w/a", b"4", None).await.unwrap();
    assert!(matches!(&events(&mut w, 1).await[..], [WatchEvent::Put(kv)] if kv.value == b"4"));
}

on_both!(a_dead_first_endpoint_fails_over_to_the_next);
async fn a_dead_first_endpoint_fails_over_to_the_next(etcd: impl EtcdServer) {
    let dead = Endpoint::parse(&format!("http://127.0.0.1:{}", unused_port())).unwrap();
    let list = format!("{dead},{}", etcd.url());
    let c = EtcdClient::new(EtcdConfig::from_urls(&list).unwrap());
    assert_eq!(c.endpoints().len(), 2);
    c.put(b"k", b"v", None).await.unwrap();
    assert_eq!(c.get(b"k").await.unwrap().unwrap().value, b"v");
    let lease = c.lease_grant(Duration::from_secs(5)).await.unwrap();
    assert!(c.lease_keep_alive_once(lease.id).await.unwrap().is_some());
    let mut w = c.watch(KeyRange::key("k"), 0);
    assert!(matches!(next(&mut w).await, WatchUpdate::Connected { .. }));

    // Every endpoint dead: Unreachable, naming each with its reason.
    let all_dead = EtcdConfig::from_urls(&format!("{dead},http://127.0.0.1:{}", unused_port())).unwrap();
    let e = EtcdClient::new(all_dead).get(b"k").await.unwrap_err();
    match &e {
        EtcdError::Unreachable { tried } => {
            assert_eq!(tried.len(), 2);
            assert!(tried[0].1.contains("refused"), "{tried:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(dead.url()), "{e}");
}

on_both!(a_stopped_etcd_gives_a_typed_error_within_the_deadline);
async fn a_stopped_etcd_gives_a_typed_error_within_the_deadline(mut etcd: impl EtcdServer) {
    let config = short(&etcd);
    let c = EtcdClient::new(config.clone());
    c.put(b"k", b"v", None).await.unwrap();

    // Frozen (SIGSTOP): the kernel accepts connections, nobody answers.
    etcd.pause();
    let started = Instant::now();
    let e = c.put(b"k", b"w", None).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, EtcdError::Timeout { op: "put", .. }), "{e:?}");
    assert!(e.outcome_unknown());
    assert!(took >= config.request_timeout && took < config.request_timeout + Duration::from_millis(500), "{took:?}");
    let e = c.range(&KeyRange::prefix("")).await.unwrap_err();
    assert!(matches!(e, EtcdError::Timeout { .. }), "{e:?}");
    etcd.resume();
    // The timed-out put sat in the frozen etcd's socket buffer: it may
    // have been applied after all, which is what Timeout warns about.
    let now = c.get(b"k").await.unwrap().unwrap().value;
    assert!(now == b"v" || now == b"w", "{now:?}");

    // Killed: connections are refused, at once.
    etcd.kill();
    let started = Instant::now();
    let e = c.put(b"k", b"x", None).await.unwrap_err();
    assert!(matches!(e, EtcdError::Unreachable { .. }), "{e:?}");
    assert!(!e.outcome_unknown());
    assert!(started.elapsed() < config.request_timeout, "{:?}", started.elapsed());
}

on_both!(a_dropped_txn_applies_whole_or_not_at_all);
/// Drops a transaction writing two keys after 1, 2, ... N polls (STYLE:
/// "drop the future after 1, 2, ... N polls"), letting the runtime move
/// the connection along between polls, until one run completes: each time
/// both keys change or neither does.
async fn a_dropped_txn_applies_whole_or_not_at_all(etcd: impl EtcdServer) {
    let c = etcd.client();
    let (mut kept_out, mut landed) = (0, 0);
    for polls in 1..=5000u32 {
        let value = format!("{polls}").into_bytes();
        let txn = Txn {
            success: vec![
                TxnOp::Put { key: b"pair/a".to_vec(), value: value.clone(), lease: None },
                TxnOp::Put { key: b"pair/b".to_vec(), value: value.clone(), lease: None },
            ],
            ..Txn::default()
        };
        let mut fut = Box::pin(c.txn(&txn));
        let mut completed = false;
        for _ in 0..polls {
            let poll = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_ready()));
            if poll.await {
                completed = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(fut);
        let r = c.range(&KeyRange::prefix("pair/")).await.unwrap();
        let values: Vec<&[u8]> = r.kvs.iter().map(|kv| kv.value.as_slice()).collect();
        match values[..] {
            [] => kept_out += 1,
            [a, b] => {
                assert_eq!(a, b, "half a txn is visible after {polls} polls");
                assert_eq!(r.kvs[0].mod_revision, r.kvs[1].mod_revision);
                if a == value.as_slice() { landed += 1 } else { kept_out += 1 }
            }
            _ => panic!("half a txn is visible after {polls} polls: {values:?}"),
        }
        if completed {
            break;
        }
    }
    // Dropped after its first poll (connection opened, request queued), a
    // txn is not applied; polled to the end, it is. Both must have been
    // seen, or this did not test dropping mid-flight.
    assert!(kept_out > 0 && landed > 0, "kept out {kept_out}, landed {landed}");
}

on_both!(leases_survive_a_restart_with_their_ttl_started_afresh);
/// What `FakeEtcd::restart` claims of etcd: the keys of a lease nobody
/// renews outlive a restart by a fresh TTL, then go.
async fn leases_survive_a_restart_with_their_ttl_started_afresh(mut etcd: impl EtcdServer) {
    let c = etcd.client();
    let lease = c.lease_grant(Duration::from_secs(2)).await.unwrap();
    c.put(b"node/1", b"alive", Some(lease.id)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    etcd.kill();
    etcd.restart();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(c.get(b"node/1").await.unwrap().is_some(), "the restart did not start the TTL afresh");
    let start = Instant::now();
    while c.get(b"node/1").await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(8), "the leased key outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both!(a_lease_that_ran_out_while_etcd_was_paused_ends_soon_after_resume);
/// What `FakeEtcd::pause` claims of etcd: nothing expires while it is
/// stopped, and a lease whose TTL ran out meanwhile ends right after it
/// resumes, without a fresh TTL.
async fn a_lease_that_ran_out_while_etcd_was_paused_ends_soon_after_resume(etcd: impl EtcdServer) {
    let c = etcd.client();
    let lease = c.lease_grant(Duration::from_secs(2)).await.unwrap();
    c.put(b"node/1", b"alive", Some(lease.id)).await.unwrap();
    etcd.pause();
    tokio::time::sleep(Duration::from_secs(3)).await;
    etcd.resume();
    let start = Instant::now();
    while c.get(b"node/1").await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_millis(1500), "the lease got a fresh TTL at resume");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn next(w: &mut Watcher) -> WatchUpdate {
    tokio::time::timeout(Duration::from_secs(10), w.next()).await.expect("no watch update").expect("watch ended")
}

/// The next `n` events, skipping connection notices.
async fn events(w: &mut Watcher, n: usize) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        match next(w).await {
            WatchUpdate::Events { events, .. } => out.extend(events),
            WatchUpdate::Connected { .. } | WatchUpdate::Disconnected { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(out.len(), n, "{out:?}");
    out
}

/// A loopback port nothing listens on (it was free a moment ago).
fn unused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// etcd over TLS with client certificates (`--client-cert-auth`): the
/// client with the CA and a certificate the CA signed reads, writes and
/// watches; without a certificate, with one another CA signed, or not
/// trusting etcd's CA, every call fails before anything is sent, with
/// the reason; plain HTTP to the TLS port fails too.
#[tokio::test]
async fn tls_with_client_certificates() {
    let etcd = crate::testing::EtcdProcess::start_tls();
    let tls = etcd.tls().unwrap().clone();
    let c = EtcdClient::checked(etcd.config()).expect("a usable TLS configuration");
    c.put(b"tls/k", b"v", None).await.unwrap();
    assert_eq!(c.get(b"tls/k").await.unwrap().map(|kv| kv.value), Some(b"v".to_vec()));
    let mut w = c.watch(KeyRange::prefix("tls/"), 0);
    assert!(matches!(next(&mut w).await, WatchUpdate::Connected { .. }), "the watch connects over TLS");
    c.put(b"tls/k", b"w", None).await.unwrap();
    assert_eq!(events(&mut w, 1).await[0].kv().value, b"w".to_vec());

    let fast = |t: Option<EtcdTls>| {
        let cfg = etcd.config().with_request_timeout(Duration::from_secs(3));
        EtcdClient::new(EtcdConfig { tls: t, ..cfg })
    };
    let no_cert = EtcdTls { cert: None, key: None, ..tls.client() };
    let rogue = EtcdTls { cert: Some(tls.rogue_cert.clone()), key: Some(tls.rogue_key.clone()), ..tls.client() };
    let untrusting = EtcdTls { ca: Some(tls.rogue_cert.clone()), ..tls.client() };
    for (what, t) in
        [("no client certificate", no_cert), ("a rogue certificate", rogue), ("etcd not trusted", untrusting)]
    {
        let e = fast(Some(t)).get(b"tls/k").await.expect_err(what);
        assert!(e.to_string().contains("TLS") || e.to_string().contains("tls"), "{what}: {e}");
    }
    let plain = EtcdClient::new(
        EtcdConfig::from_urls(&etcd.url().replace("https", "http"))
            .unwrap()
            .with_request_timeout(Duration::from_secs(3)),
    );
    assert!(plain.get(b"tls/k").await.is_err(), "plain HTTP to a TLS-only etcd");

    // A key without its certificate, or a file that is not there: refused
    // when the client is made, naming the problem.
    let half = EtcdTls { cert: None, ..tls.client() };
    let e = EtcdClient::checked(etcd.config().with_tls(half)).unwrap_err();
    assert!(e.to_string().contains("give both"), "{e}");
    let missing = EtcdTls { ca: Some("/nonexistent/ca.pem".into()), ..tls.client() };
    let e = EtcdClient::checked(etcd.config().with_tls(missing)).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
}
