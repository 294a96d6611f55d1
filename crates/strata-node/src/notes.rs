//! The notes a node keeps for the owners of the volumes it holds a replica
//! of (`strata_block::NoteStore`): one file per volume under
//! `DATA_DIR/notes/`, replaced whole and durably (a new file synced and
//! renamed over the old one, then the directory synced), so that a crash
//! leaves the last note saved or the one before, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use strata_block::{BlockError, BlockFuture, NoteStore};

/// The notes directory of a data dir.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("notes")
}

/// The note of volume `id` in `data_dir`.
#[derive(Debug, Clone)]
pub struct FileNotes {
    path: PathBuf,
}

impl FileNotes {
    /// The note of volume `id` under `data_dir`.
    pub fn new(data_dir: &Path, id: u64) -> FileNotes {
        FileNotes { path: dir(data_dir).join(id.to_string()) }
    }

    fn save_now(&self, note: &[u8]) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        if note.is_empty() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
        } else {
            let tmp = self.path.with_extension("new");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(note)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
        }
        std::fs::File::open(dir)?.sync_all()
    }

    fn load_now(&self) -> std::io::Result<Vec<u8>> {
        match std::fs::read(&self.path) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

impl NoteStore for FileNotes {
    fn save(&self, note: Vec<u8>) -> BlockFuture<'_, Result<(), BlockError>> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.save_now(&note))
                .await
                .map_err(|e| BlockError::Io(std::io::Error::other(e.to_string())))?
                .map_err(BlockError::Io)
        })
    }

    fn load(&self) -> BlockFuture<'_, Result<Vec<u8>, BlockError>> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.load_now())
                .await
                .map_err(|e| BlockError::Io(std::io::Error::other(e.to_string())))?
                .map_err(BlockError::Io)
        })
    }
}

/// Removes the notes of volumes not in `keep`.
///
/// # Errors
///
/// File system errors other than a missing directory.
pub fn retain(data_dir: &Path, keep: &[u64]) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir(data_dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let id = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok());
        if id.is_none_or(|id| !keep.contains(&id)) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_note_is_replaced_whole_cleared_by_an_empty_one_and_freed_with_its_volume() {
        let dir = tempfile::tempdir().unwrap();
        let n = FileNotes::new(dir.path(), 7);
        assert!(n.load().await.unwrap().is_empty(), "none yet");
        n.save(b"first".to_vec()).await.unwrap();
        n.save(b"second".to_vec()).await.unwrap();
        assert_eq!(n.load().await.unwrap(), b"second");
        n.save(Vec::new()).await.unwrap();
        assert!(n.load().await.unwrap().is_empty(), "cleared");
        let other = FileNotes::new(dir.path(), 8);
        other.save(b"x".to_vec()).await.unwrap();
        n.save(b"y".to_vec()).await.unwrap();
        retain(dir.path(), &[7]).unwrap();
        assert_eq!(n.load().await.unwrap(), b"y");
        assert!(other.load().await.unwrap().is_empty(), "volume 8 is gone: its note too");
    }
}
