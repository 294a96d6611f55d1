//! The durability oracle: what each tracked block may read back, given
//! the history of writes, flushes and crashes the harness drove.
//!
//! Per block it keeps `durable`, the value that must survive anything (the
//! last value acknowledged before a successful Flush was issued, or
//! written with FUA and acknowledged; zeros for a block never durably
//! written), and `since`, every value written after it in issue order,
//! with its outcome: pending, acknowledged, failed, or unknown (the
//! command was on a connection that died, or strata was killed).
//!
//! # Rules
//!
//! 1. At any time a read returns `durable` or a value in `since`. Zeros
//!    are one such value: the `durable` of a never-written block, or a
//!    Write Zeroes / deallocate.
//! 2. After a crash (kill -9) and restart, the same: every
//!    acknowledged-but-unflushed write becomes unknown (it may or may not
//!    have survived), nothing durable may be missing.
//! 3. While no write to the block is outstanding and none failed or is
//!    unknown, a read returns exactly the last acknowledged value. After
//!    a crash, the first read of a block fixes what it holds (the process
//!    that could still have landed an old write is gone), so later reads
//!    must agree with it.
//! 4. Never bytes that were not written to that block: another volume's
//!    or LBA's block, a torn block, garbage, poison.
//!
//! When a Flush of a volume succeeds, every write to that volume
//! acknowledged before the Flush was issued becomes durable, whichever
//! connection or controller carried it (this is what a host relies on
//! when it reconnects and flushes again after a connection loss): the
//! block's `since` collapses to the values issued after that write.
//! Unknown-outcome writes issued *before* the newly durable one are
//! dropped with it; the oracle thus assumes strata never executes a
//! command from a dead connection after the host has since written the
//! same block again and had that write acknowledged. A violation of that
//! assumption shows up as a read of a dropped value.
//!
//! Invariants between calls: `live_from <= since.len()`; entries before
//! `live_from` belong to a process that was killed (they can no longer
//! land, but may have); a block with an empty `since` is not in `dirty`.
//!
//! Callers keep at most one write outstanding per block and do not read
//! a block while writing it; the oracle stays sound without that (a
//! pending value is simply allowed) but rule 3 then rarely applies.

use std::collections::{BTreeSet, HashMap};

use crate::block::Content;

/// The harness's identifier of a volume (not strata's UUID): a volume
/// deleted and created again under the same name gets a new one.
pub type VolumeId = u32;

/// A block's value as the oracle knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// All zeros.
    Zero,
    /// A block written by the suite.
    Data {
        /// Writer id.
        writer: u32,
        /// Sequence number of the write.
        seq: u64,
    },
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Zero => write!(f, "zeros"),
            Value::Data { writer, seq } => write!(f, "w{writer}#{seq}"),
        }
    }
}

/// How a write ended, as far as the host knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Completed with success.
    Acked,
    /// Completed with an error status (it may still have been partly
    /// applied).
    Failed,
    /// No completion: the connection died, the watchdog fired, or strata
    /// was killed.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    /// Acknowledged (or, after a crash, observed) at this tick.
    Acked {
        at: u64,
    },
    Failed,
    Unknown,
}

#[derive(Debug, Clone)]
struct Entry {
    ticket: u64,
    value: Value,
    state: State,
}

#[derive(Debug, Clone)]
struct Block {
    durable: Value,
    since: Vec<Entry>,
    /// Entries before this index were issued before the last crash.
    live_from: usize,
    /// The value the block held when the live window began, if known.
    base: Option<Value>,
}

impl Block {
    const NEW: Block = Block { durable: Value::Zero, since: Vec::new(), live_from: 0, base: Some(Value::Zero) };

    fn allowed(&self, v: Value) -> bool {
        v == self.durable || self.since.iter().any(|e| e.value == v)
    }

    /// Rule 3: the one value a read must return, when it is known.
    fn exact(&self) -> Option<Value> {
        let live = &self.since[self.live_from..];
        if live.iter().any(|e| !matches!(e.state, State::Acked { .. })) {
            return None;
        }
        match live.last() {
            Some(e) => Some(e.value),
            None => self.base,
        }
    }

