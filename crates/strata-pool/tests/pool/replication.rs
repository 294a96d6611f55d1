//! The replicated volume against replicas that fail, owners that are
//! fenced, writes whose callers vanish, and a new owner repairing what a
//! dead one left. Replicas are RAM devices behind real epoch fences; the
//! metadata store is in memory with etcd's compare-and-set semantics.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Waker};

use strata_block::{BlockDevice, BlockError, EpochFence, IoBuf, MemDevice};
use strata_pool::drl::{DirtyRegionLog, DrlState, MemDrlStore};
use strata_pool::testing::{Faulty, MemControl, TableLayout, Volatile};
use strata_pool::{LocalReplica, Membership, NodeId, PoolVolume, Regions, Replica, ReplicatedVolume, VolumeParts};

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().map(|&i| NodeId(i)).collect()
}

fn ids(list: &[u32]) -> BTreeSet<NodeId> {
    nodes(list).into_iter().collect()
}

const BS: u32 = 4096;
const BLOCKS: u64 = 4096; // 16 MiB
const CHUNK: u64 = 4 << 20; // four chunks
const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];

/// Three nodes' devices and fences: the cluster's state, shared by every
/// owner that opens the volume.
struct Cluster {
    devices: Vec<Arc<dyn BlockDevice>>,
    fences: Vec<Arc<EpochFence>>,
    control: Arc<MemControl>,
    drl_store: Arc<MemDrlStore>,
}

/// One owner's view: the volume and its replica handles.
struct Owner {
    vol: ReplicatedVolume,
    faulty: Vec<Arc<Faulty>>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            devices: NODES.iter().map(|_| Arc::new(MemDevice::new(BS, BLOCKS)) as Arc<dyn BlockDevice>).collect(),
            fences: NODES.iter().map(|_| EpochFence::new(0)).collect(),
            control: MemControl::new(0, NODES),
            drl_store: Arc::new(MemDrlStore::default()),
        }
    }

    fn regions(&self) -> Regions {
        Regions::for_volume(BLOCKS * u64::from(BS), CHUNK)
    }

    /// Takes the volume over on `local` (epoch bump) and opens it.
    async fn open(&self, local: NodeId) -> Result<Owner, strata_pool::volume::OpenError> {
        let membership = self.control.take_over();
        self.open_at(local, membership).await
    }

    async fn open_at(&self, local: NodeId, membership: Membership) -> Result<Owner, strata_pool::volume::OpenError> {
        let faulty: Vec<Arc<Faulty>> = NODES
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let dev = self.devices[i].clone();
                Faulty::new(Arc::new(LocalReplica::new(n, dev, self.fences[i].clone())))
            })
            .collect();
        let persisted = self.drl_store.saved();
        let drl = DirtyRegionLog::new(self.regions(), persisted, self.drl_store.clone());
        let layout = Arc::new(TableLayout {
            chunk_bytes: CHUNK,
            table: vec![nodes(&[1, 2, 3]), nodes(&[2, 3, 1]), nodes(&[3, 1, 2])],
        });
        let vol = ReplicatedVolume::open(VolumeParts {
            geometry: strata_block::Geometry { block_size: BS, num_blocks: BLOCKS },
            local,
            layout,
            replicas: faulty.iter().map(|f| f.clone() as Arc<dyn Replica>).collect(),
            membership,
            drl,
            control: self.control.clone(),
            moving: None,
        })
        .await?;
        Ok(Owner { vol, faulty })
    }

    async fn block(&self, node: usize, lba: u64) -> Vec<u8> {
        let (b, r) = self.devices[node].read(lba, IoBuf::zeroed(BS as usize)).await;
        r.unwrap();
        b.to_vec()
    }

    /// True when all three devices hold the same bytes everywhere.
    async fn replicas_agree(&self) -> bool {
        for lba in (0..BLOCKS).step_by(64) {
            let (a, b, c) = (self.block(0, lba).await, self.block(1, lba).await, self.block(2, lba).await);
            if a != b || b != c {
                return false;
            }
        }
        true
    }
}

fn pattern(seed: u64, blocks: usize) -> IoBuf {
    let mut b = IoBuf::zeroed(blocks * BS as usize);
    strata_rand::Rng::new(seed).fill(b.as_mut_slice());
    b
}

