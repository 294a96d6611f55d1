//! Filling the modelled cluster with volumes until its first drive is full.
//!
//! Every volume is written whole, chunk after chunk, and every chunk puts
//! its extents on each node of its group: a whole copy for `rep:N`, one
//! shard for `ec:K+M`. A shard of a chunk of `b` bytes holds `ceil(b / K)`
//! bytes (the data is dealt over the K data shards in small units, so
//! every shard of a chunk, parity included, has the same length), rounded
//! up to whole extents of the node store: the extents a node allocates for
//! it. So every slot of a group holds the same extents, and a group's
//! state is one number. A node's drives
//! fill most-free-first (`drives.rs`), so the first drive of the cluster
//! fills when some node reaches its [`first_full_at`](super::drives::first_full_at)
//! allocation; the fill stops after the chunk that gets there.
//!
//! Chunks of a volume are striped over the groups (`ChunkId::pg`), so a
//! volume of `c` chunks adds `c / groups` chunks to every group and one
//! more to a run of `c mod groups` consecutive groups: the state after any
//! number of whole volumes is a difference array and a prefix sum away,
//! in time proportional to groups plus volumes. Nodes only ever gain
//! extents, so "some drive is full after k volumes" is monotone in k; a
//! binary search finds the volume that fills the first drive, and only
//! that volume is replayed chunk by chunk.

use super::workload::Volume;
use crate::placement::{CHUNK_SIZE, ChunkId, PlacementTable};

/// A bound on the volumes taken.
const MAX_VOLUMES: usize = 1 << 20;

/// Marks an empty slot in the flattened rows.
const EMPTY: u32 = u32::MAX;

/// The cluster as the fill sees it; nodes are indexed by id.
#[derive(Clone, Copy)]
pub(crate) struct Cluster<'a> {
    /// Where every group's copies live.
    pub(crate) table: &'a PlacementTable,
    /// Per node id: the allocation (in extents) that fills its first drive.
    pub(crate) first_full: &'a [u64],
    /// Bytes per extent.
    pub(crate) extent_bytes: u64,
    /// Pieces a chunk's data is cut into (`Protection::data_shards`): 1
    /// for copies, K for `ec:K+M`.
    pub(crate) data_shards: u64,
}

/// Extents each slot of a group allocates for a chunk of `bytes`: its copy
/// or shard, `ceil(bytes / data_shards)` bytes, in whole extents.
pub(crate) fn slot_extents(bytes: u64, data_shards: u64, extent_bytes: u64) -> u64 {
    bytes.div_ceil(data_shards.max(1)).div_ceil(extent_bytes)
}

/// The state when the first drive filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filled {
    /// Extents held by each slot (copy or shard) of each group.
    pub(crate) pg_extents: Vec<u64>,
    /// Extents allocated on each node (by id).
    pub(crate) node_extents: Vec<u64>,
    /// Volumes written (the last one partly).
    pub(crate) volumes: u64,
    /// Volume bytes written: the data, before copies or parity.
    pub(crate) logical_bytes: u64,
}

/// A volume as the fill applies it.
#[derive(Debug, Clone, Copy)]
struct Planned {
    start: u64,
    chunks: u64,
    /// Extents per slot of the last, partial chunk (0 if none).
    tail: u64,
    tail_bytes: u64,
    bytes: u64,
}

/// The cluster's rows, flattened for the hot loops.
struct Rows {
    groups: u64,
    width: usize,
    nodes: Vec<u32>,
    chunk_extents: u64,
}

