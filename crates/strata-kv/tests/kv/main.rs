//! strata-kv's integration tests, linked as one test binary (each file
//! under `tests/` is a binary of its own that links the whole dependency
//! tree): the store through its public API, and the RESP server over real
//! sockets.
//!
//! Every test opens its own store on its own RAM devices, and every server
//! listens on loopback port 0, so the two modules' tests run side by side
//! on the harness's threads as each module's tests always did. Time is per
//! test: the paused-clock tests pause their own runtime, and TTL tests
//! read a clock each test owns.

mod server;
mod shm;
mod store;