async fn write(vol: &ReplicatedVolume, lba: u64, seed: u64, blocks: usize) -> Result<(), BlockError> {
    vol.write(lba, pattern(seed, blocks), false).await.1
}

async fn read(vol: &ReplicatedVolume, lba: u64, blocks: usize) -> Vec<u8> {
    let (b, r) = vol.read(lba, IoBuf::zeroed(blocks * BS as usize)).await;
    r.expect("read");
    b.to_vec()
}

#[tokio::test]
async fn writes_reach_every_replica_and_reads_stay_local() {
    let c = Cluster::new();
    let o = c.open(NodeId(2)).await.unwrap();
    // A write across a chunk boundary: two placements, three replicas each.
    let lba = CHUNK / u64::from(BS) - 2;
    write(&o.vol, lba, 1, 4).await.unwrap();
    o.vol.flush().await.unwrap();
    for node in 0..3 {
        assert!(c.block(node, lba).await == pattern(1, 4)[..BS as usize].to_vec(), "node {node}");
    }
    let reads_before: Vec<u64> = o.faulty.iter().map(|f| f.reads.load(SeqCst)).collect();
    assert!(read(&o.vol, lba, 4).await == pattern(1, 4).to_vec());
    let reads: Vec<u64> = o.faulty.iter().zip(&reads_before).map(|(f, b)| f.reads.load(SeqCst) - b).collect();
    assert_eq!(reads, vec![0, 2, 0], "both chunks read from the local replica on node 2");
}

#[tokio::test]
async fn a_replica_that_fails_a_write_leaves_the_in_sync_set_before_the_write_completes() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    let epoch = c.control.get().epoch;
    o.faulty[2].down.store(true, SeqCst);
    write(&o.vol, 10, 7, 1).await.expect("two replicas are enough");
    // By the time the write completed, the store says node 3 is out and
    // the log says what it missed.
    let m = c.control.get();
    assert_eq!(m.in_sync, ids(&[1, 2]));
    assert_eq!(m.epoch, epoch + 1);
    let missed = c.drl_store.saved().missed.get(&NodeId(3)).cloned().expect("missed regions recorded");
    assert!(missed.contains(0), "the region of the failed write");
    // Reads never touch the stale replica, even when it is the first.
    o.faulty[2].down.store(false, SeqCst);
    let before = o.faulty[2].reads.load(SeqCst);
    let lba_on_3_first = 2 * CHUNK / u64::from(BS);
    read(&o.vol, lba_on_3_first, 1).await;
    assert_eq!(o.faulty[2].reads.load(SeqCst), before);
    assert_eq!(o.vol.stats().replicas_dropped.load(SeqCst), 1);
}

#[tokio::test]
async fn when_the_metadata_store_is_unreachable_a_write_that_lost_a_replica_fails() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[1].down.store(true, SeqCst);
    c.control.unavailable.store(true, SeqCst);
    assert!(write(&o.vol, 0, 1, 1).await.is_err(), "acknowledging would hide a divergent replica");
    assert_eq!(c.control.get().in_sync.len(), 3);
}

#[tokio::test]
async fn a_write_whose_caller_vanishes_still_lands_on_every_replica() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    for polls in 1..6 {
        let lba = 100 + polls;
        let mut fut = o.vol.write(lba, pattern(polls, 1), false);
        for _ in 0..polls {
            if fut.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready() {
                break;
            }
        }
        drop(fut);
    }
    // The writes run on tasks of their own; wait for them.
    writes_settle(&o.vol).await;
    assert!(c.replicas_agree().await, "a dropped write left replicas different");
    for polls in 1..6 {
        assert!(c.block(0, 100 + polls).await == pattern(polls, 1).to_vec(), "a dropped write was lost");
    }
}

/// Waits until the writes and in-sync changes running on tasks of their
/// own (their callers gone) have ended.
async fn writes_settle(vol: &ReplicatedVolume) {
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while vol.writes_running() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("background writes did not end within 5 s");
}

/// Polls `fut` at most `polls` times, then drops it: a caller that
/// vanished at an arbitrary `.await`.
fn poll_then_drop<F: std::future::Future>(fut: F, polls: u64) {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        if fut.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready() {
            break;
        }
    }
}

