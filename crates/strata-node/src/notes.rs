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

/// The extension of a note being written, before it is renamed over the
/// note: `ID.new`.
const WRITING: &str = "new";

/// The note of volume `id` in `data_dir`.
///
/// Saves through one `FileNotes` (and its clones) run one at a time: two
/// saves that shared the temporary file could rename one's half-written
/// file over the note, or find it gone.
#[derive(Debug, Clone)]
pub struct FileNotes {
    path: PathBuf,
    saving: std::sync::Arc<std::sync::Mutex<()>>,
}

impl FileNotes {
    /// The note of volume `id` under `data_dir`.
    pub fn new(data_dir: &Path, id: u64) -> FileNotes {
        FileNotes { path: dir(data_dir).join(id.to_string()), saving: Default::default() }
    }

    fn save_now(&self, note: &[u8]) -> std::io::Result<()> {
        let _one = self.saving.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        if note.is_empty() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
        } else {
            let tmp = self.path.with_extension(WRITING);
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

/// Removes the notes of volumes not in `keep`, and the notes being
/// written for them. A kept volume's note being written stays: a save
/// may be renaming it over the note right now (the reconcile pass runs
/// this while the volume's owner saves notes).
///
/// # Errors
///
/// File system errors other than a missing directory or file.
pub fn retain(data_dir: &Path, keep: &[u64]) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir(data_dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let id =
            name.to_str().map(|n| n.strip_suffix(&format!(".{WRITING}")).unwrap_or(n)).and_then(|n| n.parse().ok());
        if id.is_none_or(|id| !keep.contains(&id)) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
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

    /// The pool soak's write fault: the reconcile pass freed the notes of
    /// volumes it no longer holds while an owner saved a note of a kept
    /// one, removed the kept note's file being written, and the save's
    /// rename failed (ENOENT), failing the host's write that needed it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn saves_survive_each_other_and_the_freeing_of_other_volumes() {
        let dir = tempfile::tempdir().unwrap();
        let n = FileNotes::new(dir.path(), 7);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let freeing = {
            let (path, stop) = (dir.path().to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let mut passes = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    FileNotes::new(&path, 8).save_now(b"gone").unwrap();
                    retain(&path, &[7]).unwrap();
                    passes += 1;
                }
                passes
            })
        };
        let savers: Vec<_> = (0..2u8)
            .map(|w| {
                let n = n.clone();
                tokio::spawn(async move {
                    for i in 0..200u8 {
                        n.save(vec![w, i, 0xAA]).await.expect("a save while other volumes' notes are freed");
                    }
                })
            })
            .collect();
        for s in savers {
            s.await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(freeing.join().unwrap() > 0);
        let last = n.load().await.unwrap();
        assert_eq!((last.len(), last[2]), (3, 0xAA), "a whole note: {last:?}");
        assert_eq!(last[1], 199, "the last save of a saver: {last:?}");
        let stray: Vec<_> =
            std::fs::read_dir(super::dir(dir.path())).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!stray.iter().any(|f| f == "8" || f == "8.new"), "volume 8's notes freed: {stray:?}");
    }
}
