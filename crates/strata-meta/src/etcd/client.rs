//! [`EtcdClient`]: the key-value, transaction, lease and watch calls of
//! etcd's v3 API, over its JSON gateway.
//!
//! Every call has a deadline ([`EtcdConfig::request_timeout`]) and fails
//! over between endpoints as [`super::http`] describes. Every call is one
//! etcd request, which etcd applies atomically.
//!
//! # Cancel safety
//!
//! Dropping the future of a call closes its connection. A read has no
//! effect either way. A write (put, delete, txn, lease grant, compaction)
//! may or may not have been applied, completely: never half. Read again to
//! find out, as after [`EtcdError::Timeout`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::error::EtcdError;
use super::http::{Endpoint, Retry, Rpc, Transport};
use super::lease::LeaseKeeper;
use super::types::{KeyRange, KeyValue, Lease, LeaseId, RangeResponse, Txn, TxnResponse};
use super::watch::Watcher;
use super::wire;

// The gateway calls this client makes.
const RANGE: Rpc = Rpc { op: "range", path: "/v3/kv/range", retry: Retry::Safe };
const PUT: Rpc = Rpc { op: "put", path: "/v3/kv/put", retry: Retry::Unsafe };
const DELETE: Rpc = Rpc { op: "delete", path: "/v3/kv/deleterange", retry: Retry::Unsafe };
const TXN: Rpc = Rpc { op: "txn", path: "/v3/kv/txn", retry: Retry::Unsafe };
const COMPACTION: Rpc = Rpc { op: "compaction", path: "/v3/kv/compaction", retry: Retry::Unsafe };
const LEASE_GRANT: Rpc = Rpc { op: "lease grant", path: "/v3/lease/grant", retry: Retry::Unsafe };
const LEASE_KEEPALIVE: Rpc = Rpc { op: "lease keepalive", path: "/v3/lease/keepalive", retry: Retry::Safe };
const LEASE_REVOKE: Rpc = Rpc { op: "lease revoke", path: "/v3/lease/revoke", retry: Retry::Safe };
const LEASE_TTL: Rpc = Rpc { op: "lease timetolive", path: "/v3/lease/timetolive", retry: Retry::Safe };
pub(crate) const WATCH: Rpc = Rpc { op: "watch", path: "/v3/watch", retry: Retry::Safe };

/// How to reach etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The client URLs of the cluster's members, tried in order. Not empty.
    pub endpoints: Vec<Endpoint>,
    /// The deadline of each call, all fail-over attempts included.
    /// Default: [`EtcdConfig::DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// The longest wait for one TCP connection, so that a dead endpoint
    /// leaves time for the next. Default: [`EtcdConfig::DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How long a watch connection may stay silent before TCP keep-alive
    /// probes check that the peer is still there (a dead peer is noticed
    /// after about three times this). Default:
    /// [`EtcdConfig::DEFAULT_WATCH_KEEPALIVE`].
    pub watch_keepalive: Duration,
    /// TLS for `https` endpoints; `None` with an `https` endpoint: the
    /// system's trust store and no client certificate.
    pub tls: Option<EtcdTls>,
}

/// TLS to etcd: whom to trust and who we are (etcd's
/// `--client-cert-auth` asks for a client certificate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA certificate(s) (PEM) that sign etcd's server certificates;
    /// `None`: the system's trust store.
    pub ca: Option<std::path::PathBuf>,
    /// Our certificate (PEM), for client certificate authentication.
    pub cert: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    pub key: Option<std::path::PathBuf>,
}

impl EtcdTls {
    /// The connector: TLS 1.2 or later, the server's certificate checked
    /// against the CA and the endpoint's host name.
    ///
    /// # Errors
    ///
    /// [`EtcdError::InvalidConfig`] for a file that cannot be read or
    /// parsed, a certificate without its key, or a key that does not
    /// match its certificate.
    pub fn connector(&self) -> Result<openssl::ssl::SslConnector, EtcdError> {
        use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVersion};
        let bad = |what: &str, e: &dyn std::fmt::Display| EtcdError::InvalidConfig(format!("etcd TLS: {what}: {e}"));
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| bad("OpenSSL", &e))?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2)).map_err(|e| bad("OpenSSL", &e))?;
        if let Some(ca) = &self.ca {
            b.set_ca_file(ca).map_err(|e| bad(&format!("CA file {}", ca.display()), &e))?;
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                b.set_certificate_chain_file(cert).map_err(|e| bad(&format!("certificate {}", cert.display()), &e))?;
                b.set_private_key_file(key, SslFiletype::PEM)
                    .map_err(|e| bad(&format!("key {}", key.display()), &e))?;
                b.check_private_key().map_err(|e| bad("the key does not match the certificate", &e))?;
            }
            (None, None) => {}
            _ => return Err(bad("a client certificate needs its key, and a key its certificate", &"give both")),
        }
        Ok(b.build())
    }
}