#[tokio::test]
async fn a_read_dropped_while_its_replica_leaves_keeps_the_owner_and_the_store_in_step() {
    for polls in 1..12 {
        let c = Cluster::new();
        let o = c.open(NodeId(1)).await.unwrap();
        // Reads go to the local replica first; it fails, so the read
        // takes it out of the in-sync set (an etcd change) and the caller
        // vanishes somewhere in the middle.
        o.faulty[0].down.store(true, SeqCst);
        poll_then_drop(o.vol.read(3, IoBuf::zeroed(BS as usize)), polls);
        writes_settle(&o.vol).await;
        // Whatever the store recorded, the owner knows it: it keeps
        // serving instead of fencing itself on its own stale epoch.
        assert_eq!(o.vol.membership(), c.control.get(), "after {polls} polls");
        write(&o.vol, 7, polls, 1).await.unwrap_or_else(|e| panic!("after {polls} polls: {e}"));
        assert!(read(&o.vol, 7, 1).await == pattern(polls, 1).to_vec());
        assert!(!o.vol.is_fenced(), "after {polls} polls");
    }
}

#[tokio::test]
async fn a_flush_dropped_while_its_replica_leaves_keeps_the_owner_and_the_store_in_step() {
    for polls in 1..12 {
        let c = Cluster::new();
        let o = c.open(NodeId(1)).await.unwrap();
        o.faulty[2].down.store(true, SeqCst);
        poll_then_drop(o.vol.flush(), polls);
        writes_settle(&o.vol).await;
        assert_eq!(o.vol.membership(), c.control.get(), "after {polls} polls");
        write(&o.vol, 7, polls, 1).await.unwrap_or_else(|e| panic!("after {polls} polls: {e}"));
        o.vol.flush().await.unwrap();
        assert!(!o.vol.is_fenced(), "after {polls} polls");
    }
}

/// Regression (CI, issue 21): a node frozen through a takeover missed
/// the new owner's fence flush and woke still keeping a promise to the
/// old owner; the new owner's writes to it were refused, and the hosts'
/// writes failed with Write Fault. The node cannot take them: it leaves,
/// and the writes succeed on the others.
#[tokio::test]
async fn a_node_that_still_keeps_a_promise_to_the_last_owner_leaves_rather_than_fail_writes_or_reads() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[2].promised.store(true, SeqCst);
    write(&o.vol, 10, 1, 4).await.expect("a write that one node refused with its promise");
    assert_eq!(o.vol.membership().in_sync, ids(&[1, 2]));
    assert!(read(&o.vol, 10, 4).await == pattern(1, 4).to_vec());
    // A read that meets it on another chunk's first replica reads elsewhere.
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[0].promised.store(true, SeqCst);
    let (b, r) = o.vol.read(10, IoBuf::zeroed(4 * BS as usize)).await;
    r.expect("a read that one node refused with its promise");
    assert!(b.to_vec() == pattern(1, 4).to_vec());
}

#[tokio::test]
async fn a_new_owner_fences_the_old_one() {
    let c = Cluster::new();
    let old = c.open(NodeId(1)).await.unwrap();
    write(&old.vol, 5, 1, 1).await.unwrap();
    let new = c.open(NodeId(2)).await.unwrap();
    // The old owner wakes up: its writes and reads are refused, and it
    // stops serving for good.
    assert!(matches!(write(&old.vol, 5, 2, 1).await, Err(BlockError::PathUnavailable(_))));
    assert!(old.vol.is_fenced());
    assert!(matches!(old.vol.read(5, IoBuf::zeroed(BS as usize)).await.1, Err(BlockError::PathUnavailable(_))));
    for node in 0..3 {
        assert!(c.block(node, 5).await == pattern(1, 1).to_vec(), "the fenced write changed node {node}");
    }
    write(&new.vol, 5, 3, 1).await.unwrap();
    assert!(read(&new.vol, 5, 1).await == pattern(3, 1).to_vec());
}

