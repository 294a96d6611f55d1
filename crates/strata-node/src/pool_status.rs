//! The pool's status as `GET /api/v1/pool` answers it (see `docs/api.md`):
//! one set of types that the node fills in and the CLI reads back, so
//! that the server and its printers cannot drift apart field by field.
//!
//! Every field has a default, so that an answer from an older node (a
//! field it lacks) still reads; the printer shows what is missing as `-`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_pool::placement::NodeState;
use strata_pool::registry::PoolSettings;

/// The whole pool, as one node sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolStatus {
    /// The node that answered.
    pub node: String,
    /// The placement map's epoch (`None` before the first map).
    pub map_epoch: Option<u64>,
    /// The nodes of the map, removed ones left out.
    pub nodes: Vec<NodeStatus>,
    /// Every volume.
    pub volumes: Vec<VolumeStatus>,
    /// The pool's settings.
    pub settings: PoolSettings,
    /// Fill warnings, for people.
    pub warnings: Vec<String>,
    /// Capacity, allocation and room.
    pub totals: Totals,
}

/// Whether a node has a live record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// Its lease holds.
    Up,
    /// No live record.
    #[default]
    Down,
}

/// One node of the map.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    /// The node's id.
    pub id: u32,
    /// The node's name.
    pub name: String,
    /// Whether it has a live record.
    pub state: Liveness,
    /// Its state in the placement map (up, down, out).
    pub placement: NodeState,
    /// How fast the volumes it owns rebuild, bytes per second.
    pub rebuild_bytes_per_sec: u64,
    /// Its failure-domain labels.
    pub labels: BTreeMap<String, String>,
    /// Its capacity (its weight in the map), bytes.
    pub capacity_bytes: u64,
    /// Bytes allocated on its drives (`None` while it is down).
    pub allocated_bytes: Option<u64>,
    /// Where its fabric listens (while it is up).
    pub fabric: Option<String>,
    /// Where hosts connect to it (while it is up).
    pub listen: Option<String>,
    /// Its drives (none while it is down).
    pub drives: Vec<DriveStatus>,
}

/// One drive of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriveStatus {
    /// Device or file path.
    pub path: String,
    /// Raw capacity, bytes.
    pub capacity_bytes: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Taken out of service after an I/O error.
    pub failed: bool,
}

impl From<&strata_pool::registry::DriveRecord> for DriveStatus {
    fn from(d: &strata_pool::registry::DriveRecord) -> DriveStatus {
        DriveStatus {
            path: d.path.clone(),
            capacity_bytes: d.capacity_bytes,
            allocated_bytes: d.allocated_bytes,
            failed: d.failed,
        }
    }
}

/// A volume's health, for people and for alerts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Served, every holder in sync and up, in place.
    Healthy,
    /// Served, a holder not in sync (and not being copied back) or down.
    Degraded,
    /// Served, a holder being copied back (or a move being filled).
    Resyncing,
    /// Served, moving to a newer placement.
    Moving,
    /// Served, moving while a holder is stale or down.
    Rebuilding,
    /// An owner holds its key but does not serve it (yet).
    #[serde(rename = "not served")]
    NotServed,
    /// No owner, and too few in-sync holders are up for one to take it.
    Down,
    /// No owner yet; a holder takes it over.
    Offline,
    /// A state this version does not know (a newer node answered).
    #[default]
    #[serde(other)]
    Unknown,
}

impl Health {
    /// How the status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Resyncing => "resyncing",
            Health::Moving => "moving",
            Health::Rebuilding => "rebuilding",
            Health::NotServed => "not served",
            Health::Down => "down",
            Health::Offline => "offline",
            Health::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the status knows of a volume, to tell its health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthInputs {
    /// An owner key names a node.
    pub owned: bool,
    /// The owner's live record lists it as served.
    pub served: bool,
    /// Too few in-sync holders are up to serve every chunk.
    pub short_of_live: bool,
    /// Its state records a move.
    pub moving: bool,
    /// The map is newer than its placement (a move is due).
    pub move_due: bool,
    /// A holder is not in sync.
    pub stale: bool,
    /// A holder has no live record.
    pub down: bool,
    /// The owner copies a stale holder back.
    pub resyncing: bool,
    /// The owner fills a holder a move adds.
    pub filling: bool,
}

/// A volume's health from what the status knows of it.
pub fn health(h: HealthInputs) -> Health {
    if !h.owned {
        // Not served until a holder takes it over, which waits for
        // enough of its in-sync nodes.
        if h.short_of_live { Health::Down } else { Health::Offline }
    } else if !h.served {
        Health::NotServed
    } else if h.moving {
        if h.stale || h.down { Health::Rebuilding } else { Health::Moving }
    } else if h.stale {
        if h.resyncing { Health::Resyncing } else { Health::Degraded }
    } else if h.down {
        // In sync on paper, but a holder is not up.
        Health::Degraded
    } else if h.filling {
        Health::Resyncing
    } else if h.move_due {
        Health::Moving
    } else {
        Health::Healthy
    }
}

/// One volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeStatus {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u64,
    /// Its size, bytes.
    pub size_bytes: u64,
    /// Its size for people.
    pub size: String,
    /// Its logical block size, bytes.
    pub block_size: u32,
    /// Its subsystem NQN.
    pub nqn: String,
    /// Its namespace UUID.
    pub uuid: String,
    /// `rep:N` or `ec:K+M`.
    pub protection: String,
    /// The node its owner key names.
    pub owner: Option<u32>,
    /// That node's name, while it is up.
    pub owner_name: Option<String>,
    /// Where hosts connect while it is served (discovery on any node
    /// lists it there).
    pub address: Option<String>,
    /// Its ownership epoch.
    pub epoch: u64,
    /// The nodes that hold it.
    pub replicas: Vec<u32>,
    /// Those of its nodes that are in sync.
    pub in_sync: Vec<u32>,
    /// Its health.
    pub state: Health,
    /// Bytes allocated for it on every node together.
    pub allocated_bytes: u64,
    /// The map epoch it is placed at.
    pub map_epoch: u64,
    /// The map epoch a recorded move takes it to.
    pub moving_to: Option<u64>,
    /// The nodes that move adds.
    pub joining: Vec<u32>,
    /// Its holders without a live record.
    pub down: Vec<u32>,
    /// When it has no owner for too few in-sync holders: the ones down.
    pub waiting_for: Option<Vec<u32>>,
    /// The copies its owner runs.
    pub resync: Vec<FillStatus>,
}

