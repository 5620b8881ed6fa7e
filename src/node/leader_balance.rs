//! Leadership back to the preferred replicas (Kafka's `auto.leader.rebalance.enable`): after
//! a broker fails and returns, the partitions it led stay with whoever took them over, so a
//! rolling restart can leave one broker leading everything. Every
//! `leader_imbalance_check_interval`, each broker looks at the partitions it leads whose
//! preferred replica (the first of the assignment) is another broker; where that broker leads
//! too few of the partitions it is preferred for (more than `leader_imbalance_percentage` of
//! them led by others, as far as this broker's replicas know), the leader hands the partition
//! back by a Raft leadership transfer, only to a replica that holds every entry, a few
//! partitions per check, so that a returning broker is not flooded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Broker, HostedReplica};
use crate::error::Result;
use crate::protocol::{ElectLeadersRequest, WireError};
use crate::raft::replica::TransferRefused;
use crate::transport::frame::Op;
use crate::types::{NodeId, PartitionId};

/// Most partitions one broker hands back per check.
const MOVES_PER_CHECK: usize = 8;

impl Broker {
    /// Hands back to their preferred replicas the partitions this broker leads that should go
    /// back (module docs), a few at a time; how many moved.
    pub(crate) async fn rebalance_leaders(&self) -> usize {
        let me = self.config.id;
        let hosted: Vec<Arc<HostedReplica>> = self.replicas.read().values().cloned().collect();
        // Per preferred broker: partitions known here, and those another broker leads.
        let mut preferred_of: BTreeMap<NodeId, (u64, u64)> = BTreeMap::new();
        let mut mine = Vec::new();
        {
            let catalog = self.catalog.read();
            for g in hosted {
                let preferred = catalog
                    .topic(&g.id.topic)
                    .and_then(|t| t.assignment.get(g.id.partition as usize))
                    .and_then(|replicas| replicas.first())
                    .copied();
                let (Some(preferred), Some(leader)) = (preferred, g.raft.leader()) else {
                    continue;
                };
                let counts = preferred_of.entry(preferred).or_default();
                counts.0 += 1;
                if leader != preferred {
                    counts.1 += 1;
                    if leader == me {
                        mine.push((g, preferred));
                    }
                }
            }
        }
        let threshold = u64::from(self.config.leader_imbalance_percentage);
        let timeout = self.config.election_timeout;
        let mut moved = 0;
        for (g, preferred) in mine {
            if moved == MOVES_PER_CHECK {
                break;
            }
            let (known, elsewhere) = preferred_of.get(&preferred).copied().unwrap_or_default();
            // A preferred replica on a broker that is down cannot take over: asking would only
            // wake a quiet group, and build a dormant one again, for nothing.
            if elsewhere * 100 <= threshold * known || !self.may_be_live(preferred) {
                continue;
            }
            match g.raft.transfer_to(me, preferred, timeout).await {
                Ok(()) => {
                    tracing::info!(partition = %g.id, to = preferred,
                        "leadership handed back to the preferred replica");
                    moved += 1;
                }
                Err(why) => {
                    tracing::debug!(partition = %g.id, to = preferred, %why,
                        "leadership not handed back to the preferred replica yet");
                }
            }
        }
        moved
    }
}

/// What a preferred-leader election did for one partition ([`Client::elect_leaders`]).
///
/// [`Client::elect_leaders`]: crate::Client::elect_leaders
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Election {
    /// Leadership moved to the preferred replica.
    Elected,
    /// The preferred replica led already (Kafka's ELECTION_NOT_NEEDED).
    NotNeeded,
    /// The preferred replica cannot take over now, and why (it is down, behind the leader, or
    /// the partition has no leader to hand over from); Kafka's PREFERRED_LEADER_NOT_AVAILABLE.
    PreferredUnavailable(String),
    /// No such topic or partition.
    UnknownPartition,
    /// The partition's leader could not be asked or changed meanwhile; asking again may
    /// succeed.
    TryAgain(String),
}

/// Partitions handed over at once by one broker.
const ELECTIONS_AT_ONCE: usize = 32;