#[tokio::test]
async fn a_new_owner_makes_the_replicas_agree_on_regions_the_dead_owner_was_writing() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 8).await.unwrap();
    write(&o.vol, 600, 2, 8).await.unwrap();
    o.vol.clean(std::time::Duration::ZERO).await.unwrap();
    assert!(c.drl_store.saved().dirty.is_empty());
    // The owner dies in the middle of a write: its region is dirty in the
    // log, and the write reached node 3 only.
    let region = c.regions().touched(600 * u64::from(BS), 4096).start;
    let mut crashed = DrlState::default();
    crashed.dirty.insert(region);
    use strata_pool::DrlStore;
    c.drl_store.save(crashed).await.unwrap();
    c.devices[2].write(600, pattern(9, 1), false).await.1.unwrap();
    // And an unrelated difference outside any dirty region, which the log
    // says cannot exist: repair must not touch it (it copies only what is
    // dirty).
    drop(o);
    // The new owner serves at once; the first read of the region makes
    // the replicas agree before it answers, on the copy reads use (the
    // local one).
    let new = c.open(NodeId(2)).await.unwrap();
    let local = c.block(1, 600).await;
    assert!(read(&new.vol, 600, 1).await == local, "reads agree with the repaired copy");
    for node in 0..3 {
        assert!(c.block(node, 600).await == local, "replicas differ after a read where the old owner was writing");
    }
    new.vol.repair_ended().await;
    assert_eq!(new.vol.unrepaired(), 0);
    assert_eq!(new.vol.stats().regions_copied.load(SeqCst), 1, "the region is repaired once");
    assert!(c.drl_store.saved().dirty.is_empty(), "clean after the repair");
    assert!(read(&new.vol, 0, 8).await == pattern(1, 8).to_vec());
}

/// Regression (CI, issue 21): a new owner copied every region the dead
/// owner left dirty before it served anything (seven seconds for a 512
/// MiB volume under random writes, minutes for a large one), and hosts
/// saw the volume missing meanwhile. It now serves at once and repairs
/// in the background; a write or read of a region not yet repaired
/// repairs it first, so no block read can flip afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_serves_before_the_dead_owners_dirty_regions_are_repaired_and_no_block_flips() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    let region_blocks = c.regions().region_bytes() / u64::from(BS);
    let count = c.regions().count();
    // Every region dirty, and in each the dead owner's last write reached
    // one node only (node 3): the copies differ everywhere.
    for r in 0..count {
        write(&o.vol, r * region_blocks, r, 1).await.unwrap();
    }
    let mut crashed = DrlState::default();
    for r in 0..count {
        crashed.dirty.insert(r);
    }
    use strata_pool::DrlStore;
    c.drl_store.save(crashed).await.unwrap();
    for r in 0..count {
        c.devices[2].write(r * region_blocks + 1, pattern(1000 + r, 1), false).await.1.unwrap();
    }
    drop(o);
    let new = c.open(NodeId(2)).await.unwrap();
    // Reads, writes and cleans race the background repair: whatever a
    // read returned, every replica holds afterwards, and a clean never
    // forgets a region before it agrees.
    let mut seen = Vec::new();
    for r in (0..count).rev() {
        let lba = r * region_blocks + 1;
        if r % 2 == 0 {
            write(&new.vol, lba + 1, 5000 + r, 1).await.unwrap();
        }
        let got = read(&new.vol, lba, 1).await;
        for node in 0..3 {
            assert!(c.block(node, lba).await == got, "node {node} differs from what was read at {lba}");
        }
        seen.push((lba, got));
        new.vol.clean(std::time::Duration::ZERO).await.unwrap();
        let dirty = c.drl_store.saved().dirty;
        assert!(
            new.vol.unrepaired() == 0 || dirty.len() >= new.vol.unrepaired(),
            "a clean forgot an unrepaired region"
        );
    }
    new.vol.repair_ended().await;
    assert!(c.replicas_agree().await, "the background repair left copies unequal");
    for (lba, got) in seen {
        assert!(read(&new.vol, lba, 1).await == got, "block {lba} flipped after the repair");
    }
    new.vol.clean(std::time::Duration::ZERO).await.unwrap();
    new.vol.clean(std::time::Duration::ZERO).await.unwrap();
    assert!(c.drl_store.saved().dirty.is_empty(), "the log is clean once repaired and quiet");
}

