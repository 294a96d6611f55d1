//! Test helpers for this crate and, with the `test-utils` feature, for
//! others: the [`MetaStore`](crate::MetaStore) conformance suite, and a
//! private etcd server for tests of the etcd backend.

mod conformance;
mod etcd_process;
mod ports;

pub use conformance::check_conformance;
pub use etcd_process::EtcdProcess;
pub use ports::loopback_ports;
