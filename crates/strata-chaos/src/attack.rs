//! Misbehaving hosts, and the legitimate host that must still get
//! through while they run.
//!
//! - **Idle sockets**: many TCP connections (more than strata's
//!   pending-connection cap) that never send a byte. strata must close
//!   them once `handshake_timeout` passes.
//! - **Stalled readers**: a controller queues many 1 MiB reads on a
//!   socket with a tiny receive buffer and never reads it. strata must
//!   drop it once `send_timeout` passes without send progress.
//! - **R2T hoarders**: one controller with 64 I/O queues, each with a
//!   queue of 256 KiB writes whose R2Ts it never answers. strata must drop
//!   them once `r2t_timeout` passes, and not hold a buffer per R2T past
//!   its `io_buffer_budget` meanwhile (the RSS sampler watches).
//! - **Connect floods**: connect and disconnect (RST) as fast as
//!   possible, at every stage of the handshake.
//!
//! Attackers run with keep-alive off (KATO 0): the transport's own
//! timeouts must cut them off, not the keep-alive timer.
//!
//! A connection counts as closed by strata when the attacker sees EOF,
//! a reset or a termination PDU within the expected time (the strata
//! timeout plus a slack). Idle sockets and hoarders see that as it
//! happens; a stalled reader cannot see a FIN queued behind the data it
//! does not read, so it polls for a reset while stalled and, at the end
//! of the window, drains its socket to find the close (its time is then
//! reported as the window's end).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use strata_host::Controller;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::block::{self, BLOCK_SIZE};
use crate::ctx::{Ctx, VolumeRef};
use crate::host::{NSID, host_config};
use crate::oracle::{Value, WriteOutcome};
use crate::raw::{self, AssocOptions, HostIdent, Incoming, RawAssoc};
use strata_rand::Rng;

/// What an attacker saw of its connection.
#[derive(Debug, Clone)]
enum Seen {
    /// strata closed it this long after the attack started.
    Closed(Duration),
    /// strata had closed it by the end of the window (the attacker could
    /// only look that late): counted as closed, without a close time.
    ClosedByEnd,
    /// Still open at the end of the window.
    Open,
    /// The attacker could not set it up (not counted).
    NotEstablished(String),
    /// It never got to misbehave (a hoarder queue strata never sent an
    /// R2T, a stalled reader it never sent data, holding them back for its
    /// buffer budget): not counted.
    Untested,
}

/// Adds the attackers' observations to the report, and a failure when
/// strata left some open.
fn tally(ctx: &Ctx, scenario: &str, what: &str, seen: &[Seen], within: Duration) {
    let opened = seen.iter().filter(|s| matches!(s, Seen::Closed(_) | Seen::ClosedByEnd | Seen::Open)).count() as u64;
    let closed_by = seen.iter().filter(|s| matches!(s, Seen::ClosedByEnd)).count();
    let closed: Vec<Duration> =
        seen.iter().filter_map(|s| if let Seen::Closed(d) = s { Some(*d) } else { None }).collect();
    let not_established: Vec<&String> =
        seen.iter().filter_map(|s| if let Seen::NotEstablished(e) = s { Some(e) } else { None }).collect();
    let slowest = closed.iter().max().copied();
    ctx.report(|r| {
        r.ran(scenario);
        r.fault(scenario, opened);
        r.attackers(opened, (closed.len() + closed_by) as u64, slowest);
    });
    let n = closed.len() + closed_by;
    if (n as u64) < opened {
        ctx.fail(scenario, format!("strata closed {n}/{opened} {what} within {within:?} (the rest were still open)"));
    }
    if opened == 0 && !not_established.is_empty() {
        ctx.fail(scenario, format!("no {what} could be set up: {}", not_established[0]));
    }
}

/// Reads and discards until EOF or error (closed: true) or until nothing
/// arrives for `idle` or `total` passes (open: false).
async fn drain(stream: &TcpStream, idle: Duration, total: Duration) -> bool {
    let deadline = Instant::now() + total;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let wait = idle.min(deadline.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return false;
        }
        match tokio::time::timeout(wait, stream.readable()).await {
            Err(_) => return false,
            Ok(Err(_)) => return true,
            Ok(Ok(())) => match stream.try_read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return true,
            },
        }
    }
}

