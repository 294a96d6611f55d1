//! strata-target's integration tests, one module per area, linked as one
//! test binary: each file under `tests/` is a binary of its own that links
//! the whole dependency tree, and CI paid that link once per file.
//!
//! Every test starts its own target on loopback port 0 and keeps its state
//! in that target, so tests of different modules run side by side on the
//! harness's threads as tests of one module always did. None installs a
//! tracing subscriber, sets an environment variable or reads a
//! process-wide counter. `connect_logging.rs` stays a binary of its own
//! because it captures logs (see its module doc); it shares [`common`]
//! with this binary.

#[path = "../common/mod.rs"]
mod common;

mod ana;
mod connect;
mod dhchap;
mod fenced;
mod hardening;
mod health;
mod host_target;
mod identify;
mod masking;
mod raw_pdus;
mod remote_namespace;
mod reservations;
mod tls;
