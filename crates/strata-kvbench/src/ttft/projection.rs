//! The projection of the measurements onto a stated GPU and model shape:
//! the GPU's prefill rate against each tier's measured bandwidth (formula
//! in `docs/kv.md`).

use strata_prefill::Shape;

use super::measure::Row;
use super::options::TtftOptions;

/// One projected prompt length.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Projected {
    pub(super) tokens: usize,
    pub(super) recompute_s: f64,
    /// Per measured tier: its bandwidth and the projected load time.
    pub(super) tiers: Vec<(String, f64, f64)>,
    /// The load bandwidth (bytes/s) that makes loading 56x faster than
    /// recomputing (the seeds' claim); infinite when none can.
    pub(super) bandwidth_for_56x: f64,
}

/// The projection: the GPU prefill rate against each tier's measured
/// bandwidth (formula in docs/kv.md).
pub(super) fn projection(shape: &Shape, rows: &[Row], args: &TtftOptions) -> Vec<Projected> {
    let rate = args.gpu_tflops * 1e12 * args.mfu;
    let per_token = shape.kv_bytes_per_token(2) as f64;
    // Each tier's bandwidth as measured at the longest prompt.
    let bw: Vec<(String, f64)> = rows
        .last()
        .map(|r| r.tiers.iter().map(|t| (t.tier.to_string(), t.bytes as f64 / t.fetch_s)).collect())
        .unwrap_or_default();
    let mut lengths: Vec<usize> = rows.iter().map(|r| r.tokens).collect();
    for extra in [65_536, 131_072] {
        if !lengths.contains(&extra) {
            lengths.push(extra);
        }
    }
    lengths
        .into_iter()
        .map(|n| {
            let recompute_s = shape.prefill_flops(0, n as u64) / rate;
            let tail_s = shape.prefill_flops(n as u64 - 1, 1) / rate;
            let tiers = bw.iter().map(|(t, b)| (t.clone(), *b, per_token * n as f64 / b + tail_s)).collect();
            let budget = recompute_s / 56.0 - tail_s;
            let bandwidth_for_56x = if budget > 0.0 { per_token * n as f64 / budget } else { f64::INFINITY };
            Projected { tokens: n, recompute_s, tiers, bandwidth_for_56x }
        })
        .collect()
}
