//! Whether one stripe's strips are one codeword, and if not, which strip
//! is wrong: the pure part of an erasure-coded volume's check (see
//! [`crate::check`]) and of a new owner's roll back ([`to_undo`]). No
//! I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::codec::{Codec, CodecError};

/// What a stripe's strips at hand say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every strip at hand fits the others.
    Consistent,
    /// Only K strips at hand (or fewer): any K decode, nothing to compare.
    Unchecked,
    /// Strip `position` is wrong: the others agree without it, and
    /// `value` is what it should hold.
    Wrong {
        /// Position in the stripe (data first, then parity).
        position: usize,
        /// Its right value, from the others.
        value: Vec<u8>,
    },
    /// They disagree, and no single strip explains it (or too few are at
    /// hand to tell which).
    Inconsistent,
}

/// Every strip of the stripe, data then parity, as the strips at
/// `positions` (at least K of them; `strips[p]` for each) decode.
fn codeword(codec: &Codec, strips: &[Option<&[u8]>], positions: &[usize]) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut from: Vec<Option<&[u8]>> = vec![None; strips.len()];
    for &p in positions.iter().take(codec.data()) {
        from[p] = strips[p];
    }
    let data = codec.decode(&from)?;
    let parity = codec.encode(&data)?;
    Ok(data.into_iter().chain(parity).collect())
}

/// True when the strips at `positions` are one codeword.
fn agree(codec: &Codec, strips: &[Option<&[u8]>], positions: &[usize]) -> Result<bool, CodecError> {
    let word = codeword(codec, strips, positions)?;
    Ok(positions.iter().all(|&p| strips[p] == Some(word[p].as_slice())))
}

/// Judges the strips of one stripe (or of a run of stripes, each strip
/// the run's strips one after the other: then `Wrong` means a whole run
/// of one position): `strips[p]` is position `p`'s strip when its shard
/// is in sync.
///
/// # Errors
///
/// [`CodecError`] for strips of the wrong count or length (a caller's
/// bug).
pub fn judge(codec: &Codec, strips: &[Option<&[u8]>]) -> Result<Verdict, CodecError> {
    let k = codec.data();
    let at_hand: Vec<usize> = (0..strips.len()).filter(|&p| strips[p].is_some()).collect();
    if at_hand.len() <= k {
        return Ok(Verdict::Unchecked);
    }
    if agree(codec, strips, &at_hand)? {
        return Ok(Verdict::Consistent);
    }
    // One wrong strip: without it the others agree. That needs K + 1 of
    // them, so that agreeing means something.
    if at_hand.len() < k + 2 {
        return Ok(Verdict::Inconsistent);
    }
    let mut found = None;
    for &p in &at_hand {
        let others: Vec<usize> = at_hand.iter().copied().filter(|&q| q != p).collect();
        if agree(codec, strips, &others)? {
            if found.is_some() {
                return Ok(Verdict::Inconsistent);
            }
            found = Some((p, others));
        }
    }
    match found {
        Some((position, others)) => {
            let mut word = codeword(codec, strips, &others)?;
            Ok(Verdict::Wrong { position, value: std::mem::take(&mut word[position]) })
        }
        None => Ok(Verdict::Inconsistent),
    }
}

