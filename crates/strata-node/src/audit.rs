//! A tamper-evident audit log: every connect, refused connect and
//! authentication result at the target, and every API call that changes
//! something or is refused, appended to `DATA_DIR/audit.log` (JSON lines,
//! mode 0600).
//!
//! # The chain
//!
//! Each record carries `prev`, the `hash` of the record before it (64
//! zeros for the first), and its own `hash`: the SHA-256 of its JSON with
//! every field but `hash`, in the order the struct gives. Editing a record
//! breaks its hash; removing, inserting or reordering records breaks the
//! next record's `prev` and the run of `seq` numbers. Cutting records off
//! the end leaves a valid chain, so the writer checkpoints the head (last
//! `seq` and `hash`) in the metadata store, under `audit/head/NODE`, after
//! each batch it has made durable (fdatasync first, then the checkpoint):
//! a file that ends before the checkpoint, or differs from it there, was
//! cut. [`verify`] checks all of it; `strata audit verify` asks a node to.
//!
//! What the chain does not stop: someone who can write both the file and
//! the metadata store can rewrite history consistently. Ship the log off
//! the node (`strata audit tail --follow --json`) to a place they cannot
//! write to make that visible too.
//!
//! # Cost and failure
//!
//! [`AuditLog::record`] only queues: no event waits for the disk. A writer
//! task appends in batches. If the checkpoint cannot be written (an etcd
//! outage) the writer keeps appending and checkpoints when it can; if the
//! file cannot be written, records are counted as lost and the error is
//! logged (the node keeps serving).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_meta::MetaStore;
use tokio::sync::mpsc;

/// The log's file in a data dir.
pub const AUDIT_FILE: &str = "audit.log";
/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Most records written (and fsynced) as one batch.
const BATCH: usize = 1024;

/// One record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// 1, 2, 3, ... with no gaps.
    pub seq: u64,
    /// When, Unix milliseconds.
    pub time_unix_ms: u64,
    /// The node that wrote it.
    pub node: String,
    /// What: `connect`, `connect-refused`, `auth-ok`, `auth-failed`, `api`.
    pub kind: String,
    /// Who: `HOSTNQN@ADDR` for hosts, `token ID (NAME)` for the API.
    pub actor: String,
    /// On what: a subsystem NQN, or `METHOD PATH`.
    pub object: String,
    /// `ok`, `refused`, or the HTTP status.
    pub outcome: String,
    /// Why or how, free text.
    pub detail: String,
    /// The previous record's hash ([`GENESIS`] for the first).
    pub prev: String,
    /// SHA-256 of this record without this field, hex.
    pub hash: String,
}

/// The fields hashed: the record without `hash`, in order.
#[derive(Serialize)]
struct Hashed<'a> {
    seq: u64,
    time_unix_ms: u64,
    node: &'a str,
    kind: &'a str,
    actor: &'a str,
    object: &'a str,
    outcome: &'a str,
    detail: &'a str,
    prev: &'a str,
}

impl AuditRecord {
    /// The hash this record should carry.
    pub fn compute_hash(&self) -> String {
        let h = Hashed {
            seq: self.seq,
            time_unix_ms: self.time_unix_ms,
            node: &self.node,
            kind: &self.kind,
            actor: &self.actor,
            object: &self.object,
            outcome: &self.outcome,
            detail: &self.detail,
            prev: &self.prev,
        };
        // Serialising plain strings and numbers cannot fail.
        hex::encode(Sha256::digest(serde_json::to_vec(&h).unwrap_or_default()))
    }
}

/// The checkpointed head: the last durable record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Its `seq`.
    pub seq: u64,
    /// Its `hash`.
    pub hash: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// True when nothing is wrong.
    pub ok: bool,
    /// Records read.
    pub records: u64,
    /// The last record's seq and hash.
    pub last: Option<Head>,
    /// The checkpoint compared against.
    pub checkpoint: Option<Head>,
    /// What is wrong, one line each.
    pub problems: Vec<String>,
}

