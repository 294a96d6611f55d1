//! `strata bench ttft`: time to first token when the prefill is
//! recomputed, against loading the same KV blocks from each tier of the
//! KV store through its real client path (RESP over TCP into the tensors
//! attention reads), a multi-turn replay of a conversation trace with and
//! without the store, and a projection of both onto a stated GPU and
//! model shape (formula in `docs/kv.md`).
//!
//! The store runs in this process on its own runtime, behind the same
//! server `strata kv serve` runs; "restarting" it drops that runtime and
//! reopens the SSD file, as a new process would, so the SSD tier is
//! measured cold (DRAM empty, index rebuilt from the log).
//!
//! Layout, each module using only those listed before it: [`options`]
//! says what to run; [`prompt`] makes prompts and holds the check every
//! load passes; [`served`] is the store in this process and its clients;
//! [`measure`] times one prompt's load from a tier and rates the
//! recompute against the GEMM library's square product; [`replay`] is
//! the multi-turn replay (alternating passes with the store and a
//! control, medians and ranges); [`projection`] projects the measurements
//! onto a GPU; [`report`] prints the tables; [`run`] runs it all.

mod measure;
mod options;
mod projection;
mod prompt;
mod replay;
mod report;
mod run;
mod served;

pub use options::TtftOptions;
pub use run::ttft;
