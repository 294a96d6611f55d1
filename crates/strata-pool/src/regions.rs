//! Regions of a volume and sets of them: the unit the dirty-region log,
//! resync and failover repair work in.
//!
//! A volume is cut into equal regions, a power of two of at least
//! [`MIN_REGION_BYTES`], large enough that a volume has at most
//! [`MAX_REGIONS`] of them, so that a [`RegionSet`] is a bitmap of at most
//! 8 KiB whatever the volume's size: small enough to rewrite in the
//! metadata store on every change.
//!
//! # Encoding of a [`RegionSet`]
//!
//! | offset | size | field                                     |
//! |--------|------|-------------------------------------------|
//! | 0      | 4    | number of regions `n` (u32 LE), ≤ MAX_REGIONS |
//! | 4      | ⌈n/8⌉ | bitmap, region `i` is bit `i % 8` of byte `i / 8` |
//!
//! Bits past `n` in the last byte are zero; a decoder refuses anything else.

use std::ops::Range;

/// The smallest region.
pub const MIN_REGION_BYTES: u64 = 1 << 20;

/// The most regions a volume has.
pub const MAX_REGIONS: u64 = 1 << 16;

/// Bytes of a region set's header.
pub const SET_HEADER_LEN: usize = 4;

/// How a volume is cut into regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regions {
    shift: u32,
    count: u64,
}

impl Regions {
    /// The regions of a volume of `size_bytes`. Regions never straddle a
    /// chunk: `chunk_bytes` (a power of two) caps the region size.
    pub fn for_volume(size_bytes: u64, chunk_bytes: u64) -> Regions {
        let wanted = size_bytes.div_ceil(MAX_REGIONS).max(MIN_REGION_BYTES);
        let mut shift = wanted.next_power_of_two().trailing_zeros();
        if chunk_bytes.is_power_of_two() {
            shift = shift.min(chunk_bytes.trailing_zeros());
        }
        let count = size_bytes.div_ceil(1 << shift);
        Regions { shift, count }
    }

    /// Bytes per region.
    pub fn region_bytes(&self) -> u64 {
        1 << self.shift
    }

    /// Number of regions.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The regions that bytes `offset..offset+len` touch (empty for `len` 0).
    pub fn touched(&self, offset: u64, len: u64) -> Range<u64> {
        if len == 0 {
            return 0..0;
        }
        let first = offset >> self.shift;
        let last = (offset.saturating_add(len) - 1) >> self.shift;
        first..last + 1
    }

    /// Byte range of region `r`, cut at `size_bytes`.
    pub fn bytes_of(&self, r: u64, size_bytes: u64) -> Range<u64> {
        let start = r << self.shift;
        start.min(size_bytes)..(start + self.region_bytes()).min(size_bytes)
    }
}

/// A set of regions, as a bitmap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegionSet {
    words: Vec<u64>,
}

