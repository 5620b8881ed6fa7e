//! openraft's network over the shared transport: each partition's RPCs, tagged with the
//! partition, on the connections every partition shares; and the serving side.

use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::Snapshot;
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf};
use openraft::{OptionalSend, RaftNetworkV2};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::raft::state_machine::StateMachine;
use crate::raft::types::{BrokerNode, C, Vote};
use crate::transport::frame::Op;
use crate::transport::{CallError, Peer, PeerSet};
use crate::types::{NodeId, PartitionId};

/// Makes the network clients of one partition's Raft group.
pub(crate) struct GroupNetFactory {
    pub(crate) group: PartitionId,
    pub(crate) peers: Arc<PeerSet>,
}

impl RaftNetworkFactory<C> for GroupNetFactory {
    type Network = GroupNet;

    async fn new_client(&mut self, target: NodeId, _node: &BrokerNode) -> GroupNet {
        GroupNet {
            group: self.group.clone(),
            target,
            peer: self.peers.get(target, false),
            peers: Arc::clone(&self.peers),
        }
    }

    async fn new_heartbeat_client(&mut self, target: NodeId, _node: &BrokerNode) -> GroupNet {
        GroupNet {
            group: self.group.clone(),
            target,
            peer: self.peers.get(target, true),
            peers: Arc::clone(&self.peers),
        }
    }
}

/// One partition's RPCs to one broker. A request body is `(partition, request)`, postcard.
pub(crate) struct GroupNet {
    group: PartitionId,
    target: NodeId,
    peer: Option<Arc<Peer>>,
    peers: Arc<PeerSet>,
}

impl GroupNet {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        op: Op,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<C>> {
        let Some(peer) = &self.peer else {
            return Err(Unreachable::from_string(format!("unknown broker {}", self.target)).into());
        };
        let body = postcard::to_stdvec(&(&self.group, request))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
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

impl RaftNetworkV2<C> for GroupNet {
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
        self.call(Op::Vote, &rpc, option.soft_ttl()).await
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

/// Serves one peer RPC (`body` is the request after the partition id) on `raft`.
pub(crate) async fn serve(raft: &openraft::Raft<C, StateMachine>, op: Op, body: &[u8]) -> Vec<u8> {
    fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        postcard::from_bytes(body).map_err(|e| format!("bad request: {e}"))
    }
    match op {
        Op::AppendEntries => match decode::<AppendEntriesRequest<C>>(body) {
            Ok(rpc) => respond(raft.append_entries(rpc).await.map_err(|e| e.to_string())),
            Err(e) => respond::<AppendEntriesResponse<C>>(Err(e)),
        },
        Op::Vote => match decode::<VoteRequest<C>>(body) {
            Ok(rpc) => respond(raft.vote(rpc).await.map_err(|e| e.to_string())),
            Err(e) => respond::<VoteResponse<C>>(Err(e)),
        },
        Op::Snapshot => match decode::<(Vote, SnapshotMetaOf<C>, Vec<u8>)>(body) {
            Ok((vote, meta, data)) => {
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
        other => respond::<()>(Err(format!("{other:?} is not a Raft RPC"))),
    }
}
