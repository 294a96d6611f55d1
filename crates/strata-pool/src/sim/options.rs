//! What a simulation models, and the checks that keep it meaningful.

use crate::placement::{MAX_NODES, MAX_PG_COUNT, Protection};

/// Decimal terabyte: drives are sold in these.
const TB: u64 = 1_000_000_000_000;
/// Decimal megabyte: bandwidths are given in these a second.
pub(crate) const MB: u64 = 1_000_000;
/// Binary gibibyte.
const GIB: u64 = 1 << 30;

/// The highest per-node rebuild bandwidth accepted, in MB/s (1 TB/s).
pub const MAX_REBUILD_MBPS: u32 = 1_000_000;

/// The modelled cluster and workload. Every field has a default
/// ([`SimOptions::default`]): 2,500 nodes of 24 drives of 1.5 TB in racks
/// of 20, rep:3, rebuilt at 1,000 MB/s a node.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SimOptions {
    /// Storage nodes. Default: 2,500.
    pub nodes: u32,
    /// Drives per node. Default: 24.
    pub drives_per_node: u32,
    /// Bytes per drive. Default: 1.5 TB (1,500,000,000,000 bytes).
    pub drive_bytes: u64,
    /// Nodes per rack (the failure domain); node i is in rack i / size.
    /// Default: 20.
    pub rack_size: u32,
    /// Protection, `rep:N` or `ec:K+M`. Default: rep:3.
    pub protection: Protection,
    /// Seed of every random choice. Default: 1.
    pub seed: u64,
    /// Placement groups (a power of two). Default: `pg_count_for` (at
    /// least 100 group copies and 200 partner slots per node).
    pub pg_count: Option<u32>,
    /// Bytes per extent in the node store. Default: 1 MiB, the store's.
    pub extent_bytes: u64,
    /// Smallest volume. Default: 100 GiB.
    pub volume_min_bytes: u64,
    /// Largest volume. Default: 100 TiB.
    pub volume_max_bytes: u64,
    /// Nodes failed one at a time to measure movement and rebuild.
    /// Default: 3.
    pub fail_samples: u32,
    /// Rebuild bandwidth of one node, in MB/s (10^6 bytes a second), for
    /// reading and for writing at the same time (full duplex), 1 to
    /// [`MAX_REBUILD_MBPS`]. Default: 1,000.
    pub rebuild_mbps: u32,
    /// The balancer's tolerance. Default: 0.01.
    pub tolerance: f64,
    /// Threads for placing every group; the figures do not depend on it.
    /// Default: the machine's available parallelism.
    pub threads: usize,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            nodes: 2500,
            drives_per_node: 24,
            drive_bytes: 3 * TB / 2,
            rack_size: 20,
            protection: Protection::default(),
            seed: 1,
            pg_count: None,
            extent_bytes: 1 << 20,
            volume_min_bytes: 100 * GIB,
            volume_max_bytes: 100 * 1024 * GIB,
            fail_samples: 3,
            rebuild_mbps: 1000,
            tolerance: 0.01,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }
}

