//! Moving a volume to a new placement while hosts write to it: a node is
//! replaced by another (a drained or dead node's chunks rebuilt
//! elsewhere), the newcomer takes writes at once, is filled in the
//! background, and is never read before it holds a region; afterwards it
//! alone can serve what it joined. Replicated and erasure-coded volumes,
//! in memory, with the metadata store's compare-and-set.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use strata_block::{BlockDevice, EpochFence, Geometry, IoBuf, MemDevice};
use strata_pool::drl::{DirtyRegionLog, MemDrlStore};
use strata_pool::erasure::{Codec, EcParts, ErasureVolume, Shard, Stripes};
use strata_pool::layout::MovePlan;
use strata_pool::testing::{Faulty, MemControl, MemShard, TableLayout};
use strata_pool::throttle::Throttle;
use strata_pool::{
    LocalReplica, Moving, NextLayout, NodeId, PoolVolume, Regions, Replica, ReplicatedVolume, VolumeParts,
};

const BS: u32 = 4096;

/// Block `lba` as written the `version`th time.
fn block(lba: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS as usize];
    for (i, chunk) in b.chunks_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&lba.to_le_bytes());
        chunk[8..].copy_from_slice(&(version * 1000 + i as u64).to_le_bytes());
    }
    b
}

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().map(|&i| NodeId(i)).collect()
}

/// Writes every block once (version 1).
async fn write_all(vol: &dyn BlockDevice, blocks: u64) {
    for lba in 0..blocks {
        let (_, r) = vol.write(lba, IoBuf::from_slice(&block(lba, 1)), false).await;
        r.expect("first write");
    }
}

/// Runs three concurrent writers over random blocks (written once
/// already) while `during` runs, and returns what each block must hold.
async fn write_during<V, F>(vol: &Arc<V>, blocks: u64, during: F) -> BTreeMap<u64, u64>
where
    V: BlockDevice + 'static,
    F: std::future::Future<Output = ()>,
{
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..3u64 {
        let (vol, stop) = (vol.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut wrote = BTreeMap::new();
            let mut rng = strata_rand::Rng::new(w);
            let mut version = 2 + w * 1_000_000;
            while !stop.load(SeqCst) {
                // Each writer owns the blocks equal to it mod 3.
                let lba = rng.below(blocks / 3) * 3 + w;
                let (_, r) = vol.write(lba, IoBuf::from_slice(&block(lba, version)), false).await;
                r.expect("write during the move");
                wrote.insert(lba, version);
                version += 1;
                tokio::task::yield_now().await;
            }
            wrote
        }));
    }
    during.await;
    stop.store(true, SeqCst);
    let mut want: BTreeMap<u64, u64> = (0..blocks).map(|l| (l, 1)).collect();
    for t in tasks {
        want.extend(t.await.expect("writer"));
    }
    vol.flush().await.expect("flush");
    want
}