/// Checks the chain in `text` (the log's lines) and, with `checkpoint`,
/// that nothing was cut off its end. A last line without its newline is a
/// write in progress (or cut by a crash) and is not judged.
pub fn verify(text: &str, checkpoint: Option<&Head>) -> VerifyReport {
    let mut problems = Vec::new();
    let mut prev_hash = GENESIS.to_string();
    let mut prev_seq = 0u64;
    let mut records = 0u64;
    let mut at_checkpoint: Option<String> = None;
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    for (i, line) in complete.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: AuditRecord = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("line {}: not an audit record ({e})", i + 1));
                continue;
            }
        };
        records += 1;
        if rec.compute_hash() != rec.hash {
            problems.push(format!("record {} (line {}): edited (its hash does not match its content)", rec.seq, i + 1));
        }
        if rec.prev != prev_hash {
            problems.push(format!(
                "record {} (line {}): the chain is broken before it (a record was removed, inserted or reordered)",
                rec.seq,
                i + 1
            ));
        }
        if rec.seq != prev_seq + 1 {
            problems.push(format!(
                "record {} (line {}): follows record {prev_seq} (a gap or reordering)",
                rec.seq,
                i + 1
            ));
        }
        if checkpoint.is_some_and(|c| c.seq == rec.seq) {
            at_checkpoint = Some(rec.hash.clone());
        }
        prev_hash = rec.hash;
        prev_seq = rec.seq;
    }
    if let Some(c) = checkpoint {
        match at_checkpoint {
            Some(h) if h == c.hash => {}
            Some(_) => problems.push(format!("record {} differs from the checkpointed head", c.seq)),
            None if prev_seq < c.seq => problems.push(format!(
                "the log ends at record {prev_seq} but the checkpoint says {} was written: records were cut off the end",
                c.seq
            )),
            None => problems.push(format!("the checkpointed record {} is missing", c.seq)),
        }
    }
    let last = (records > 0).then_some(Head { seq: prev_seq, hash: prev_hash });
    VerifyReport { ok: problems.is_empty(), records, last, checkpoint: checkpoint.cloned(), problems }
}

/// An event waiting to be written.
struct Pending {
    time_unix_ms: u64,
    kind: String,
    actor: String,
    object: String,
    outcome: String,
    detail: String,
}

/// A node's audit log.
pub struct AuditLog {
    tx: mpsc::UnboundedSender<Pending>,
    path: PathBuf,
    meta: Arc<dyn MetaStore>,
    head_key: String,
    lost: Arc<AtomicU64>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("path", &self.path).finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The last complete record of the file at `path`, cutting a partial last
/// line (a write a crash interrupted; never fsynced, so never
/// checkpointed).
fn tail_of(path: &Path) -> std::io::Result<Option<Head>> {
    let Ok(f) = std::fs::File::open(path) else { return Ok(None) };
    let mut last = None;
    let mut good_len = 0u64;
    let mut len = 0u64;
    for line in std::io::BufReader::new(f).split(b'\n') {
        let line = line?;
        len += line.len() as u64 + 1;
        if let Ok(rec) = serde_json::from_slice::<AuditRecord>(&line) {
            last = Some(Head { seq: rec.seq, hash: rec.hash });
            good_len = len;
        }
    }
    let size = std::fs::metadata(path)?.len();
    if size > good_len && last.is_some() {
        let text = std::fs::read(path)?;
        if !text.ends_with(b"\n") {
            tracing::warn!(path = %path.display(), "audit log: cutting a partial last record (a crash during a write)");
            let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            std::fs::OpenOptions::new().write(true).open(path)?.set_len(keep as u64)?;
        }
    }
    Ok(last)
}

impl AuditLog {
    /// Opens (creating, mode 0600) `dir/audit.log` for node `node`,
    /// continuing its chain, and starts the writer.
    ///
    /// # Errors
    ///
    /// The file cannot be read or created.
    pub fn open(dir: &Path, meta: Arc<dyn MetaStore>, node: &str) -> std::io::Result<Arc<AuditLog>> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(AUDIT_FILE);
        let head = tail_of(&path)?;
        let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let lost = Arc::new(AtomicU64::new(0));
        let head_key = format!("audit/head/{node}");
        let writer = Writer {
            file,
            node: node.to_string(),
            seq: head.as_ref().map_or(0, |h| h.seq),
            prev: head.map_or_else(|| GENESIS.to_string(), |h| h.hash),
            meta: meta.clone(),
            head_key: head_key.clone(),
            lost: lost.clone(),
        };
        tokio::spawn(writer.run(rx));
        Ok(Arc::new(AuditLog { tx, path, meta, head_key, lost }))
    }

