//! Brokers leaving the cluster. A decommission ([`MetaCommand::DecommissionBroker`]) records a
//! reassignment of every partition the broker is on; each partition's leader carries its move
//! out (`reassign.rs`: a leader moving itself out hands its leadership over first). Once the
//! broker holds no replica, the metadata leader removes it from the cluster
//! ([`MetaCommand::RemoveBroker`]), which it learns too: from then on no broker names it, it
//! sends clients to the others, and it can stop with no partition under-replicated. Then
//! the metadata leader takes it out of the metadata Raft group (a broker that joined takes its
//! vote, so the Raft group keeps its size).

use std::collections::BTreeSet;

use crate::catalog::MetaCommand;
use crate::error::{Error, Result};
use crate::protocol::ProposeRequest;
use crate::types::NodeId;

use super::Broker;

impl Broker {
    /// On the metadata leader: removes the drained broker `id` from the cluster
    /// ([`MetaCommand::RemoveBroker`]; every broker, `id` too, applies it while `id` is still
    /// in the metadata Raft group, so `id` knows it left).
    pub(super) async fn remove_drained(&self, id: NodeId) -> Result<()> {
        self.propose(ProposeRequest {
            command: MetaCommand::RemoveBroker { id },
            forwarded: false,
        })
        .await?;
        tracing::info!(
            broker = id,
            "decommissioned broker removed from the cluster"
        );
        Ok(())
    }

    /// On the metadata leader: takes the removed broker `id` out of the metadata Raft group (a
    /// broker that joined takes its vote, so the Raft group keeps its size). A metadata leader that
    /// is `id` itself hands its leadership over instead, and the next leader does it.
    pub(super) async fn remove_from_metadata_raft(&self, id: NodeId) -> Result<()> {
        let me = self.config.id;
        let meta = &self.meta;
        let again = |reason: String| Error::TryAgain {
            partition: meta.id.clone(),
            reason,
        };
        let timeout = self.config.election_timeout;
        let (voters, joint) = meta.raft.voters();
        if joint {
            return Err(again(
                "the metadata Raft group's membership is changing".into(),
            ));
        }
        if id == me {
            for to in voters.iter().filter(|v| **v != me) {
                if meta.raft.transfer_to(me, *to, timeout).await.is_ok() {
                    tracing::info!(
                        to,
                        "metadata leadership handed over: this broker left the cluster"
                    );
                    return Ok(());
                }
            }
            return Err(again("no other metadata voter could take over".into()));
        }
        // It learns it left from the metadata log (and drops what it still holds): it is
        // given the log up to its removal, and with the next heartbeats that it is committed,
        // before it leaves the Raft group. One that is down leaves without.
        let within = self.config.request_timeout;
        if super::reassign::caught_up(meta, &[id], within, || true)
            .await
            .is_ok()
        {
            tokio::time::sleep(self.config.heartbeat_interval * 3).await;
        } else {
            tracing::info!(
                broker = id,
                "a removed broker is not answering: it leaves the metadata Raft group without having \
                 copied all of it"
            );
        }
        if voters.contains(&id) {
            let mut next: BTreeSet<NodeId> = voters.iter().copied().filter(|v| *v != id).collect();
            let members = meta.raft.member_ids();
            let learner = {
                let catalog = self.catalog.read();
                members.iter().copied().find(|m| {
                    !voters.contains(m) && catalog.brokers().contains(m) && !catalog.is_draining(*m)
                })
            };
            // A learner votes only once it holds the metadata log, so as not to hold up its
            // commits.
            if let Some(learner) = learner
                && super::reassign::caught_up(meta, &[learner], timeout, || true)
                    .await
                    .is_ok()
            {
                next.insert(learner);
            }
            meta.raft.change_voters(next.clone()).await.map_err(again)?;
            tracing::info!(broker = id, voters = ?next, "removed broker left the metadata Raft group");
        } else {
            meta.raft
                .remove_learners(BTreeSet::from([id]))
                .await
                .map_err(again)?;
            tracing::info!(broker = id, "removed broker left the metadata Raft group");
        }
        Ok(())
    }

    /// Whether this broker was removed from the cluster: it serves no client then.
    pub(crate) fn departed(&self) -> bool {
        self.catalog.read().is_removed(self.config.id)
    }

    /// On a broker decommissioned: says once, when it has been removed from the cluster and
    /// no longer votes in the metadata Raft group, that it can stop.
    pub(super) fn say_when_removed(&self, said: &mut bool) {
        if !*said && self.departed() && !self.meta.raft.votes_in_newest(self.config.id) {
            // (Node::has_left says the same.)
            tracing::info!(
                "this broker was decommissioned and removed from the cluster: it serves no client any more and can stop"
            );
            *said = true;
        }
    }
}
