//! Tests of `strata node` clusters: nodes as processes on loopback or in
//! network namespaces, with a private etcd, under kill -9, freezes, link
//! cuts, drains and rebuilds; a multipath host through failovers; the
//! KV tier on a pool volume; the pool chaos test and the soak
//! (`bench/pool-soak.sh`). One test binary (each one links the whole
//! tree); the tests of one module never run beside another module's
//! ([`strata_testkit::group`]), as when each was a binary of its own.

// Each module uses a different part of the shared helpers.
#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod netns;

mod cluster;
mod cluster_ec;
mod cluster_netns;
mod cluster_netns_ec;
mod cluster_rebuild;
mod failover;
mod kv_pool_netns;
mod pool_chaos;
mod pool_soak;
