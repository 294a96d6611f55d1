//! Test helpers for this crate and, with the `test-utils` feature, for
//! others: the [`MetaStore`](crate::MetaStore) conformance suite, a
//! private etcd server for tests of the etcd backend, an in-process fake
//! of it, and [`EtcdServer`] to run one test body on either.

mod conformance;
mod etcd_process;
mod etcd_server;
mod fake_etcd;
mod fake_mvcc;
mod ports;

pub use conformance::check_conformance;
pub use etcd_process::{EtcdProcess, TlsFiles};
pub use etcd_server::EtcdServer;
pub use fake_etcd::FakeEtcd;
pub use ports::loopback_ports;