/// A region set's bytes do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("region set: {0}")]
pub struct RegionSetError(pub &'static str);

impl RegionSet {
    /// The empty set.
    pub fn new() -> RegionSet {
        RegionSet::default()
    }

    /// Adds `r`; true when it was not there.
    pub fn insert(&mut self, r: u64) -> bool {
        let (w, b) = ((r / 64) as usize, r % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let had = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !had
    }

    /// Removes `r`; true when it was there.
    pub fn remove(&mut self, r: u64) -> bool {
        let (w, b) = ((r / 64) as usize, r % 64);
        match self.words.get_mut(w) {
            Some(word) if *word & (1 << b) != 0 => {
                *word &= !(1 << b);
                true
            }
            _ => false,
        }
    }

    /// True when `r` is in the set.
    pub fn contains(&self, r: u64) -> bool {
        self.words.get((r / 64) as usize).is_some_and(|w| w & (1 << (r % 64)) != 0)
    }

    /// Adds every region of `other`; true when any was new.
    pub fn union_with(&mut self, other: &RegionSet) -> bool {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        let mut grew = false;
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            grew |= b & !*a != 0;
            *a |= b;
        }
        grew
    }

    /// True when no region is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Number of regions in the set.
    pub fn len(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// The regions in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| (0..64u64).filter(move |b| w & (1 << b) != 0).map(move |b| i as u64 * 64 + b))
    }

    /// Encodes the set for a volume of `regions` (see the module docs).
    /// Regions at or past `regions.count()` are not encoded.
    pub fn encode(&self, regions: Regions) -> Vec<u8> {
        let n = regions.count.min(MAX_REGIONS);
        let mut out = vec![0u8; SET_HEADER_LEN + n.div_ceil(8) as usize];
        out[..SET_HEADER_LEN].copy_from_slice(&(n as u32).to_le_bytes());
        for r in self.iter().take_while(|&r| r < n) {
            out[SET_HEADER_LEN + (r / 8) as usize] |= 1 << (r % 8);
        }
        out
    }

    /// Decodes a set from the front of `bytes`, returning it, the number of
    /// regions it was encoded for, and the bytes it used.
    ///
    /// # Errors
    ///
    /// [`RegionSetError`] when `bytes` is short, the count is above
    /// [`MAX_REGIONS`] or bits past the count are set.
    pub fn decode(bytes: &[u8]) -> Result<(RegionSet, u64, usize), RegionSetError> {
        let head: [u8; SET_HEADER_LEN] =
            bytes.get(..SET_HEADER_LEN).and_then(|b| b.try_into().ok()).ok_or(RegionSetError("truncated header"))?;
        let n = u64::from(u32::from_le_bytes(head));
        if n > MAX_REGIONS {
            return Err(RegionSetError("more regions than a volume has"));
        }
        let len = n.div_ceil(8) as usize;
        let map = bytes.get(SET_HEADER_LEN..SET_HEADER_LEN + len).ok_or(RegionSetError("truncated bitmap"))?;
        if n % 8 != 0 && map.last().is_some_and(|&b| b >> (n % 8) != 0) {
            return Err(RegionSetError("bits set past the region count"));
        }
        let mut set = RegionSet::new();
        for (i, &byte) in map.iter().enumerate() {
            for b in 0..8 {
                if byte & (1 << b) != 0 {
                    set.insert(i as u64 * 8 + b);
                }
            }
        }
        Ok((set, n, SET_HEADER_LEN + len))
    }
}

impl FromIterator<u64> for RegionSet {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> RegionSet {
        let mut s = RegionSet::new();
        for r in iter {
            s.insert(r);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn regions_are_at_least_a_mebibyte_at_most_65536_and_inside_a_chunk() {
        let small = Regions::for_volume(10 * GIB, 64 << 20);
        assert_eq!((small.region_bytes(), small.count()), (1 << 20, 10 * 1024));
        let big = Regions::for_volume(1 << 50, 64 << 20);
        assert_eq!(big.region_bytes(), 64 << 20, "capped by the chunk");
        let big = Regions::for_volume(1 << 40, 1 << 30);
        assert_eq!((big.region_bytes(), big.count()), (16 << 20, 65536));
        let odd = Regions::for_volume(GIB + 4096, 64 << 20);
        assert_eq!(odd.count(), 1025, "a partial last region counts");
        assert_eq!(odd.bytes_of(1024, GIB + 4096), GIB..GIB + 4096);
    }

    #[test]
    fn a_range_touches_the_regions_it_overlaps() {
        let r = Regions::for_volume(8 << 20, 64 << 20);
        assert_eq!(r.touched(0, 4096), 0..1);
        assert_eq!(r.touched((1 << 20) - 4096, 8192), 0..2);
        assert_eq!(r.touched(3 << 20, 1 << 20), 3..4);
        assert_eq!(r.touched(5 << 20, 0), 0..0);
    }

    #[test]
    fn the_encoding_is_pinned() {
        let regions = Regions::for_volume(10 << 20, 64 << 20);
        let set: RegionSet = [0, 3, 9].into_iter().collect();
        assert_eq!(set.encode(regions), vec![10, 0, 0, 0, 0b0000_1001, 0b0000_0010]);
    }

    #[test]
    fn bad_encodings_are_errors() {
        assert!(RegionSet::decode(&[1, 0]).is_err());
        assert!(RegionSet::decode(&[9, 0, 0, 0, 0]).is_err(), "bitmap short");
        assert!(RegionSet::decode(&[3, 0, 0, 0, 0b1000]).is_err(), "bit past the count");
        assert!(RegionSet::decode(&[1, 0, 1, 0]).is_err(), "count above the maximum");
        assert_eq!(RegionSet::decode(&[0, 0, 0, 0]).unwrap(), (RegionSet::new(), 0, 4));
    }

    proptest! {
        #[test]
        fn sets_round_trip_and_behave_like_btreesets(
            ops in proptest::collection::vec((any::<bool>(), 0u64..700), 0..200),
        ) {
            let regions = Regions::for_volume(700 << 20, 64 << 20);
            let mut set = RegionSet::new();
            let mut model = std::collections::BTreeSet::new();
            for (add, r) in ops {
                if add {
                    prop_assert_eq!(set.insert(r), model.insert(r));
                } else {
                    prop_assert_eq!(set.remove(r), model.remove(&r));
                }
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(set.len(), model.len() as u64);
            let bytes = set.encode(regions);
            let (back, n, used) = RegionSet::decode(&bytes).unwrap();
            prop_assert_eq!(n, 700);
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(back.iter().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
        }
    }
}
