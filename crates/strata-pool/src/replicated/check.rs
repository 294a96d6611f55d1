//! The online check of a replicated volume's copies: every in-sync copy
//! of every region read and compared, and with `repair` the copies that
//! differ made to agree (what is kept, and why, is [`crate::check`]'s).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::join_all;
use strata_block::{BlockError, IoBuf};

use super::volume::{Inner, ReplicatedVolume};
use crate::check::{CheckProgress, CheckReport, Difference};
use crate::drl::NodeId;
use crate::owner::io_error;
use crate::replica::ReplicaError;

/// Copies of a piece of a region that a check found to differ.
struct Found {
    /// First block of the piece (what a repair rewrites).
    piece: u64,
    /// First and count of the blocks that differ in it.
    at: u64,
    blocks: u64,
    /// The copy kept, whether a strict majority holds it, and the nodes
    /// whose copy differs from it.
    kept: NodeId,
    majority: bool,
    wrong: Vec<NodeId>,
    /// The kept value of the whole piece.
    value: Bytes,
}

impl Inner {
    /// Compares the in-sync copies of region `r`, a piece at a time, with
    /// no write to it running (and again with the volume's I/O held off
    /// where they differ, so that a write racing the compare is never
    /// taken for a difference); with `repair`, writes the kept value over
    /// the copies that differ (see [`crate::check`]).
    async fn check_region(self: &Arc<Self>, r: u64, repair: bool, report: &mut CheckReport) -> Result<(), BlockError> {
        // A region the last owner left dirty is made to agree first: what
        // differs there is no fault of a copy's.
        self.owner.repaired_before(r..r + 1, |r| self.repair_region(r)).await?;
        let bs = self.bs();
        let bytes = self.drl.regions().bytes_of(r, self.geometry.size_bytes());
        let (first, end) = (bytes.start / bs, bytes.end / bs);
        let chunk = first * bs / self.layout().chunk_bytes();
        const PIECE: u64 = 1 << 20;
        let (mut tries, mut held) = (0u32, false);
        'again: loop {
            let (_quiet, seq) = self.quiet(r, &mut tries, held).await?;
            let epoch = self.membership().epoch;
            let nodes = self.read_order(chunk, r..r + 1);
            if nodes.len() < 2 {
                report.bytes_unchecked += bytes.end - bytes.start;
                return Ok(());
            }
            let mut found = Vec::new();
            let mut lba = first;
            while lba < end {
                let n = (PIECE / bs).min(end - lba);
                let reads = join_all(nodes.iter().map(|&node| async move {
                    let rep = self.replica(node).ok_or(ReplicaError::Unavailable(format!("node {node} unknown")))?;
                    rep.read(epoch, lba, IoBuf::recycled((n * bs) as usize)).await
                }))
                .await;
                let mut copies = Vec::with_capacity(nodes.len());
                for (&node, got) in nodes.iter().zip(reads) {
                    match got {
                        Ok(b) => copies.push(b),
                        Err(e) => {
                            self.settle_check(node, e, epoch, r).await?;
                            continue 'again;
                        }
                    }
                }
                let views: Vec<&[u8]> = copies.iter().map(|b| &b[..]).collect();
                if views.iter().all(|v| *v == views[0]) {
                    lba += n;
                    continue;
                }
                let (keep, majority) = crate::check::majority(&views);
                // The blocks where some copy differs from the kept one.
                let differs = |b: usize| {
                    views
                        .iter()
                        .any(|v| v[b * bs as usize..][..bs as usize] != views[keep][b * bs as usize..][..bs as usize])
                };
                let blocks: Vec<usize> = (0..n as usize).filter(|&b| differs(b)).collect();
                let (lo, hi) = (blocks[0] as u64, *blocks.last().unwrap_or(&blocks[0]) as u64);
                let wrong: Vec<NodeId> =
                    nodes.iter().zip(&views).filter(|(_, v)| **v != views[keep]).map(|(&x, _)| x).collect();
                let value = Bytes::copy_from_slice(views[keep]);
                found.push(Found {
                    piece: lba,
                    at: lba + lo,
                    blocks: hi - lo + 1,
                    kept: nodes[keep],
                    majority,
                    wrong,
                    value,
                });
                lba += n;
            }
            if !self.drl.region_quiet_since(r, seq) {
                continue 'again;
            }
            if !found.is_empty() && !held {
                // Look again with the volume's I/O held off.
                held = true;
                continue 'again;
            }
            if repair {
                for f in &found {
                    for &w in &f.wrong {
                        let Some(rep) = self.replica(w) else { continue };
                        if let Err(e) = rep.write(epoch, f.piece, f.value.clone(), false).await {
                            self.settle_check(w, e, epoch, r).await?;
                            continue 'again;
                        }
                    }
                }
            }
            report.bytes_checked += bytes.end - bytes.start;
            for f in found {
                let names: Vec<String> = f.wrong.iter().map(ToString::to_string).collect();
                let what = if f.majority {
                    format!("the copies on {} differ from the others", names.join(", "))
                } else {
                    format!("the copies disagree with no majority; the copy on {} is kept", f.kept)
                };
                let wrong = if f.majority { f.wrong.iter().map(|n| u64::from(n.0)).collect() } else { Vec::new() };
                report.add(Difference { lba: f.at, blocks: f.blocks, wrong, what, repaired: repair });
            }
            return Ok(());
        }
    }

    /// What a check does when `node` failed a read or write of region
    /// `r` sent at `epoch`: it leaves, is refilled, or the epoch is
    /// learned; the caller tries the region again.
    async fn settle_check(&self, node: NodeId, e: ReplicaError, epoch: u64, r: u64) -> Result<(), BlockError> {
        match e {
            ReplicaError::Stale(_) => self.owner.refused(epoch).await,
            ReplicaError::Reconnected { generation, .. } => self.owner.restarted(node, generation, 0..0).await,
            e if e.is_replica_fault() => {
                tracing::warn!(node = %node, error = %e, "replica failed during a check");
                self.owner.leave(&[node], r..r + 1).await
            }
            e => Err(io_error(e.to_string())),
        }
    }
}

impl ReplicatedVolume {
    /// Reads every in-sync copy of the volume, online, and reports where
    /// they differ; with `repair`, makes them agree (see
    /// [`crate::check`]) and flushes what it wrote.
    ///
    /// # Errors
    ///
    /// The volume failed or this owner is fenced; what was found so far
    /// is lost with the error (run it again).
    pub async fn check(&self, repair: bool, progress: &CheckProgress) -> Result<CheckReport, BlockError> {
        let i = &self.inner;
        let size = i.geometry.size_bytes();
        let mut report = CheckReport::default();
        for r in 0..i.drl.regions().count() {
            i.check_region(r, repair, &mut report).await?;
            let b = i.drl.regions().bytes_of(r, size);
            progress.advance(b.end - b.start);
        }
        if report.repaired > 0 {
            i.owner.flush().await?;
        }
        Ok(report)
    }
}
