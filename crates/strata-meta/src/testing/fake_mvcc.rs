//! The state machine behind [`super::FakeEtcd`]: etcd's MVCC key space and
//! lessor, sans-I/O (the caller passes `now`; nothing here reads a clock or
//! owns a socket).
//!
//! # Model (as etcd 3.4's `mvcc` and `lease` packages)
//!
//! - One global revision. A write request (put, a delete that removed
//!   something, a txn with at least one change, a lease expiry or revoke
//!   that removed keys) bumps it by exactly one, whatever the number of
//!   keys it changes; reads and no-op writes leave it alone.
//! - A live key has `create_revision`, `mod_revision`, `version` (1 at
//!   creation, +1 per put) and the lease it is attached to (0: none).
//! - Every change is kept as an [`Event`] in `history` for watches; a
//!   delete is a tombstone event carrying only key and revision.
//!   Compaction at `c` drops the events before `c`; a watch from before
//!   `c` is then told `compact_revision = c`.
//! - A lease has a TTL (raised to [`MIN_TTL_SECS`], etcd's minimum with its
//!   default heartbeat and election timeout) and a deadline; the keys
//!   attached to it go when it expires or is revoked, in one revision.
//!
//! Invariants between calls: every key in `kvs` with a lease `l != 0` is
//! in `leases[l].keys` and the reverse; `history` is in revision order and
//! holds no event below `compacted`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// etcd's minimum lease TTL in seconds: 3/2 election timeout (1 s by
/// default), rounded up.
pub(crate) const MIN_TTL_SECS: i64 = 2;

/// A live key's value and metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Kv {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) create_revision: i64,
    pub(crate) mod_revision: i64,
    pub(crate) version: i64,
    pub(crate) lease: i64,
}

/// One change, for watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    Put(Kv),
    /// The key and the revision of its deletion.
    Delete {
        key: Vec<u8>,
        revision: i64,
    },
}

impl Event {
    pub(crate) fn revision(&self) -> i64 {
        match self {
            Event::Put(kv) => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }

    pub(crate) fn key(&self) -> &[u8] {
        match self {
            Event::Put(kv) => &kv.key,
            Event::Delete { key, .. } => key,
        }
    }
}

/// A key range as the gateway sends it: `end` empty is the one key
/// `start`, `end == [0]` is every key from `start` on, else `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Range {
    pub(crate) start: Vec<u8>,
    pub(crate) end: Vec<u8>,
}

impl Range {
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        if self.end.is_empty() {
            key == self.start.as_slice()
        } else if self.end == [0] {
            key >= self.start.as_slice()
        } else {
            key >= self.start.as_slice() && key < self.end.as_slice()
        }
    }
}

/// What a compare looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(Vec<u8>),
    Lease(i64),
}

/// How a compare compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compare {
    pub(crate) range: Range,
    pub(crate) cmp: Cmp,
    pub(crate) target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Range(Range),
    Put { key: Vec<u8>, value: Vec<u8>, lease: i64 },
    Delete(Range),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpResult {
    Range(Vec<Kv>),
    Put,
    Delete(i64),
}

/// Why a request is refused; the gateway's gRPC code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) code: i64,
    pub(crate) message: &'static str,
}

pub(crate) const LEASE_NOT_FOUND: Refusal = Refusal { code: 5, message: "etcdserver: requested lease not found" };
pub(crate) const COMPACTED: Refusal =
    Refusal { code: 11, message: "etcdserver: mvcc: required revision has been compacted" };
pub(crate) const FUTURE_REV: Refusal =
    Refusal { code: 11, message: "etcdserver: mvcc: required revision is a future revision" };

#[derive(Debug)]
struct LeaseState {
    ttl: i64,
    deadline: Instant,
    keys: BTreeSet<Vec<u8>>,
}

/// The key space, its history and the leases. See the module docs.
#[derive(Debug)]
pub(crate) struct Mvcc {
    revision: i64,
    compacted: i64,
    kvs: BTreeMap<Vec<u8>, Kv>,
    history: Vec<Event>,
    leases: HashMap<i64, LeaseState>,
    next_lease: i64,
}

