//! strata-kv's integration tests, linked as one test binary (each file
//! under `tests/` is a binary of its own that links the whole dependency
//! tree): the store through its public API, the RESP server over real
//! sockets, its Redis compatibility (with redis-py too), and crashes (a
//! power loss in process, and kill -9 of a server in a child process).
//!
//! Every test opens its own store on its own RAM devices, and every server
//! listens on loopback port 0, so the two modules' tests run side by side
//! on the harness's threads as each module's tests always did. Time is per
//! test: the paused-clock tests pause their own runtime, and TTL tests
//! read a clock each test owns.

mod compat;
mod crash;
mod server;
mod shm;
mod store;
