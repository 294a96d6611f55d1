//! Filling the modelled cluster with volumes until its first drive is full.
//!
//! Every volume is written whole, chunk after chunk, and every chunk puts
//! its extents on each node of its group (one copy each). A node's drives
//! fill most-free-first (`drives.rs`), so the first drive of the cluster
//! fills when some node reaches its [`first_full_at`](super::drives::first_full_at)
//! allocation; the fill stops after the chunk that gets there.
//!
//! Chunks of a volume are striped over the groups (`ChunkId::pg`), so a
//! volume of `c` chunks adds `c / groups` chunks to every group and one
//! more to a run of `c mod groups` consecutive groups. The fill applies a
//! volume that way, in time proportional to the groups it touches rather
//! than to its chunks, and replays only the last volume chunk by chunk.

use crate::placement::{CHUNK_SIZE, ChunkId, PlacementTable};

/// The cluster as the fill sees it; nodes are indexed by id.
pub(crate) struct Cluster<'a> {
    /// Where every group's copies live.
    pub(crate) table: &'a PlacementTable,
    /// Per node id: the allocation (in extents) that fills its first drive.
    pub(crate) first_full: &'a [u64],
    /// Bytes per extent.
    pub(crate) extent_bytes: u64,
}

/// The state when the first drive filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filled {
    /// Extents held by one copy of each group.
    pub(crate) pg_extents: Vec<u64>,
    /// Extents allocated on each node (by id).
    pub(crate) node_extents: Vec<u64>,
    /// Volumes written (the last one partly).
    pub(crate) volumes: u64,
    /// Volume bytes written (one copy).
    pub(crate) logical_bytes: u64,
}

/// Accumulated extents: every group holds `base` plus its `extra`.
struct Counts<'a> {
    cluster: &'a Cluster<'a>,
    groups: u64,
    base: u64,
    extra: Vec<u64>,
    /// Per node: the sum of `extra` over its groups.
    node_extra: Vec<u64>,
    /// Per node: groups it holds.
    node_groups: Vec<u64>,
}

impl Counts<'_> {
    fn node_extents(&self, n: usize) -> u64 {
        self.base * self.node_groups[n] + self.node_extra[n]
    }

    fn full(&self, n: usize) -> bool {
        self.node_extents(n) >= self.cluster.first_full[n]
    }

    /// Adds (or with `undo`, removes) `extents` to one group.
    fn add(&mut self, pg: u64, extents: u64, undo: bool) {
        let step = |x: &mut u64| *x = if undo { *x - extents } else { *x + extents };
        step(&mut self.extra[pg as usize]);
        for n in self.cluster.table.nodes(pg as u32) {
            step(&mut self.node_extra[n.0 as usize]);
        }
    }

    /// Adds a whole volume of `chunks` full chunks and a `tail` of extents
    /// (may be 0) starting at group `start`.
    fn add_volume(&mut self, start: u64, chunks: u64, tail: u64, chunk_extents: u64, undo: bool) {
        let per_group = chunks / self.groups * chunk_extents;
        self.base = if undo { self.base - per_group } else { self.base + per_group };
        for k in 0..chunks % self.groups {
            self.add((start + k) % self.groups, chunk_extents, undo);
        }
        if tail > 0 {
            self.add((start + chunks) % self.groups, tail, undo);
        }
    }
}

