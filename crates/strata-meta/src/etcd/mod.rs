//! A client of etcd's v3 API over its JSON gateway, and nothing else.
//!
//! etcd serves its gRPC API as JSON over HTTP/1.1 too (`POST /v3/kv/range`
//! and friends). Speaking that keeps strata free of a gRPC stack (tonic and
//! prost take minutes to build) at the price of base64 keys and a JSON
//! parser of our own, both fuzzed. Plain `http://` only: TLS to etcd is
//! not supported yet.
//!
//! - [`EtcdClient`]: range, put, delete, txn, compaction, leases; every
//!   call with a deadline and fail-over between endpoints (`http`).
//! - [`LeaseKeeper`]: renews a lease at TTL/3 and reports its loss.
//! - [`Watcher`]: a streaming watch that reconnects from the last revision
//!   seen and reports compaction.
//!
//! The metadata store on top is [`crate::EtcdMetaStore`]; the key layout
//! and what is atomic are in `docs/metadata.md`.

pub(crate) mod base64;
mod client;
mod error;
mod http;
mod lease;
mod types;
mod watch;
pub(crate) mod wire;

pub use base64::Base64Error;
pub use client::{EtcdClient, EtcdConfig, EtcdTls};
pub use error::{EtcdError, GRPC_NOT_FOUND};
pub use http::Endpoint;
pub use lease::{LeaseKeeper, LeaseLoss, LeaseStatus};
pub use types::{
    Compare, CompareOp, CompareTarget, KeyRange, KeyValue, Lease, LeaseId, RangeResponse, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchEvent,
};
pub use watch::{WatchUpdate, Watcher};

#[cfg(test)]
mod tests;
