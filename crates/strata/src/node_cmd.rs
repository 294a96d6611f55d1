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
use std::time::Duration;

use anyhow::Context;
use strata_meta::etcd::{EtcdConfig, EtcdTls};
use strata_node::cluster::start::{NodeStart, start};
use strata_pool::placement::FailureDomain;

use crate::config::{self, NodeFile, ServeArgs};

/// Options of `strata node`; each may also be set in the `[node]` table
/// of the `--config` file (the command line wins).
#[derive(Debug, Default, clap::Args)]
pub struct NodeArgs {
    /// The node's name, unique in the cluster. Default: the host name.
    #[arg(long)]
    pub name: Option<String>,
    /// etcd endpoints, comma separated. Default: http://127.0.0.1:2379.
    #[arg(long, value_name = "URL[,URL...]")]
    pub etcd: Option<String>,
    /// Key prefix of this cluster in etcd. Default: /strata/.
    #[arg(long)]
    pub etcd_prefix: Option<String>,
    /// CA certificate (PEM) that signs etcd's certificates, for https://
    /// endpoints. Default: the system's trust store.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca: Option<std::path::PathBuf>,
    /// This node's client certificate (PEM), for an etcd run with
    /// --client-cert-auth.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    pub etcd_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    pub etcd_key: Option<std::path::PathBuf>,
    /// A failure-domain label such as rack=r1; repeatable (added over the
    /// file's labels).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The failure domain copies are spread over (a label key, or "node").
    /// Used when this node creates the cluster's map (later: strata pool
    /// set --failure-domain). Default: rack.
    #[arg(long)]
    pub failure_domain: Option<String>,
    /// The internal fabric listener other nodes reach. Default:
    /// 127.0.0.1:4520.
    #[arg(long, value_name = "ADDR:PORT")]
    pub fabric: Option<String>,
    /// Seconds of the node's lease: how long after it dies its volumes
    /// move to other nodes. Default: 10.
    #[arg(long)]
    pub lease_ttl: Option<u64>,
    /// Accept labels that differ from those the placement map holds for
    /// this node (it moves to another failure domain, and data moves with
    /// it). Without it such a start is refused.
    #[arg(long)]
    pub relabel: bool,
    /// Host-side options, as for `strata serve`.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// `strata node`'s settings: the command line over the `[node]` table over
/// the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// The node's name.
    pub name: String,
    /// etcd endpoints, comma separated.
    pub etcd: String,
    /// Key prefix in etcd.
    pub etcd_prefix: String,
    /// TLS to etcd, when a CA or a client certificate is given.
    pub etcd_tls: Option<EtcdTls>,
    /// Failure-domain labels.
    pub labels: BTreeMap<String, String>,
    /// The failure domain of copies.
    pub failure_domain: String,
    /// The fabric listener.
    pub fabric: SocketAddr,
    /// Lease TTL, seconds (at least 2).
    pub lease_ttl: u64,
}

