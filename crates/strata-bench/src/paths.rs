//! The connection a run's jobs share, and its replacement when a path
//! fails (runs with [`WorkloadSpec::failover`](crate::WorkloadSpec::failover)).
//!
//! One controller carries every job's queue. A job whose queue fails on a
//! path asks [`Paths::replace`] for a new one, naming the generation of
//! the connection it saw fail. The first job to ask for a generation
//! reconnects for everyone: it drops the old controller, asks discovery
//! at the target for the best path (optimized first, as
//! [`strata_host::connect_best_with_drivers`] chooses) and keeps trying,
//! with a pause of 5 ms doubling to 200 ms, until the failover time runs
//! out. The new connection has one queue per job; each job takes its own
//! as it notices its old one failed. Jobs that ask later for the same
//! generation only take their queue.
//!
//! A path may connect and still not serve: while a pool volume has no
//! owner, every node answers ANA Transition. A failure on a path that
//! never completed an I/O for the job continues the failover in progress
//! rather than starting one: the pause before the next connect doubles
//! (5 ms to 200 ms), the time limit still counts from the first failure,
//! and the run reports one failover, from that failure to the path that
//! served.
//!
//! A job still on an older generation keeps running until its own queue
//! fails (the target drops it once the old controller's keep-alive ends),
//! and then takes a queue of the newest generation.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use strata_host::{Controller, HostConfig, QueueDriver};

use crate::result::Failover;

/// The first pause between reconnect rounds; it doubles up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// The shared connection of one run.
pub(crate) struct Paths {
    /// Where discovery is asked, in order: the target, then every path
    /// its discovery listed at the start (any of them may be the one
    /// that is down).
    seeds: Vec<SocketAddr>,
    nqn: String,
    nsid: u32,
    /// The namespace's size in blocks: a path that shows another size is
    /// not the same volume.
    nsze: u64,
    cfg: HostConfig,
    /// How long one failover may take (`None`: runs without failover,
    /// whose jobs never ask).
    failover: Option<Duration>,
    /// Each job's busy-poll budget, set on new queues too.
    poll: Option<Duration>,
    started: Instant,
    state: tokio::sync::Mutex<State>,
}

/// A controller, its queues and its path's address.
type Connection = (Controller, Vec<QueueDriver<u16>>, SocketAddr);

struct State {
    generation: u64,
    ctrl: Option<Controller>,
    addr: SocketAddr,
    /// The current generation's queues not yet taken, by job.
    queues: Vec<Option<QueueDriver<u16>>>,
    events: Vec<Failover>,
    /// When the failover in progress began: set by a reconnect, and kept
    /// by the next one if the path it chose never served.
    open: Option<Instant>,
    /// The pause before the next connect of a failover in progress.
    pause: Duration,
}

/// What the run knows when it has connected.
pub(crate) struct Connected {
    pub(crate) seeds: Vec<SocketAddr>,
    pub(crate) addr: SocketAddr,
    pub(crate) nqn: String,
    pub(crate) nsid: u32,
    pub(crate) nsze: u64,
    pub(crate) cfg: HostConfig,
    pub(crate) failover: Option<Duration>,
    pub(crate) poll: Option<Duration>,
}

impl Paths {
    /// The connection `ctrl` (at `c.addr`), generation 0; its queues were
    /// handed to the jobs.
    pub(crate) fn new(ctrl: Controller, c: Connected) -> Paths {
        Paths {
            seeds: c.seeds,
            nqn: c.nqn,
            nsid: c.nsid,
            nsze: c.nsze,
            cfg: c.cfg,
            failover: c.failover,
            poll: c.poll,
            started: Instant::now(),
            state: tokio::sync::Mutex::new(State {
                generation: 0,
                ctrl: Some(ctrl),
                addr: c.addr,
                queues: Vec::new(),
                events: Vec::new(),
                open: None,
                pause: FIRST_PAUSE,
            }),
        }
    }

    /// Whether jobs fail over (else a path failure ends the run).
    pub(crate) fn fails_over(&self) -> bool {
        self.failover.is_some()
    }

    /// A queue for job `job`, whose queue of generation `seen` failed at
    /// `since` because of `cause` (`served`: after it completed an I/O on
    /// that path), and the generation it belongs to. Gives up when `stop`
    /// is set or the failover time since the failover began has passed.
    ///
    /// # Errors
    ///
    /// Why no path could be had, for the run's abort message.
    pub(crate) async fn replace(
        &self,
        job: usize,
        seen: u64,
        cause: &str,
        since: Instant,
        served: bool,
        stop: &AtomicBool,
    ) -> Result<(QueueDriver<u16>, u64), String> {
        let Some(limit) = self.failover else { return Err(cause.to_string()) };
        let mut st = self.state.lock().await;
        if st.generation == seen {
            self.reconnect(&mut st, cause, since, served, limit, stop).await?;
        }
        let generation = st.generation;
        let queue = st
            .queues
            .get_mut(job)
            .and_then(Option::take)
            .ok_or_else(|| format!("job {job}: the connection at {} has no queue for it", st.addr))?;
        Ok((queue, generation))
    }