    /// Queues a record; never waits.
    pub fn record(&self, kind: &str, actor: &str, object: &str, outcome: &str, detail: &str) {
        let p = Pending {
            time_unix_ms: now_ms(),
            kind: kind.into(),
            actor: actor.into(),
            object: object.into(),
            outcome: outcome.into(),
            detail: detail.into(),
        };
        if self.tx.send(p).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records that could not be written.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// The whole file, read off the runtime's threads.
    async fn read(&self) -> anyhow::Result<String> {
        let path = self.path.clone();
        Ok(tokio::task::spawn_blocking(move || std::fs::read_to_string(path)).await??)
    }

    /// Checks the whole log against the checkpoint.
    ///
    /// # Errors
    ///
    /// The file or the store cannot be read.
    pub async fn verify(&self) -> anyhow::Result<VerifyReport> {
        // The checkpoint first: the file is at least that long then.
        let checkpoint = match self.meta.get_config(&self.head_key).await? {
            Some(v) => Some(serde_json::from_slice::<Head>(&v)?),
            None => None,
        };
        let text = self.read().await?;
        Ok(verify(&text, checkpoint.as_ref()))
    }

    /// Up to `limit` records after `since` (a seq), oldest first.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    pub async fn read_since(&self, since: u64, limit: usize) -> anyhow::Result<Vec<AuditRecord>> {
        let text = self.read().await?;
        let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
        Ok(complete
            .lines()
            .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
            .filter(|r| r.seq > since)
            .take(limit)
            .collect())
    }
}

/// Opens the node's audit log and sends the target's access events to it,
/// and to `also` (the node's event log) when given.
pub fn open_audit(
    dir: &std::path::Path,
    meta: std::sync::Arc<dyn strata_meta::MetaStore>,
    node: &str,
    target: &strata_target::Target,
    also: Option<strata_target::AccessSink>,
) -> std::io::Result<std::sync::Arc<AuditLog>> {
    let log = AuditLog::open(dir, meta, node)?;
    let sink = log.clone();
    target.set_access_sink(std::sync::Arc::new(move |e: strata_target::AccessEvent| {
        use strata_target::AccessKind as K;
        if let Some(also) = &also {
            also(e.clone());
        }
        let outcome = match e.kind {
            K::Connected | K::Authenticated => "ok",
            K::Disconnected | K::KeepAliveExpired => "closed",
            K::ConnectRefused | K::AuthenticationFailed => "refused",
        };
        sink.record(
            e.kind.name(),
            &format!("{}@{}", e.hostnqn, e.peer),
            &e.subnqn,
            outcome,
            &format!("qid {}: {}", e.qid, e.detail),
        );
    }));
    Ok(log)
}

