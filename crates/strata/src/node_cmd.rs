//! `strata node`: runs one storage node of a cluster (see `cluster`).
//!
//! ```text
//! strata node --name n1 --etcd http://10.0.0.1:2379 --label rack=r1 \
//!     --fabric 10.0.1.1:4520 --listen 10.0.1.1:4420 --drive /dev/nvme1n1
//! ```
//!
//! It takes the `serve` options for the host side (listeners, HTTP API,
//! drives, data dir) and these for the cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;
use strata_meta::etcd::{EtcdClient, EtcdConfig};
use strata_pool::fabric::fabric_nqn;
use strata_pool::placement::{FailureDomain, Node};
use strata_pool::registry::{NodeRecord, join_map, node_id, register};
use strata_target::{PortRole, Subsystem, Target};

use crate::api::{CreateBody, body_json, error, node_error, reply};
use crate::cluster::ClusterNode;
use crate::config::{ServeArgs, ServeConfig};

/// Options of `strata node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// The node's name, unique in the cluster. Default: the host name.
    #[arg(long)]
    pub name: Option<String>,
    /// etcd endpoints, comma separated.
    #[arg(long, value_name = "URL[,URL...]", default_value = "http://127.0.0.1:2379")]
    pub etcd: String,
    /// Key prefix of this cluster in etcd.
    #[arg(long, default_value = "/strata/")]
    pub etcd_prefix: String,
    /// A failure-domain label such as rack=r1; repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The failure domain copies are spread over (a label key, or "node").
    /// Used when this node creates the cluster's map.
    #[arg(long, default_value = "rack")]
    pub failure_domain: String,
    /// The internal fabric listener other nodes reach.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:4520")]
    pub fabric: String,
    /// Seconds of the node's lease: how long after it dies its volumes
    /// move to other nodes.
    #[arg(long, default_value_t = 10)]
    pub lease_ttl: u64,
    /// Host-side options, as for `strata serve`.
    #[command(flatten)]
    pub serve: ServeArgs,
}

fn parse_labels(list: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    list.iter()
        .map(|l| {
            let (k, v) = l.split_once('=').ok_or_else(|| anyhow::anyhow!("--label {l:?}: expected KEY=VALUE"))?;
            if k.is_empty() || v.is_empty() {
                anyhow::bail!("--label {l:?}: key and value must not be empty");
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "node".into())
}

/// Runs the node until SIGTERM or SIGINT.
///
/// # Errors
///
/// Bad options, unreachable etcd, drives or listeners that cannot be
/// opened.
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let labels = parse_labels(&args.labels)?;
    let name = args.name.clone().unwrap_or_else(host_name);
    strata_meta::validate_volume_name(&name).map_err(|e| anyhow::anyhow!("--name {name:?}: {e}"))?;
    let domain = FailureDomain::parse(&args.failure_domain).map_err(|e| anyhow::anyhow!("--failure-domain: {e}"))?;
    let fabric_addr: SocketAddr = args.fabric.parse().with_context(|| format!("--fabric {:?}", args.fabric))?;
    let mut serve = args.serve;
    serve.default_volume_size = Some("0".into());
    let cfg = ServeConfig::load(&serve)?;
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("cannot create data dir {}", cfg.data_dir.display()))?;

    let etcd = EtcdClient::new(EtcdConfig::from_urls(&args.etcd).map_err(|e| anyhow::anyhow!("--etcd: {e}"))?);
    let prefix = args.etcd_prefix;
    let meta =
        strata_meta::EtcdMetaStore::open(etcd.clone(), &prefix).await.context("cannot open the metadata in etcd")?;
    let id = node_id(&etcd, &prefix, &name).await.context("cannot get the node's id")?;
    let store = crate::node::open_store(&cfg, crate::node::drive_specs(&cfg)?)?;
    let capacity = store.stats().capacity_bytes;

    let target = Target::new(cfg.target.clone());
    // Only the cluster's nodes may reach the replicas: this one until the
    // first reconcile lists them all (never any host).
    let fabric =
        Subsystem::internal(fabric_nqn(&name), format!("STRATAFAB{:011}", id.0), vec![crate::cluster::node_nqn(&name)]);
    target.add_subsystem(fabric.clone())?;
    let fabric_port = target.listen(fabric_addr, PortRole::Fabric).await?;
    for &a in &cfg.listen {
        target.listen(a, PortRole::Io).await?;
    }
    for &a in &cfg.discovery {
        target.listen(a, PortRole::Discovery).await?;
    }

    let mut node = Node::new(id.0, name.clone(), capacity);
    node.labels = labels.clone();
    let map = join_map(&etcd, &prefix, node, domain).await.context("cannot join the placement map")?;
    let lease = etcd.lease_grant(Duration::from_secs(args.lease_ttl.max(2))).await.context("cannot get a lease")?;
    let mut incarnation = [0u8; 8];
    getrandom::fill(&mut incarnation).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let me = NodeRecord {
        id,
        name: name.clone(),
        fabric: fabric_port.addr,
        listen: cfg.listen[0],
        labels,
        capacity_bytes: capacity,
        allocated_bytes: 0,
        incarnation: u64::from_le_bytes(incarnation),
        held: Vec::new(),
        resyncing: Vec::new(),
    };
    register(&etcd, &prefix, &me, lease.id).await?;
    let keeper = etcd.keep_alive(lease);
    let cluster = ClusterNode::new(crate::cluster::ClusterParts {
        me,
        prefix,
        etcd,
        meta: Arc::new(meta),
        store: store.clone(),
        target: target.clone(),
        fabric,
        lease: keeper,
    });
    tokio::spawn(cluster.clone().run());
    let http = crate::api::serve_http(cfg.http, {
        let cluster = cluster.clone();
        move |req| {
            let cluster = cluster.clone();
            async move { handle(&cluster, req).await }
        }
    })
    .await?;
    println!(
        "strata {} node {name} (id {}) in a cluster of {} nodes; fabric {}; API http://{http}/api/v1/pool",
        env!("CARGO_PKG_VERSION"),
        id.0,
        map.nodes().len(),
        fabric_port.addr
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
    target.shutdown(Duration::from_secs(5)).await;
    store.flush_all().await.context("flush at shutdown failed")?;
    Ok(())
}

async fn handle(cluster: &ClusterNode, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (req.method().clone(), segments.as_slice()) {
        (Method::GET, ["api", "v1", "pool"]) => match cluster.status().await {
            Ok(v) => reply(StatusCode::OK, v),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        },
        (Method::GET, ["api", "v1", "volumes"]) => match cluster.status().await {
            Ok(v) => reply(StatusCode::OK, v["volumes"].clone()),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        },
        (Method::POST, ["api", "v1", "volumes"]) => {
            let body: CreateBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let (nv, protect) = match body.into_request() {
                Ok(r) => r,
                Err(e) => return node_error(e),
            };
            match cluster.create_volume(nv, protect.as_deref().unwrap_or("rep:1")).await {
                Ok(v) => reply(StatusCode::CREATED, v),
                Err(e) => node_error(e),
            }
        }
        _ => error(StatusCode::NOT_FOUND, json!("no such endpoint")),
    }
}
