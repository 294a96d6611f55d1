//! Erasure-coded volumes: `ec:K+M`, Reed-Solomon over strips on K+M
//! nodes, updated in place with an undo log so that no crash leaves a
//! stripe that decodes to bytes never written (the write hole).
//!
//! - [`codec`]: the Reed-Solomon code over strips;
//! - [`stripe`]: where a volume byte lives (stripe, strip, shard offset);
//! - [`scrub`]: whether a stripe's strips are one codeword (the check);
//! - [`shard`]: one node's shard volume with its undo log;
//! - [`undo_log`]: the node side of that undo log, durable on a device;
//! - [`volume`]: the volume its owner serves.
//!
//! The write path and the crash analysis are in `docs/pool.md`,
//! "Erasure coding".

pub mod codec;
pub mod scrub;
pub mod shard;
pub mod stripe;
pub mod undo_log;
pub mod volume;

pub use codec::{Codec, CodecError};
pub use shard::{LocalShard, Shard};
pub use stripe::Stripes;
pub use undo_log::UndoDevice;
pub use volume::{EcParts, ErasureVolume};
