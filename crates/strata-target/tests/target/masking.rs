//! Namespace masking: a namespace masked to some hosts does not exist for
//! the others (active list, Identify, I/O), and a host whose view changes
//! is told (Namespace Attribute Changed notice, changed-namespace log).

use std::sync::Arc;
use std::time::Duration;

use strata_block::MemDevice;
use strata_host::{Controller, HostConfig};
use strata_nvme::command::feature;
use strata_nvme::status::Status;
use strata_target::{Namespace, NamespaceIds};

use crate::common::raw::{read_sqe, write_sqe};
use crate::common::{BS, NQN, start};

const A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a";
const B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-00000000000b";

async fn as_host(io: std::net::SocketAddr, nqn: &str) -> Controller {
    let cfg = HostConfig { hostnqn: nqn.into(), ..HostConfig::default() };
    Controller::connect(io, NQN, &cfg).await.expect("connect")
}

/// The status of a command sent as it is (namespace 2).
async fn raw_status(
    c: &Controller,
    mut sqe: strata_nvme::command::Sqe,
    data: Option<bytes::Bytes>,
    read: usize,
) -> Status {
    sqe.bytes_mut()[4..8].copy_from_slice(&2u32.to_le_bytes());
    c.io_queue(0).unwrap().io_command(sqe, data, read).await.unwrap().0.status
}

/// The changed-namespace log's NSIDs (read clears it).
async fn changed(c: &Controller) -> Vec<u32> {
    let log = c.get_log_page(0x04, u32::MAX, 0, 4096, false).await.unwrap();
    log.chunks(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).take_while(|&n| n != 0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_namespace_is_invisible_to_other_hosts_until_unmasked() {
    let fx = start(16).await;
    // Masked before it is added: no host but A ever sees it unmasked.
    fx.sub.set_namespace_hosts(2, vec![A.into()]);
    let ids = NamespaceIds { nguid: [2; 16], uuid: [3; 16], eui64: [0; 8] };
    fx.sub.add_namespace(Namespace::new(2, ids, Arc::new(MemDevice::new(BS as u32, 16)))).unwrap();
    let (a, b) = (as_host(fx.io, A).await, as_host(fx.io, B).await);

    assert_eq!(a.active_namespaces().await.unwrap(), vec![1, 2]);
    assert_eq!(b.active_namespaces().await.unwrap(), vec![1]);
    a.write(2, 0, vec![7u8; BS], false).await.unwrap();
    // The host library refuses an inactive namespace itself; the target
    // must too, for a host that sends the commands anyway.
    assert!(matches!(b.read(2, 0, 1).await, Err(strata_host::HostError::UnknownNamespace(2))));
    assert_eq!(raw_status(&b, read_sqe(0, 0, 1), None, BS).await, Status::INVALID_NS.dnr());
    let data = bytes::Bytes::from(vec![9u8; BS]);
    assert_eq!(raw_status(&b, write_sqe(0, 0, 1), Some(data), 0).await, Status::INVALID_NS.dnr());
    assert_eq!(b.identify_namespace(2).await.unwrap().nsze, 0, "an inactive NSID's Identify is zeroes");
    assert_eq!(a.read(2, 0, 1).await.unwrap()[..], vec![7u8; BS][..], "B's refused write changed nothing");

    // Unmasking for B: B is told, and sees it; A's view did not change.
    b.set_features(feature::ASYNC_EVENT_CONFIG, 1 << 8).await.unwrap();
    let aer = b.async_event_request().await.unwrap();
    b.keep_alive().await.unwrap(); // the AER is parked once this returns
    fx.sub.set_namespace_hosts(2, vec![A.into(), B.into()]);
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x0004_0002, "Notice, Namespace Attribute Changed, log page 04h");
    assert_eq!(changed(&b).await, vec![2]);
    assert_eq!(changed(&a).await, Vec::<u32>::new(), "A saw no change");
    assert_eq!(b.active_namespaces().await.unwrap(), vec![1, 2]);
    assert_eq!(b.read(2, 0, 1).await.unwrap()[..], vec![7u8; BS][..]);

    // Masked again: gone for B, with a notice.
    let aer = b.async_event_request().await.unwrap();
    b.keep_alive().await.unwrap();
    fx.sub.set_namespace_hosts(2, vec![A.into()]);
    tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(changed(&b).await, vec![2]);
    assert_eq!(raw_status(&b, read_sqe(0, 0, 1), None, BS).await, Status::INVALID_NS.dnr());
    // An empty list lifts the mask.
    fx.sub.set_namespace_hosts(2, vec![]);
    assert_eq!(b.active_namespaces().await.unwrap(), vec![1, 2]);
}
