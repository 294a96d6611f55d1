//! Fenced namespaces: the replicas of the internal fabric take only
//! strata's fenced commands, and refuse an epoch older than the newest they
//! have seen, through strata's own host library over real TCP.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{BS, IDS, Rng};
use strata_block::{BlockDevice, EpochFence, MemDevice};
use strata_host::{Controller, HostConfig, HostError};
use strata_nvme::status::Status;
use strata_target::{Namespace, PortRole, Subsystem, Target, TargetConfig};

const FABRIC_NQN: &str = "nqn.2026-11.io.strata:fabric:test";
/// A volume id beyond the 1024 namespaces of a host-facing subsystem.
const VOLUME: u32 = 70_000;

struct Fabric {
    target: Target,
    ctrl: Controller,
    fence: Arc<EpochFence>,
    dev: Arc<MemDevice>,
}

async fn fabric(epoch: u64) -> Fabric {
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::internal(FABRIC_NQN, "STRATAFABRIC", vec![]);
    let dev = Arc::new(MemDevice::new(BS as u32, 256));
    let fence = EpochFence::new(epoch);
    sub.add_namespace(Namespace::fenced(VOLUME, IDS, dev.clone() as Arc<dyn BlockDevice>, fence.clone())).unwrap();
    // An ordinary namespace beside it.
    sub.add_namespace(Namespace::new(1, IDS, Arc::new(MemDevice::new(BS as u32, 16)))).unwrap();
    target.add_subsystem(sub).unwrap();
    let addr = target.listen("127.0.0.1:0".parse().unwrap(), PortRole::Fabric).await.unwrap().addr;
    let ctrl = Controller::connect(addr, FABRIC_NQN, &HostConfig::default()).await.unwrap();
    Fabric { target, ctrl, fence, dev }
}

/// The status code (type and code, without DNR) of a failed command.
fn status(r: Result<impl std::fmt::Debug, HostError>) -> u16 {
    match r {
        Err(HostError::Status { status, .. }) => status.code(),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_fenced_replica_takes_the_current_epoch_and_refuses_an_older_one() {
    let f = fabric(5).await;
    let q = f.ctrl.next_io_queue().unwrap();
    let a = Rng::new(1).bytes(BS);
    let b = Rng::new(2).bytes(BS);

    q.fenced_write(VOLUME, 5, 3, a.clone(), false).await.expect("the owner's epoch is admitted");
    assert_eq!(&q.fenced_read(VOLUME, 5, 3, 1).await.unwrap()[..], &a[..]);

    // A new owner fences the replica with its first flush.
    q.fenced_flush(VOLUME, 6).await.unwrap();
    assert_eq!(f.fence.epoch(), 6);
    // The old owner wakes up: refused, and nothing changed.
    assert_eq!(status(q.fenced_write(VOLUME, 5, 3, b.clone(), false).await), Status::STALE_EPOCH.code());
    assert_eq!(status(q.fenced_read(VOLUME, 5, 3, 1).await), Status::STALE_EPOCH.code());
    assert_eq!(status(q.fenced_write_zeroes(VOLUME, 5, 3, 1, true).await), Status::STALE_EPOCH.code());
    assert_eq!(&q.fenced_read(VOLUME, 6, 3, 1).await.unwrap()[..], &a[..]);

    // A replica learning a newer epoch from the metadata store fences too.
    f.fence.raise(9, None);
    assert_eq!(status(q.fenced_write(VOLUME, 6, 3, b.clone(), false).await), Status::STALE_EPOCH.code());
    q.fenced_write_zeroes(VOLUME, 9, 3, 1, false).await.unwrap();
    assert!(q.fenced_read(VOLUME, 9, 3, 1).await.unwrap().iter().all(|&x| x == 0));
    let mut back = strata_block::IoBuf::zeroed(BS);
    back = f.dev.read(3, back).await.0;
    assert!(back.iter().all(|&x| x == 0), "the device holds what the admitted commands wrote");
}

#[tokio::test]
async fn fenced_and_standard_commands_do_not_mix() {
    let f = fabric(1).await;
    let q = f.ctrl.next_io_queue().unwrap();
    let data = Rng::new(3).bytes(BS);
    // Standard I/O would bypass the epoch: a fenced namespace refuses it.
    assert_eq!(status(q.write(VOLUME, 0, data.clone(), false).await), Status::FENCE_REQUIRED.code());
    assert_eq!(status(q.read(VOLUME, 0, 1).await), Status::FENCE_REQUIRED.code());
    // And an ordinary namespace does not know the fenced opcodes.
    assert_eq!(status(q.fenced_write(1, 1, 0, data.clone(), false).await), Status::INVALID_OPCODE.code());
    q.write(1, 0, data.clone(), false).await.expect("standard I/O on the ordinary namespace");
    // Both identify: the fabric subsystem reports its NSID range.
    assert_eq!(f.ctrl.identify_controller().await.unwrap().nn, u32::MAX - 1);
    assert!(f.ctrl.active_namespaces().await.unwrap().contains(&VOLUME));
}

#[tokio::test]
async fn a_new_epoch_is_admitted_only_after_the_old_owners_write_lands() {
    // A command admitted under epoch 1 stands for the old owner's write,
    // still running on a slow drive.
    let f = fabric(1).await;
    let old = f.fence.admit(1, strata_block::ANONYMOUS).await.unwrap();
    let q = f.ctrl.next_io_queue().unwrap();
    let flush = q.fenced_flush(VOLUME, 2);
    tokio::pin!(flush);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut flush).await.is_err(),
        "the new owner's fence completed while an old-epoch command was running"
    );
    drop(old);
    tokio::time::timeout(Duration::from_secs(5), flush).await.expect("admitted once the old command ended").unwrap();
}