struct Writer {
    file: std::fs::File,
    node: String,
    seq: u64,
    prev: String,
    meta: Arc<dyn MetaStore>,
    head_key: String,
    lost: Arc<AtomicU64>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Pending>) {
        let mut unchecked: Option<Head> = None;
        let mut failing = false;
        loop {
            let first = tokio::select! {
                p = rx.recv() => p,
                // Retry a checkpoint that failed, without new records.
                _ = tokio::time::sleep(Duration::from_secs(1)), if unchecked.is_some() => None,
            };
            let mut batch: Vec<Pending> = Vec::new();
            match first {
                Some(p) => batch.push(p),
                None if unchecked.is_none() => return, // every sender is gone
                None => {}
            }
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                let (seq, prev) = (self.seq, self.prev.clone());
                let mut text = String::new();
                let (mut s, mut h) = (seq, prev.clone());
                for p in &batch {
                    s += 1;
                    let mut rec = AuditRecord {
                        seq: s,
                        time_unix_ms: p.time_unix_ms,
                        node: self.node.clone(),
                        kind: p.kind.clone(),
                        actor: p.actor.clone(),
                        object: p.object.clone(),
                        outcome: p.outcome.clone(),
                        detail: p.detail.clone(),
                        prev: h.clone(),
                        hash: String::new(),
                    };
                    rec.hash = rec.compute_hash();
                    h = rec.hash.clone();
                    text.push_str(&serde_json::to_string(&rec).unwrap_or_default());
                    text.push('\n');
                }
                let written = self.file.write_all(text.as_bytes()).and_then(|()| self.file.sync_data());
                match written {
                    Ok(()) => {
                        self.seq = s;
                        self.prev = h.clone();
                        unchecked = Some(Head { seq: s, hash: h });
                    }
                    Err(e) => {
                        self.lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        tracing::error!("audit log: cannot write {} records: {e}", batch.len());
                        continue;
                    }
                }
            }
            if let Some(head) = unchecked.clone() {
                let bytes = serde_json::to_vec(&head).unwrap_or_default();
                match self.meta.put_config(&self.head_key, &bytes).await {
                    Ok(()) => {
                        unchecked = None;
                        failing = false;
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!("audit log: cannot checkpoint the head yet (will retry): {e}");
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_meta::MemMetaStore;

    fn chain(n: u64) -> Vec<AuditRecord> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let mut r = AuditRecord {
                    seq,
                    time_unix_ms: 1000 + seq,
                    node: "n1".into(),
                    kind: "api".into(),
                    actor: "token abc (ci)".into(),
                    object: format!("POST /api/v1/volumes/v{seq}"),
                    outcome: "201".into(),
                    detail: String::new(),
                    prev: prev.clone(),
                    hash: String::new(),
                };
                r.hash = r.compute_hash();
                prev = r.hash.clone();
                r
            })
            .collect()
    }

    fn text(recs: &[AuditRecord]) -> String {
        recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
    }

    fn head(r: &AuditRecord) -> Head {
        Head { seq: r.seq, hash: r.hash.clone() }
    }

    #[test]
    fn an_intact_log_verifies() {
        let c = chain(5);
        let r = verify(&text(&c), Some(&head(&c[4])));
        assert!(r.ok, "{r:?}");
        assert_eq!((r.records, r.last.unwrap().seq), (5, 5));
        // A checkpoint behind the end is fine (records after it are not
        // checkpointed yet).
        assert!(verify(&text(&c), Some(&head(&c[2]))).ok);
        // A write in progress at the end is not judged.
        let mut t = text(&c);
        t.push_str("{\"seq\":6,");
        assert!(verify(&t, Some(&head(&c[4]))).ok);
    }

    #[test]
    fn every_kind_of_tampering_is_detected() {
        let c = chain(6);
        let cp = head(&c[5]);
        // Edited: a field changed, hash left alone.
        let mut edited = c.clone();
        edited[2].outcome = "403".into();
        let r = verify(&text(&edited), Some(&cp));
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("record 3") && p.contains("edited")), "{r:?}");
        // Edited, with its own hash recomputed: the next record's link breaks.
        edited[2].hash = edited[2].compute_hash();
        let r = verify(&text(&edited), Some(&cp));
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("record 4") && p.contains("chain is broken")), "{r:?}");
        // Removed from the middle.
        let mut removed = c.clone();
        removed.remove(3);
        let r = verify(&text(&removed), Some(&cp));
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("record 5")), "{r:?}");
        // Reordered.
        let mut swapped = c.clone();
        swapped.swap(1, 2);
        assert!(!verify(&text(&swapped), Some(&cp)).ok);
        // Cut off the end: the chain is intact, the checkpoint is not met.
        let r = verify(&text(&c[..4]), Some(&cp));
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("cut off the end")), "{r:?}");
        // The whole file replaced by another valid chain.
        let other = chain(6).into_iter().map(|mut r| {
            r.detail = "forged".into();
            r
        });
        let mut forged: Vec<AuditRecord> = Vec::new();
        let mut prev = GENESIS.to_string();
        for mut r in other {
            r.prev = prev.clone();
            r.hash = r.compute_hash();
            prev = r.hash.clone();
            forged.push(r);
        }
        let r = verify(&text(&forged), Some(&cp));
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("differs from the checkpointed head")), "{r:?}");
        // A line that is not a record.
        let mut junk = text(&c);
        junk.insert_str(0, "hello\n");
        assert!(!verify(&junk, Some(&cp)).ok);
    }

    #[tokio::test]
    async fn the_writer_chains_across_reopens_and_checkpoints_the_head() {
        let dir = tempfile::tempdir().unwrap();
        let meta: Arc<dyn MetaStore> = Arc::new(MemMetaStore::new());
        {
            let log = AuditLog::open(dir.path(), meta.clone(), "n1").unwrap();
            for i in 0..10 {
                log.record("api", "token t", &format!("POST /x/{i}"), "200", "");
            }
            wait_for_records(&log, 10).await;
        }
        // A crash mid-write leaves a partial line; reopening cuts it.
        let path = dir.path().join(AUDIT_FILE);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"seq\":11,\"ti").unwrap();
        let log = AuditLog::open(dir.path(), meta.clone(), "n1").unwrap();
        log.record("connect", "nqn.h@127.0.0.1:5", "nqn.s", "ok", "controller 1");
        wait_for_records(&log, 11).await;
        let r = log.verify().await.unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.records, 11);
        assert_eq!(r.checkpoint.map(|c| c.seq), Some(11));
        assert_eq!(log.read_since(9, 100).await.unwrap().iter().map(|r| r.seq).collect::<Vec<_>>(), vec![10, 11]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Cutting the last record is caught by the checkpoint.
        let text = std::fs::read_to_string(&path).unwrap();
        let cut = &text[..text[..text.len() - 1].rfind('\n').unwrap() + 1];
        std::fs::write(&path, cut).unwrap();
        let r = log.verify().await.unwrap();
        assert!(!r.ok && r.problems.iter().any(|p| p.contains("cut off")), "{r:?}");
    }

    async fn wait_for_records(log: &AuditLog, n: u64) {
        for _ in 0..500 {
            if let Ok(r) = log.verify().await
                && r.records == n
                && r.checkpoint.as_ref().map(|c| c.seq) == Some(n)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} records never written and checkpointed");
    }
}
