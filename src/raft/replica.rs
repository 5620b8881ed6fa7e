//! [`Replica`]: one partition's Raft group member, behind an API that names no openraft type.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use openraft::Instant as _;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::impls::ProgressResponder;
use openraft::raft::ClientWriteResult;

use crate::error::{Error, Result};
use crate::raft::network::{ReplicaNetFactory, Served, serve};
use crate::raft::producers::{BATCHES_PER_PRODUCER, Check, PendingBatch};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::LogStore;
use crate::raft::types::{AppendRequest, AppendResponse, BrokerNode, C};
use crate::transport::frame::Op;
use crate::transport::{PeerSet, Turn};
use crate::types::{LeaderHint, NodeId, PartitionId, Term};

/// Raft timing for every replica of a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(crate) heartbeat: Duration,
    /// The lower bound; the upper is [`Timing::election_timeout_max`].
    pub(crate) election_timeout: Duration,
}

impl Timing {
    /// The upper bound of a member's election timeout: one and a half times the lower. It is
    /// also the leader's lease in openraft: a follower that heard its leader within it refuses
    /// votes and pre-votes. A broker's liveness session (twice the lower bound) outlasts it, so
    /// that once a broker is silent, the groups it led may elect at once.
    pub(crate) fn election_timeout_max(&self) -> Duration {
        self.election_timeout * 3 / 2
    }
}

/// `d` in whole milliseconds, as openraft's config takes them.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why a write was not committed.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Refused before appending: not the leader. The leader, if known, at the address its
    /// Raft group's membership names, in this replica's term.
    NotLeader(Option<LeaderHint>),
    /// Appended, then dropped by a leadership change: the outcome is unknown.
    Discarded,
    /// Refused for now, nothing written: the new leader has not yet applied its predecessors'
    /// entries, or an earlier copy of this producer batch is still being committed.
    TryAgain(&'static str),
    /// Refused, nothing written: the batch's sequence is not the producer's next.
    OutOfOrder {
        /// The sequence the producer's next batch must start at.
        expected: u32,
    },
    /// Refused, nothing written: a later epoch of the producer has written to the partition.
    Fenced {
        /// The producer's latest epoch the partition has taken.
        current: u16,
    },
    /// Anything else (shutdown, storage failure).
    Other(String),
}

/// What a replica knows of its Raft group.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplicaState {
    pub(crate) leader: Option<NodeId>,
    pub(crate) term: u64,
    pub(crate) last_log_index: Option<u64>,
    pub(crate) snapshot_index: Option<u64>,
    /// On the leader: every member's replication state.
    pub(crate) members: Option<BTreeMap<NodeId, Member>>,
}

/// A Raft group member as the leader sees it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Member {
    /// The last log index known to be on the member (`None`: nothing yet).
    pub(crate) matched: Option<u64>,
    /// How long ago the member last acknowledged the leader.
    pub(crate) ack_age: Option<Duration>,
}

/// Why a Raft group member's core stopped by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// A storage call failed (a failed sync, a full disk, damage openraft read): the log's
    /// files may not hold what the page cache showed.
    Storage(String),
    /// The core's task ended without a reason (it panicked).
    Ended,
    /// A dormant member could not be built again over its store: nothing was found wrong
    /// with its files, and opening them again from disk may succeed.
    NotBuilt(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Storage(e) => write!(f, "storage error: {e}"),
            Stopped::Ended => f.write_str("the raft core's task ended (panicked)"),
            Stopped::NotBuilt(e) => write!(f, "not built again after dormancy: {e}"),
        }
    }
}

