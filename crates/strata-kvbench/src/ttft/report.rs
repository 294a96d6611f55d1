//! The tables `strata bench ttft` prints without `--json`: the measured
//! loads per tier, the replay, and the projection.

use strata_prefill::Shape;

use super::measure::{GemmRate, Row};
use super::options::TtftOptions;
use super::projection::Projected;
use super::prompt::LOGIT_TOLERANCE;
use super::replay::{Pass, Replay};

pub(super) fn print_tables(
    args: &TtftOptions,
    shape: &Shape,
    (threads, kernels): (usize, &str),
    gemm: Option<&GemmRate>,
    rows: &[Row],
    replay: Option<&Replay>,
    proj: &[Projected],
) {
    println!(
        "model {} on the CPU ({threads} threads, {kernels} kernels): {} layers, width {}, {} heads / {} KV heads, {} KiB of f32 KV a token; {}-token blocks",
        args.model,
        shape.layers,
        shape.hidden,
        shape.heads,
        shape.kv_heads,
        shape.kv_bytes_per_token(4) / 1024,
        args.block_tokens
    );
    if let Some(g) = gemm {
        println!(
            "GEMM library (matrixmultiply) on a {0}x{0}x{0} f32 product, {threads} threads, best of 3: {1:.1} GFLOP/s before the prompts, {2:.1} after",
            g.size, g.before_gflops, g.after_gflops
        );
        if let Some(f) = g.fraction_8k_up {
            println!(
                "  the prefill at 8k tokens and up: {:.0}% of the higher (median; {:.0}-{:.0}%)",
                100.0 * f.median,
                100.0 * f.min,
                100.0 * f.max
            );
        }
    }
    println!("every load was checked: keys/values bit-equal to the recompute's, logits within {LOGIT_TOLERANCE}");
    let tiers: Vec<&str> = rows.first().map(|r| r.tiers.iter().map(|t| t.tier).collect()).unwrap_or_default();
    print!("{:>8} {:>12} {:>9} {:>7}", "tokens", "recompute s", "GFLOP/s", "GEMM %");
    for t in &tiers {
        print!(" {:>10} {:>8} {:>8}", format!("{t} s"), format!("{t} GB/s"), format!("{t} x"));
    }
    println!();
    for (i, r) in rows.iter().enumerate() {
        let pct = gemm.map_or("-".to_string(), |g| format!("{:.0}", 100.0 * g.prefill_fraction[i]));
        print!("{:>8} {:>12.3} {:>9.1} {:>7}", r.tokens, r.recompute_s, r.recompute_gflops, pct);
        for t in &r.tiers {
            print!(" {:>10.4} {:>8.2} {:>8.1}", t.ttft_s, t.bytes as f64 / t.fetch_s / 1e9, r.recompute_s / t.ttft_s);
        }
        println!();
    }
    if let Some(r) = replay {
        print_replay(r);
    }
    println!(
        "\nprojection: {} in bf16 on a GPU at {} TFLOPS x {} MFU; load at each tier's bandwidth measured above (longest prompt)",
        args.project_model, args.gpu_tflops, args.mfu
    );
    println!("  TTFT_recompute = F(n) / R;  TTFT_load = n * kv_bytes_per_token / W + F(last token) / R  (docs/kv.md)");
    for p in proj {
        print!("{:>8} {:>10.3}s", p.tokens, p.recompute_s);
        for (t, w, s) in &p.tiers {
            print!("  {t} @ {:.2} GB/s: {:.3}s = {:.1}x", w / 1e9, s, p.recompute_s / s);
        }
        println!("  (56x needs {:.1} GB/s)", p.bandwidth_for_56x / 1e9);
    }
}

/// The replay's table: a row per kind of pass, medians and ranges.
fn print_replay(r: &Replay) {
    println!(
        "\nmulti-turn replay: {} requests, {} prompt tokens a pass ({}-token blocks, {} distinct); engine cache of {} blocks; \
         store DRAM of {} blocks ({} MiB), evicting to its other tiers",
        r.requests,
        r.prompt_tokens,
        r.block_tokens,
        r.distinct_blocks,
        r.engine_blocks,
        r.store_dram_blocks,
        r.store_dram_bytes >> 20
    );
    let n = r.passes.iter().filter(|p| p.kind == "store").count();
    let passes = if n == 1 { "1 pass".to_string() } else { format!("{n} passes") };
    println!(
        "  {passes} of each kind, alternating; requests/s as median [min-max]; prompt tokens by where they came from (first pass)"
    );
    let pct = |t: u64| format!("{:.1}%", 100.0 * t as f64 / r.prompt_tokens.max(1) as f64);
    let rate = |s: f64| r.requests as f64 / s;
    println!(
        "  {:<36} {:>22} {:>8} {:>8} {:>8} {:>8} {:>11}",
        "", "requests/s", "engine", "DRAM", "SSD", "pool", "recomputed"
    );
    for (kind, label, spread) in [
        ("control", "control (store asked, holds nothing)", r.control_spread),
        ("store", "with the store", r.store_spread),
    ] {
        let Some(p) = r.passes.iter().find(|p| p.kind == kind) else { continue };
        let Pass { engine_hit_tokens: e, dram_hit_tokens: d, ssd_hit_tokens: s, pool_hit_tokens: pl, .. } = *p;
        println!(
            "  {:<36} {:>22} {:>8} {:>8} {:>8} {:>8} {:>11}",
            label,
            format!("{:.2} [{:.2}-{:.2}]", rate(spread.median), rate(spread.max), rate(spread.min)),
            pct(e),
            pct(d),
            pct(s),
            pct(pl),
            pct(r.prompt_tokens.saturating_sub(e + d + s + pl))
        );
    }
    let evicted: Vec<String> =
        r.passes.iter().filter(|p| p.kind == "store").map(|p| p.store_evicted.to_string()).collect();
    println!("  blocks evicted from the store's DRAM per store pass: {}", evicted.join(", "));
    println!("  each pass in order: seconds (store lookup and load / compute / store new blocks), CPU seconds");
    for p in &r.passes {
        println!(
            "    {:<8} {:>7.2} s ({:.2} / {:.2} / {:.2}), {:.2} CPU s",
            p.kind, p.seconds, p.fetch_s, p.compute_s, p.put_s, p.cpu_s
        );
    }
    println!(
        "  requests/s with the store / control: {:.2}x (ratio of medians; {:.2}-{:.2}x pass by pass); \
         per CPU second: {:.2}x ({:.2}-{:.2}x)",
        r.speedup.median, r.speedup.min, r.speedup.max, r.cpu_speedup.median, r.cpu_speedup.min, r.cpu_speedup.max
    );
    let c = r.control_spread;
    println!(
        "  noise: the control passes, the same work each time, took {:.2}-{:.2} s ({:+.0}% / {:+.0}% of their median)",
        c.min,
        c.max,
        100.0 * (c.min / c.median - 1.0),
        100.0 * (c.max / c.median - 1.0)
    );
}