#[tokio::test]
async fn a_replica_that_comes_back_copies_only_what_it_missed_and_rejoins() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 16).await.unwrap();
    o.vol.clean(std::time::Duration::ZERO).await.unwrap(); // else region 0 is dirty and missed too
    o.faulty[2].down.store(true, SeqCst);
    write(&o.vol, 320, 2, 4).await.unwrap(); // node 3 leaves here
    write(&o.vol, 2048, 3, 4).await.unwrap();
    o.vol.clean(std::time::Duration::ZERO).await.unwrap();
    let missed = c.drl_store.saved().missed[&NodeId(3)].clone();
    assert_eq!(missed.len(), 2, "two regions written while it was away");
    assert!(!c.replicas_agree().await);

    o.faulty[2].down.store(false, SeqCst);
    o.vol.resync(NodeId(3)).await.unwrap();
    assert_eq!(c.control.get().in_sync, NODES.into_iter().collect::<BTreeSet<_>>());
    assert!(c.replicas_agree().await);
    assert_eq!(o.vol.stats().regions_copied.load(SeqCst), 2, "only the missed regions were copied");
    assert!(c.drl_store.saved().missed.is_empty());
    // Back in sync: it takes writes again.
    let before = o.faulty[2].writes.load(SeqCst);
    write(&o.vol, 2 * CHUNK / u64::from(BS), 4, 1).await.unwrap();
    assert_eq!(o.faulty[2].writes.load(SeqCst), before + 1);
}

/// Regression (pool soak, issue 21): an owner took node 3 out of the
/// in-sync set and died before its log listed what node 3 missed. The
/// next owner saw a stale node the log did not name, and never brought it
/// back. It now lists it as missing every dirty region and resyncs it.
#[tokio::test]
async fn a_node_out_of_sync_that_the_log_does_not_list_is_resynced_by_the_next_owner() {
    use strata_pool::{Control, DrlStore};
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 600, 1, 8).await.unwrap();
    o.vol.clean(std::time::Duration::ZERO).await.unwrap();
    // A write in flight, dirty in the log, reached nodes 1 and 2; node 3
    // failed it and was taken out; the owner died before the next save.
    let region = c.regions().touched(600 * u64::from(BS), 8 * u64::from(BS)).start;
    let mut crashed = DrlState::default();
    crashed.dirty.insert(region);
    c.drl_store.save(crashed).await.unwrap();
    for node in 0..2 {
        c.devices[node].write(600, pattern(2, 8), false).await.1.unwrap();
    }
    c.control.leave(&c.control.get(), &[NodeId(3)]).await.unwrap();
    drop(o);

    let new = c.open(NodeId(2)).await.unwrap();
    assert_eq!(
        new.vol.drl().missed(NodeId(3)).map(|s| s.iter().collect::<Vec<_>>()),
        Some(vec![region]),
        "node 3 misses the dirty region"
    );
    new.vol.resync(NodeId(3)).await.unwrap();
    assert_eq!(c.control.get().in_sync, NODES.into_iter().collect::<BTreeSet<_>>(), "node 3 is back in sync");
    assert!(c.replicas_agree().await, "node 3 got the write it missed");
    assert!(read(&new.vol, 600, 8).await == pattern(2, 8).to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_of_a_node_that_does_not_answer_never_holds_up_host_writes() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[2].down.store(true, SeqCst);
    write(&o.vol, 0, 1, 4).await.unwrap(); // node 3 leaves here
    // Its link is cut: its record still looks alive, but nothing it is
    // sent returns (until the link's I/O timeout, never here).
    o.faulty[2].down.store(false, SeqCst);
    o.faulty[2].hung.store(true, SeqCst);
    let vol = o.vol.clone();
    let resync = tokio::spawn(async move { vol.resync(NodeId(3)).await });
    for i in 0..32u64 {
        let done = tokio::time::timeout(std::time::Duration::from_secs(5), write(&o.vol, i * 97 % BLOCKS, 10 + i, 1));
        done.await.expect("a host write waited on the node that does not answer").unwrap();
    }
    assert!(!resync.is_finished(), "the resync gave up on a node that may still answer");
    // The link heals: the resync goes on and the node rejoins.
    o.faulty[2].hung.store(false, SeqCst);
    resync.await.unwrap().unwrap();
    assert_eq!(c.control.get().in_sync, NODES.into_iter().collect::<BTreeSet<_>>());
    o.vol.flush().await.unwrap();
    assert!(c.replicas_agree().await);
}