async fn check_reads(vol: &dyn BlockDevice, want: &BTreeMap<u64, u64>) {
    for (&lba, &version) in want {
        let (b, r) = vol.read(lba, IoBuf::recycled(BS as usize)).await;
        r.expect("read");
        assert!(b[..] == block(lba, version)[..], "block {lba}: want version {version}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_volume_moves_off_a_node_while_written() {
    const CHUNK: u64 = 1 << 20;
    const BLOCKS: u64 = 8 * CHUNK / BS as u64;
    let geometry = Geometry { block_size: BS, num_blocks: BLOCKS };
    let devices: Vec<Arc<MemDevice>> = (0..4).map(|_| Arc::new(MemDevice::new(BS, BLOCKS))).collect();
    let fences: Vec<Arc<EpochFence>> = (0..4).map(|_| EpochFence::new(1)).collect();
    let handle = |i: usize| -> Arc<Faulty> {
        let dev = devices[i].clone() as Arc<dyn BlockDevice>;
        Faulty::new(Arc::new(LocalReplica::new(NodeId(i as u32 + 1), dev, fences[i].clone())))
    };
    let before =
        Arc::new(TableLayout { chunk_bytes: CHUNK, table: vec![nodes(&[1, 2]), nodes(&[2, 3]), nodes(&[3, 1])] });
    // Node 2 leaves: its copies go to node 4, new to the volume.
    let after =
        Arc::new(TableLayout { chunk_bytes: CHUNK, table: vec![nodes(&[1, 4]), nodes(&[4, 3]), nodes(&[3, 1])] });
    let control = MemControl::new(1, nodes(&[1, 2, 3]));
    let regions = Regions::for_volume(geometry.size_bytes(), CHUNK);
    let drl = DirtyRegionLog::new(regions, Default::default(), Arc::new(MemDrlStore::default()));
    let handles: Vec<Arc<Faulty>> = (0..4).map(handle).collect();
    let replicas: Vec<Arc<dyn Replica>> = handles[..3].iter().map(|h| h.clone() as Arc<dyn Replica>).collect();
    let parts = VolumeParts {
        geometry,
        local: NodeId(1),
        layout: before.clone(),
        replicas,
        membership: control.get(),
        drl,
        control: control.clone(),
        moving: None,
    };
    let vol = Arc::new(ReplicatedVolume::open(parts).await.expect("open"));
    vol.set_throttle(Arc::new(Throttle::new(64 << 20)));

    let plan = MovePlan::new(&*before, &*after, geometry.size_bytes(), regions, false);
    assert_eq!(plan.holders, nodes(&[1, 3, 4]).into_iter().collect::<BTreeSet<_>>());
    assert_eq!(plan.joining.iter().map(|(n, _)| *n).collect::<Vec<_>>(), nodes(&[4]), "only node 4 joins chunks");
    write_all(&*vol, BLOCKS).await;
    let moving = |next: Arc<TableLayout>, map_epoch: u64, plan: MovePlan| Moving {
        next,
        target: NextLayout { map_epoch, slots: Default::default() },
        plan,
        positional: false,
    };
    vol.begin_move(moving(after.clone(), 7, plan.clone()), vec![handles[3].clone() as Arc<dyn Replica>])
        .await
        .expect("move");
    assert_eq!(control.next.lock().unwrap().as_ref().map(|n| n.map_epoch), Some(7), "the move is recorded");
    assert_eq!(control.get().in_sync, nodes(&[1, 2, 3, 4]).into_iter().collect(), "4 in, 2 still in");
    assert!(!vol.filling().is_empty(), "node 4 misses its chunks until filled");
    assert!(!vol.finish_move().await.expect("finish"), "no switch before node 4 is filled");
    // Not filled yet: reads must not come from node 4 (it has zeros).
    check_reads(&*vol, &(0..BLOCKS).map(|l| (l, 1)).collect()).await;
    // Node 2, leaving, still keeps its copies: with node 1 down, the
    // chunks of group [1, 2] read from it.
    handles[0].down.store(true, SeqCst);
    let group0: BTreeMap<u64, u64> =
        (0..BLOCKS).filter(|l| (l * u64::from(BS) / CHUNK).is_multiple_of(3)).map(|l| (l, 1)).collect();
    check_reads(&*vol, &group0).await;
    handles[0].down.store(false, SeqCst);
    let want = write_during(&vol, BLOCKS, async {
        vol.resync(NodeId(1)).await.expect("node 1 back");
        vol.resync(NodeId(4)).await.expect("fill node 4");
    })
    .await;
    assert!(vol.filling().is_empty(), "filled: {:?}", vol.filling());
    assert!(vol.finish_move().await.expect("finish"), "switched once node 4 is filled");
    assert_eq!(control.map_epoch.load(SeqCst), 7);
    assert!(control.next.lock().unwrap().is_none(), "the move is over");
    assert_eq!(control.get().in_sync, nodes(&[1, 3, 4]).into_iter().collect(), "2 out, 4 in");
    assert!(vol.stats().bytes_rebuilt.load(SeqCst) >= 5 * CHUNK, "node 4 got its chunks copied");
    check_reads(&*vol, &want).await;
    // Node 4 alone holds what it joined: compare its device.
    for (&lba, &version) in &want {
        let chunk = lba * u64::from(BS) / CHUNK;
        if after.table[(chunk % 3) as usize].contains(&NodeId(4)) {
            let (b, r) = devices[3].read(lba, IoBuf::recycled(BS as usize)).await;
            r.expect("device read");
            assert!(b[..] == block(lba, version)[..], "node 4, block {lba}: want version {version}");
        }
    }
    // A second move: node 1 leaves the third group's chunks to node 4
    // and keeps the first group's. Their space on node 1 is freed.
    let last =
        Arc::new(TableLayout { chunk_bytes: CHUNK, table: vec![nodes(&[1, 4]), nodes(&[4, 3]), nodes(&[3, 4])] });
    let plan2 = MovePlan::new(&*after, &*last, geometry.size_bytes(), regions, false);
    let left: Vec<_> = plan2.leaving.iter().map(|(n, r)| (*n, r.len())).collect();
    assert_eq!(left, vec![(NodeId(1), 2)], "node 1 leaves chunks 2 and 5 and keeps 0, 3 and 6");
    vol.begin_move(moving(last.clone(), 8, plan2), Vec::new()).await.expect("second move");
    vol.resync(NodeId(4)).await.expect("fill node 4 again");
    assert!(vol.finish_move().await.expect("finish"));
    for chunk in (0..8u64).filter(|c| c % 3 != 1) {
        let (b, r) = devices[0].read(chunk * CHUNK / u64::from(BS), IoBuf::recycled(BS as usize)).await;
        r.expect("device read");
        let freed = b.iter().all(|&x| x == 0);
        assert_eq!(freed, chunk % 3 == 2, "node 1, chunk {chunk} (group {}): freed {freed}", chunk % 3);
    }
    check_reads(&*vol, &want).await;

    // And serves it with the other copy gone.
    handles[0].down.store(true, SeqCst);
    let via4: BTreeMap<u64, u64> =
        want.iter().filter(|&(&l, _)| (l * u64::from(BS) / CHUNK).is_multiple_of(3)).map(|(&l, &v)| (l, v)).collect();
    check_reads(&*vol, &via4).await;
}

/// An `ec:2+1` volume of `chunks` chunks (16 strips of shard each) on
/// nodes 1-3, with node 4's shard ready to join it, and the move where
/// node 2's slots go to node 4.
struct Ec21 {
    vol: Arc<ErasureVolume>,
    handles: Vec<Arc<Faulty<dyn Shard>>>,
    devices: Vec<Arc<MemDevice>>,
    control: Arc<MemControl>,
    stripes: Stripes,
    geometry: Geometry,
    after: Arc<TableLayout>,
    plan: MovePlan,
    blocks: u64,
}

const EC_STRIP: u64 = 4096;
const EC_CHUNK: u64 = 16 * EC_STRIP; // shard bytes per chunk

impl Ec21 {
    async fn open(chunks: u64) -> Ec21 {
        let stripes = Stripes { data: 2, parity: 1, strip: EC_STRIP };
        let blocks = chunks * 2 * EC_CHUNK / u64::from(BS);
        let geometry = Geometry { block_size: BS, num_blocks: blocks };
        let shard_blocks = stripes.shard_bytes(geometry.size_bytes()) / u64::from(BS);
        let devices: Vec<Arc<MemDevice>> = (0..4).map(|_| Arc::new(MemDevice::new(BS, shard_blocks))).collect();
        let handles: Vec<Arc<Faulty<dyn Shard>>> = (0..4)
            .map(|i| {
                let dev = devices[i].clone() as Arc<dyn BlockDevice>;
                Faulty::shard(MemShard::new(NodeId(i as u32 + 1), dev, EpochFence::new(1)) as Arc<dyn Shard>)
            })
            .collect();
        let before = Arc::new(TableLayout { chunk_bytes: EC_CHUNK, table: vec![nodes(&[1, 2, 3]), nodes(&[2, 3, 1])] });
        let after = Arc::new(TableLayout { chunk_bytes: EC_CHUNK, table: vec![nodes(&[1, 4, 3]), nodes(&[4, 3, 1])] });
        let control = MemControl::new(1, nodes(&[1, 2, 3]));
        let span = stripes.shard_bytes(geometry.size_bytes());
        let regions = Regions::for_volume(span, EC_CHUNK);
        let drl = DirtyRegionLog::new(regions, Default::default(), Arc::new(MemDrlStore::default()));
        let parts = EcParts {
            geometry,
            local: NodeId(1),
            stripes,
            layout: before.clone(),
            shards: handles[..3].iter().map(|h| h.clone() as Arc<dyn Shard>).collect(),
            membership: control.get(),
            drl,
            control: control.clone(),
            moving: None,
        };
        let vol = Arc::new(ErasureVolume::open(parts).await.expect("open"));
        vol.set_throttle(Arc::new(Throttle::new(0)));
        let plan = MovePlan::new(&*before, &*after, span, regions, true);
        Ec21 { vol, handles, devices, control, stripes, geometry, after, plan, blocks }
    }

    /// Starts the move to node 4.
    async fn begin_move(&self) {
        let target = NextLayout { map_epoch: 3, slots: Default::default() };
        let mv = Moving { next: self.after.clone(), target, plan: self.plan.clone(), positional: true };
        self.vol.begin_move(mv, vec![self.handles[3].clone() as Arc<dyn Shard>]).await.expect("move");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_coded_volume_rebuilds_a_position_on_a_new_node_while_written() {
    let Ec21 { vol, handles, devices, control, stripes, geometry, after, plan, blocks } = Ec21::open(8).await;
    const STRIP: u64 = EC_STRIP;
    const CHUNK: u64 = EC_CHUNK;
    const BLOCKS: u64 = 8 * 2 * EC_CHUNK / BS as u64;
    assert_eq!(blocks, BLOCKS);
    // Node 2 dies before the move.
    handles[1].down.store(true, SeqCst);

    assert_eq!(plan.joining.iter().map(|(n, _)| *n).collect::<Vec<_>>(), nodes(&[4]));
    write_all(&*vol, BLOCKS).await;
    let fixture_move = async {
        let target = NextLayout { map_epoch: 3, slots: Default::default() };
        let mv = Moving { next: after.clone(), target, plan: plan.clone(), positional: true };
        vol.begin_move(mv, vec![handles[3].clone() as Arc<dyn Shard>]).await.expect("move");
        vol.resync(NodeId(4)).await.expect("rebuild node 4");
    };
    let want = write_during(&vol, BLOCKS, fixture_move).await;
    assert!(vol.filling().is_empty());
    assert!(vol.finish_move().await.expect("finish"), "switched once node 4 is filled");
    assert_eq!(control.get().in_sync, nodes(&[1, 3, 4]).into_iter().collect());
    check_reads(&*vol, &want).await;
    // Every stripe is a codeword over nodes 1, 4 and 3.
    let codec = Codec::new(2, 1, STRIP as usize).expect("codec");
    for g in 0..stripes.count(geometry.size_bytes()) {
        let lba = stripes.shard_offset(g) / u64::from(BS);
        let chunk = stripes.shard_offset(g) / CHUNK;
        let slots = &after.table[(chunk % 2) as usize];
        let mut strips = Vec::new();
        for n in slots {
            let (b, r) = devices[n.0 as usize - 1].read(lba, IoBuf::recycled(STRIP as usize)).await;
            r.expect("device read");
            strips.push(b.to_vec());
        }
        let parity = codec.encode(&[&strips[0][..], &strips[1][..]]).expect("encode");
        assert_eq!(parity[0], strips[2], "stripe {g} is not a codeword");
    }
    // With node 1 down too, node 4's shards decode every block.
    handles[0].down.store(true, SeqCst);
    check_reads(&*vol, &want).await;
}

/// A drain of an erasure-coded volume keeps its redundancy: the node that
/// leaves keeps serving its slot (and stays in sync) until the node that
/// takes the slot over is filled, copied from it directly. With `ec:2+1`
/// and another node lost in the middle of the fill, every block still
/// reads (from the leaving node and the third), where switching first
/// would have left one readable shard of two needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_shard_keeps_serving_until_its_replacement_is_filled() {
    let f = Ec21::open(4).await;
    let (vol, handles, control) = (&f.vol, &f.handles, &f.control);
    write_all(&**vol, f.blocks).await;
    vol.flush().await.expect("flush");
    f.begin_move().await;
    assert_eq!(control.get().in_sync, nodes(&[1, 2, 3, 4]).into_iter().collect(), "node 2 stays in sync");
    // Writes while the move runs reach node 4 too.
    let want = write_during(vol, f.blocks, async {
        tokio::task::yield_now().await;
    })
    .await;
    // Node 1 dies before node 4 is filled: nodes 2 and 3 still decode
    // every block.
    handles[0].down.store(true, SeqCst);
    check_reads(&**vol, &want).await;
    handles[0].down.store(false, SeqCst);
    vol.resync(NodeId(1)).await.expect("node 1 back");
    let reads_before = handles[1].reads.load(SeqCst);
    vol.resync(NodeId(4)).await.expect("fill node 4");
    assert!(handles[1].reads.load(SeqCst) > reads_before, "node 4's slots were copied from node 2");
    assert!(vol.finish_move().await.expect("finish"));
    assert_eq!(control.get().in_sync, nodes(&[1, 3, 4]).into_iter().collect(), "node 2 leaves after the fill");
    // Node 2 gone for good: nodes 1, 4 and 3 serve every block, and with
    // node 3 down too, nodes 1 and 4 decode them.
    handles[1].down.store(true, SeqCst);
    check_reads(&**vol, &want).await;
    handles[2].down.store(true, SeqCst);
    check_reads(&**vol, &want).await;
}

/// The soak's case (issue 21: two reads of ec:4+2 answered garbage six
/// seconds after a drain was cancelled half way through its fill): a move
/// retargeted back to the placement it started from (an undrain) while
/// hosts write, with the joining node partly filled. The volume switches
/// back at once (nothing joins), the joining node leaves, and every block
/// reads as written, from the shards and with any one node down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_cancelled_half_way_through_its_fill_keeps_every_block() {
    let f = Ec21::open(8).await;
    let (vol, handles, control) = (&f.vol, &f.handles, &f.control);
    write_all(&**vol, f.blocks).await;
    vol.flush().await.expect("flush");
    f.begin_move().await;
    let before = Arc::new(TableLayout { chunk_bytes: EC_CHUNK, table: vec![nodes(&[1, 2, 3]), nodes(&[2, 3, 1])] });
    let span = f.stripes.shard_bytes(f.geometry.size_bytes());
    let back = MovePlan::new(&*before, &*before, span, Regions::for_volume(span, EC_CHUNK), true);
    assert!(back.joining.is_empty() && back.leaving.is_empty());
    let want = write_during(vol, f.blocks, async {
        // Node 4's fill runs a moment, then gives way to the undrain.
        let fill = {
            let vol = vol.clone();
            tokio::spawn(async move { vol.resync(NodeId(4)).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        vol.interrupt_fill();
        let _ = fill.await.expect("fill task");
        let target = NextLayout { map_epoch: 4, slots: Default::default() };
        let mv = Moving { next: before.clone(), target, plan: back.clone(), positional: true };
        vol.begin_move(mv, Vec::new()).await.expect("retarget");
        assert!(vol.finish_move().await.expect("finish"), "nothing joins: the switch is at once");
        // Writes go on after the switch.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    })
    .await;
    assert_eq!(control.get().in_sync, nodes(&[1, 2, 3]).into_iter().collect(), "node 4 left");
    assert!(vol.moving_to().is_none());
    check_reads(&**vol, &want).await;
    for (i, h) in handles[..3].iter().enumerate() {
        h.down.store(true, SeqCst);
        check_reads(&**vol, &want).await;
        h.down.store(false, SeqCst);
        vol.resync(NodeId(i as u32 + 1)).await.expect("back in sync");
    }
}
