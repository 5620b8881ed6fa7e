//! [`Client`]: bootstrap list → metadata → the partition's leader, following `NotLeader`.
//!
//! This file owns the client itself: its configuration ([`ClientConfig`]), connecting, the
//! connections to brokers and one request over them (`peer`, `call`, `call_with`), and the small
//! helpers its parts share. The parts, one file each: `routing` (the metadata cache and the
//! redirect rule), `deliver` (the produce path), `fetch`, `admin` (describing the cluster and
//! changing its topics), `groups` (consumer groups' coordinators and their administration)
//! and `sequencer` (the idempotent producer's numbering).

mod admin;
mod configs;
mod deliver;
mod fetch;
pub(crate) use fetch::Unchecked;
pub use fetch::{FetchOptions, Fetched};
mod groups;
pub use groups::{GroupInfo, GroupMemberInfo, GroupSummary};
mod routing;
mod security;
mod sequencer;

pub use security::UserCredentials;

use crate::Address;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::error::Result;
use crate::protocol::{BrokerLimits, WireError};
use crate::transport::frame::Op;
use crate::transport::{CallError, Peer};
use crate::types::{NodeId, PartitionId, Term};
pub use admin::{BrokerDescription, BrokerState, PartitionDescription, Reassignment};
pub(crate) use deliver::PreparedBatch;
use deliver::ProducerSlot;
pub use deliver::{Delivery, RouteStep};

/// Configuration of a [`Client`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientConfig {
    /// How long one request may wait for its response, counted from when it is sent. Default
    /// 5 s.
    pub request_timeout: Duration,
    /// How many requests of one connection may await their answers at once; the others wait
    /// in the client, unsent (at most `request_timeout` each). Match the brokers'
    /// `NodeConfig::requests_in_flight_max`: a broker reads no more than that many requests
    /// of a connection ahead of its answers, and the rest would wait in its socket with their
    /// timeouts running. Default 256.
    pub requests_in_flight_max: usize,
    /// How long `send` may keep retrying (redirects, elections, dead brokers). Default 30 s.
    pub delivery_timeout: Duration,
    /// How many `NotLeader` redirects one `send` follows. Default 8.
    pub redirect_hops_max: u32,
    /// Largest network frame accepted. Default 16 MiB.
    pub frame_bytes_max: u32,
    /// Largest record this client sends. The brokers' own limits, which their metadata
    /// answers carry, tighten it: a record over either is refused before it is sent.
    /// Default 1 MiB.
    pub record_bytes_max: u32,
    /// Largest batch this client sends, tightened by the brokers' limits as
    /// `record_bytes_max` is. Default 4 MiB.
    pub batch_bytes_max: u32,
    /// Send batches as an idempotent producer (a random producer id, a sequence number per
    /// partition), so that a batch whose outcome was unknown can be resent without being
    /// written twice. Default `true`.
    pub idempotent: bool,
    /// How many batches one partition may have in flight at once (at most 5, the window the
    /// brokers remember per producer). Default 5.
    pub in_flight_per_partition: u32,
    /// The CA (a PEM file) that signed the brokers' certificates, for brokers whose native
    /// listeners serve TLS ([`TlsConfig::ca_cert`](crate::TlsConfig::ca_cert)): the client
    /// then dials every broker over TLS and checks that its certificate chains to this CA and
    /// names the IP address dialed (`replog certs dev --hosts` puts the addresses there).
    /// Default `None`: plaintext.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) presented to every broker, with `tls_key`, over TLS
    /// (`tls_ca`): where brokers take client certificates as identities
    /// ([`NodeConfig::client_auth`](crate::NodeConfig::client_auth)), the client is
    /// `User:<CN>` of its subject. Default `None`.
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<std::path::PathBuf>,
    /// Revocation lists of the `tls_ca` CA (PEM, `X509 CRL`; Kafka clients'
    /// `ssl.crl.location`): a broker whose certificate they revoke is not dialed. Read when the
    /// client connects. Default `None`.
    pub tls_crl: Option<std::path::PathBuf>,
    /// The SASL login made on every broker connection, for brokers that ask native clients
    /// to log in ([`NodeConfig::native_sasl`](crate::NodeConfig::native_sasl)); over TLS only
    /// (`tls_ca`). Default `None`: the client is anonymous (`User:ANONYMOUS`).
    pub sasl: Option<SaslLogin>,
}