#[tokio::test]
async fn internal_subsystems_stay_off_host_ports_and_out_of_discovery() {
    let f = fabric(1).await;
    let host_sub = Subsystem::new("nqn.2026-11.io.strata:vol", "STRATAHOST", vec![]);
    host_sub.add_namespace(Namespace::new(1, IDS, Arc::new(MemDevice::new(BS as u32, 16)))).unwrap();
    f.target.add_subsystem(host_sub).unwrap();
    let io = f.target.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    let fabric_port = f.target.ports().into_iter().find(|p| p.role == PortRole::Fabric).unwrap().addr;

    // A host cannot reach a replica through a host port...
    let e = Controller::connect(io, FABRIC_NQN, &HostConfig::default()).await.unwrap_err();
    assert!(matches!(e, HostError::ConnectRejected { .. }), "{e}");
    // ...nor a host subsystem or discovery through the fabric port.
    let e = Controller::connect(fabric_port, "nqn.2026-11.io.strata:vol", &HostConfig::default()).await.unwrap_err();
    assert!(matches!(e, HostError::ConnectRejected { .. }), "{e}");
    assert!(strata_host::discover(fabric_port, &HostConfig::default()).await.is_err());

    // Discovery lists the host subsystem and the remote ones the host may
    // reach, never the internal one.
    f.target.set_remote_subsystems(vec![
        strata_target::RemoteSubsystem {
            nqn: "nqn.2026-11.io.strata:elsewhere".into(),
            addr: "10.0.0.7:4420".parse().unwrap(),
            allowed_hosts: vec![],
        },
        strata_target::RemoteSubsystem {
            nqn: "nqn.2026-11.io.strata:private".into(),
            addr: "10.0.0.8:4420".parse().unwrap(),
            allowed_hosts: vec!["nqn.2014-08.org.nvmexpress:uuid:someone-else".into()],
        },
        // Another node's path to this node's own subsystem is listed too,
        // and an entry for this node's own port only once.
        strata_target::RemoteSubsystem {
            nqn: "nqn.2026-11.io.strata:vol".into(),
            addr: "10.0.0.9:4420".parse().unwrap(),
            allowed_hosts: vec![],
        },
        strata_target::RemoteSubsystem { nqn: "nqn.2026-11.io.strata:vol".into(), addr: io, allowed_hosts: vec![] },
    ]);
    let entries = strata_host::discover(io, &HostConfig::default()).await.unwrap();
    let nqns: Vec<&str> = entries.iter().map(|e| e.subnqn.as_str()).collect();
    assert!(nqns.contains(&"nqn.2026-11.io.strata:vol"), "{nqns:?}");
    assert!(!nqns.contains(&FABRIC_NQN), "{nqns:?}");
    assert!(!nqns.contains(&"nqn.2026-11.io.strata:private"), "{nqns:?}");
    let remote = entries.iter().find(|e| e.subnqn == "nqn.2026-11.io.strata:elsewhere").expect("remote entry");
    assert_eq!((remote.traddr.as_str(), remote.trsvcid.as_str()), ("10.0.0.7", "4420"));
    let vol: Vec<(String, String)> = entries
        .iter()
        .filter(|e| e.subnqn == "nqn.2026-11.io.strata:vol")
        .map(|e| (e.traddr.clone(), e.trsvcid.clone()))
        .collect();
    let here = (io.ip().to_string(), io.port().to_string());
    assert_eq!(vol, vec![here, ("10.0.0.9".into(), "4420".into())], "this node's path first, then the others'");
}