impl Rows {
    fn of(&self, pg: u64) -> impl Iterator<Item = usize> + '_ {
        let at = pg as usize * self.width;
        self.nodes[at..at + self.width].iter().take_while(|&&n| n != EMPTY).map(|&n| n as usize)
    }

    /// Extents per group and per node after the whole of `plan`.
    fn state(&self, plan: &[Planned], nodes: usize) -> (Vec<u64>, Vec<u64>) {
        let groups = self.groups as usize;
        let mut runs = vec![0i64; groups + 1];
        let mut pg_extents = vec![0u64; groups];
        let mut base = 0u64;
        for v in plan {
            base += v.chunks / self.groups * self.chunk_extents;
            let (start, end) = (v.start as usize, (v.start + v.chunks % self.groups) as usize);
            runs[start] += 1;
            if end <= groups {
                runs[end] -= 1;
            } else {
                runs[groups] -= 1;
                runs[0] += 1;
                runs[end - groups] -= 1;
            }
            if v.tail > 0 {
                pg_extents[((v.start + v.chunks) % self.groups) as usize] += v.tail;
            }
        }
        let mut covered = 0i64;
        for (pg, e) in pg_extents.iter_mut().enumerate() {
            covered += runs[pg];
            // `covered` counts volumes whose run covers pg: never negative.
            *e += base + covered.unsigned_abs() * self.chunk_extents;
        }
        let mut node_extents = vec![0u64; nodes];
        for (pg, &e) in pg_extents.iter().enumerate() {
            for n in self.of(pg as u64) {
                node_extents[n] += e;
            }
        }
        (pg_extents, node_extents)
    }
}

