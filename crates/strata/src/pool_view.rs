//! `strata pool status` for people: the pool API's JSON
//! (`GET /api/v1/pool`, see `docs/api.md`) as tables, with node names
//! rather than ids, each fill (rebuild, drain, resync) on a line of its
//! own with what is left, how fast and when it ends, and the room left
//! for each protection.
//!
//! Pure: a [`PoolStatus`] (or its JSON) in, a `String` out. Fields the
//! JSON lacks (an older node answered) read as their defaults, never as
//! a panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize as _;
use serde_json::Value;
use strata_pool::placement::NodeState;

pub use strata_node::human::{approx_duration, approx_size};
use strata_node::pool_status::{FillKind, Liveness, PoolStatus, VolumeStatus};

/// Bytes for people, or `-` when the answer lacked them.
fn maybe_size(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_string(), approx_size)
}

/// Node ids to names, from the status's node list.
struct Names(BTreeMap<u32, String>);

impl Names {
    fn of(status: &PoolStatus) -> Names {
        Names(status.nodes.iter().map(|n| (n.id, n.name.clone())).collect())
    }

    /// The name of node `id`, or `#id` for a node the map no longer
    /// lists.
    fn name(&self, id: u32) -> String {
        self.0.get(&id).cloned().unwrap_or_else(|| format!("#{id}"))
    }

    fn list(&self, ids: &[u32]) -> Vec<String> {
        ids.iter().map(|&i| self.name(i)).collect()
    }
}

/// The holders of a volume, each marked: `*` not in sync, `!` down.
fn holders(vol: &VolumeStatus, names: &Names) -> String {
    let list: Vec<String> = vol
        .replicas
        .iter()
        .map(|n| {
            let mark = if vol.down.contains(n) {
                "!"
            } else if !vol.in_sync.contains(n) {
                "*"
            } else {
                ""
            };
            format!("{}{mark}", names.name(*n))
        })
        .collect();
    if list.is_empty() { "-".to_string() } else { list.join(",") }
}

/// One line per fill of `vol`: what it copies, how much is done, at what
/// rate, and when it should end.
fn fills(vol: &VolumeStatus, names: &Names, out: &mut String) {
    for r in &vol.resync {
        let what = match r.kind {
            FillKind::Rebuild => "filling",
            FillKind::Resync => "resyncing",
        };
        let left = r.bytes_left;
        let total = r.bytes_total.max(left);
        let done = if total == 0 { 100.0 } else { (total - left) as f64 * 100.0 / total as f64 };
        let rate = r.rate_bytes_per_sec;
        let pace = if rate == 0 {
            "waiting to copy".to_string()
        } else {
            let eta = r.eta_secs.map_or_else(|| "-".to_string(), approx_duration);
            format!("at {}/s, ETA {eta}", approx_size(rate))
        };
        let _ = writeln!(
            out,
            "    {what} {}: {} of {} left ({done:.0}% done), {pace}",
            names.name(r.node),
            approx_size(left),
            approx_size(total),
        );
    }
    if let Some(to) = vol.moving_to {
        let joining = names.list(&vol.joining);
        let joining = if joining.is_empty() { String::new() } else { format!(": {} joining", joining.join(",")) };
        let _ = writeln!(out, "    moving to map epoch {to}{joining}; the current holders serve until it is filled");
    }
    let waiting = names.list(vol.waiting_for.as_deref().unwrap_or_default());
    if !waiting.is_empty() {
        let _ = writeln!(out, "    waiting for {} to come back: too few in-sync holders are up", waiting.join(","));
    }
}

/// The pool API's answer as text. An answer this version cannot read (a
/// field of another type) renders as an empty pool with a warning that
/// says why, never as a panic.
pub fn render(status: &Value) -> String {
    match PoolStatus::deserialize(status) {
        Ok(s) => render_status(&s),
        Err(e) => {
            let unreadable = PoolStatus {
                warnings: vec![format!("the node's answer does not read as a pool status: {e}")],
                ..PoolStatus::default()
            };
            render_status(&unreadable)
        }
    }
}

/// The whole status as text.
pub fn render_status(status: &PoolStatus) -> String {
    let names = Names::of(status);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>4} {:<10} {:>6} {:>10} {:>10} {:>5}  LABELS",
        "NODE", "ID", "STATE", "DRIVES", "CAPACITY", "ALLOCATED", "FILL"
    );
    for n in &status.nodes {
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let failed = n.drives.iter().filter(|d| d.failed).count();
        let drives = if failed > 0 { format!("{}({failed}!)", n.drives.len()) } else { n.drives.len().to_string() };
        let liveness = match n.state {
            Liveness::Up => "up",
            Liveness::Down => "down",
        };
        let state = match n.placement {
            NodeState::Up => liveness.to_string(),
            p => format!("{liveness}/{}", placement_name(p)),
        };
        let fill = match n.allocated_bytes {
            Some(a) if n.capacity_bytes > 0 => format!("{:.0}%", a as f64 * 100.0 / n.capacity_bytes as f64),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<16} {:>4} {:<10} {:>6} {:>10} {:>10} {:>5}  {}",
            n.name,
            n.id,
            state,
            drives,
            approx_size(n.capacity_bytes),
            maybe_size(n.allocated_bytes),
            fill,
            labels.join(",")
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<20} {:>10} {:<7} {:<10} {:<12} HOLDERS (* not in sync, ! down)",
        "VOLUME", "SIZE", "PROT", "OWNER", "STATE"
    );
    for vol in &status.volumes {
        let _ = writeln!(
            out,
            "{:<20} {:>10} {:<7} {:<10} {:<12} {}",
            vol.name,
            approx_size(vol.size_bytes),
            vol.protection,
            vol.owner.map_or_else(|| "-".to_string(), |o| names.name(o)),
            vol.state,
            holders(vol, &names)
        );
        fills(vol, &names, &mut out);
    }
    let t = &status.totals;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "raw {}  provisioned {}  allocated {}  free {}",
        approx_size(t.raw_bytes),
        approx_size(t.provisioned_bytes),
        approx_size(t.allocated_bytes),
        approx_size(t.free_bytes)
    );
    if !t.room_bytes.is_empty() {
        let each: Vec<String> = t.room_bytes.iter().map(|(p, b)| format!("{} of {p}", approx_size(*b))).collect();
        let why = match &t.fullest_node {
            Some(f) => format!(" (the fullest node, {}, is {:.0}% full)", f.name, f.fill_percent),
            None => String::new(),
        };
        let _ = writeln!(out, "room for about {}{why}", each.join(", "));
    }
    for w in &status.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// A node's placement state as the map writes it.
