//! Connect refusals are logged: in a test binary of its own, because it
//! captures logs with a thread-local subscriber, and tests running beside
//! it on other threads can make tracing cache a callsite as uninteresting
//! (seen as a flaky run of the full suite).

mod common;

use std::sync::{Arc, Mutex};

use common::raw::*;
use common::{NQN, start};
use strata_target::Subsystem;

/// What a test thread logged.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn lines_with(&self, needle: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }
}

/// Only two of the refusals were logged (no such subsystem, host not
/// allowed); an operator could not tell why a host's other Connects
/// failed. Each refusal is now logged exactly once, with the reason, the
/// host NQN and the subsystem NQN. (The runtime is single threaded so the
/// connection tasks log to this thread's subscriber.)
#[tokio::test]
async fn every_refused_connect_is_logged_once_with_its_reason_and_nqns() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let fx = start(16).await;
    let private = Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec![HOSTNQN.into()]);
    fx.target.add_subsystem(private).unwrap();
    let disc = "nqn.2014-08.org.nvmexpress.discovery";

    // (host NQN marking the case, SUBNQN, QID, SQSIZE, CNTLID, reason).
    let cases = [
        ("nqn.h:recfmt", NQN, 0, 31, 0xffff, "record format 1 is not 0"),
        ("nqn.h:sqsize", NQN, 0, 0, 0xffff, "SQSIZE 0 is outside 1..=31"),
        ("nqn.h:nosub", "nqn.2026-11.io.strata:nope", 0, 31, 0xffff, "no such subsystem"),
        ("nqn.h:stranger", "nqn.2026-11.io.strata:private", 0, 31, 0xffff, "host not allowed"),
        ("nqn.h:cntlid", NQN, 0, 31, 7, "CNTLID 0x7 on an admin queue"),
        ("nqn.h:noctrl", NQN, 1, 31, 0x1234, "no controller 0x1234"),
        ("nqn.h:discio", disc, 1, 31, 0xffff, "I/O queue 1 for the discovery subsystem"),
        ("nqn.h:\u{e9}\u{301}", NQN, 0, 31, 0xffff, "HOSTNQN in connect data is not a valid NQN"),
    ];
    for (i, (hostnqn, subnqn, qid, sqsize, cntlid, _)) in cases.iter().enumerate() {
        let mut sqe = connect_sqe(i as u16, *qid, *sqsize);
        if hostnqn.ends_with("recfmt") {
            sqe.bytes_mut()[40] = 1;
        }
        let mut data = connect_data(HOSTID, *cntlid, subnqn, hostnqn);
        if !hostnqn.is_ascii() {
            data[512 + hostnqn.len() - 1] = 0xff; // not UTF-8 any more
        }
        let mut s = queue(fx.io).await;
        send(&mut s, &sqe, &data).await;
        assert_ne!(status(&read_cqe(&mut s).await), 0, "{hostnqn} refused");
    }
    for (hostnqn, subnqn, _, _, _, reason) in cases {
        let marker = if hostnqn.is_ascii() { hostnqn } else { "nqn.h:\u{e9}" };
        let lines = logs.lines_with(marker);
        let refusals: Vec<_> = lines.iter().filter(|l| l.contains("connect refused")).collect();
        assert_eq!(refusals.len(), 1, "{hostnqn}: {lines:#?}");
        assert!(refusals[0].contains(reason), "{hostnqn}: {}", refusals[0]);
        assert!(refusals[0].contains(subnqn), "{hostnqn}: {}", refusals[0]);
    }
}
