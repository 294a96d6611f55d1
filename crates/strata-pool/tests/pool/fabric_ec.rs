//! An erasure-coded volume whose shards are on other "nodes": strata's own
//! target serving shard namespaces (an `UndoDevice` over RAM devices,
//! behind a fence), reached over loopback NVMe/TCP. The undo-log commands
//! cross the wire: a new owner rolls back what the old one had not
//! committed, and keeps what it had.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strata_block::{BlockDevice, EpochFence, Geometry, IoBuf, MemDevice, UndoLog};
use strata_host::HostConfig;
use strata_pool::drl::{DirtyRegionLog, MemDrlStore};
use strata_pool::erasure::{EcParts, ErasureVolume, LocalShard, Shard, Stripes, UndoDevice};
use strata_pool::fabric::{FabricLink, FabricReplica, fabric_nqn};
use strata_pool::testing::{MemControl, TableLayout};
use strata_pool::{NodeId, Regions};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

const BS: u32 = 4096;
const K: usize = 4;
const M: usize = 2;
/// 2 MiB of data: 128 stripes, a shard of 512 KiB.
const BLOCKS: u64 = 512;
const CHUNK: u64 = 256 << 10;
const VOLUME: u32 = 70_002;
const IDS: NamespaceIds = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [3; 8] };

fn stripes() -> Stripes {
    Stripes { data: K, parity: M, strip: u64::from(BS) }
}

/// A node: its shard (data and undo log on RAM), its fence, its target.
struct Node {
    id: NodeId,
    shard: Arc<UndoDevice>,
    fence: Arc<EpochFence>,
    target: Option<Target>,
    addr: SocketAddr,
}

impl Node {
    async fn start(id: NodeId, shard: Arc<UndoDevice>, fence: Arc<EpochFence>, port: u16) -> Node {
        let target = Target::new(TargetConfig::default());
        let sub = Subsystem::internal(fabric_nqn(&format!("n{id}")), "STRATAFABRIC", vec![]);
        let dev = shard.clone() as Arc<dyn BlockDevice>;
        let undo = shard.clone() as Arc<dyn UndoLog>;
        sub.add_namespace(Namespace::shard(VOLUME, IDS, dev, undo, fence.clone())).unwrap();
        target.add_subsystem(sub).unwrap();
        let addr = target.listen(SocketAddr::from(([127, 0, 0, 1], port)), PortRole::Fabric).await.unwrap().addr;
        Node { id, shard, fence, target: Some(target), addr }
    }

    async fn stop(&mut self) {
        if let Some(t) = self.target.take() {
            t.shutdown(Duration::from_secs(2)).await;
        }
    }
}

async fn cluster() -> Vec<Node> {
    let shard_blocks = stripes().shard_bytes(BLOCKS * u64::from(BS)) / u64::from(BS);
    let mut nodes = Vec::new();
    for id in 1..=(K + M) as u32 {
        let data = Arc::new(MemDevice::new(BS, shard_blocks)) as Arc<dyn BlockDevice>;
        let log = Arc::new(MemDevice::new(BS, 4096)) as Arc<dyn BlockDevice>;
        let shard = UndoDevice::open(data, log).await.expect("a fresh undo log");
        nodes.push(Node::start(NodeId(id), shard, EpochFence::new(0), 0).await);
    }
    nodes
}

fn host_cfg() -> HostConfig {
    HostConfig { io_timeout: Duration::from_secs(5), connect_timeout: Duration::from_secs(2), ..HostConfig::default() }
}