impl NodeSettings {
    /// Merges `args` over `file` over the defaults.
    ///
    /// # Errors
    ///
    /// A message naming the bad option or key.
    pub fn resolve(args: &NodeArgs, file: NodeFile) -> anyhow::Result<NodeSettings> {
        let mut labels = file.labels.unwrap_or_default();
        labels.extend(parse_labels(&args.labels)?);
        if let Some((k, _)) = labels.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            anyhow::bail!("label {k:?}: key and value must not be empty");
        }
        let name = args.name.clone().or(file.name).unwrap_or_else(host_name);
        strata_meta::validate_volume_name(&name).map_err(|e| anyhow::anyhow!("--name {name:?}: {e}"))?;
        let fabric = args.fabric.clone().or(file.fabric).unwrap_or_else(|| "127.0.0.1:4520".into());
        let fabric = fabric.parse().with_context(|| format!("--fabric {fabric:?}: expected ADDR:PORT"))?;
        let lease_ttl = args.lease_ttl.or(file.lease_ttl).unwrap_or(10);
        if !(2..=3600).contains(&lease_ttl) {
            anyhow::bail!("--lease-ttl {lease_ttl}: must be between 2 and 3600 seconds");
        }
        Ok(NodeSettings {
            name,
            etcd: args
                .etcd
                .clone()
                .or(file.etcd.map(|l| l.join(",")))
                .unwrap_or_else(|| "http://127.0.0.1:2379".into()),
            etcd_prefix: args.etcd_prefix.clone().or(file.etcd_prefix).unwrap_or_else(|| "/strata/".into()),
            etcd_tls: {
                let tls = EtcdTls {
                    ca: args.etcd_ca.clone().or(file.etcd_ca),
                    cert: args.etcd_cert.clone().or(file.etcd_cert),
                    key: args.etcd_key.clone().or(file.etcd_key),
                };
                (tls != EtcdTls::default()).then_some(tls)
            },
            labels,
            failure_domain: args.failure_domain.clone().or(file.failure_domain).unwrap_or_else(|| "rack".into()),
            fabric,
            lease_ttl,
        })
    }
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
    let settings = NodeSettings::resolve(&args, crate::config::node_file(args.serve.config.as_deref())?)?;
    let pool = strata_node::cluster::SettingsPatch::from_file(crate::config::pool_file(args.serve.config.as_deref())?)?;
    let failure_domain =
        FailureDomain::parse(&settings.failure_domain).map_err(|e| anyhow::anyhow!("--failure-domain: {e}"))?;
    let mut serve = args.serve;
    serve.default_volume_size = Some("0".into());
    let name = settings.name.clone();
    let serve_cfg = config::load(&serve)?;
    let api_tls = crate::api::tls_of(&serve_cfg)?;
    crate::api::check_exposure(serve_cfg.http, serve_cfg.allow_remote_api, api_tls.is_some())?;
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    let data_dir = serve_cfg.data_dir.clone();
    let node = start(NodeStart {
        name: settings.name,
        etcd: {
            let c = EtcdConfig::from_urls(&settings.etcd).map_err(|e| anyhow::anyhow!("--etcd: {e}"))?;
            let c = match settings.etcd_tls.clone() {
                Some(t) => c.with_tls(t),
                None => c,
            };
            // A TLS file that cannot be used stops the node now, saying which.
            strata_meta::etcd::EtcdClient::checked(c.clone())
                .map_err(|e| anyhow::anyhow!("--etcd-ca/--etcd-cert/--etcd-key: {e}"))?;
            c
        },
        prefix: settings.etcd_prefix,
        labels: settings.labels,
        failure_domain,
        failure_domain_asked: args.failure_domain.is_some(),
        fabric: settings.fabric,
        lease_ttl: Duration::from_secs(settings.lease_ttl),
        relabel: args.relabel,
        serve: serve_cfg,
        pool,
    })
    .await?;
    let cluster = node.cluster.clone();
    // The hosts' keys and the audit trail are in place before the node
    // serves any volume (the reconcile loop adds them): no window in which
    // a host with a key gets in without proving it, or goes unrecorded.
    let hosts = std::sync::Arc::new(strata_node::hosts::Hosts::new(cluster.meta(), cluster.target().clone()));
    let mut tries = 0;
    while let Err(e) = hosts.apply().await {
        tries += 1;
        anyhow::ensure!(tries < 10, "cannot read the hosts' keys from etcd: {e}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    hosts.spawn_refresh();
    let events = std::sync::Arc::new(strata_events::EventLog::default());
    let audit = strata_node::audit::open_audit(
        &data_dir,
        cluster.meta(),
        &name,
        cluster.target(),
        Some(crate::events_watch::access_sink(events.clone())),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the audit log in {}: {e}", data_dir.display()))?;
    let mut running = tokio::spawn(cluster.clone().run());
    let tokens = std::sync::Arc::new(strata_node::tokens::Tokens::new(cluster.meta()));
    let token_file = tokens.ensure_local(&data_dir, &format!("local admin (node {name})")).await?;
    let http = crate::api::serve(
        crate::api::Backend::Cluster(cluster.clone()),
        tokens,
        hosts,
        audit,
        events.clone(),
        node.http,
        api_tls,
    )
    .await?;
    crate::events_watch::spawn_pool_watch(cluster.clone(), events);
    println!(
        "strata {} node {name} (id {}) in a cluster of {} nodes; fabric {}; API {scheme}://{http}/api/v1/pool \
         (admin token: {})",
        env!("CARGO_PKG_VERSION"),
        node.id.0,
        node.map_nodes,
        node.fabric,
        token_file.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stopped = tokio::select! {
        _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); None }
        _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); None }
        // The node may not go on as it is (it was removed, another
        // process runs it, etcd holds another cluster now).
        e = &mut running => Some(e.unwrap_or_else(|e| anyhow::anyhow!("the node's task failed: {e}"))),
    };
    node.stop().await?;
    match stopped {
        Some(e) => Err(e.context(format!("node {name} stopped"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> NodeFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, text).unwrap();
        crate::config::node_file(Some(&path)).unwrap()
    }

    #[test]
    fn the_command_line_wins_over_the_node_table_which_wins_over_defaults() {
        let f = file(
            "data_dir = \"/srv/strata\"\n[node]\nname = \"n7\"\netcd = [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\"]\n\
             labels = { rack = \"r1\", pod = \"p1\" }\nfabric = \"10.0.1.7:4520\"\nlease_ttl = 5\n",
        );
        let from_file = NodeSettings::resolve(&NodeArgs::default(), f.clone()).unwrap();
        assert_eq!(from_file.name, "n7");
        assert_eq!(from_file.etcd, "http://10.0.0.1:2379,http://10.0.0.2:2379");
        assert_eq!(from_file.labels.get("pod").map(String::as_str), Some("p1"));
        assert_eq!(from_file.fabric, "10.0.1.7:4520".parse().unwrap());
        assert_eq!((from_file.lease_ttl, from_file.failure_domain.as_str()), (5, "rack"));
        assert_eq!(from_file.etcd_prefix, "/strata/");
        let args = NodeArgs {
            name: Some("n8".into()),
            labels: vec!["rack=r2".into()],
            lease_ttl: Some(3),
            ..NodeArgs::default()
        };
        let both = NodeSettings::resolve(&args, f).unwrap();
        assert_eq!((both.name.as_str(), both.lease_ttl), ("n8", 3));
        assert_eq!(both.labels.get("rack").map(String::as_str), Some("r2"), "a label given twice: the flag wins");
        assert_eq!(both.labels.get("pod").map(String::as_str), Some("p1"), "the file's other labels stay");
    }

    /// The settings a `[pool]` table gives a new pool, or its error.
    fn pool(text: &str) -> Result<strata_pool::registry::PoolSettings, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, text).unwrap();
        let f = crate::config::pool_file(Some(&path)).map_err(|e| format!("{e:#}"))?;
        let patch = strata_node::cluster::SettingsPatch::from_file(f).map_err(|e| e.to_string())?;
        let mut s = strata_pool::registry::PoolSettings::default();
        patch.apply(&mut s).map_err(|e| e.to_string())?;
        Ok(s)
    }

    #[test]
    fn the_pool_table_gives_a_new_pool_its_settings_and_bad_ones_are_named() {
        let s = pool(
            "[pool]\nrebuild_grace = \"10m\"\nrebuild_mbps = 80\nfill_warn = [90, 70]\nbalance_for = \"ec:4+2\"\n",
        )
        .unwrap();
        assert_eq!((s.rebuild_grace_secs, s.rebuild_mbps), (600, 80));
        assert_eq!(s.fill_warn_percent, vec![70, 90]);
        assert_eq!(s.balance_for.to_string(), "ec:4+2");
        assert_eq!(pool("data_dir = \"/x\"\n").unwrap(), strata_pool::registry::PoolSettings::default());
        assert!(pool("[pool]\nrebuild_grace = \"soon\"\n").unwrap_err().contains("rebuild_grace"));
        assert!(pool("[pool]\nbalance_for = \"rep:0\"\n").unwrap_err().contains("balance_for"));
        assert!(pool("[pool]\nfill_warn = [0]\n").unwrap_err().contains("fill warning"));
        assert!(pool("[pool]\nrebuild_gracetime = 3\n").unwrap_err().contains("rebuild_gracetime"));
    }

    #[test]
    fn bad_node_settings_are_named() {
        let bad = |args: NodeArgs, f: NodeFile| format!("{:#}", NodeSettings::resolve(&args, f).unwrap_err());
        assert!(
            bad(NodeArgs { labels: vec!["rack".into()], ..NodeArgs::default() }, NodeFile::default())
                .contains("--label")
        );
        assert!(bad(NodeArgs::default(), file("[node]\nfabric = \"nowhere\"\n")).contains("--fabric"));
        assert!(
            bad(NodeArgs { lease_ttl: Some(0), ..NodeArgs::default() }, NodeFile::default()).contains("--lease-ttl")
        );
        assert!(
            bad(NodeArgs { name: Some("a b".into()), ..NodeArgs::default() }, NodeFile::default()).contains("--name")
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, "[node]\nlabel = \"rack=r1\"\n").unwrap();
        let e = format!("{:#}", crate::config::node_file(Some(&path)).unwrap_err());
        assert!(e.contains("label"), "{e}");
    }
}