/// A SASL login: the mechanism, the user's name and password (which [`Debug`] leaves out).
/// The password never leaves the client with SCRAM; PLAIN sends it, inside TLS.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SaslLogin {
    /// The mechanism, one the brokers offer.
    pub mechanism: crate::SaslMechanism,
    /// The user's name.
    pub user: String,
    /// The user's password.
    pub password: String,
}

impl SaslLogin {
    /// A login of `user` with `password` by `mechanism`.
    pub fn new(
        mechanism: crate::SaslMechanism,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> SaslLogin {
        SaslLogin {
            mechanism,
            user: user.into(),
            password: password.into(),
        }
    }
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            request_timeout: Duration::from_secs(5),
            requests_in_flight_max: 256,
            delivery_timeout: Duration::from_secs(30),
            redirect_hops_max: 8,
            frame_bytes_max: 16 << 20,
            record_bytes_max: 1 << 20,
            batch_bytes_max: 4 << 20,
            idempotent: true,
            in_flight_per_partition: 5,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_crl: None,
            sasl: None,
        }
    }
}

/// A client of a replog cluster.
///
/// It needs only some broker addresses (a bootstrap list). It asks any of them for metadata,
/// learns each partition's leader, and sends writes there; a broker that does not lead answers
/// `NotLeader` with the leader's address, which the client follows at once (a bounded number of
/// times). A dead broker or an election makes it refresh metadata with backoff until the
/// delivery deadline.
///
/// # Retries and idempotence
///
/// A request that provably was not applied (refused with `NotLeader`, or never sent because no
/// connection could be made) is retried. A request whose outcome is unknown (the connection
/// died or timed out after sending, or the leader lost its leadership after appending) is
/// resent too, because the client is an idempotent producer (the default,
/// [`ClientConfig::idempotent`]): every batch carries the client's producer id and a sequence
/// number that stays the same on every resend, and the partition's leader answers a batch it
/// already holds with the offsets it got the first time. So a batch is written at most once,
/// and an acknowledged batch reports where it really is. Batches of one partition are written in
/// the order `send` was called, with at most [`ClientConfig::in_flight_per_partition`] in
/// flight.
///
/// If a batch fails for good (its delivery deadline passes), the client moves that partition
/// to the producer's next epoch and renumbers the batches behind it, in their order, so that
/// later batches do not wait for the sequence number it leaves out; the partition refuses the
/// earlier epoch from then on ([`Error::ProducerFenced`](crate::Error::ProducerFenced)), so
/// nothing still on its way under the old numbers can land after them. A batch that was on its
/// way when that happened, and is then refused, fails too (the batches behind it may already be
/// written). Without idempotence, a batch whose outcome is unknown fails with
/// [`Error::Indeterminate`](crate::Error::Indeterminate) instead of being resent.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    bootstrap: Vec<Address>,
    brokers: Mutex<HashMap<NodeId, Address>>,
    /// Each partition's leader and the term it leads in, as metadata and hints named them.
    leaders: Mutex<HashMap<PartitionId, (NodeId, Term)>>,
    peers: Mutex<HashMap<Address, Arc<Peer>>>,
    /// TLS to every broker, with [`ClientConfig::tls_ca`].
    tls: Option<crate::tls::TlsDialer>,
    producers: Mutex<HashMap<PartitionId, Arc<ProducerSlot>>>,
    /// Partition count of each topic seen in metadata.
    topics: Mutex<HashMap<String, u32>>,
    /// Each broker's size limits, as its metadata answers named them.
    limits: Mutex<HashMap<NodeId, BrokerLimits>>,
    /// Each consumer group's coordinator, as FindCoordinator named it.
    coordinators: Mutex<HashMap<String, Address>>,
    /// Metadata refreshes, one at a time per topic asked about (`None`: every topic), with the
    /// last answer and when it was asked for (see `Client::refresh_for`).
    refreshes: Mutex<HashMap<Option<String>, Arc<routing::Refresh>>>,
    shutdown: watch::Sender<bool>,
}