/// The soak found degraded reads decoding garbage after M + 1 kills: a
/// node killed during its resync lost the regions copied since its last
/// flush, while the log already said it held them, so no later resync
/// copied them again.
#[tokio::test]
async fn a_node_killed_during_its_resync_gets_again_what_it_had_not_flushed() {
    let mut c = Cluster::new();
    let third = Volatile::new(BS, BLOCKS);
    c.devices[2] = third.clone();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[2].down.store(true, SeqCst);
    for i in 0..BLOCKS / 16 {
        write(&o.vol, i * 16, 100 + i, 1).await.unwrap(); // every region
    }
    o.vol.flush().await.unwrap();
    // Quiet: no region is dirty any more, node 3 alone misses them.
    for _ in 0..2 {
        o.vol.clean(std::time::Duration::ZERO).await.unwrap();
    }
    assert!(o.vol.drl().state().dirty.is_empty());
    o.faulty[2].down.store(false, SeqCst);
    let vol = o.vol.clone();
    let resync = tokio::spawn(async move { vol.resync(NodeId(3)).await });
    // Killed once a quarter of the volume is copied, none of it flushed.
    while third.unflushed() < (BLOCKS / 4) as usize && !resync.is_finished() {
        tokio::task::yield_now().await;
    }
    o.faulty[2].down.store(true, SeqCst);
    assert!(resync.await.unwrap().is_err(), "the resync ended before the kill");
    third.crash().await;
    // Back: a resync must copy whatever the kill took.
    o.faulty[2].down.store(false, SeqCst);
    o.faulty[2].restart();
    o.vol.resync(NodeId(3)).await.unwrap();
    o.vol.flush().await.unwrap();
    for lba in (0..BLOCKS).step_by(16) {
        assert!(c.block(2, lba).await == c.block(0, lba).await, "block {lba} of the resynced node differs");
    }
}

/// A write still on its way to a node when a flush overtakes it is not
/// made durable there by that flush: when the node then restarts and
/// loses it, its region is refilled. (The flush's mark used to count
/// every write begun before it, ended or not, so a restarted node was
/// refilled only where writes began after the flush and kept the old
/// bytes here: the stale strip the pool chaos test found on ec:4+2.)
#[tokio::test]
async fn a_write_that_a_flush_overtook_is_refilled_after_the_node_restarts() {
    let mut c = Cluster::new();
    let third = Volatile::new(BS, BLOCKS);
    c.devices[2] = third.clone();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 1).await.unwrap();
    o.vol.flush().await.unwrap();
    o.faulty[2].held_writes.store(true, SeqCst);
    let vol = o.vol.clone();
    let second = tokio::spawn(async move { write(&vol, 0, 2, 1).await });
    while o.faulty[2].writes_held.load(SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The flush passes the write on its way to node 3, which then lands.
    o.vol.flush().await.unwrap();
    o.faulty[2].held_writes.store(false, SeqCst);
    second.await.unwrap().unwrap();
    assert_eq!(third.unflushed(), 1, "the write landed after node 3's flush");
    // Node 3 is killed -9 before the next flush, and comes back.
    third.crash().await;
    o.faulty[2].restart();
    o.vol.flush().await.unwrap();
    assert!(
        o.vol.drl().missed(NodeId(3)).is_some_and(|s| s.contains(0)),
        "node 3 lost the write and is not refilled: {:?}",
        o.vol.drl().state()
    );
    o.vol.resync(NodeId(3)).await.unwrap();
    o.vol.flush().await.unwrap();
    assert!(c.block(2, 0).await == c.block(0, 0).await, "node 3 kept the bytes from before the write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_a_resync_end_on_every_replica() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[1].down.store(true, SeqCst);
    for i in 0..64 {
        write(&o.vol, i * 61 % BLOCKS, i, 1).await.unwrap();
    }
    o.faulty[1].down.store(false, SeqCst);
    let vol = o.vol.clone();
    let writer = tokio::spawn(async move {
        for i in 0..400u64 {
            write(&vol, i * 37 % BLOCKS, 1000 + i, 2.min((BLOCKS - i * 37 % BLOCKS) as usize)).await.unwrap();
        }
    });
    o.vol.resync(NodeId(2)).await.unwrap();
    writer.await.unwrap();
    o.vol.flush().await.unwrap();
    assert_eq!(c.control.get().in_sync, NODES.into_iter().collect::<BTreeSet<_>>());
    assert!(c.replicas_agree().await, "a write raced the copy and a replica kept old bytes");
}

#[tokio::test]
async fn a_full_replica_fails_the_write_with_no_space_and_stays_in_sync() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    o.faulty[1].full.store(true, SeqCst);
    assert!(matches!(write(&o.vol, 0, 1, 1).await, Err(BlockError::NoSpace)));
    assert_eq!(c.control.get().in_sync.len(), 3, "a full pool is not a failed replica");
}