/// Opens `count` sockets that never speak; watches for `within`.
pub async fn idle_sockets(ctx: Arc<Ctx>, count: usize, within: Duration) {
    let start = Instant::now();
    let end = start + within;
    let mut set = JoinSet::new();
    for _ in 0..count {
        let io = ctx.io;
        set.spawn(async move {
            let mut s = match raw::tcp_connect(io, Duration::from_secs(5), None).await {
                Ok(s) => s,
                Err(e) => return Seen::NotEstablished(e.to_string()),
            };
            let mut buf = [0u8; 256];
            loop {
                match tokio::time::timeout_at(end, s.read(&mut buf)).await {
                    Err(_) => return Seen::Open,
                    Ok(Ok(0)) | Ok(Err(_)) => return Seen::Closed(start.elapsed()),
                    // A termination PDU, say: the close follows.
                    Ok(Ok(_)) => {}
                }
            }
        });
    }
    let seen = set.join_all().await;
    tally(&ctx, "idle_sockets", "idle sockets", &seen, within);
}

/// Controllers that queue `reads` reads of 1 MiB each and never read
/// their socket. Each must be closed within `within` of the first data
/// strata sends it; one strata sends nothing before `2 * within` (its
/// buffer budget busy) has not stalled anything yet and is not counted.
pub async fn stalled_readers(
    ctx: Arc<Ctx>,
    vol: VolumeRef,
    readers: usize,
    reads: usize,
    within: Duration,
    rng: &mut Rng,
) {
    let mut set = JoinSet::new();
    for _ in 0..readers {
        let ident = HostIdent::random(rng);
        let (ctx, vol) = (ctx.clone(), vol.clone());
        set.spawn(async move {
            let opts =
                AssocOptions { io_queues: 1, io_queue_size: 64, kato_ms: 0, rcvbuf: Some(4096), min_io_queues: 1 };
            let mut a = match RawAssoc::connect(ctx.io, &vol.nqn, &ident, opts, ctx.watchdog).await {
                Ok(a) => a,
                Err(e) => return Seen::NotEstablished(e.to_string()),
            };
            let q = &mut a.io[0];
            let mut capsules = Vec::new();
            for i in 0..reads {
                let cid = q.next_cid();
                capsules.extend_from_slice(&raw::read_capsule(cid, NSID, (i as u64 % 16) * 256, 256));
            }
            if let Err(e) = q.send(&capsules, Duration::from_secs(5)).await {
                return Seen::NotEstablished(format!("sending reads: {e}"));
            }
            ctx.report(|r| r.op("stalled_read", reads as u64));
            // The reader stalls strata once strata has sent it something:
            // from then on it must be closed within `within`. Reads strata
            // holds back (its buffer budget busy) are not a stall yet.
            let start = Instant::now();
            let mut first_data: Option<Instant> = None;
            let sock = socket2::SockRef::from(q.stream());
            loop {
                let until = first_data.map_or(start + within * 2, |t| t + within);
                if Instant::now() >= until {
                    break;
                }
                if let Ok(Some(_)) = sock.take_error() {
                    return Seen::Closed(first_data.unwrap_or(start).elapsed());
                }
                if first_data.is_none() {
                    let mut one = [std::mem::MaybeUninit::<u8>::uninit(); 1];
                    match sock.peek(&mut one) {
                        Ok(0) => return Seen::Closed(start.elapsed()),
                        Ok(_) => first_data = Some(Instant::now()),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return Seen::Closed(start.elapsed()),
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if first_data.is_none() {
                return Seen::Untested;
            }
            // The window is over: was it closed behind the data?
            let closed = drain(q.stream(), Duration::from_secs(1), Duration::from_secs(8)).await;
            drop(a);
            if closed { Seen::ClosedByEnd } else { Seen::Open }
        });
    }
    let seen = set.join_all().await;
    let untested = seen.iter().filter(|s| matches!(s, Seen::Untested)).count() as u64;
    ctx.report(|r| r.op("stalled_readers_never_served", untested));
    tally(&ctx, "stalled_readers", "stalled readers (from the first data sent to them)", &seen, within);
}

/// One controller with `queues` I/O queues, each sending `writes` writes
/// of `bytes` to `scratch` and never answering the R2Ts. Each queue must
/// be closed within `within` of its first R2T; one strata sends no R2T
/// before `2 * within` (its buffer budget is busy with the others) is
/// not counted.
#[allow(clippy::too_many_arguments)]
pub async fn r2t_hoarders(
    ctx: Arc<Ctx>,
    vol: VolumeRef,
    scratch: Range<u64>,
    queues: u16,
    writes: usize,
    bytes: usize,
    within: Duration,
    rng: &mut Rng,
) {
    let ident = HostIdent::random(rng);
    let opts = AssocOptions { io_queues: queues, io_queue_size: 64, kato_ms: 0, rcvbuf: None, min_io_queues: 1 };
    let a = match RawAssoc::connect(ctx.io, &vol.nqn, &ident, opts, ctx.watchdog).await {
        Ok(a) => a,
        Err(e) => {
            tally(&ctx, "r2t_hoarders", "R2T-hoarding queues", &[Seen::NotEstablished(e.to_string())], within);
            return;
        }
    };
    let RawAssoc { admin, io, .. } = a;
    let blocks = (bytes / BLOCK_SIZE) as u64;
    let span = scratch.end.saturating_sub(scratch.start).saturating_sub(blocks).max(1);
    let start = Instant::now();
    let mut set = JoinSet::new();
    for mut q in io {
        let mut capsules = Vec::new();
        for _ in 0..writes {
            let cid = q.next_cid();
            let lba = scratch.start + rng.below(span);
            capsules.extend_from_slice(&raw::r2t_write_capsule(cid, NSID, lba, bytes));
        }
        set.spawn(async move {
            if let Err(e) = q.send(&capsules, Duration::from_secs(5)).await {
                if e.is_closed_by_peer() {
                    return (Seen::Closed(start.elapsed()), 0u64);
                }
                return (Seen::NotEstablished(e.to_string()), 0);
            }
            let mut r2ts = 0u64;
            let mut first: Option<Instant> = None;
            loop {
                let until = first.map_or(start + within * 2, |t| t + within);
                let since = |first: Option<Instant>| first.unwrap_or(start).elapsed();
                match q.recv(until.saturating_duration_since(Instant::now())).await {
                    Ok(Incoming::R2t(_)) => {
                        r2ts += 1;
                        first.get_or_insert_with(Instant::now);
                    }
                    Ok(Incoming::Term { .. }) => return (Seen::Closed(since(first)), r2ts),
                    Ok(_) => {}
                    Err(raw::RawError::Timeout(..)) if first.is_none() => return (Seen::Untested, 0),
                    Err(raw::RawError::Timeout(..)) => return (Seen::Open, r2ts),
                    Err(e) if e.is_closed_by_peer() => return (Seen::Closed(since(first)), r2ts),
                    Err(e) => return (Seen::NotEstablished(e.to_string()), r2ts),
                }
            }
        });
    }
    let results = set.join_all().await;
    drop(admin);
    let r2ts: u64 = results.iter().map(|(_, n)| n).sum();
    let untested = results.iter().filter(|(s, _)| matches!(s, Seen::Untested)).count() as u64;
    ctx.report(|r| {
        r.op("r2t_hoarded", r2ts);
        r.op("r2t_hoarder_queues_never_served", untested)
    });
    let seen: Vec<Seen> = results.into_iter().map(|(s, _)| s).collect();
    tally(&ctx, "r2t_hoarders", "R2T-hoarding queues (from their first R2T)", &seen, within);
}

/// `tasks` loops connecting and resetting at every stage of the
/// handshake for `duration`.
pub async fn connect_flood(ctx: Arc<Ctx>, vol: VolumeRef, tasks: usize, duration: Duration, rng: &mut Rng) {
    let end = Instant::now() + duration;
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let mut rng = rng.fork();
        let (io, nqn) = (ctx.io, vol.nqn.clone());
        set.spawn(async move {
            let (mut made, mut failed) = (0u64, 0u64);
            while Instant::now() < end {
                let t = Duration::from_secs(2);
                let ok = match rng.below(4) {
                    0 => raw::tcp_connect(io, t, None).await.is_ok(),
                    1 => raw::RawConn::open(io, t, None).await.is_ok(),
                    2 => raw::connect_only(io, &nqn, &HostIdent::random(&mut rng), t).await.is_ok(),
                    _ => {
                        let opts = AssocOptions { io_queues: 0, ..AssocOptions::default() };
                        RawAssoc::connect(io, &nqn, &HostIdent::random(&mut rng), opts, t).await.is_ok()
                    }
                };
                // Whatever was opened is dropped here: a TCP RST.
                made += 1;
                failed += u64::from(!ok);
            }
            (made, failed)
        });
    }
    let results = set.join_all().await;
    let made: u64 = results.iter().map(|r| r.0).sum();
    let failed: u64 = results.iter().map(|r| r.1).sum();
    ctx.report(|r| {
        r.ran("connect_floods");
        r.fault("connect_floods", made);
        r.op("flood_connect_failed", failed);
    });
}

/// When and where a legitimate host probes.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    /// Volume it connects to.
    pub vol: VolumeRef,
    /// Blocks it may write (its own).
    pub region: Range<u64>,
    /// Delay before the first probe (let the attackers settle in).
    pub first: Duration,
    /// Pause between probes.
    pub every: Duration,
    /// No probe starts after this.
    pub until: Instant,
    /// The attacks running, for messages.
    pub label: String,
}

/// A legitimate host connecting and doing one verified write and read,
/// repeatedly as `plan` says, each within the legit deadline.
pub async fn legit_probes(ctx: Arc<Ctx>, plan: ProbePlan, mut rng: Rng) {
    tokio::time::sleep(plan.first).await;
    while Instant::now() < plan.until {
        probe(&ctx, &plan.vol, &plan.region, &plan.label, &mut rng).await;
        tokio::time::sleep(plan.every).await;
    }
}

async fn probe(ctx: &Ctx, vol: &VolumeRef, region: &Range<u64>, label: &str, rng: &mut Rng) {
    let deadline = ctx.legit_deadline;
    let began = Instant::now();
    let until = began + deadline;
    let mut cfg = host_config(ctx, rng, 1);
    cfg.connect_timeout = deadline;
    cfg.io_timeout = deadline;
    let failed = |what: String| {
        ctx.fail("legit_host", format!("while {label} ran, a legitimate host {what}"));
        ctx.report(|r| {
            r.ran("legit_host");
            r.legit_probe(label, deadline)
        });
    };
    // A real host retries a connection strata closed during the
    // handshake; all of it must fit in the deadline.
    let step = Instant::now();
    let connected = tokio::time::timeout_at(until, async {
        loop {
            match Controller::connect(ctx.io, &vol.nqn, &cfg).await {
                Err(e) if e.status().is_none() && Instant::now() + Duration::from_millis(50) < until => {
                    ctx.report(|r| r.op("legit_connect_retry", 1));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    })
    .await;
    ctx.report(|r| r.legit_step("connect", step.elapsed()));
    let ctrl = match connected {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return failed(format!("could not connect: {e}")),
        Err(_) => return failed(format!("could not connect within {deadline:?}")),
    };
    let lba = region.start + rng.below(region.end - region.start);
    let (writer, seq) = (ctx.writer_id(), ctx.seq());
    let data = block::encode_run(vol.id, writer, seq, lba, 1);
    let t = ctx.oracle(|o| o.begin_write(vol.id, lba, 1, Value::Data { writer, seq }));
    let step = Instant::now();
    let w = tokio::time::timeout_at(until, ctrl.write(NSID, lba, data, false)).await;
    ctx.report(|r| r.legit_step("write", step.elapsed()));
    let outcome = match &w {
        Ok(Ok(())) => WriteOutcome::Acked,
        Ok(Err(e)) if e.status().is_some() => WriteOutcome::Failed,
        _ => WriteOutcome::Unknown,
    };
    ctx.oracle(|o| o.end_write(t, outcome, false));
    match w {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return failed(format!("connected but its write failed: {e}")),
        Err(_) => return failed(format!("connected but its write did not complete within {deadline:?}")),
    }
    let step = Instant::now();
    let read = tokio::time::timeout_at(until, ctrl.read(NSID, lba, 1)).await;
    ctx.report(|r| r.legit_step("read", step.elapsed()));
    match read {
        Ok(Ok(back)) => {
            ctx.check_blocks("legit_host", vol.id, lba, &back, None);
        }
        Ok(Err(e)) => return failed(format!("connected but its read failed: {e}")),
        Err(_) => return failed(format!("connected but its read did not complete within {deadline:?}")),
    }
    let took = began.elapsed();
    ctx.report(|r| {
        r.ran("legit_host");
        r.legit_probe(label, took);
        r.op("legit_probe", 1)
    });
    // Leave quietly, in the background, without holding up the next probe.
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), ctrl.disconnect()).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Report;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A server that closes each connection `after` accepting it, or never
    /// (`None`, holding them until the test ends).
    async fn server(after: Option<Duration>) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                match after {
                    Some(d) => {
                        tokio::spawn(async move {
                            tokio::time::sleep(d).await;
                            drop(s);
                        });
                    }
                    None => held.push(s),
                }
            }
        });
        addr
    }

    fn ctx(addr: std::net::SocketAddr) -> Arc<Ctx> {
        Arc::new(Ctx::new(addr, Duration::from_secs(5), Duration::from_secs(5), Report::default()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_sockets_the_server_closes_are_counted_with_their_time() {
        let c = ctx(server(Some(Duration::from_millis(200))).await);
        idle_sockets(c.clone(), 8, Duration::from_secs(3)).await;
        let r = c.snapshot();
        assert_eq!((r.attacker_connections, r.attacker_connections_closed), (8, 8), "{r:?}");
        let slowest = r.attacker_close_max_ms.expect("a close time");
        assert!((150..3000).contains(&slowest), "{slowest} ms");
        assert!(r.is_clean(), "{:?}", r.failures);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_sockets_left_open_are_a_failure() {
        let c = ctx(server(None).await);
        idle_sockets(c.clone(), 4, Duration::from_millis(500)).await;
        let r = c.snapshot();
        assert_eq!((r.attacker_connections, r.attacker_connections_closed), (4, 0));
        assert!(r.failures[0].contains("strata closed 0/4 idle sockets"), "{:?}", r.failures);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_to_attack_is_a_failure_not_a_pass() {
        // A port nobody listens on: every connect is refused.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr")
        };
        let c = ctx(addr);
        idle_sockets(c.clone(), 3, Duration::from_millis(300)).await;
        let r = c.snapshot();
        assert_eq!(r.attacker_connections, 0);
        assert!(!r.is_clean() && r.failures[0].contains("could be set up"), "{:?}", r.failures);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drain_finds_a_close_queued_behind_data_and_an_open_socket() {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut closing, _) = l.accept().await.expect("accept");
            let (mut open, _) = l.accept().await.expect("accept");
            let _ = closing.write_all(&vec![7u8; 1 << 20]).await;
            drop(closing);
            let _ = open.write_all(&[1u8; 4096]).await;
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(open);
        });
        let a = TcpStream::connect(addr).await.expect("connect");
        let b = TcpStream::connect(addr).await.expect("connect");
        assert!(drain(&a, Duration::from_millis(500), Duration::from_secs(5)).await);
        assert!(!drain(&b, Duration::from_millis(300), Duration::from_secs(2)).await);
    }
}
