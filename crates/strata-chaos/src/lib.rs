//! strata's chaos suite (work in progress).

pub mod block;
pub mod oracle;
pub mod rng;