    /// Makes `since[i]` durable and forgets everything issued before it.
    fn collapse_at(&mut self, i: usize) {
        self.durable = self.since[i].value;
        self.since.drain(..=i);
        self.live_from = self.live_from.saturating_sub(i + 1);
        self.base = Some(self.durable);
    }

    fn describe(&self) -> String {
        let since: Vec<String> = self
            .since
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let dead = if i < self.live_from { " (before crash)" } else { "" };
                let st = match e.state {
                    State::Pending => "pending",
                    State::Acked { .. } => "acked",
                    State::Failed => "failed",
                    State::Unknown => "unknown",
                };
                format!("{} {st}{dead}", e.value)
            })
            .collect();
        let exact = self.exact().map_or(String::new(), |v| format!(", must read {v}"));
        format!("durable {}, since [{}]{exact}", self.durable, since.join(", "))
    }
}

#[derive(Debug, Default)]
struct Volume {
    blocks: HashMap<u64, Block>,
    /// Blocks with a non-empty `since`.
    dirty: BTreeSet<u64>,
}

/// A write the oracle was told about and whose outcome it waits for.
#[derive(Debug, Clone)]
#[must_use = "every write must be ended with Oracle::end_write"]
pub struct WriteTicket {
    id: u64,
    volume: VolumeId,
    slba: u64,
    nblocks: u64,
}

/// A Flush the oracle was told about: it covers writes acknowledged
/// before [`Oracle::begin_flush`] returned it.
#[derive(Debug, Clone, Copy)]
pub struct FlushTicket {
    volume: VolumeId,
    at: u64,
}

/// Which rule a read broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// Rule 4: torn, garbage or poison.
    Garbage,
    /// Rule 4: a block written to another volume or LBA.
    Foreign,
    /// Rules 1 and 2: a value this block may not hold (never written to
    /// it, or overwritten and superseded by a durable value).
    NotAllowed,
    /// Rule 3: a possible value, but not the one the block must hold now.
    Stale,
}

/// A read that broke a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Volume.
    pub volume: VolumeId,
    /// Block.
    pub lba: u64,
    /// Which rule.
    pub kind: ViolationKind,
    /// What the read returned.
    pub got: String,
    /// What the oracle allowed.
    pub expected: String,
    /// The block's durable value is data the suite wrote (so after a
    /// crash this read counts as a lost block).
    pub durable_written: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            ViolationKind::Garbage => "torn or garbage block",
            ViolationKind::Foreign => "foreign block",
            ViolationKind::NotAllowed => "value not allowed",
            ViolationKind::Stale => "stale read",
        };
        write!(f, "volume {} lba {}: {what}: read {}; expected {}", self.volume, self.lba, self.got, self.expected)
    }
}

/// The oracle. Not thread-safe by itself: the harness keeps it behind a
/// mutex and never holds that across an `.await`.
#[derive(Debug, Default)]
pub struct Oracle {
    clock: u64,
    next_ticket: u64,
    volumes: HashMap<VolumeId, Volume>,
}

