//! `strata_host::RemoteNamespace`: a remote namespace behind the
//! `BlockDevice` trait. Large I/O is split into commands and comes back
//! intact, bad requests are refused before anything is sent, a lost
//! target fails commands promptly and is reconnected by the next one,
//! and a namespace found through discovery fails over between paths.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{BS, IDS, NQN, Rng, start};
use strata_block::{BlockDevice, BlockError, Geometry, IoBuf};
use strata_host::{HostConfig, HostError, RemoteNamespace};
use strata_target::{Namespace, PortRole, Subsystem, Target, TargetConfig};

fn buf_of(data: &[u8]) -> IoBuf {
    let mut b = IoBuf::recycled(data.len());
    b.as_mut_slice().copy_from_slice(data);
    b
}

async fn read(dev: &RemoteNamespace, lba: u64, len: usize) -> Result<Vec<u8>, BlockError> {
    let (buf, r) = dev.read(lba, IoBuf::recycled(len)).await;
    r.map(|()| buf.as_slice().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_namespace_is_a_block_device_that_reconnects() {
    let fx = start(2048).await;
    let cfg = HostConfig::default();
    let dev = RemoteNamespace::connect(fx.io, NQN, None, &cfg).await.expect("connect");
    dev.set_command_timeout(Duration::from_secs(5));
    assert_eq!(dev.geometry(), Geometry { block_size: BS as u32, num_blocks: 2048 });
    assert_eq!(dev.nsid(), 1);

    // 3 MiB and a block: several commands each way.
    let data = Rng::new(7).bytes(3 * 1024 * 1024 + BS);
    let (_, r) = dev.write(5, buf_of(&data), false).await;
    r.expect("write");
    dev.flush().await.expect("flush");
    assert_eq!(read(&dev, 5, data.len()).await.expect("read"), data);
    // The target's device holds it where it was written.
    let (local, r) = fx.dev.read(5, IoBuf::recycled(BS)).await;
    r.unwrap();
    assert_eq!(local.as_slice(), &data[..BS]);
    dev.write_zeroes(5, 1, false).await.expect("write zeroes");
    assert_eq!(read(&dev, 5, BS).await.unwrap(), vec![0u8; BS]);

    // Refused before anything is sent.
    assert!(matches!(read(&dev, 2047, 2 * BS).await, Err(BlockError::OutOfRange { .. })));
    assert!(matches!(read(&dev, 0, 100).await, Err(BlockError::BadBuffer { .. })));
    assert!(matches!(
        RemoteNamespace::connect(fx.io, NQN, Some(9), &cfg).await,
        Err(HostError::Status { .. } | HostError::UnknownNamespace(9))
    ));

    // The target goes away: commands fail (no hang: failover is off), the
    // connection is retired, and once a target serves the namespace again
    // at the same address the next command reconnects and sees the data.
    dev.set_failover_timeout(Duration::ZERO);
    fx.target.shutdown(Duration::from_secs(2)).await;
    let t0 = std::time::Instant::now();
    assert!(matches!(read(&dev, 6, BS).await, Err(BlockError::Io(_))));
    assert!(matches!(read(&dev, 6, BS).await, Err(BlockError::Io(_))), "no target: reconnecting fails too");
    // A failed write gives its buffer back unchanged.
    let (back, r) = dev.write(6, buf_of(&data[..2 * BS]), false).await;
    assert!(matches!(r, Err(BlockError::Io(_))));
    assert_eq!(back.as_slice(), &data[..2 * BS]);
    assert!(t0.elapsed() < Duration::from_secs(15));
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST01", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, fx.dev.clone())).unwrap();
    target.add_subsystem(sub).unwrap();
    target.listen(fx.io, PortRole::Io).await.expect("the same port again");
    assert_eq!(read(&dev, 6, BS).await.expect("reconnected"), data[BS..2 * BS]);
    let _keep: Arc<RemoteNamespace> = dev;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_io_split_into_concurrent_commands_lands_where_it_belongs() {
    // Many large reads and writes at once, each split into 1 MiB commands
    // that are all in flight together: every one lands where it belongs,
    // and a written buffer (sent as views of it) comes back unchanged, as
    // the same allocation.
    let fx = start(16384).await;
    let dev = Arc::new(RemoteNamespace::connect(fx.io, NQN, None, &HostConfig::default()).await.expect("connect"));
    dev.set_command_timeout(Duration::from_secs(10));
    let len = 3 * 1024 * 1024 + 5 * BS;
    let stride = (len / BS) as u64 + 3;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let dev = dev.clone();
        tasks.push(tokio::spawn(async move {
            let data = Rng::new(100 + i).bytes(len);
            let buf = buf_of(&data);
            let ptr = buf.as_slice().as_ptr() as usize;
            let (back, r) = dev.write(i * stride, buf, false).await;
            r.expect("write");
            assert_eq!(back.as_slice().as_ptr() as usize, ptr, "the buffer came back as another allocation");
            assert_eq!(back.as_slice(), &data[..], "the buffer changed");
            data
        }));
    }
    let mut written = Vec::new();
    for t in tasks {
        written.push(t.await.unwrap());
    }
    let reads: Vec<_> = (0..8u64)
        .map(|i| {
            let dev = dev.clone();
            tokio::spawn(async move { read(&dev, i * stride, len).await.expect("read") })
        })
        .collect();
    for (i, t) in reads.into_iter().enumerate() {
        assert!(t.await.unwrap() == written[i], "region {i} read back wrong");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_namespace_follows_its_subsystem_to_where_discovery_says_it_is_now() {
    use strata_target::RemoteSubsystem;
    let fx = start(2048).await;
    // A node that does not serve the subsystem but lists where it is, as
    // every node of a pool lists a volume at its owner's address.
    let directory = Target::new(TargetConfig::default());
    let dir_addr = directory.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    let at = |addr| vec![RemoteSubsystem { nqn: NQN.into(), addr, allowed_hosts: vec![] }];
    directory.set_remote_subsystems(at(fx.io));

    let cfg = HostConfig::default();
    let dev = RemoteNamespace::connect_any(&[dir_addr], NQN, None, &cfg).await.expect("found through discovery");
    dev.set_command_timeout(Duration::from_secs(5));
    assert_eq!(dev.addr(), fx.io);
    let data = Rng::new(11).bytes(8 * BS);
    let (_, r) = dev.write(0, buf_of(&data), false).await;
    r.expect("write");
    dev.flush().await.expect("flush");

    // The subsystem moves to another target (a new owner) on another
    // port; the directory says so. The command that finds the old owner
    // gone fails; the next one reconnects where the directory points.
    fx.target.shutdown(Duration::from_secs(2)).await;
    let moved = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST02", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, fx.dev.clone())).unwrap();
    moved.add_subsystem(sub).unwrap();
    // On IPv6: discovery gives a bare address and a port.
    let new_io = moved.listen("[::1]:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    directory.set_remote_subsystems(at(new_io));
    let first = read(&dev, 0, data.len()).await;
    let got = match first {
        Ok(v) => v,
        Err(_) => read(&dev, 0, data.len()).await.expect("reconnected at the new address"),
    };
    assert_eq!(got, data);
    assert_eq!(dev.addr(), new_io);

    // A namespace of another size under the same name is refused.
    moved.shutdown(Duration::from_secs(2)).await;
    let other = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST03", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, Arc::new(strata_block::MemDevice::new(BS as u32, 4096)))).unwrap();
    other.add_subsystem(sub).unwrap();
    let other_io = other.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    directory.set_remote_subsystems(at(other_io));
    for _ in 0..2 {
        match read(&dev, 0, BS).await {
            Err(BlockError::Io(e)) if e.to_string().contains("not the 2048") => return,
            other => assert!(other.is_err(), "a namespace of another size was used: {other:?}"),
        }
    }
    panic!("the size change was not reported");
}

/// Of the paths discovery lists, a remote namespace keeps the optimized
/// one (a pool volume's owner), not the first listed (a node that would
/// forward every command to the owner); with none optimized it takes the
/// first that connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_namespace_takes_the_optimized_path_of_those_discovery_lists() {
    use strata_target::{AnaState, RemoteSubsystem};
    let owner = start(2048).await;
    // A second node serving the same subsystem as a non-optimized path,
    // listed first by its own discovery.
    let path = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, owner.dev.clone())).unwrap();
    sub.set_ana_state(AnaState::NonOptimized);
    path.add_subsystem(sub.clone()).unwrap();
    let path_io = path.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    path.set_remote_subsystems(vec![RemoteSubsystem { nqn: NQN.into(), addr: owner.io, allowed_hosts: vec![] }]);

    let cfg = HostConfig::default();
    let dev = RemoteNamespace::connect_any(&[path_io], NQN, None, &cfg).await.expect("connected");
    assert_eq!(dev.addr(), owner.io, "the non-optimized path was kept");
    drop(dev);
    // The owner's path is not optimized either (a takeover under way):
    // the first that connects.
    owner.sub.set_ana_state(AnaState::Change);
    let dev = RemoteNamespace::connect_any(&[path_io], NQN, None, &cfg).await.expect("connected");
    assert_eq!(dev.addr(), path_io);
}

/// Two paths to one namespace, as a pool volume's owner (optimized) and
/// another node (non-optimized). A command rides through what a failover
/// does to the paths: the owner's path in transition (the command moves
/// to the other path), every path in transition (it waits until one
/// serves, within the failover time, and fails after it), and the owner's
/// port gone (it moves to the other path). Every byte read back is what
/// was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_namespace_fails_over_between_paths_within_its_failover_time() {
    use strata_target::{AnaState, RemoteSubsystem};
    let owner = start(2048).await;
    let other = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, owner.dev.clone())).unwrap();
    sub.set_ana_state(AnaState::NonOptimized);
    other.add_subsystem(sub.clone()).unwrap();
    let other_io = other.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.unwrap().addr;
    other.set_remote_subsystems(vec![RemoteSubsystem { nqn: NQN.into(), addr: owner.io, allowed_hosts: vec![] }]);

    let dev = RemoteNamespace::connect_any(&[other_io], NQN, None, &HostConfig::default()).await.expect("connected");
    dev.set_command_timeout(Duration::from_secs(5));
    assert_eq!(dev.addr(), owner.io);
    assert_eq!(dev.failover_timeout(), Duration::from_secs(30), "the default");
    let mut rng = Rng::new(31);
    let mut write = async |lba: u64| {
        let data = rng.bytes(2 * BS);
        let (_, r) = dev.write(lba, buf_of(&data), false).await;
        r.map(|()| data)
    };

    // The owner's path in transition: the write lands through the other.
    owner.sub.set_ana_state(AnaState::Change);
    let a = write(0).await.expect("a write while the owner's path is in transition");
    assert_eq!(dev.addr(), other_io);
    assert_eq!(read(&dev, 0, a.len()).await.expect("read"), a);

    // Every path in transition: the write waits until one serves.
    sub.set_ana_state(AnaState::Change);
    let (owner_sub, path_sub) = (owner.sub.clone(), sub.clone());
    let serve_again = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        owner_sub.set_ana_state(AnaState::Optimized);
        path_sub.set_ana_state(AnaState::NonOptimized);
    });
    let t0 = std::time::Instant::now();
    let b = write(8).await.expect("a write through a failover");
    assert!(t0.elapsed() >= Duration::from_millis(400), "served while every path was in transition");
    serve_again.await.unwrap();
    assert_eq!(read(&dev, 8, b.len()).await.expect("read"), b);
    // ... but no longer than its failover time.
    sub.set_ana_state(AnaState::Change);
    owner.sub.set_ana_state(AnaState::Change);
    dev.set_failover_timeout(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    assert!(matches!(write(16).await, Err(BlockError::Io(_))), "served while every path was in transition");
    assert!(t0.elapsed() < Duration::from_secs(5), "failed over for {:?}", t0.elapsed());

    // The owner's port gone: the write moves to the other path.
    dev.set_failover_timeout(Duration::from_secs(30));
    sub.set_ana_state(AnaState::NonOptimized);
    owner.sub.set_ana_state(AnaState::Optimized);
    let c = write(24).await.expect("a write on the owner's path");
    assert_eq!(dev.addr(), owner.io);
    owner.target.shutdown(Duration::from_secs(2)).await;
    let d = write(32).await.expect("a write after the owner's port closed");
    assert_eq!(dev.addr(), other_io);
    for (lba, data) in [(0, &a), (8, &b), (24, &c), (32, &d)] {
        assert_eq!(read(&dev, lba, data.len()).await.expect("read"), *data, "block {lba}");
    }
}