/// One partition replica's Raft group member.
pub(crate) struct Replica {
    /// The openraft member, or its metrics while the replica is dormant (see `dormant.rs`).
    pub(super) life: parking_lot::RwLock<super::dormant::Life>,
    /// Uses of the running member under way ([`InUse`](super::dormant::InUse)).
    pub(super) users: std::sync::atomic::AtomicUsize,
    /// Held while the member is built again or dropped: one of either at a time.
    pub(super) waking: tokio::sync::Mutex<()>,
    /// Set by [`Replica::shutdown`]: the member is never built again.
    pub(super) shut: std::sync::atomic::AtomicBool,
    /// What building the member takes, kept to build it again after dormancy.
    pub(super) recipe: Recipe,
    /// Whether this member may run for leader on its election timer (see
    /// [`Replica::allow_elections`]), kept for a member built again.
    pub(super) elections: std::sync::atomic::AtomicBool,
    /// Whether the Raft group is quiet here (see `quiet.rs`).
    pub(super) quiet: super::quiet::Quiet,
    /// How long a woken leader waits for its followers' first acknowledgement before it
    /// writes (see [`Replica::wake_to_write`]).
    pub(super) lease_wait: Duration,
    /// Set by [`watch_leadership`] once the core stopped by itself (never by a shutdown).
    stopped: Arc<parking_lot::Mutex<Option<Stopped>>>,
    store: LogStore,
    sm: StateMachine,
    /// Serializes the check-and-propose of idempotent batches, so that the log holds them in
    /// the order they were checked in.
    gate: tokio::sync::Mutex<Proposed>,
    /// Whether a voter has refused this member a vote (see `ReplicaNetFactory::vote_refused`).
    pub(super) vote_refused: Arc<std::sync::atomic::AtomicBool>,
    /// Tests: how many of the next builds of the member fail, as if its store could not be
    /// read.
    #[cfg(test)]
    pub(crate) failing_builds: std::sync::atomic::AtomicU32,
}

/// What a replica's openraft member is built from.
pub(super) struct Recipe {
    pub(super) id: NodeId,
    pub(super) partition: PartitionId,
    topic_id: u64,
    timing: Timing,
    peers: Arc<PeerSet>,
}

/// Idempotent batches this replica proposed as leader and has not yet seen applied.
#[derive(Default)]
struct Proposed {
    /// The term they were proposed in; a new term forgets them (each was either committed,
    /// and so is applied before the new leader takes writes, or is lost).
    term: u64,
    by_producer: HashMap<u64, VecDeque<PendingBatch>>,
}

/// Logs each leadership this member wins or loses, at `info`, until the member stops (`leading`:
/// whether it leads as it starts, a dormant leader built again), and then
/// records in `stopped` why it stopped, unless that was a shutdown. It watches openraft's
/// server metrics, which change with the vote, the role and the membership only (never per
/// write); their sender is dropped when the core's task ends, however it ends.
fn watch_leadership(
    partition: PartitionId,
    me: NodeId,
    raft: &openraft::Raft<C, StateMachine>,
    stopped: Arc<parking_lot::Mutex<Option<Stopped>>>,
    mut leading: bool,
) {
    let mut metrics = raft.server_metrics();
    let all = raft.metrics();
    tokio::spawn(async move {
        // Ends when the member stops (the sender is dropped).
        while metrics.changed().await.is_ok() {
            let (now, term) = {
                let m = metrics.borrow_watched();
                let leads =
                    m.current_leader == Some(me) && m.state == openraft::ServerState::Leader;
                (leads, m.vote.leader_id().term)
            };
            if now != leading {
                leading = now;
                if now {
                    tracing::info!(partition = %partition, term, "elected leader");
                } else {
                    tracing::info!(partition = %partition, term, "no longer the leader");
                }
            }
        }
        let why = match &all.borrow_watched().running_state {
            Err(openraft::errors::Fatal::Stopped) => None,
            Err(openraft::errors::Fatal::StorageError(e)) => Some(Stopped::Storage(e.to_string())),
            Err(openraft::errors::Fatal::Panicked) | Ok(()) => Some(Stopped::Ended),
        };
        if let Some(why) = why {
            tracing::error!(partition = %partition, reason = %why, "the replica's raft member stopped");
            *stopped.lock() = Some(why);
        }
    });
}

impl Replica {
    /// openraft's refusal as a hint: the leader it names, at its membership address, in this
    /// replica's term.
    fn not_leader(&self, f: ForwardToLeader<C>) -> WriteError {
        let term = Term(self.term());
        let hint = f.leader_id.zip(f.leader_node).and_then(|(node_id, node)| {
            Some(LeaderHint {
                node_id,
                addr: node.addr.parse().ok()?,
                term,
            })
        });
        WriteError::NotLeader(hint)
    }

    /// A hint naming `leader`, at its membership address, in this replica's term.
    fn hint_for(&self, leader: NodeId) -> Option<LeaderHint> {
        self.read_metrics(|m| {
            let node = m.membership_config.membership().get_node(&leader)?;
            Some(LeaderHint {
                node_id: leader,
                addr: node.addr.parse().ok()?,
                term: Term(m.current_term),
            })
        })
    }

