//! The node's sources of events (`strata_events`): the target's access
//! events (connects, refusals, authentication failures, disconnects), and
//! watchers that compare what they saw last with what they see now —
//! drives crossing fill thresholds or failing, nodes changing state,
//! volumes becoming degraded or healthy again.
//!
//! The comparisons are pure ([`DriveWatch::observe`],
//! [`PoolWatch::observe`]): state in, events out, so that each transition
//! is tested without a node; [`spawn_drive_watch`] and
//! [`spawn_pool_watch`] only poll and emit.
//!
//! Invariant: a watcher's first observation records the state it finds
//! and reports only what is already wrong (a drive already past a
//! threshold, a volume already degraded), never "became healthy".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_events::{EventLog, NewEvent, Severity};
use strata_node::pool_status::{Health, Liveness, PoolStatus};

/// Fill thresholds, percent: crossing one upwards is an event (a warning
/// from the first, an error from the last), and so is falling back below
/// the first.
pub const FILL_THRESHOLDS: [u8; 3] = [80, 90, 95];

/// How often the watchers look.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// The target's access events as events: every connect and refusal, each
/// failed authentication, each disconnect.
pub fn access_sink(events: Arc<EventLog>) -> strata_target::AccessSink {
    Arc::new(move |e: strata_target::AccessEvent| {
        use strata_target::AccessKind as K;
        let (kind, severity, what) = match e.kind {
            K::Connected => ("host.connected", Severity::Info, "connected"),
            K::ConnectRefused => ("host.refused", Severity::Warning, "was refused"),
            K::AuthenticationFailed => ("host.auth_failed", Severity::Warning, "failed authentication"),
            K::Disconnected => ("host.disconnected", Severity::Info, "disconnected"),
            K::KeepAliveExpired => ("host.keep_alive_expired", Severity::Warning, "went silent (keep-alive expired)"),
            // Success of the step after Connect: the connect event said it.
            K::Authenticated => return,
        };
        let mut ev = NewEvent::new(kind, severity, format!("{} from {} {what} ({})", e.hostnqn, e.peer, e.subnqn))
            .host(e.hostnqn.clone());
        if !e.detail.is_empty() {
            ev = ev.reason(e.detail.clone());
        }
        events.emit(ev);
    })
}

/// One drive as a watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveSeen {
    /// Its path (the event's `drive`).
    pub path: String,
    /// The node it is on, on a cluster.
    pub node: Option<String>,
    /// Bytes allocated.
    pub used: u64,
    /// Bytes in all.
    pub capacity: u64,
    /// Out of service after an error.
    pub failed: bool,
}

/// The highest threshold `used` of `capacity` has reached (0: none).
pub fn fill_level(used: u64, capacity: u64) -> u8 {
    if capacity == 0 {
        return 0;
    }
    let pct = (u128::from(used) * 100 / u128::from(capacity)) as u64;
    FILL_THRESHOLDS.iter().copied().filter(|&t| pct >= u64::from(t)).max().unwrap_or(0)
}

/// What the drive watcher saw last: each drive's fill level and failure.
#[derive(Debug, Default)]
pub struct DriveWatch {
    seen: BTreeMap<String, (u8, bool)>,
}

impl DriveWatch {
    /// Events for what changed since the last call.
    pub fn observe(&mut self, drives: &[DriveSeen]) -> Vec<NewEvent> {
        let mut out = Vec::new();
        for d in drives {
            let level = fill_level(d.used, d.capacity);
            let (was_level, was_failed) = self.seen.get(&d.path).copied().unwrap_or((0, false));
            let tag = |e: NewEvent| {
                let e = e.drive(d.path.clone());
                match &d.node {
                    Some(n) => e.node(n.clone()),
                    None => e,
                }
            };
            if d.failed && !was_failed {
                out.push(tag(NewEvent::new(
                    "drive.failed",
                    Severity::Error,
                    format!("drive {} failed and was taken out of service (restart to recover)", d.path),
                )));
            }
            if level > was_level {
                let severity = if level >= FILL_THRESHOLDS[2] { Severity::Error } else { Severity::Warning };
                out.push(tag(NewEvent::new(
                    "drive.fill",
                    severity,
                    format!("drive {} is {}% full ({} of {} bytes allocated)", d.path, level, d.used, d.capacity),
                )));
            } else if level == 0 && was_level > 0 {
                out.push(tag(NewEvent::new(
                    "drive.fill",
                    Severity::Info,
                    format!("drive {} is below {}% full again", d.path, FILL_THRESHOLDS[0]),
                )));
            }
            self.seen.insert(d.path.clone(), (level, d.failed));
        }
        out
    }
}

