//! The command line of the KV store's benchmarks, `strata bench
//! kv-trace`, `strata bench kv-tier` and `strata bench ttft`: their clap
//! arguments and defaults, turned into the plain options `strata-kvbench`
//! runs. The benchmarks themselves are that crate's; `bench_cmd` calls
//! them and maps their errors to exit status 2.

use std::path::PathBuf;

/// `strata bench kv-trace` arguments.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// JSON lines with a `hash_ids` array of block ids per request.
    trace: PathBuf,
    /// Capacities to replay, in blocks (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000,8000,16000,32000")]
    capacity: Vec<u64>,
    /// Also replay S3-FIFO with these small-queue sizes, percent of the
    /// capacity (comma-separated; 0: adaptive).
    #[arg(long, value_delimiter = ',')]
    small_percent: Vec<u64>,
    /// Ghost queue length, in multiples of the keys cached (the store
    /// uses 1).
    #[arg(long, default_value_t = 1)]
    ghost: usize,
    /// Replay only the first N requests.
    #[arg(long)]
    requests: Option<usize>,
    /// Also replay the two tiers together: DRAM of each capacity and an
    /// SSD log of this many times it (0: skip).
    #[arg(long, default_value_t = 0)]
    ssd_ratio: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

impl From<TraceArgs> for strata_kvbench::TraceOptions {
    fn from(a: TraceArgs) -> Self {
        strata_kvbench::TraceOptions {
            trace: a.trace,
            capacity: a.capacity,
            small_percent: a.small_percent,
            ghost: a.ghost,
            requests: a.requests,
            ssd_ratio: a.ssd_ratio,
            json: a.json,
        }
    }
}