impl Broker {
    /// Hands each partition of `partitions` (`None`: all) to its preferred replica: those this
    /// broker leads here, the others by asking their leaders (as `forwarded`, only the ones
    /// they lead). With `forwarded`, only this broker's own leaderships are handed over.
    pub(crate) async fn elect_preferred_leaders(
        &self,
        partitions: Option<Vec<PartitionId>>,
        forwarded: bool,
    ) -> Vec<(PartitionId, Election)> {
        if forwarded {
            return self.elect_here(partitions.unwrap_or_default()).await;
        }
        let asked: Vec<PartitionId> = match partitions {
            Some(asked) => asked,
            None => {
                let catalog = self.catalog.read();
                catalog
                    .topics()
                    .flat_map(|(name, t)| {
                        (0..t.assignment.len()).map(move |p| {
                            PartitionId::new(name.clone(), u32::try_from(p).unwrap_or(u32::MAX))
                        })
                    })
                    .collect()
            }
        };
        let metadata = self.metadata(None, false).await;
        let known: HashMap<&PartitionId, (Option<NodeId>, Option<NodeId>)> = metadata
            .partitions
            .iter()
            .map(|p| (&p.partition, (p.replicas.first().copied(), p.leader)))
            .collect();
        let mut outcomes: Vec<(PartitionId, Election)> = Vec::with_capacity(asked.len());
        let mut by_leader: BTreeMap<NodeId, Vec<PartitionId>> = BTreeMap::new();
        for id in asked {
            match known.get(&id).copied() {
                None | Some((None, _)) => outcomes.push((id, Election::UnknownPartition)),
                Some((Some(preferred), Some(leader))) if preferred == leader => {
                    outcomes.push((id, Election::NotNeeded));
                }
                Some((Some(_), None)) => outcomes.push((
                    id,
                    Election::PreferredUnavailable(
                        "the partition has no leader now to hand over from".into(),
                    ),
                )),
                Some((Some(_), Some(leader))) => by_leader.entry(leader).or_default().push(id),
            }
        }
        let me = self.config.id;
        let asks = by_leader.into_iter().map(|(leader, ids)| async move {
            if leader == me {
                return self.elect_here(ids).await;
            }
            let request = ElectLeadersRequest {
                partitions: Some(ids.clone()),
                forwarded: true,
            };
            let timeout = self.config.request_timeout;
            let answer: Result<std::result::Result<Vec<(PartitionId, Election)>, WireError>> = self
                .forward(leader, Op::ElectLeaders, &request, timeout)
                .await;
            let why = match answer {
                Ok(Ok(done)) => return done,
                Ok(Err(e)) => format!("broker {leader}, the partition's leader, refused: {e:?}"),
                Err(e) => format!("broker {leader}, the partition's leader, did not answer: {e}"),
            };
            ids.into_iter()
                .map(|id| (id, Election::TryAgain(why.clone())))
                .collect()
        });
        for done in futures_util::future::join_all(asks).await {
            outcomes.extend(done);
        }
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        outcomes
    }

    /// Hands each of `partitions` this broker leads to its preferred replica, a few at a time.
    async fn elect_here(&self, partitions: Vec<PartitionId>) -> Vec<(PartitionId, Election)> {
        let mut outcomes = Vec::with_capacity(partitions.len());
        for chunk in partitions.chunks(ELECTIONS_AT_ONCE) {
            let done = futures_util::future::join_all(
                chunk
                    .iter()
                    .map(|id| async move { (id.clone(), self.elect_one(id).await) }),
            )
            .await;
            outcomes.extend(done);
        }
        outcomes
    }

    /// Hands partition `id` to its preferred replica if this broker leads it.
    async fn elect_one(&self, id: &PartitionId) -> Election {
        let me = self.config.id;
        let preferred = self
            .catalog
            .read()
            .topic(&id.topic)
            .and_then(|t| t.assignment.get(id.partition as usize))
            .and_then(|replicas| replicas.first())
            .copied();
        let Some(preferred) = preferred else {
            return Election::UnknownPartition;
        };
        let Some(replica) = self.replicas.read().get(id).cloned() else {
            return Election::TryAgain("its leader no longer hosts it".into());
        };
        match replica.raft.leader() {
            Some(leader) if leader == preferred => return Election::NotNeeded,
            Some(leader) if leader == me => {}
            _ => return Election::TryAgain("its leadership moved meanwhile".into()),
        }
        if preferred != me && !self.may_be_live(preferred) {
            return Election::PreferredUnavailable(format!(
                "broker {preferred}: {}",
                TransferRefused::NotHeardFrom
            ));
        }
        // A replica behind by the writes in flight catches up within a round trip or two:
        // tried again until an election timeout has passed.
        let timeout = self.config.election_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut transferred = replica.raft.transfer_to(me, preferred, timeout).await;
        // Bounded by the deadline.
        while transferred == Err(TransferRefused::Behind) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            transferred = replica.raft.transfer_to(me, preferred, timeout).await;
        }
        match transferred {
            Ok(()) => {
                tracing::info!(partition = %id, to = preferred,
                    "leadership handed to the preferred replica on request");
                Election::Elected
            }
            Err(TransferRefused::NotLeader) => {
                Election::TryAgain("its leadership moved meanwhile".into())
            }
            Err(why) => Election::PreferredUnavailable(format!("broker {preferred}: {why}")),
        }
    }
}