/// What a copy does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FillKind {
    /// Fills a node a move adds (a rebuild, drain or rebalance).
    Rebuild,
    /// Copies a stale holder back.
    #[default]
    Resync,
}

/// One copy an owner runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FillStatus {
    /// The node it copies to.
    pub node: u32,
    /// What it does.
    pub kind: FillKind,
    /// Regions left to copy.
    pub regions_left: u64,
    /// Bytes left to copy.
    pub bytes_left: u64,
    /// The most it had left since it began.
    pub bytes_total: u64,
    /// The owner's rebuild rate, bytes per second.
    pub rate_bytes_per_sec: u64,
    /// When it should end, at that rate.
    pub eta_secs: Option<u64>,
}

/// The pool's capacity, allocation and room.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Every node's capacity together.
    pub raw_bytes: u64,
    /// Every volume's size together.
    pub provisioned_bytes: u64,
    /// Bytes allocated on every node.
    pub allocated_bytes: u64,
    /// Raw less allocated.
    pub free_bytes: u64,
    /// Allocated over raw, percent.
    pub fill_percent: f64,
    /// The fill that placement sees (the fullest node weighs in), percent.
    pub effective_fill_percent: f64,
    /// About how many more bytes of each protection fit.
    pub room_bytes: BTreeMap<String, u64>,
    /// The fullest node.
    pub fullest_node: Option<Fullest>,
}

/// The fullest node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Fullest {
    /// Its name.
    pub name: String,
    /// How full, percent.
    pub fill_percent: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_names_each_case_as_the_api_always_has() {
        let served = HealthInputs { owned: true, served: true, ..HealthInputs::default() };
        let cases = [
            (HealthInputs::default(), "offline"),
            (HealthInputs { short_of_live: true, ..HealthInputs::default() }, "down"),
            (HealthInputs { owned: true, ..HealthInputs::default() }, "not served"),
            (served, "healthy"),
            (HealthInputs { moving: true, ..served }, "moving"),
            (HealthInputs { moving: true, down: true, ..served }, "rebuilding"),
            (HealthInputs { stale: true, ..served }, "degraded"),
            (HealthInputs { stale: true, resyncing: true, ..served }, "resyncing"),
            (HealthInputs { down: true, ..served }, "degraded"),
            (HealthInputs { filling: true, ..served }, "resyncing"),
            (HealthInputs { move_due: true, ..served }, "moving"),
        ];
        for (inputs, want) in cases {
            let h = health(inputs);
            assert_eq!(h.as_str(), want, "{inputs:?}");
            assert_eq!(serde_json::to_value(h).unwrap(), serde_json::json!(want), "serialized as before");
            let back: Health = serde_json::from_value(serde_json::json!(want)).unwrap();
            assert_eq!(back, h);
        }
        let newer: Health = serde_json::from_value(serde_json::json!("frobnicating")).unwrap();
        assert_eq!(newer, Health::Unknown, "a newer node's state reads");
    }

    #[test]
    fn an_older_node_answer_with_missing_fields_reads() {
        let s: PoolStatus = serde_json::from_value(serde_json::json!({
            "nodes": [{"id": 1, "name": "n1", "drives": [{"failed": true}]}],
            "volumes": [{"name": "v", "owner": null}],
        }))
        .unwrap();
        assert_eq!(s.nodes[0].state, Liveness::Down);
        assert!(s.nodes[0].drives[0].failed);
        assert_eq!(s.volumes[0].state, Health::Unknown);
        assert_eq!(s.totals, Totals::default());
    }

    #[test]
    fn a_status_reads_back_as_it_was_written() {
        let s = PoolStatus {
            node: "n1".into(),
            map_epoch: Some(4),
            nodes: vec![NodeStatus { id: 1, name: "n1".into(), state: Liveness::Up, ..NodeStatus::default() }],
            volumes: vec![VolumeStatus {
                name: "v".into(),
                state: Health::NotServed,
                resync: vec![FillStatus {
                    node: 2,
                    kind: FillKind::Rebuild,
                    eta_secs: Some(3),
                    ..FillStatus::default()
                }],
                ..VolumeStatus::default()
            }],
            totals: Totals {
                fullest_node: Some(Fullest { name: "n1".into(), fill_percent: 12.5 }),
                ..Totals::default()
            },
            ..PoolStatus::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["volumes"][0]["state"], "not served");
        assert_eq!(v["volumes"][0]["resync"][0]["kind"], "rebuild");
        assert_eq!(v["nodes"][0]["state"], "up");
        let back: PoolStatus = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
