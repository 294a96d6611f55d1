//! A replicated volume whose replicas are on other "nodes": strata's own
//! target serving fenced namespaces, reached over loopback NVMe/TCP with
//! strata's host library, one link per peer.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strata_block::{BlockDevice, BlockError, EpochFence, Geometry, IoBuf, MemDevice};
use strata_host::HostConfig;
use strata_pool::drl::{DirtyRegionLog, MemDrlStore};
use strata_pool::fabric::{FabricLink, FabricReplica, fabric_nqn};
use strata_pool::testing::{MemControl, TableLayout};
use strata_pool::{LocalReplica, NodeId, Regions, Replica, ReplicatedVolume, VolumeParts};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

fn node_ids(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().map(|&i| NodeId(i)).collect()
}

fn ids(list: &[u32]) -> BTreeSet<NodeId> {
    node_ids(list).into_iter().collect()
}

const BS: u32 = 4096;
const BLOCKS: u64 = 2048; // 8 MiB
const CHUNK: u64 = 4 << 20;
const VOLUME: u32 = 70_001;
const IDS: NamespaceIds = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [3; 8] };

/// A storage node: its device for the volume, the fence in front of it,
/// and the fabric target serving it.
struct Node {
    id: NodeId,
    dev: Arc<MemDevice>,
    fence: Arc<EpochFence>,
    target: Option<Target>,
    addr: SocketAddr,
}

impl Node {
    async fn start(id: NodeId, dev: Arc<MemDevice>, fence: Arc<EpochFence>, port: u16) -> Node {
        let target = Target::new(TargetConfig::default());
        let sub = Subsystem::internal(fabric_nqn(&format!("n{id}")), "STRATAFABRIC", vec![]);
        // Notes in memory: a restart loses them, which no test here minds.
        let notes = Arc::new(strata_block::MemNoteStore::default());
        let ns = Namespace::fenced(VOLUME, IDS, dev.clone() as Arc<dyn BlockDevice>, fence.clone()).with_notes(notes);
        sub.add_namespace(ns).unwrap();
        target.add_subsystem(sub).unwrap();
        // A restart binds the port it had: a connection of another test
        // (or the owner's reconnect, which on loopback can connect to
        // itself while nothing listens) may hold it for a moment.
        let began = std::time::Instant::now();
        let addr = loop {
            match target.listen(SocketAddr::from(([127, 0, 0, 1], port)), PortRole::Fabric).await {
                Ok(l) => break l.addr,
                Err(e) if port != 0 && began.elapsed() < Duration::from_secs(10) => {
                    eprintln!("port {port} busy ({e}); again");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("listen on port {port}: {e}"),
            }
        };
        Node { id, dev, fence, target: Some(target), addr }
    }

    async fn stop(&mut self) {
        if let Some(t) = self.target.take() {
            t.shutdown(Duration::from_secs(2)).await;
        }
    }

    async fn block(&self, lba: u64) -> Vec<u8> {
        let (b, r) = self.dev.read(lba, IoBuf::zeroed(BS as usize)).await;
        r.unwrap();
        b.to_vec()
    }
}

fn host_cfg() -> HostConfig {
    HostConfig { io_timeout: Duration::from_secs(5), connect_timeout: Duration::from_secs(2), ..HostConfig::default() }
}

async fn cluster() -> Vec<Node> {
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Node::start(NodeId(id), Arc::new(MemDevice::new(BS, BLOCKS)), EpochFence::new(0), 0).await);
    }
    nodes
}

/// Opens the volume on `owner` (taking it over in `control`): the local
/// replica directly, the others through links.
async fn open(
    nodes: &[Node],
    owner: NodeId,
    control: &Arc<MemControl>,
    store: &Arc<MemDrlStore>,
) -> (ReplicatedVolume, Vec<Arc<FabricLink>>) {
    let mut replicas: Vec<Arc<dyn Replica>> = Vec::new();
    let mut links = Vec::new();
    for n in nodes {
        if n.id == owner {
            let dev = n.dev.clone() as Arc<dyn BlockDevice>;
            replicas.push(Arc::new(LocalReplica::new(n.id, dev, n.fence.clone())));
        } else {
            let link = FabricLink::new(n.id, n.addr, fabric_nqn(&format!("n{}", n.id)), host_cfg());
            replicas.push(Arc::new(FabricReplica::new(link.clone(), VOLUME, BS)));
            links.push(link);
        }
    }
    let regions = Regions::for_volume(BLOCKS * u64::from(BS), CHUNK);
    let vol = ReplicatedVolume::open(VolumeParts {
        geometry: Geometry { block_size: BS, num_blocks: BLOCKS },
        local: owner,
        layout: Arc::new(TableLayout { chunk_bytes: CHUNK, table: vec![node_ids(&[1, 2, 3]), node_ids(&[3, 2, 1])] }),
        replicas,
        membership: control.take_over(),
        drl: DirtyRegionLog::new(regions, store.saved(), store.clone()),
        control: control.clone(),
        moving: None,
    })
    .await
    .expect("open");
    (vol, links)
}