/// `strata bench kv-tier` arguments.
#[derive(clap::Args, Debug)]
pub struct TierArgs {
    /// The SSD tier's file or device, PATH[:SIZE] (its contents are lost);
    /// `none` skips the SSD tier.
    #[arg(long, default_value = "./strata-data/kv/bench.log:2G")]
    ssd: String,
    /// Value size.
    #[arg(long, default_value = "1M", value_parser = strata_block::parse_size)]
    value: u64,
    /// Bytes of values to put and get in each tier.
    #[arg(long, default_value = "1G", value_parser = strata_block::parse_size)]
    total: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    qd: usize,
    /// Accept a file system without O_DIRECT (tmpfs).
    #[arg(long)]
    allow_buffered: bool,
    /// Also measure the pool tier on this volume (namespace 1; its
    /// contents are lost): a store with no SSD tier and 64 MiB of DRAM, so
    /// every block goes to the volume over NVMe/TCP and is read back from
    /// it (compare with `strata bench` on the same volume: bench/kv-tiers.sh).
    #[arg(long, value_name = "tcp://ADDR:PORT/NQN")]
    pool: Option<strata_kvbench::PoolSpec>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

impl From<TierArgs> for strata_kvbench::TierOptions {
    fn from(a: TierArgs) -> Self {
        strata_kvbench::TierOptions {
            ssd: a.ssd,
            value: a.value,
            total: a.total,
            qd: a.qd,
            allow_buffered: a.allow_buffered,
            pool: a.pool,
            json: a.json,
        }
    }
}

/// `strata bench ttft` arguments.
#[derive(clap::Args, Debug)]
pub struct TtftArgs {
    /// Model shape run on the CPU: tiny, small, llama-3.2-1b,
    /// llama-3.1-8b or llama-3.1-70b (random weights; the larger need
    /// their weights' memory in f32).
    #[arg(long, default_value = "tiny")]
    model: String,
    /// Prompt lengths in tokens (comma-separated; k = 1024).
    #[arg(long, value_delimiter = ',', default_value = "1k,2k,4k,8k,16k,32k", value_parser = parse_tokens)]
    prompts: Vec<usize>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 256)]
    block_tokens: usize,
    /// The SSD tier's file or block device, PATH[:SIZE] (`none`: DRAM only).
    #[arg(long, default_value = "./strata-data/bench/ttft-ssd.log:4G")]
    ssd: String,
    /// A pool tier, tcp://ADDR:PORT[,ADDR:PORT...]/NQN (a strata volume): measured last,
    /// with the SSD tier taken away so that every block comes from it.
    #[arg(long)]
    pool: Option<strata_kvbench::PoolSpec>,
    /// Allow an SSD file on a filesystem without O_DIRECT (tmpfs).
    #[arg(long)]
    allow_buffered: bool,
    /// Compute threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Connections a load fetches over at once (1: one MGET at a time).
    #[arg(long, default_value_t = 4)]
    load_lanes: usize,
    /// Conversation trace for the multi-turn replay (JSON lines with
    /// `hash_ids`); `none` skips the replay.
    #[arg(long, default_value = "../shared/traces/mooncake_conversation_trace.jsonl")]
    replay: String,
    /// Requests replayed (the trace's first N, in order).
    #[arg(long, default_value_t = 200)]
    replay_requests: usize,
    /// Tokens per trace block in the replay. The trace's blocks are 512
    /// tokens; fewer keep a CPU replay short and understate the store's
    /// gain (shorter prompts recompute faster).
    #[arg(long, default_value_t = 32)]
    replay_block_tokens: usize,
    /// Blocks the engine's own (GPU) prefix cache holds in the replay,
    /// with and without the store.
    #[arg(long, default_value_t = 256)]
    replay_engine_blocks: u64,
    /// The store's DRAM during the replay, in replay blocks (fewer than
    /// the replay's distinct blocks, so that the store evicts to its SSD
    /// tier and serves part of its hits from there).
    #[arg(long, default_value_t = 1024)]
    replay_store_blocks: u64,
    /// Replay passes of each kind (with the store; the control, where the
    /// store is asked but holds nothing), alternating.
    #[arg(long, default_value_t = 3)]
    replay_passes: usize,
    /// Side of the square f32 product on which the GEMM library's own
    /// rate is measured, the yardstick for the prefill's (0: skip).
    #[arg(long, default_value_t = 2048)]
    gemm_size: usize,
    /// Model shape for the GPU projection.
    #[arg(long, default_value = "llama-3.1-70b")]
    project_model: String,
    /// The projection's GPU: dense bf16 TFLOPS (H100 SXM: 989).
    #[arg(long, default_value_t = 989.0)]
    gpu_tflops: f64,
    /// The fraction of that rate a prefill sustains.
    #[arg(long, default_value_t = 0.5)]
    mfu: f64,
    /// Where the prefill runs: cpu (cuda needs a build with a CUDA
    /// backend, which this one does not have).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

impl From<TtftArgs> for strata_kvbench::TtftOptions {
    fn from(a: TtftArgs) -> Self {
        strata_kvbench::TtftOptions {
            model: a.model,
            prompts: a.prompts,
            block_tokens: a.block_tokens,
            ssd: a.ssd,
            pool: a.pool,
            allow_buffered: a.allow_buffered,
            threads: a.threads,
            load_lanes: a.load_lanes,
            replay: a.replay,
            replay_requests: a.replay_requests,
            replay_block_tokens: a.replay_block_tokens,
            replay_engine_blocks: a.replay_engine_blocks,
            replay_store_blocks: a.replay_store_blocks,
            replay_passes: a.replay_passes,
            gemm_size: a.gemm_size,
            project_model: a.project_model,
            gpu_tflops: a.gpu_tflops,
            mfu: a.mfu,
            device: a.device,
            json: a.json,
        }
    }
}

fn parse_tokens(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1024),
        None => (s, 1),
    };
    let n: usize = num.trim().parse().map_err(|_| format!("{s:?}: expected a token count like 4096 or 4k"))?;
    match n.checked_mul(mul) {
        Some(v) if v >= 2 => Ok(v),
        _ => Err(format!("{s:?}: a prompt needs at least 2 tokens")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_parse_with_k() {
        assert_eq!(parse_tokens("4k").unwrap(), 4096);
        assert_eq!(parse_tokens("300").unwrap(), 300);
        assert!(parse_tokens("1").is_err() && parse_tokens("x").is_err() && parse_tokens("k").is_err());
    }
}
