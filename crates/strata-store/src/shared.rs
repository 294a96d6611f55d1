//! [`Shared`]: the state a [`Store`](crate::Store) and all its volumes
//! hold in common (one `Arc<Shared>`): the drives, the extent size, and
//! the allocation generation counter; with the operations both sides use
//! on them: allocating an extent and committing every drive.
//!
//! It sits below `store.rs` and `volume.rs` (each imports it, it imports
//! neither), so that volumes can allocate and commit without reaching
//! back into the store.
//!
//! Invariants:
//! - `drives` and `extent_size` never change after the store opens;
//! - generations handed out by [`Shared::next_generation`] only grow, and
//!   start above every generation recovered from the drives, so that a
//!   new allocation wins over any older claim to the same logical extent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use strata_block::BlockError;

use crate::drive::Drive;

/// State shared by the store and its volumes.
pub(crate) struct Shared {
    pub(crate) drives: Vec<Arc<Drive>>,
    /// Extent size in bytes, the same on every drive; fixed for the
    /// store's life.
    pub(crate) extent_size: u32,
    next_gen: AtomicU64,
}

impl Shared {
    /// State over `drives`, handing out allocation generations from
    /// `next_gen` up.
    pub(crate) fn new(drives: Vec<Arc<Drive>>, extent_size: u32, next_gen: u64) -> Shared {
        Shared { drives, extent_size, next_gen: AtomicU64::new(next_gen) }
    }

    pub(crate) fn extent_size(&self) -> u64 {
        u64::from(self.extent_size)
    }

    pub(crate) fn next_generation(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a free extent from the drive with the most free extents.
    /// When none is free but frees are waiting for a commit, commits them
    /// and tries again.
    ///
    /// # Errors
    ///
    /// [`BlockError::NoSpace`] when every drive is full.
    pub(crate) async fn allocate(&self) -> Result<(usize, u64), BlockError> {
        for _ in 0..2 {
            loop {
                let best = (0..self.drives.len())
                    .filter(|&i| !self.drives[i].is_failed())
                    .map(|i| (self.drives[i].counts().free, i))
                    .max();
                match best {
                    Some((free, i)) if free > 0 => {
                        if let Some(p) = self.drives[i].take_free() {
                            return Ok((i, p));
                        }
                        // Raced with another allocation; look again.
                    }
                    _ => break,
                }
            }
            let mut reclaimed = false;
            for d in &self.drives {
                if d.has_freeing() && d.commit(false).await.is_ok() {
                    reclaimed = true;
                }
            }
            if !reclaimed {
                break;
            }
        }
        Err(BlockError::NoSpace)
    }

    /// Commits every drive; the first error wins, but all are tried.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (see [`Drive::commit`]).
    pub(crate) async fn commit_all(&self, checkpoint: bool) -> Result<(), BlockError> {
        let mut first = Ok(());
        for d in &self.drives {
            if let Err(e) = d.commit(checkpoint).await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}