/// A random producer id at or above 2^63 (63 random bits): the cluster hands out the ids
/// below to Kafka's producers (`MetaCommand::AllocateProducerIds`), so a native producer's id
/// never meets one of theirs.
pub(crate) fn new_producer_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.write_u32(std::process::id());
    h.finish() | (1 << 63)
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl Client {
    /// Connects to a cluster through `bootstrap` (any brokers of it) and loads its metadata.
    ///
    /// # Errors
    ///
    /// [`Error::NoBrokerReachable`](crate::Error::NoBrokerReachable) if no bootstrap address
    /// answers (a broker whose certificate this client does not trust does not: the reason
    /// is among those `tried` lists);
    /// [`Error::AuthenticationFailed`](crate::Error::AuthenticationFailed) if a broker
    /// refuses the login of [`ClientConfig::sasl`] (a wrong password and an unknown user
    /// alike), or asks for one the client does not make;
    /// [`Error::Tls`](crate::Error::Tls) if [`ClientConfig::tls_ca`] cannot be read;
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a login without TLS.
    pub async fn connect<A>(bootstrap: &[A], config: ClientConfig) -> Result<Client>
    where
        A: Clone + Into<Address>,
    {
        if config.sasl.is_some() && config.tls_ca.is_none() {
            return Err(crate::Error::InvalidConfig {
                field: "sasl",
                reason: "a SASL login is made over TLS only: set tls_ca".into(),
            });
        }
        let identity = match (&config.tls_cert, &config.tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) if config.tls_ca.is_some() => {
                Some(crate::TlsConfig::new(cert, key))
            }
            _ => {
                return Err(crate::Error::InvalidConfig {
                    field: "tls_cert",
                    reason: "a client certificate needs its key (tls_key) and TLS (tls_ca)".into(),
                });
            }
        };
        if config.tls_crl.is_some() && config.tls_ca.is_none() {
            return Err(crate::Error::InvalidConfig {
                field: "tls_crl",
                reason: "revocation lists need the CA they are of (tls_ca)".into(),
            });
        }
        let (shutdown, _) = watch::channel(false);
        let tls = config
            .tls_ca
            .as_deref()
            .map(|ca| {
                crate::tls::TlsDialer::presenting(ca, identity.as_ref(), config.tls_crl.as_deref())
            })
            .transpose()?;
        let client = Client {
            tls,
            config,
            bootstrap: bootstrap.iter().cloned().map(Into::into).collect(),
            brokers: Mutex::default(),
            leaders: Mutex::default(),
            peers: Mutex::default(),
            producers: Mutex::default(),
            topics: Mutex::default(),
            limits: Mutex::default(),
            coordinators: Mutex::default(),
            refreshes: Mutex::default(),
            shutdown,
        };
        client.refresh(None).await?;
        Ok(client)
    }

    fn peer(&self, addr: &Address) -> Arc<Peer> {
        let mut peers = self.peers.lock();
        Arc::clone(peers.entry(addr.clone()).or_insert_with(|| {
            // The broker's certificate must name the host dialed: its name, or its IP address.
            let tls = self.tls.as_ref().map(|dialer| crate::transport::Dial {
                dialer: dialer.clone(),
                name: addr.server_name(),
                login: self.config.sasl.clone().map(Arc::new),
            });
            Arc::new(
                Peer::new(
                    addr.clone(),
                    self.config.frame_bytes_max,
                    self.shutdown.subscribe(),
                    tls,
                )
                .windowed(self.config.requests_in_flight_max),
            )
        }))
    }

    /// The limits a batch must keep to: this client's own, tightened by every broker's it
    /// has heard of (a batch goes to whichever broker leads, and is copied to the others).
    pub(crate) fn limits(&self) -> BrokerLimits {
        let own = BrokerLimits {
            record_bytes_max: self.config.record_bytes_max,
            batch_bytes_max: self.config.batch_bytes_max,
            frame_bytes_max: self.config.frame_bytes_max,
        };
        self.limits.lock().values().fold(own, |a, b| a.min(*b))
    }

    pub(crate) fn record_bytes_max(&self) -> u32 {
        self.limits().record_bytes_max
    }

    pub(crate) fn batch_bytes_max(&self) -> u32 {
        self.limits().batch_bytes_max
    }

    fn timeout(&self) -> Duration {
        self.config.request_timeout
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &Address,
        op: Op,
        request: &Req,
    ) -> std::result::Result<std::result::Result<Resp, WireError>, CallError> {
        self.call_with(addr, op, request, None).await
    }

    /// [`call`](Self::call) waiting up to `timeout` for the answer.
    async fn call_timeout<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &Address,
        op: Op,
        request: &Req,
        timeout: Duration,
    ) -> std::result::Result<std::result::Result<Resp, WireError>, CallError> {
        self.call_within(addr, op, request, timeout, None).await
    }

    /// [`call`](Self::call), signalling `enqueued` once the request is queued on its
    /// connection.
    async fn call_with<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &Address,
        op: Op,
        request: &Req,
        enqueued: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> std::result::Result<std::result::Result<Resp, WireError>, CallError> {
        self.call_within(addr, op, request, self.timeout(), enqueued)
            .await
    }

    /// The one call: encodes `request`, sends it to `addr`, waits up to `timeout` for the
    /// answer, decodes it.
    ///
    /// A broker that refuses the connection's login answers `AuthenticationFailed`, as if
    /// it refused the request: the brokers share their users, so each would refuse the login
    /// alike, and the request is not retried elsewhere (Kafka's clients give up alike).
    async fn call_within<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &Address,
        op: Op,
        request: &Req,
        timeout: Duration,
        enqueued: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> std::result::Result<std::result::Result<Resp, WireError>, CallError> {
        let body = crate::protocol::encode(request)
            .map_err(|e| CallError::Unreachable(format!("cannot encode request: {e}")))?;
        let bytes = match self.peer(addr).call_with(op, body, timeout, enqueued).await {
            Ok(bytes) => bytes,
            Err(CallError::LoginRefused(why)) => {
                return Ok(Err(WireError::AuthenticationFailed(why)));
            }
            Err(e) => return Err(e),
        };
        // Fetched batches stay in the answer's buffer.
        let frame = bytes::Bytes::from(bytes);
        crate::transport::body::decode_in_frame(&frame, || postcard::from_bytes(&frame))
            .map_err(|e| CallError::Unreachable(format!("bad response from {addr}: {e}")))
    }
}

