//! strata's chaos suite: runs `strata serve` as a child process and
//! attacks it while verified hosts do I/O, with a durability oracle
//! judging every block read back.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let cfg = strata_chaos::ChaosConfig::new("target/release/strata", Duration::from_secs(60), 42);
//! let report = strata_chaos::run(&cfg)?;
//! println!("{}", report.summary());
//! assert!(report.is_clean());
//! # Ok::<(), strata_chaos::Error>(())
//! ```
//!
//! Layout (see `docs/chaos.md` for what the suite does and how to read a
//! report):
//!
//! - [`oracle`]: the durability rules, fed histories and asked for
//!   verdicts; [`block`]: the self-describing block format it relies on;
//!   [`strata_rand::Rng`]: the seeded PRNG behind every random choice.
//! - [`raw`]: a byte-level NVMe/TCP client for misbehaving hosts;
//!   `host`: verified hosts on strata's own initiator; `resets`:
//!   connection resets during Flush and R2T transfers; `attack`: idle
//!   sockets, stalled readers, R2T hoarders, connect floods and the
//!   legitimate host probing beside them; `volume_ops`: volume create,
//!   resize and delete under connected hosts.
//! - [`process`]: the strata child process, its restarts, its CLI and its
//!   memory; `runner`: the round loop; [`report`]: what a run found;
//!   `config` and `error`: settings and the harness's own errors.

mod attack;
pub mod block;
mod config;
pub mod ctx;
mod error;
pub mod host;
pub mod oracle;
pub mod process;
pub mod raw;
pub mod report;
mod resets;

mod runner;
mod volume_ops;

pub use config::{ChaosConfig, FaultKind, Tuning};
pub use error::Error;
pub use report::Report;
pub use runner::{Layout, RoundPlan, plan_round, run, run_async};
