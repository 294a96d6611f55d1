//! strata-bench's integration tests, linked as one test binary (each file
//! under `tests/` is a binary of its own that links the whole dependency
//! tree): the load engine, and suites, gates, stop-loss and signed reports
//! wired to it.
//!
//! Every test that runs a workload starts its own target on loopback port
//! 0, so the two modules' tests run side by side on the harness's threads
//! as each module's tests always did. `../data/` holds reports written by
//! older releases.

mod engine;
mod reports;
