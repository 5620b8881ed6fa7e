//! openraft's network over the shared transport: each partition's RPCs, tagged with the
//! partition, on the connections every partition shares; and the serving side.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::storage::Snapshot;
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf};
use openraft::{OptionalSend, RaftNetworkV2};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::raft::state_machine::StateMachine;
use crate::raft::storage::LogStore;
use crate::raft::types::{BrokerNode, C, LogId, Vote};
use crate::transport::frame::Op;
use crate::transport::{CallError, Peer, PeerSet};
use crate::types::{NodeId, PartitionId};

/// The slowest rate, in bytes a second, at which a replica is expected to take in entries:
/// receive them, decode them, write them and sync them. See [`deadline`].
const REPLICA_BYTES_PER_SEC_MIN: u64 = 8 << 20;

/// The deadline of an RPC of `bytes`: openraft's (`base`, a fraction of the heartbeat interval,
/// meant for a heartbeat) plus the time its bytes take at [`REPLICA_BYTES_PER_SEC_MIN`].
///
/// A fixed deadline of a fraction of a heartbeat fails every AppendEntries that carries more
/// than the follower can take in within it, and the leader then resends the same entries: a
/// follower behind by entries of megabytes, on a slow or busy disk, never catches up, and when
/// the quorum needs it, writes stop. The fault schedules at real sizes found this on a loaded CI
/// machine (4 MiB batches against a 75 ms deadline). Heartbeats keep their short deadline, so a
/// dead follower is noticed as soon as before; a lost message of 16 MiB costs its sender 2 s.
fn deadline(base: Duration, bytes: usize) -> Duration {
    base + Duration::from_micros(
        (bytes as u64).saturating_mul(1_000_000) / REPLICA_BYTES_PER_SEC_MIN,
    )
}

/// Makes the network clients of one partition's Raft group.
pub(crate) struct ReplicaNetFactory {
    pub(crate) partition: PartitionId,
    /// The id of the partition's topic (see [`ReplicaNet`]).
    pub(crate) topic_id: u64,
    pub(crate) peers: Arc<PeerSet>,
    /// Set once a voter of a formed Raft group refuses one of this member's vote requests (it
    /// follows a leader, or holds more log), as opposed to failing to answer (no replica of
    /// the Raft group yet) or refusing for a vote of its own in the same term.
    pub(crate) vote_refused: Arc<std::sync::atomic::AtomicBool>,
}

impl RaftNetworkFactory<C> for ReplicaNetFactory {
    type Network = ReplicaNet;

    async fn new_client(&mut self, target: NodeId, _node: &BrokerNode) -> ReplicaNet {
        ReplicaNet {
            partition: self.partition.clone(),
            topic_id: self.topic_id,
            target,
            control: false,
            peer: self.peers.get(target, false),
            peers: Arc::clone(&self.peers),
            vote_refused: Arc::clone(&self.vote_refused),
        }
    }

    async fn new_heartbeat_client(&mut self, target: NodeId, _node: &BrokerNode) -> ReplicaNet {
        ReplicaNet {
            partition: self.partition.clone(),
            topic_id: self.topic_id,
            target,
            control: true,
            peer: self.peers.get(target, true),
            peers: Arc::clone(&self.peers),
            vote_refused: Arc::clone(&self.vote_refused),
        }
    }
}

/// One partition's RPCs to one broker. A request body is `(partition, topic id, request)`,
/// postcard.
///
/// The topic id names the Raft group: a topic deleted and created again under the same name has
/// partitions of the same names, but a new id, and each of its partitions is another Raft
/// group. A broker that slept through both still runs the old topic's replicas until it
/// learns of the deletion, and the receiver serves a request only on a replica of the id the
/// request names (`node/peer_rpc.rs`), so that the two Raft groups never hear each other.
pub(crate) struct ReplicaNet {
    partition: PartitionId,
    topic_id: u64,
    target: NodeId,
    control: bool,
    /// `None` for a broker this one does not know yet (one that joined, before the metadata
    /// log told this broker where it is): looked up again on every call until known.
    peer: Option<Arc<Peer>>,
    peers: Arc<PeerSet>,
    /// See [`ReplicaNetFactory::vote_refused`].
    vote_refused: Arc<std::sync::atomic::AtomicBool>,
}

