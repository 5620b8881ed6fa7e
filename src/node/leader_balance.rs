//! Leadership back to the preferred replicas (Kafka's `auto.leader.rebalance.enable`): after
//! a broker fails and returns, the partitions it led stay with whoever took them over, so a
//! rolling restart can leave one broker leading everything. Every
//! `leader_imbalance_check_interval`, each broker looks at the partitions it leads whose
//! preferred replica (the first of the assignment) is another broker; where that broker leads
//! too few of the partitions it is preferred for (more than `leader_imbalance_percentage` of
//! them led by others, as far as this broker's replicas know), the leader hands the partition
//! back by a Raft leadership transfer, only to a replica that holds every entry, a few
//! partitions per check, so that a returning broker is not flooded.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Broker, HostedReplica};
use crate::types::NodeId;

/// Most partitions one broker hands back per check.
const MOVES_PER_CHECK: usize = 8;

impl Broker {
    /// Hands back to their preferred replicas the partitions this broker leads that should go
    /// back (module docs), a few at a time; how many moved.
    pub(crate) async fn rebalance_leaders(&self) -> usize {
        let me = self.config.id;
        let hosted: Vec<Arc<HostedReplica>> = self.groups.read().values().cloned().collect();
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
                let (Some(preferred), Some(leader)) = (preferred, g.raft.state().leader) else {
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
            if elsewhere * 100 <= threshold * known {
                continue;
            }
            if g.raft.transfer_to(me, preferred, timeout).await {
                tracing::info!(partition = %g.id, to = preferred,
                    "leadership handed back to the preferred replica");
                moved += 1;
            }
        }
        moved
    }
}
