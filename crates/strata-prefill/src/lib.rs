//! A Llama-shaped transformer prefill on the CPU, for `strata bench ttft`.
//!
//! Time to first token on a prefix-cache hit is the time to move the
//! cached attention keys and values into the tensors attention reads, plus
//! the prefill of the tokens after the cached prefix; on a miss it is the
//! whole prefill. This crate is the compute side of that comparison:
//!
//! - [`Shape`]: a model's dimensions, with presets from a test-sized model
//!   to Llama 3.1 70B, and the arithmetic the projection uses (prefill
//!   FLOPs, KV bytes per token).
//! - [`Model`]: Llama's structure with random weights (prefill time does
//!   not depend on the values): embedding; per layer RMSNorm, attention
//!   with rotary positions and grouped-query KV heads, RMSNorm, SwiGLU
//!   feed-forward, residuals; a final RMSNorm and a tied LM head on the
//!   last token. Matrix products go through `matrixmultiply` (AVX2/FMA
//!   kernels picked at run time) on scoped threads.
//! - [`KvCache`]: every layer's keys and values, written by a prefill and
//!   serialised to, or loaded from, fixed-size blocks of tokens.
//!
//! The crate does no I/O; the benchmark in `strata-kvbench` moves the
//! blocks through the KV store's client.

mod cache;
mod gemm;
mod model;
mod shape;

pub use cache::{BlockError, KvCache};
pub use model::Model;
pub use shape::{PRESETS, Shape};
