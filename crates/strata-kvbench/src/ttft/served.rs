//! The KV store under test, in this process: its server on a runtime of
//! its own, one client for lookups and stores, and the lanes a load
//! fetches over. A restart flushes DRAM to the SSD tier, drops the
//! runtime and reopens the tiers, as a new `strata kv serve` process
//! would, so that what follows reads the SSD tier cold.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use strata_block::BlockDevice;
use strata_kv::client::Client;
use strata_kv::{Admit, KvConfig, KvStore};
use strata_prefill::KvCache;

/// The store and its server on a runtime of their own, and a client.
pub(super) struct Served {
    rt: tokio::runtime::Runtime,
    pub(super) store: Arc<KvStore>,
    client: Client,
    /// The connections a load fetches over at once (`--load-lanes`):
    /// lane `l` of `n` fetches batches `l`, `l + n`, ..., so that round
    /// trips overlap with each other and with copying the blocks that
    /// came back into the cache.
    lanes: Vec<Arc<tokio::sync::Mutex<Client>>>,
}

/// Blocks per `MGET` (and `MSET`).
const BATCH_BLOCKS: usize = 16;

/// What a [`Served`] store is opened on, kept so that a restart reopens
/// the same tiers (or, with `ssd: None`, the pool alone).
#[derive(Clone)]
pub(super) struct StoreSpec {
    pub(super) dram: u64,
    pub(super) ssd: Option<(PathBuf, Option<u64>)>,
    pub(super) pool: Option<crate::PoolSpec>,
    pub(super) allow_buffered: bool,
    pub(super) load_lanes: usize,
}

impl Served {
    pub(super) fn start(spec: &StoreSpec, wipe: bool) -> anyhow::Result<Served> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (store, client, lanes) = rt.block_on(async {
            let ssd: Option<Arc<dyn BlockDevice>> = match &spec.ssd {
                None => None,
                Some((path, size)) => Some(crate::tiers::open_ssd(path, *size, spec.allow_buffered)?),
            };
            let pool: Option<Arc<dyn BlockDevice>> = match &spec.pool {
                None => None,
                Some(t) => Some(crate::tiers::connect_pool(t, std::time::Duration::from_secs(30)).await?),
            };
            let seg = strata_kv::store::segment_size_for(ssd.as_ref().map(|d| d.geometry().size_bytes()).unwrap_or(0));
            let cfg = KvConfig { dram_bytes: spec.dram, admit: Admit::All, segment_bytes: seg };
            let tiers = strata_kv::Tiers { ssd, pool, peers: Vec::new() };
            let store = KvStore::open_tiers(cfg, tiers, Box::new(strata_kv::store::unix_ms))
                .await
                .context("opening the KV store")?;
            if wipe {
                store.clear();
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let cfg = strata_kv::server::ServerConfig::default();
            tokio::spawn(strata_kv::server::serve(store.clone(), listener, cfg, std::future::pending()));
            let client = Client::connect(addr).await.context("connecting to the KV server")?;
            let mut lanes = Vec::new();
            for _ in 0..spec.load_lanes {
                let c = Client::connect(addr).await.context("connecting to the KV server")?;
                lanes.push(Arc::new(tokio::sync::Mutex::new(c)));
            }
            anyhow::Ok((store, client, lanes))
        })?;
        Ok(Served { rt, store, client, lanes })
    }

    /// Writes every block to the SSD tier and stops, as `strata kv serve`
    /// does on SIGTERM; then starts again on the same file.
    pub(super) fn restart(self, spec: &StoreSpec) -> anyhow::Result<Served> {
        let Served { rt, store, client, lanes } = self;
        drop((client, lanes));
        rt.block_on(store.flush(true)).context("flushing the store before the restart")?;
        drop(store);
        rt.shutdown_timeout(Duration::from_secs(5));
        Served::start(spec, false)
    }

    pub(super) fn put_blocks(
        &mut self,
        keys: &[String],
        cache: &KvCache,
        block_tokens: usize,
        first: usize,
    ) -> anyhow::Result<()> {
        for (batch, names) in keys.chunks(BATCH_BLOCKS).enumerate() {
            let pairs: Vec<(&str, Vec<u8>)> = names
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    (k.as_str(), cache.to_block((first + batch * BATCH_BLOCKS + i) * block_tokens, block_tokens))
                })
                .collect();
            self.rt.block_on(self.client.mset(&pairs)).context("storing KV blocks")?;
        }
        Ok(())
    }

    /// Appends the blocks of `keys` to `cache`; returns the bytes moved.
    /// The batches of `MGET`s go out over every lane at once and are
    /// copied in order as they come back.
    pub(super) fn get_blocks(
        &mut self,
        keys: &[String],
        cache: &mut KvCache,
        block_tokens: usize,
    ) -> anyhow::Result<u64> {
        let batches: Vec<&[String]> = keys.chunks(BATCH_BLOCKS).collect();
        let mut lanes = Vec::new();
        for (l, client) in self.lanes.iter().enumerate() {
            // Two batches ahead per lane at most: memory stays bounded.
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let mine: Vec<Vec<String>> = batches.iter().skip(l).step_by(self.lanes.len()).map(|b| b.to_vec()).collect();
            let client = client.clone();
            self.rt.spawn(async move {
                let mut c = client.lock().await;
                for names in mine {
                    let r = c.mget(&names).await;
                    let failed = r.is_err();
                    // A receiver gone (the load failed) or an error ends the lane.
                    if tx.send(r).await.is_err() || failed {
                        return;
                    }
                }
            });
            lanes.push(rx);
        }
        let mut bytes = 0;
        for i in 0..batches.len() {
            let values = self
                .rt
                .block_on(lanes[i % self.lanes.len()].recv())
                .context("a load connection stopped")?
                .context("loading KV blocks")?;
            for v in values {
                let v = v.context("a block found by the lookup was gone when loaded")?;
                cache.load_block(block_tokens, &v)?;
                bytes += v.len() as u64;
            }
        }
        Ok(bytes)
    }

    pub(super) fn lookup(&mut self, keys: &[String]) -> anyhow::Result<usize> {
        Ok(self.rt.block_on(self.client.lookup(keys))?)
    }
}