/// What the pool watcher saw last.
#[derive(Debug, Default)]
pub struct PoolWatch {
    first: bool,
    nodes: BTreeMap<String, (Liveness, String)>,
    volumes: BTreeMap<String, Health>,
    drives: DriveWatch,
}

impl PoolWatch {
    /// A watcher that has seen nothing yet.
    pub fn new() -> PoolWatch {
        PoolWatch { first: true, ..PoolWatch::default() }
    }

    /// Events for what changed in the pool since the last call.
    pub fn observe(&mut self, s: &PoolStatus) -> Vec<NewEvent> {
        let first = std::mem::replace(&mut self.first, false);
        let mut out = Vec::new();
        for n in &s.nodes {
            let placement = format!("{:?}", n.placement).to_lowercase();
            let now = (n.state, placement.clone());
            let before = self.nodes.insert(n.name.clone(), now.clone());
            let changed = match &before {
                Some(b) => *b != now,
                None => !first || n.state == Liveness::Down,
            };
            if changed {
                let state = match n.state {
                    Liveness::Up => "up",
                    Liveness::Down => "down",
                };
                let severity = if n.state == Liveness::Down { Severity::Error } else { Severity::Info };
                out.push(
                    NewEvent::new(
                        "node.state",
                        severity,
                        format!("node {} is {state} (placement: {placement})", n.name),
                    )
                    .node(n.name.clone()),
                );
            }
        }
        for v in &s.volumes {
            let before = self.volumes.insert(v.name.clone(), v.state);
            let bad = |h: Health| matches!(h, Health::Degraded | Health::Down | Health::Offline | Health::Rebuilding);
            let report = match before {
                Some(b) => b != v.state,
                None => bad(v.state),
            };
            if report {
                let severity = match v.state {
                    Health::Down | Health::Offline => Severity::Error,
                    Health::Degraded | Health::Rebuilding | Health::NotServed | Health::Unknown => Severity::Warning,
                    Health::Healthy | Health::Resyncing | Health::Moving => Severity::Info,
                };
                out.push(
                    NewEvent::new(
                        "volume.state",
                        severity,
                        format!(
                            "volume {} is {} ({} of {} holders in sync)",
                            v.name,
                            v.state.as_str(),
                            v.in_sync.len(),
                            v.replicas.len()
                        ),
                    )
                    .volume(v.name.clone()),
                );
            }
        }
        let names: Vec<&String> = s.volumes.iter().map(|v| &v.name).collect();
        self.volumes.retain(|k, _| names.contains(&k));
        let drives: Vec<DriveSeen> = s
            .nodes
            .iter()
            .flat_map(|n| {
                n.drives.iter().map(|d| DriveSeen {
                    path: format!("{}:{}", n.name, d.path),
                    node: Some(n.name.clone()),
                    used: d.allocated_bytes,
                    capacity: d.capacity_bytes,
                    failed: d.failed,
                })
            })
            .collect();
        out.extend(self.drives.observe(&drives));
        out
    }
}