/// Milliseconds since `since`.
fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// `d` plus up to a quarter of it, so that clients do not retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d / 4 * (nanos % 1000) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_non_zero_and_differ() {
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| new_producer_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&0));
    }

    /// A batch goes in Kafka's layout, unless that layout would take it over the batch limit
    /// where replog's does not, or cannot carry a header name; one over the limit as replog
    /// measures it is refused before anything is sent.
    #[test]
    fn a_batch_takes_replogs_layout_only_where_kafkas_cannot_carry_it() {
        use crate::segment::format::PayloadFormat;
        use crate::segment::record::Record;
        let limits = |batch_bytes_max| BrokerLimits {
            record_bytes_max: 1 << 20,
            batch_bytes_max,
            frame_bytes_max: 8 << 20,
        };
        // Four records of exactly 1 MiB as replog encodes them (ten bytes of fields).
        let full: Vec<Record> = (0..4)
            .map(|_| Record::new(vec![1u8; (1 << 20) - 10]))
            .collect();
        let (_, format, count) = deliver::encode_batch(&full, &limits(4 << 20)).unwrap();
        assert_eq!(
            (format, count),
            (PayloadFormat::Replog, 4),
            "Kafka's takes 61 bytes more"
        );
        let (batch, format, _) = deliver::encode_batch(&full[..3], &limits(4 << 20)).unwrap();
        assert_eq!(format, PayloadFormat::Kafka);
        assert!(batch.len() > 3 << 20);
        let over = deliver::encode_batch(&full, &limits((4 << 20) - 1));
        assert!(matches!(over, Err(crate::Error::BatchTooLarge { len, .. }) if len == 4 << 20));
        let odd = [Record::new("v").with_header(bytes::Bytes::from_static(&[0xff]), "x")];
        let (_, format, _) = deliver::encode_batch(&odd, &limits(4 << 20)).unwrap();
        assert_eq!(format, PayloadFormat::Replog);
    }
}
