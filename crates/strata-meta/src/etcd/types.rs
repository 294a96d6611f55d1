//! The values the etcd client takes and returns, independent of the wire.
//!
//! Revisions, versions and lease ids are etcd's `int64`s. Keys and values
//! are bytes; etcd orders keys bytewise.

/// A lease id as etcd hands it out (never 0; 0 means "no lease").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// The time to live etcd granted, in seconds. etcd raises TTLs below its
    /// minimum (about 2 s with default election timing).
    pub ttl_secs: i64,
    /// When the grant request was sent. etcd started counting the TTL no
    /// earlier, so `requested_at + ttl` is a safe lower bound of its end.
    pub requested_at: tokio::time::Instant,
}

/// One key and its value at some revision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for the key of a delete event).
    pub value: Vec<u8>,
    /// The revision that created the key (0 for a missing key).
    pub create_revision: i64,
    /// The revision of its last change.
    pub mod_revision: i64,
    /// How many times it was written since it was created (1 after create).
    pub version: i64,
    /// The lease it is attached to, if any.
    pub lease: Option<LeaseId>,
}

/// The keys a request covers: one key, or all keys that start with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRange {
    /// Exactly this key.
    Key(Vec<u8>),
    /// Every key that starts with these bytes (every key if empty).
    Prefix(Vec<u8>),
}

impl KeyRange {
    /// One key.
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        KeyRange::Key(key.into())
    }

    /// All keys under `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        KeyRange::Prefix(prefix.into())
    }

    /// The `(key, range_end)` pair etcd takes. `range_end` is empty for a
    /// single key; for a prefix it is the prefix with its last byte below
    /// 0xff incremented and what follows dropped, or `[0]` ("to the end of
    /// the key space") when no byte can be incremented.
    pub fn bounds(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            KeyRange::Key(k) => (k.clone(), Vec::new()),
            KeyRange::Prefix(p) => {
                let mut end = p.clone();
                while let Some(last) = end.pop() {
                    if last < 0xff {
                        end.push(last + 1);
                        // An empty prefix means every key: start at "\0".
                        let start = if p.is_empty() { vec![0] } else { p.clone() };
                        return (start, end);
                    }
                }
                (if p.is_empty() { vec![0] } else { p.clone() }, vec![0])
            }
        }
    }
}

/// The answer to a range request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeResponse {
    /// The store revision the read was served at.
    pub revision: i64,
    /// The keys found, in key order.
    pub kvs: Vec<KeyValue>,
    /// Whether more keys matched than were returned (only with a limit).
    pub more: bool,
    /// How many keys matched.
    pub count: i64,
}

/// What a [`Compare`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's version (0 if the key does not exist).
    Version(i64),
    /// The revision that created it (0 if it does not exist).
    CreateRevision(i64),
    /// The revision of its last change (0 if it does not exist).
    ModRevision(i64),
    /// Its value. Fails on a missing key whatever the operator: etcd cannot
    /// tell a missing value from an empty one here.
    Value(Vec<u8>),
}

/// How a [`Compare`] relates the stored value to the given one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// stored == given
    Equal,
    /// stored != given
    NotEqual,
    /// stored > given
    Greater,
    /// stored < given
    Less,
}

/// One condition of a [`Txn`]. Over a prefix, it must hold for every key in
/// it; over a prefix with no keys, it is checked against a missing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key or keys compared.
    pub range: KeyRange,
    /// The relation.
    pub op: CompareOp,
    /// The field and the value to compare it with.
    pub target: CompareTarget,
}

impl Compare {
    /// `key`'s mod revision is `rev` (0: the key does not exist).
    pub fn mod_revision_is(key: impl Into<Vec<u8>>, rev: i64) -> Self {
        Compare { range: KeyRange::key(key), op: CompareOp::Equal, target: CompareTarget::ModRevision(rev) }
    }

    /// `key` does not exist.
    pub fn missing(key: impl Into<Vec<u8>>) -> Self {
        Compare { range: KeyRange::key(key), op: CompareOp::Equal, target: CompareTarget::CreateRevision(0) }
    }

    /// `key`'s value is `value` (fails if the key is missing).
    pub fn value_is(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Compare { range: KeyRange::key(key), op: CompareOp::Equal, target: CompareTarget::Value(value.into()) }
    }

    /// No key under `prefix` changed after revision `rev` (keys deleted
    /// since are not noticed: a delete leaves no key to compare).
    pub fn unchanged_since(prefix: impl Into<Vec<u8>>, rev: i64) -> Self {
        Compare {
            range: KeyRange::prefix(prefix),
            op: CompareOp::Less,
            target: CompareTarget::ModRevision(rev.saturating_add(1)),
        }
    }
}

/// One operation of a [`Txn`] branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// Writes `value` under `key`, attached to `lease` if given.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// The lease the key dies with.
        lease: Option<LeaseId>,
    },
    /// Deletes the keys in the range.
    Delete(KeyRange),
    /// Reads the keys in the range.
    Range(KeyRange),
}

/// A transaction: if every compare holds, etcd applies `success`, else
/// `failure`, as one atomic step at one new revision (or none, if the
/// branch only reads).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Txn {
    /// The conditions, all of which must hold.
    pub compare: Vec<Compare>,
    /// Applied when they do.
    pub success: Vec<TxnOp>,
    /// Applied when one does not.
    pub failure: Vec<TxnOp>,
}

/// The result of one [`TxnOp`], in the order of the branch that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOpResponse {
    /// A put was applied.
    Put,
    /// A delete removed this many keys.
    Delete {
        /// Keys removed.
        deleted: i64,
    },
    /// What a range read.
    Range(RangeResponse),
}

/// The answer to a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnResponse {
    /// Whether every compare held (and `success` ran).
    pub succeeded: bool,
    /// The store revision after the transaction.
    pub revision: i64,
    /// One response per operation of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key was written; the value is the new one.
    Put(KeyValue),
    /// The key was deleted; only `key` and `mod_revision` (the revision of
    /// the delete) are set.
    Delete(KeyValue),
}

impl WatchEvent {
    /// The key and revision data of the event.
    pub fn kv(&self) -> &KeyValue {
        match self {
            WatchEvent::Put(kv) | WatchEvent::Delete(kv) => kv,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_bounds_follow_etcd_clientv3() {
        assert_eq!(KeyRange::prefix("a/").bounds(), (b"a/".to_vec(), b"a0".to_vec()));
        assert_eq!(KeyRange::prefix(vec![b'a', 0xff]).bounds(), (vec![b'a', 0xff], b"b".to_vec()));
        assert_eq!(KeyRange::prefix(vec![0xff, 0xff]).bounds(), (vec![0xff, 0xff], vec![0]));
        assert_eq!(KeyRange::prefix("").bounds(), (vec![0], vec![0]));
        assert_eq!(KeyRange::key("k").bounds(), (b"k".to_vec(), vec![]));
    }
}
