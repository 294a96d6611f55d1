//! A note an owner keeps on a replica's node: a small blob the replica
//! stores for the volume and gives back, which a new owner reads from
//! every replica it reaches.
//!
//! strata's owners keep their volume's dirty-region log in the metadata
//! store; while that store does not answer, they keep it on their
//! replicas instead, so that whichever node takes the volume over later
//! still learns every region that may differ (`docs/pool.md`, "I/O
//! through a metadata outage").

use std::sync::Mutex;

use crate::{BlockError, BlockFuture};

/// Where a replica's node keeps the owner's note of one volume.
///
/// Implementations MUST make [`NoteStore::save`] durable and atomic
/// before it completes: after any crash, [`NoteStore::load`] returns the
/// last note saved completely, or an older one, never a mix.
pub trait NoteStore: Send + Sync {
    /// Replaces the note with `note` (empty: none).
    fn save(&self, note: Vec<u8>) -> BlockFuture<'_, Result<(), BlockError>>;
    /// The note (empty when none was saved).
    fn load(&self) -> BlockFuture<'_, Result<Vec<u8>, BlockError>>;
}

/// A note in memory (tests, and volatile nodes).
#[derive(Debug, Default)]
pub struct MemNoteStore {
    note: Mutex<Vec<u8>>,
}

impl NoteStore for MemNoteStore {
    fn save(&self, note: Vec<u8>) -> BlockFuture<'_, Result<(), BlockError>> {
        *self.note.lock().unwrap_or_else(|e| e.into_inner()) = note;
        Box::pin(std::future::ready(Ok(())))
    }

    fn load(&self) -> BlockFuture<'_, Result<Vec<u8>, BlockError>> {
        let note = self.note.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(std::future::ready(Ok(note)))
    }
}
