//! Test helpers for this crate and, with the `test-utils` feature, for
//! others: the [`MetaStore`](crate::MetaStore) conformance suite.

mod conformance;

pub use conformance::check_conformance;