#[tokio::test]
async fn a_volume_whose_chunk_lost_every_replica_does_not_open() {
    let c = Cluster::new();
    c.control.stored.lock().unwrap().in_sync = ids(&[1]);
    let m = c.control.take_over();
    // Node 1 is in every chunk's list: opens.
    assert!(c.open_at(NodeId(1), m).await.is_ok());
    c.control.stored.lock().unwrap().in_sync = BTreeSet::new();
    let m = c.control.take_over();
    assert!(matches!(c.open_at(NodeId(1), m).await, Err(strata_pool::volume::OpenError::Unavailable { chunk: 0, .. })));
}

#[tokio::test]
async fn the_log_keeps_a_region_dirty_until_it_was_quiet_for_the_delay_and_only_flushes_when_it_clears_some() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 1).await.unwrap();
    let saves = c.drl_store.saves.load(SeqCst);
    let delay = std::time::Duration::from_millis(300);
    // Written just now: not quiet for the delay yet, so nothing is
    // cleared, flushed or saved.
    assert_eq!(o.vol.clean(delay).await.unwrap(), 0);
    assert!(o.vol.drl().dirty().contains(0));
    assert_eq!(c.drl_store.saves.load(SeqCst), saves, "a clean with nothing to clear wrote the log");
    // A write to a dirty region costs no save either.
    write(&o.vol, 1, 2, 1).await.unwrap();
    assert_eq!(c.drl_store.saves.load(SeqCst), saves, "re-dirtying a dirty region wrote the log");
    tokio::time::sleep(delay).await;
    // Quiet since the first mark, but the second write came after it.
    assert_eq!(o.vol.clean(delay).await.unwrap(), 0);
    tokio::time::sleep(delay).await;
    assert_eq!(o.vol.clean(delay).await.unwrap(), 1, "quiet for the delay: cleared");
    assert!(c.drl_store.saved().dirty.is_empty(), "the cleared log is saved");
}

/// Every replica of a chunk fails a write: none of them may leave the
/// in-sync set (the chunk would have no copy any owner can read), so the
/// write fails, the owner stops, and the next owner, once they are back,
/// serves every acknowledged write.
#[tokio::test]
async fn the_last_in_sync_copy_of_a_chunk_never_leaves_and_the_volume_comes_back() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 8).await.unwrap();
    o.faulty[2].down.store(true, SeqCst);
    write(&o.vol, 8, 2, 1).await.expect("two replicas left");
    assert_eq!(c.control.get().in_sync, ids(&[1, 2]));
    o.faulty[0].down.store(true, SeqCst);
    o.faulty[1].down.store(true, SeqCst);
    assert!(write(&o.vol, 16, 3, 1).await.is_err(), "no replica took it");
    assert!(o.vol.is_fenced() && strata_pool::PoolVolume::below_minimum(&o.vol), "the owner stops");
    assert_eq!(c.control.get().in_sync, ids(&[1, 2]), "the last copies stay in sync");
    drop(o);
    let o = c.open(NodeId(2)).await.expect("the next owner serves once the nodes are back");
    assert!(read(&o.vol, 0, 8).await == pattern(1, 8).to_vec());
    assert!(read(&o.vol, 8, 1).await == pattern(2, 1).to_vec());
}

/// A replica whose node restarted (its link reconnected) after a flush is
/// refilled where it may have lost writes, which is nowhere: it stays in
/// sync, the epoch does not move, and it is read again.
#[tokio::test]
async fn a_replica_that_restarts_after_a_flush_stays_in_sync() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 8).await.unwrap();
    o.vol.flush().await.unwrap();
    let before = c.control.get();
    for f in &o.faulty {
        f.restart();
    }
    assert!(read(&o.vol, 0, 8).await == pattern(1, 8).to_vec());
    o.vol.flush().await.unwrap();
    let missed = c.drl_store.saved().missed;
    assert!(missed.values().all(|s| s.is_empty()), "nothing to refill after a flush: {missed:?}");
    write(&o.vol, 8, 2, 1).await.expect("a write after the restarts");
    o.vol.flush().await.unwrap();
    assert_eq!(c.control.get(), before, "nobody left, the epoch did not move");
    assert!(read(&o.vol, 8, 1).await == pattern(2, 1).to_vec());
    assert!(c.replicas_agree().await);
}

