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

impl Broker {
    /// Moves the partitions this broker leads whose group's voters are not yet the
    /// catalog's replicas (a reassignment; see [`MetaCommand::ReassignPartition`]), one task
    /// per partition at a time.
    pub(super) fn drive_moves(
        self: &Arc<Self>,
        moving: &mut HashMap<PartitionId, tokio::task::JoinHandle<()>>,
    ) {
        moving.retain(|_, task| !task.is_finished());
        let me = self.config.id;
        // Only partitions ever reassigned are looked at: the others' voters are their
        // replicas from the start.
        let groups: Vec<Arc<HostedReplica>> = self.groups.read().values().cloned().collect();
        let due: Vec<(Arc<HostedReplica>, Vec<NodeId>, bool)> = {
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
            let broker = Arc::clone(self);
            let id = group.id.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = broker.move_partition(&group, target, leaving).await {
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
        group: &HostedReplica,
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
}