/// Writes `volumes` into `cluster` until the first drive is full.
pub(crate) fn fill(cluster: &Cluster<'_>, volumes: impl Iterator<Item = Volume>) -> Filled {
    let table = cluster.table;
    let groups = u64::from(table.pg_count().max(1));
    let width = table.width();
    let mut rows = Rows { groups, width, nodes: vec![EMPTY; groups as usize * width], chunk_extents: 0 };
    for pg in 0..groups {
        for (k, n) in table.nodes(pg as u32).iter().enumerate() {
            rows.nodes[pg as usize * width + k] = n.0;
        }
    }
    rows.chunk_extents = slot_extents(CHUNK_SIZE, cluster.data_shards, cluster.extent_bytes);
    let min_copies = (0..groups).map(|pg| rows.of(pg).count() as u64).min().unwrap_or(0);
    let capacity: u64 = cluster.first_full.iter().sum();
    let nodes = cluster.first_full.len();
    if min_copies == 0 {
        // A group without nodes: no node is up, nothing can be written.
        return Filled {
            pg_extents: vec![0; groups as usize],
            node_extents: vec![0; nodes],
            volumes: 0,
            logical_bytes: 0,
        };
    }
    let full = |node_extents: &[u64]| node_extents.iter().zip(cluster.first_full).any(|(e, f)| e >= f);

    // Enough volumes to surely fill a drive: more extents than all first
    // drives together can take.
    let mut plan = Vec::new();
    let mut extents = 0u64;
    for v in volumes {
        let (chunks, tail_bytes) = (v.bytes / CHUNK_SIZE, v.bytes % CHUNK_SIZE);
        let tail = slot_extents(tail_bytes, cluster.data_shards, cluster.extent_bytes);
        let start = u64::from(ChunkId { volume: v.id, index: 0 }.pg(groups as u32));
        plan.push(Planned { start, chunks, tail, tail_bytes, bytes: v.bytes });
        extents += chunks * rows.chunk_extents + tail;
        if extents * min_copies > capacity || plan.len() >= MAX_VOLUMES {
            break;
        }
    }
    let (pg_all, node_all) = rows.state(&plan, nodes);
    if !full(&node_all) {
        let logical_bytes = plan.iter().map(|v| v.bytes).sum();
        return Filled { pg_extents: pg_all, node_extents: node_all, volumes: plan.len() as u64, logical_bytes };
    }
    // The fewest whole volumes that fill a drive: full after `hi`, not after `lo`.
    let (mut lo, mut hi) = (0usize, plan.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if full(&rows.state(&plan[..mid], nodes).1) { hi = mid } else { lo = mid }
    }
    // Volume `lo` fills it: replay it chunk by chunk.
    let (mut pg_extents, mut node_extents) = rows.state(&plan[..lo], nodes);
    let mut logical_bytes: u64 = plan[..lo].iter().map(|v| v.bytes).sum();
    let v = plan[lo];
    for index in 0..v.chunks + u64::from(v.tail > 0) {
        let (e, bytes) = if index < v.chunks { (rows.chunk_extents, CHUNK_SIZE) } else { (v.tail, v.tail_bytes) };
        let pg = (v.start + index) % groups;
        pg_extents[pg as usize] += e;
        logical_bytes += bytes;
        let mut filled = false;
        for n in rows.of(pg) {
            node_extents[n] += e;
            filled |= node_extents[n] >= cluster.first_full[n];
        }
        if filled {
            break;
        }
    }
    Filled { pg_extents, node_extents, volumes: lo as u64 + 1, logical_bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Placer;

    const MIB: u64 = 1 << 20;

    /// The fill computed chunk by chunk, the slow and obvious way.
    fn naive(cluster: &Cluster<'_>, volumes: &[Volume]) -> Filled {
        let groups = cluster.table.pg_count();
        let mut pg_extents = vec![0u64; groups as usize];
        let mut node_extents = vec![0u64; cluster.first_full.len()];
        let (mut written, mut logical) = (0, 0);
        for v in volumes {
            written += 1;
            for index in 0..v.bytes.div_ceil(CHUNK_SIZE) {
                let bytes = (v.bytes - index * CHUNK_SIZE).min(CHUNK_SIZE);
                let extents = slot_extents(bytes, cluster.data_shards, cluster.extent_bytes);
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
    fn shards_are_rounded_up_to_whole_extents() {
        assert_eq!(slot_extents(CHUNK_SIZE, 1, MIB), 64, "a copy");
        assert_eq!(slot_extents(CHUNK_SIZE, 8, MIB), 8, "ec:8+M: 8 MiB shards");
        assert_eq!(slot_extents(CHUNK_SIZE, 3, MIB), 22, "ec:3+M: 21.3 MiB shards");
        assert_eq!(slot_extents(5 * MIB + 1, 1, MIB), 6);
        assert_eq!(slot_extents(4096, 4, MIB), 1, "a partial chunk still takes an extent per shard");
        assert_eq!(slot_extents(0, 4, MIB), 0);
        assert_eq!(slot_extents(CHUNK_SIZE, 4, 4096), 4096);
    }

    #[test]
    fn striped_fill_matches_chunk_by_chunk_fill() {
        for protection in ["rep:3", "ec:4+2", "ec:3+2"] {
            let protection: crate::placement::Protection = protection.parse().expect("valid");
            let map = crate::placement::test_utils::cluster_with(protection, 12, 2, 64, |_| 1 << 40);
            let table = Placer::new(&map).table();
            // Nodes of 40 GiB in 1 MiB extents, 4 drives each.
            let first_full = vec![40 * 1024 - 3; 12];
            let data_shards = protection.data_shards() as u64;
            let cluster = Cluster { table: &table, first_full: &first_full, extent_bytes: MIB, data_shards };
            let mut rng = strata_rand::Rng::new(11);
            let volumes: Vec<Volume> = (1..2000)
                .map(|id| Volume { id, bytes: (1 + rng.below(300)) * 7 * MIB + rng.below(5) * 4096 })
                .collect();
            let fast = fill(&cluster, volumes.iter().copied());
            let slow = naive(&cluster, &volumes);
            assert_eq!(fast, slow, "{protection}");
            let fullest = (0..12).max_by_key(|&n| fast.node_extents[n] as i64 - first_full[n] as i64).expect("nodes");
            assert!(fast.node_extents[fullest] >= first_full[fullest], "{protection}: the fill stops at a full drive");
            assert!(fast.volumes > 10, "{protection}: {} volumes", fast.volumes);
            // Every slot holds 1/K of the data, rounded up to extents per
            // chunk: ec:3+2 stores 5 x 22 MiB per 64 MiB chunk, not 5/3.
            let stored: u64 = fast.node_extents.iter().sum::<u64>() * MIB;
            let per_data = stored as f64 / fast.logical_bytes as f64;
            let per_full_chunk = (protection.width() as u64 * slot_extents(CHUNK_SIZE, data_shards, MIB) * MIB) as f64
                / CHUNK_SIZE as f64;
            assert!(
                per_data >= protection.raw_per_data() && per_data < per_full_chunk * 1.05,
                "{protection}: {per_data} bytes stored per byte written, {per_full_chunk} per full chunk"
            );
        }
    }
}
