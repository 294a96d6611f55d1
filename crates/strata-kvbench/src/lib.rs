//! The KV store's benchmarks, behind `strata bench kv-trace`, `strata
//! bench kv-tier` and `strata bench ttft`, and the opening of the store's
//! SSD and pool tiers from their specs, which `strata kv serve` shares.
//!
//! - [`kv_trace()`]: hit rate against capacity on a prefix-cache trace, for
//!   the store's eviction policy and LRU (a simulation; no I/O).
//! - [`kv_tier()`]: put and get throughput and latency through the store's
//!   API, tier by tier.
//! - [`ttft()`]: time to first token, recomputing a prefill against loading
//!   its KV blocks from each tier through the store's client, a
//!   multi-turn trace replay, and a GPU projection (`docs/kv.md`).
//! - [`tiers`]: SSD and pool tier specs and the devices they open.
//!
//! Each benchmark takes a plain options struct; the command line, its
//! defaults and its exit codes are the `strata` binary's (`bench_cmd`).
//! A benchmark prints its table (or JSON with `json`) on stdout and its
//! progress on stderr.
//!
//! Errors: [`tiers`] returns typed errors, since `strata kv serve` uses
//! it too. The benchmarks return `anyhow::Result`, the one place this
//! crate breaks the typed-errors rule (STYLE.md): a benchmark's error ends
//! the run and is printed once with its context chain, and nothing
//! matches on it; an enum would only restate dozens of one-off checks.
//!
//! # Example
//!
//! ```
//! # fn main() -> anyhow::Result<()> {
//! let trace = std::env::temp_dir().join(format!("strata-kvbench-doc-{}.jsonl", std::process::id()));
//! std::fs::write(&trace, "{\"hash_ids\":[0,1,2]}\n{\"hash_ids\":[0,1,3]}\n")?;
//! let opts = strata_kvbench::TraceOptions {
//!     trace: trace.clone(),
//!     capacity: vec![2, 100],
//!     small_percent: vec![],
//!     ghost: 1,
//!     requests: None,
//!     ssd_ratio: 0,
//!     json: true,
//! };
//! strata_kvbench::kv_trace(&opts)?;
//! std::fs::remove_file(trace)?;
//!
//! let pool: strata_kvbench::PoolSpec = "tcp://127.0.0.1:4420/nqn.x".parse()?;
//! assert_eq!(pool.addrs.len(), 1);
//! # Ok(())
//! # }
//! ```

mod kv_tier;
mod kv_trace;
pub mod tiers;
mod trace_file;
mod ttft;

pub use kv_tier::{TierOptions, kv_tier};
pub use kv_trace::{TraceOptions, kv_trace};
pub use tiers::{PoolSpec, PoolSpecError, TierError};
pub use ttft::{TtftOptions, ttft};