/// Watches a single node's drives every [`WATCH_EVERY`].
pub fn spawn_drive_watch(node: Arc<strata_node::node::Node>, events: Arc<EventLog>) {
    tokio::spawn(async move {
        let mut watch = DriveWatch::default();
        loop {
            let stats = node.store().stats();
            let drives: Vec<DriveSeen> = stats
                .drives
                .iter()
                .map(|d| DriveSeen {
                    path: d.path.clone(),
                    node: None,
                    used: d.extents_allocated * u64::from(stats.extent_size),
                    capacity: d.extents_total * u64::from(stats.extent_size),
                    failed: d.failed,
                })
                .collect();
            for e in watch.observe(&drives) {
                events.emit(e);
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    });
}

/// Watches the pool (nodes, volumes, every node's drives) every
/// [`WATCH_EVERY`]; a status that cannot be read (etcd away) is skipped.
pub fn spawn_pool_watch(cluster: Arc<strata_node::cluster::ClusterNode>, events: Arc<EventLog>) {
    tokio::spawn(async move {
        let mut watch = PoolWatch::new();
        loop {
            if let Ok(s) = cluster.status().await {
                for e in watch.observe(&s) {
                    events.emit(e);
                }
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_node::pool_status::{NodeStatus, VolumeStatus};

    fn drive(used: u64, failed: bool) -> DriveSeen {
        DriveSeen { path: "/dev/nvme0n1".into(), node: None, used, capacity: 1000, failed }
    }

    fn kinds(evs: &[NewEvent]) -> Vec<String> {
        evs.iter().map(|e| format!("{e:?}")).collect()
    }

    #[test]
    fn fill_levels_are_the_highest_threshold_reached() {
        assert_eq!(fill_level(0, 0), 0);
        assert_eq!(fill_level(799, 1000), 0);
        assert_eq!(fill_level(800, 1000), 80);
        assert_eq!(fill_level(949, 1000), 90);
        assert_eq!(fill_level(1000, 1000), 95);
        assert_eq!(fill_level(u64::MAX, u64::MAX), 95, "no overflow");
    }

    #[test]
    fn a_drive_crossing_thresholds_and_failing_is_told_once_each() {
        let mut w = DriveWatch::default();
        assert!(w.observe(&[drive(100, false)]).is_empty());
        let e = w.observe(&[drive(850, false)]);
        assert_eq!(e.len(), 1);
        assert!(kinds(&e)[0].contains("drive.fill") && kinds(&e)[0].contains("80% full"), "{e:?}");
        assert!(w.observe(&[drive(860, false)]).is_empty(), "the same level again: nothing");
        let e = w.observe(&[drive(960, false)]);
        assert!(kinds(&e)[0].contains("95% full") && kinds(&e)[0].contains("Error"), "{e:?}");
        let e = w.observe(&[drive(960, true)]);
        assert_eq!(e.len(), 1);
        assert!(kinds(&e)[0].contains("drive.failed"), "{e:?}");
        assert!(w.observe(&[drive(960, true)]).is_empty());
        let e = w.observe(&[drive(10, true)]);
        assert!(kinds(&e)[0].contains("below 80% full again"), "{e:?}");
    }

    #[test]
    fn a_drive_already_full_at_the_first_look_is_told() {
        let mut w = DriveWatch::default();
        let e = w.observe(&[drive(920, false)]);
        assert!(kinds(&e)[0].contains("90% full"), "{e:?}");
    }

    fn status(node_up: bool, vol: Health) -> PoolStatus {
        PoolStatus {
            node: "a".into(),
            map_epoch: Some(1),
            nodes: vec![NodeStatus {
                name: "b".into(),
                state: if node_up { Liveness::Up } else { Liveness::Down },
                ..NodeStatus::default()
            }],
            volumes: vec![VolumeStatus {
                name: "v".into(),
                state: vol,
                replicas: vec![1, 2],
                in_sync: vec![1],
                ..Default::default()
            }],
            settings: Default::default(),
            warnings: vec![],
            totals: Default::default(),
        }
    }

    #[test]
    fn node_and_volume_transitions_are_events_and_a_healthy_start_is_quiet() {
        let mut w = PoolWatch::new();
        assert!(w.observe(&status(true, Health::Healthy)).is_empty(), "all well at the first look: nothing");
        let e = w.observe(&status(false, Health::Degraded));
        let k = kinds(&e);
        assert_eq!(e.len(), 2, "{k:?}");
        assert!(k[0].contains("node.state") && k[0].contains("node b is down"), "{k:?}");
        assert!(k[1].contains("volume.state") && k[1].contains("degraded") && k[1].contains("1 of 2"), "{k:?}");
        assert!(w.observe(&status(false, Health::Degraded)).is_empty());
        let e = w.observe(&status(true, Health::Healthy));
        let k = kinds(&e);
        assert!(k[0].contains("node b is up") && k[1].contains("volume v is healthy"), "{k:?}");
        // A watcher started while a volume is degraded says so at once.
        let mut w = PoolWatch::new();
        assert_eq!(w.observe(&status(true, Health::Degraded)).len(), 1);
    }
}