impl Oracle {
    /// An oracle tracking nothing.
    pub fn new() -> Oracle {
        Oracle::default()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Records that a write of `value` to `nblocks` blocks at `slba` is
    /// about to be sent. Call it before the command leaves the host.
    pub fn begin_write(&mut self, volume: VolumeId, slba: u64, nblocks: u64, value: Value) -> WriteTicket {
        self.next_ticket += 1;
        let id = self.next_ticket;
        let vol = self.volumes.entry(volume).or_default();
        for lba in slba..slba + nblocks {
            let block = vol.blocks.entry(lba).or_insert(Block::NEW);
            block.since.push(Entry { ticket: id, value, state: State::Pending });
            vol.dirty.insert(lba);
        }
        WriteTicket { id, volume, slba, nblocks }
    }

    /// Records how a write ended. `fua` with [`WriteOutcome::Acked`] makes
    /// it durable at once. A ticket whose blocks were since shrunk away or
    /// whose volume was forgotten is ignored.
    pub fn end_write(&mut self, ticket: WriteTicket, outcome: WriteOutcome, fua: bool) {
        let at = self.tick();
        let Some(vol) = self.volumes.get_mut(&ticket.volume) else { return };
        for lba in ticket.slba..ticket.slba + ticket.nblocks {
            let Some(block) = vol.blocks.get_mut(&lba) else { continue };
            let Some(i) = block.since.iter().position(|e| e.ticket == ticket.id) else { continue };
            block.since[i].state = match outcome {
                WriteOutcome::Acked => State::Acked { at },
                WriteOutcome::Failed => State::Failed,
                WriteOutcome::Unknown => State::Unknown,
            };
            if fua && outcome == WriteOutcome::Acked {
                block.collapse_at(i);
                if block.since.is_empty() {
                    vol.dirty.remove(&lba);
                }
            }
        }
    }

    /// Records that a Flush of `volume` is about to be sent.
    pub fn begin_flush(&mut self, volume: VolumeId) -> FlushTicket {
        FlushTicket { volume, at: self.tick() }
    }

    /// Records that a Flush completed with success: every write to its
    /// volume acknowledged before it was issued is now durable. (A Flush
    /// that failed or whose outcome is unknown is simply not reported.)
    pub fn flush_succeeded(&mut self, ticket: FlushTicket) {
        let Some(vol) = self.volumes.get_mut(&ticket.volume) else { return };
        let mut clean = Vec::new();
        for &lba in &vol.dirty {
            let Some(block) = vol.blocks.get_mut(&lba) else { continue };
            let last = block.since.iter().rposition(|e| matches!(e.state, State::Acked { at } if at < ticket.at));
            if let Some(i) = last {
                block.collapse_at(i);
            }
            if block.since.is_empty() {
                clean.push(lba);
            }
        }
        for lba in clean {
            vol.dirty.remove(&lba);
        }
    }

    /// Records a kill -9 of strata: writes in flight and acknowledged
    /// writes not yet flushed become unknown, and what each dirty block
    /// holds is unknown until it is read.
    pub fn crash(&mut self) {
        for vol in self.volumes.values_mut() {
            for &lba in &vol.dirty {
                let Some(block) = vol.blocks.get_mut(&lba) else { continue };
                for e in &mut block.since {
                    e.state = match e.state {
                        State::Failed => State::Failed,
                        _ => State::Unknown,
                    };
                }
                block.live_from = block.since.len();
                block.base = None;
            }
        }
    }

    /// Records that `volume` was shrunk to `lba` blocks: the blocks at and
    /// past it are discarded (and no longer tracked: they cannot be read).
    /// Writes still in flight there are forgotten; they must fail.
    pub fn shrink(&mut self, volume: VolumeId, lba: u64) {
        let Some(vol) = self.volumes.get_mut(&volume) else { return };
        vol.blocks.retain(|&b, _| b < lba);
        vol.dirty.retain(|&b| b < lba);
    }

    /// Tracks `range` of `volume`: blocks not tracked yet are expected to
    /// read zeros (after a shrink and a grow: the regrown range), also
    /// after a crash.
    pub fn track_zeros(&mut self, volume: VolumeId, range: std::ops::Range<u64>) {
        let vol = self.volumes.entry(volume).or_default();
        for lba in range {
            vol.blocks.entry(lba).or_insert(Block::NEW);
        }
    }

    /// Stops tracking `volume` (it was deleted).
    pub fn forget_volume(&mut self, volume: VolumeId) {
        self.volumes.remove(&volume);
    }

    /// The tracked blocks of `volume`, ascending.
    pub fn tracked(&self, volume: VolumeId) -> Vec<u64> {
        let mut v: Vec<u64> = self.volumes.get(&volume).map(|v| v.blocks.keys().copied().collect()).unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// What the oracle knows about one block, for messages.
    pub fn describe(&self, volume: VolumeId, lba: u64) -> String {
        self.volumes.get(&volume).and_then(|v| v.blocks.get(&lba)).unwrap_or(&Block::NEW).describe()
    }

    /// True when `volume`'s block `lba` has data the suite wrote as its
    /// durable value.
    pub fn durable_written(&self, volume: VolumeId, lba: u64) -> bool {
        self.volumes.get(&volume).and_then(|v| v.blocks.get(&lba)).is_some_and(|b| b.durable != Value::Zero)
    }

    /// Checks a read of `volume`'s block `lba` that returned `content`.
    /// The first read of a block after a crash fixes its value for rule 3.
    ///
    /// # Errors
    ///
    /// The [`Violation`] when the read breaks a rule.
    pub fn check_read(&mut self, volume: VolumeId, lba: u64, content: &Content) -> Result<(), Violation> {
        let at = self.clock + 1;
        let block = self.volumes.get_mut(&volume).and_then(|v| v.blocks.get_mut(&lba));
        let fallback = Block::NEW;
        let view = block.as_deref().unwrap_or(&fallback);
        let violation = |kind, got: String| Violation {
            volume,
            lba,
            kind,
            got,
            expected: view.describe(),
            durable_written: view.durable != Value::Zero,
        };
        let got = match content {
            Content::Zero => Value::Zero,
            Content::Stamped(s) if s.volume == volume && s.lba == lba => Value::Data { writer: s.writer, seq: s.seq },
            Content::Stamped(_) => return Err(violation(ViolationKind::Foreign, content.to_string())),
            Content::Garbage(_) => return Err(violation(ViolationKind::Garbage, content.to_string())),
        };
        if !view.allowed(got) {
            return Err(violation(ViolationKind::NotAllowed, got.to_string()));
        }
        if let Some(must) = view.exact()
            && must != got
        {
            return Err(violation(ViolationKind::Stale, got.to_string()));
        }
        if let Some(block) = block
            && block.base.is_none()
            && block.live_from == block.since.len()
        {
            // First look after a crash: this is what the block holds.
            block.since.push(Entry { ticket: 0, value: got, state: State::Acked { at } });
            block.live_from = block.since.len() - 1;
            self.clock = at;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Stamp;

    const V: VolumeId = 1;

    fn data(writer: u32, seq: u64) -> Value {
        Value::Data { writer, seq }
    }

    fn read_of(lba: u64, v: Value) -> Content {
        match v {
            Value::Zero => Content::Zero,
            Value::Data { writer, seq } => Content::Stamped(Stamp { volume: V, writer, lba, seq }),
        }
    }

    fn write(o: &mut Oracle, lba: u64, v: Value, outcome: WriteOutcome) {
        let t = o.begin_write(V, lba, 1, v);
        o.end_write(t, outcome, false);
    }

    fn flush(o: &mut Oracle) {
        let f = o.begin_flush(V);
        o.flush_succeeded(f);
    }

    fn kind(r: Result<(), Violation>) -> Option<ViolationKind> {
        r.err().map(|v| v.kind)
    }

    #[test]
    fn never_written_block_reads_zeros_only() {
        let mut o = Oracle::new();
        assert_eq!(o.check_read(V, 9, &Content::Zero), Ok(()));
        assert_eq!(kind(o.check_read(V, 9, &read_of(9, data(1, 1)))), Some(ViolationKind::NotAllowed));
    }

    #[test]
    fn acknowledged_write_must_read_back_exactly() {
        let mut o = Oracle::new();
        write(&mut o, 5, data(1, 1), WriteOutcome::Acked);
        write(&mut o, 5, data(1, 2), WriteOutcome::Acked);
        assert_eq!(o.check_read(V, 5, &read_of(5, data(1, 2))), Ok(()));
        // Older value and zeros are possible after a crash, not now.
        assert_eq!(kind(o.check_read(V, 5, &read_of(5, data(1, 1)))), Some(ViolationKind::Stale));
        assert_eq!(kind(o.check_read(V, 5, &Content::Zero)), Some(ViolationKind::Stale));
    }

    #[test]
    fn unknown_or_failed_write_allows_old_or_new_but_nothing_else() {
        let mut o = Oracle::new();
        write(&mut o, 5, data(1, 1), WriteOutcome::Acked);
        flush(&mut o);
        write(&mut o, 5, data(1, 2), WriteOutcome::Unknown);
        assert_eq!(o.check_read(V, 5, &read_of(5, data(1, 1))), Ok(()));
        assert_eq!(o.check_read(V, 5, &read_of(5, data(1, 2))), Ok(()));
        assert_eq!(kind(o.check_read(V, 5, &Content::Zero)), Some(ViolationKind::NotAllowed));
        write(&mut o, 6, data(1, 3), WriteOutcome::Failed);
        assert_eq!(o.check_read(V, 6, &Content::Zero), Ok(()));
        assert_eq!(o.check_read(V, 6, &read_of(6, data(1, 3))), Ok(()));
    }

    #[test]
    fn pending_write_allows_either_value() {
        let mut o = Oracle::new();
        write(&mut o, 1, data(1, 1), WriteOutcome::Acked);
        let t = o.begin_write(V, 1, 1, data(1, 2));
        assert_eq!(o.check_read(V, 1, &read_of(1, data(1, 1))), Ok(()));
        assert_eq!(o.check_read(V, 1, &read_of(1, data(1, 2))), Ok(()));
        o.end_write(t, WriteOutcome::Acked, false);
        assert_eq!(kind(o.check_read(V, 1, &read_of(1, data(1, 1)))), Some(ViolationKind::Stale));
    }

    #[test]
    fn flushed_write_survives_a_crash_and_zeros_are_a_lost_block() {
        let mut o = Oracle::new();
        write(&mut o, 7, data(1, 1), WriteOutcome::Acked);
        flush(&mut o);
        write(&mut o, 7, data(1, 2), WriteOutcome::Acked);
        o.crash();
        let v = o.check_read(V, 7, &Content::Zero).unwrap_err();
        assert_eq!(v.kind, ViolationKind::NotAllowed);
        assert!(v.durable_written, "zeros where flushed data was is a lost block");
        assert_eq!(o.check_read(V, 7, &read_of(7, data(1, 1))), Ok(()));
    }

    #[test]
    fn unflushed_acknowledged_write_may_or_may_not_survive_a_crash() {
        for survived in [data(1, 1), data(1, 2)] {
            let mut o = Oracle::new();
            write(&mut o, 7, data(1, 1), WriteOutcome::Acked);
            flush(&mut o);
            write(&mut o, 7, data(1, 2), WriteOutcome::Acked);
            o.crash();
            assert_eq!(o.check_read(V, 7, &read_of(7, survived)), Ok(()));
        }
    }

    #[test]
    fn first_read_after_a_crash_fixes_the_value() {
        let mut o = Oracle::new();
        write(&mut o, 7, data(1, 1), WriteOutcome::Acked);
        flush(&mut o);
        write(&mut o, 7, data(1, 2), WriteOutcome::Acked);
        o.crash();
        assert_eq!(o.check_read(V, 7, &read_of(7, data(1, 2))), Ok(()));
        assert_eq!(o.check_read(V, 7, &read_of(7, data(1, 2))), Ok(()));
        assert_eq!(kind(o.check_read(V, 7, &read_of(7, data(1, 1)))), Some(ViolationKind::Stale));
        // A Flush now makes the observed value durable.
        flush(&mut o);
        o.crash();
        assert!(o.check_read(V, 7, &read_of(7, data(1, 1))).is_err());
        assert_eq!(o.check_read(V, 7, &read_of(7, data(1, 2))), Ok(()));
    }

    #[test]
    fn flush_covers_only_writes_acknowledged_before_it_was_issued() {
        let mut o = Oracle::new();
        write(&mut o, 3, data(1, 1), WriteOutcome::Acked);
        let f = o.begin_flush(V);
        write(&mut o, 3, data(1, 2), WriteOutcome::Acked);
        o.flush_succeeded(f);
        o.crash();
        // w1 is durable; w2 (acknowledged after the flush was issued) may
        // or may not be there; zeros would be loss.
        assert_eq!(o.check_read(V, 3, &read_of(3, data(1, 2))), Ok(()));
        let mut o2 = Oracle::new();
        write(&mut o2, 3, data(1, 1), WriteOutcome::Acked);
        let f = o2.begin_flush(V);
        write(&mut o2, 3, data(1, 2), WriteOutcome::Acked);
        o2.flush_succeeded(f);
        o2.crash();
        assert_eq!(o2.check_read(V, 3, &read_of(3, data(1, 1))), Ok(()));
        let mut o3 = Oracle::new();
        write(&mut o3, 3, data(1, 1), WriteOutcome::Acked);
        let f = o3.begin_flush(V);
        write(&mut o3, 3, data(1, 2), WriteOutcome::Acked);
        o3.flush_succeeded(f);
        o3.crash();
        assert_eq!(kind(o3.check_read(V, 3, &Content::Zero)), Some(ViolationKind::NotAllowed));
    }

    #[test]
    fn failed_or_unknown_flush_makes_nothing_durable() {
        let mut o = Oracle::new();
        write(&mut o, 3, data(1, 1), WriteOutcome::Acked);
        let _never_completed = o.begin_flush(V);
        o.crash();
        assert_eq!(o.check_read(V, 3, &Content::Zero), Ok(()));
    }

    #[test]
    fn reset_during_flush_then_flush_again_makes_the_writes_durable() {
        // The scenario that lost 480-864 of 960 blocks: writes acked on
        // connection A, Flush sent on A, A reset before the Flush
        // completes; reconnect as B, Flush again, success.
        let mut o = Oracle::new();
        for lba in 0..960 {
            write(&mut o, lba, data(9, lba + 1), WriteOutcome::Acked);
        }
        let _lost_with_a = o.begin_flush(V);
        flush(&mut o); // on B
        o.crash();
        let mut lost = 0;
        for lba in 0..960 {
            let r = o.check_read(V, lba, &Content::Zero);
            if let Err(v) = r {
                assert!(v.durable_written);
                lost += 1;
            }
        }
        assert_eq!(lost, 960, "every block reading zeros is reported lost");
        assert_eq!(o.check_read(V, 0, &read_of(0, data(9, 1))), Ok(()));
    }

    #[test]
    fn fua_write_is_durable_at_once() {
        let mut o = Oracle::new();
        let t = o.begin_write(V, 4, 2, data(2, 5));
        o.end_write(t, WriteOutcome::Acked, true);
        o.crash();
        assert_eq!(kind(o.check_read(V, 4, &Content::Zero)), Some(ViolationKind::NotAllowed));
        assert_eq!(o.check_read(V, 5, &read_of(5, data(2, 5))), Ok(()));
        // A failed FUA write makes nothing durable.
        let t = o.begin_write(V, 8, 1, data(2, 6));
        o.end_write(t, WriteOutcome::Failed, true);
        o.crash();
        assert_eq!(o.check_read(V, 8, &Content::Zero), Ok(()));
    }

    #[test]
    fn collapse_drops_unknown_writes_issued_before_the_durable_one() {
        let mut o = Oracle::new();
        write(&mut o, 2, data(1, 1), WriteOutcome::Unknown);
        write(&mut o, 2, data(1, 2), WriteOutcome::Acked);
        assert_eq!(o.check_read(V, 2, &read_of(2, data(1, 1))), Ok(()), "unknown write still allowed");
        flush(&mut o);
        assert_eq!(kind(o.check_read(V, 2, &read_of(2, data(1, 1)))), Some(ViolationKind::NotAllowed));
        assert_eq!(o.check_read(V, 2, &read_of(2, data(1, 2))), Ok(()));
    }

    #[test]
    fn garbage_and_foreign_blocks_are_never_allowed() {
        let mut o = Oracle::new();
        write(&mut o, 10, data(1, 1), WriteOutcome::Unknown);
        let foreign_lba = Content::Stamped(Stamp { volume: V, writer: 1, lba: 11, seq: 1 });
        assert_eq!(kind(o.check_read(V, 10, &foreign_lba)), Some(ViolationKind::Foreign));
        let foreign_vol = Content::Stamped(Stamp { volume: 2, writer: 1, lba: 10, seq: 1 });
        assert_eq!(kind(o.check_read(V, 10, &foreign_vol)), Some(ViolationKind::Foreign));
        let torn = Content::Garbage("checksum mismatch".into());
        assert_eq!(kind(o.check_read(V, 10, &torn)), Some(ViolationKind::Garbage));
        // A value with the right address but a write that never happened.
        let forged = Content::Stamped(Stamp { volume: V, writer: 1, lba: 10, seq: 77 });
        assert_eq!(kind(o.check_read(V, 10, &forged)), Some(ViolationKind::NotAllowed));
    }

    #[test]
    fn write_zeroes_is_a_zero_value() {
        let mut o = Oracle::new();
        write(&mut o, 1, data(1, 1), WriteOutcome::Acked);
        write(&mut o, 1, Value::Zero, WriteOutcome::Acked);
        assert_eq!(o.check_read(V, 1, &Content::Zero), Ok(()));
        assert_eq!(kind(o.check_read(V, 1, &read_of(1, data(1, 1)))), Some(ViolationKind::Stale));
    }

    #[test]
    fn multi_block_unknown_write_may_land_partially() {
        let mut o = Oracle::new();
        let t = o.begin_write(V, 0, 4, data(3, 1));
        o.end_write(t, WriteOutcome::Unknown, false);
        assert_eq!(o.check_read(V, 0, &read_of(0, data(3, 1))), Ok(()));
        assert_eq!(o.check_read(V, 1, &Content::Zero), Ok(()));
    }

    #[test]
    fn shrunk_then_regrown_range_reads_zeros_even_after_a_crash() {
        let mut o = Oracle::new();
        write(&mut o, 100, data(1, 1), WriteOutcome::Acked);
        write(&mut o, 50, data(1, 2), WriteOutcome::Acked);
        flush(&mut o);
        o.shrink(V, 64);
        assert_eq!(o.tracked(V), vec![50], "blocks past the end cannot be read");
        o.track_zeros(V, 64..128);
        assert_eq!(kind(o.check_read(V, 100, &read_of(100, data(1, 1)))), Some(ViolationKind::NotAllowed));
        o.crash();
        assert_eq!(kind(o.check_read(V, 100, &read_of(100, data(1, 1)))), Some(ViolationKind::NotAllowed));
        assert_eq!(o.check_read(V, 100, &Content::Zero), Ok(()));
        assert_eq!(o.check_read(V, 50, &read_of(50, data(1, 2))), Ok(()));
        assert_eq!(o.tracked(V).len(), 65, "the regrown range is tracked");
        // Tracking does not disturb a block already tracked.
        o.track_zeros(V, 50..51);
        assert_eq!(o.check_read(V, 50, &read_of(50, data(1, 2))), Ok(()));
    }

    #[test]
    fn flushes_are_per_volume_and_forgotten_volumes_are_ignored() {
        let mut o = Oracle::new();
        let t = o.begin_write(2, 0, 1, data(1, 1));
        o.end_write(t, WriteOutcome::Acked, false);
        flush(&mut o); // volume 1 only
        o.crash();
        assert_eq!(o.check_read(2, 0, &Content::Zero), Ok(()));
        let t = o.begin_write(2, 0, 1, data(1, 2));
        o.forget_volume(2);
        o.end_write(t, WriteOutcome::Acked, true);
        assert!(o.tracked(2).is_empty());
    }
}