fn data(seed: u8, blocks: usize) -> IoBuf {
    let mut b = IoBuf::zeroed(blocks * BS as usize);
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = seed ^ (i as u8).wrapping_mul(31);
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_io_over_the_fabric_lands_on_every_node() {
    let nodes = cluster().await;
    let control = MemControl::new(0, node_ids(&[1, 2, 3]));
    let store = Arc::new(MemDrlStore::default());
    let (vol, _links) = open(&nodes, NodeId(1), &control, &store).await;
    // 2 MiB across the chunk boundary: split into fabric commands.
    let lba = CHUNK / u64::from(BS) - 256;
    vol.write(lba, data(7, 512), true).await.1.unwrap();
    vol.flush().await.unwrap();
    for n in &nodes {
        for probe in [lba, lba + 255, lba + 256, lba + 511] {
            assert!(n.block(probe).await == data(7, 512)[((probe - lba) * 4096) as usize..][..4096].to_vec());
        }
        assert_eq!(n.fence.epoch(), control.get().epoch, "every replica is fenced at the owner's epoch");
    }
    let (back, r) = vol.read(lba, IoBuf::zeroed(512 * BS as usize)).await;
    r.unwrap();
    assert!(back.as_slice() == data(7, 512).as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_leaves_the_in_sync_set_and_a_restarted_one_resyncs() {
    let mut nodes = cluster().await;
    let control = MemControl::new(0, node_ids(&[1, 2, 3]));
    let store = Arc::new(MemDrlStore::default());
    let (vol, _links) = open(&nodes, NodeId(1), &control, &store).await;
    vol.write(0, data(1, 8), false).await.1.unwrap();
    vol.clean(std::time::Duration::ZERO).await.unwrap();

    // Node 3 dies: the next write completes on 1 and 2 and drops it.
    nodes[2].stop().await;
    vol.write(600, data(2, 8), false).await.1.expect("two replicas remain");
    assert_eq!(control.get().in_sync, ids(&[1, 2]));

    // It restarts on the same address with its old (stale) bytes.
    let port = nodes[2].addr.port();
    let (dev, fence) = (nodes[2].dev.clone(), nodes[2].fence.clone());
    nodes[2] = Node::start(NodeId(3), dev, fence, port).await;
    vol.resync(NodeId(3)).await.expect("resync over a new connection");
    assert_eq!(control.get().in_sync, ids(&[1, 2, 3]));
    for probe in [0, 600, 607] {
        assert!(nodes[2].block(probe).await == nodes[0].block(probe).await, "block {probe} differs on node 3");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_restarts_between_writes_is_not_trusted_with_what_it_may_have_lost() {
    let mut nodes = cluster().await;
    let control = MemControl::new(0, node_ids(&[1, 2, 3]));
    let store = Arc::new(MemDrlStore::default());
    let (vol, _links) = open(&nodes, NodeId(1), &control, &store).await;
    vol.write(0, data(1, 8), false).await.1.unwrap();
    // Node 2 restarts while nothing is in flight (it could have lost the
    // unflushed write above).
    nodes[1].stop().await;
    let port = nodes[1].addr.port();
    let (dev, fence) = (nodes[1].dev.clone(), nodes[1].fence.clone());
    nodes[1] = Node::start(NodeId(2), dev, fence, port).await;
    // The next write finds the link's generation changed: node 2 leaves.
    vol.write(64, data(3, 1), false).await.1.unwrap();
    assert_eq!(control.get().in_sync, ids(&[1, 3]));
    assert!(store.saved().missed[&NodeId(2)].contains(0), "the unflushed region is missed");
}

/// Regression (pool soak, issue 21): a host's write failed with Write
/// Fault during an etcd freeze. The owner kept its log as notes on the
/// replicas, and a peer that had restarted refused the note as
/// `Reconnected` before anything was sent, which failed the save and the
/// write. A note does not depend on what the peer kept of earlier writes:
/// it goes over the new connection; the peer's data stays untrusted until
/// the volume marks what it may have lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_reaches_a_peer_that_restarted_whose_data_is_still_not_trusted() {
    use bytes::Bytes;
    let mut nodes = cluster().await;
    let link = FabricLink::new(nodes[1].id, nodes[1].addr, fabric_nqn("n2"), host_cfg());
    let rep = FabricReplica::new(link, VOLUME, BS);
    rep.write(1, 0, Bytes::from(data(1, 1).to_vec()), false).await.expect("a write arms the connection");
    rep.save_note(1, b"before".to_vec()).await.unwrap();
    nodes[1].stop().await;
    let port = nodes[1].addr.port();
    let (dev, fence) = (nodes[1].dev.clone(), nodes[1].fence.clone());
    nodes[1] = Node::start(NodeId(2), dev, fence, port).await;
    rep.save_note(1, b"after".to_vec()).await.expect("a note over the new connection");
    assert_eq!(rep.load_note(1).await.unwrap(), b"after");
    let err = rep.write(1, 1, Bytes::from(data(2, 1).to_vec()), false).await.unwrap_err();
    assert!(matches!(err, strata_pool::ReplicaError::Reconnected { .. }), "data is not trusted yet: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_lost_the_volume_cannot_write_over_the_fabric() {
    let nodes = cluster().await;
    let control = MemControl::new(0, node_ids(&[1, 2, 3]));
    let store = Arc::new(MemDrlStore::default());
    let (old, _l1) = open(&nodes, NodeId(1), &control, &store).await;
    old.write(5, data(1, 1), false).await.1.unwrap();
    let (new, _l2) = open(&nodes, NodeId(2), &control, &store).await;
    assert!(matches!(old.write(5, data(9, 1), false).await.1, Err(BlockError::PathUnavailable(_))));
    for n in &nodes {
        assert!(n.block(5).await == data(1, 1).to_vec(), "node {} took a fenced write", n.id);
    }
    new.write(5, data(4, 1), false).await.1.unwrap();
    for n in &nodes {
        assert!(n.block(5).await == data(4, 1).to_vec());
    }
}