impl EtcdConfig {
    /// Default of [`EtcdConfig::request_timeout`]: 5 s, as etcdctl's
    /// command timeout.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default of [`EtcdConfig::connect_timeout`]: 1 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default of [`EtcdConfig::watch_keepalive`]: 10 s.
    pub const DEFAULT_WATCH_KEEPALIVE: Duration = Duration::from_secs(10);

    /// A configuration with these endpoints and the default timeouts.
    ///
    /// # Errors
    ///
    /// [`EtcdError::InvalidConfig`] if `endpoints` is empty.
    pub fn new(endpoints: Vec<Endpoint>) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::InvalidConfig("no etcd endpoint given; use --etcd http://host:2379".into()));
        }
        Ok(EtcdConfig {
            endpoints,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            watch_keepalive: Self::DEFAULT_WATCH_KEEPALIVE,
            tls: None,
        })
    }

    /// Sets [`EtcdConfig::tls`].
    pub fn with_tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Parses the value of `--etcd URL[,URL...]`: comma-separated client
    /// URLs (see [`Endpoint::parse`]), with the default timeouts.
    ///
    /// # Errors
    ///
    /// [`EtcdError::InvalidConfig`] for an empty list or a bad URL.
    pub fn from_urls(list: &str) -> Result<Self, EtcdError> {
        let endpoints =
            list.split(',').filter(|s| !s.trim().is_empty()).map(Endpoint::parse).collect::<Result<Vec<_>, _>>()?;
        Self::new(endpoints)
    }

    /// Sets [`EtcdConfig::request_timeout`].
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`EtcdConfig::connect_timeout`].
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

/// A client of one etcd cluster. Cheap to clone; clones share the
/// endpoint that answered last.
#[derive(Debug, Clone)]
pub struct EtcdClient {
    transport: Arc<Transport>,
    /// A second transport with TCP keep-alive, for watch streams.
    watch_transport: Arc<Transport>,
}

impl EtcdClient {
    /// A client for `config`. Connects lazily: nothing is sent until the
    /// first call, so a client can be built while etcd is down.
    pub fn new(config: EtcdConfig) -> Self {
        // A connector that cannot be built fails every https call with
        // its reason; `EtcdClient::checked` reports it at once instead.
        let tls = Self::connector(&config).ok().flatten();
        let t = |keepalive| {
            Arc::new(Transport::new(
                config.endpoints.clone(),
                config.request_timeout,
                config.connect_timeout,
                keepalive,
                tls.clone(),
            ))
        };
        EtcdClient { transport: t(None), watch_transport: t(Some(config.watch_keepalive)) }
    }

    /// As [`EtcdClient::new`], but a TLS configuration that cannot be used
    /// (a missing file, a key that does not match) is an error now.
    ///
    /// # Errors
    ///
    /// [`EtcdError::InvalidConfig`].
    pub fn checked(config: EtcdConfig) -> Result<Self, EtcdError> {
        Self::connector(&config)?;
        Ok(Self::new(config))
    }

    fn connector(config: &EtcdConfig) -> Result<Option<openssl::ssl::SslConnector>, EtcdError> {
        match (&config.tls, config.endpoints.iter().any(Endpoint::is_tls)) {
            (Some(t), _) => t.connector().map(Some),
            (None, true) => EtcdTls::default().connector().map(Some),
            (None, false) => Ok(None),
        }
    }

    /// The endpoints, in the order given.
    pub fn endpoints(&self) -> &[Endpoint] {
        self.transport.endpoints()
    }

    /// The deadline of each call.
    pub fn request_timeout(&self) -> Duration {
        self.transport.request_timeout
    }

    pub(crate) fn watch_transport(&self) -> &Arc<Transport> {
        &self.watch_transport
    }

    /// Reads the keys in `range` (linearizable: it sees every write that
    /// completed before it started).
    ///
    /// # Errors
    ///
    /// [`EtcdError`]: unreachable, timeout, etcd's refusal, or a malformed answer.
    pub async fn range(&self, range: &KeyRange) -> Result<RangeResponse, EtcdError> {
        let body = self.transport.unary(RANGE, &wire::range_request(range), self.deadline()).await?;
        wire::parse_range(&body)
    }

    /// Reads one key.
    ///
    /// # Errors
    ///
    /// As [`range`](Self::range).
    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, EtcdError> {
        let mut r = self.range(&KeyRange::key(key)).await?;
        if r.kvs.len() > 1 {
            return Err(EtcdError::malformed("range", format!("{} keys returned for one key", r.kvs.len())));
        }
        Ok(r.kvs.pop())
    }

    /// Writes `value` under `key`, attached to `lease` if given, and
    /// returns the revision of the write.
    ///
    /// # Errors
    ///
    /// As [`range`](Self::range); [`EtcdError::Status`] with code 5 if the
    /// lease does not exist; [`EtcdError::OutcomeUnknown`] if the
    /// connection broke after sending.
    pub async fn put(&self, key: &[u8], value: &[u8], lease: Option<LeaseId>) -> Result<i64, EtcdError> {
        let req = wire::put_request(key, value, lease);
        let body = self.transport.unary(PUT, &req, self.deadline()).await?;
        wire::parse_put(&body)
    }

