//! [`Node`]: a broker that hosts partition replicas, one Raft group each, over TCP.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::log::{AppendInfo, PartitionLog};
use crate::protocol::{
    FetchRequest, MetadataRequest, ProduceRequest, ProduceResponse, WireBatch, WireError,
};
use crate::raft::replica::{Replica, Timing, WriteError};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::{Durability, LogStore};
use crate::raft::types::AppendRequest;
use crate::segment::record::{Batch, Record, encode_records};
use crate::transport::frame::Op;
use crate::transport::{BoxFuture, Handler, PeerSet, Turn, spawn_server};
use crate::types::{LeaderHint, LogIndex, NodeId, Offset, PartitionId};

/// Configuration of a [`Node`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This broker's id; also its Raft node id in every partition it hosts. Never reuse an id
    /// with a fresh data directory.
    pub id: NodeId,
    /// Address to listen on for peers and clients.
    pub listen: SocketAddr,
    /// Every other broker: id and address.
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// Directory holding one subdirectory per partition replica (`{topic}-{partition}`).
    pub data_dir: PathBuf,
    /// Topics and their partition counts. Every broker hosts a replica of every partition.
    pub topics: Vec<(String, u32)>,
    /// Configuration of each partition's log.
    pub log: LogConfig,
    /// When an append counts as written. Default [`Durability::Fsync`].
    pub durability: Durability,
    /// Raft heartbeat interval. Default 250 ms.
    pub heartbeat_interval_ms: u64,
    /// Raft election timeout (the lower bound; the upper is twice it). Default 1000 ms.
    pub election_timeout_ms: u64,
    /// How long an append may wait for commit before it fails as indeterminate. Default 5 s.
    pub request_timeout_ms: u64,
    /// Largest network frame accepted. Default 16 MiB.
    pub frame_bytes_max: u32,
    /// How often the broker applies retention by itself (see [`Node::enforce_retention`]).
    /// Default 60 s; 0 turns the background task off.
    pub retention_check_ms: u64,
    /// Network fault injection between brokers, for tests (`failpoints` feature).
    #[cfg(any(test, feature = "failpoints"))]
    pub net_faults: Option<std::sync::Arc<crate::fault::NetFaults>>,
}

impl NodeConfig {
    /// A configuration with defaults for everything but identity, addresses and storage.
    pub fn new(
        id: NodeId,
        listen: SocketAddr,
        peers: BTreeMap<NodeId, SocketAddr>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        NodeConfig {
            id,
            listen,
            peers,
            data_dir: data_dir.into(),
            topics: Vec::new(),
            log: LogConfig::default(),
            durability: Durability::default(),
            heartbeat_interval_ms: 250,
            election_timeout_ms: 1000,
            request_timeout_ms: 5000,
            frame_bytes_max: 16 << 20,
            retention_check_ms: 60_000,
            #[cfg(any(test, feature = "failpoints"))]
            net_faults: None,
        }
    }
}

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
}

/// A follower at most this many entries behind the leader counts as in sync.
const ISR_LAG_ENTRIES_MAX: u64 = 1000;

struct Group {
    id: PartitionId,
    raft: Replica,
    store: LogStore,
    sm: StateMachine,
}

struct Shared {
    config: NodeConfig,
    groups: HashMap<PartitionId, Arc<Group>>,
}

