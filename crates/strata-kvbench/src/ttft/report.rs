//! The tables `strata bench ttft` prints without `--json`: the measured
//! loads per tier, the replay, and the projection.

use strata_prefill::Shape;

use super::measure::Row;
use super::options::TtftOptions;
use super::projection::Projected;
use super::prompt::LOGIT_TOLERANCE;
use super::replay::Replay;

pub(super) fn print_tables(
    args: &TtftOptions,
    shape: &Shape,
    threads: usize,
    rows: &[Row],
    replay: Option<&Replay>,
    proj: &[Projected],
) {
    println!(
        "model {} on the CPU ({threads} threads): {} layers, width {}, {} heads / {} KV heads, {} KiB of f32 KV a token; {}-token blocks",
        args.model,
        shape.layers,
        shape.hidden,
        shape.heads,
        shape.kv_heads,
        shape.kv_bytes_per_token(4) / 1024,
        args.block_tokens
    );
    println!("every load was checked: keys/values bit-equal to the recompute's, logits within {LOGIT_TOLERANCE}");
    let tiers: Vec<&str> = rows.first().map(|r| r.tiers.iter().map(|t| t.tier).collect()).unwrap_or_default();
    print!("{:>8} {:>12}", "tokens", "recompute s");
    for t in &tiers {
        print!(" {:>10} {:>8} {:>8}", format!("{t} s"), format!("{t} GB/s"), format!("{t} x"));
    }
    println!();
    for r in rows {
        print!("{:>8} {:>12.3}", r.tokens, r.recompute_s);
        for t in &r.tiers {
            print!(" {:>10.4} {:>8.2} {:>8.1}", t.ttft_s, t.bytes as f64 / t.fetch_s / 1e9, r.recompute_s / t.ttft_s);
        }
        println!();
    }
    if let Some(r) = replay {
        println!(
            "\nmulti-turn replay: {} requests, {} prompt tokens ({}-token blocks), engine cache of {} blocks",
            r.requests, r.prompt_tokens, r.block_tokens, r.engine_blocks
        );
        let pct = |h: u64| 100.0 * h as f64 / r.prompt_tokens.max(1) as f64;
        println!(
            "  without the store: {:.2} requests/s, {:.1}% of prompt tokens cached",
            r.requests as f64 / r.alone_s,
            pct(r.alone_hit_tokens)
        );
        println!(
            "  with the store:    {:.2} requests/s, {:.1}% cached ({:.1}% from the engine's cache)",
            r.requests as f64 / r.store_s,
            pct(r.store_hit_tokens),
            pct(r.store_engine_hit_tokens)
        );
        println!("  requests/s with/without: {:.2}x", r.alone_s / r.store_s);
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