/// A replica that restarts with unflushed writes is marked missing the
/// regions written since the last flush before anything else reaches it,
/// stays in sync, and is refilled there.
#[tokio::test]
async fn a_replica_that_restarts_before_a_flush_is_refilled_where_it_may_have_lost_writes() {
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 8).await.unwrap();
    o.vol.flush().await.unwrap();
    write(&o.vol, 0, 2, 1).await.unwrap();
    o.faulty[1].restart();
    write(&o.vol, 1, 3, 1).await.expect("write after the restart");
    let missed = c.drl_store.saved().missed.get(&NodeId(2)).cloned().expect("marked before the write completed");
    assert!(missed.contains(0), "the region written since the flush");
    assert_eq!(c.control.get().in_sync, ids(&[1, 2, 3]), "still in sync");
    o.vol.resync(NodeId(2)).await.expect("refilled");
    assert!(c.drl_store.saved().missed.get(&NodeId(2)).is_none_or(|s| s.is_empty()));
    o.vol.flush().await.unwrap();
    assert!(c.replicas_agree().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_finds_a_corrupt_copy_names_its_node_and_a_repair_restores_the_majority() {
    use strata_pool::check::CheckProgress;
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    for i in 0..16u64 {
        write(&o.vol, i * 200, i, 8).await.unwrap();
    }
    o.vol.flush().await.unwrap();
    let progress = CheckProgress::new(BLOCKS * u64::from(BS));
    let clean = o.vol.check(false, &progress).await.unwrap();
    assert_eq!((clean.differences, clean.bytes_unchecked), (0, 0), "{clean:?}");
    assert_eq!(clean.bytes_checked, BLOCKS * u64::from(BS));
    assert_eq!(progress.get(), (BLOCKS * u64::from(BS), BLOCKS * u64::from(BS)));

    // Behind the owner's back: node 3's copy of block 1203 rots.
    let (lba, before) = (1203, c.block(2, 1203).await);
    c.devices[2].write(lba, IoBuf::from_slice(&vec![0x5a; BS as usize]), false).await.1.unwrap();
    // Checks run while hosts write elsewhere: those are not differences.
    let busy = {
        let vol = o.vol.clone();
        tokio::spawn(async move {
            for i in 0..200u64 {
                write(&vol, 3000 + i % 64, 1000 + i, 1).await.unwrap();
            }
        })
    };
    let found = o.vol.check(false, &CheckProgress::new(0)).await.unwrap();
    busy.await.unwrap();
    assert_eq!(found.differences, 1, "{found:?}");
    let d = &found.listed[0];
    assert_eq!((d.lba, d.blocks, d.wrong.clone(), d.repaired), (lba, 1, vec![3], false), "{d:?}");
    assert!(c.block(2, lba).await != before, "a check alone writes nothing");

    let fixed = o.vol.check(true, &CheckProgress::new(0)).await.unwrap();
    assert_eq!((fixed.differences, fixed.repaired), (1, 1), "{fixed:?}");
    assert!(fixed.clean());
    assert_eq!(c.block(2, lba).await, before, "the majority's value is back on node 3");
    assert!(c.replicas_agree().await);
    assert_eq!(o.vol.check(false, &CheckProgress::new(0)).await.unwrap().differences, 0);
}

#[tokio::test]
async fn a_check_with_one_copy_in_sync_compares_nothing_and_says_so() {
    use strata_pool::check::CheckProgress;
    let c = Cluster::new();
    let o = c.open(NodeId(1)).await.unwrap();
    write(&o.vol, 0, 1, 4).await.unwrap();
    for f in &o.faulty[1..] {
        f.down.store(true, SeqCst);
    }
    // The writes that find them down take them out of the in-sync set.
    write(&o.vol, 0, 2, 4096).await.unwrap();
    let r = o.vol.check(false, &CheckProgress::new(0)).await.unwrap();
    assert_eq!((r.bytes_checked, r.bytes_unchecked, r.differences), (0, BLOCKS * u64::from(BS), 0), "{r:?}");
}
