//! The replicas a broker hosts: finding, opening, initializing, reconciling with the catalog
//! and removing them (bringing one back after damage or a stop is `supervise.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::catalog::{CONFIGURED_TOPIC_ID, Hosting};
use crate::config::LogConfig;
use crate::env::Env;
use crate::error::{Error, Result};
use crate::log::PartitionLog;
use crate::raft::replica::{Replica, Timing};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::LogStore;
use crate::transport::PeerSet;
use crate::types::Durability;
use crate::types::{NodeId, PartitionId};

use super::replica_dir::{
    PARTITION_METADATA, discard_dir, parse_topic_id, partition_dir, prepare_partition_dir,
    replace_with_empty_replica,
};
use super::{Broker, HostedReplica};

/// Replicas a broker opens at once when its catalog asks for many (a topic of many
/// partitions created, or a broker back after missing a few).
const REPLICAS_STARTED_AT_ONCE: usize = 32;
impl Broker {
    /// Every replica this broker runs, its member of the metadata Raft group included.
    pub(super) fn all_replicas(&self) -> Vec<Arc<HostedReplica>> {
        let mut replicas: Vec<Arc<HostedReplica>> =
            self.replicas.read().values().cloned().collect();
        replicas.push(Arc::clone(&self.meta));
        replicas
    }