/// Why a simulation cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// An option outside its range.
    #[error("{option} = {value}: {why}")]
    Option {
        /// The option's name as the CLI spells it.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        why: String,
    },
    /// The modelled cluster cannot keep the protection's copies apart.
    #[error("the modelled cluster cannot honour the protection: {0}")]
    CannotHonour(#[from] crate::placement::CannotHonour),
    /// A map the simulator built was refused (a bug in the simulator).
    #[error("internal error: {0}")]
    Map(#[from] crate::placement::MapError),
    /// The balancer's table differs from placing its map again (a bug).
    #[error("internal error: the balancer's table differs from the placement of its map")]
    TableMismatch,
}

fn bad(option: &'static str, value: impl ToString, why: impl Into<String>) -> SimError {
    SimError::Option { option, value: value.to_string(), why: why.into() }
}

impl SimOptions {
    /// Checks every option.
    ///
    /// # Errors
    ///
    /// [`SimError::Option`] names the first option out of range and says
    /// what is allowed.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.nodes == 0 || self.nodes as usize > MAX_NODES * 99 / 100 {
            // Room for the 1% added to measure movement.
            return Err(bad("--nodes", self.nodes, format!("give 1 to {}", MAX_NODES * 99 / 100)));
        }
        if !(1..=1024).contains(&self.drives_per_node) {
            return Err(bad("--drives-per-node", self.drives_per_node, "give 1 to 1024"));
        }
        if !self.extent_bytes.is_power_of_two() || !(4096..=crate::placement::CHUNK_SIZE).contains(&self.extent_bytes) {
            return Err(bad("extent size", self.extent_bytes, "a power of two from 4 KiB to the 64 MiB chunk"));
        }
        if self.drive_bytes < crate::placement::CHUNK_SIZE {
            return Err(bad("--drive-size", self.drive_bytes, "at least one 64 MiB chunk"));
        }
        let node_bytes = self.drive_bytes.checked_mul(u64::from(self.drives_per_node));
        if node_bytes.and_then(|b| b.checked_mul(u64::from(self.nodes) * 2)).is_none() {
            return Err(bad("--drive-size", self.drive_bytes, "too large: the cluster's bytes must fit in 64 bits"));
        }
        if self.rack_size == 0 {
            return Err(bad("--rack-size", self.rack_size, "give at least 1"));
        }
        if let Some(p) = self.pg_count
            && (p == 0 || p > MAX_PG_COUNT || !p.is_power_of_two())
        {
            return Err(bad("--pgs", p, format!("a power of two from 1 to {MAX_PG_COUNT}")));
        }
        if self.volume_min_bytes < 4096 || self.volume_min_bytes > self.volume_max_bytes {
            return Err(bad(
                "volume sizes",
                self.volume_min_bytes,
                "the smallest must be at least 4 KiB and at most the largest",
            ));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(bad("threads", self.threads, "give 1 to 256"));
        }
        if !(1..=MAX_REBUILD_MBPS).contains(&self.rebuild_mbps) {
            return Err(bad(
                "--rebuild-mbps",
                self.rebuild_mbps,
                format!("give 1 to {MAX_REBUILD_MBPS} (MB/s a node)"),
            ));
        }
        if !(0.0..=1.0).contains(&self.tolerance) {
            return Err(bad("tolerance", self.tolerance, "from 0 to 1"));
        }
        Ok(())
    }

    /// Nodes added to measure movement: 1% of the nodes, at least one.
    pub fn added_nodes(&self) -> u32 {
        self.nodes.div_ceil(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_the_documented_ones() {
        let o = SimOptions::default();
        assert_eq!(o.validate(), Ok(()));
        assert_eq!((o.nodes, o.drives_per_node, o.drive_bytes, o.rack_size), (2500, 24, 1_500_000_000_000, 20));
        assert_eq!(o.protection.to_string(), "rep:3");
        assert_eq!(o.rebuild_mbps, 1000);
        assert_eq!(o.added_nodes(), 25);
    }

    #[test]
    fn each_bad_option_is_named() {
        let cases: Vec<(SimOptions, &str)> = vec![
            (SimOptions { nodes: 0, ..SimOptions::default() }, "--nodes"),
            (SimOptions { drives_per_node: 0, ..SimOptions::default() }, "--drives-per-node"),
            (SimOptions { drive_bytes: 1 << 20, ..SimOptions::default() }, "--drive-size"),
            (SimOptions { drive_bytes: u64::MAX / 2, ..SimOptions::default() }, "--drive-size"),
            (SimOptions { rack_size: 0, ..SimOptions::default() }, "--rack-size"),
            (SimOptions { pg_count: Some(1000), ..SimOptions::default() }, "--pgs"),
            (
                SimOptions { volume_min_bytes: 2 << 40, volume_max_bytes: 1 << 40, ..SimOptions::default() },
                "volume sizes",
            ),
            (SimOptions { tolerance: -1.0, ..SimOptions::default() }, "tolerance"),
            (SimOptions { extent_bytes: 3000, ..SimOptions::default() }, "extent size"),
            (SimOptions { threads: 0, ..SimOptions::default() }, "threads"),
            (SimOptions { rebuild_mbps: 0, ..SimOptions::default() }, "--rebuild-mbps"),
            (SimOptions { rebuild_mbps: MAX_REBUILD_MBPS + 1, ..SimOptions::default() }, "--rebuild-mbps"),
        ];
        for (o, option) in cases {
            match o.validate() {
                Err(SimError::Option { option: got, .. }) => assert_eq!(got, option),
                other => panic!("{option}: {other:?}"),
            }
        }
    }
}
