//! Tests of the `strata` binary as one process: `strata serve` driven by
//! strata's initiator and the volume CLI, `strata kv serve` driven by
//! redis-cli, the benchmark and simulator commands, and a minute of
//! chaos. One test binary (each one links the whole tree); the tests of
//! one module never run beside another module's
//! ([`strata_testkit::group`]), as when each was a binary of its own.

mod bench_cli;
mod chaos;
mod kv_redis;
mod serve;
mod sim_cli;
