//! Raft traffic between brokers: a peer's RPC routed to the partition's Raft group, with the
//! replica-health checks that come first (damage found by a read, a rebuilt replica that may not
//! vote yet, a request that contradicts what this replica holds as committed).

use std::sync::Arc;

use crate::catalog::METADATA_TOPIC;
use crate::raft::network::Served;
use crate::transport::Caller;
use crate::transport::frame::Op;
use crate::types::PartitionId;

use super::Broker;
use super::peer_gate::{Claim, raft_sender};
use super::supervise::RebuildCause;

impl Broker {
    /// Serves a Raft RPC: the body starts with the partition id and its topic's id, then the
    /// request. Served only to `caller` if it may send Raft traffic as the sender the RPC names
    /// (see `peer_gate.rs`), and only by this broker's replica of that partition of that topic.
    ///
    /// A topic deleted and created again has partitions of the same names, each another Raft
    /// group, and a broker that slept through both runs the old topic's replicas until it
    /// learns of the deletion: the two Raft groups must not hear each other. An old replica's vote
    /// can be of the new leader's term and name another leader, which openraft cannot order
    /// against the leader's own: the leader dropped such an answer to its probe, and with it
    /// the probe, which it then awaited for good, so that this broker's new replica never got
    /// an entry. Other answers deposed the new leader, or had the old replica rebuilt.
    pub(super) async fn serve_raft(
        self: &Arc<Self>,
        op: Op,
        body: &bytes::Bytes,
        caller: &Caller,
    ) -> Vec<u8> {
        let found = postcard::take_from_bytes::<(PartitionId, u64)>(body)
            .map_err(|e| format!("bad request: {e}"))
            .and_then(|(id, rest)| {
                let sender = raft_sender(rest).ok_or("bad request: no sender's vote")?;
                if !self.admits_peer(caller, op, Claim::Peer(sender)) {
                    return Err(format!("refused: the connection is not broker {sender}'s"));
                }
                Ok((id, rest))
            })
            .and_then(|((id, topic_id), rest)| {
                let replica = if id.topic == METADATA_TOPIC && id.partition == 0 {
                    Some(Arc::clone(&self.meta))
                } else {
                    self.replicas.read().get(&id).cloned()
                };
                let replica = replica.ok_or_else(|| format!("unknown partition {id}"))?;
                if replica.topic_id != topic_id {
                    return Err(format!(
                        "partition {id} of topic id {topic_id} is not hosted here (this \
                         broker's is of topic id {})",
                        replica.topic_id
                    ));
                }
                Ok((replica, rest))
            });
        let refuse = |e: String| {
            postcard::to_stdvec(&std::result::Result::<(), String>::Err(e)).unwrap_or_default()
        };
        let (replica, rest) = match found {
            Ok(found) => found,
            Err(e) => return refuse(e),
        };
        // openraft stopped this replica on a read that failed validation (replicating from a
        // damaged segment): the replica is rebuilt from the new leader.
        if let Some(damage) = replica.store.take_damage() {
            self.request_rebuild(Arc::clone(&replica), RebuildCause::Damaged(damage));
        }
        if matches!(op, Op::Vote | Op::PreVote) && replica.store.abstains(replica.sm.last_applied())
        {
            return refuse(
                "this replica was rebuilt after damage and votes again once it holds what it \
                 had committed"
                    .into(),
            );
        }
        if matches!(op, Op::Vote | Op::PreVote)
            && let Some(refusal) = replica.raft.refuses_vote_while_quiet(rest, |leader| {
                leader == self.config.id || self.liveness.hears(leader)
            })
        {
            // A member that campaigns against this quiet leader does not hear it (it missed
            // the quiet, or restarted): the leader wakes, and its heartbeats bring the
            // member back before the Raft group goes quiet again.
            if replica.raft.parked_under() == Some(self.config.id) {
                replica.raft.wake().await;
            }
            return refusal;
        }
        match replica.raft.serve(op, body, rest).await {
            Served::Reply(reply) => reply,
            Served::Refused(reason) => refuse(reason),
            Served::ContradictsCommitted(index) => {
                self.request_rebuild(replica, RebuildCause::Contradicted(index));
                refuse(format!(
                    "this replica's committed log contradicts the request at index {index}: \
                     replica rebuilding"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