    /// Starts the Raft group member `id` of partition `partition` of topic `topic_id` over `store`
    /// and `sm`.
    pub(crate) async fn start(
        id: NodeId,
        partition: PartitionId,
        topic_id: u64,
        timing: Timing,
        peers: Arc<PeerSet>,
        store: LogStore,
        sm: StateMachine,
    ) -> Result<Replica> {
        let mut replica = Replica {
            // Replaced below, once the member is built.
            life: parking_lot::RwLock::new(super::dormant::Life::Dormant(Box::new(
                openraft::RaftMetrics::new_initial(id),
            ))),
            users: Default::default(),
            waking: Default::default(),
            shut: Default::default(),
            recipe: Recipe {
                id,
                partition,
                topic_id,
                timing,
                peers,
            },
            elections: std::sync::atomic::AtomicBool::new(true),
            quiet: Default::default(),
            lease_wait: timing.election_timeout,
            stopped: Arc::default(),
            store,
            sm,
            gate: tokio::sync::Mutex::default(),
            vote_refused: Arc::default(),
            #[cfg(test)]
            failing_builds: Default::default(),
        };
        // A restarted leader runs an election like anyone else. Restored in its old term,
        // it would take producer writes with an empty record of the batches it proposed
        // before the restart, and could append a resent one twice (found by the fault
        // schedules, seed 8).
        let member = replica.build(false, false).await?;
        replica.life = parking_lot::RwLock::new(super::dormant::Life::Awake(member));
        Ok(replica)
    }

    /// Builds this replica's openraft member over its store and state machine. `restore`: a
    /// member that led in its persisted vote comes back as the leader of that term (a dormant
    /// leader, never a restarted one: see `dormant.rs`). `leading`: whether it will.
    pub(super) async fn build(
        &self,
        restore: bool,
        leading: bool,
    ) -> Result<super::dormant::Member> {
        #[cfg(test)]
        if crate::env::strikes(&self.failing_builds) {
            return Err(Error::from(std::io::Error::other(
                "an injected failure to read the store",
            )));
        }
        let Recipe {
            id,
            ref partition,
            topic_id,
            timing,
            ref peers,
        } = self.recipe;
        let config = openraft::Config {
            // openraft's tracing spans carry it (`cluster=`): each names its partition, so that
            // a trace of many Raft groups on one broker can be told apart.
            cluster_name: format!("replog-{partition}"),
            heartbeat_interval: millis(timing.heartbeat),
            election_timeout_min: millis(timing.election_timeout),
            election_timeout_max: millis(timing.election_timeout_max()),
            // Retention purges the log, never openraft's own policy.
            max_in_snapshot_log_to_keep: u64::MAX,
            enable_leader_restore: Some(restore),
            // A follower can come back with a shorter log than it acknowledged: under
            // `Replicated` after a power loss, and under either mode once it was rebuilt from
            // the leader (its files were damaged, or its committed entries were lost by the
            // cluster). The leader must accept that and resend, not treat it as a bug.
            allow_log_reversion: Some(true),
            // openraft reserves six rings of this many entries per Raft group for latency
            // statistics (144 KiB at its default of 1,024) even though only its
            // `runtime-stats` feature, which replog does not enable, writes them.
            log_stage_capacity: Some(1),
            // A member whose election timer runs out asks first whether it would win, and
            // raises its term only if a quorum says yes: a member cut off from the others, or
            // one restarted beside a quiet leader, cannot depose a leader the rest still hear.
            enable_pre_vote: Some(true),
            ..Default::default()
        }
        .validate()
        .map_err(|e| Error::InvalidConfig {
            field: "raft timing",
            reason: e.to_string(),
        })?;
        let network = ReplicaNetFactory {
            partition: partition.clone(),
            topic_id,
            peers: Arc::clone(peers),
            vote_refused: Arc::clone(&self.vote_refused),
        };
        let member = openraft::Raft::new(
            id,
            Arc::new(config),
            network,
            self.store.clone(),
            self.sm.clone(),
        )
        .await
        .map_err(|e| Error::from(std::io::Error::other(e.to_string())))?;
        watch_leadership(
            partition.clone(),
            id,
            &member,
            Arc::clone(&self.stopped),
            leading,
        );
        Ok(member)
    }