/// Writes `volumes` into `cluster` until the first drive is full.
pub(crate) fn fill(cluster: &Cluster<'_>, volumes: impl Iterator<Item = super::workload::Volume>) -> Filled {
    let groups = u64::from(cluster.table.pg_count().max(1));
    let nodes = cluster.first_full.len();
    let mut node_groups = vec![0u64; nodes];
    for pg in 0..groups {
        for n in cluster.table.nodes(pg as u32) {
            node_groups[n.0 as usize] += 1;
        }
    }
    let mut c =
        Counts { cluster, groups, base: 0, extra: vec![0; groups as usize], node_extra: vec![0; nodes], node_groups };
    let chunk_extents = CHUNK_SIZE.div_ceil(cluster.extent_bytes);
    let (mut written, mut logical) = (0u64, 0u64);
    for vol in volumes {
        let (chunks, tail_bytes) = (vol.bytes / CHUNK_SIZE, vol.bytes % CHUNK_SIZE);
        let tail = tail_bytes.div_ceil(cluster.extent_bytes);
        let start = u64::from(ChunkId { volume: vol.id, index: 0 }.pg(groups as u32));
        c.add_volume(start, chunks, tail, chunk_extents, false);
        written += 1;
        if !(0..nodes).any(|n| c.full(n)) {
            logical += vol.bytes;
            continue;
        }
        // This volume fills a drive: take it back and replay it chunk by
        // chunk up to the chunk that does.
        c.add_volume(start, chunks, tail, chunk_extents, true);
        for index in 0..chunks + u64::from(tail > 0) {
            let (extents, bytes) = if index < chunks { (chunk_extents, CHUNK_SIZE) } else { (tail, tail_bytes) };
            let pg = (start + index) % groups;
            c.add(pg, extents, false);
            logical += bytes;
            if cluster.table.nodes(pg as u32).iter().any(|n| c.full(n.0 as usize)) {
                break;
            }
        }
        break;
    }
    Filled {
        pg_extents: c.extra.iter().map(|e| c.base + e).collect(),
        node_extents: (0..nodes).map(|n| c.node_extents(n)).collect(),
        volumes: written,
        logical_bytes: logical,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Placer;
    use crate::sim::workload::Volume;

    const MIB: u64 = 1 << 20;

    /// The fill computed chunk by chunk, the slow and obvious way.
    fn naive(cluster: &Cluster<'_>, volumes: &[Volume]) -> Filled {
        let groups = cluster.table.pg_count();
        let mut pg_extents = vec![0u64; groups as usize];
        let mut node_extents = vec![0u64; cluster.first_full.len()];
        let (mut written, mut logical) = (0, 0);
        let chunk_extents = CHUNK_SIZE / cluster.extent_bytes;
        for v in volumes {
            written += 1;
            for index in 0..v.bytes.div_ceil(CHUNK_SIZE) {
                let bytes = (v.bytes - index * CHUNK_SIZE).min(CHUNK_SIZE);
                let extents = if bytes == CHUNK_SIZE { chunk_extents } else { bytes.div_ceil(cluster.extent_bytes) };
                let pg = ChunkId { volume: v.id, index }.pg(groups);
                pg_extents[pg as usize] += extents;
                logical += bytes;
                let mut full = false;
                for n in cluster.table.nodes(pg) {
                    node_extents[n.0 as usize] += extents;
                    full |= node_extents[n.0 as usize] >= cluster.first_full[n.0 as usize];
                }
                if full {
                    return Filled { pg_extents, node_extents, volumes: written, logical_bytes: logical };
                }
            }
        }
        Filled { pg_extents, node_extents, volumes: written, logical_bytes: logical }
    }

    #[test]
    fn striped_fill_matches_chunk_by_chunk_fill() {
        let map = crate::placement::test_utils::cluster(12, 3, 3, 64, |_| 1 << 40);
        let table = Placer::new(&map).table();
        // Nodes of 40 GiB in 1 MiB extents, 4 drives each.
        let first_full = vec![40 * 1024 - 3; 12];
        let cluster = Cluster { table: &table, first_full: &first_full, extent_bytes: MIB };
        let mut rng = crate::sim::rng::Rng::new(11);
        let volumes: Vec<Volume> =
            (1..400).map(|id| Volume { id, bytes: (1 + rng.below(300)) * 7 * MIB + rng.below(5) * 4096 }).collect();
        let fast = fill(&cluster, volumes.iter().copied());
        let slow = naive(&cluster, &volumes);
        assert_eq!(fast, slow);
        let fullest = (0..12).max_by_key(|&n| fast.node_extents[n] as i64 - first_full[n] as i64).expect("nodes");
        assert!(fast.node_extents[fullest] >= first_full[fullest], "the fill stops at a full drive");
        assert!(fast.volumes > 10, "{} volumes", fast.volumes);
    }
}
