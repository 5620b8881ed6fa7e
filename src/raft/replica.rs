//! [`Replica`]: one partition's Raft group member, behind an API that names no openraft type.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::Instant as _;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};

use crate::error::{Error, Result};
use crate::raft::network::{GroupNetFactory, serve};
use crate::raft::state_machine::StateMachine;
use crate::raft::storage::LogStore;
use crate::raft::types::{AppendRequest, AppendResponse, BrokerNode, C};
use crate::transport::PeerSet;
use crate::transport::frame::Op;
use crate::types::{NodeId, PartitionId};

/// Raft timing for every replica of a node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(crate) heartbeat_ms: u64,
    /// The lower bound; the upper is twice it.
    pub(crate) election_timeout_ms: u64,
}

/// Why a write was not committed.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Refused before appending: not the leader. The leader's id and address, if known.
    NotLeader(Option<(NodeId, Option<String>)>),
    /// Appended, then dropped by a leadership change: the outcome is unknown.
    Discarded,
    /// Anything else (shutdown, storage failure).
    Other(String),
}

/// What a replica knows of its group.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReplicaState {
    pub(crate) leader: Option<NodeId>,
    pub(crate) term: u64,
    pub(crate) last_log_index: Option<u64>,
    pub(crate) snapshot_index: Option<u64>,
    /// On the leader: every member's replication state.
    pub(crate) members: Option<BTreeMap<NodeId, Member>>,
}

/// A group member as the leader sees it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Member {
    /// The last log index known to be on the member (`None`: nothing yet).
    pub(crate) matched: Option<u64>,
    /// How long ago the member last acknowledged the leader.
    pub(crate) ack_age: Option<Duration>,
}

/// One partition replica's Raft group member.
pub(crate) struct Replica {
    raft: openraft::Raft<C, StateMachine>,
}

impl Replica {
    /// Starts the group member `id` of partition `group` over `store` and `sm`.
    pub(crate) async fn start(
        id: NodeId,
        group: PartitionId,
        timing: Timing,
        peers: Arc<PeerSet>,
        store: LogStore,
        sm: StateMachine,
    ) -> Result<Replica> {
        let config = openraft::Config {
            cluster_name: "replog".into(),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_timeout_ms,
            election_timeout_max: timing.election_timeout_ms * 2,
            // Retention purges the log, never openraft's own policy.
            max_in_snapshot_log_to_keep: u64::MAX,
            ..Default::default()
        }
        .validate()
        .map_err(|e| Error::InvalidConfig {
            field: "raft timing",
            reason: e.to_string(),
        })?;
        let network = GroupNetFactory { group, peers };
        let raft = openraft::Raft::new(id, Arc::new(config), network, store, sm)
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
        Ok(Replica { raft })
    }

    /// Initializes a fresh group with these members (id and address). Does nothing if the
    /// group was initialized before.
    pub(crate) async fn initialize(&self, members: &BTreeMap<NodeId, String>) {
        let members: BTreeMap<NodeId, BrokerNode> = members
            .iter()
            .map(|(id, addr)| (*id, BrokerNode { addr: addr.clone() }))
            .collect();
        if let Err(e) = self.raft.initialize(members).await {
            tracing::debug!(error = %e, "not initializing");
        }
    }

    /// Proposes a batch and waits until it is committed and applied.
    pub(crate) async fn write(
        &self,
        request: AppendRequest,
    ) -> std::result::Result<(u64, AppendResponse), WriteError> {
        match self.raft.client_write(request).await {
            Ok(response) => Ok((response.log_id.index, response.data)),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                let addr = f.leader_node.map(|n| n.addr);
                Err(WriteError::NotLeader(f.leader_id.map(|id| (id, addr))))
            }
            Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(_))) => {
                Err(WriteError::Discarded)
            }
            Err(e) => Err(WriteError::Other(e.to_string())),
        }
    }

    /// The group as this replica sees it now.
    pub(crate) fn state(&self) -> ReplicaState {
        let m = self.raft.metrics().borrow_watched().clone();
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
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            snapshot_index: m.snapshot.map(|s| s.index),
            members,
        }
    }

    /// Snapshots the state machine (waiting up to `timeout` for it to cover `upto`), then asks
    /// openraft to purge the log up to and including `upto`.
    pub(crate) async fn purge_through(
        &self,
        upto: u64,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        let covered = |r: &Replica| r.state().snapshot_index.is_some_and(|i| i >= upto);
        if !covered(self) {
            let _ = self.raft.trigger().snapshot().await;
            let deadline = tokio::time::Instant::now() + timeout;
            while !covered(self) {
                if tokio::time::Instant::now() >= deadline {
                    return Err("snapshot for retention did not complete".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.raft
            .trigger()
            .purge_log(upto)
            .await
            .map_err(|e| e.to_string())
    }

    /// Serves a peer's Raft RPC.
    pub(crate) async fn serve(&self, op: Op, body: &[u8]) -> Vec<u8> {
        serve(&self.raft, op, body).await
    }

    /// Stops the group member.
    pub(crate) async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown failed");
        }
    }
}
