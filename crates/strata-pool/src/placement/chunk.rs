//! Volumes are cut into chunks, and each chunk belongs to a placement group.
//!
//! # Chunk size: 64 MiB
//!
//! A chunk is the unit whose copies live together on one set of nodes.
//! Nothing is stored per chunk (the group is computed), so the size is a
//! trade between:
//!
//! - spread: a volume touches `min(chunks, groups)` groups, so smaller
//!   chunks spread small volumes and sequential streams over more nodes.
//!   At 64 MiB a 100 GiB volume already has 1,600 chunks, about one per
//!   node of a 2,000-node cluster;
//! - per-chunk state in the layers above: resync bitmaps, write epochs,
//!   rebuild progress. At 64 MiB a 100 TiB volume has 1.6 M chunks (a
//!   200 KB bitmap); at Ceph RBD's 4 MiB it would be 26 M;
//! - requests that straddle chunks: an aligned I/O up to 64 MiB never
//!   does, and NVMe transfers are at most a few MiB;
//! - balance: the fill of a node is the sum of ~half a million chunks at
//!   36 TB per node, so chunk granularity costs nothing measurable;
//! - the node store: a chunk is 64 extents of the default 1 MiB and a
//!   whole number of extents for every power-of-two extent size up to
//!   64 MiB; the node allocates them lazily (thin), so an unwritten chunk
//!   costs nothing.
//!
//! # Chunk to group: hashed start, then striped
//!
//! Chunk `i` of volume `v` goes to group `(h(v) + i) mod pg_count`. The
//! hash spreads volumes' starting points; the stripe then deals a volume's
//! chunks round-robin over the groups, so every group gets either
//! `floor(chunks / groups)` or one more chunk of every volume. A hash per
//! chunk would add Poisson noise to the groups' sizes for nothing. The
//! mapping is stable: it depends only on the volume id, the index and the
//! group count. With power-of-two counts it also survives a split: after
//! doubling, a chunk of group `p` lands in `p` or `p + pg_count`.

use super::hash::volume_key;
use super::map::MAX_PG_COUNT;

/// Bytes in a chunk: 64 MiB (see the module doc).
pub const CHUNK_SIZE: u64 = 64 << 20;

/// Placement-group copies per node that [`pg_count_for`] gives at least:
/// enough for the balancer to even nodes out to about 1% (one copy).
pub const PG_COPIES_PER_NODE: u64 = 100;

/// Partner slots per node (group copies times the other copies of each
/// group) that [`pg_count_for`] gives at least: a failed node's groups then
/// have their other copies on well over a hundred distinct nodes, the
/// sources of its rebuild. Binding only for `rep:2`.
pub const PG_PARTNERS_PER_NODE: u64 = 200;

/// One chunk of one volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkId {
    /// The volume's stable id (`VolumeRecord::id` in strata-meta).
    pub volume: u64,
    /// Chunk index: byte offset / [`CHUNK_SIZE`].
    pub index: u64,
}

impl ChunkId {
    /// The chunk holding byte `offset` of `volume`.
    pub fn at(volume: u64, offset: u64) -> ChunkId {
        ChunkId { volume, index: offset / CHUNK_SIZE }
    }

    /// The placement group of this chunk among `pg_count` groups (a map's
    /// count is a power of two; 0 is treated as 1).
    pub fn pg(self, pg_count: u32) -> u32 {
        let start = volume_key(self.volume);
        let n = u64::from(pg_count.max(1));
        // (start mod n + index mod n) mod n, without overflow.
        ((start % n + self.index % n) % n) as u32 // < n <= u32::MAX
    }
}

/// The placement-group count for a cluster of `nodes` with groups `width`
/// wide: the smallest power of two that gives each node at least
/// [`PG_COPIES_PER_NODE`] group copies and, when groups have partners, at
/// least [`PG_PARTNERS_PER_NODE`] partner slots; capped at [`MAX_PG_COUNT`].
pub fn pg_count_for(nodes: usize, width: usize) -> u32 {
    let (nodes, width) = (nodes as u64, width.max(1) as u64);
    let for_copies = (nodes * PG_COPIES_PER_NODE).div_ceil(width);
    let for_partners = if width > 1 { (nodes * PG_PARTNERS_PER_NODE).div_ceil(width * (width - 1)) } else { 0 };
    let want = for_copies.max(for_partners).max(1);
    let pow = want.checked_next_power_of_two().unwrap_or(u64::MAX);
    u32::try_from(pow.min(u64::from(MAX_PG_COUNT))).unwrap_or(MAX_PG_COUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_is_striped_evenly_over_the_groups() {
        let pgs = 64u32;
        let mut per_pg = vec![0u32; pgs as usize];
        for index in 0..1000 {
            per_pg[ChunkId { volume: 42, index }.pg(pgs) as usize] += 1;
        }
        // 1000 = 15 * 64 + 40: every group gets 15 or 16 chunks.
        assert!(per_pg.iter().all(|&c| c == 15 || c == 16), "{per_pg:?}");
        assert_eq!(per_pg.iter().filter(|&&c| c == 16).count(), 40);
    }

    #[test]
    fn consecutive_chunks_take_consecutive_groups_and_volumes_start_apart() {
        let a = ChunkId { volume: 1, index: 0 }.pg(1 << 16);
        assert_eq!(ChunkId { volume: 1, index: 1 }.pg(1 << 16), (a + 1) % (1 << 16));
        let starts: std::collections::BTreeSet<u32> =
            (0..100).map(|v| ChunkId { volume: v, index: 0 }.pg(1 << 16)).collect();
        assert!(starts.len() > 95, "volume starts collide too often: {}", starts.len());
    }

    #[test]
    fn doubling_the_group_count_splits_each_group_in_two() {
        for volume in 0..20 {
            for index in [0, 1, 7, 1000, u64::MAX] {
                let c = ChunkId { volume, index };
                let before = c.pg(256);
                let after = c.pg(512);
                assert!(after == before || after == before + 256, "{c:?}: {before} -> {after}");
            }
        }
    }

    #[test]
    fn chunk_of_an_offset() {
        assert_eq!(ChunkId::at(3, 0).index, 0);
        assert_eq!(ChunkId::at(3, CHUNK_SIZE - 1).index, 0);
        assert_eq!(ChunkId::at(3, CHUNK_SIZE).index, 1);
        assert_eq!(ChunkId { volume: 3, index: 9 }.pg(0), 0, "0 groups is treated as 1");
    }

    #[test]
    fn default_group_count_gives_at_least_the_target_copies_per_node() {
        assert_eq!(pg_count_for(2500, 3), 131_072);
        assert_eq!(pg_count_for(200, 3), 8192);
        assert_eq!(pg_count_for(2500, 2), 262_144, "rep:2: 200 partners, so 200 copies");
        assert_eq!(pg_count_for(10, 1), 1024);
        assert_eq!(pg_count_for(0, 3), 1);
        assert_eq!(pg_count_for(usize::MAX / 1000, 3), MAX_PG_COUNT);
        for nodes in [1usize, 3, 10, 99, 1000, 4096] {
            for width in 1..=8u64 {
                let c = u64::from(pg_count_for(nodes, width as usize));
                assert!(c.is_power_of_two());
                assert!(c * width >= nodes as u64 * PG_COPIES_PER_NODE, "{nodes} x {width}");
                assert!(
                    c * width * (width - 1) >= nodes as u64 * PG_PARTNERS_PER_NODE || width == 1,
                    "{nodes} x {width}"
                );
            }
        }
    }
}
