//! [`Node`]: a broker that hosts partition replicas, one Raft group each, over TCP.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::Address;
use crate::catalog::Catalog;
use crate::env::Env;
use crate::error::{Error, Result};
use crate::log::AppendInfo;
use crate::raft::replica::{Replica, Timing};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::LogStore;
use crate::segment::batch::Batch;
use crate::segment::record::Record;
use crate::transport::PeerSet;
use crate::types::{NodeId, Offset, PartitionId, ProducerSeq};

mod config;
mod decommission;
mod describe;
mod follow;
mod groups;
mod handler;
mod leader_balance;
mod liveness;
mod login;
mod metadata;
mod partitions;
mod peer_gate;
mod periodic;
pub(crate) use peer_gate::NO_BROKER;
mod peer_rpc;
mod quiet;
mod reassign;
mod replica_dir;
mod replicas;
mod report;
mod retention;
mod security_ops;
pub(crate) mod service;
mod start;
mod supervise;
mod topic_settings;
mod versions;
mod write;

pub use config::NodeConfig;
use follow::follow_metadata;
use handler::NodeHandler;
pub use leader_balance::Election;
use replica_dir::{open_data_dir, partition_dir};
use replicas::{ReplicaSpec, open_or_rebuild_replica, open_replica};

/// A snapshot of one partition replica's state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStatus {
    /// The leader this replica knows of.
    pub leader: Option<NodeId>,
    /// The current Raft term.
    pub term: u64,
    /// The offset after the last record in this replica's log (committed or not).
    pub log_end: Offset,
    /// The offset below which records are committed (and applied here).
    pub high_watermark: Offset,
    /// The first offset still in this replica's log.
    pub log_start: Offset,
    /// On the leader: how many entries each follower is behind the leader's log.
    pub follower_lag: BTreeMap<NodeId, u64>,
    /// `None` while this replica's Raft member runs (with `leader` `None` during an election).
    /// Otherwise why it is down: its Raft member stopped by itself (a storage error), or it is
    /// being rebuilt from the leader, and the broker is bringing it back (the other fields
    /// are then as they were when it stopped).
    pub stopped: Option<String>,
}

/// Segment size of the metadata log.
const META_SEGMENT_BYTES: u64 = 4 << 20;

/// Largest metadata command (a topic of 10,000 partitions of 5 replicas takes about 60 KiB).
const META_RECORD_BYTES_MAX: u32 = 1 << 20;

/// A follower at most this many entries behind the leader counts as in sync.
const ISR_LAG_ENTRIES_MAX: u64 = 1000;

/// ... and at most this many full replication requests of bytes behind it.
const ISR_LAG_REQUESTS_MAX: u64 = 4;

/// This broker's replica of one partition's Raft group (or of the metadata Raft group): its
/// Raft handle, its log store and state machine.
struct HostedReplica {
    id: PartitionId,
    /// The topic's id in the catalog ([`CONFIGURED_TOPIC_ID`](crate::catalog::CONFIGURED_TOPIC_ID) for configured topics).
    topic_id: u64,
    raft: Replica,
    store: LogStore,
    sm: StateMachine,
    /// Set once a rebuild of this replica was asked for (see [`Broker::rebuild_replica`]).
    rebuilding: AtomicBool,
    /// Its topic's settings (see `topic_settings.rs`); the metadata Raft group's hold nothing back.
    settings: parking_lot::RwLock<crate::topic_config::TopicSettings>,
}

impl HostedReplica {
    /// Where the replica's records start: its log's first offset, or past it where
    /// DeleteRecords moved the start (the segments below are removed later, whole).
    fn log_start(&self) -> Offset {
        self.store
            .log()
            .start_offset()
            .max(Offset(self.sm.log_start()))
    }

    /// The replica's high watermark: where its committed records end (never past its log's end,
    /// which a commit learned before the log caught up could name).
    fn committed_end(&self) -> Offset {
        Offset(
            self.sm
                .high_watermark()
                .min(self.store.log().end_offset().get()),
        )
    }
}

