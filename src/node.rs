//! [`Node`]: a broker that hosts partition replicas, one Raft group each, over TCP.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use serde::Serialize;
use tokio::sync::watch;

use crate::catalog::{
    CONFIGURED_TOPIC_ID, Catalog, METADATA_TOPIC, MetaCommand, PARTITIONS_MAX, Refused,
    check_topic_name,
};
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::log::{AppendInfo, PartitionLog};
use crate::protocol::{
    CreateTopicRequest, DeleteTopicRequest, FetchRequest, MetadataRequest, MetadataResponse,
    PartitionMetadata, ProduceRequestRef, ProduceResponse, ProposeRequest, WireBatch, WireError,
};
use crate::raft::network::Served;
use crate::raft::replica::{Replica, Timing, WriteError};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::{Durability, LogStore};
use crate::raft::types::{AppendRequest, Vote};
use crate::segment::record::{Batch, Record, encode_records};
use crate::transport::frame::Op;
use crate::transport::{BoxFuture, Handler, PeerSet, Turn, spawn_server};
use crate::types::{LeaderHint, LogIndex, NodeId, Offset, PartitionId, ProducerSeq};

/// Configuration of a [`Node`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeConfig {
    /// This broker's id; also its Raft node id in every partition it hosts. Never reuse an id
    /// with a fresh data directory.
    pub id: NodeId,
    /// Address to listen on for peers and clients.
    pub listen: SocketAddr,
    /// Every other broker: id and address. The ids are the cluster's brokers; an address is
    /// where to find a broker until the metadata log says otherwise (each broker registers
    /// its `listen` address there when it starts, so a broker that moved is found again).
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// Directory holding one subdirectory per partition replica (`{topic}-{partition}`).
    pub data_dir: PathBuf,
    /// Configured topics and their partition counts: they exist from the start, with a
    /// replica of every partition on every broker, and cannot be deleted. Every broker must
    /// be given the same list. Other topics are created at run time
    /// ([`Client::create_topic`](crate::Client::create_topic)).
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
    /// This broker joins a running cluster instead of founding one (`replog node --join`).
    /// Its `peers` are the cluster's founding brokers, as they were started (the same ids), and
    /// its id is new. It registers itself through them; the metadata group makes it a learner
    /// (it replicates the catalog without voting on it), and topics created from then on are
    /// spread over it too. It hosts no replica of the configured topics. Default false.
    pub join: bool,
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
            join: false,
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

/// Segment size of the metadata log.
const META_SEGMENT_BYTES: u64 = 4 << 20;

/// Largest metadata command (a topic of 10,000 partitions of 5 replicas takes about 60 KiB).
const META_RECORD_BYTES_MAX: u32 = 1 << 20;

/// A follower at most this many entries behind the leader counts as in sync.
const ISR_LAG_ENTRIES_MAX: u64 = 1000;

struct Group {
    id: PartitionId,
    /// The topic's id in the catalog ([`CONFIGURED_TOPIC_ID`] for configured topics).
    topic_id: u64,
    raft: Replica,
    store: LogStore,
    sm: StateMachine,
    /// Set once a rebuild of this replica was asked for (see [`Shared::rebuild_replica`]).
    rebuilding: AtomicBool,
}

struct Shared {
    config: NodeConfig,
    /// This broker's address, as peers and clients reach it.
    addr: SocketAddr,
    timing: Timing,
    peers: Arc<PeerSet>,
    /// The founding brokers' ids, sorted: this one's and its peers', or only its peers' when
    /// it joined. The cluster's brokers are the catalog's.
    founders: Vec<NodeId>,
    /// The partition replicas this broker hosts.
    groups: RwLock<HashMap<PartitionId, Arc<Group>>>,
    /// This broker's member of the metadata group.
    meta: Arc<Group>,
    /// The topics, as of the metadata log applied here.
    catalog: RwLock<Catalog>,
    /// The catalog's next metadata offset, for requests waiting for their command.
    catalog_applied: watch::Sender<u64>,
    /// Held while replicas start, stop or are rebuilt, and by shutdown.
    replicas_changing: tokio::sync::Mutex<()>,
    /// Set by shutdown: no replica starts any more.
    closing: AtomicBool,
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
    /// The task that follows the metadata log (see `follow_metadata`).
    follower: tokio::task::JoinHandle<()>,
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
    /// Opens and recovers the replicas of the configured topics and the metadata group,
    /// listens on `config.listen`, and joins each group. Replicas of created topics start a
    /// moment later, once the metadata log is re-applied (at once, from the local log, up to
    /// where it was committed at the last shutdown). A fresh cluster elects its leaders by
    /// itself.
    ///
    /// # Errors
    ///
    /// Anything [`PartitionLog::open`] returns, and [`Error::Io`] if the address cannot be
    /// bound.
    pub async fn start(mut config: NodeConfig) -> Result<Node> {
        if config.log.preallocate == crate::config::Preallocate::Auto
            && config.durability == Durability::Replicated
        {
            config.log.preallocate = crate::config::Preallocate::Fallocate;
        }
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
        let mut founders: Vec<NodeId> = config.peers.keys().copied().collect();
        if !config.join {
            founders.push(config.id);
        }
        founders.sort_unstable();
        founders.dedup();
        if config.join && founders.contains(&config.id) {
            return Err(Error::InvalidConfig {
                field: "join",
                reason: format!(
                    "broker {} joins, so it cannot be one of its peers",
                    config.id
                ),
            });
        }
        for (topic, _) in &config.topics {
            check_topic_name(topic).map_err(|reason| Error::InvalidConfig {
                field: "topics",
                reason,
            })?;
        }
        let catalog = Catalog::with_configured(&config.topics, &founders);
        remove_deleted_dirs(&config.data_dir);
        // The metadata log is never purged (the catalog is its replay) and always synced. Its
        // records are a few topic commands: small segments, preallocated without writing.
        let mut meta_log = config.log.clone();
        meta_log.retention_bytes = None;
        meta_log.retention_ms = None;
        meta_log.segment_bytes = META_SEGMENT_BYTES;
        meta_log.record_bytes_max = META_RECORD_BYTES_MAX;
        meta_log.batch_bytes_max = META_RECORD_BYTES_MAX;
        meta_log.preallocate = crate::config::Preallocate::Fallocate;
        #[cfg(any(test, feature = "failpoints"))]
        {
            meta_log.faults = None;
        }
        // Partition replicas with damaged files are rebuilt from their leaders; the metadata
        // replica (the catalog every replica is started from) is not.
        let open = |id: PartitionId, topic_id: u64, log: LogConfig, durability| {
            let peers = Arc::clone(&peers);
            let dir = partition_dir(&config.data_dir, &id);
            let me = config.id;
            let others = config.peers.keys().filter(|p| **p != me).count();
            let metadata = id.topic == METADATA_TOPIC;
            let spec = ReplicaSpec {
                me,
                timing,
                peers,
                id,
                topic_id,
                dir,
                log,
                durability,
            };
            async move {
                if metadata {
                    open_group(spec).await
                } else {
                    open_replica(others, spec).await
                }
            }
        };
        let meta = open(
            PartitionId::new(METADATA_TOPIC, 0),
            CONFIGURED_TOPIC_ID,
            meta_log,
            Durability::Fsync,
        )
        .await?;
        let mut groups = HashMap::new();
        // Configured topics have a replica on every founding broker, and only there.
        let configured = if config.join {
            &[][..]
        } else {
            &config.topics[..]
        };
        for (topic, count) in configured {
            for partition in 0..*count {
                let id = PartitionId::new(topic.clone(), partition);
                let group = open(
                    id.clone(),
                    CONFIGURED_TOPIC_ID,
                    config.log.clone(),
                    config.durability,
                )
                .await?;
                groups.insert(id, group);
            }
        }
        let shared = Arc::new(Shared {
            config,
            addr,
            timing,
            peers,
            founders,
            groups: RwLock::new(groups),
            meta,
            catalog_applied: watch::Sender::new(catalog.next_offset()),
            catalog: RwLock::new(catalog),
            replicas_changing: tokio::sync::Mutex::new(()),
            closing: AtomicBool::new(false),
        });
        let handler: Arc<dyn Handler> = Arc::new(NodeHandler {
            shared: Arc::clone(&shared),
        });
        let shutdown_for_retention = shutdown_rx.clone();
        let server = spawn_server(
            listener,
            handler,
            shared.config.frame_bytes_max,
            shutdown_rx,
        );
        let follower = tokio::spawn(follow_metadata(
            Arc::clone(&shared),
            shutdown_for_retention.clone(),
        ));
        let node = Node {
            shared,
            addr,
            shutdown,
            server,
            follower,
        };
        node.initialize_groups().await;
        node.spawn_retention(shutdown_for_retention);
        Ok(node)
    }