/// Which of the updates a new owner found undo records of (`updates`:
/// each update's sequence number and the stripes it wrote) to undo, when
/// the stripes in `bad` are not one codeword (or cannot be told to be).
///
/// A stripe that is one codeword has every update whole, and they are
/// kept (an acknowledged write survives the takeover). On a bad stripe
/// every update is undone, back to the committed version (which every
/// in-sync shard holds whole): not only the newest can be partial there,
/// since an update that failed on a node that could not leave the
/// in-sync set (the owner gave up, or the metadata store was out of
/// reach) ends without reaching it, and a later update of the stripe may
/// still run. Undoing an update puts back older bytes on every stripe it
/// wrote, so every newer update that wrote one of them is undone too,
/// first (the caller undoes newest first).
pub fn to_undo(updates: &BTreeMap<u64, Range<u64>>, bad: &BTreeSet<u64>) -> BTreeSet<u64> {
    let overlaps = |a: &Range<u64>, b: &Range<u64>| a.start < b.end && b.start < a.end;
    let mut undo: BTreeSet<u64> =
        updates.iter().filter(|(_, r)| bad.range(Range::clone(r)).next().is_some()).map(|(&seq, _)| seq).collect();
    let mut work: Vec<u64> = undo.iter().copied().collect();
    while let Some(u) = work.pop() {
        let Some(range) = updates.get(&u) else { continue };
        for (&v, r) in updates.range(u + 1..) {
            if overlaps(range, r) && undo.insert(v) {
                work.push(v);
            }
        }
    }
    undo
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIP: usize = 64;

    #[test]
    fn a_bad_stripe_undoes_every_update_over_it_and_every_newer_one_over_those() {
        let updates: BTreeMap<u64, Range<u64>> =
            [(10, 0..32), (11, 40..41), (12, 5..6), (13, 40..41), (14, 31..33), (15, 60..61)].into_iter().collect();
        let bad = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        // Every stripe a codeword: everything is kept.
        assert!(to_undo(&updates, &bad(&[])).is_empty());
        // Stripe 40: both its updates, 11 and 13 (11 may have missed a
        // node that could not leave).
        assert_eq!(to_undo(&updates, &bad(&[40])), bad(&[11, 13]));
        // Stripe 5: 10 and 12; 10 puts back 0..32, under 14 too.
        assert_eq!(to_undo(&updates, &bad(&[5])), bad(&[10, 12, 14]));
        // Stripe 20: only update 10 wrote it, a run of 32 stripes: undoing
        // it puts back stripes 0..32, under 12 (stripe 5) and 14 (stripe
        // 31), which go first.
        assert_eq!(to_undo(&updates, &bad(&[20])), bad(&[10, 12, 14]));
        // Stripe 32: 14, which overlaps nothing newer.
        assert_eq!(to_undo(&updates, &bad(&[32])), bad(&[14]));
        // A stripe no update wrote: nothing to undo there.
        assert!(to_undo(&updates, &bad(&[100])).is_empty());
    }

    fn stripe(codec: &Codec, seed: u8) -> Vec<Vec<u8>> {
        let data: Vec<Vec<u8>> =
            (0..codec.data()).map(|d| (0..STRIP).map(|i| (i as u8).wrapping_mul(seed) ^ d as u8).collect()).collect();
        let parity = codec.encode(&data).unwrap();
        data.into_iter().chain(parity).collect()
    }

    fn view(s: &[Vec<u8>], missing: &[usize]) -> Vec<Option<Vec<u8>>> {
        s.iter().enumerate().map(|(p, v)| (!missing.contains(&p)).then(|| v.clone())).collect()
    }

    fn run(codec: &Codec, s: &[Option<Vec<u8>>]) -> Verdict {
        let refs: Vec<Option<&[u8]>> = s.iter().map(|o| o.as_deref()).collect();
        judge(codec, &refs).unwrap()
    }

    #[test]
    fn a_whole_codeword_is_consistent_and_k_strips_are_unchecked() {
        let codec = Codec::new(4, 2, STRIP).unwrap();
        let s = stripe(&codec, 7);
        assert_eq!(run(&codec, &view(&s, &[])), Verdict::Consistent);
        assert_eq!(run(&codec, &view(&s, &[1])), Verdict::Consistent);
        assert_eq!(run(&codec, &view(&s, &[1, 4])), Verdict::Unchecked);
    }

    #[test]
    fn one_wrong_strip_is_located_at_every_position_and_its_value_given() {
        let codec = Codec::new(4, 2, STRIP).unwrap();
        let s = stripe(&codec, 3);
        for p in 0..6 {
            let mut bad = view(&s, &[]);
            bad[p].as_mut().unwrap()[5] ^= 0x40;
            assert_eq!(run(&codec, &bad), Verdict::Wrong { position: p, value: s[p].clone() }, "position {p}");
        }
    }

    #[test]
    fn what_one_strip_cannot_explain_is_inconsistent() {
        let codec = Codec::new(4, 2, STRIP).unwrap();
        let s = stripe(&codec, 5);
        // Two wrong strips: no single one explains it.
        let mut two = view(&s, &[]);
        two[0].as_mut().unwrap()[0] ^= 1;
        two[3].as_mut().unwrap()[0] ^= 1;
        assert_eq!(run(&codec, &two), Verdict::Inconsistent);
        // K + 1 at hand: a disagreement is seen, not located.
        let mut five = view(&s, &[5]);
        five[2].as_mut().unwrap()[9] ^= 2;
        assert_eq!(run(&codec, &five), Verdict::Inconsistent);
        // ec:K+1 with every strip: the same.
        let single = Codec::new(4, 1, STRIP).unwrap();
        let s1 = stripe(&single, 9);
        let mut bad = view(&s1, &[]);
        bad[1].as_mut().unwrap()[1] ^= 8;
        assert_eq!(run(&single, &bad), Verdict::Inconsistent);
    }
}