    async fn reconnect(
        &self,
        st: &mut State,
        cause: &str,
        since: Instant,
        served: bool,
        limit: Duration,
        stop: &AtomicBool,
    ) -> Result<(), String> {
        // The old controller goes first: its keep-alive ends, so the
        // target drops what is left of it.
        st.ctrl = None;
        st.queues.clear();
        tracing::info!(path = %st.addr, %cause, "path failure: connecting again");
        let go_on = !served && st.open.is_some();
        let began = if go_on { st.open.unwrap_or(since) } else { since };
        let deadline = began + limit;
        let mut pause = if go_on { st.pause } else { FIRST_PAUSE };
        if go_on {
            // The path chosen last did not serve: give the pool time.
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
        st.pause = pause;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(format!("stopped while failing over from {cause}"));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let limit = self.cfg.connect_timeout.min(left).max(Duration::from_millis(100));
            let last = match self.connect(st.addr, limit).await {
                Ok((ctrl, queues, addr)) => {
                    let reconnect_ms = began.elapsed().as_secs_f64() * 1000.0;
                    tracing::info!(path = %addr, reconnect_ms, "failed over");
                    match st.events.last_mut() {
                        Some(last) if go_on => {
                            last.path = addr.to_string();
                            last.reconnect_ms = reconnect_ms;
                        }
                        _ => st.events.push(Failover {
                            at_s: since.saturating_duration_since(self.started).as_secs_f64(),
                            cause: cause.to_string(),
                            path: addr.to_string(),
                            reconnect_ms,
                        }),
                    }
                    st.open = Some(began);
                    st.ctrl = Some(ctrl);
                    st.addr = addr;
                    st.queues = queues.into_iter().map(Some).collect();
                    st.generation += 1;
                    return Ok(());
                }
                Err(e) => e,
            };
            if Instant::now() + pause > deadline {
                return Err(format!(
                    "no path to {} within {:?} of {cause}; the last try: {last}",
                    self.nqn,
                    self.failover.unwrap_or_default()
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
            st.pause = pause;
        }
    }

    /// One round: the best path, checked to serve the same namespace.
    async fn connect(&self, last: SocketAddr, limit: Duration) -> Result<Connection, String> {
        let (ctrl, mut queues, addr) =
            strata_host::connect_best_with_drivers::<u16>(&self.seeds, Some(last), &self.nqn, &self.cfg, limit)
                .await
                .map_err(|e| e.to_string())?;
        let id = tokio::time::timeout(limit, ctrl.identify_namespace(self.nsid))
            .await
            .map_err(|_| format!("identifying namespace {} at {addr} timed out", self.nsid))?
            .map_err(|e| format!("identifying namespace {} at {addr}: {e}", self.nsid))?;
        if id.nsze != self.nsze {
            return Err(format!("namespace {} at {addr} has {} blocks, not {}", self.nsid, id.nsze, self.nsze));
        }
        if let Some(p) = self.poll {
            for q in &mut queues {
                q.set_busy_poll(p);
            }
        }
        Ok((ctrl, queues, addr))
    }

    /// The failovers so far, in order.
    pub(crate) async fn events(&self) -> Vec<Failover> {
        self.state.lock().await.events.clone()
    }

    /// Disconnects the current controller (within 5 s).
    pub(crate) async fn disconnect(&self) {
        let ctrl = self.state.lock().await.ctrl.take();
        if let Some(c) = ctrl
            && let Err(e) = tokio::time::timeout(Duration::from_secs(5), c.disconnect()).await.unwrap_or(Ok(()))
        {
            tracing::debug!("disconnecting from {}: {e}", self.nqn);
        }
    }
}

/// `target` and every path its discovery lists for `nqn` (just `target`
/// when it has none or does not answer within `limit`).
pub(crate) async fn known_paths(target: SocketAddr, nqn: &str, cfg: &HostConfig, limit: Duration) -> Vec<SocketAddr> {
    let mut seeds = vec![target];
    match tokio::time::timeout(limit, strata_host::discover(target, cfg)).await {
        Ok(Ok(entries)) => {
            for a in entries.iter().filter(|e| e.subnqn == nqn).filter_map(|e| e.tcp_socket_addr()) {
                if !seeds.contains(&a) {
                    seeds.push(a);
                }
            }
        }
        Ok(Err(e)) => tracing::debug!(%target, "discovery: {e}"),
        Err(_) => tracing::debug!(%target, "discovery did not answer within {limit:?}"),
    }
    seeds
}