    /// Proposes a batch and waits until it is committed and applied.
    ///
    /// A batch with a producer id is checked against the producer's recent batches first (see
    /// [`crate::raft::producers`]): a duplicate is answered with its original offsets and not
    /// written again.
    ///
    /// `turn` orders batches that arrived in order but are served on tasks of their own: the
    /// batch is checked only after every earlier one was.
    pub(crate) async fn write(
        &self,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> std::result::Result<(u64, AppendResponse), WriteError> {
        // A quiet follower refuses as its running member would, without being built again if
        // it is dormant: its leader hears nothing it must wake for.
        if let Some(leader) = self.parked_under().filter(|l| *l != self.recipe.id) {
            return Err(WriteError::NotLeader(self.hint_for(leader)));
        }
        // A member that could not run (shut down, stopped, not built again) appended nothing
        // and leads nothing.
        let (raft, _) = self.wake_to_write(self.lease_wait).await.map_err(|e| {
            tracing::debug!(partition = %self.recipe.partition, error = %e, "write refused");
            WriteError::NotLeader(None)
        })?;
        if request.producer_id != 0 {
            return self.write_idempotent(&raft, request, turn).await;
        }
        drop(turn);
        match raft.client_write(request).await {
            Ok(response) => Ok((response.log_id.index, response.data)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(self.not_leader(f))
            }
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(_))) => {
                Err(WriteError::Discarded)
            }
            Err(e) => Err(WriteError::Other(e.to_string())),
        }
    }

    async fn write_idempotent(
        &self,
        raft: &super::dormant::Member,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> std::result::Result<(u64, AppendResponse), WriteError> {
        let producer = request.producer_id;
        let batch: PendingBatch = (
            request.producer_epoch,
            request.base_sequence,
            request.record_count,
        );
        let rx = {
            if let Some(turn) = &turn {
                turn.wait().await;
            }
            let mut gate = self.gate.lock().await;
            drop(turn);
            let leader = raft.as_leader().map_err(|f| self.not_leader(f))?;
            let term = leader.term();
            if gate.term != term {
                gate.by_producer.clear();
                gate.term = term;
            }
            let pending = gate.by_producer.entry(producer).or_default();
            let check = self.sm.with_producers(|table, applied| {
                // Until the leader's first entry of its term is applied, entries of earlier
                // terms may be committed but not yet in the table.
                if applied.map(|l| l.leader_id.term) != Some(term) {
                    return Err(WriteError::TryAgain(
                        "the new leader is still applying its predecessors' entries",
                    ));
                }
                while pending
                    .front()
                    .is_some_and(|b| table.contains(producer, *b))
                {
                    pending.pop_front();
                }
                Ok(table.check(producer, batch, pending))
            });
            match check? {
                Check::Duplicate(b) => {
                    // The first copy's stamp, from its frame while the log still holds it.
                    let first = self
                        .store
                        .log()
                        .read_entries(b.log_index, b.log_index + 1, 0);
                    let timestamp_ms = first
                        .ok()
                        .and_then(|entries| entries.first().map(|e| e.timestamp_ms))
                        .unwrap_or(0);
                    return Ok((
                        b.log_index,
                        AppendResponse {
                            base_offset: b.base_offset,
                            record_count: b.record_count,
                            timestamp_ms,
                        },
                    ));
                }
                Check::InFlight => {
                    return Err(WriteError::TryAgain(
                        "an earlier copy of this batch is being committed",
                    ));
                }
                Check::OutOfOrder { expected } => return Err(WriteError::OutOfOrder { expected }),
                Check::Fenced { current } => return Err(WriteError::Fenced { current }),
                Check::New if pending.len() >= BATCHES_PER_PRODUCER => {
                    return Err(WriteError::TryAgain(
                        "the producer has too many batches in flight",
                    ));
                }
                Check::New => {}
            }
            pending.push_back(batch);
            let (responder, rx) = ProgressResponder::<C, ClientWriteResult<C>>::complete_only();
            // Proposed only if this replica still leads in `term`: the check above holds for it.
            let proposed = raft
                .write(request)
                .with_leader(leader.to_committed_leader_id())
                .responder(responder)
                .await;
            if proposed.is_err() {
                // The member has stopped (fatal error, shutdown): nothing was proposed.
                pending.pop_back();
                return Err(WriteError::NotLeader(None));
            }
            rx
        };
        match rx.await {
            Ok(Ok(response)) => Ok((response.log_id.index, response.data)),
            Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                // Refused before it was appended: it is not in flight any more.
                let mut gate = self.gate.lock().await;
                if let Some(pending) = gate.by_producer.get_mut(&producer) {
                    pending.retain(|b| *b != batch);
                }
                Err(self.not_leader(f))
            }
            Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => Err(WriteError::Discarded),
            Ok(Err(e)) => Err(WriteError::Other(e.to_string())),
            Err(_) => Err(WriteError::Other("the Raft group stopped".into())),
        }
    }

    /// The Raft group as this replica sees it now.
    /// Every member of the Raft group as of its latest membership: voters and learners.
    pub(crate) fn member_ids(&self) -> std::collections::BTreeSet<NodeId> {
        self.read_metrics(|m| {
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect()
        })
    }

    /// Whether `id` votes in the Raft group's newest configuration (the new one of a joint
    /// configuration).
    pub(crate) fn votes_in_newest(&self, id: NodeId) -> bool {
        self.read_metrics(|m| {
            m.membership_config
                .membership()
                .get_joint_config()
                .last()
                .is_some_and(|voters| voters.contains(&id))
        })
    }

    /// The Raft group's voters, and whether a membership change is half done (joint: the old and
    /// the new voters both count).
    pub(crate) fn voters(&self) -> (std::collections::BTreeSet<NodeId>, bool) {
        self.read_metrics(|m| {
            let membership = m.membership_config.membership();
            let joint = membership.get_joint_config().len() > 1;
            (membership.voter_ids().collect(), joint)
        })
    }

    /// Makes `voters` the Raft group's voters (through a joint configuration), removing the
    /// others. Returns once the change is committed; leader only.
    pub(crate) async fn change_voters(
        &self,
        voters: std::collections::BTreeSet<NodeId>,
    ) -> Result<(), String> {
        let (raft, _) = self.wake_to_write(self.lease_wait).await?;
        raft.change_membership(voters, false)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Removes `ids` (learners, not voters) from the Raft group: the leader stops replicating to
    /// them. Returns once the change is committed; leader only.
    pub(crate) async fn remove_learners(
        &self,
        ids: std::collections::BTreeSet<NodeId>,
    ) -> Result<(), String> {
        let (raft, _) = self.wake_to_write(self.lease_wait).await?;
        raft.change_membership(openraft::ChangeMembers::RemoveNodes(ids), false)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Adds broker `id` (at `addr`) to the Raft group as a learner: it replicates the log but does
    /// not vote. Returns once the membership change is committed; leader only.
    pub(crate) async fn add_learner(&self, id: NodeId, addr: String) -> Result<(), String> {
        let (raft, _) = self.wake_to_write(self.lease_wait).await?;
        raft.add_learner(id, BrokerNode { addr }, false)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub(crate) fn state(&self) -> ReplicaState {
        self.read_metrics(|m| {
            let members = m.replication.as_ref().map(|r| {
                r.iter()
                    .map(|(id, matched)| {
                        let ack = m
                            .heartbeat
                            .as_ref()
                            .and_then(|h| h.get(id))
                            .and_then(|t| t.as_ref())
                            .map(|t| t.elapsed());
                        (
                            *id,
                            Member {
                                matched: matched.map(|l| l.index),
                                ack_age: ack,
                            },
                        )
                    })
                    .collect()
            });
            ReplicaState {
                leader: leader_of(m),
                term: m.current_term,
                last_log_index: m.last_log_index,
                snapshot_index: m.snapshot.map(|s| s.index),
                members,
            }
        })
    }

    /// The leader this replica knows of: [`state`](Self::state)'s, without the rest of it.
    pub(crate) fn leader(&self) -> Option<NodeId> {
        self.read_metrics(leader_of)
    }

    /// The replica's current term (a leader epoch, to Kafka's clients), without the rest of
    /// [`state`](Self::state).
    pub(crate) fn term(&self) -> u64 {
        self.read_metrics(|m| m.current_term)
    }

    /// Snapshots the state machine (waiting up to `timeout` for it to cover `upto`), then asks
    /// openraft to purge the log up to and including `upto`.
    pub(crate) async fn purge_through(
        &self,
        upto: u64,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        // Purged already (a dormant replica is not woken for nothing).
        if self.read_metrics(|m| m.purged.is_some_and(|p| p.index >= upto)) {
            return Ok(());
        }
        let raft = self.awake().await?;
        let covered = |r: &Replica| r.state().snapshot_index.is_some_and(|i| i >= upto);
        if !covered(self) {
            let _ = raft.trigger().snapshot().await;
            let deadline = tokio::time::Instant::now() + timeout;
            while !covered(self) {
                if tokio::time::Instant::now() >= deadline {
                    return Err("snapshot for retention did not complete".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        raft.trigger()
            .purge_log(upto)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until this replica, as leader, has applied every entry committed before the call
    /// (openraft's ReadIndex: an entry of its own term committed, its leadership confirmed
    /// by a quorum), so that what it reads from its log then includes every write
    /// acknowledged before. Fails if it does not lead.
    pub(crate) async fn read_barrier(&self) -> std::result::Result<(), String> {
        let (raft, _) = self.wake_to_write(self.lease_wait).await?;
        raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Serves a peer's Raft RPC, and then wakes this member if it was quiet: whatever a peer
    /// sends is news (an entry, a candidate, a transfer), and its timers must run again. It
    /// wakes after serving, so that an append from its leader renews the leader's lease here
    /// before the election timer looks at it.
    /// `body` is the request, which lies in `frame`, the received frame's bytes.
    /// A dormant member is built again first.
    pub(crate) async fn serve(&self, op: Op, frame: &bytes::Bytes, body: &[u8]) -> Served {
        let raft = match self.awake().await {
            Ok(raft) => raft,
            Err(e) => return Served::Refused(e),
        };
        // A pre-vote changes nothing on a voter, and its candidate's real vote follows, unless
        // the candidate is the leader this member is parked under (it lost its leadership).
        let wakes = op != Op::PreVote || self.asked_by_parked_leader(body);
        let served = serve(&raft, &self.store, op, (frame, body)).await;
        if wakes {
            self.quiet.wake(&raft);
        }
        served
    }

    /// Why the Raft group member's core stopped by itself, once it has (`None` while it runs
    /// and after a shutdown).
    pub(crate) fn stopped(&self) -> Option<Stopped> {
        self.stopped.lock().clone()
    }

    /// Records why the member stopped (a dormant member that could not be built again), as
    /// its core's watcher does for a running one.
    pub(super) fn set_stopped(&self, why: Stopped) {
        *self.stopped.lock() = Some(why);
    }
}

/// The leader a member's metrics name. A member stopped by a fatal error (a failed disk) leads
/// nothing, whatever its last metrics said: metadata must not send clients to it.
/// Nor does a member that names itself without being the leader: one rebuilt empty from a
/// leader's vote keeps that vote, committed, but is not even a voter until it has copied the
/// log.
fn leader_of(m: &openraft::RaftMetrics<C>) -> Option<NodeId> {
    m.current_leader
        .filter(|l| m.running_state.is_ok() && (*l != m.id || leads(m, m.id)))
}

/// Whether the member whose metrics `m` are, `me`, leads (its role, not only its vote).
pub(super) fn leads(m: &openraft::RaftMetrics<C>, me: NodeId) -> bool {
    m.current_leader == Some(me) && m.state == openraft::ServerState::Leader
}

/// Why a leadership transfer did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransferRefused {
    /// This replica does not lead (or the target is itself).
    NotLeader,
    /// The target is not one of the Raft group's voters.
    NotAVoter,
    /// The target did not acknowledge the leader within the timeout.
    NotHeardFrom,
    /// The target does not hold every entry the leader has.
    Behind,
    /// The replica's Raft member stopped.
    Stopped,
    /// The target did not take over within the timeout.
    NotTakenOver,
}

impl std::fmt::Display for TransferRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransferRefused::NotLeader => "this broker no longer leads the partition",
            TransferRefused::NotAVoter => {
                "the preferred replica is not one of the Raft group's voters"
            }
            TransferRefused::NotHeardFrom => {
                "the preferred replica has not answered the leader within an election timeout"
            }
            TransferRefused::Behind => "the preferred replica does not hold every entry yet",
            TransferRefused::Stopped => "the partition's Raft member stopped",
            TransferRefused::NotTakenOver => {
                "the preferred replica did not take over within an election timeout"
            }
        })
    }
}