fn placement_name(state: NodeState) -> String {
    serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status() -> Value {
        json!({
            "nodes": [
                {"id": 1, "name": "n0", "state": "up", "placement": "up", "capacity_bytes": 1u64 << 30,
                 "allocated_bytes": 768u64 << 20, "labels": {"rack": "r0"}, "drives": [{"failed": false}]},
                {"id": 2, "name": "n1", "state": "down", "placement": "up", "capacity_bytes": 1u64 << 30,
                 "allocated_bytes": null, "labels": {}, "drives": []},
                {"id": 3, "name": "n2", "state": "up", "placement": "out", "capacity_bytes": 1u64 << 30,
                 "allocated_bytes": 0, "labels": {}, "drives": [{"failed": true}]},
            ],
            "volumes": [
                {"name": "db", "size_bytes": 256u64 << 20, "protection": "rep:3", "owner": 3, "state": "rebuilding",
                 "replicas": [1, 2, 3], "in_sync": [1, 3], "down": [2], "moving_to": 9, "joining": [7],
                 "resync": [{"node": 7, "kind": "rebuild", "bytes_left": 96u64 << 20, "bytes_total": 384u64 << 20,
                             "rate_bytes_per_sec": 1_218_316u64, "eta_secs": 83}]},
                {"name": "off", "size_bytes": 1u64 << 30, "protection": "ec:4+2", "owner": null, "state": "down",
                 "replicas": [1, 2], "in_sync": [1, 2], "down": [2], "waiting_for": [2], "resync": []},
            ],
            "totals": {"raw_bytes": 3u64 << 30, "provisioned_bytes": 5u64 << 29, "allocated_bytes": 768u64 << 20,
                       "free_bytes": (3u64 << 30) - (768u64 << 20),
                       "room_bytes": {"rep:3": 256u64 << 20, "ec:4+2": 512u64 << 20},
                       "fullest_node": {"name": "n0", "fill_percent": 75.0}},
            "warnings": ["the fullest node, n0, is 75% full"],
        })
    }

    #[test]
    fn volumes_name_their_nodes_and_fills_read_in_units_percent_and_eta() {
        let out = render(&status());
        let db = out.lines().find(|l| l.starts_with("db ")).unwrap();
        assert!(db.contains(" n2 "), "the owner by name: {db}");
        assert!(db.ends_with("n0,n1!,n2"), "holders by name, the down one marked: {db}");
        assert!(out.contains("filling #7: 96.0 MiB of 384 MiB left (75% done), at 1.2 MiB/s, ETA 1m 23s"), "{out}");
        assert!(out.contains("moving to map epoch 9: #7 joining"), "{out}");
        assert!(out.contains("waiting for n1 to come back"), "{out}");
        assert!(!out.contains("1218316"), "no raw byte rates: {out}");
        assert!(out.lines().all(|l| l.len() < 120), "every line fits a terminal:\n{out}");
    }

    #[test]
    fn nodes_show_fill_and_placement_state_and_the_room_left_per_protection() {
        let out = render(&status());
        let n0 = out.lines().find(|l| l.starts_with("n0 ")).unwrap();
        assert!(n0.contains("75%") && n0.contains("1.0 GiB") && n0.contains("768 MiB"), "{n0}");
        assert!(out.lines().any(|l| l.starts_with("n2 ") && l.contains("up/out") && l.contains("1(1!)")), "{out}");
        assert!(out.lines().any(|l| l.starts_with("n1 ") && l.contains("down")), "{out}");
        assert!(
            out.contains("room for about 512 MiB of ec:4+2, 256 MiB of rep:3 (the fullest node, n0, is 75% full)"),
            "{out}"
        );
        assert!(out.contains("warning: the fullest node, n0, is 75% full"), "{out}");
    }

    #[test]
    fn a_sparse_answer_renders_without_panicking() {
        for v in [json!({}), json!({"nodes": 3, "volumes": [{"resync": [{}]}], "totals": []}), json!(null)] {
            let out = render(&v);
            assert!(out.contains("VOLUME"), "{out}");
        }
    }

    #[test]
    fn sizes_and_durations_round_for_people() {
        assert_eq!(approx_size(900), "900 B");
        assert_eq!(approx_size(1_218_316), "1.2 MiB");
        assert_eq!(approx_size(384 << 20), "384 MiB");
        assert_eq!(approx_size(u64::MAX), "16.0 EiB");
        assert_eq!(approx_duration(45), "45s");
        assert_eq!(approx_duration(83), "1m 23s");
        assert_eq!(approx_duration(12_000), "3h 20m");
    }
}
