//! Reed-Solomon over whole strips: K data strips give M parity strips,
//! and any K of the K+M give back the data.
//!
//! The code (`reed-solomon-simd`, Leopard's FFT construction over
//! GF(2^16)) is systematic and linear over GF(2): the parity of
//! `a XOR b` is the parity of `a` XOR the parity of `b`. A partial-stripe
//! update uses that: the new parity is the old XOR the parity of the
//! change alone ([`Codec::parity_delta`]). A test pins the property.

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

/// Why the codec refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// K, M or the strip size is outside what the code supports.
    #[error("ec:{data}+{parity} with {strip}-byte strips is not supported: {why}")]
    Unsupported {
        /// K.
        data: usize,
        /// M.
        parity: usize,
        /// Bytes per strip.
        strip: usize,
        /// The library's reason.
        why: String,
    },
    /// Fewer than K strips of a stripe are available.
    #[error("{have} strips of a stripe are available; {need} are needed to decode")]
    TooFew {
        /// Strips at hand.
        have: usize,
        /// K.
        need: usize,
    },
    /// The library failed on valid input (a bug).
    #[error("reed-solomon: {0}")]
    Internal(String),
}

/// A K+M code on strips of a fixed size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    data: usize,
    parity: usize,
    strip: usize,
}

impl Codec {
    /// The `ec:data+parity` code over `strip`-byte strips.
    ///
    /// # Errors
    ///
    /// [`CodecError::Unsupported`] when the library does not support the
    /// counts, or `strip` is zero or odd.
    pub fn new(data: usize, parity: usize, strip: usize) -> Result<Codec, CodecError> {
        let unsupported = |why: &str| CodecError::Unsupported { data, parity, strip, why: why.to_owned() };
        if data == 0 || parity == 0 || !ReedSolomonEncoder::supports(data, parity) {
            return Err(unsupported("counts out of range"));
        }
        if strip == 0 || !strip.is_multiple_of(2) {
            return Err(unsupported("the strip size must be even and not zero"));
        }
        Ok(Codec { data, parity, strip })
    }

    /// K.
    pub fn data(&self) -> usize {
        self.data
    }

    /// M.
    pub fn parity(&self) -> usize {
        self.parity
    }

    /// Bytes per strip.
    pub fn strip(&self) -> usize {
        self.strip
    }

    /// The M parity strips of K data strips.
    ///
    /// Each strip may also be a *run*: the strips of consecutive stripes
    /// one after the other (all K the same length, a whole number of
    /// strips). The code works symbol by symbol, so the parity of runs is
    /// the runs of the stripes' parity, for one setup of the library.
    ///
    /// # Errors
    ///
    /// [`CodecError::Internal`] when `data` is not K strips (or runs) of
    /// one length, a multiple of the strip size (a caller's bug), or the
    /// library fails.
    pub fn encode<T: AsRef<[u8]>>(&self, data: &[T]) -> Result<Vec<Vec<u8>>, CodecError> {
        let internal = |e: reed_solomon_simd::Error| CodecError::Internal(e.to_string());
        if data.len() != self.data {
            return Err(CodecError::Internal(format!("{} data strips, not {}", data.len(), self.data)));
        }
        let len = self.run_length(data.iter().map(AsRef::as_ref))?;
        let mut enc = ReedSolomonEncoder::new(self.data, self.parity, len).map_err(internal)?;
        for d in data {
            enc.add_original_shard(d.as_ref()).map_err(internal)?;
        }
        let out = enc.encode().map_err(internal)?;
        Ok(out.recovery_iter().map(<[u8]>::to_vec).collect())
    }

    /// The change to every parity strip when data strip `index` changes
    /// by `delta` (old XOR new) and the others stay: XOR it into the old
    /// parity.
    ///
    /// # Errors
    ///
    /// As [`Codec::encode`].
    pub fn parity_delta(&self, deltas: &[(usize, &[u8])]) -> Result<Vec<Vec<u8>>, CodecError> {
        let zero = vec![0u8; self.strip];
        let mut strips: Vec<&[u8]> = vec![&zero; self.data];
        for &(i, d) in deltas {
            if i >= self.data {
                return Err(CodecError::Internal(format!("data strip {i} of {}", self.data)));
            }
            strips[i] = d;
        }
        self.encode(&strips)
    }

