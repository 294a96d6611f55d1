//! [`Region`]: a contiguous range of another device's blocks as a device
//! of its own, so that several users can share one volume without
//! touching each other's blocks (the KV store's writers on one pool
//! volume).
//!
//! Every request is checked against the region before it reaches the
//! device: a region can neither read nor write outside itself. Flush is
//! the device's (it covers the whole device).

use std::sync::Arc;

use crate::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, ReadData, blocks_in, check_range};

/// Blocks `[first, first + blocks)` of `dev`.
pub struct Region {
    dev: Arc<dyn BlockDevice>,
    first: u64,
    geometry: Geometry,
}

impl Region {
    /// Region `index` of `count` equal regions of `dev` (sizes rounded
    /// down to whole MiB where the block size allows, the remainder
    /// unused).
    ///
    /// # Errors
    ///
    /// `index >= count`, or a region would be empty.
    pub fn nth(dev: Arc<dyn BlockDevice>, index: u64, count: u64) -> Result<Region, BlockError> {
        let g = dev.geometry();
        if count == 0 || index >= count {
            return Err(BlockError::OutOfRange { lba: index, blocks: 1, num_blocks: count });
        }
        let per_mib = ((1u64 << 20) / u64::from(g.block_size)).max(1);
        let blocks = g.num_blocks / count / per_mib * per_mib;
        if blocks == 0 {
            return Err(BlockError::OutOfRange { lba: 0, blocks: count, num_blocks: g.num_blocks });
        }
        Ok(Region { dev, first: index * blocks, geometry: Geometry { block_size: g.block_size, num_blocks: blocks } })
    }
}

impl BlockDevice for Region {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn usage(&self) -> DeviceUsage {
        DeviceUsage { provisioned_bytes: self.geometry.size_bytes(), allocated_bytes: 0 }
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let checked = blocks_in(self.geometry, buf.len()).and_then(|n| check_range(self.geometry, lba, n));
        match checked {
            Ok(()) => self.dev.read(self.first + lba, buf),
            Err(e) => Box::pin(async move { (buf, Err(e)) }),
        }
    }

    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        match check_range(self.geometry, lba, blocks) {
            Ok(()) => self.dev.read_data(self.first + lba, blocks),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let checked = blocks_in(self.geometry, buf.len()).and_then(|n| check_range(self.geometry, lba, n));
        match checked {
            Ok(()) => self.dev.write(self.first + lba, buf, fua),
            Err(e) => Box::pin(async move { (buf, Err(e)) }),
        }
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        match check_range(self.geometry, lba, blocks) {
            Ok(()) => self.dev.write_zeroes(self.first + lba, blocks, deallocate),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        if let Some(e) = ranges.iter().find_map(|&(lba, n)| check_range(self.geometry, lba, n).err()) {
            return Box::pin(async move { Err(e) });
        }
        let first = self.first;
        self.dev.deallocate(ranges.into_iter().map(|(lba, n)| (first + lba, n)).collect())
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        self.dev.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;
    use crate::mem::tests::now;

    fn filled(b: u8) -> IoBuf {
        let mut buf = IoBuf::zeroed(4096);
        buf.as_mut_slice().fill(b);
        buf
    }

    #[test]
    fn regions_are_disjoint_and_cannot_reach_outside() {
        // 10 MiB + 3 blocks in three regions: 3 MiB each, the rest unused.
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 2563));
        let r: Vec<Region> = (0..3).map(|i| Region::nth(dev.clone(), i, 3).unwrap()).collect();
        assert!(r.iter().all(|r| r.geometry() == Geometry { block_size: 4096, num_blocks: 768 }));
        for (i, reg) in r.iter().enumerate() {
            let (_, res) = now(reg.write(0, filled(i as u8 + 1), false));
            res.unwrap();
        }
        for (i, reg) in r.iter().enumerate() {
            let (b, res) = now(reg.read(0, IoBuf::zeroed(4096)));
            res.unwrap();
            assert!(b.as_slice().iter().all(|&x| x == i as u8 + 1), "region {i}");
        }
        // Region 1's block 0 is the device's block 768.
        let (b, res) = now(dev.read(768, IoBuf::zeroed(4096)));
        res.unwrap();
        assert!(b.as_slice().iter().all(|&x| x == 2));
        let (_, res) = now(r[0].write(768, filled(9), false));
        assert!(matches!(res, Err(BlockError::OutOfRange { .. })));
        let (_, res) = now(r[0].read(767, IoBuf::zeroed(8192)));
        assert!(matches!(res, Err(BlockError::OutOfRange { .. })));
        assert!(now(r[2].write_zeroes(700, 100, false)).is_err());
        assert!(now(r[2].deallocate(vec![(0, 1), (768, 1)])).is_err());
        assert!(Region::nth(dev.clone(), 3, 3).is_err());
        assert!(Region::nth(dev, 0, 0).is_err());
    }
}