/// Opens the volume on `owner`: its own shard directly, the others over
/// the fabric.
async fn open(nodes: &[Node], owner: NodeId, control: &Arc<MemControl>, store: &Arc<MemDrlStore>) -> ErasureVolume {
    let mut shards: Vec<Arc<dyn Shard>> = Vec::new();
    for n in nodes {
        if n.id == owner {
            let dev = n.shard.clone() as Arc<dyn BlockDevice>;
            shards.push(Arc::new(LocalShard::new(n.id, dev, n.shard.clone(), n.fence.clone())));
        } else {
            let link = FabricLink::new(n.id, n.addr, fabric_nqn(&format!("n{}", n.id)), host_cfg());
            shards.push(Arc::new(FabricReplica::new(link, VOLUME, BS)));
        }
    }
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let table = vec![ids.clone(), ids.iter().rev().copied().collect()];
    let regions = Regions::for_volume(stripes().shard_bytes(BLOCKS * u64::from(BS)), CHUNK);
    ErasureVolume::open(EcParts {
        geometry: Geometry { block_size: BS, num_blocks: BLOCKS },
        local: owner,
        stripes: stripes(),
        layout: Arc::new(TableLayout { chunk_bytes: CHUNK, table }),
        shards,
        membership: control.take_over(),
        drl: DirtyRegionLog::new(regions, store.saved(), store.clone()),
        control: control.clone(),
        moving: None,
    })
    .await
    .expect("open")
}

fn data(seed: u8, blocks: usize) -> IoBuf {
    let mut b = IoBuf::zeroed(blocks * BS as usize);
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = seed ^ (i as u8).wrapping_mul(31) ^ (i >> 12) as u8;
    }
    b
}