    /// Initializes a fresh Raft group whose members are `replicas`, before `replica` can be
    /// reached: every founding replica writes the same first entry (the Raft group's membership),
    /// so that each is a voter from the start. The first replica (the preferred leader; the lowest
    /// broker id for the metadata Raft group) runs for leader at once (openraft's `initialize`
    /// starts a campaign on every founder), and again every few milliseconds until it leads or
    /// an election timeout has passed (its peers open their replicas as they learn of the
    /// Raft group, see `Replica::run_for_leader_soon`); the k-th other one runs no further election
    /// before k + 1 election timeouts have passed, so that the preferred leader usually wins,
    /// and a founder that comes up after the Raft group formed follows its leader instead of
    /// disturbing it. On a replica that has a log or a vote, this does nothing.
    ///
    /// Why every founder, and why before it is reachable: openraft refuses to initialize a
    /// replica once it has seen a vote, and a replica with no membership is no voter and never
    /// runs for leader. A founder that granted its vote to the preferred leader before holding
    /// the membership itself was therefore stuck for good if that leader stopped before it
    /// replicated its first entry: the Raft group never formed while that broker stayed down (the
    /// fault schedules at real sizes found this, the preferred leader of a partition stopped
    /// 76 ms after the cluster started; the others initialized only later, and only while they
    /// knew no leader, which they did).
    pub(super) async fn initialize(&self, replica: &Arc<HostedReplica>, replicas: &[NodeId]) {
        let Some(rank) = replicas.iter().position(|id| *id == self.config.id) else {
            return;
        };
        let members = self.members(replicas);
        if rank == 0 {
            if replica.raft.initialize(&members).await {
                let weak = Arc::downgrade(replica);
                let within = self.config.election_timeout;
                tokio::spawn(async move {
                    if let Some(replica) = weak.upgrade() {
                        replica.raft.run_for_leader_soon(within).await;
                    }
                });
            }
            return;
        }
        replica.raft.allow_elections(false);
        let initialized = replica.raft.initialize(&members).await;
        if !initialized {
            replica.raft.allow_elections(true);
            return;
        }
        let weak = Arc::downgrade(replica);
        let delay = self.config.election_timeout * (rank as u32 + 1);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            // A replica stopped meanwhile (its topic deleted, the broker shut down) is gone.
            if let Some(replica) = weak.upgrade() {
                replica.raft.allow_elections(true);
            }
        });
    }

    /// What this broker has yet to open of what its metadata log places on it: the log's
    /// committed records not applied yet, and each replica the catalog places here that is
    /// neither running nor down (for [`Node::wait_ready`](crate::Node::wait_ready)).
    pub(super) fn not_open_yet(&self) -> Vec<String> {
        let (applied, placed) = {
            let catalog = self.catalog.read();
            (catalog.next_offset(), catalog.hosted_by(self.config.id))
        };
        let mut missing = Vec::new();
        if applied < self.meta.committed_end().get() {
            missing.push("the metadata log (applying)".to_string());
        }
        let running: std::collections::HashSet<PartitionId> =
            self.replicas.read().keys().cloned().collect();
        let down: std::collections::HashSet<PartitionId> =
            self.down.lock().keys().cloned().collect();
        missing.extend(
            placed
                .into_keys()
                .filter(|id| !running.contains(id) && !down.contains(id))
                .map(|id| format!("{id} (opening)")),
        );
        missing
    }

    /// Brokers' ids and addresses, as a Raft group's initial membership.
    pub(super) fn members(&self, ids: &[NodeId]) -> BTreeMap<NodeId, String> {
        ids.iter()
            .filter_map(|id| Some((*id, self.broker_addr(*id)?.to_string())))
            .collect()
    }

    /// The replica of a partition hosted here. A partition of a known topic that is hosted
    /// elsewhere is [`Error::NotLeader`] without a hint (ask for metadata); one past its topic's
    /// partitions is [`Error::UnknownPartition`], one of no topic [`Error::UnknownTopic`].
    pub(super) fn replica(&self, id: &PartitionId) -> Result<Arc<HostedReplica>> {
        if let Some(replica) = self.replicas.read().get(id) {
            return Ok(Arc::clone(replica));
        }
        let partitions = match self.catalog.read().topic(&id.topic) {
            Some(t) => t.assignment.len(),
            None => return Err(Error::UnknownTopic(id.topic.clone())),
        };
        if (id.partition as usize) < partitions {
            return Err(Error::NotLeader {
                partition: id.clone(),
                leader: None,
            });
        }
        Err(Error::UnknownPartition(id.clone()))
    }

    /// Starts the replicas the catalog assigns to this broker and stops those of deleted
    /// topics. Errors are logged; the next round retries.
    pub(super) async fn reconcile(&self) {
        let _changing = self.replicas_changing.lock().await;
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        let me = self.config.id;
        let desired = self.catalog.read().hosted_by(me);
        let stale: Vec<Arc<HostedReplica>> = {
            let mut replicas = self.replicas.write();
            let ids: Vec<PartitionId> = replicas
                .iter()
                .filter(|(id, g)| {
                    g.topic_id != CONFIGURED_TOPIC_ID
                        && desired.get(*id).is_none_or(|h| h.topic_id != g.topic_id)
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| replicas.remove(id)).collect()
        };
        for replica in stale {
            let moved = self
                .catalog
                .read()
                .topic(&replica.id.topic)
                .is_some_and(|t| t.id == replica.topic_id);
            self.remove_replica(replica, moved).await;
        }
        let to_open: Vec<(PartitionId, Hosting)> = desired
            .into_iter()
            // A replica that is down is the supervisor's to bring back (reopened here, it
            // would skip the rebuild a storage error calls for, and the pause between tries).
            .filter(|(id, _)| {
                !self.replicas.read().contains_key(id) && !self.down.lock().contains_key(id)
            })
            .collect();
        if to_open.is_empty() {
            return;
        }
        // Several at once: a topic of many partitions has each replica's files created and
        // synced, and each Raft group initialized; one after another, their syncs would queue.
        use futures_util::stream::{self, StreamExt};
        let started: Vec<PartitionId> = stream::iter(to_open)
            .map(|(id, hosting)| async move {
                self.start_replica(&id, hosting.topic_id, &hosting.hosts, hosting.founders)
                    .await
                    .then_some(id)
            })
            .buffer_unordered(REPLICAS_STARTED_AT_ONCE)
            .filter_map(|started| async move { started })
            .collect()
            .await;
        if !started.is_empty() {
            let topics: std::collections::BTreeSet<&str> =
                started.iter().map(|id| id.topic.as_str()).collect();
            tracing::info!(replicas = started.len(), ?topics, "replicas started");
        }
    }

    /// Opens (creating or recovering) this broker's replica of partition `id` of topic
    /// `topic_id`, hosted on `replicas`, initializes its Raft group with `founders` if given,
    /// and makes it reachable. Whether it started (a failure is logged, and tried again on the
    /// next round).
    async fn start_replica(
        &self,
        id: &PartitionId,
        topic_id: u64,
        replicas: &[NodeId],
        founders: Option<Vec<NodeId>>,
    ) -> bool {
        let me = self.config.id;
        let dir = self.partition_dir(id);
        let opened = async {
            tokio::task::spawn_blocking(move || prepare_partition_dir(&dir, topic_id))
                .await
                .map_err(|e| Error::from(std::io::Error::other(e)))??;
            let others = replicas.iter().filter(|r| **r != me).count();
            open_or_rebuild_replica(others, self.replica_spec(id, topic_id)).await
        };
        match opened.await {
            Ok(replica) => {
                // Initialized before it is reachable (see `initialize`).
                if let Some(founders) = founders {
                    self.initialize(&replica, &founders).await;
                }
                self.apply_topic_settings(&replica);
                self.replicas
                    .write()
                    .insert(id.clone(), Arc::clone(&replica));
                tracing::debug!(partition = %id, topic_id, "replica started");
                true
            }
            Err(e) => {
                tracing::warn!(partition = %id, error = %e, "replica not started; will retry");
                false
            }
        }
    }

    /// Removes the directories of deleted topics' replicas that never started here (this
    /// broker was down while the topic was deleted).
    pub(super) fn sweep_deleted(&self) {
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
            let running = self
                .replicas
                .read()
                .values()
                .any(|g| g.topic_id == topic_id);
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

    pub(super) fn partition_dir(&self, id: &PartitionId) -> PathBuf {
        partition_dir(&self.config.data_dir, id)
    }

    /// How to open this broker's replica of partition `id` of topic `topic_id`.
    pub(super) fn replica_spec(&self, id: &PartitionId, topic_id: u64) -> ReplicaSpec {
        ReplicaSpec {
            me: self.config.id,
            timing: self.timing,
            peers: Arc::clone(&self.peers),
            id: id.clone(),
            topic_id,
            dir: self.partition_dir(id),
            log: if id.topic == crate::group::OFFSETS_TOPIC {
                LogConfig {
                    segment_bytes: self.config.offsets_segment_bytes,
                    ..self.config.log.clone()
                }
            } else {
                self.config.log.clone()
            },
            env: self.env.clone(),
            durability: self.config.durability,
            replication_bytes_max: self.config.payload_bytes_max(),
        }
    }

    /// Stops a replica of a deleted topic, or of a partition `moved` off this broker, and
    /// removes its directory.
    async fn remove_replica(&self, replica: Arc<HostedReplica>, moved: bool) {
        stop_replica(&replica, 1).await;
        let (id, topic_id) = (replica.id.clone(), replica.topic_id);
        drop(replica);
        let dir = self.partition_dir(&id);
        match discard_dir(&dir, topic_id) {
            Ok(()) if moved => {
                tracing::info!(partition = %id, topic_id, "replica removed: the partition moved off this broker")
            }
            Ok(()) => {
                tracing::info!(partition = %id, topic_id, "replica of a deleted topic removed")
            }
            Err(e) => {
                tracing::warn!(partition = %id, error = %e, "could not remove a deleted replica")
            }
        }
    }
}

/// The handles on a replica's log store while nothing but the replica uses it: its own and
/// its state machine's, and its Raft member's two (the same, for reads).
const STORE_HANDLES_AT_REST: usize = 4;

/// Whether anything besides `holders` handles on the replica still uses it or its log: a
/// request being served, a sync in flight, or a task of its stopped Raft member (openraft's
/// replication and state-machine tasks hold the store until the runtime drops them).
pub(super) fn still_held(replica: &Arc<HostedReplica>, holders: usize) -> bool {
    Arc::strong_count(replica) > holders
        || replica.store.syncs_in_flight() > 0
        || replica.store.handles() > STORE_HANDLES_AT_REST
}

/// What still holds a replica, for a log line: handles on it, syncs in flight and handles on
/// its log.
pub(super) fn holders_of(replica: &Arc<HostedReplica>) -> String {
    format!(
        "{}: {} handles, {} syncs in flight, {} handles on its log",
        replica.id,
        Arc::strong_count(replica),
        replica.store.syncs_in_flight(),
        replica.store.handles()
    )
}

/// Stops a replica's Raft member, then waits (at most 5 s) until requests still being served,
/// syncs still in flight and the member's own tasks let go of it: only `holders` handles on
/// the replica are left, and none on its log but the replica's.
pub(super) async fn stop_replica(replica: &Arc<HostedReplica>, holders: usize) {
    replica.raft.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while still_held(replica, holders) {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Stops replicas a broker opened but will not run, its start having failed part way: their
/// Raft members hold their logs (and directory locks) until stopped, however the handles on
/// them are dropped. Waits, as a shutdown does (at most `wait`), until only `holders` handles
/// (the caller's) are left on each and none on its log but its own; says which are still held
/// if that does not come.
pub(super) async fn let_go(replicas: &[Arc<HostedReplica>], holders: usize, wait: Duration) {
    for replica in replicas {
        replica.raft.shutdown().await;
    }
    let deadline = tokio::time::Instant::now() + wait;
    let busy = || replicas.iter().any(|r| still_held(r, holders));
    while busy() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held: Vec<String> = replicas
        .iter()
        .filter(|r| still_held(r, holders))
        .map(holders_of)
        .collect();
    if !held.is_empty() {
        tracing::warn!(
            ?wait,
            held = %held.join("; "),
            "a failed start left logs held by tasks that have not ended"
        );
    }
}

/// What opening one replica takes.
#[derive(Clone)]
pub(super) struct ReplicaSpec {
    pub(super) me: NodeId,
    pub(super) timing: Timing,
    pub(super) peers: Arc<PeerSet>,
    pub(super) id: PartitionId,
    pub(super) topic_id: u64,
    pub(super) dir: PathBuf,
    pub(super) log: LogConfig,
    pub(super) env: Env,
    pub(super) durability: Durability,
    /// The most bytes of frames one replication request carries: the receivers' frame limit
    /// less a request's own overhead.
    pub(super) replication_bytes_max: usize,
}

/// Opens (recovering) one replica's log in its directory and starts its Raft group member.
pub(super) async fn open_replica(spec: ReplicaSpec) -> Result<Arc<HostedReplica>> {
    // Recovery reads (and may repair) files: off the runtime's threads.
    let (dir, log, env, durability, budget) = (
        spec.dir,
        spec.log,
        spec.env,
        spec.durability,
        spec.replication_bytes_max,
    );
    let (store, sm) = tokio::task::spawn_blocking(move || -> Result<(LogStore, StateMachine)> {
        let log = PartitionLog::open_in(&dir, log, &env)?;
        let store = LogStore::open(log, durability, budget)?;
        let sm = StateMachine::open(store.clone())?;
        Ok((store, sm))
    })
    .await
    .map_err(|e| Error::from(std::io::Error::other(e)))??;
    // openraft reads the log as it starts; damage it found is reported as such, not as the
    // text openraft makes of it.
    let (me, id, timing) = (spec.me, spec.id, spec.timing);
    let raft = Replica::start(
        me,
        id.clone(),
        spec.topic_id,
        timing,
        spec.peers,
        store.clone(),
        sm.clone(),
    )
    .await
    .map_err(|e| store.take_damage().unwrap_or(e))?;
    Ok(Arc::new(HostedReplica {
        id,
        topic_id: spec.topic_id,
        raft,
        store,
        sm,
        rebuilding: AtomicBool::new(false),
        settings: parking_lot::RwLock::new(crate::topic_config::TopicSettings::unconstrained()),
    }))
}

/// [`open_replica`] for a partition replica. A replica whose files fail validation (a damaged
/// sealed segment, a bad snapshot) is rebuilt empty and copies the leader's log, instead of
/// keeping the broker from starting: it keeps its vote, and gives none until it holds again
/// what it had known committed (`RaftMeta::rebuilt_below`). A replica whose `raft-meta` is
/// unreadable cannot keep its vote and is not rebuilt, nor is the only replica of a
/// partition (`others`: how many other brokers host one): the error stands.
pub(super) async fn open_or_rebuild_replica(
    others: usize,
    spec: ReplicaSpec,
) -> Result<Arc<HostedReplica>> {
    let damage = match open_replica(spec.clone()).await {
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
    .map_err(|e| Error::from(std::io::Error::other(e)))??;
    open_replica(spec).await
}

/// Initializes every replica `broker` starts with (see [`Broker::initialize`]).
pub(super) async fn initialize_replicas(broker: &Broker) {
    // A joining broker's metadata replica is made a learner by the metadata Raft group's leader.
    if !broker.config.join {
        let all = broker.founders.clone();
        broker.initialize(&broker.meta, &all).await;
    }
    let hosted: Vec<Arc<HostedReplica>> = broker.replicas.read().values().cloned().collect();
    for replica in hosted {
        let replicas = broker
            .catalog
            .read()
            .topic(&replica.id.topic)
            .and_then(|t| t.assignment.get(replica.id.partition as usize).cloned())
            .unwrap_or_default();
        broker.initialize(&replica, &replicas).await;
    }
}