impl Default for Mvcc {
    fn default() -> Self {
        // etcd starts at revision 1 with an empty store.
        Mvcc {
            revision: 1,
            compacted: 0,
            kvs: BTreeMap::new(),
            history: Vec::new(),
            leases: HashMap::new(),
            next_lease: 0x694d_0000_0000_0001,
        }
    }
}

impl Mvcc {
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    pub(crate) fn compacted(&self) -> i64 {
        self.compacted
    }

    /// The live keys in `range`, in key order.
    pub(crate) fn range(&self, range: &Range) -> Vec<Kv> {
        self.kvs
            .range(range.start.clone()..)
            .map(|(_, kv)| kv)
            .take_while(|kv| range.contains(&kv.key))
            .cloned()
            .collect()
    }

    /// Puts one key; returns the new revision.
    ///
    /// # Errors
    ///
    /// [`LEASE_NOT_FOUND`] if `lease` is not 0 and does not exist.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, Refusal> {
        self.txn(&[], &[Op::Put { key: key.to_vec(), value: value.to_vec(), lease }], &[])?;
        Ok(self.revision)
    }

    /// Deletes the keys in `range`; returns how many there were.
    pub(crate) fn delete(&mut self, range: &Range) -> i64 {
        match self.txn(&[], &[Op::Delete(range.clone())], &[]) {
            Ok((_, r)) => match r.first() {
                Some(OpResult::Delete(n)) => *n,
                _ => 0,
            },
            Err(_) => 0,
        }
    }

    /// Runs a transaction atomically: `(succeeded, one result per op)`.
    ///
    /// # Errors
    ///
    /// [`LEASE_NOT_FOUND`] if a put of the chosen branch names a missing
    /// lease; then nothing is applied.
    pub(crate) fn txn(
        &mut self,
        compare: &[Compare],
        success: &[Op],
        failure: &[Op],
    ) -> Result<(bool, Vec<OpResult>), Refusal> {
        let ok = compare.iter().all(|c| self.holds(c));
        let ops = if ok { success } else { failure };
        for op in ops {
            if let Op::Put { lease, .. } = op
                && *lease != 0
                && !self.leases.contains_key(lease)
            {
                return Err(LEASE_NOT_FOUND);
            }
        }
        let rev = self.revision + 1;
        let mut changed = false;
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                Op::Range(r) => OpResult::Range(self.range(r)),
                Op::Put { key, value, lease } => {
                    let old = self.kvs.get(key).cloned();
                    if let Some(old) = &old {
                        self.detach(old);
                    }
                    let kv = Kv {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: old.as_ref().map_or(rev, |o| o.create_revision),
                        mod_revision: rev,
                        version: old.as_ref().map_or(1, |o| o.version + 1),
                        lease: *lease,
                    };
                    if let Some(l) = self.leases.get_mut(lease) {
                        l.keys.insert(key.clone());
                    }
                    self.kvs.insert(key.clone(), kv.clone());
                    self.history.push(Event::Put(kv));
                    changed = true;
                    OpResult::Put
                }
                Op::Delete(r) => {
                    let n = self.remove(r, rev);
                    changed |= n > 0;
                    OpResult::Delete(n)
                }
            });
        }
        if changed {
            self.revision = rev;
        }
        Ok((ok, results))
    }

    /// Removes the keys in `range` at revision `rev`; returns how many.
    fn remove(&mut self, range: &Range, rev: i64) -> i64 {
        let gone: Vec<Kv> = self.range(range);
        for kv in &gone {
            self.detach(kv);
            self.kvs.remove(&kv.key);
            self.history.push(Event::Delete { key: kv.key.clone(), revision: rev });
        }
        i64::try_from(gone.len()).unwrap_or(i64::MAX)
    }

    fn detach(&mut self, kv: &Kv) {
        if let Some(l) = self.leases.get_mut(&kv.lease) {
            l.keys.remove(&kv.key);
        }
    }

    fn holds(&self, c: &Compare) -> bool {
        let kvs = self.range(&c.range);
        if kvs.is_empty() {
            // etcd compares a missing key as all zeros, except by value.
            return !matches!(c.target, Target::Value(_)) && compare_kv(c, &Kv::default());
        }
        kvs.iter().all(|kv| compare_kv(c, kv))
    }

    /// Discards the history before `revision`.
    ///
    /// # Errors
    ///
    /// [`COMPACTED`] if it is compacted already, [`FUTURE_REV`] if it is
    /// past the current revision.
    pub(crate) fn compact(&mut self, revision: i64) -> Result<(), Refusal> {
        if revision <= self.compacted {
            return Err(COMPACTED);
        }
        if revision > self.revision {
            return Err(FUTURE_REV);
        }
        self.compacted = revision;
        self.history.retain(|e| e.revision() >= revision);
        Ok(())
    }

    /// The events in `range` from revision `from` on.
    ///
    /// # Errors
    ///
    /// [`COMPACTED`] if `from` is below the compacted revision.
    pub(crate) fn events_since(&self, range: &Range, from: i64) -> Result<Vec<Event>, Refusal> {
        if from < self.compacted {
            return Err(COMPACTED);
        }
        let first = self.history.partition_point(|e| e.revision() < from);
        Ok(self.history[first..].iter().filter(|e| range.contains(e.key())).cloned().collect())
    }

    /// Grants a lease of `ttl` seconds (at least [`MIN_TTL_SECS`]): `(id, ttl)`.
    pub(crate) fn grant(&mut self, ttl: i64, now: Instant) -> (i64, i64) {
        let ttl = ttl.max(MIN_TTL_SECS);
        let id = self.next_lease;
        self.next_lease += 1;
        self.leases.insert(id, LeaseState { ttl, deadline: now + secs(ttl), keys: BTreeSet::new() });
        (id, ttl)
    }

    /// Renews a lease: its TTL, or `None` if it does not exist.
    pub(crate) fn keep_alive(&mut self, id: i64, now: Instant) -> Option<i64> {
        let l = self.leases.get_mut(&id)?;
        l.deadline = now + secs(l.ttl);
        Some(l.ttl)
    }

    /// The remaining TTL in whole seconds, or `None`.
    pub(crate) fn time_to_live(&self, id: i64, now: Instant) -> Option<(i64, i64)> {
        let l = self.leases.get(&id)?;
        let left = i64::try_from(l.deadline.saturating_duration_since(now).as_secs()).unwrap_or(i64::MAX);
        Some((left, l.ttl))
    }

    /// Revokes a lease and deletes its keys in one revision.
    ///
    /// # Errors
    ///
    /// [`LEASE_NOT_FOUND`].
    pub(crate) fn revoke(&mut self, id: i64) -> Result<(), Refusal> {
        let l = self.leases.remove(&id).ok_or(LEASE_NOT_FOUND)?;
        let rev = self.revision + 1;
        for key in &l.keys {
            self.kvs.remove(key);
            self.history.push(Event::Delete { key: key.clone(), revision: rev });
        }
        if !l.keys.is_empty() {
            self.revision = rev;
        }
        Ok(())
    }

    /// Revokes every lease whose deadline is at or before `now`; returns
    /// whether any was.
    pub(crate) fn expire(&mut self, now: Instant) -> bool {
        let mut due: Vec<i64> = self.leases.iter().filter(|(_, l)| l.deadline <= now).map(|(id, _)| *id).collect();
        due.sort_unstable();
        for id in &due {
            let _ = self.revoke(*id);
        }
        !due.is_empty()
    }

    /// Gives every lease its full TTL again from `now`, as etcd does when
    /// a member becomes leader (at every restart of a one-member cluster).
    pub(crate) fn refresh_leases(&mut self, now: Instant) {
        for l in self.leases.values_mut() {
            l.deadline = now + secs(l.ttl);
        }
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

fn compare_kv(c: &Compare, kv: &Kv) -> bool {
    use std::cmp::Ordering;
    let ord: Ordering = match &c.target {
        Target::Version(v) => kv.version.cmp(v),
        Target::Create(v) => kv.create_revision.cmp(v),
        Target::Mod(v) => kv.mod_revision.cmp(v),
        Target::Lease(v) => kv.lease.cmp(v),
        Target::Value(v) => kv.value.as_slice().cmp(v.as_slice()),
    };
    match c.cmp {
        Cmp::Equal => ord == Ordering::Equal,
        Cmp::NotEqual => ord != Ordering::Equal,
        Cmp::Greater => ord == Ordering::Greater,
        Cmp::Less => ord == Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Range {
        Range { start: k.as_bytes().to_vec(), end: Vec::new() }
    }

    #[test]
    fn one_revision_per_write_request_and_none_for_no_ops() {
        let mut m = Mvcc::default();
        assert_eq!(m.revision(), 1);
        assert_eq!(m.put(b"a", b"1", 0).unwrap(), 2);
        assert_eq!(m.put(b"a", b"2", 0).unwrap(), 3);
        let a = &m.range(&key("a"))[0];
        assert_eq!((a.create_revision, a.mod_revision, a.version), (2, 3, 2));
        assert_eq!(m.delete(&key("none")), 0);
        assert_eq!(m.revision(), 3, "a delete of nothing is no write");
        let two = [
            Op::Put { key: b"b".to_vec(), value: b"x".to_vec(), lease: 0 },
            Op::Put { key: b"b".to_vec(), value: b"y".to_vec(), lease: 0 },
        ];
        m.txn(&[], &two, &[]).unwrap();
        let b = &m.range(&key("b"))[0];
        assert_eq!((b.mod_revision, b.version, b.value.as_slice()), (4, 2, &b"y"[..]));
        assert_eq!(m.put(b"c", b"", 7), Err(LEASE_NOT_FOUND));
        assert_eq!(m.revision(), 4, "a refused put changes nothing");
        let all = Range { start: vec![0], end: vec![0] };
        assert_eq!(m.range(&all).len(), 2);
    }

    #[test]
    fn deletes_are_tombstones_for_watches_until_compacted() {
        let mut m = Mvcc::default();
        m.put(b"w/a", b"1", 0).unwrap();
        m.put(b"x", b"1", 0).unwrap();
        m.delete(&key("w/a"));
        let w = Range { start: b"w/".to_vec(), end: b"w0".to_vec() };
        let seen = m.events_since(&w, 0).unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1], Event::Delete { key: b"w/a".to_vec(), revision: 4 });
        assert_eq!(m.compact(5), Err(FUTURE_REV));
        m.compact(4).unwrap();
        assert_eq!(m.compact(4), Err(COMPACTED));
        assert_eq!(m.events_since(&w, 3), Err(COMPACTED));
        assert_eq!(m.events_since(&w, 4).unwrap().len(), 1);
    }

    #[test]
    fn an_expired_lease_takes_its_keys_in_one_revision_and_a_restart_refreshes_ttls() {
        let mut m = Mvcc::default();
        let t0 = Instant::now();
        let (id, ttl) = m.grant(1, t0);
        assert_eq!(ttl, MIN_TTL_SECS);
        m.put(b"a", b"1", id).unwrap();
        m.put(b"b", b"1", id).unwrap();
        m.put(b"b", b"2", 0).unwrap();
        assert!(!m.expire(t0 + Duration::from_millis(1900)));
        assert_eq!(m.keep_alive(id, t0 + Duration::from_secs(1)), Some(2));
        assert!(!m.expire(t0 + Duration::from_millis(2500)), "renewed");
        m.refresh_leases(t0 + Duration::from_secs(2));
        assert_eq!(m.time_to_live(id, t0 + Duration::from_secs(2)), Some((2, 2)));
        let rev = m.revision();
        assert!(m.expire(t0 + Duration::from_secs(4)));
        assert_eq!(m.revision(), rev + 1);
        assert!(m.range(&key("a")).is_empty());
        assert_eq!(m.range(&key("b")).len(), 1, "b left the lease when put without it");
        assert_eq!(m.time_to_live(id, t0), None);
        assert_eq!(m.revoke(id), Err(LEASE_NOT_FOUND));
    }
}
