//! The benchmark from start to end: checks the options, measures the GEMM
//! library's own rate, recomputes each prompt and loads it from DRAM,
//! restarts the store to load from the SSD tier and then from the pool
//! tier, measures the GEMM library again, reopens the store with the
//! replay's smaller DRAM and replays the trace, and prints.

use std::time::Instant;

use anyhow::Context;
use strata_prefill::{KvCache, Model, PRESETS, Shape, square_gemm_gflops};

use super::measure::{GEMM_REPS, GemmRate, Prompt, Row, load_prompt};
use super::options::TtftOptions;
use super::projection::projection;
use super::prompt::{key_context, tokens};
use super::replay::{load_trace, replay};
use super::report::print_tables;
use super::served::{Served, StoreSpec};

/// Runs the benchmark and prints the tables (or JSON).
pub fn ttft(args: &TtftOptions) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.device == "cpu",
        "--device {:?}: this build of strata computes on the CPU only (it has no CUDA backend); \
         the GPU projection it prints is the paper check",
        args.device
    );
    let names = || PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let shape =
        Shape::preset(&args.model).with_context(|| format!("--model {:?}: expected one of {}", args.model, names()))?;
    let project = Shape::preset(&args.project_model)
        .with_context(|| format!("--project-model {:?}: expected one of {}", args.project_model, names()))?;
    anyhow::ensure!(args.block_tokens >= 1 && args.replay_block_tokens >= 1, "block sizes must be at least 1 token");
    anyhow::ensure!((1..=64).contains(&args.load_lanes), "--load-lanes {}: expected 1 to 64", args.load_lanes);
    anyhow::ensure!(
        (1..=100).contains(&args.replay_passes),
        "--replay-passes {}: expected 1 to 100",
        args.replay_passes
    );
    anyhow::ensure!(args.replay_store_blocks >= 1, "--replay-store-blocks must be at least 1");
    anyhow::ensure!(args.gemm_size <= 16_384, "--gemm-size {}: at most 16384", args.gemm_size);
    for &p in &args.prompts {
        anyhow::ensure!(
            p % args.block_tokens == 0,
            "prompt {p} is not a whole number of {}-token blocks",
            args.block_tokens
        );
    }
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let model = Model::random(shape, 42, threads).map_err(anyhow::Error::msg)?;
    let per_token = shape.kv_bytes_per_token(4);
    let bench_tokens: u64 = args.prompts.iter().map(|&p| p as u64).sum();
    let trace = if args.replay == "none" { None } else { Some(load_trace(&args.replay, args.replay_requests)?) };
    let replay_tokens: u64 = trace.iter().flatten().flatten().collect::<std::collections::HashSet<_>>().len() as u64
        * args.replay_block_tokens as u64;
    let need = (bench_tokens + replay_tokens) * per_token;
    let spec = StoreSpec {
        dram: need * 3 / 2 + (64 << 20),
        ssd: if args.ssd == "none" { None } else { Some(crate::tiers::parse_ssd(&args.ssd)?) },
        pool: args.pool.clone(),
        allow_buffered: args.allow_buffered,
        load_lanes: args.load_lanes,
    };
    let gemm = |when: &str| {
        if args.gemm_size == 0 {
            return None;
        }
        eprintln!("measuring the GEMM library on a {0}x{0}x{0} f32 product ({when})", args.gemm_size);
        Some(square_gemm_gflops(args.gemm_size, threads, GEMM_REPS))
    };
    let gemm_before = gemm("before the prompts");
    let mut srv = Served::start(&spec, true)?;
    let st = srv.store.stats();
    for (tier, present, cap) in
        [("SSD", spec.ssd.is_some(), st.ssd_capacity), ("pool", spec.pool.is_some(), st.pool_capacity)]
    {
        anyhow::ensure!(!present || need * 5 / 4 <= cap, "the {tier} tier holds {cap} bytes; this run stores {need}");
    }
    let mut prompts = Vec::new();
    let mut rows = Vec::new();
    for &n in &args.prompts {
        eprintln!("prompt of {n} tokens: recomputing the prefill");
        let toks = tokens(n as u64, n, shape.vocab);
        let mut cache = KvCache::new(&shape);
        let t0 = Instant::now();
        let logits = model.prefill(&toks, &mut cache);
        let recompute_s = t0.elapsed().as_secs_f64();
        let recompute_gflops = shape.prefill_flops(0, n as u64) / recompute_s / 1e9;
        let keys = key_context(&args.model, args.block_tokens, "prompts").chain(&toks);
        srv.put_blocks(&keys, &cache, args.block_tokens, 0)?;
        let p = Prompt { tokens: toks, keys, cache, logits };
        let dram = load_prompt(&mut srv, &model, &p, args.block_tokens, "dram")?;
        rows.push(Row { tokens: n, recompute_s, recompute_gflops, tiers: vec![dram] });
        prompts.push(p);
    }
    if spec.ssd.is_some() {
        eprintln!("restarting the store: DRAM empty, every block on the SSD tier");
        srv = srv.restart(&spec)?;
        let before = srv.store.stats();
        anyhow::ensure!(before.dram_keys == 0, "the restarted store holds {} blocks in DRAM", before.dram_keys);
        for (row, p) in rows.iter_mut().zip(&prompts) {
            row.tiers.push(load_prompt(&mut srv, &model, p, args.block_tokens, "ssd")?);
        }
        let read = srv.store.stats().hits_ssd - before.hits_ssd;
        let blocks: usize = prompts.iter().map(|p| p.keys.len()).sum();
        anyhow::ensure!(read as usize >= blocks, "only {read} of {blocks} blocks were read from the SSD tier");
    }
    if spec.pool.is_some() {
        eprintln!("restarting the store without its SSD tier: every block from the pool volume");
        let pool_only = StoreSpec { ssd: None, ..spec.clone() };
        srv = srv.restart(&pool_only)?;
        let before = srv.store.stats();
        for (row, p) in rows.iter_mut().zip(&prompts) {
            row.tiers.push(load_prompt(&mut srv, &model, p, args.block_tokens, "pool")?);
        }
        let read = srv.store.stats().hits_pool - before.hits_pool;
        let blocks: usize = prompts.iter().map(|p| p.keys.len()).sum();
        anyhow::ensure!(read as usize >= blocks, "only {read} of {blocks} blocks were read from the pool tier");
    }
    drop(prompts);
    let gemm_after = gemm("after the prompts");
    let gemm = GemmRate::of(args.gemm_size, gemm_before, gemm_after, &rows);
    let replay = match &trace {
        Some(reqs) => {
            // The replay's store: DRAM for `replay_store_blocks` blocks
            // (plus room for the store's own accounting), and the SSD and
            // pool tiers as given, so that it evicts to them.
            let block = KvCache::new(&shape).block_bytes(args.replay_block_tokens) as u64;
            let replay_spec = StoreSpec { dram: args.replay_store_blocks * block + block / 2, ..spec.clone() };
            eprintln!("reopening the store with {} MiB of DRAM for the replay", replay_spec.dram >> 20);
            srv = srv.restart(&replay_spec)?;
            Some(replay(&mut srv, &model, reqs, args)?)
        }
        None => None,
    };
    let proj = projection(&project, &rows, args);
    if args.json {
        let v = serde_json::json!({
            "model": args.model, "shape": format!("{shape:?}"), "threads": threads,
            "kernels": model.kernels(), "gemm": gemm,
            "block_tokens": args.block_tokens, "kv_bytes_per_token": per_token,
            "prompts": rows, "replay": replay, "projection": proj,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_tables(args, &shape, (threads, model.kernels()), gemm.as_ref(), &rows, replay.as_ref(), &proj);
    Ok(())
}