    /// The length of strips (or runs, see [`Codec::encode`]) that must all
    /// have it: a whole, non-zero number of strips.
    fn run_length<'a>(&self, strips: impl Iterator<Item = &'a [u8]>) -> Result<usize, CodecError> {
        let mut len = None;
        for s in strips {
            if *len.get_or_insert(s.len()) != s.len() {
                return Err(CodecError::Internal("strips of different lengths".into()));
            }
        }
        match len {
            Some(n) if n > 0 && n.is_multiple_of(self.strip) => Ok(n),
            _ => Err(CodecError::Internal(format!("strips of {len:?} bytes, not a multiple of {}", self.strip))),
        }
    }

    /// Every data strip from any K strips: `shards[i]` is strip `i`
    /// (data first, then parity) when at hand. Returns the K data strips.
    /// Runs of strips decode as one (see [`Codec::encode`]): one setup of
    /// the library, which is what a decode costs (~0.2 ms).
    ///
    /// # Errors
    ///
    /// [`CodecError::TooFew`] with fewer than K strips at hand.
    pub fn decode(&self, shards: &[Option<&[u8]>]) -> Result<Vec<Vec<u8>>, CodecError> {
        let internal = |e: reed_solomon_simd::Error| CodecError::Internal(e.to_string());
        let have = shards.iter().filter(|s| s.is_some()).count();
        if shards.len() != self.data + self.parity {
            return Err(CodecError::Internal(format!("{} strips, not {}", shards.len(), self.data + self.parity)));
        }
        if have < self.data {
            return Err(CodecError::TooFew { have, need: self.data });
        }
        let len = self.run_length(shards.iter().flatten().copied())?;
        if shards[..self.data].iter().all(Option::is_some) {
            return Ok(shards[..self.data].iter().flatten().map(|s| s.to_vec()).collect());
        }
        let mut dec = ReedSolomonDecoder::new(self.data, self.parity, len).map_err(internal)?;
        for (i, s) in shards.iter().enumerate() {
            if let Some(s) = s {
                if i < self.data {
                    dec.add_original_shard(i, s).map_err(internal)?;
                } else {
                    dec.add_recovery_shard(i - self.data, s).map_err(internal)?;
                }
            }
        }
        let out = dec.decode().map_err(internal)?;
        (0..self.data)
            .map(|i| match shards[i] {
                Some(s) => Ok(s.to_vec()),
                None => out
                    .restored_original(i)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| CodecError::Internal(format!("strip {i} not restored"))),
            })
            .collect()
    }
}

