//! The `/metrics` exposition: capacity of drives and volumes, the target's
//! connection counters, and the data-path metrics of volumes and hosts
//! (`strata_target::io_metrics`), in the Prometheus text format (0.0.4).
//! docs/operations.md ("Metrics reference") lists every family.
//!
//! The text is written by the Prometheus org's `prometheus-client` crate
//! through a [`Collector`] built per scrape from snapshots: the crate's own
//! `Histogram` takes a lock per observation, so the data path keeps its own
//! relaxed atomics (see `strata_target::io_metrics`) and only the encoding
//! is the library's. Names follow the Prometheus conventions: the library
//! appends the unit (`_bytes`, `_seconds`) and `_total` to counters.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use strata_node::cluster::ClusterNode;
use strata_node::node::Node;
use strata_node::pool_status::{FillKind, Liveness};
use strata_target::io_metrics::{ErrorCount, IoMetrics, OpSnapshot};

/// The content type of [`exposition`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A target counter or gauge as the API reports it: name, value, whether
/// it is a counter, help.
pub type TargetStat = (&'static str, u64, bool, &'static str);

/// The data-path metrics of one volume or host, read back.
#[derive(Debug)]
struct IoSeries {
    name: String,
    ops: [OpSnapshot; 4],
    errors: Vec<ErrorCount>,
    in_flight: u64,
}

impl IoSeries {
    fn of(name: String, m: &IoMetrics) -> IoSeries {
        IoSeries { name, ops: m.snapshot(), errors: m.errors(), in_flight: m.in_flight() }
    }
}

/// Everything one scrape reports, read before encoding.
#[derive(Debug, Default)]
struct Scrape {
    /// Drive path, capacity bytes, allocated bytes.
    drives: Vec<(String, u64, u64)>,
    /// Volume name, provisioned bytes, allocated bytes.
    volumes: Vec<(String, u64, u64)>,
    controllers: u64,
    target: Vec<TargetStat>,
    /// Host NQN: (controllers, connections).
    host_connections: BTreeMap<String, (u64, u64)>,
    volume_io: Vec<IoSeries>,
    host_io: Vec<IoSeries>,
    /// The pool's state, on a cluster node.
    pool: Option<Pool>,
}