/// A broker's state, shared by [`Node`] and every task it runs.
struct Broker {
    config: NodeConfig,
    /// What the broker's logs and peer connections take from the machine (test faults).
    env: Env,
    /// This broker's address, as peers and clients reach it (`NodeConfig::advertised`, or the
    /// address it listens on).
    addr: Address,
    timing: Timing,
    peers: Arc<PeerSet>,
    /// The founding brokers' ids, sorted: this one's and its peers', or only its peers' when
    /// it joined. The cluster's brokers are the catalog's.
    founders: Vec<NodeId>,
    /// The partition replicas this broker hosts.
    replicas: RwLock<HashMap<PartitionId, Arc<HostedReplica>>>,
    /// This broker's member of the metadata Raft group.
    meta: Arc<HostedReplica>,
    /// The topics, as of the metadata log applied here.
    catalog: RwLock<Catalog>,
    /// The catalog's next metadata offset, for requests waiting for their command.
    catalog_applied: watch::Sender<u64>,
    /// Held while replicas start, stop or are rebuilt, and by shutdown.
    replicas_changing: tokio::sync::Mutex<()>,
    /// Set by shutdown: no replica starts any more.
    closing: AtomicBool,
    /// Partitions whose replica stopped and is not back yet (see [`supervise`]).
    down: parking_lot::Mutex<HashMap<PartitionId, supervise::Down>>,
    /// Turns true when shutdown begins: waits that hold requests (long polls) end.
    stopping: watch::Receiver<bool>,
    /// The group coordinators of the offsets partitions this broker leads (`group/runtime.rs`;
    /// this broker is their host, see `groups.rs`).
    coordinator: Arc<crate::group::runtime::GroupCoordinator>,
    /// The Kafka address this broker advertises, once its Kafka listener is bound: registered
    /// in the metadata log, so that every broker's Kafka metadata names it.
    kafka_addr: std::sync::OnceLock<Address>,
    /// The producer ids this broker has left to hand out, from its latest block (see
    /// [`MetaCommand::AllocateProducerIds`](crate::catalog::MetaCommand)).
    producer_ids: tokio::sync::Mutex<std::ops::Range<u64>>,
    /// Failed logins by address, on both doors (each refusal waits longer).
    failed_logins: crate::security::FailedLogins,
    /// This broker's default for every topic config key (`NodeConfig::topic_defaults` and
    /// the keys its `LogConfig` owns).
    topic_defaults: crate::topic_config::TopicConfigs,
    /// The other brokers' liveness as heard here, and this broker's disk's (`liveness.rs`).
    liveness: Arc<liveness::Liveness>,
    /// Withdrawals of quiet some member's broker has not acknowledged yet
    /// (`quiet/withdraw.rs`).
    withdrawals: parking_lot::Mutex<HashMap<PartitionId, quiet::Withdrawal>>,
    /// Leaderships of quiet groups their leaders' brokers withdrew, as heard here
    /// (`quiet/withdraw.rs`).
    withdrawn: parking_lot::Mutex<quiet::WithdrawnMap>,
    /// Test fault: this many withdrawals of quiet are lost on their way to a peer.
    #[cfg(test)]
    lost_withdrawals: std::sync::atomic::AtomicU32,
}

/// How long [`Node::shutdown`] waits for the tasks still holding its logs to end.
pub(super) const SHUTDOWN_RELEASE_WAIT: Duration = Duration::from_secs(30);