/// A broker: hosts a replica of every configured partition, each its own Raft group, and
/// serves peers over TCP. Writes are accepted only on a partition's leader; anywhere else they
/// fail with [`Error::NotLeader`] and a hint that names the leader.
///
/// `Node` runs inside the caller's tokio runtime; it starts no runtime of its own.
pub struct Node {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.shared.config.id)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Node {
    /// Opens and recovers every local partition replica, listens on `config.listen`, and joins
    /// each partition's Raft group. A fresh cluster elects its leaders by itself.
    ///
    /// # Errors
    ///
    /// Anything [`PartitionLog::open`] returns, and [`Error::Io`] if the address cannot be
    /// bound.
    pub async fn start(config: NodeConfig) -> Result<Node> {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let timing = Timing {
            heartbeat_ms: config.heartbeat_interval_ms,
            election_timeout_ms: config.election_timeout_ms,
        };
        let peers = PeerSet::new(
            &config.peers,
            config.id,
            config.frame_bytes_max,
            &shutdown_rx,
        );
        #[cfg(any(test, feature = "failpoints"))]
        let peers = peers.with_faults(config.net_faults.clone());
        let peers = Arc::new(peers);
        let mut groups = HashMap::new();
        for (topic, count) in &config.topics {
            for partition in 0..*count {
                let id = PartitionId::new(topic.clone(), partition);
                let dir = config.data_dir.join(format!("{topic}-{partition}"));
                let log = PartitionLog::open(&dir, config.log.clone())?;
                let store = LogStore::open(log, config.durability)?;
                let sm = StateMachine::open(store.clone())?;
                let raft = Replica::start(
                    config.id,
                    id.clone(),
                    timing,
                    Arc::clone(&peers),
                    store.clone(),
                    sm.clone(),
                )
                .await?;
                groups.insert(
                    id.clone(),
                    Arc::new(Group {
                        id,
                        raft,
                        store,
                        sm,
                    }),
                );
            }
        }
        let shared = Arc::new(Shared { config, groups });
        let handler: Arc<dyn Handler> = Arc::new(NodeHandler {
            shared: Arc::clone(&shared),
            addr: addr.to_string(),
        });
        let shutdown_for_retention = shutdown_rx.clone();
        let server = spawn_server(
            listener,
            handler,
            shared.config.frame_bytes_max,
            shutdown_rx,
        );
        let node = Node {
            shared,
            addr,
            shutdown,
            server,
        };
        node.initialize_groups().await;
        node.spawn_retention(shutdown_for_retention);
        Ok(node)
    }

    /// Each partition is initialized by one broker, chosen by partition number so that first
    /// leaders spread over the cluster; the others learn the membership from it.
    async fn initialize_groups(&self) {
        let config = &self.shared.config;
        let mut members: BTreeMap<NodeId, String> = config
            .peers
            .iter()
            .map(|(id, addr)| (*id, addr.to_string()))
            .collect();
        members.insert(config.id, self.addr.to_string());
        let ids: Vec<NodeId> = members.keys().copied().collect();
        for group in self.shared.groups.values() {
            let slot = usize::try_from(group.id.partition).unwrap_or(0) % ids.len().max(1);
            if ids.get(slot) != Some(&config.id) {
                continue;
            }
            group.raft.initialize(&members).await;
        }
    }

    /// Applies retention every `retention_check_ms` until shutdown.
    fn spawn_retention(&self, mut shutdown: watch::Receiver<bool>) {
        let period = self.shared.config.retention_check_ms;
        if period == 0 {
            return;
        }
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(period));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = tick.tick() => {
                        if let Err(e) = shared.enforce_retention().await {
                            tracing::warn!(error = %e, "retention postponed");
                        }
                    }
                }
            }
        });
    }

    /// This broker's id.
    pub fn id(&self) -> NodeId {
        self.shared.config.id
    }

    /// The address this broker listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends `records` as one batch to a partition this broker leads, and returns where the
    /// batch landed once it is committed (durable on a quorum under [`Durability::Fsync`]).
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
        self.shared.append(topic, partition, records, None).await
    }

    /// Appends `records` as one batch of an idempotent producer, as [`append`](Self::append)
    /// does, except that a batch the partition already holds is not written again: the call
    /// returns the offsets it got the first time.
    ///
    /// `producer_id` (not 0) names the producer; `base_sequence` numbers the batch's first
    /// record, counting every record the producer sent to this partition (Kafka's sequence
    /// numbers, wrapping at `u32::MAX`). The partition remembers each producer's last five
    /// batches; a batch must start where the producer's previous one ended, and a producer the
    /// partition does not know starts at 0.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append), plus [`Error::OutOfOrderSequence`] (nothing written) and
    /// [`Error::TryAgain`] (nothing written; a moment later the batch is either taken or
    /// answered as a duplicate).
    pub async fn append_idempotent(
        &self,
        topic: &str,
        partition: u32,
        producer_id: u64,
        base_sequence: u32,
        records: &[Record],
    ) -> Result<AppendInfo> {
        if producer_id == 0 {
            return Err(Error::InvalidConfig {
                field: "producer_id",
                reason: "0 means no producer".into(),
            });
        }
        self.shared
            .append(
                topic,
                partition,
                records,
                Some((producer_id, base_sequence)),
            )
            .await
    }

    /// Reads committed batches of a partition from this replica, from `offset` on, up to about
    /// `max_bytes` (see [`PartitionLog::read`]). Works on any replica, leader or not; a
    /// follower serves what it knows is committed.
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
        self.shared.read(topic, partition, offset, max_bytes)
    }

    /// The state of this broker's replica of a partition.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPartition`].
    pub fn status(&self, topic: &str, partition: u32) -> Result<PartitionStatus> {
        self.shared.status(topic, partition)
    }

    /// Applies each partition's retention (`LogConfig::retention_bytes` / `retention_ms`)
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
        self.shared.enforce_retention().await
    }

    /// Every partition this broker hosts.
    pub fn partitions(&self) -> Vec<PartitionId> {
        let mut ids: Vec<PartitionId> = self.shared.groups.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Stops every Raft group and the listener, and flushes every log.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a log could not be flushed.
    pub async fn shutdown(self) -> Result<()> {
        for group in self.shared.groups.values() {
            group.raft.shutdown().await;
        }
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
        // Requests still being served and syncs still in flight hold the logs (and their
        // directory locks) for a moment; wait, boundedly, so that the directories can be
        // reopened as soon as this returns.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let busy = |shared: &Arc<Shared>| {
            Arc::strong_count(shared) > 1
                || shared
                    .groups
                    .values()
                    .any(|g| g.store.syncs_in_flight() > 0)
        };
        while busy(&self.shared) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for group in self.shared.groups.values() {
            group.store.log().flush()?;
        }
        Ok(())
    }
}