async fn read(vol: &ErasureVolume, lba: u64, blocks: usize) -> Vec<u8> {
    let (b, r) = vol.read(lba, IoBuf::zeroed(blocks * BS as usize)).await;
    r.expect("read");
    b.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_io_over_the_fabric_survives_two_dead_nodes_and_a_takeover_rolls_back_only_the_unflushed() {
    let mut nodes = cluster().await;
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let control = MemControl::new(0, ids);
    let store = Arc::new(MemDrlStore::default());
    let vol = open(&nodes, NodeId(1), &control, &store).await;
    // Full stripes across the chunk boundary, and partial ones.
    vol.write(40, data(7, 200), false).await.1.unwrap();
    vol.write(3, data(8, 1), false).await.1.unwrap();
    vol.write(301, data(9, 3), false).await.1.unwrap();
    vol.flush().await.unwrap();
    assert!(vol.committed() > 0, "the flush committed");
    let flushed = read(&vol, 0, BLOCKS as usize).await;

    // Unflushed writes, then the owner dies (it is simply dropped: its
    // undo records stay on the shards).
    vol.write(41, data(1, 2), false).await.1.unwrap();
    vol.write(100, data(2, 64), false).await.1.unwrap();
    assert!(read(&vol, 41, 1).await == data(1, 2).to_vec()[..BS as usize]);
    drop(vol);
    // Two nodes die with it.
    nodes[2].stop().await;
    nodes[5].stop().await;
    let vol = open(&nodes, NodeId(2), &control, &store).await;
    assert_eq!(control.get().in_sync.len(), K, "the dead nodes left");
    let after = read(&vol, 0, BLOCKS as usize).await;
    assert!(after == flushed, "the takeover keeps exactly what was flushed (the unflushed writes were undone)");

    // Writes go on with M nodes down; a FUA write is committed at once.
    vol.write(7, data(3, 1), true).await.1.unwrap();
    assert!(read(&vol, 7, 1).await == data(3, 1).to_vec());
    for n in [&nodes[0], &nodes[1], &nodes[3], &nodes[4]] {
        assert_eq!(n.fence.epoch(), control.get().epoch, "node {} fenced at the owner's epoch", n.id);
    }
}

/// Eight writers of 128 KiB (full stripes) at once, never flushing: the
/// shards' undo logs would fill up (and every shard leave the in-sync
/// set) unless the owner commits as it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_full_stripe_writes_commit_as_they_go_and_keep_every_shard() {
    let nodes = cluster().await;
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let control = MemControl::new(0, ids);
    let store = Arc::new(MemDrlStore::default());
    let vol = open(&nodes, NodeId(1), &control, &store).await;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let v = vol.clone();
        tasks.push(tokio::spawn(async move {
            for r in 0..20u64 {
                let lba = (i * 32 + r * 256) % (BLOCKS - 32);
                let t = std::time::Instant::now();
                v.write(lba, data(i as u8, 32), false).await.1.unwrap();
                assert!(t.elapsed() < Duration::from_secs(3), "slow write {:?}", t.elapsed());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(control.get().in_sync.len(), K + M, "no shard left");
    assert!(vol.committed() > 0, "the owner committed without a flush");
}

/// The undo-log commands that carry a list keep their sequence number
/// (and a record its targets, up to position 31) across the wire. The bug this pins: the host wrote the list's length
/// as a whole Read over CDW10-CDW11 after the argument, so Undo Records
/// always asked for the records after update 0 and Roll Back Only raised
/// no mark; the in-memory shards of `erasure.rs` never cross the wire and
/// could not see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_records_and_roll_back_only_carry_their_sequence_numbers_over_the_fabric() {
    let nodes = cluster().await;
    let n = &nodes[0];
    for (seq, lba) in [(3, 0), (7, 1), (9, 2)] {
        n.shard.write_logged(seq, 1 << 31 | seq, lba, data(seq as u8, 1)).await.1.unwrap();
    }
    let link = FabricLink::new(n.id, n.addr, fabric_nqn(&format!("n{}", n.id)), host_cfg());
    let remote = FabricReplica::new(link, VOLUME, BS);
    for (after, want) in [(0, vec![3, 7, 9]), (3, vec![7, 9]), (9, vec![])] {
        let list = remote.records(1, after).await.unwrap();
        assert_eq!(list.iter().map(|r| r.seq).collect::<Vec<u64>>(), want, "the records after update {after}");
        for r in &list {
            assert_eq!(r.targets, 1 << 31 | r.seq, "update {}'s targets cross the wire", r.seq);
        }
    }
    assert_eq!(remote.roll_back_only(1, vec![9], 12).await.unwrap(), 1, "one record undone");
    assert_eq!(remote.committed(1).await.unwrap(), 12, "the mark sent is the mark kept");
    assert_eq!(n.shard.committed(), 12);
    let (b, r) = n.shard.read(2, IoBuf::zeroed(BS as usize)).await;
    r.unwrap();
    assert!(b.iter().all(|&x| x == 0), "update 9 undone");
    let (b, r) = n.shard.read(1, IoBuf::zeroed(BS as usize)).await;
    r.unwrap();
    assert!(b.to_vec() == data(7, 1).to_vec(), "update 7 forgotten, not undone");
}

/// Crash case 4 of docs/pool.md with M nodes lost: the owner flushed every
/// shard and died while committing, so one shard kept the undo record of a
/// committed update; then M other nodes die, and the new owner serves
/// from exactly K shards, that one among them. The flushed write must
/// read back: the new owner takes the highest mark, so the shard that
/// missed the commit forgets the record rather than undoing it alone
/// (which leaves the K shards two versions that decode to garbage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_missed_a_commit_keeps_the_flushed_write_when_k_shards_are_left() {
    let mut nodes = cluster().await;
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let control = MemControl::new(0, ids);
    let store = Arc::new(MemDrlStore::default());
    let vol = open(&nodes, NodeId(1), &control, &store).await;
    // Whole stripes (K blocks each) in chunk 0, whose slot i is node i+1.
    vol.write(0, data(1, 8), false).await.1.unwrap();
    vol.flush().await.unwrap();
    vol.write(0, data(2, 8), false).await.1.unwrap();
    let seqs: Vec<u64> = nodes[3].shard.records(0).await.unwrap().iter().map(|r| r.seq).collect();
    let newest = *seqs.iter().max().expect("node 4 holds records of the second write");
    // The owner's commit: every shard flushed, then the commit reaches
    // all but node 4 (a data slot) before the owner dies.
    for n in &nodes {
        n.shard.flush().await.unwrap();
    }
    for n in nodes.iter().filter(|n| n.id != NodeId(4)) {
        n.shard.commit(newest).await.unwrap();
    }
    drop(vol);
    // Both parity slots' nodes die: K shards are left, node 4 among them.
    nodes[4].stop().await;
    nodes[5].stop().await;
    let vol = open(&nodes, NodeId(2), &control, &store).await;
    assert_eq!(control.get().in_sync.len(), K);
    assert!(read(&vol, 0, 8).await == data(2, 8).to_vec(), "the flushed write reads back whole");
    for n in &nodes[..4] {
        assert!(n.shard.committed() >= newest, "node {} raised its mark past the last owner's updates", n.id);
        assert!(n.shard.records(0).await.unwrap().is_empty(), "node {} forgot every record", n.id);
    }
}