    /// Initializes every group this broker starts with (see [`Shared::initialize`]).
    async fn initialize_groups(&self) {
        let shared = &self.shared;
        // A joining broker's metadata replica is made a learner by the group's leader.
        if !shared.config.join {
            let all = shared.founders.clone();
            shared.initialize(&shared.meta, &all).await;
        }
        let groups: Vec<Arc<Group>> = shared.groups.read().values().cloned().collect();
        for group in groups {
            let replicas = shared
                .catalog
                .read()
                .topic(&group.id.topic)
                .and_then(|t| t.assignment.get(group.id.partition as usize).cloned())
                .unwrap_or_default();
            shared.initialize(&group, &replicas).await;
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
        self.shared
            .append(topic, partition, records, Some(producer))
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

    /// The cluster's brokers and their addresses, as this broker's copy of the metadata log
    /// has them so far (founding brokers, registered addresses, brokers that joined).
    pub fn brokers(&self) -> Vec<(NodeId, SocketAddr)> {
        let all = self.shared.catalog.read().brokers();
        all.into_iter()
            .filter_map(|id| Some((id, self.shared.broker_addr(id)?)))
            .collect()
    }

    /// Every partition this broker hosts.
    pub fn partitions(&self) -> Vec<PartitionId> {
        let mut ids: Vec<PartitionId> = self.shared.groups.read().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Stops every Raft group and the listener, and flushes every log.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if a log could not be flushed.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.shutdown.send(true);
        // The metadata follower finishes the round it is in (it may be starting a replica).
        let _ = self.follower.await;
        // A replica being rebuilt finishes first; none starts after this.
        let changing = self.shared.replicas_changing.lock().await;
        self.shared.closing.store(true, Ordering::Release);
        drop(changing);
        let groups = self.shared.all_groups();
        for group in &groups {
            group.raft.shutdown().await;
        }
        let _ = self.server.await;
        // Requests still being served and syncs still in flight hold the logs (and their
        // directory locks) for a moment; wait, boundedly, so that the directories can be
        // reopened as soon as this returns.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let busy = |shared: &Arc<Shared>| {
            Arc::strong_count(shared) > 1
                || groups
                    .iter()
                    .any(|g| g.store.syncs_in_flight() > 0 || Arc::strong_count(g) > 2)
        };
        while busy(&self.shared) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Flushes each log and records how far it is committed, so that a restart re-applies
        // it at once without waiting for a leader: the metadata group first (the catalog the
        // replicas are started from), and every group even if one fails.
        let mut first_error = None;
        for group in groups.iter().rev() {
            if let Err(e) = group.store.persist_committed() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Shared {
    /// Every group this broker runs, the metadata group included.
    fn all_groups(&self) -> Vec<Arc<Group>> {
        let mut groups: Vec<Arc<Group>> = self.groups.read().values().cloned().collect();
        groups.push(Arc::clone(&self.meta));
        groups
    }

    /// Initializes a fresh group whose members are `replicas`. The first replica (the
    /// preferred leader; the lowest broker id for the metadata group) does it at once and
    /// usually wins the first election. Each other replica does it later (the k-th after
    /// k + 1 election timeouts) if by then the group still has no leader and its replica is
    /// still pristine, so that a group whose preferred leader is down still forms. openraft
    /// allows several members to initialize with the same membership; on a replica that has
    /// a log or a vote, initializing does nothing.
    async fn initialize(&self, group: &Arc<Group>, replicas: &[NodeId]) {
        let Some(rank) = replicas.iter().position(|id| *id == self.config.id) else {
            return;
        };
        let members = self.members(replicas);
        if rank == 0 {
            group.raft.initialize(&members).await;
            return;
        }
        let weak = Arc::downgrade(group);
        let delay = Duration::from_millis(self.config.election_timeout_ms * (rank as u64 + 1));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            // A group stopped meanwhile (its topic deleted, the broker shut down) is gone.
            let Some(group) = weak.upgrade() else { return };
            let state = group.raft.state();
            if state.leader.is_none() && state.last_log_index.is_none() {
                tracing::info!(partition = %group.id, "preferred leader silent: initializing");
                group.raft.initialize(&members).await;
            }
        });
    }

    /// Brokers' ids and addresses, as a group's initial membership.
    fn members(&self, ids: &[NodeId]) -> BTreeMap<NodeId, String> {
        ids.iter()
            .filter_map(|id| Some((*id, self.broker_addr(*id)?.to_string())))
            .collect()
    }

    /// Where broker `id` is: this broker's own address, or the one it registered in the
    /// metadata log, or else the configured one.
    fn broker_addr(&self, id: NodeId) -> Option<SocketAddr> {
        if id == self.config.id {
            Some(self.addr)
        } else {
            let registered = self.catalog.read().broker_addr(id);
            registered.or_else(|| self.config.peers.get(&id).copied())
        }
    }

    /// Records this broker's address in the metadata log (see [`MetaCommand::RegisterBroker`]).
    async fn register(&self) -> Result<()> {
        // A broker that joined once is in the catalog (its own replica replays the metadata
        // log); from then on it only moves.
        let me = self.config.id;
        let join = self.config.join && !self.catalog.read().brokers().contains(&me);
        let request = ProposeRequest {
            command: MetaCommand::RegisterBroker {
                id: me,
                addr: self.addr.to_string(),
                join,
            },
            forwarded: false,
        };
        if self.meta.raft.state().leader.is_some() {
            return self.propose(request).await;
        }
        // No metadata leader known here (a joining broker is nobody's follower yet): any
        // founding broker takes the registration to its leader.
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let mut tried = Vec::new();
        for peer in self.config.peers.keys() {
            let answer: Result<std::result::Result<(), WireError>> =
                self.forward(*peer, Op::Propose, &request, timeout).await;
            match answer {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => tried.push(format!("broker {peer} ({e:?})")),
                Err(e) => tried.push(format!("broker {peer} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }

    /// Commits a metadata command through the metadata group (see [`Op::Propose`]).
    pub(crate) async fn propose(&self, request: ProposeRequest) -> Result<()> {
        // A broker registering an address is reached there at once: the metadata group may
        // need its vote or acknowledgement to commit this very registration (the catalog
        // confirms it).
        if let MetaCommand::RegisterBroker { id, addr, .. } = &request.command
            && *id != self.config.id
            && let Ok(addr) = addr.parse()
        {
            self.peers.set_addr(*id, addr);
        }
        let unknown = || match &request.command {
            MetaCommand::ReassignPartition {
                name, partition, ..
            } => Error::UnknownPartition(PartitionId::new(name.clone(), *partition)),
            _ => Error::UnknownPartition(PartitionId::new(METADATA_TOPIC, 0)),
        };
        self.meta_command(
            request.command.clone(),
            request.forwarded,
            Op::Propose,
            &request,
        )
        .await
        .map_err(|e| match e {
            MetaError::Refused(Refused::UnknownTopic) => unknown(),
            MetaError::Refused(Refused::TopicExists) => Error::InvalidTopic {
                reason: "the topic exists".into(),
            },
            MetaError::Refused(Refused::Invalid(reason)) => Error::InvalidTopic { reason },
            MetaError::Failed(e) => e,
        })
    }

    /// Moves the partitions this broker leads whose group's voters are not yet the
    /// catalog's replicas (a reassignment; see [`MetaCommand::ReassignPartition`]), one task
    /// per partition at a time.
    fn drive_moves(
        self: &Arc<Self>,
        moving: &mut HashMap<PartitionId, tokio::task::JoinHandle<()>>,
    ) {
        moving.retain(|_, task| !task.is_finished());
        let me = self.config.id;
        // Only partitions ever reassigned are looked at: the others' voters are their
        // replicas from the start.
        let groups: Vec<Arc<Group>> = self.groups.read().values().cloned().collect();
        let due: Vec<(Arc<Group>, Vec<NodeId>, bool)> = {
            let catalog = self.catalog.read();
            groups
                .iter()
                .filter_map(|g| {
                    let t = catalog.topic(&g.id.topic).filter(|t| t.id == g.topic_id)?;
                    let p = g.id.partition as usize;
                    let leaving = !t.leaving.get(p)?.is_empty();
                    let target = t.assignment.get(p)?.clone();
                    t.moved.get(p)?.then(|| (Arc::clone(g), target, leaving))
                })
                .collect()
        };
        for (group, target, leaving) in due {
            if moving.contains_key(&group.id) || group.raft.state().leader != Some(me) {
                continue;
            }
            let (voters, joint) = group.raft.voters();
            let settled = !joint && voters == target.iter().copied().collect();
            if settled && !leaving {
                continue;
            }
            let shared = Arc::clone(self);
            let id = group.id.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = shared.move_partition(&group, target, leaving).await {
                    tracing::debug!(partition = %group.id, error = %e, "moving the partition; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            moving.insert(id, task);
        }
    }

    /// On the partition's leader: adds the replicas in `target` that the group lacks as
    /// learners, makes `target` the voters, and, if the move left brokers (`leaving`), records
    /// in the metadata log that it is done (those brokers then drop their replicas).
    async fn move_partition(
        &self,
        group: &Group,
        target: Vec<NodeId>,
        leaving: bool,
    ) -> Result<()> {
        let failed = |e: String| Error::TryAgain {
            partition: group.id.clone(),
            reason: e,
        };
        let wanted: std::collections::BTreeSet<NodeId> = target.iter().copied().collect();
        let (voters, joint) = group.raft.voters();
        if voters != wanted || joint {
            let members = group.raft.member_ids();
            for id in target.iter().filter(|id| !members.contains(id)) {
                let addr = self
                    .broker_addr(*id)
                    .ok_or_else(|| failed(format!("no address for broker {id}")))?;
                group
                    .raft
                    .add_learner(*id, addr.to_string())
                    .await
                    .map_err(failed)?;
            }
            group.raft.change_voters(wanted).await.map_err(failed)?;
            tracing::info!(partition = %group.id, voters = ?target, "partition moved");
        }
        if !leaving {
            return Ok(());
        }
        let request = ProposeRequest {
            command: MetaCommand::ReassignDone {
                topic_id: group.topic_id,
                partition: group.id.partition,
                replicas: target,
            },
            forwarded: false,
        };
        self.propose(request).await
    }

    pub(crate) async fn enforce_retention(&self) -> Result<()> {
        let groups: Vec<Arc<Group>> = self.groups.read().values().cloned().collect();
        for group in groups {
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

    /// The replica of a partition hosted here. A partition of a known topic that is hosted
    /// elsewhere is [`Error::NotLeader`] without a hint (ask for metadata); an unknown one is
    /// [`Error::UnknownPartition`].
    fn group(&self, id: &PartitionId) -> Result<Arc<Group>> {
        if let Some(group) = self.groups.read().get(id) {
            return Ok(Arc::clone(group));
        }
        let known = self
            .catalog
            .read()
            .topic(&id.topic)
            .is_some_and(|t| (id.partition as usize) < t.assignment.len());
        if known {
            return Err(Error::NotLeader {
                partition: id.clone(),
                leader: None,
            });
        }
        Err(Error::UnknownPartition(id.clone()))
    }

    /// See [`Node::append`].
    pub(crate) async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: &[Record],
        producer: Option<ProducerSeq>,
    ) -> Result<AppendInfo> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let (payload, record_count) = encode_records(records, self.config.log.record_bytes_max)?;
        let producer = producer.unwrap_or(ProducerSeq::new(0, 0));
        let request = AppendRequest {
            timestamp_ms: 0,
            records: payload,
            record_count,
            producer_id: producer.producer_id,
            producer_epoch: producer.epoch,
            base_sequence: producer.base_sequence,
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
        let group = self.group(id)?;
        self.append_to(&group, request, turn).await
    }

    /// [`append_encoded`](Self::append_encoded) to a group of this broker.
    async fn append_to(
        &self,
        group: &Group,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> Result<AppendInfo> {
        if request.record_count == 0 {
            return Err(Error::EmptyBatch);
        }
        // The group's own limits: the metadata log's differ from the partitions'.
        let limits = group.store.log().limits();
        crate::segment::record::validate_records(&request.records, request.record_count, limits)
            .map_err(|kind| Error::InvalidBatch { kind })?;
        let (record_count, producer_id, epoch, got) = (
            request.record_count,
            request.producer_id,
            request.producer_epoch,
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
                let term = group.raft.state().term;
                let leader = leader.and_then(|(node_id, addr)| {
                    // Where the catalog says the broker is now; the group's membership keeps
                    // the address the broker had when it joined.
                    let addr = self
                        .broker_addr(node_id)
                        .or_else(|| addr.and_then(|a| a.parse().ok()))?;
                    Some(LeaderHint {
                        node_id,
                        addr,
                        term,
                    })
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
            Ok(Err(WriteError::Fenced { current })) => Err(Error::ProducerFenced {
                partition: group.id.clone(),
                producer_id,
                epoch,
                current,
            }),
        }
    }

    /// See [`Node::read`].
    pub(crate) fn read(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Batch>> {
        let group = self.group(&PartitionId::new(topic, partition))?;
        let read = read_committed(&group, offset, max_bytes);
        // Never served: the reader gets the error, and the replica is rebuilt from the leader.
        if let Err(damage @ Error::Corrupt { .. }) = &read {
            self.request_rebuild(group, RebuildCause::Damaged(damage.clone()));
        }
        read
    }

    /// See [`Node::status`].
    pub(crate) fn status(&self, topic: &str, partition: u32) -> Result<PartitionStatus> {
        let group = self.group(&PartitionId::new(topic, partition))?;
        Ok(self.status_of(&group))
    }
}

/// Reads committed batches of `group` from `offset` on, up to about `max_bytes`.
fn read_committed(group: &Group, offset: Offset, max_bytes: usize) -> Result<Vec<Batch>> {
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

impl Shared {
    fn status_of(&self, group: &Group) -> PartitionStatus {
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
        PartitionStatus {
            leader: state.leader,
            term: state.term,
            log_end: group.store.log().end_offset(),
            high_watermark: Offset(group.sm.high_watermark()),
            log_start: group.store.log().start_offset(),
            follower_lag,
        }
    }

    /// This broker's view of one replica it hosts.
    fn partition_metadata(&self, group: &Group, replicas: Vec<NodeId>) -> PartitionMetadata {
        let state = group.raft.state();
        let last = state.last_log_index.unwrap_or(0);
        // In sync: the leader, and followers that are at most ISR_LAG_ENTRIES_MAX entries
        // behind and acknowledged the leader within two election timeouts.
        let silence_max = Duration::from_millis(self.config.election_timeout_ms * 2);
        let isr = state
            .members
            .map(|members| {
                members
                    .into_iter()
                    .filter(|(id, m)| {
                        let behind = last.saturating_sub(m.matched.unwrap_or(0));
                        let heard =
                            *id == self.config.id || m.ack_age.is_some_and(|age| age < silence_max);
                        behind <= ISR_LAG_ENTRIES_MAX && heard
                    })
                    .map(|(id, _)| id)
                    .collect()
            })
            .unwrap_or_default();
        PartitionMetadata {
            partition: group.id.clone(),
            leader: state.leader,
            term: state.term,
            replicas,
            isr,
            log_start: group.store.log().start_offset().get(),
            high_watermark: group.sm.high_watermark(),
        }
    }

    /// What this broker knows of the cluster: every broker and, per partition, the leader,
    /// its term, the replicas and (from the leader) the in-sync replicas. A partition hosted
    /// here is described by its local replica, which tracks the leader; one hosted elsewhere
    /// by asking its replicas (unless `local_only`: then it is left out).
    pub(crate) async fn metadata(&self, topic: Option<&str>, local_only: bool) -> MetadataResponse {
        let all = self.catalog.read().brokers();
        let brokers: Vec<(NodeId, String)> = self.members(&all).into_iter().collect();
        let wanted: Vec<(PartitionId, Vec<NodeId>)> = {
            let catalog = self.catalog.read();
            catalog
                .topics()
                .filter(|(name, _)| topic.is_none_or(|t| t == name.as_str()))
                .flat_map(|(name, t)| {
                    t.assignment.iter().enumerate().map(|(p, replicas)| {
                        let p = u32::try_from(p).unwrap_or(u32::MAX);
                        (PartitionId::new(name.clone(), p), replicas.clone())
                    })
                })
                .collect()
        };
        let mut partitions = Vec::with_capacity(wanted.len());
        // Brokers to ask, and where each partition hosted elsewhere sits in `partitions`.
        let mut remote: std::collections::BTreeSet<NodeId> = Default::default();
        let mut elsewhere: HashMap<PartitionId, usize> = HashMap::new();
        for (id, replicas) in wanted {
            let group = self.groups.read().get(&id).cloned();
            match group {
                Some(group) => partitions.push(self.partition_metadata(&group, replicas)),
                None if local_only => {}
                None => {
                    remote.extend(replicas.iter().copied());
                    elsewhere.insert(id.clone(), partitions.len());
                    partitions.push(PartitionMetadata {
                        partition: id,
                        leader: None,
                        term: 0,
                        replicas,
                        isr: Vec::new(),
                        log_start: 0,
                        high_watermark: 0,
                    });
                }
            }
        }
        if !remote.is_empty() {
            // Ask each broker hosting such partitions, at once, and keep, per partition, the
            // answer that names a leader in the highest term.
            let asks = remote.iter().map(|broker| {
                let request = MetadataRequest {
                    topic: topic.map(str::to_string),
                    local_only: true,
                };
                self.ask::<_, MetadataResponse>(*broker, Op::Metadata, request)
            });
            let answers = futures_util::future::join_all(asks).await;
            for answer in answers.into_iter().flatten() {
                for theirs in answer.partitions {
                    let Some(slot) = elsewhere
                        .get(&theirs.partition)
                        .and_then(|i| partitions.get_mut(*i))
                    else {
                        continue;
                    };
                    let better = theirs.leader.is_some()
                        && (slot.leader.is_none() || theirs.term > slot.term);
                    if better {
                        let replicas = std::mem::take(&mut slot.replicas);
                        *slot = PartitionMetadata { replicas, ..theirs };
                    }
                }
            }
        }
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        MetadataResponse {
            broker: self.config.id,
            brokers,
            partitions,
        }
    }

    /// Sends a request to broker `to` and decodes its answer; `None` if it did not answer
    /// within an election timeout or answered an error.
    async fn ask<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        to: NodeId,
        op: Op,
        request: Req,
    ) -> Option<Resp> {
        let timeout = Duration::from_millis(
            self.config
                .request_timeout_ms
                .min(self.config.election_timeout_ms),
        );
        let result: std::result::Result<Resp, WireError> =
            self.forward(to, op, &request, timeout).await.ok()?;
        result.ok()
    }

    /// Sends a request to broker `to` and decodes its answer, waiting at most `timeout`.
    async fn forward<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        to: NodeId,
        op: Op,
        request: &Req,
        timeout: Duration,
    ) -> Result<std::result::Result<Resp, WireError>> {
        let unreachable = |reason: String| Error::NoBrokerReachable {
            tried: format!("broker {to} ({reason})"),
        };
        let peer = self
            .peers
            .get(to, true)
            .ok_or_else(|| unreachable("not a peer".into()))?;
        let body = crate::protocol::encode(request).map_err(|e| unreachable(e.to_string()))?;
        let bytes = self
            .peers
            .call(&peer, to, op, body, timeout)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        postcard::from_bytes(&bytes).map_err(|e| unreachable(format!("bad answer: {e}")))
    }

    /// Creates a topic through the metadata group: proposed here when this broker leads it,
    /// otherwise forwarded (once) to its leader.
    pub(crate) async fn create_topic(&self, request: CreateTopicRequest) -> Result<()> {
        check_topic_name(&request.name).map_err(|reason| Error::InvalidTopic { reason })?;
        if request.partitions == 0 || request.partitions > PARTITIONS_MAX {
            return Err(Error::InvalidTopic {
                reason: format!("a topic has 1 to {PARTITIONS_MAX} partitions"),
            });
        }
        let factor = usize::try_from(request.replication_factor).unwrap_or(usize::MAX);
        let (created, brokers) = {
            let catalog = self.catalog.read();
            if catalog.topic(&request.name).is_some() {
                return Err(Error::TopicExists(request.name));
            }
            (catalog.created(), catalog.brokers())
        };
        let assignment = crate::catalog::assign(&brokers, request.partitions, factor, created)
            .map_err(|reason| Error::InvalidTopic { reason })?;
        let command = MetaCommand::CreateTopic {
            name: request.name.clone(),
            assignment,
        };
        self.meta_command(command, request.forwarded, Op::CreateTopic, &request)
            .await
            .map_err(|e| match e {
                MetaError::Refused(Refused::TopicExists) => {
                    Error::TopicExists(request.name.clone())
                }
                MetaError::Refused(Refused::UnknownTopic) => {
                    Error::UnknownPartition(PartitionId::new(request.name.clone(), 0))
                }
                MetaError::Refused(Refused::Invalid(reason)) => Error::InvalidTopic { reason },
                MetaError::Failed(e) => e,
            })
    }

    /// Deletes a created topic through the metadata group (see
    /// [`create_topic`](Self::create_topic)).
    pub(crate) async fn delete_topic(&self, request: DeleteTopicRequest) -> Result<()> {
        let unknown = || Error::UnknownPartition(PartitionId::new(request.name.clone(), 0));
        match self.catalog.read().topic(&request.name) {
            None => return Err(unknown()),
            Some(t) if t.id == CONFIGURED_TOPIC_ID => {
                return Err(Error::InvalidTopic {
                    reason: format!(
                        "topic {} is configured on the brokers and cannot be deleted",
                        request.name
                    ),
                });
            }
            Some(_) => {}
        }
        let command = MetaCommand::DeleteTopic {
            name: request.name.clone(),
        };
        self.meta_command(command, request.forwarded, Op::DeleteTopic, &request)
            .await
            .map_err(|e| match e {
                MetaError::Refused(Refused::UnknownTopic) => unknown(),
                MetaError::Refused(Refused::TopicExists) => {
                    Error::TopicExists(request.name.clone())
                }
                MetaError::Refused(Refused::Invalid(reason)) => Error::InvalidTopic { reason },
                MetaError::Failed(e) => e,
            })
    }

    /// Commits `command` in the metadata log and answers once the metadata leader has applied
    /// it: on the leader directly; elsewhere by forwarding `request` (marked as forwarded) to
    /// the leader, unless it was forwarded already (a broker that forwarded applies it a
    /// moment later, as every broker does).
    async fn meta_command<Req: Serialize + Clone + Forwardable>(
        &self,
        command: MetaCommand,
        forwarded: bool,
        op: Op,
        request: &Req,
    ) -> std::result::Result<(), MetaError> {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.request_timeout_ms);
        // Wait (boundedly) for the metadata group to have a leader.
        let leader = loop {
            if let Some(leader) = self.meta.raft.state().leader {
                break leader;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MetaError::Failed(Error::TryAgain {
                    partition: self.meta.id.clone(),
                    reason: "the metadata group has no leader yet".into(),
                }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if leader != self.config.id {
            if forwarded {
                return Err(MetaError::Failed(Error::NotLeader {
                    partition: self.meta.id.clone(),
                    leader: None,
                }));
            }
            let answer: std::result::Result<(), WireError> = self
                .forward(
                    leader,
                    op,
                    &request.clone().forwarded(),
                    deadline.saturating_duration_since(tokio::time::Instant::now()),
                )
                .await
                .map_err(MetaError::Failed)?;
            return answer.map_err(|e| MetaError::Failed(e.into_error(&self.meta.id, 0)));
        }
        let value = postcard::to_stdvec(&command)
            .map_err(|e| MetaError::Failed(Error::Remote(e.to_string())))?;
        let (records, record_count) = encode_records(&[Record::new(value)], META_RECORD_BYTES_MAX)
            .map_err(MetaError::Failed)?;
        let append = AppendRequest {
            timestamp_ms: 0,
            records,
            record_count,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let info = self
            .append_to(&self.meta, append, None)
            .await
            .map_err(MetaError::Failed)?;
        let offset = info.base_offset.get();
        let mut applied = self.catalog_applied.subscribe();
        let waited =
            tokio::time::timeout_at(deadline, applied.wait_for(|next| *next > offset)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(MetaError::Failed(Error::Indeterminate {
                partition: self.meta.id.clone(),
                reason: "committed, but not applied here in time".into(),
            }));
        }
        match self.catalog.read().outcome(offset) {
            Some(Ok(())) => Ok(()),
            Some(Err(refused)) => Err(MetaError::Refused(refused)),
            None => Err(MetaError::Failed(Error::Indeterminate {
                partition: self.meta.id.clone(),
                reason: "the outcome is no longer remembered".into(),
            })),
        }
    }

    /// Applies the metadata records committed since the last call to the catalog.
    fn catch_up_catalog(&self) -> Result<bool> {
        let mut progressed = false;
        // Bounded: each round consumes at least one record or stops.
        loop {
            let next = self.catalog.read().next_offset();
            let batches = read_committed(&self.meta, Offset(next), 1 << 20)?;
            if batches.is_empty() {
                return Ok(progressed);
            }
            let mut catalog = self.catalog.write();
            for batch in &batches {
                for (offset, record) in batch.records() {
                    if offset.get() < catalog.next_offset() {
                        continue;
                    }
                    let command = postcard::from_bytes::<MetaCommand>(&record.value).ok();
                    if command.is_none() {
                        tracing::warn!(
                            offset = offset.get(),
                            "metadata record is not a command; skipped"
                        );
                    }
                    catalog.apply(offset.get(), command.as_ref());
                    if let Some(MetaCommand::RegisterBroker { id, .. }) = &command
                        && let Some(addr) = catalog.broker_addr(*id)
                    {
                        self.peers.set_addr(*id, addr);
                    }
                    progressed = true;
                }
            }
            let next = catalog.next_offset();
            drop(catalog);
            self.catalog_applied.send_replace(next);
        }
    }

    /// Starts the replicas the catalog assigns to this broker and stops those of deleted
    /// topics. Errors are logged; the next round retries.
    async fn reconcile(&self) {
        let _changing = self.replicas_changing.lock().await;
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        let me = self.config.id;
        // Per partition hosted here: the topic id, its replicas (those a move leaves
        // included: they keep theirs until the move is done), and the replicas that may
        // initialize its group (none once it was moved).
        type Desired = (u64, Vec<NodeId>, Option<Vec<NodeId>>);
        let desired: HashMap<PartitionId, Desired> = {
            let catalog = self.catalog.read();
            catalog
                .topics()
                .filter(|(_, t)| t.id != CONFIGURED_TOPIC_ID)
                .flat_map(|(name, t)| {
                    (0..t.assignment.len()).filter_map(move |p| {
                        let assigned = t.assignment.get(p)?;
                        let leaving = t.leaving.get(p)?;
                        if !assigned.contains(&me) && !leaving.contains(&me) {
                            return None;
                        }
                        let hosts: Vec<NodeId> = assigned.iter().chain(leaving).copied().collect();
                        let founders = (!t.moved.get(p)?).then(|| assigned.clone());
                        let p = u32::try_from(p).unwrap_or(u32::MAX);
                        Some((PartitionId::new(name.clone(), p), (t.id, hosts, founders)))
                    })
                })
                .collect()
        };
        let stale: Vec<Arc<Group>> = {
            let mut groups = self.groups.write();
            let ids: Vec<PartitionId> = groups
                .iter()
                .filter(|(id, g)| {
                    g.topic_id != CONFIGURED_TOPIC_ID
                        && desired.get(*id).is_none_or(|(t, _, _)| *t != g.topic_id)
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| groups.remove(id)).collect()
        };
        for group in stale {
            self.remove_replica(group).await;
        }
        for (id, (topic_id, replicas, founders)) in desired {
            if self.groups.read().contains_key(&id) {
                continue;
            }
            let dir = self.partition_dir(&id);
            let opened = async {
                let prepared = dir.clone();
                tokio::task::spawn_blocking(move || prepare_partition_dir(&prepared, topic_id))
                    .await
                    .map_err(|e| Error::Io(std::io::Error::other(e)))??;
                let others = replicas.iter().filter(|r| **r != me).count();
                open_replica(others, self.replica_spec(&id, topic_id)).await
            };
            match opened.await {
                Ok(group) => {
                    self.groups.write().insert(id.clone(), Arc::clone(&group));
                    tracing::info!(partition = %id, topic_id, "replica started");
                    if let Some(founders) = founders {
                        self.initialize(&group, &founders).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(partition = %id, error = %e, "replica not started; will retry")
                }
            }
        }
    }

    /// Removes the directories of deleted topics' replicas that never started here (this
    /// broker was down while the topic was deleted).
    fn sweep_deleted(&self) {
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            let Ok(text) = std::fs::read_to_string(dir.join(PARTITION_METADATA)) else {
                continue;
            };
            let Some(topic_id) = parse_topic_id(&text) else {
                continue;
            };
            let running = self.groups.read().values().any(|g| g.topic_id == topic_id);
            if !running && self.catalog.read().is_deleted(topic_id) {
                match discard_dir(&dir, topic_id) {
                    Ok(()) => {
                        tracing::info!(path = %dir.display(), "data of a deleted topic removed")
                    }
                    Err(e) => {
                        tracing::warn!(path = %dir.display(), error = %e, "could not remove a deleted topic's data")
                    }
                }
            }
        }
    }

    fn partition_dir(&self, id: &PartitionId) -> PathBuf {
        partition_dir(&self.config.data_dir, id)
    }

    /// How to open this broker's replica of partition `id` of topic `topic_id`.
    fn replica_spec(&self, id: &PartitionId, topic_id: u64) -> ReplicaSpec {
        ReplicaSpec {
            me: self.config.id,
            timing: self.timing,
            peers: Arc::clone(&self.peers),
            id: id.clone(),
            topic_id,
            dir: self.partition_dir(id),
            log: self.config.log.clone(),
            durability: self.config.durability,
        }
    }

    /// Has `group` rebuilt from its leader ([`rebuild_replica`](Self::rebuild_replica)), once;
    /// the metadata replica is fenced instead (it refuses its leader from then on; the
    /// catalog cannot be rebuilt under a running broker). Needs a tokio runtime; outside one
    /// the replica is rebuilt when it is next found damaged inside one, or at the next start.
    fn request_rebuild(self: &Arc<Self>, group: Arc<Group>, cause: RebuildCause) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if group.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        if Arc::ptr_eq(&group, &self.meta) {
            tracing::error!(
                cause = ?cause,
                "the metadata replica's log is damaged or contradicts its leader: it is fenced \
                 until an operator restores it"
            );
            return;
        }
        runtime.spawn(Arc::clone(self).rebuild_replica(group, cause));
    }

    /// Rebuilds a replica from its leader: one whose committed entries the leader's log
    /// contradicts (the cluster lost entries it had committed, which `Replicated` durability
    /// allows: Raft cannot undo a committed entry), or one whose files a read found damaged.
    /// The replica starts over, empty but for its vote (it must never vote twice in a term),
    /// and copies the leader's log; a damaged one also gives no vote until it has applied
    /// what it had known committed. Its old directory is discarded.
    ///
    /// A no-op if the replica was stopped or replaced meanwhile, or the broker is closing.
    async fn rebuild_replica(self: Arc<Self>, old: Arc<Group>, cause: RebuildCause) {
        let _changing = self.replicas_changing.lock().await;
        let id = old.id.clone();
        let current = self.groups.read().get(&id).cloned();
        if self.closing.load(Ordering::Acquire) || !current.is_some_and(|g| Arc::ptr_eq(&g, &old)) {
            return;
        }
        // A damaged replica may have lost entries it acknowledged: it gives no vote until it
        // holds again what it had known committed. One whose entries the cluster lost has
        // nothing the others could miss.
        let below = match &cause {
            RebuildCause::Contradicted(index) => {
                tracing::error!(
                    partition = %id,
                    index,
                    "the leader's log contradicts an entry this replica holds as committed: \
                     the cluster lost committed entries (possible under Replicated durability \
                     after power losses); rebuilding this replica from the leader"
                );
                None
            }
            RebuildCause::Damaged(e) => {
                tracing::error!(
                    partition = %id,
                    error = %e,
                    "this replica's files are damaged; rebuilding it from the leader"
                );
                old.store.rebuild_mark()
            }
        };
        self.groups.write().remove(&id);
        // This task and the map held it; the map let go.
        stop_group(&old, 1).await;
        let (topic_id, vote) = (old.topic_id, old.store.vote());
        drop(old);
        let dir = self.partition_dir(&id);
        let rebuilt = async {
            let target = dir.clone();
            tokio::task::spawn_blocking(move || {
                replace_with_empty_replica(&target, topic_id, vote, below)
            })
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))??;
            open_group(self.replica_spec(&id, topic_id)).await
        };
        match rebuilt.await {
            Ok(group) => {
                self.groups.write().insert(id.clone(), group);
                tracing::info!(partition = %id, "replica rebuilt empty; copying the leader's log");
            }
            // A created topic's replica is started again by the metadata follower; a
            // configured topic's stays down until the broker restarts.
            Err(e) => tracing::error!(partition = %id, error = %e, "replica rebuild failed"),
        }
    }

    /// Stops a replica of a deleted topic and removes its directory.
    async fn remove_replica(&self, group: Arc<Group>) {
        stop_group(&group, 1).await;
        let (id, topic_id) = (group.id.clone(), group.topic_id);
        drop(group);
        let dir = self.partition_dir(&id);
        match discard_dir(&dir, topic_id) {
            Ok(()) => {
                tracing::info!(partition = %id, topic_id, "replica of a deleted topic removed")
            }
            Err(e) => {
                tracing::warn!(partition = %id, error = %e, "could not remove a deleted replica")
            }
        }
    }
}

/// Why a replica is rebuilt from its leader.
#[derive(Debug)]
enum RebuildCause {
    /// The leader's log contradicts the entry at this index, which the replica holds as
    /// committed.
    Contradicted(u64),
    /// A read found this damage in the replica's files.
    Damaged(Error),
}

/// Stops a group's Raft member, then waits (at most 5 s) until requests still being served
/// and syncs still in flight let go of it: only `holders` handles are left.
async fn stop_group(group: &Arc<Group>, holders: usize) {
    group.raft.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while Arc::strong_count(group) > holders || group.store.syncs_in_flight() > 0 {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Why a metadata command did not take effect.
enum MetaError {
    Refused(Refused),
    Failed(Error),
}

/// An admin request that can be marked as forwarded by a broker to the metadata leader.
trait Forwardable {
    fn forwarded(self) -> Self;
}

impl Forwardable for CreateTopicRequest {
    fn forwarded(self) -> Self {
        CreateTopicRequest {
            forwarded: true,
            ..self
        }
    }
}

impl Forwardable for ProposeRequest {
    fn forwarded(self) -> Self {
        ProposeRequest {
            forwarded: true,
            ..self
        }
    }
}

impl Forwardable for DeleteTopicRequest {
    fn forwarded(self) -> Self {
        DeleteTopicRequest {
            forwarded: true,
            ..self
        }
    }
}

/// Follows the metadata log: applies each committed command to the catalog, then starts and
/// stops replicas to match it. Runs until shutdown.
async fn follow_metadata(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut applied = shared.meta.sm.subscribe();
    let mut registering: Option<tokio::task::JoinHandle<()>> = None;
    let mut adding: Option<tokio::task::JoinHandle<()>> = None;
    let mut moving: HashMap<PartitionId, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let progressed = match shared.catch_up_catalog() {
            Ok(progressed) => progressed,
            Err(e) => {
                tracing::warn!(error = %e, "metadata log unreadable; will retry");
                false
            }
        };
        shared.reconcile().await;
        if progressed {
            shared.sweep_deleted();
        }
        // Until the catalog has this broker's address, one registration at a time is in
        // flight; a failed one is tried again on the next round (at least a second later).
        let me = shared.config.id;
        if shared.catalog.read().broker_addr(me) != Some(shared.addr)
            && registering
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let shared = Arc::clone(&shared);
            registering = Some(tokio::spawn(async move {
                if let Err(e) = shared.register().await {
                    tracing::debug!(error = %e, "registering this broker's address failed; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
        shared.drive_moves(&mut moving);
        // The metadata leader makes every broker that joined a learner of the metadata group,
        // one at a time (a membership change waits for the previous one).
        if shared.meta.raft.state().leader == Some(me)
            && adding
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let members = shared.meta.raft.member_ids();
            let missing = shared
                .catalog
                .read()
                .brokers()
                .into_iter()
                .find(|id| !members.contains(id));
            if let Some(id) = missing
                && let Some(addr) = shared.broker_addr(id)
            {
                let shared = Arc::clone(&shared);
                adding = Some(tokio::spawn(async move {
                    match shared.meta.raft.add_learner(id, addr.to_string()).await {
                        Ok(()) => tracing::info!(broker = id, "broker joined the metadata group"),
                        Err(e) => {
                            tracing::debug!(broker = id, error = %e, "adding a learner failed; will retry");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }));
            }
        }
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = applied.changed() => {}
            // Retries replicas that failed to start.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
    for task in [registering, adding]
        .into_iter()
        .flatten()
        .chain(moving.into_values())
    {
        task.abort();
    }
}

/// A replica's directory: `{topic}-{partition}` in the broker's data directory.
fn partition_dir(data_dir: &Path, id: &PartitionId) -> PathBuf {
    data_dir.join(format!("{}-{}", id.topic, id.partition))
}

/// The file in a created topic's partition directory that names the topic's id.
const PARTITION_METADATA: &str = "partition.metadata";

/// Makes `dir` ready to hold a replica of created topic `topic_id`: a directory left by an
/// earlier topic of the same name (a lower id, or none recorded) is discarded first.
///
/// A directory of a *later* topic of that name (a higher id: ids only grow) is never touched:
/// after a crash the catalog is rebuilt from an older committed point and may still name the
/// earlier topic for a moment; discarding the later one's data would lose acknowledged
/// records and this replica's Raft vote. The caller retries once the catalog caught up.
fn prepare_partition_dir(dir: &Path, topic_id: u64) -> Result<()> {
    let marker = dir.join(PARTITION_METADATA);
    match std::fs::read_to_string(&marker) {
        Ok(text) => match parse_topic_id(&text) {
            Some(found) if found == topic_id => return Ok(()),
            Some(found) if found > topic_id => {
                return Err(Error::Io(std::io::Error::other(format!(
                    "{} holds topic id {found}, newer than {topic_id}: waiting for the \
                     catalog to catch up",
                    dir.display()
                ))));
            }
            found => discard_dir(dir, found.unwrap_or(0))?,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.exists() {
                discard_dir(dir, 0)?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    std::fs::create_dir_all(dir)?;
    write_partition_metadata(dir, topic_id)?;
    if let Some(parent) = dir.parent() {
        crate::segment::sync_dir(parent)?;
    }
    Ok(())
}

/// Writes `partition.metadata` (the topic id) into `dir` durably.
fn write_partition_metadata(dir: &Path, topic_id: u64) -> Result<()> {
    let marker = dir.join(PARTITION_METADATA);
    let tmp = dir.join(format!("{PARTITION_METADATA}.tmp"));
    std::fs::write(&tmp, format!("version: 0\ntopic_id: {topic_id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &marker)?;
    crate::segment::sync_dir(dir)?;
    Ok(())
}

fn parse_topic_id(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|v| v.trim().parse().ok())
}

/// Renames `dir` to `{dir}.{topic_id}-delete` (so that its name is free at once), then
/// removes it. A crash in between leaves the renamed directory for the next start.
fn discard_dir(dir: &Path, topic_id: u64) -> Result<()> {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let doomed = dir.with_file_name(format!("{name}.{topic_id}-delete"));
    // Left by an earlier discard that crashed between its rename and its removal.
    if doomed.exists() {
        std::fs::remove_dir_all(&doomed)?;
    }
    match std::fs::rename(dir, &doomed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    std::fs::remove_dir_all(&doomed)?;
    Ok(())
}

/// Replaces the replica directory `dir` with an empty one that holds only its topic id and
/// `vote`. The new directory is made complete beside the old one first (`{dir}.rebuild`), then
/// the old one is discarded and the new one renamed into place; a crash in between leaves
/// either the old directory (the rebuild never happened) or only the new one, which
/// [`remove_deleted_dirs`] moves into place at the next start.
fn replace_with_empty_replica(
    dir: &Path,
    topic_id: u64,
    vote: Option<Vote>,
    rebuilt_below: Option<u64>,
) -> Result<()> {
    let staging = rebuild_staging(dir);
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::create_dir_all(&staging)?;
    write_partition_metadata(&staging, topic_id)?;
    crate::raft::storage::write_meta(
        &staging.join(crate::raft::storage::RAFT_META),
        &crate::raft::storage::RaftMeta {
            vote,
            rebuilt_below,
            ..Default::default()
        },
    )?;
    discard_dir(dir, topic_id)?;
    std::fs::rename(&staging, dir)?;
    if let Some(parent) = dir.parent() {
        crate::segment::sync_dir(parent)?;
    }
    Ok(())
}

/// Where a replica directory's replacement is built.
fn rebuild_staging(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(REBUILD_SUFFIX);
    dir.with_file_name(name)
}

/// Suffix of a replica directory's replacement under construction.
const REBUILD_SUFFIX: &str = ".rebuild";

/// Finishes what a crash interrupted in the data directory: removes directories of deleted
/// replicas, and completes replica rebuilds (a finished replacement whose old directory is
/// gone is moved into place; one whose old directory is still there was never used).
fn remove_deleted_dirs(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !path.is_dir() {
            continue;
        }
        let done = if name.ends_with("-delete") {
            std::fs::remove_dir_all(&path)
        } else if let Some(target) = name.strip_suffix(REBUILD_SUFFIX) {
            let target = path.with_file_name(target);
            if target.exists() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::rename(&path, &target).and_then(|()| {
                    crate::segment::sync_dir(data_dir).map_err(std::io::Error::other)
                })
            }
        } else {
            Ok(())
        };
        if let Err(e) = done {
            tracing::warn!(path = %path.display(), error = %e, "could not finish an interrupted replica change");
        }
    }
}

/// What opening one replica takes.
#[derive(Clone)]
struct ReplicaSpec {
    me: NodeId,
    timing: Timing,
    peers: Arc<PeerSet>,
    id: PartitionId,
    topic_id: u64,
    dir: PathBuf,
    log: LogConfig,
    durability: Durability,
}

/// Opens (recovering) one replica's log in its directory and starts its Raft group member.
async fn open_group(spec: ReplicaSpec) -> Result<Arc<Group>> {
    // Recovery reads (and may repair) files: off the runtime's threads.
    let (dir, log, durability) = (spec.dir, spec.log, spec.durability);
    let (store, sm) = tokio::task::spawn_blocking(move || -> Result<(LogStore, StateMachine)> {
        let log = PartitionLog::open(&dir, log)?;
        let store = LogStore::open(log, durability)?;
        let sm = StateMachine::open(store.clone())?;
        Ok((store, sm))
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e)))??;
    // openraft reads the log as it starts; damage it found is reported as such, not as the
    // text openraft makes of it.
    let (me, id, timing) = (spec.me, spec.id, spec.timing);
    let raft = Replica::start(
        me,
        id.clone(),
        timing,
        spec.peers,
        store.clone(),
        sm.clone(),
    )
    .await
    .map_err(|e| store.take_damage().unwrap_or(e))?;
    Ok(Arc::new(Group {
        id,
        topic_id: spec.topic_id,
        raft,
        store,
        sm,
        rebuilding: AtomicBool::new(false),
    }))
}

/// [`open_group`] for a partition replica. A replica whose files fail validation (a damaged
/// sealed segment, a bad snapshot) is rebuilt empty and copies the leader's log, instead of
/// keeping the broker from starting: it keeps its vote, and gives none until it holds again
/// what it had known committed (`RaftMeta::rebuilt_below`). A replica whose `raft-meta` is
/// unreadable cannot keep its vote and is not rebuilt, nor is the only replica of a
/// partition (`others`: how many other brokers host one): the error stands.
async fn open_replica(others: usize, spec: ReplicaSpec) -> Result<Arc<Group>> {
    let damage = match open_group(spec.clone()).await {
        Err(e @ Error::Corrupt { .. }) if others > 0 => e,
        other => return other,
    };
    let (id, topic_id, dir) = (&spec.id, spec.topic_id, spec.dir.clone());
    let meta_path = dir.join(crate::raft::storage::RAFT_META);
    let Ok(meta) = crate::raft::storage::read_meta(&meta_path) else {
        return Err(damage);
    };
    tracing::error!(
        partition = %id,
        error = %damage,
        "replica's files are damaged; rebuilding it from the leader (it votes again once it \
         holds what it had committed)"
    );
    let below = meta.rebuild_mark(meta.committed);
    let target = dir.clone();
    tokio::task::spawn_blocking(move || {
        replace_with_empty_replica(&target, topic_id, meta.vote, below)
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e)))??;
    open_group(spec).await
}

/// Serves peers' Raft RPCs by dispatching them to the partition's group.
struct NodeHandler {
    shared: Arc<Shared>,
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
                let group = if id.topic == METADATA_TOPIC && id.partition == 0 {
                    Some(Arc::clone(&self.shared.meta))
                } else {
                    self.shared.groups.read().get(&id).cloned()
                };
                group
                    .map(|g| (g, rest))
                    .ok_or_else(|| format!("unknown partition {id}"))
            });
        let refuse = |e: String| {
            postcard::to_stdvec(&std::result::Result::<(), String>::Err(e)).unwrap_or_default()
        };
        let (group, rest) = match found {
            Ok(found) => found,
            Err(e) => return refuse(e),
        };
        // openraft stopped this group on a read that failed validation (replicating from a
        // damaged segment): the replica is rebuilt from the new leader.
        if let Some(damage) = group.store.take_damage() {
            self.shared
                .request_rebuild(Arc::clone(&group), RebuildCause::Damaged(damage));
        }
        if op == Op::Vote && group.store.abstains(group.sm.last_applied()) {
            return refuse(
                "this replica was rebuilt after damage and votes again once it holds what it \
                 had committed"
                    .into(),
            );
        }
        match group.raft.serve(op, rest).await {
            Served::Reply(reply) => reply,
            Served::ContradictsCommitted(index) => {
                self.shared
                    .request_rebuild(group, RebuildCause::Contradicted(index));
                refuse(format!(
                    "this replica's committed log contradicts the request at index {index}: \
                     replica rebuilding"
                ))
            }
        }
    }
}

/// Decodes a client request's body.
fn decode_request<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> std::result::Result<T, WireError> {
    postcard::from_bytes(body).map_err(|e| WireError::Other(format!("bad request: {e}")))
}

fn wire(e: Error) -> WireError {
    WireError::from_error(&e)
}

impl Handler for NodeHandler {
    fn handle(self: Arc<Self>, op: Op, body: Vec<u8>, turn: Turn) -> BoxFuture<Vec<u8>> {
        Box::pin(async move {
            let shared = &self.shared;
            // Only produce requests keep their connection's order (see `Replica::write`);
            // any other passes its turn on at once.
            let turn = matches!(op, Op::Produce).then_some(turn);
            match op {
                Op::AppendEntries | Op::Vote | Op::Snapshot => self.raft_rpc(op, &body).await,
                Op::Produce => encode_response(
                    &async {
                        // The records stay in the frame's buffer on their way to the log.
                        let frame = bytes::Bytes::from(body);
                        let req: ProduceRequestRef<'_> = postcard::from_bytes(&frame)
                            .map_err(|e| WireError::Other(format!("bad request: {e}")))?;
                        let partition = req.partition.clone();
                        let batch = req.into_request(&frame);
                        let info = shared
                            .append_encoded(&partition, batch, turn)
                            .await
                            .map_err(wire)?;
                        Ok(ProduceResponse {
                            log_index: info.log_index.get(),
                            base_offset: info.base_offset.get(),
                            record_count: info.record_count,
                        })
                    }
                    .await,
                ),
                Op::Fetch => {
                    encode_response(&decode_request(&body).and_then(|req: FetchRequest| {
                        let id = &req.partition;
                        let batches = shared
                            .read(
                                &id.topic,
                                id.partition,
                                Offset(req.offset),
                                req.max_bytes as usize,
                            )
                            .map_err(wire)?;
                        Ok(batches
                            .iter()
                            .map(WireBatch::from_batch)
                            .collect::<Vec<_>>())
                    }))
                }
                Op::Metadata => encode_response(
                    &async {
                        let req: MetadataRequest = decode_request(&body)?;
                        Ok(shared.metadata(req.topic.as_deref(), req.local_only).await)
                    }
                    .await,
                ),
                Op::CreateTopic => encode_response(
                    &async {
                        shared
                            .create_topic(decode_request(&body)?)
                            .await
                            .map_err(wire)
                    }
                    .await,
                ),
                Op::Propose => encode_response(
                    &async { shared.propose(decode_request(&body)?).await.map_err(wire) }.await,
                ),
                Op::DeleteTopic => encode_response(
                    &async {
                        shared
                            .delete_topic(decode_request(&body)?)
                            .await
                            .map_err(wire)
                    }
                    .await,
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a crash the catalog can name an earlier topic of a name for a moment: the
    /// directory of the later topic is never discarded for it; an earlier one, or one without
    /// a marker, is.
    #[test]
    fn a_partition_directory_of_a_later_topic_is_never_discarded() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("t-0");
        prepare_partition_dir(&dir, 9).unwrap();
        std::fs::write(dir.join("data"), b"acknowledged").unwrap();
        assert!(
            prepare_partition_dir(&dir, 5).is_err(),
            "id 9 is newer than 5"
        );
        assert_eq!(std::fs::read(dir.join("data")).unwrap(), b"acknowledged");
        prepare_partition_dir(&dir, 9).unwrap();
        assert!(dir.join("data").exists(), "its own id: kept");
        prepare_partition_dir(&dir, 12).unwrap();
        assert!(!dir.join("data").exists(), "an earlier topic's data goes");
        // A directory without a marker, and a leftover `-delete` of the same name.
        let bare = data.path().join("u-0");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::create_dir_all(data.path().join("u-0.0-delete")).unwrap();
        std::fs::write(bare.join("stray"), b"x").unwrap();
        prepare_partition_dir(&bare, 3).unwrap();
        assert!(!bare.join("stray").exists());
        let names: Vec<String> = std::fs::read_dir(data.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with("-delete")), "{names:?}");
    }

    /// A rebuilt replica directory holds its topic id and vote and nothing else; a rebuild a
    /// crash interrupted is finished (or dropped, if it never replaced the old directory) at
    /// the next start.
    #[test]
    fn a_rebuilt_replica_keeps_only_its_vote_and_an_interrupted_rebuild_is_finished() {
        use crate::raft::storage::{RAFT_META, RaftMeta, read_meta, write_meta};
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("t-0");
        prepare_partition_dir(&dir, 7).unwrap();
        let vote = Vote::new(4, 2);
        let meta = RaftMeta {
            vote: Some(vote),
            last_purged: Some(openraft::LogId::new_term_index(3, 10)),
            committed: Some(openraft::LogId::new_term_index(4, 40)),
            rebuilt_below: None,
        };
        write_meta(&dir.join(RAFT_META), &meta).unwrap();
        std::fs::write(dir.join("00000000000000000011.log"), b"entries").unwrap();
        replace_with_empty_replica(&dir, 7, Some(vote), Some(40)).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [PARTITION_METADATA, RAFT_META]);
        let rebuilt = read_meta(&dir.join(RAFT_META)).unwrap();
        assert_eq!(
            rebuilt,
            RaftMeta {
                vote: Some(vote),
                rebuilt_below: Some(40),
                ..Default::default()
            }
        );
        assert_eq!(
            parse_topic_id(&std::fs::read_to_string(dir.join(PARTITION_METADATA)).unwrap()),
            Some(7)
        );
        assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 1);

        // Interrupted before the old directory went: the replacement is dropped.
        let staging = rebuild_staging(&dir);
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(dir.join("kept"), b"x").unwrap();
        remove_deleted_dirs(data.path());
        assert!(!staging.exists() && dir.join("kept").exists());
        // Interrupted after it went: the replacement moves into place.
        std::fs::rename(&dir, data.path().join("t-0.7-delete")).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("new"), b"y").unwrap();
        remove_deleted_dirs(data.path());
        assert!(!staging.exists() && dir.join("new").exists());
        assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 1);
    }
}