impl Shared {
    pub(crate) async fn enforce_retention(&self) -> Result<()> {
        for group in self.groups.values() {
            let Some(keep_from) = group.store.log().retention_point(crate::log::now_ms()) else {
                continue;
            };
            let upto = keep_from.saturating_sub(1);
            let applied = group.sm.last_applied().map(|l| l.index);
            if applied.is_none_or(|a| a < upto) {
                continue; // not applied here yet: purge later
            }
            let timeout = Duration::from_millis(self.config.request_timeout_ms);
            if let Err(reason) = group.raft.purge_through(upto, timeout).await {
                return Err(Error::Indeterminate {
                    partition: group.id.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }

    fn group(&self, topic: &str, partition: u32) -> Result<&Arc<Group>> {
        let id = PartitionId::new(topic, partition);
        self.groups.get(&id).ok_or(Error::UnknownPartition(id))
    }

    /// See [`Node::append`].
    pub(crate) async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: &[Record],
        producer: Option<(u64, u32)>,
    ) -> Result<AppendInfo> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let (payload, record_count) = encode_records(records, self.config.log.record_bytes_max)?;
        let (producer_id, base_sequence) = producer.unwrap_or((0, 0));
        let request = AppendRequest {
            timestamp_ms: 0,
            records: payload,
            record_count,
            producer_id,
            base_sequence,
        };
        self.append_encoded(&PartitionId::new(topic, partition), request, None)
            .await
    }

    /// Appends an encoded batch: validated here, before it is proposed, so that no replica
    /// is ever asked to store a malformed one.
    /// `turn`, if given, is the request's place among its connection's requests; batches of
    /// one producer are checked in that order.
    pub(crate) async fn append_encoded(
        &self,
        id: &PartitionId,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> Result<AppendInfo> {
        let group = self
            .groups
            .get(id)
            .ok_or_else(|| Error::UnknownPartition(id.clone()))?;
        if request.record_count == 0 {
            return Err(Error::EmptyBatch);
        }
        let limits = crate::segment::record::Limits {
            record_bytes_max: self.config.log.record_bytes_max,
            batch_bytes_max: self.config.log.batch_bytes_max,
        };
        crate::segment::record::validate_records(&request.records, request.record_count, &limits)
            .map_err(|kind| Error::InvalidBatch { kind })?;
        let (record_count, producer_id, got) = (
            request.record_count,
            request.producer_id,
            request.base_sequence,
        );
        // The leader's clock stamps the batch (Kafka's LogAppendTime); replicas store it as is.
        let request = AppendRequest {
            timestamp_ms: crate::log::now_ms(),
            ..request
        };
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let outcome = tokio::time::timeout(timeout, group.raft.write(request, turn)).await;
        let indeterminate = |reason: String| Error::Indeterminate {
            partition: group.id.clone(),
            reason,
        };
        match outcome {
            Err(_) => Err(indeterminate(format!(
                "not committed within {} ms",
                timeout.as_millis()
            ))),
            Ok(Ok((log_index, response))) => Ok(AppendInfo {
                log_index: LogIndex(log_index),
                base_offset: Offset(response.base_offset),
                record_count,
            }),
            Ok(Err(WriteError::NotLeader(leader))) => {
                let leader = leader.and_then(|(node_id, addr)| {
                    let addr = addr
                        .and_then(|a| a.parse().ok())
                        .or_else(|| self.config.peers.get(&node_id).copied())?;
                    Some(LeaderHint { node_id, addr })
                });
                Err(Error::NotLeader {
                    partition: group.id.clone(),
                    leader,
                })
            }
            Ok(Err(WriteError::Discarded)) => Err(indeterminate(
                "leadership changed after the batch was appended".into(),
            )),
            Ok(Err(WriteError::Other(reason))) => Err(indeterminate(reason)),
            Ok(Err(WriteError::TryAgain(reason))) => Err(Error::TryAgain {
                partition: group.id.clone(),
                reason: reason.into(),
            }),
            Ok(Err(WriteError::OutOfOrder { expected })) => Err(Error::OutOfOrderSequence {
                partition: group.id.clone(),
                producer_id,
                expected,
                got,
            }),
        }
    }

    /// See [`Node::read`].
    pub(crate) fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Batch>> {
        let group = self.group(topic, partition)?;
        let log = group.store.log();
        let high_watermark = group.sm.high_watermark().min(log.end_offset().get());
        if offset.get() > high_watermark {
            return Err(Error::OffsetOutOfRange {
                requested: offset,
                start: log.start_offset(),
                end: Offset(high_watermark),
            });
        }
        if offset.get() == high_watermark {
            return Ok(Vec::new());
        }
        let mut batches = log.read(offset, max_bytes)?;
        batches.retain(|b| b.base_offset().get() < high_watermark);
        Ok(batches)
    }

    /// See [`Node::status`].
    pub(crate) fn status(&self, topic: &str, partition: u32) -> Result<PartitionStatus> {
        let group = self.group(topic, partition)?;
        let state = group.raft.state();
        let last = state.last_log_index.unwrap_or(0);
        let follower_lag = state
            .members
            .map(|members| {
                members
                    .into_iter()
                    .filter(|(id, _)| *id != self.config.id)
                    .map(|(id, m)| (id, last.saturating_sub(m.matched.map_or(0, |i| i + 1))))
                    .collect()
            })
            .unwrap_or_default();
        Ok(PartitionStatus {
            leader: state.leader,
            term: state.term,
            log_end: group.store.log().end_offset(),
            high_watermark: Offset(group.sm.high_watermark()),
            log_start: group.store.log().start_offset(),
            follower_lag,
        })
    }

    /// What this broker knows of the cluster: brokers and, per partition, the current leader
    /// (which every replica tracks), replicas and, when this broker leads, the in-sync replicas.
    pub(crate) fn metadata(
        &self,
        topic: Option<&str>,
        self_addr: &str,
    ) -> crate::protocol::MetadataResponse {
        use crate::protocol::{MetadataResponse, PartitionMetadata};
        let mut brokers: Vec<(NodeId, String)> = self
            .config
            .peers
            .iter()
            .map(|(id, a)| (*id, a.to_string()))
            .collect();
        brokers.push((self.config.id, self_addr.to_string()));
        brokers.sort();
        let replicas: Vec<NodeId> = brokers.iter().map(|(id, _)| *id).collect();
        let mut partitions: Vec<PartitionMetadata> = self
            .groups
            .values()
            .filter(|g| topic.is_none_or(|t| t == g.id.topic))
            .map(|g| {
                let state = g.raft.state();
                let last = state.last_log_index.unwrap_or(0);
                // In sync: the leader, and followers that are at most ISR_LAG_ENTRIES_MAX
                // entries behind and acknowledged the leader within two election timeouts.
                let silence_max = Duration::from_millis(self.config.election_timeout_ms * 2);
                let isr = state
                    .members
                    .map(|members| {
                        members
                            .into_iter()
                            .filter(|(id, m)| {
                                let behind = last.saturating_sub(m.matched.unwrap_or(0));
                                let heard = *id == self.config.id
                                    || m.ack_age.is_some_and(|age| age < silence_max);
                                behind <= ISR_LAG_ENTRIES_MAX && heard
                            })
                            .map(|(id, _)| id)
                            .collect()
                    })
                    .unwrap_or_default();
                PartitionMetadata {
                    partition: g.id.clone(),
                    leader: state.leader,
                    term: state.term,
                    replicas: replicas.clone(),
                    isr,
                    log_start: g.store.log().start_offset().get(),
                    high_watermark: g.sm.high_watermark(),
                }
            })
            .collect();
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        MetadataResponse {
            broker: self.config.id,
            brokers,
            partitions,
        }
    }
}

/// Serves peers' Raft RPCs by dispatching them to the partition's group.
struct NodeHandler {
    shared: Arc<Shared>,
    /// This broker's address, as it tells clients.
    addr: String,
}

fn encode_response<T: Serialize>(result: &std::result::Result<T, WireError>) -> Vec<u8> {
    postcard::to_stdvec(result).unwrap_or_else(|e| {
        let fallback: std::result::Result<(), WireError> = Err(WireError::Other(e.to_string()));
        postcard::to_stdvec(&fallback).unwrap_or_default()
    })
}

impl NodeHandler {
    /// Serves a Raft RPC: the body starts with the partition id, then the request.
    async fn raft_rpc(&self, op: Op, body: &[u8]) -> Vec<u8> {
        let found = postcard::take_from_bytes::<PartitionId>(body)
            .map_err(|e| format!("bad request: {e}"))
            .and_then(|(id, rest)| {
                let group = self.shared.groups.get(&id).cloned();
                group
                    .map(|g| (g, rest))
                    .ok_or_else(|| format!("unknown partition {id}"))
            });
        match found {
            Ok((group, rest)) => group.raft.serve(op, rest).await,
            Err(e) => {
                postcard::to_stdvec(&std::result::Result::<(), String>::Err(e)).unwrap_or_default()
            }
        }
    }
}

impl Handler for NodeHandler {
    fn handle(self: Arc<Self>, op: Op, body: Vec<u8>, turn: Turn) -> BoxFuture<Vec<u8>> {
        Box::pin(async move {
            // Only produce requests keep their connection's order (see `Replica::write`).
            let mut turn = Some(turn);
            if !matches!(op, Op::Produce) {
                turn = None;
            }
            match op {
                Op::AppendEntries | Op::Vote | Op::Snapshot => self.raft_rpc(op, &body).await,
                Op::Produce => {
                    let result = match postcard::from_bytes::<ProduceRequest>(&body) {
                        Ok(req) => self
                            .shared
                            .append_encoded(&req.partition, req.batch, turn.take())
                            .await
                            .map(|info| ProduceResponse {
                                log_index: info.log_index.get(),
                                base_offset: info.base_offset.get(),
                                record_count: info.record_count,
                            })
                            .map_err(|e| WireError::from_error(&e)),
                        Err(e) => Err(WireError::Other(format!("bad request: {e}"))),
                    };
                    encode_response(&result)
                }
                Op::Fetch => {
                    let result = match postcard::from_bytes::<FetchRequest>(&body) {
                        Ok(req) => self
                            .shared
                            .read(
                                &req.partition.topic,
                                req.partition.partition,
                                Offset(req.offset),
                                req.max_bytes as usize,
                            )
                            .map(|batches| {
                                batches
                                    .iter()
                                    .map(WireBatch::from_batch)
                                    .collect::<Vec<_>>()
                            })
                            .map_err(|e| WireError::from_error(&e)),
                        Err(e) => Err(WireError::Other(format!("bad request: {e}"))),
                    };
                    encode_response(&result)
                }
                Op::Metadata => {
                    let result = match postcard::from_bytes::<MetadataRequest>(&body) {
                        Ok(req) => Ok(self.shared.metadata(req.topic.as_deref(), &self.addr)),
                        Err(e) => Err(WireError::Other(format!("bad request: {e}"))),
                    };
                    encode_response(&result)
                }
            }
        })
    }
}