/// XORs `from` into `into`.
pub fn xor_into(into: &mut [u8], from: &[u8]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a ^= b;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn strips(k: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..k)
            .map(|i| {
                (0..len).map(|j| (j as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add(i as u8 * 7)).collect()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any M of K+M strips lost still decodes to the data.
        #[test]
        fn any_m_lost_still_decodes(k in 1usize..9, m in 1usize..4, seed: u8, lost_seed: u64) {
            let codec = Codec::new(k, m, 64).unwrap();
            let data = strips(k, 64, seed);
            let parity = codec.encode(&data).unwrap();
            let all: Vec<&[u8]> = data.iter().chain(&parity).map(Vec::as_slice).collect();
            // Pick M distinct strips to lose from the seed.
            let mut lost = std::collections::BTreeSet::new();
            let mut rng = strata_rand::Rng::new(lost_seed);
            while lost.len() < m {
                lost.insert(rng.below((k + m) as u64) as usize);
            }
            let shards: Vec<Option<&[u8]>> = all.iter().enumerate().map(|(i, s)| (!lost.contains(&i)).then_some(*s)).collect();
            prop_assert_eq!(codec.decode(&shards).unwrap(), data);
        }

        /// Runs of strips (consecutive stripes' strips one after the
        /// other) encode and decode as one: the stripes' results, run
        /// together.
        #[test]
        fn runs_of_stripes_code_as_the_stripes_do(k in 1usize..9, m in 1usize..4, n in 1usize..5, seed: u8, lost in 0usize..11) {
            let codec = Codec::new(k, m, 64).unwrap();
            let stripes: Vec<Vec<Vec<u8>>> = (0..n).map(|i| strips(k, 64, seed.wrapping_add(i as u8 * 37))).collect();
            let parity: Vec<Vec<Vec<u8>>> = stripes.iter().map(|d| codec.encode(d).unwrap()).collect();
            let run = |of: &Vec<Vec<Vec<u8>>>, p: usize| -> Vec<u8> { of.iter().flat_map(|s| s[p].clone()).collect() };
            let data_runs: Vec<Vec<u8>> = (0..k).map(|p| run(&stripes, p)).collect();
            let parity_runs: Vec<Vec<u8>> = (0..m).map(|p| run(&parity, p)).collect();
            prop_assert_eq!(&codec.encode(&data_runs).unwrap(), &parity_runs);
            let lost = lost % (k + m);
            let all: Vec<&[u8]> = data_runs.iter().chain(&parity_runs).map(Vec::as_slice).collect();
            let shards: Vec<Option<&[u8]>> = all.iter().enumerate().map(|(i, s)| (i != lost).then_some(*s)).collect();
            prop_assert_eq!(codec.decode(&shards).unwrap(), data_runs);
        }

        /// The code is linear: old parity XOR the parity of a change is
        /// the parity of the changed data.
        #[test]
        fn parity_of_a_change_updates_parity(k in 1usize..9, m in 1usize..4, seed: u8, at in 0usize..8, new: u8) {
            let at = at % k;
            let codec = Codec::new(k, m, 32).unwrap();
            let mut data = strips(k, 32, seed);
            let mut parity = codec.encode(&data).unwrap();
            let delta: Vec<u8> = data[at].iter().map(|b| b ^ new.wrapping_add(1)).zip(&data[at]).map(|(n, o)| n ^ o).collect();
            let pd = codec.parity_delta(&[(at, &delta)]).unwrap();
            xor_into(&mut data[at], &delta);
            for (p, d) in parity.iter_mut().zip(&pd) {
                xor_into(p, d);
            }
            prop_assert_eq!(parity, codec.encode(&data).unwrap());
        }
    }

    #[test]
    fn too_few_strips_is_an_error_not_garbage() {
        let codec = Codec::new(4, 2, 64).unwrap();
        let data = strips(4, 64, 1);
        let p = codec.encode(&data).unwrap();
        let shards = [None, None, None, Some(&data[3][..]), Some(&p[0][..]), Some(&p[1][..])];
        assert_eq!(codec.decode(&shards), Err(CodecError::TooFew { have: 3, need: 4 }));
        assert!(Codec::new(0, 2, 64).is_err());
        assert!(Codec::new(4, 2, 63).is_err());
        assert!(codec.encode(&data[..3]).is_err());
    }
}

#[cfg(test)]
mod delta_tests {
    use super::*;

    #[test]
    fn parity_of_changes_to_several_strips_updates_parity() {
        for strip in [64usize, 4096] {
            for touched in [vec![0usize], vec![1, 2], vec![0, 3], vec![0, 1, 2]] {
                let codec = Codec::new(4, 2, strip).unwrap();
                let mut data: Vec<Vec<u8>> =
                    (0..4).map(|i| (0..strip).map(|j| (i * 31 + j * 7) as u8).collect()).collect();
                let mut parity = codec.encode(&data).unwrap();
                let deltas: Vec<(usize, Vec<u8>)> =
                    touched.iter().map(|&d| (d, (0..strip).map(|j| (j * 13 + d) as u8 | 1).collect())).collect();
                let refs: Vec<(usize, &[u8])> = deltas.iter().map(|(d, v)| (*d, v.as_slice())).collect();
                let pd = codec.parity_delta(&refs).unwrap();
                for (d, v) in &deltas {
                    xor_into(&mut data[*d], v);
                }
                for (p, x) in parity.iter_mut().zip(&pd) {
                    xor_into(p, x);
                }
                assert_eq!(parity, codec.encode(&data).unwrap(), "strip {strip}, touched {touched:?}");
            }
        }
    }
}
