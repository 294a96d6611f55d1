//! The limit server must be a valid NVMe/TCP peer for strata's initiator,
//! or the benchmark figures taken against it mean nothing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_host::{Controller, HostConfig};

#[tokio::test]
async fn strata_host_connects_reads_and_writes() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_transport-limit"))
        .args([addr.to_string(), "64".into()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "limit server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    for flow_disabled in [false, true] {
        let cfg = HostConfig { io_queues: 2, disable_sq_flow_control: flow_disabled, ..HostConfig::default() };
        let ctrl = Controller::connect(addr, "nqn.test:limit", &cfg).await.unwrap();
        assert_eq!(ctrl.identify_namespace(1).await.unwrap().nsze, 64 * 256);
        let data = ctrl.read(1, 10, 32).await.unwrap();
        assert_eq!(data.len(), 32 * 4096);
        assert!(data.iter().all(|&b| b == 0));
        ctrl.write(1, 0, vec![1u8; 4096], false).await.unwrap();
        ctrl.write(1, 0, vec![1u8; 256 * 1024], false).await.unwrap();
        assert!(ctrl.read(1, 64 * 256, 1).await.is_err(), "reads past the end are refused");
    }
    let _ = child.kill();
    let _ = child.wait();
}
