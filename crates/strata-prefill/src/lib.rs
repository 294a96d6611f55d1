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
//!   last token. Matrix products go through `matrixmultiply` (AVX-512 or
//!   AVX2/FMA kernels picked at run time) on scoped threads, in layouts it
//!   packs fastest; the element-wise work runs vectorised kernels.
//! - [`square_gemm_gflops`]: the GEMM library's rate on a square product
//!   on this machine, the yardstick for the prefill's own rate.
//! - [`KvCache`]: every layer's keys and values, written by a prefill and
//!   serialised to, or loaded from, fixed-size blocks of tokens.
//!
//! The crate does no I/O; the benchmark in `strata-kvbench` moves the
//! blocks through the KV store's client.
//!
//! # Example
//!
//! ```
//! use strata_prefill::{KvCache, Model, Shape};
//!
//! let shape = Shape { layers: 2, hidden: 16, heads: 4, kv_heads: 2, head_dim: 4, ffn: 32, vocab: 100 };
//! let model = Model::random(shape, 1, 2)?;
//! let prompt: Vec<u32> = (0..40).collect();
//! let mut whole = KvCache::new(&shape);
//! let logits = model.prefill(&prompt, &mut whole);
//! assert_eq!((logits.len(), whole.len()), (100, 40));
//!
//! // An engine with the first 32 positions cached loads them and computes the rest.
//! let mut hit = KvCache::new(&shape);
//! hit.load_block(32, &whole.to_block(0, 32))?;
//! let again = model.prefill(&prompt[32..], &mut hit);
//! assert!(hit.prefix_equals(&whole, 32) && hit.len() == 40);
//! assert!(logits.iter().zip(&again).all(|(a, b)| (a - b).abs() < 1e-3));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attention;
mod cache;
mod gemm;
mod kernels;
mod model;
mod shape;

pub use cache::{BlockError, KvCache};
pub use gemm::square_gemm_gflops;
pub use model::Model;
pub use shape::{PRESETS, Shape};