/// A broker: hosts a replica of every configured partition, each its own Raft group, and
/// serves peers over TCP. Writes are accepted only on a partition's leader; anywhere else they
/// fail with [`Error::NotLeader`] and a hint that names the leader.
///
/// `Node` runs inside the caller's tokio runtime; it starts no runtime of its own.
pub struct Node {
    broker: Arc<Broker>,
    addr: SocketAddr,
    /// Where the Kafka listener is bound, if one runs.
    kafka_bound: std::sync::OnceLock<SocketAddr>,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    /// The task that follows the metadata log (see `follow_metadata`).
    follower: tokio::task::JoinHandle<()>,
    /// The Kafka listener's accept loop, if one runs.
    kafka: Option<tokio::task::JoinHandle<()>>,
    /// The certificate the listeners serving TLS present (see [`NodeConfig::tls`]).
    tls: Option<crate::tls::TlsServer>,
    /// The tasks that run until shutdown (supervision, liveness, retention, …), by name.
    background: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
    _data_lock: crate::dirlock::DirLock,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.broker.config.id)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Node {
    /// This broker's id.
    pub fn id(&self) -> NodeId {
        self.broker.config.id
    }

    /// The address this broker listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address this broker's Kafka listener is bound to, if it has one
    /// ([`NodeConfig::kafka_listen`]).
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        self.kafka_bound.get().copied()
    }

    /// The address this broker's Kafka listener gives Kafka's clients (its advertised one, or
    /// the one it bound), if it has a Kafka listener.
    pub fn kafka_advertised(&self) -> Option<Address> {
        self.broker.kafka_addr.get().cloned()
    }

    /// The address this broker gives peers and clients ([`NodeConfig::advertised`], or the
    /// one it listens on).
    pub fn advertised(&self) -> Address {
        self.broker.addr.clone()
    }

    /// Reads the TLS certificate and key files ([`NodeConfig::tls`]) again: connections made
    /// from now on are served with what they hold, open ones keep theirs (`replog node` does
    /// this on SIGHUP, so that a certificate is renewed without a restart).
    ///
    /// # Errors
    ///
    /// [`Error::Tls`] if the files cannot be read, hold no certificate or key, or do not go
    /// together: the certificate served stays the one loaded before.
    /// [`Error::InvalidConfig`] if the broker was started without TLS.
    pub fn reload_tls(&self) -> Result<()> {
        let Some(tls) = &self.tls else {
            return Err(Error::InvalidConfig {
                field: "tls",
                reason: "the broker was started without TLS".into(),
            });
        };
        tls.reload()?;
        Ok(())
    }

    /// Appends `records` as one batch to a partition this broker leads, and returns where the
    /// batch landed once it is committed (durable on a quorum under
    /// [`Durability::Fsync`](crate::types::Durability::Fsync)).
    ///
    /// # Errors
    ///
    /// - [`Error::NotLeader`] if this broker does not lead the partition (nothing was
    ///   written; safe to send to the hinted leader).
    /// - [`Error::Indeterminate`] if the outcome is unknown (timed out, or the leader lost its
    ///   leadership after appending): the batch may or may not be committed.
    /// - [`Error::UnknownPartition`], [`Error::EmptyBatch`], [`Error::RecordTooLarge`].
    pub async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: &[Record],
    ) -> Result<AppendInfo> {
        self.broker.append(topic, partition, records, None).await
    }

    /// Appends `records` as one batch of an idempotent producer, as [`append`](Self::append)
    /// does, except that a batch the partition already holds is not written again: the call
    /// returns the offsets it got the first time.
    ///
    /// `producer` names the producer (its id is not 0), its epoch, and the sequence number of
    /// the batch's first record (see [`ProducerSeq`]). The partition remembers each producer's
    /// last five batches; a batch must start where the producer's previous one of the same
    /// epoch ended, and the first batch of a producer or of a later epoch starts at 0.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), plus [`Error::OutOfOrderSequence`] and
    /// [`Error::ProducerFenced`] (nothing written), and [`Error::TryAgain`] (nothing written; a
    /// moment later the batch is either taken or answered as a duplicate).
    pub async fn append_idempotent(
        &self,
        topic: &str,
        partition: u32,
        producer: ProducerSeq,
        records: &[Record],
    ) -> Result<AppendInfo> {
        if producer.producer_id == 0 {
            return Err(Error::InvalidConfig {
                field: "producer_id",
                reason: "0 means no producer".into(),
            });
        }
        self.broker
            .append(topic, partition, records, Some(producer))
            .await
    }

    /// Reads committed batches of a partition from this replica, from `offset` on, up to about
    /// `max_bytes` (see [`PartitionLog::read`](crate::PartitionLog::read)). Works on any replica,
    /// leader or not; a follower serves what it knows is committed.
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`] past the high watermark or below the log start;
    /// [`Error::UnknownPartition`]; [`Error::Corrupt`].
    pub fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Batch>> {
        self.broker.read(topic, partition, offset, max_bytes)
    }

    /// Waits until this broker is ready to serve: it has applied the metadata log as far as it
    /// knows it committed and opened every replica the log places on it (a restarted broker
    /// opens its created topics' replicas as it replays the log, after `Node::start`
    /// returned), and the metadata Raft group and every partition replica it hosts know a
    /// leader (`Node::start` returns before the first elections), and none is down. Returns
    /// how many partition replicas it hosts.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] naming the partitions still without a leader once `timeout` passed.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<usize> {
        let started = tokio::time::Instant::now();
        // Bounded by `timeout`.
        loop {
            let broker = &self.broker;
            let replicas: Vec<Arc<HostedReplica>> =
                broker.replicas.read().values().cloned().collect();
            let mut waiting: Vec<String> = replicas
                .iter()
                .filter(|g| g.raft.leader().is_none())
                .map(|g| g.id.to_string())
                .collect();
            waiting.extend(broker.down.lock().keys().map(|id| format!("{id} (down)")));
            waiting.extend(broker.not_open_yet());
            if broker.meta.raft.leader().is_none() {
                waiting.push("the metadata Raft group".into());
            }
            if waiting.is_empty() {
                return Ok(replicas.len());
            }
            if started.elapsed() >= timeout {
                waiting.sort();
                return Err(Error::Timeout {
                    elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    last: format!("no leader yet for {}", waiting.join(", ")),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The state of this broker's replica of a partition.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPartition`].
    pub fn status(&self, topic: &str, partition: u32) -> Result<PartitionStatus> {
        self.broker.status(topic, partition)
    }

    /// Applies each partition's retention (`LogConfig::retention_bytes` / `retention_time`)
    /// through Raft: snapshots the partition if needed, then lets openraft purge the log up to
    /// the last segment retention would delete. A follower that later needs purged entries
    /// gets the snapshot instead and continues from the new log start, as a Kafka follower
    /// jumps to the leader's log start offset.
    ///
    /// # Errors
    ///
    /// [`Error::Indeterminate`] if a snapshot did not cover the purge point within the request
    /// timeout (nothing was purged then).
    pub async fn enforce_retention(&self) -> Result<()> {
        self.broker.enforce_retention().await
    }

    /// Compacts this broker's replicas of compacted topics now (`cleanup.policy=compact`),
    /// as the retention check does by itself: each replica up to what it has applied, the
    /// latest record of each key kept (FORMAT.md §4.3). Returns what it did, summed.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a compacted segment could not be written (the log is unchanged).
    pub async fn compact(&self) -> Result<crate::CompactionStats> {
        self.broker.compact_topics().await
    }

    /// Whether this broker has left its cluster: decommissioned
    /// ([`Client::decommission_broker`](crate::Client::decommission_broker)), emptied of its
    /// replicas, removed, and out of the metadata Raft group's voters. It serves no client then,
    /// and stopping it leaves no partition under-replicated.
    pub fn has_left(&self) -> bool {
        self.broker.departed() && !self.broker.meta.raft.votes_in_newest(self.broker.config.id)
    }

    /// The cluster's brokers and their addresses, as this broker's copy of the metadata log
    /// has them so far (founding brokers, registered addresses, brokers that joined).
    pub fn brokers(&self) -> Vec<(NodeId, Address)> {
        let all = self.broker.catalog.read().brokers();
        all.into_iter()
            .filter_map(|id| Some((id, self.broker.broker_addr(id)?)))
            .collect()
    }

    /// Every partition this broker hosts.
    pub fn partitions(&self) -> Vec<PartitionId> {
        let mut ids: Vec<PartitionId> = self.broker.replicas.read().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Controlled shutdown (Kafka's): every Raft group this broker leads hands its leadership to
    /// the follower holding the most of its log, all at once, each waiting at most an election
    /// timeout, so that writes pause for a hand-off instead of an election timeout plus an
    /// election. The metadata Raft group goes last, so that the partitions' new leaders find it
    /// led.
    async fn hand_off_leadership(&self) {
        let me = self.broker.config.id;
        let timeout = self.broker.config.election_timeout;
        let partitions = self.broker.all_replicas();
        let (meta, partitions): (Vec<_>, Vec<_>) = partitions
            .into_iter()
            .partition(|g| Arc::ptr_eq(g, &self.broker.meta));
        for replicas in [partitions, meta] {
            let handed = futures_util::future::join_all(
                replicas
                    .iter()
                    .map(|g| async move { (g.id.clone(), g.raft.hand_off(me, timeout).await) }),
            )
            .await;
            for (partition, to) in handed {
                if let Some(to) = to {
                    tracing::info!(%partition, to, "leadership handed off for shutdown");
                }
            }
        }
    }

    /// Tells the broker that every broker of its cluster is stopping (an embedded cluster
    /// shut down whole): it stops serving and talking to its peers, and does not take their
    /// going for a fault; [`shutdown`](Self::shutdown) then stops it without handing its
    /// leaderships over.
    pub(crate) fn stopping_with_its_cluster(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Stops every Raft group and the listener, and flushes every log.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a log could not be flushed.
    pub async fn shutdown(self) -> Result<()> {
        // A broker stopping with its whole cluster has no one to hand its leaderships to.
        if !*self.shutdown.borrow() {
            self.hand_off_leadership().await;
        }
        let _ = self.shutdown.send(true);
        // The metadata follower finishes the round it is in (it may be starting a replica).
        let _ = self.follower.await;
        // A replica being rebuilt finishes first; none starts after this.
        let changing = self.broker.replicas_changing.lock().await;
        self.broker.closing.store(true, Ordering::Release);
        drop(changing);
        let replicas = self.broker.all_replicas();
        for replica in &replicas {
            replica.raft.shutdown().await;
        }
        let _ = self.server.await;
        if let Some(kafka) = self.kafka {
            let _ = kafka.await;
        }
        // Requests being served and syncs in flight hold the logs (and their directory locks)
        // a moment; wait, boundedly, so that the directories can be reopened when this returns.
        // Seconds on a loaded machine: 5 s was once too short for a broker restarted in the
        // same process under a test suite's load.
        let deadline = tokio::time::Instant::now() + SHUTDOWN_RELEASE_WAIT;
        let busy = |broker: &Arc<Broker>| {
            Arc::strong_count(broker) > 1 || replicas.iter().any(|g| replicas::still_held(g, 2))
        };
        while busy(&self.broker) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if busy(&self.broker) {
            let held: Vec<String> = replicas
                .iter()
                .filter(|g| replicas::still_held(g, 2))
                .map(replicas::holders_of)
                .collect();
            // A background task still running names itself; none running means requests being
            // served or tasks not tracked here (a heartbeat, a hand-off, a campaign, each
            // spawned by another) hold on.
            let running: Vec<&str> = self
                .background
                .iter()
                .filter(|(_, task)| !task.is_finished())
                .map(|(name, _)| *name)
                .collect();
            tracing::warn!(
                waited = ?SHUTDOWN_RELEASE_WAIT,
                broker_handles = Arc::strong_count(&self.broker),
                held = %held.join("; "),
                background_running = %running.join(", "),
                "stopped with logs still held by tasks that have not ended: their directories \
                 cannot be opened again until they do"
            );
        }
        // Flushes each log and records how far it is committed, so that a restart re-applies
        // it at once without waiting for a leader: the metadata Raft group first (the catalog the
        // replicas are started from), and every replica even if one fails.
        let mut first_error = None;
        for replica in replicas.iter().rev() {
            if let Err(e) = replica.store.persist_committed() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
