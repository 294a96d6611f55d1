//! [`KvStore`]: the tiered block store. DRAM first, then two log tiers: a
//! local SSD, and a pool volume reached over NVMe/TCP; blocks move down
//! when DRAM is full and back up when read.
//!
//! - **DRAM** holds values as shared [`Bytes`](bytes::Bytes) (a get hands out the same
//!   bytes, no copy) under an S3-FIFO policy with a byte capacity that
//!   holds: a put first makes room, and fails with [`KvError::Full`] only
//!   when everything left is pinned or leased.
//! - **Demotion** is write-behind: a block leaving DRAM is appended to the
//!   SSD log's write buffer, under the lock, and written by the log's
//!   writer task. With [`Admit::Reused`] only blocks that were read again
//!   while in DRAM (or came back after an eviction, or are pinned) are
//!   written: a block put once and never read leaves without wearing the
//!   drive; [`Admit::All`] writes every block, and [`Admit::Auto`] (the
//!   default) does as `All` while the tier below DRAM holds a tenth of the
//!   working set, as `Reused` after (`crate::admit`).
//!   A block admitted to the log tiers is appended to each of them (SSD
//!   and pool) that lacks it: the pool is the tier other hosts can see,
//!   and one that outlives the SSD's ring, so a block reaches it when it
//!   leaves DRAM rather than when the SSD reclaims it (which would need
//!   a read of the segment back from the SSD first).
//! - **Promotion**: a block read from SSD or the pool goes back into
//!   DRAM, and keeps its log copies, so that leaving DRAM again costs no
//!   write. Reads try the SSD copy first; a pool read that takes longer
//!   than [`POOL_READ_DEADLINE`] is a miss.
//! - **Backpressure**: a put waits while the SSD log's sealed, unwritten
//!   buffers are over their bound, rather than queueing without end or
//!   dropping admitted blocks: at most [`SSD_WRITE_WAIT`] for the SSD's,
//!   [`POOL_WRITE_WAIT`] for the pool's. A tier that stalls past that (a
//!   hung drive, a cut network) is skipped by demotion until its writes
//!   move again, so it never stalls the engine's puts for long; an
//!   admitted block no tier takes is counted as `demote_dropped`.
//! - **Crash semantics** (the `durable` module): a change that makes a
//!   log record stale is acknowledged once what invalidates the record
//!   is on the device, so after a crash a key reads as its newest
//!   acknowledged value or a miss, never an older one.
//! - **Failed writes**: a log whose write fails pauses (appends refused),
//!   drops the records it could not write from the index, and resumes in
//!   a fresh segment once its device answers again (the `log` module).
//! - **Recovery**: both logs are scanned at open; for each key the
//!   record with the highest version wins (a tombstone deletes, and so
//!   does a namespace tombstone of a higher version), and each
//!   log's copy with that version is indexed, so the index and the byte
//!   counts are what they were at the last written record. Of a large
//!   record the scan reads only the header and key; its CRC is checked
//!   when it is read, and a damaged one is then dropped like any record
//!   that fails its checks.
//!
//! Keys are `(namespace, key)`, stored as one byte string: the namespace's
//! length (one byte), the namespace, the key.
//!
//! Invariants, under the one lock:
//! - an entry has a DRAM value, a log location, or several;
//! - the DRAM policy holds exactly the keys with a DRAM value, and its
//!   byte count is their [`dram_size`];
//! - each log tier's `live` is the sum of the record lengths of its
//!   locations in the map, and every such location is current in its log;
//! - every location of an entry holds the entry's version;
//! - a key whose log record is superseded or deleted has a tombstone, a
//!   namespace tombstone or a newer version in that log, or is marked in
//!   the tier's `Unsure` until one is known to be on the device; a change
//!   is acknowledged only once nothing it made stale is unsure (the
//!   `durable` module), so a restart does not bring an older value back
//!   than one acknowledged.
//!
//! # Layout
//!
//! One job per module; [`KvStore`]'s methods are spread over them, each
//! in an `impl KvStore` block beside the code it drives. Imports point
//! one way: the vocabulary (`tier`, `config`, `error`) at the bottom,
//! then the index (`index`) and what works on it alone (`stats`,
//! `recovery`, `peers`), then the store's type (`kv_store`), then its
//! operations. These import none of each other; they do call each
//! other's methods on [`KvStore`] (a put makes room through `evict`),
//! and `evict` calls none of theirs.
//!
//! - `tier`: the log tiers as a type, and per-tier state (`PerTier`);
//!   `unsure`: a tier's invalidations not yet known to be on its device.
//! - `config`: settings and the tiers' devices; `error`: [`KvError`].
//! - `index`: the map of entries, namespaces, the expiry queue, the
//!   peer index, and the accounting between them; `keyorder`: the keys
//!   in `SCAN` order.
//! - `stats`: counters and their snapshot.
//! - `recovery`: the index rebuilt from the logs' scans at open.
//! - `peers`: reading the other writers' logs on a shared pool volume.
//! - `kv_store`: [`KvStore`] itself, its read-only views.
//! - `open`: opening, and the background tasks it starts.
//! - `write`: put, delete, clear, flush; `read`: get, lookup, prefetch
//!   and promotion; `evict`: eviction, demotion, tombstones, and
//!   dropping records the logs no longer hold.
//! - `namespace`: quotas; `expiry`: TTLs; `pins`: pins and leases;
//!   `scan`: listing keys (`SCAN`, `KEYS`).
//! - `durable`: the crash semantics: what a change writes and waits for
//!   before it is acknowledged, so that an older value never comes back.

mod config;
mod durable;
mod error;
mod evict;
mod expiry;
mod index;
mod keyorder;
mod kv_store;
mod namespace;
mod open;
mod peers;
mod pins;
mod read;
mod recovery;
mod scan;
mod stats;
mod tier;
mod unsure;
mod write;

pub use config::{Admit, KvConfig, Tiers, ghost_factor_for, segment_size_for};
pub use durable::DURABLE_WAIT;
pub use error::KvError;
pub use expiry::EXPIRE_BATCH;
pub use index::{ENTRY_OVERHEAD, Pin, dram_size, full_key};
pub use kv_store::KvStore;
pub use open::unix_ms;
pub use peers::PEER_REFRESH;
pub use read::POOL_READ_DEADLINE;
pub use scan::MAX_SCAN_COUNT;
pub use stats::{LOAD_SOURCES, LoadStats, Stats};
pub use write::{COPY_SMALL_BELOW, POOL_WRITE_WAIT, Presence, PutOpts, SSD_WRITE_WAIT};