    /// Deletes the keys in `range` and returns how many there were.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub async fn delete(&self, range: &KeyRange) -> Result<i64, EtcdError> {
        let req = wire::delete_request(range);
        let body = self.transport.unary(DELETE, &req, self.deadline()).await?;
        wire::parse_delete(&body).map(|(_, deleted)| deleted)
    }

    /// Runs a transaction: compares, then one branch, atomically.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put). A compare that fails is not an error:
    /// [`TxnResponse::succeeded`] is false.
    pub async fn txn(&self, txn: &Txn) -> Result<TxnResponse, EtcdError> {
        self.txn_by(txn, self.deadline()).await
    }

    pub(crate) async fn txn_by(&self, txn: &Txn, deadline: Instant) -> Result<TxnResponse, EtcdError> {
        let retry = if txn.success.iter().chain(&txn.failure).all(|op| matches!(op, super::TxnOp::Range(_))) {
            Retry::Safe
        } else {
            Retry::Unsafe
        };
        let body = self.transport.unary(Rpc { retry, ..TXN }, &wire::txn_request(txn), deadline).await?;
        let resp = wire::parse_txn(&body)?;
        let branch = if resp.succeeded { &txn.success } else { &txn.failure };
        if resp.responses.len() != branch.len() {
            return Err(EtcdError::malformed(
                "txn",
                format!("{} responses for a branch of {} operations", resp.responses.len(), branch.len()),
            ));
        }
        Ok(resp)
    }

    /// Discards the history before `revision` (watches from before it then
    /// see [`super::WatchUpdate::Compacted`]).
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put); [`EtcdError::Status`] if `revision` is
    /// compacted already or in the future.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let req = wire::compaction_request(revision);
        let body = self.transport.unary(COMPACTION, &req, self.deadline()).await?;
        wire::parse_empty("compaction", &body)
    }

    /// Grants a lease of `ttl` (rounded up to whole seconds, at least 1;
    /// etcd may raise it to its minimum).
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub async fn lease_grant(&self, ttl: Duration) -> Result<Lease, EtcdError> {
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).saturating_add(i64::from(ttl.subsec_nanos() > 0));
        let req = wire::lease_grant_request(secs.max(1));
        let requested_at = Instant::now();
        let body = self.transport.unary(LEASE_GRANT, &req, self.deadline()).await?;
        let (id, ttl_secs) = wire::parse_lease_grant(&body)?;
        Ok(Lease { id, ttl_secs, requested_at })
    }

    /// Renews a lease once; returns its new TTL in seconds, or `None` if
    /// the lease no longer exists (expired or revoked).
    ///
    /// # Errors
    ///
    /// As [`range`](Self::range).
    pub async fn lease_keep_alive_once(&self, id: LeaseId) -> Result<Option<i64>, EtcdError> {
        self.keep_alive_by(id, self.deadline()).await
    }

    pub(crate) async fn keep_alive_by(&self, id: LeaseId, deadline: Instant) -> Result<Option<i64>, EtcdError> {
        let req = wire::lease_id_request(id);
        let msg = self.transport.first_message(LEASE_KEEPALIVE, &req, deadline).await?;
        let ttl = wire::parse_keepalive(&msg)?;
        Ok((ttl > 0).then_some(ttl))
    }

    /// Revokes a lease: it ends now and its keys are deleted. Revoking a
    /// lease that no longer exists succeeds (it is gone either way).
    ///
    /// # Errors
    ///
    /// As [`range`](Self::range).
    pub async fn lease_revoke(&self, id: LeaseId) -> Result<(), EtcdError> {
        let req = wire::lease_id_request(id);
        match self.transport.unary(LEASE_REVOKE, &req, self.deadline()).await {
            Ok(body) => wire::parse_empty("lease revoke", &body),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The remaining TTL of a lease in seconds, or `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// As [`range`](Self::range).
    pub async fn lease_time_to_live(&self, id: LeaseId) -> Result<Option<i64>, EtcdError> {
        let req = wire::lease_id_request(id);
        let body = self.transport.unary(LEASE_TTL, &req, self.deadline()).await?;
        wire::parse_time_to_live(&body)
    }

    /// Starts renewing `lease` in the background every TTL/3 until the
    /// returned keeper is dropped; see [`LeaseKeeper`].
    pub fn keep_alive(&self, lease: Lease) -> LeaseKeeper {
        LeaseKeeper::start(self.clone(), lease)
    }

    /// Watches the keys in `range` from `start_revision` (0: from now)
    /// until the returned watcher is dropped; see [`Watcher`].
    pub fn watch(&self, range: KeyRange, start_revision: i64) -> Watcher {
        Watcher::start(self.clone(), range, start_revision)
    }

    fn deadline(&self) -> Instant {
        self.transport.deadline()
    }
}