/// What a cluster node reports of the pool (from its status, which reads
/// etcd).
#[derive(Debug, Default)]
struct Pool {
    /// Node name, 1 when its lease holds.
    nodes: Vec<(String, u64)>,
    /// Volume name, holders, holders in sync, health.
    volumes: Vec<(String, u64, u64, &'static str)>,
    raw_bytes: u64,
    provisioned_bytes: u64,
    allocated_bytes: u64,
    /// Seconds the status took to read (mostly etcd round trips).
    status_seconds: f64,
    /// Copies under way.
    rebuilds: Vec<Rebuild>,
}

/// The `/metrics` text of `node`; `target` is the target's counters.
pub async fn exposition(node: &Node, target: Vec<TargetStat>) -> String {
    let stats = node.store().stats();
    let mut scrape = Scrape {
        drives: stats
            .drives
            .iter()
            .map(|d| (d.path.clone(), d.capacity_bytes, d.extents_allocated * u64::from(stats.extent_size)))
            .collect(),
        target,
        ..Scrape::default()
    };
    if let Ok(vols) = node.list_volumes().await {
        scrape.volumes = vols.iter().map(|v| (v.name.clone(), v.size_bytes, v.allocated_bytes)).collect();
    }
    add_target(&mut scrape, node.target());
    encode(scrape)
}

/// The controllers, connections and data-path metrics of `target`.
fn add_target(scrape: &mut Scrape, target: &strata_target::Target) {
    scrape.controllers = target.controller_count() as u64;
    for sub in target.subsystems().iter().filter(|s| !s.is_internal()) {
        for c in sub.controllers() {
            let e = scrape.host_connections.entry(c.hostnqn().to_string()).or_default();
            e.0 += 1;
            // The admin queue and the I/O queues: one TCP connection each.
            e.1 += 1 + c.io_queue_count() as u64;
        }
    }
    let reg = target.io_metrics();
    scrape.volume_io = reg.volumes().into_iter().map(|(n, m)| IoSeries::of(n, &m)).collect();
    scrape.host_io = reg.hosts().into_iter().map(|(n, m)| IoSeries::of(n, &m)).collect();
}

/// The `/metrics` text of a cluster node: its own drives, target and
/// data path (a volume's I/O is counted at its owner, for its hosts and
/// for the other nodes' paths, so each command is counted once in the
/// cluster), and the pool as this node sees it: nodes up, every volume's
/// holders in sync and health, capacity. A status that cannot be read
/// (etcd away) leaves the pool families out of that scrape.
pub async fn cluster_exposition(cluster: &ClusterNode, target: Vec<TargetStat>) -> String {
    let mut scrape = Scrape { target, ..Scrape::default() };
    add_target(&mut scrape, cluster.target());
    let started = std::time::Instant::now();
    if let Ok(st) = cluster.status().await {
        let status_seconds = started.elapsed().as_secs_f64();
        if let Some(me) = st.nodes.iter().find(|n| n.name == st.node) {
            scrape.drives = me.drives.iter().map(|d| (d.path.clone(), d.capacity_bytes, d.allocated_bytes)).collect();
        }
        scrape.volumes = st.volumes.iter().map(|v| (v.name.clone(), v.size_bytes, v.allocated_bytes)).collect();
        scrape.pool = Some(Pool {
            nodes: st.nodes.iter().map(|n| (n.name.clone(), u64::from(n.state == Liveness::Up))).collect(),
            volumes: st
                .volumes
                .iter()
                .map(|v| (v.name.clone(), v.replicas.len() as u64, v.in_sync.len() as u64, v.state.as_str()))
                .collect(),
            rebuilds: st
                .volumes
                .iter()
                .flat_map(|v| {
                    let name_of = |id: u32| {
                        st.nodes.iter().find(|n| n.id == id).map_or_else(|| id.to_string(), |n| n.name.clone())
                    };
                    v.resync.iter().map(move |r| {
                        let kind = match r.kind {
                            FillKind::Resync => "resync",
                            FillKind::Rebuild => "rebuild",
                        };
                        Rebuild {
                            volume: v.name.clone(),
                            node: name_of(r.node),
                            kind,
                            left: r.bytes_left,
                            size: r.bytes_total,
                            rate: r.rate_bytes_per_sec,
                            eta: r.eta_secs,
                        }
                    })
                })
                .collect(),
            raw_bytes: st.totals.raw_bytes,
            provisioned_bytes: st.totals.provisioned_bytes,
            allocated_bytes: st.totals.allocated_bytes,
            status_seconds,
        });
    }
    encode(scrape)
}

/// One copy an owner runs (a resync, or a move's fill).
#[derive(Debug)]
struct Rebuild {
    volume: String,
    /// The node copied to.
    node: String,
    /// `resync` (a stale holder copied back) or `rebuild` (a move's new
    /// holder filled: a rebuild, drain or rebalance).
    kind: &'static str,
    left: u64,
    size: u64,
    rate: u64,
    eta: Option<u64>,
}

/// The pool families.
fn pool_families(enc: &mut DescriptorEncoder, p: &Pool) -> Fmt {
    let bytes = Some(&Unit::Bytes);
    gauges(
        enc,
        "strata_pool_node_up",
        "1 while the node's lease holds, else 0.",
        None,
        p.nodes.iter().map(|(n, up)| ([("node", n.as_str())], *up)),
    )?;
    gauges(
        enc,
        "strata_pool_volume_holders",
        "Nodes a pool volume's chunks are placed on (replicas or shards).",
        None,
        p.volumes.iter().map(|(v, h, _, _)| ([("volume", v.as_str())], *h)),
    )?;
    gauges(
        enc,
        "strata_pool_volume_in_sync_holders",
        "Of those, the ones in sync.",
        None,
        p.volumes.iter().map(|(v, _, s, _)| ([("volume", v.as_str())], *s)),
    )?;
    gauges(
        enc,
        "strata_pool_volume_state",
        "1 for the volume's health now (the state label), one series per volume.",
        None,
        p.volumes.iter().map(|(v, _, _, st)| ([("volume", v.as_str()), ("state", *st)], 1)),
    )?;
    let unhealthy = p.volumes.iter().filter(|(_, _, _, st)| !matches!(*st, "healthy")).count() as u64;
    single(
        enc,
        "strata_pool_volumes_not_healthy",
        "Pool volumes not healthy (degraded, resyncing, moving, down...).",
        None,
        false,
        unhealthy,
    )?;
    single(enc, "strata_pool_raw", "Raw capacity of the pool's drives.", bytes, false, p.raw_bytes)?;
    single(
        enc,
        "strata_pool_provisioned",
        "Bytes provisioned to volumes (with their protection).",
        bytes,
        false,
        p.provisioned_bytes,
    )?;
    single(enc, "strata_pool_allocated", "Bytes allocated on the pool's drives.", bytes, false, p.allocated_bytes)?;
    let labels = |r: &Rebuild| [("volume", r.volume.clone()), ("node", r.node.clone()), ("kind", r.kind.to_string())];
    gauges(
        enc,
        "strata_pool_rebuild_left",
        "Bytes a resync or fill still has to copy to a node.",
        bytes,
        p.rebuilds.iter().map(|r| (labels(r), r.left)),
    )?;
    gauges(
        enc,
        "strata_pool_rebuild_size",
        "Bytes the resync or fill had to copy when it began.",
        bytes,
        p.rebuilds.iter().map(|r| (labels(r), r.size)),
    )?;
    gauges(
        enc,
        "strata_pool_rebuild_rate",
        "The owner's copy rate, bytes per second.",
        None,
        p.rebuilds.iter().map(|r| (labels(r), r.rate)),
    )?;
    gauges(
        enc,
        "strata_pool_rebuild_eta",
        "Seconds left at that rate (absent while the rate is 0).",
        Some(&Unit::Seconds),
        p.rebuilds.iter().filter_map(|r| r.eta.map(|eta| (labels(r), eta))),
    )?;
    let m = enc.encode_descriptor(
        "strata_pool_status_read",
        "Time the scrape took to read the pool's status (etcd round trips).",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    ConstGauge::new(p.status_seconds).encode(m)
}

fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    // Writing to a String cannot fail; a Collector error leaves what was
    // written.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

type Fmt = Result<(), std::fmt::Error>;

/// One series without labels: a counter or a gauge.
fn single(enc: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, counter: bool, v: u64) -> Fmt {
    if counter {
        ConstCounter::new(v).encode(enc.encode_descriptor(name, help, unit, MetricType::Counter)?)
    } else {
        ConstGauge::new(v).encode(enc.encode_descriptor(name, help, unit, MetricType::Gauge)?)
    }
}

/// One gauge family: `(labels, value)` per series.
fn gauges<'a, L: prometheus_client::encoding::EncodeLabelSet + 'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Fmt {
    family(enc, name, help, unit, false, series)
}

/// One counter family (the encoder appends `_total`).
fn counters<'a, L: prometheus_client::encoding::EncodeLabelSet + 'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Fmt {
    family(enc, name, help, unit, true, series)
}

/// One family of counters (`counter`) or gauges.
fn family<'a, L: prometheus_client::encoding::EncodeLabelSet + 'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    counter: bool,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Fmt {
    let kind = if counter { MetricType::Counter } else { MetricType::Gauge };
    let mut m = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, v) in series {
        let e = m.encode_family(&labels)?;
        if counter { ConstCounter::new(v).encode(e)? } else { ConstGauge::new(v).encode(e)? }
    }
    Ok(())
}

/// A histogram's buckets as the encoder wants them: each bucket's own
/// count (it adds them up), not the cumulative ones.
fn own_buckets(h: &strata_metrics::HistogramSnapshot) -> Vec<(f64, u64)> {
    let mut below = 0;
    h.buckets_seconds()
        .map(|(le, c)| {
            let own = c - below;
            below = c;
            (le, own)
        })
        .collect()
}

/// The I/O families of volumes (`what` = "volume") or hosts ("host").
fn io_families(enc: &mut DescriptorEncoder, what: &'static str, all: &[IoSeries]) -> Fmt {
    let prefix = format!("strata_{what}_io");
    let per_op = |f: fn(&OpSnapshot) -> u64| {
        all.iter().flat_map(move |s| s.ops.iter().map(move |o| ([(what, s.name.as_str()), ("op", o.op.label())], f(o))))
    };
    counters(enc, &prefix, &format!("I/O commands completed per {what} and kind."), None, per_op(|o| o.commands))?;
    counters(
        enc,
        &prefix,
        &format!("Data bytes moved by successful reads and writes per {what}."),
        Some(&Unit::Bytes),
        per_op(|o| o.bytes),
    )?;
    let latency = format!("{prefix}_latency");
    let mut m = enc.encode_descriptor(
        &latency,
        &format!("I/O command latency per {what}, from decoding to completion."),
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for s in all {
        for o in &s.ops {
            let buckets = own_buckets(&o.latency);
            let labels = [(what, s.name.as_str()), ("op", o.op.label())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                o.latency.sum_seconds(),
                o.latency.count(),
                &buckets,
                None,
            )?;
        }
    }
    let errors = all.iter().flat_map(|s| {
        s.errors.iter().map(|e| {
            let status = e.code.map_or_else(|| "other".to_string(), |c| format!("{c:#05x}"));
            ([(what, s.name.clone()), ("status", status)], e.count)
        })
    });
    counters(
        enc,
        &format!("{prefix}_errors"),
        &format!("I/O commands that failed per {what}, by NVMe status (SCT << 8 | SC, hex)."),
        None,
        errors,
    )?;
    gauges(
        enc,
        &format!("{prefix}_in_flight"),
        &format!("I/O commands executing now per {what} (queue depth at the target)."),
        None,
        all.iter().map(|s| ([(what, s.name.as_str())], s.in_flight)),
    )
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Fmt {
        let bytes = Some(&Unit::Bytes);
        gauges(
            &mut enc,
            "strata_drive_capacity",
            "Bytes of drive space usable for extents.",
            bytes,
            self.drives.iter().map(|(d, c, _)| ([("drive", d.as_str())], *c)),
        )?;
        gauges(
            &mut enc,
            "strata_drive_allocated",
            "Bytes of drive space allocated to volumes.",
            bytes,
            self.drives.iter().map(|(d, _, a)| ([("drive", d.as_str())], *a)),
        )?;
        gauges(
            &mut enc,
            "strata_volume_size",
            "Provisioned size of a volume.",
            bytes,
            self.volumes.iter().map(|(v, s, _)| ([("volume", v.as_str())], *s)),
        )?;
        gauges(
            &mut enc,
            "strata_volume_allocated",
            "Backing bytes allocated to a volume.",
            bytes,
            self.volumes.iter().map(|(v, _, a)| ([("volume", v.as_str())], *a)),
        )?;
        single(&mut enc, "strata_controllers", "Live NVMe controllers.", None, false, self.controllers)?;
        for &(name, value, counter, help) in &self.target {
            // A gauge of bytes carries the unit last.
            let (name, unit) = match name.strip_suffix("_bytes_in_use") {
                Some(stem) => (format!("strata_target_{stem}_in_use"), bytes),
                None => (format!("strata_target_{name}"), None),
            };
            single(&mut enc, &name, help, unit, counter, value)?;
        }
        gauges(
            &mut enc,
            "strata_host_controllers",
            "Live NVMe controllers per host NQN.",
            None,
            self.host_connections.iter().map(|(h, (c, _))| ([("host", h.as_str())], *c)),
        )?;
        gauges(
            &mut enc,
            "strata_host_connections",
            "NVMe/TCP queue connections (admin and I/O) per host NQN.",
            None,
            self.host_connections.iter().map(|(h, (_, q))| ([("host", h.as_str())], *q)),
        )?;
        io_families(&mut enc, "volume", &self.volume_io)?;
        io_families(&mut enc, "host", &self.host_io)?;
        match &self.pool {
            Some(p) => pool_families(&mut enc, p),
            None => Ok(()),
        }
    }
}

/// `strata kv serve --metrics`: the KV store's counters per tier.
struct KvScrape {
    stats: strata_kv::Stats,
    loads: Vec<strata_kv::LoadStats>,
}

/// The `/metrics` text of a KV store: gets by where they were answered
/// (count, bytes and latency histogram per tier, misses as `tier="miss"`),
/// puts, evictions, demotions, admission, and each tier's keys, bytes
/// and capacity.
pub fn kv_exposition(store: &strata_kv::KvStore) -> String {
    let scrape = KvScrape { stats: store.stats(), loads: store.loads() };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

/// Serves `GET /metrics` with [`kv_exposition`] on `listener` until the
/// process ends (`strata kv serve --metrics ADDR`).
pub fn serve_kv_metrics(listener: tokio::net::TcpListener, store: std::sync::Arc<strata_kv::KvStore>) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            let store = store.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let store = store.clone();
                    async move {
                        let resp = if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
                            hyper::Response::builder()
                                .header("content-type", CONTENT_TYPE)
                                .body(Full::new(Bytes::from(kv_exposition(&store))))
                        } else {
                            hyper::Response::builder()
                                .status(hyper::StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::from_static(b"only GET /metrics here\n")))
                        };
                        Ok::<_, std::convert::Infallible>(
                            resp.unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new()))),
                        )
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
}

