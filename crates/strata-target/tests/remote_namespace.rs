//! `strata_host::RemoteNamespace`: a remote namespace behind the
//! `BlockDevice` trait. Large I/O is split into commands and comes back
//! intact, bad requests are refused before anything is sent, and a lost
//! target fails commands promptly and is reconnected by the next one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{BS, IDS, NQN, Rng, start};
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

    // The target goes away: commands fail (no hang), the connection is
    // retired, and once a target serves the namespace again at the same
    // address the next command reconnects and sees the data.
    fx.target.shutdown(Duration::from_secs(2)).await;
    let t0 = std::time::Instant::now();
    assert!(matches!(read(&dev, 6, BS).await, Err(BlockError::Io(_))));
    assert!(matches!(read(&dev, 6, BS).await, Err(BlockError::Io(_))), "no target: reconnecting fails too");
    assert!(t0.elapsed() < Duration::from_secs(15));
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATAITEST01", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, fx.dev.clone())).unwrap();
    target.add_subsystem(sub).unwrap();
    target.listen(fx.io, PortRole::Io).await.expect("the same port again");
    assert_eq!(read(&dev, 6, BS).await.expect("reconnected"), data[BS..2 * BS]);
    let _keep: Arc<RemoteNamespace> = dev;
}
