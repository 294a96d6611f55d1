//! [`RawDevice`]: a whole file or block device as one [`BlockDevice`],
//! through the same I/O engine as the store's drives (io_uring with
//! `O_DIRECT`), with no allocator or journal in between.
//!
//! For users that keep their own on-disk format, such as the KV cache's
//! segment log: they get the drive's own speed, and deallocation punches
//! holes in a file (or zeroes a block device's range) so that space goes
//! back. Blocks are 4096 bytes; a device size that is not a multiple of it
//! is rounded down.

use std::path::Path;
use std::sync::Arc;

use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, blocks_in, check_range};

use crate::StoreError;
use crate::io::{Backend, ZeroMethod};
use crate::store::{lock_drive, open_direct, probe_direct};

/// Block size of a [`RawDevice`].
pub const RAW_BLOCK: u32 = 4096;

/// A file or block device served whole, with `O_DIRECT` through io_uring.
pub struct RawDevice {
    label: String,
    backend: Backend,
    geometry: Geometry,
}

impl RawDevice {
    /// Opens `path`: a block device, or a file created at `size` bytes
    /// when missing (an existing file keeps its size unless `size` is
    /// larger, when it grows). The file is locked against a second user.
    /// `allow_buffered` accepts a file system without `O_DIRECT` (tmpfs),
    /// with buffered I/O and `fdatasync`.
    ///
    /// # Errors
    ///
    /// The path cannot be opened or locked, a file is missing and no size
    /// was given, the device is smaller than one block, or `O_DIRECT` is
    /// refused and not allowed to fall back.
    pub fn open(path: &Path, size: Option<u64>, allow_buffered: bool) -> Result<Arc<RawDevice>, StoreError> {
        let label = path.display().to_string();
        let exists = path.exists();
        if !exists && size.is_none() {
            return Err(StoreError::BadDriveSpec {
                spec: label,
                reason: "the file does not exist and no size was given".into(),
            });
        }
        let file = open_direct(path, !exists, allow_buffered)?;
        lock_drive(&file, &label)?;
        let meta = file.metadata().map_err(|e| StoreError::io(&label, "stat", e))?;
        let (len, zero) = if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
            let len = crate::sys::block_device_size(&file).map_err(|e| StoreError::io(&label, "BLKGETSIZE64", e))?;
            (len, ZeroMethod::BlkZeroOut)
        } else {
            let mut len = meta.len();
            if let Some(size) = size.filter(|&s| s > len) {
                file.set_len(size).map_err(|e| StoreError::io(&label, "set_len", e))?;
                len = size;
            }
            (len, ZeroMethod::PunchHole)
        };
        let num_blocks = len / u64::from(RAW_BLOCK);
        if num_blocks == 0 {
            return Err(StoreError::BadDriveSpec {
                spec: label,
                reason: format!("{len} bytes is less than one block"),
            });
        }
        probe_direct(&file, path, len)?;
        let engine = crate::io::Engine::start(Arc::new(file), zero, &label, true)
            .map_err(|e| StoreError::io(&label, "start I/O thread", e))?;
        Ok(Arc::new(RawDevice {
            label,
            backend: Backend::Engine(engine),
            geometry: Geometry { block_size: RAW_BLOCK, num_blocks },
        }))
    }

    /// The path it was opened with.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// True when I/O goes through io_uring (not the pread/pwrite thread).
    pub fn is_uring(&self) -> bool {
        matches!(&self.backend, Backend::Engine(e) if e.is_uring())
    }

    fn range(&self, lba: u64, len: usize) -> Result<u64, BlockError> {
        let blocks = blocks_in(self.geometry, len)?;
        check_range(self.geometry, lba, blocks)?;
        Ok(lba * u64::from(RAW_BLOCK))
    }
}

fn io_res((buf, r): (IoBuf, std::io::Result<()>)) -> (IoBuf, Result<(), BlockError>) {
    (buf, r.map_err(BlockError::Io))
}

impl BlockDevice for RawDevice {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn usage(&self) -> DeviceUsage {
        let size = self.geometry.size_bytes();
        DeviceUsage { provisioned_bytes: size, allocated_bytes: size }
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            match self.range(lba, buf.len()) {
                Ok(off) => io_res(self.backend.read(off, buf).await),
                Err(e) => (buf, Err(e)),
            }
        })
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            let off = match self.range(lba, buf.len()) {
                Ok(off) => off,
                Err(e) => return (buf, Err(e)),
            };
            let (buf, r) = io_res(self.backend.write(off, buf).await);
            if r.is_err() || !fua {
                return (buf, r);
            }
            (buf, self.backend.sync().await.map_err(BlockError::Io))
        })
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, _deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            check_range(self.geometry, lba, blocks)?;
            let bs = u64::from(RAW_BLOCK);
            Ok(self.backend.zero(lba * bs, blocks * bs).await?)
        })
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            for (lba, blocks) in ranges {
                self.write_zeroes(lba, blocks, true).await?;
            }
            Ok(())
        })
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move { Ok(self.backend.sync().await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_back_what_it_wrote_and_zeroes_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw");
        let dev = RawDevice::open(&path, Some(1 << 20), true).unwrap();
        assert_eq!(dev.geometry().num_blocks, 256);
        let (_, r) = dev.write(3, IoBuf::from_slice(&[9; 8192]), true).await;
        r.unwrap();
        let (back, r) = dev.read(3, IoBuf::zeroed(8192)).await;
        r.unwrap();
        assert!(back.iter().all(|&b| b == 9));
        dev.deallocate(vec![(4, 1)]).await.unwrap();
        let (back, r) = dev.read(3, IoBuf::zeroed(8192)).await;
        r.unwrap();
        assert!(back[..4096].iter().all(|&b| b == 9) && back[4096..].iter().all(|&b| b == 0));
        let (_, r) = dev.read(255, IoBuf::zeroed(8192)).await;
        assert!(matches!(r, Err(BlockError::OutOfRange { .. })));
        drop(dev);
        // The size stays; a second open while one holds it is refused.
        let dev = RawDevice::open(&path, None, true).unwrap();
        assert_eq!(dev.geometry().size_bytes(), 1 << 20);
    }

    #[test]
    fn a_missing_file_without_a_size_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(RawDevice::open(&dir.path().join("none"), None, true).is_err());
    }
}
