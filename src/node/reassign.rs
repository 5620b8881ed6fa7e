//! Partition reassignment, driven by the partition's leader: new replicas join as learners,
//! the voters change by joint consensus, then the move is recorded done.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::MetaCommand;
use crate::error::{Error, Result};
use crate::protocol::ProposeRequest;
use crate::types::{NodeId, PartitionId};

use super::{Broker, HostedReplica};

/// Partitions one leader moves at once (the others wait their turn).
pub(super) const MOVES_AT_ONCE: usize = 8;

impl Broker {
    /// Partition `id`'s replicas as the catalog has them now.
    fn assignment_of(&self, id: &PartitionId) -> Option<Vec<NodeId>> {
        let catalog = self.catalog.read();
        catalog
            .topic(&id.topic)
            .and_then(|t| t.assignment.get(id.partition as usize).cloned())
    }

    /// Moves the partitions this broker leads whose Raft group's voters are not yet the
    /// catalog's replicas (a reassignment; see [`MetaCommand::ReassignPartition`]), one task
    /// per partition at a time, and at most [`MOVES_AT_ONCE`] partitions at once: a broker
    /// being decommissioned hands out all its partitions in one command, and copying them all
    /// at once would share the links and disks among more logs than they serve well, starving
    /// the writes the leaders take meanwhile.
    pub(super) fn drive_moves(
        self: &Arc<Self>,
        moving: &mut HashMap<PartitionId, tokio::task::JoinHandle<()>>,
    ) {
        moving.retain(|_, task| !task.is_finished());
        let me = self.config.id;
        // Only partitions ever reassigned are looked at: the others' voters are their
        // replicas from the start.
        let replicas: Vec<Arc<HostedReplica>> = self.replicas.read().values().cloned().collect();
        let due: Vec<(Arc<HostedReplica>, Vec<NodeId>, bool)> = {
            let catalog = self.catalog.read();
            replicas
                .iter()
                .filter_map(|g| {
                    let t = catalog.topic(&g.id.topic).filter(|t| t.id == g.topic_id)?;
                    let p = g.id.partition as usize;
                    let under_way = !t.was.get(p)?.is_empty();
                    let target = t.assignment.get(p)?.clone();
                    t.moved.get(p)?.then(|| (Arc::clone(g), target, under_way))
                })
                .collect()
        };
        for (replica, target, under_way) in due {
            if moving.len() >= MOVES_AT_ONCE {
                break;
            }
            if moving.contains_key(&replica.id) || replica.raft.leader() != Some(me) {
                continue;
            }
            let (voters, joint) = replica.raft.voters();
            let settled = !joint && voters == target.iter().copied().collect();
            if settled && !under_way {
                continue;
            }
            let broker = Arc::clone(self);
            let id = replica.id.clone();
            let task = tokio::spawn(async move {
                let moved = broker.move_partition(&replica, target, under_way).await;
                let id = replica.id.clone();
                // Not held while waiting: a replica removed meanwhile closes at once.
                drop(replica);
                if let Err(e) = moved {
                    tracing::debug!(partition = %id, error = %e, "moving the partition; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            moving.insert(id, task);
        }
    }

    /// On the partition's leader: adds the replicas in `target` that the Raft group lacks as
    /// learners, makes `target` the voters, and, if the move is still recorded as under way
    /// (`moving`), records in the metadata log that it is done (the brokers it left then drop
    /// their replicas).
    async fn move_partition(
        &self,
        replica: &HostedReplica,
        target: Vec<NodeId>,
        moving: bool,
    ) -> Result<()> {
        let failed = |e: String| Error::TryAgain {
            partition: replica.id.clone(),
            reason: e,
        };
        let wanted: std::collections::BTreeSet<NodeId> = target.iter().copied().collect();
        let (voters, joint) = replica.raft.voters();
        // A leader moving itself out hands its leadership to a voter that stays first, so
        // that writes pause for a transfer rather than for an election; that one carries the
        // move on.
        let me = self.config.id;
        if !wanted.contains(&me) && !joint {
            let timeout = self.config.election_timeout;
            for to in target.iter().filter(|id| voters.contains(id)) {
                if replica.raft.transfer_to(me, *to, timeout).await.is_ok() {
                    tracing::info!(partition = %replica.id, to, "leadership handed over before moving off this broker");
                    return Ok(());
                }
            }
        }
        if voters != wanted || joint {
            let members = replica.raft.member_ids();
            for id in target.iter().filter(|id| !members.contains(id)) {
                let addr = self
                    .broker_addr(*id)
                    .ok_or_else(|| failed(format!("no address for broker {id}")))?;
                replica
                    .raft
                    .add_learner(*id, addr.to_string())
                    .await
                    .map_err(failed)?;
            }
            // New voters that do not hold the log yet would hold up every commit of the joint
            // configuration (a broker that is down, forever): they vote once they copied it.
            if !joint {
                let new: Vec<NodeId> = target
                    .iter()
                    .copied()
                    .filter(|id| !voters.contains(id))
                    .collect();
                let still_wanted = || self.assignment_of(&replica.id) == Some(target.clone());
                caught_up(replica, &new, self.config.request_timeout, still_wanted)
                    .await
                    .map_err(failed)?;
            }
            replica
                .raft
                .change_voters(wanted.clone())
                .await
                .map_err(failed)?;
            tracing::info!(partition = %replica.id, voters = ?target, "partition moved");
        }
        // Learners a move added and a later one (or a cancellation) no longer wants.
        let extra: std::collections::BTreeSet<NodeId> = replica
            .raft
            .member_ids()
            .into_iter()
            .filter(|id| !wanted.contains(id))
            .collect();
        if !extra.is_empty() && !replica.raft.voters().1 {
            replica.raft.remove_learners(extra).await.map_err(failed)?;
        }
        if !moving {
            return Ok(());
        }
        let request = ProposeRequest {
            command: MetaCommand::ReassignDone {
                topic_id: replica.topic_id,
                partition: replica.id.partition,
                replicas: target,
            },
            forwarded: false,
        };
        self.propose(request).await
    }
}

/// Waits, at most `within` and while `still_wanted`, until each of `learners` holds the log as
/// far as the leader held it when the wait began (so that, as voters, they do not hold up its
/// commits); else why not.
pub(super) async fn caught_up(
    replica: &HostedReplica,
    learners: &[NodeId],
    within: Duration,
    still_wanted: impl Fn() -> bool,
) -> std::result::Result<(), String> {
    let goal = replica.raft.state().last_log_index;
    let deadline = tokio::time::Instant::now() + within;
    // Bounded by the deadline.
    loop {
        let members = replica.raft.state().members.unwrap_or_default();
        let behind: Vec<NodeId> = learners
            .iter()
            .copied()
            .filter(|id| members.get(id).and_then(|m| m.matched) < goal)
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if !still_wanted() {
            return Err("the partition was given other replicas meanwhile".into());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "brokers {behind:?} have not copied the partition's log yet"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
