//! The options of `strata bench ttft`. The command line (and its
//! defaults) is the `strata` binary's; these are the values it parsed,
//! checked when the run starts.

/// What [`ttft`](super::ttft) runs (the `strata bench ttft` options).
#[derive(Debug, Clone)]
pub struct TtftOptions {
    /// Model shape run on the CPU: tiny, small, llama-3.2-1b,
    /// llama-3.1-8b or llama-3.1-70b (random weights; the larger need
    /// their weights' memory in f32).
    pub model: String,
    /// Prompt lengths in tokens.
    pub prompts: Vec<usize>,
    /// Tokens per KV block.
    pub block_tokens: usize,
    /// The SSD tier's file or block device, `PATH[:SIZE]` (`none`: DRAM only).
    pub ssd: String,
    /// A pool tier, tcp://ADDR:PORT[,ADDR:PORT...]/NQN (a strata volume): measured last,
    /// with the SSD tier taken away so that every block comes from it.
    pub pool: Option<crate::PoolSpec>,
    /// Allow an SSD file on a filesystem without O_DIRECT (tmpfs).
    pub allow_buffered: bool,
    /// Compute threads (`None`: every core).
    pub threads: Option<usize>,
    /// Connections a load fetches over at once (1: one MGET at a time).
    pub load_lanes: usize,
    /// Conversation trace for the multi-turn replay (JSON lines with
    /// `hash_ids`); `none` skips the replay.
    pub replay: String,
    /// Requests replayed (the trace's first N, in order).
    pub replay_requests: usize,
    /// Tokens per trace block in the replay. The trace's blocks are 512
    /// tokens; fewer keep a CPU replay short and understate the store's
    /// gain (shorter prompts recompute faster).
    pub replay_block_tokens: usize,
    /// Blocks the engine's own (GPU) prefix cache holds in the replay,
    /// with and without the store.
    pub replay_engine_blocks: u64,
    /// The store's DRAM during the replay, in replay blocks: less than
    /// the replay's distinct blocks, so that the store evicts and part of
    /// its hits come from the SSD tier.
    pub replay_store_blocks: u64,
    /// Passes of each kind in the replay (with the store, and the control
    /// where the store contributes nothing), alternating.
    pub replay_passes: usize,
    /// Side of the square product the GEMM library's own rate is measured
    /// on, the yardstick for the prefill's rate (0: not measured).
    pub gemm_size: usize,
    /// Model shape for the GPU projection.
    pub project_model: String,
    /// The projection's GPU: dense bf16 TFLOPS (H100 SXM: 989).
    pub gpu_tflops: f64,
    /// The fraction of that rate a prefill sustains.
    pub mfu: f64,
    /// Where the prefill runs: cpu (cuda needs a build with a CUDA
    /// backend, which this one does not have).
    pub device: String,
    /// Print JSON instead of tables.
    pub json: bool,
}
