//! `strata sim`: the pool's scale simulator (`strata_pool::sim`) from the
//! command line.
//!
//! Runs the real placement and balancer on a modelled cluster (defaults:
//! 2,500 nodes x 24 drives of 1.5 TB in racks of 20, rep:3), fills it until
//! the first drive is full, and measures balance, data movement and the
//! rebuild of a failed node (`docs/scale.md`). Prints a summary, or the report as JSON with
//! `--json`. Exit status: 0 on success, 2 for bad options (including a
//! cluster that cannot keep the copies in distinct racks), 1 for an
//! internal error.

use std::process::ExitCode;

use clap::Args;
use strata_pool::placement::Protection;
use strata_pool::sim::{SimError, SimOptions, SimReport, run};

/// `strata sim` arguments. Unset options take the simulator's defaults.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Storage nodes. Default: 2500.
    #[arg(long, value_name = "N")]
    nodes: Option<u32>,
    /// Drives per node. Default: 24.
    #[arg(long, value_name = "N")]
    drives_per_node: Option<u32>,
    /// Bytes per drive, e.g. 3.84T (units are powers of 1024). Default:
    /// 1.5 TB, i.e. 1500000000000 bytes.
    #[arg(long, value_name = "SIZE", value_parser = strata_block::parse_size)]
    drive_size: Option<u64>,
    /// Nodes per rack; racks are the failure domain. Default: 20.
    #[arg(long, value_name = "N")]
    rack_size: Option<u32>,
    /// Protection: rep:N (N copies) or ec:K+M (K data and M parity
    /// shards). Default: rep:3.
    #[arg(long, value_name = "rep:N|ec:K+M")]
    protect: Option<Protection>,
    /// Seed of the volume sizes and failed nodes. Default: 1.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Placement groups, a power of two. Default: the smallest giving
    /// every node 100 group copies and 200 partners (other copies of its
    /// groups).
    #[arg(long, value_name = "N")]
    pgs: Option<u32>,
    /// Rebuild bandwidth of one node in MB/s (10^6 bytes a second), for
    /// reads and for writes at the same time. Default: 1000.
    #[arg(long, value_name = "N")]
    rebuild_mbps: Option<u32>,
}

impl SimArgs {
    fn options(&self) -> SimOptions {
        let mut o = SimOptions::default();
        o.nodes = self.nodes.unwrap_or(o.nodes);
        o.drives_per_node = self.drives_per_node.unwrap_or(o.drives_per_node);
        o.drive_bytes = self.drive_size.unwrap_or(o.drive_bytes);
        o.rack_size = self.rack_size.unwrap_or(o.rack_size);
        o.protection = self.protect.unwrap_or(o.protection);
        o.seed = self.seed.unwrap_or(o.seed);
        o.pg_count = self.pgs.or(o.pg_count);
        o.rebuild_mbps = self.rebuild_mbps.unwrap_or(o.rebuild_mbps);
        o
    }
}

/// Runs `strata sim`.
pub fn main(args: SimArgs) -> ExitCode {
    match run(&args.options()) {
        Ok(report) if args.json => match serde_json::to_string_pretty(&report) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("strata sim: error: cannot write the report: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            print!("{}", summary(&report));
            ExitCode::SUCCESS
        }
        Err(e @ (SimError::Option { .. } | SimError::CannotHonour(_))) => {
            eprintln!("strata sim: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("strata sim: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A decimal size with three significant digits: `90.0 PB`, `828 TB`.
fn si(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 999.5 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    let digits = if unit == 0 || v >= 99.95 {
        0
    } else if v >= 9.995 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", UNITS[unit])
}

/// The report for people.
fn summary(r: &SimReport) -> String {
    let per_rack = r.nodes.div_ceil(r.racks.max(1));
    // What a group's slot holds.
    let slots = if r.protection.starts_with("ec:") { "shards" } else { "copies" };
    [
        format!(
            "strata sim: {} nodes x {} drives of {} ({} drives, {} raw) in {} racks of {}, {}",
            r.nodes,
            r.drives_per_node,
            si(r.drive_bytes),
            r.drives,
            si(r.raw_bytes),
            r.racks,
            per_rack,
            r.protection
        ),
        format!(
            "  placement: {} groups ({:.1} {slots} a node), {} chunks, {} remaps ({} map), {:.1} us to place a group",
            r.pgs,
            r.pg_copies_per_node,
            strata_block::format_size(r.chunk_bytes),
            r.remaps,
            si(r.map_json_bytes),
            r.place_micros_per_pg
        ),
        format!(
            "  filled until the first drive was full: {} volumes, {} written, {} allocated",
            r.volumes,
            si(r.logical_bytes),
            si(r.allocated_bytes)
        ),
        format!(
            "  utilization at first full drive: {:.2}% ({:.2}% without the balancer); fullest drive {:.4}x the mean, emptiest {:.4}x",
            r.utilization_at_first_full * 100.0,
            r.utilization_without_balancer * 100.0,
            r.max_fill_over_mean,
            r.min_fill_over_mean
        ),
        format!(
            "  data at first full drive: {:.2}% of raw ({:.3} bytes stored per byte of data)",
            r.data_at_first_full * 100.0,
            r.allocated_bytes as f64 / r.logical_bytes.max(1) as f64
        ),
        format!(
            "  adding {} nodes (1%) moved {}: {:.3}x the minimum ({})",
            r.added_nodes,
            si(r.moved_on_add_bytes),
            r.moved_on_add_ratio,
            si(r.minimum_on_add_bytes)
        ),
        format!(
            "  failing one node (worst of {}) moved {}: {:.3}x its data ({})",
            r.failed_nodes_sampled,
            si(r.moved_on_fail_bytes),
            r.moved_on_fail_ratio,
            si(r.failed_node_bytes)
        ),
        format!(
            "  rebuild sources: at least {} nodes hold {slots} of any one node's groups (mean {:.1})",
            r.rebuild_sources_min, r.rebuild_sources_mean
        ),
        format!(
            "  rebuild of one node (slowest of {}) at {} MB/s a node: {:.0} s; {} lost, {} read by {} nodes, {} written by {} nodes",
            r.failed_nodes_sampled,
            r.rebuild_mbps,
            r.rebuild_seconds,
            si(r.rebuild_lost_bytes),
            si(r.rebuild_bytes_read),
            r.rebuild_nodes_reading,
            si(r.rebuild_bytes_written),
            r.rebuild_nodes_writing
        ),
        format!("  ran in {:.1} s (seed {})", r.seconds, r.seed),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_sizes_keep_three_digits() {
        assert_eq!(si(0), "0 B");
        assert_eq!(si(999), "999 B");
        assert_eq!(si(1_500_000_000_000), "1.50 TB");
        assert_eq!(si(90_000_000_000_000_000), "90.0 PB");
        assert_eq!(si(827_982_077_755_392), "828 TB");
        assert_eq!(si(999_600), "1.00 MB");
        assert_eq!(si(u64::MAX), "18.4 EB");
    }
}