impl std::fmt::Debug for KvScrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvScrape").finish_non_exhaustive()
    }
}

impl Collector for KvScrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Fmt {
        let st = &self.stats;
        let bytes = Some(&Unit::Bytes);
        counters(
            &mut enc,
            "strata_kv_gets",
            "Gets, by the tier that answered (dram, ssd, pool, peer) or miss.",
            None,
            self.loads.iter().map(|l| ([("tier", l.source)], l.latency.count())),
        )?;
        counters(
            &mut enc,
            "strata_kv_get",
            "Bytes returned by gets, by the tier that answered.",
            bytes,
            self.loads.iter().map(|l| ([("tier", l.source)], l.bytes)),
        )?;
        let mut m = enc.encode_descriptor(
            "strata_kv_get_latency",
            "Get latency by the tier that answered, from the call to the answer (a log tier's read and promotion included).",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for l in &self.loads {
            let buckets = own_buckets(&l.latency);
            m.encode_family(&[("tier", l.source)])?.encode_histogram::<NoLabelSet>(
                l.latency.sum_seconds(),
                l.latency.count(),
                &buckets,
                None,
            )?;
        }
        for (name, help, v) in [
            ("strata_kv_puts", "Blocks stored.", st.puts),
            ("strata_kv_evicted", "Blocks evicted from DRAM.", st.evicted),
            ("strata_kv_demoted", "Blocks written to a log tier when they left DRAM.", st.demoted),
            (
                "strata_kv_not_admitted",
                "Blocks that left DRAM without being admitted to the SSD tier.",
                st.not_admitted,
            ),
            (
                "strata_kv_demote_dropped",
                "Admitted blocks dropped because demotion could not keep up.",
                st.demote_dropped,
            ),
            ("strata_kv_promoted", "Blocks copied back into DRAM from a log tier.", st.promoted),
            ("strata_kv_corrupt", "Log records that failed their checks on read.", st.corrupt),
            ("strata_kv_expired", "Blocks found expired.", st.expired),
        ] {
            single(&mut enc, name, help, None, true, v)?;
        }
        single(
            &mut enc,
            "strata_kv_demoted",
            "Bytes written to log tiers by demotion.",
            bytes,
            true,
            st.demoted_bytes,
        )?;
        gauges(
            &mut enc,
            "strata_kv_keys",
            "Blocks held, per tier.",
            None,
            [("dram", st.dram_keys), ("ssd", st.ssd_keys), ("pool", st.pool_keys)].map(|(t, v)| ([("tier", t)], v)),
        )?;
        gauges(
            &mut enc,
            "strata_kv_used",
            "Bytes held (DRAM) or live (log tiers), per tier.",
            bytes,
            [("dram", st.dram_used), ("ssd", st.ssd_live), ("pool", st.pool_live)].map(|(t, v)| ([("tier", t)], v)),
        )?;
        gauges(
            &mut enc,
            "strata_kv_capacity",
            "Capacity per tier.",
            bytes,
            [("dram", st.dram_capacity), ("ssd", st.ssd_capacity), ("pool", st.pool_capacity)]
                .map(|(t, v)| ([("tier", t)], v)),
        )?;
        single(
            &mut enc,
            "strata_kv_working_set",
            "Estimated bytes of the distinct blocks asked for (admission's sketch).",
            bytes,
            false,
            st.working_set_bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use strata_nvme::status::Status;
    use strata_target::io_metrics::IoOp;

    use super::*;

    #[test]
    fn pool_families_name_each_node_volume_and_copy() {
        let pool = Pool {
            nodes: vec![("n1".into(), 1), ("n2".into(), 0)],
            volumes: vec![("v".into(), 3, 2, "degraded"), ("w".into(), 3, 3, "healthy")],
            raw_bytes: 300,
            provisioned_bytes: 200,
            allocated_bytes: 100,
            status_seconds: 0.25,
            rebuilds: vec![Rebuild {
                volume: "v".into(),
                node: "n3".into(),
                kind: "rebuild",
                left: 1 << 20,
                size: 4 << 20,
                rate: 1 << 19,
                eta: Some(2),
            }],
        };
        let text = encode(Scrape { pool: Some(pool), ..Scrape::default() });
        for line in [
            "strata_pool_node_up{node=\"n2\"} 0\n",
            "strata_pool_volume_in_sync_holders{volume=\"v\"} 2\n",
            "strata_pool_volume_state{volume=\"v\",state=\"degraded\"} 1\n",
            "strata_pool_volumes_not_healthy 1\n",
            "strata_pool_raw_bytes 300\n",
            "strata_pool_rebuild_left_bytes{volume=\"v\",node=\"n3\",kind=\"rebuild\"} 1048576\n",
            "strata_pool_rebuild_size_bytes{volume=\"v\",node=\"n3\",kind=\"rebuild\"} 4194304\n",
            "strata_pool_rebuild_eta_seconds{volume=\"v\",node=\"n3\",kind=\"rebuild\"} 2\n",
            "strata_pool_status_read_seconds 0.25\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn io_families_are_conventional_and_cumulative() {
        let m = IoMetrics::default();
        m.record(IoOp::Write, 4096, Duration::from_micros(15), Status::SUCCESS);
        m.record(IoOp::Write, 4096, Duration::from_micros(700), Status::SUCCESS);
        m.record(IoOp::Read, 8192, Duration::from_micros(5), Status::LBA_OUT_OF_RANGE.dnr());
        let scrape = Scrape {
            volume_io: vec![IoSeries::of("v1".into(), &m)],
            target: vec![("buffer_bytes_in_use", 7, false, "b"), ("panics", 0, true, "p")],
            ..Scrape::default()
        };
        let text = encode(scrape);
        for line in [
            "strata_volume_io_total{volume=\"v1\",op=\"write\"} 2\n",
            "strata_volume_io_bytes_total{volume=\"v1\",op=\"write\"} 8192\n",
            "strata_volume_io_bytes_total{volume=\"v1\",op=\"read\"} 0\n",
            "strata_volume_io_latency_seconds_bucket{volume=\"v1\",op=\"write\",le=\"1e-05\"} 0\n",
            "strata_volume_io_latency_seconds_bucket{volume=\"v1\",op=\"write\",le=\"2e-05\"} 1\n",
            "strata_volume_io_latency_seconds_bucket{volume=\"v1\",op=\"write\",le=\"0.001\"} 2\n",
            "strata_volume_io_latency_seconds_bucket{volume=\"v1\",op=\"write\",le=\"+Inf\"} 2\n",
            "strata_volume_io_latency_seconds_count{volume=\"v1\",op=\"write\"} 2\n",
            "strata_volume_io_errors_total{volume=\"v1\",status=\"0x080\"} 1\n",
            "strata_volume_io_in_flight{volume=\"v1\"} 0\n",
            "# TYPE strata_target_buffer_in_use_bytes gauge\n",
            "strata_target_panics_total 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }
}