impl ReplicaNet {
    /// The connection to the target broker.
    fn peer(&self) -> Result<Arc<Peer>, RPCError<C>> {
        match &self.peer {
            Some(peer) => Ok(Arc::clone(peer)),
            None => self.peers.get(self.target, self.control).ok_or_else(|| {
                Unreachable::from_string(format!("unknown broker {}", self.target)).into()
            }),
        }
    }

    /// Records a refusal of a vote or pre-vote by a voter of a Raft group that formed: it follows
    /// a leader (a committed vote of a real term; `initialize` gives every founder one of term
    /// 0), or holds more log. A founder refused only because the voter campaigns in the same
    /// term (a split vote at formation) may well win its next campaign.
    fn note_refusal(&self, rpc: &VoteRequest<C>, answer: &VoteResponse<C>) {
        let formed = (answer.vote.committed && answer.vote.leader_id.term > 0)
            || answer.last_log_id > rpc.last_log_id;
        if !answer.vote_granted && formed {
            self.vote_refused
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        op: Op,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<C>> {
        let peer = &self.peer()?;
        let body = crate::transport::body::encode(&(&self.partition, self.topic_id, request))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let timeout = deadline(timeout, body.len());
        match self.peers.call(peer, self.target, op, body, timeout).await {
            Ok(bytes) => {
                let response: Result<Resp, String> = postcard::from_bytes(&bytes)
                    .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
                response.map_err(|msg| RPCError::Network(NetworkError::from_string(msg)))
            }
            Err(CallError::Unreachable(msg)) => Err(Unreachable::from_string(msg).into()),
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetworkV2<C> for ReplicaNet {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        self.call(Op::AppendEntries, &rpc, option.soft_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let answer: VoteResponse<C> = self.call(Op::Vote, &rpc, option.soft_ttl()).await?;
        self.note_refusal(&rpc, &answer);
        Ok(answer)
    }

    /// Asks the target whether it would grant a vote at the next term: a voter that still
    /// hears its leader (within the leader's lease) or holds more log says no, and nothing
    /// changes on it. A broker of protocol version 1 knows no pre-vote: its answer is taken as
    /// a grant, as openraft does for a network without pre-votes, so that an election among
    /// brokers of two versions runs as it did before.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let version = match self.peer()?.version(option.soft_ttl()).await {
            Ok(version) => version,
            Err(CallError::Unreachable(msg)) => return Err(Unreachable::from_string(msg).into()),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if version < Op::PreVote.since() {
            return Ok(VoteResponse::new(rpc.vote, None, true));
        }
        let answer: VoteResponse<C> = self.call(Op::PreVote, &rpc, option.soft_ttl()).await?;
        self.note_refusal(&rpc, &answer);
        Ok(answer)
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<C>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<C>, RPCError<C>> {
        self.call(Op::TransferLeader, &rpc, option.soft_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf<C, Vec<u8>>,
        _cancel: impl std::future::Future<Output = openraft::errors::ReplicationClosed>
        + OptionalSend
        + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let request = (vote, snapshot.meta, snapshot.snapshot);
        self.call(Op::Snapshot, &request, option.soft_ttl())
            .await
            .map_err(StreamingError::from)
    }
}

fn respond<T: Serialize>(result: Result<T, String>) -> Vec<u8> {
    postcard::to_stdvec(&result).unwrap_or_else(|e| {
        postcard::to_stdvec(&Result::<(), String>::Err(e.to_string())).unwrap_or_default()
    })
}

/// What serving a peer RPC came to.
pub(crate) enum Served {
    /// The response to send back.
    Reply(Vec<u8>),
    /// Not served: the request contradicts an entry this replica holds as committed, at this
    /// log index. Raft cannot truncate a committed entry; the cluster lost it (possible only
    /// under `Replicated`, or with a damaged disk) and the replica must be rebuilt.
    ContradictsCommitted(u64),
    /// Not served: the replica's member could not run (shut down, or it failed to start
    /// again after dormancy), for this reason.
    Refused(String),
}

/// Serves one peer RPC (`body` is the request after the partition and topic ids, within
/// `frame`, the received frame's bytes) on `raft`. An append's batches are decoded as slices
/// of `frame`, not copies ([`decode_in_frame`](crate::transport::body::decode_in_frame)).
pub(crate) async fn serve(
    raft: &openraft::Raft<C, StateMachine>,
    store: &LogStore,
    op: Op,
    (frame, body): (&bytes::Bytes, &[u8]),
) -> Served {
    fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        postcard::from_bytes(body).map_err(|e| format!("bad request: {e}"))
    }
    let reply = match op {
        Op::AppendEntries => {
            match crate::transport::body::decode_in_frame(frame, || {
                decode::<AppendEntriesRequest<C>>(body)
            }) {
                Ok(rpc) => {
                    // A heartbeat whose previous entry this log holds as it is contradicts nothing
                    // (committed entries are never truncated, so the log holds the committed ones
                    // as openraft knows them): no trip to openraft's task for it.
                    let heartbeat_matches = rpc.entries.is_empty()
                        && rpc
                            .prev_log_id
                            .is_none_or(|p| store.holds(&p).unwrap_or(false));
                    let ids = rpc
                        .prev_log_id
                        .into_iter()
                        .chain(rpc.entries.iter().map(|e| e.log_id));
                    if !heartbeat_matches
                        && let Some(index) =
                            contradicted_committed(raft, rpc.vote, ids.collect()).await
                    {
                        return Served::ContradictsCommitted(index);
                    }
                    respond(raft.append_entries(rpc).await.map_err(|e| e.to_string()))
                }
                Err(e) => respond::<AppendEntriesResponse<C>>(Err(e)),
            }
        }
        Op::Vote => match decode::<VoteRequest<C>>(body) {
            Ok(rpc) => respond(raft.vote(rpc).await.map_err(|e| e.to_string())),
            Err(e) => respond::<VoteResponse<C>>(Err(e)),
        },
        Op::PreVote => match decode::<VoteRequest<C>>(body) {
            Ok(rpc) => respond(raft.pre_vote(rpc).await.map_err(|e| e.to_string())),
            Err(e) => respond::<VoteResponse<C>>(Err(e)),
        },
        Op::Snapshot => match decode::<(Vote, SnapshotMetaOf<C>, Vec<u8>)>(body) {
            Ok((vote, meta, data)) => {
                if let Some(last) = meta.last_log_id
                    && let Some(index) = snapshot_contradicts_committed(raft, vote, last).await
                {
                    return Served::ContradictsCommitted(index);
                }
                let snapshot = Snapshot {
                    meta,
                    snapshot: data,
                };
                respond(
                    raft.install_full_snapshot(vote, snapshot)
                        .await
                        .map_err(|e| e.to_string()),
                )
            }
            Err(e) => respond::<SnapshotResponse<C>>(Err(e)),
        },
        Op::TransferLeader => match decode::<TransferLeaderRequest<C>>(body) {
            Ok(rpc) => respond(
                raft.handle_transfer_leader(rpc)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            Err(e) => respond::<TransferLeaderResponse<C>>(Err(e)),
        },
        other => respond::<()>(Err(format!("{other:?} is not a Raft RPC"))),
    };
    Served::Reply(reply)
}

/// The first of `ids` (a replication request's log ids, in index order) that differs from the
/// entry this replica holds as committed at its index, if any.
///
/// openraft takes an entry at or below its committed index to match the local one without
/// looking (a debug assertion aside), so a leader whose log lost committed entries would leave
/// this replica silently diverged. The check runs on openraft's own task
/// (`with_raft_state`), so it sees the committed index the request will meet. A replica that
/// stopped has nothing to check.
///
/// Only a request openraft will accept is checked: one whose `vote` is not below this
/// replica's. A deposed leader (paused, then resumed) still sends the entries it appended in
/// its term and never committed; later leaders committed others at those indexes. Those
/// entries contradict the committed ones as a matter of course, openraft refuses the request
/// for its vote, and nothing was lost: taking it for lost entries would have this replica
/// wipe its log and rebuild, the committed entries with it.
async fn contradicted_committed(
    raft: &openraft::Raft<C, StateMachine>,
    vote: Vote,
    ids: Vec<LogId>,
) -> Option<u64> {
    if ids.is_empty() {
        return None;
    }
    raft.with_raft_state(move |st| {
        if !current(&vote, st.vote_ref()) {
            return None;
        }
        let committed = st.local_committed()?.index;
        let purged = st.log_ids.purged().map(|p| p.index);
        ids.iter()
            .take_while(|id| id.index <= committed)
            // Purged entries were committed and matched the leader's when applied.
            .filter(|id| purged.is_none_or(|p| id.index > p))
            .find(|id| st.log_ids.get(id.index).as_ref() != Some(*id))
            .map(|id| id.index)
    })
    .await
    .ok()
    .flatten()
}

/// Whether a snapshot ending at `last` contradicts this replica's committed entries: it is
/// newer than the committed entry but ends at or before its index, so the two logs disagree
/// at or before it. openraft asserts this never happens; returns the index to report. As for
/// appends, only a snapshot sent under a `vote` openraft will accept is checked.
async fn snapshot_contradicts_committed(
    raft: &openraft::Raft<C, StateMachine>,
    vote: Vote,
    last: LogId,
) -> Option<u64> {
    raft.with_raft_state(move |st| {
        if !current(&vote, st.vote_ref()) {
            return None;
        }
        let committed = st.local_committed()?;
        (last > *committed && last.index <= committed.index).then_some(last.index)
    })
    .await
    .ok()
    .flatten()
}

/// Whether a leader's request under `vote` is one openraft serves on a replica whose vote is
/// `local`: its vote is not below (votes are partially ordered, so this is not `vote < local`).
fn current(vote: &Vote, local: &Vote) -> bool {
    vote >= local
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_grows_with_the_bytes_of_its_rpc() {
        let base = Duration::from_millis(75);
        // A heartbeat keeps openraft's deadline, within a microsecond.
        assert!(deadline(base, 64) - base < Duration::from_micros(10));
        // A full payload of 16 MiB gets two seconds more.
        assert_eq!(deadline(base, 16 << 20), base + Duration::from_secs(2));
        // No overflow at any size.
        assert!(deadline(base, usize::MAX) > Duration::from_secs(1 << 20));
    }

    /// A deposed leader's append (an older vote) whose entries differ from the committed ones
    /// here is refused by openraft for its vote, and the replica keeps its log: it is not taken
    /// for committed entries the cluster lost, which would have the replica wipe itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deposed_leaders_stale_entries_are_refused_not_taken_for_lost_commits() {
        use openraft::raft::AppendEntriesResponse as Resp;
        use openraft::{Entry, EntryPayload};

        let dir = tempfile::tempdir().unwrap();
        let log = crate::log::PartitionLog::open(dir.path(), crate::LogConfig::default()).unwrap();
        let store = LogStore::open(log, crate::Durability::Replicated, usize::MAX).unwrap();
        let sm = StateMachine::open(store.clone()).unwrap();
        let config = openraft::Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 450,
            ..Default::default()
        };
        let raft = openraft::Raft::new(
            1,
            Arc::new(config.validate().unwrap()),
            crate::raft::storage::tests::NoPeers,
            store.clone(),
            sm,
        )
        .await
        .unwrap();
        let node = BrokerNode {
            addr: "127.0.0.1:1".into(),
        };
        raft.initialize(std::collections::BTreeMap::from([(1, node)]))
            .await
            .unwrap();
        let deadline = Some(Duration::from_secs(10));
        raft.wait(deadline)
            .current_leader(1, "elected")
            .await
            .unwrap();
        raft.wait(deadline)
            .applied_index(Some(1), "term 1's entry committed")
            .await
            .unwrap();

        // Broker 2 led the term before (0) and appended (0, 1) after the membership entry
        // (0, 0), never committed; term 1's blank entry (1, 1) is committed here.
        let stale = AppendEntriesRequest::<C> {
            vote: Vote::new_committed(0, 2),
            prev_log_id: Some(LogId::new_term_index(0, 0)),
            entries: vec![Entry {
                log_id: LogId::new_term_index(0, 1),
                payload: EntryPayload::Blank,
            }],
            leader_commit: Some(LogId::new_term_index(0, 0)),
        };
        let frame = bytes::Bytes::from(postcard::to_stdvec(&stale).unwrap());
        let served = serve(&raft, &store, Op::AppendEntries, (&frame, &frame[..])).await;
        let Served::Reply(reply) = served else {
            panic!("a deposed leader's stale entries were taken for lost committed entries");
        };
        let answer: Result<Resp<C>, String> = postcard::from_bytes(&reply).unwrap();
        assert!(
            matches!(answer, Ok(Resp::HigherVote(v)) if v.leader_id().term == 1),
            "refused for its vote: {answer:?}"
        );
        assert!(store.holds(&LogId::new_term_index(1, 1)).unwrap());
        raft.shutdown().await.unwrap();
    }
}
