//! Withdrawing a quiet group's leadership: a broker that takes out of service a replica that
//! leads a quiet group (its member stopped, could not be built again from dormancy, or its
//! files were found damaged) tells the other members' brokers, whose members are parked under
//! a broker that stays live and would otherwise wait for it for ever.
//!
//! The message is a `Quiesce` entry whose vote is not committed (PROTOCOL.md, op 27). A
//! broker that receives it wakes its member if parked under that leadership, so the group
//! elects; remembers the leadership as withdrawn, so that an offer of quiet for it still on
//! its way is refused; and acknowledges it. The sender sends it again to each broker that has
//! not acknowledged it, one message per broker for all the partitions due, the pause doubling
//! from an election timeout up to [`WITHDRAWAL_PAUSE_MAX`], for [`WITHDRAWAL_RETRIED_FOR`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{OFFERS_PER_MESSAGE, QuiesceRequest, QuietGroup};
use crate::node::{Broker, HostedReplica};
use crate::raft::types::Vote;
use crate::types::NodeId;

/// How long a withdrawal of quiet is sent again to a broker that has not acknowledged it, and
/// how long a broker that received one refuses offers for the leadership it withdrew.
const WITHDRAWAL_RETRIED_FOR: Duration = Duration::from_secs(600);

/// The longest pause between two sendings of a withdrawal of quiet.
const WITHDRAWAL_PAUSE_MAX: Duration = Duration::from_secs(8);

/// A withdrawal of a quiet group's leadership (see [`Broker::withdraw_quiet`]) that some
/// member's broker has not acknowledged yet.
#[derive(Debug)]
pub(in crate::node) struct Withdrawal {
    group: QuietGroup,
    /// The brokers that have not acknowledged it.
    unanswered: Vec<NodeId>,
    /// When it is sent again.
    next: Instant,
    /// The pause before `next`, doubled each time.
    pause: Duration,
    /// When it is sent no more.
    until: Instant,
}

/// The withdrawals a broker heard, by partition: a few each, the latest last.
pub(in crate::node) type WithdrawnMap = HashMap<crate::types::PartitionId, Vec<Withdrawn>>;

/// The withdrawals of one partition a broker remembers: more than one only when leaderships
/// follow each other within an offer's flight.
const WITHDRAWALS_KEPT: usize = 4;

/// A leadership of a partition's Raft group that its leader's broker withdrew, as another
/// member's broker remembers it.
#[derive(Debug)]
pub(in crate::node) struct Withdrawn {
    topic_id: u64,
    vote: Vote,
    at: Instant,
}

impl Broker {
    /// On taking out of service `replica`, a group this broker leads (or led, parked): tells
    /// the other members' brokers that it leads the group no more, so that their members,
    /// parked under a broker that stays live, wake and elect another leader instead of
    /// waiting for this one. A broker that does not acknowledge it (the message or its answer
    /// lost, the broker unreachable for a while) is told again by
    /// [`retry_withdrawals`](Self::retry_withdrawals). A broker of version 3 answers it as an
    /// offer it refuses and keeps waiting, until this broker restarts or falls silent.
    pub(in crate::node) async fn withdraw_quiet(&self, replica: &HostedReplica) {
        let me = self.config.id;
        // Nothing parks under a broker that offers no quiet.
        if self.config.quiesce_after.is_none() {
            return;
        }
        let Some((vote, last)) = replica.raft.quiet_withdrawal(me) else {
            return;
        };
        let group = QuietGroup {
            partition: replica.id.clone(),
            topic_id: replica.topic_id,
            vote,
            last,
        };
        let members = replica.raft.member_ids().into_iter().filter(|id| *id != me);
        let (asked, mut unanswered): (Vec<NodeId>, Vec<NodeId>) =
            members.partition(|id| self.may_be_live(*id));
        let answers = asked
            .iter()
            .map(|to| self.ask_withdrawals(*to, vec![group.clone()]));
        let answers = futures_util::future::join_all(answers).await;
        let refused = asked.into_iter().zip(answers).filter(|(_, a)| a != &[true]);
        unanswered.extend(refused.map(|(id, _)| id));
        let mut pending = self.withdrawals.lock();
        if unanswered.is_empty() {
            // One sent for an earlier leadership is moot.
            pending.remove(&group.partition);
            return;
        }
        let pause = self.config.election_timeout;
        let withdrawal = Withdrawal {
            unanswered,
            next: Instant::now() + pause,
            pause,
            until: Instant::now() + WITHDRAWAL_RETRIED_FOR,
            group,
        };
        pending.insert(withdrawal.group.partition.clone(), withdrawal);
    }

    /// Sends again the withdrawals some member's broker has not acknowledged and whose pause
    /// is over: one message per broker for every partition due (to brokers that may be up,
    /// all at once), each withdrawal after a pause that doubles up to
    /// [`WITHDRAWAL_PAUSE_MAX`], for at most [`WITHDRAWAL_RETRIED_FOR`]. Also forgets
    /// withdrawals received that long ago.
    pub(in crate::node) async fn retry_withdrawals(self: &Arc<Self>) {
        let now = Instant::now();
        self.withdrawn.lock().retain(|_, heard| {
            heard.retain(|w| now.duration_since(w.at) < WITHDRAWAL_RETRIED_FOR);
            !heard.is_empty()
        });
        // Withdrawals stay in the map while sent: one that `withdraw_quiet` replaces or
        // removes meanwhile is left as it made it.
        let due: Vec<(QuietGroup, Vec<NodeId>)> = (self.withdrawals.lock().values())
            .filter(|w| w.next <= now)
            .map(|w| (w.group.clone(), w.unanswered.clone()))
            .collect();
        if due.is_empty() {
            return;
        }
        let mut by_broker: HashMap<NodeId, Vec<usize>> = HashMap::new();
        for (i, (_, to)) in due.iter().enumerate() {
            for b in to.iter().filter(|b| self.may_be_live(**b)) {
                by_broker.entry(*b).or_default().push(i);
            }
        }
        let mut asked = tokio::task::JoinSet::new();
        for (broker, indices) in by_broker {
            for chunk in indices.chunks(OFFERS_PER_MESSAGE) {
                let groups = chunk.iter().map(|i| due[*i].0.clone()).collect();
                let (this, chunk) = (Arc::clone(self), chunk.to_vec());
                asked.spawn(async move {
                    let answers = this.ask_withdrawals(broker, groups).await;
                    (broker, chunk, answers)
                });
            }
        }
        let mut acknowledged: HashSet<(usize, NodeId)> = HashSet::new();
        // Bounded by the tasks spawned above, each bounded by its call's deadline.
        while let Some(Ok((broker, chunk, answers))) = asked.join_next().await {
            let yes = chunk.into_iter().zip(answers).filter(|(_, yes)| *yes);
            acknowledged.extend(yes.map(|(i, _)| (i, broker)));
        }
        let mut pending = self.withdrawals.lock();
        for (i, (group, _)) in due.iter().enumerate() {
            let Some(w) = pending.get_mut(&group.partition) else {
                continue;
            };
            if w.group.vote != group.vote || w.group.topic_id != group.topic_id {
                continue;
            }
            w.unanswered.retain(|b| !acknowledged.contains(&(i, *b)));
            if w.unanswered.is_empty() {
                pending.remove(&group.partition);
            } else if now >= w.until {
                tracing::warn!(
                    partition = %group.partition,
                    brokers = ?w.unanswered,
                    "gave up telling brokers that this broker no longer leads a quiet partition: \
                     their replicas elect once this broker restarts or falls silent"
                );
                pending.remove(&group.partition);
            } else {
                w.pause = (w.pause * 2).min(WITHDRAWAL_PAUSE_MAX);
                w.next = Instant::now() + w.pause;
            }
        }
    }

    /// Sends the withdrawals `groups` to broker `to`; one acknowledgement or not per group.
    async fn ask_withdrawals(&self, to: NodeId, groups: Vec<QuietGroup>) -> Vec<bool> {
        #[cfg(test)]
        if crate::env::strikes(&self.lost_withdrawals) {
            return vec![false; groups.len()];
        }
        self.ask_quiet(to, groups).await
    }

    /// Serves the withdrawals among `request`'s groups (those whose vote is not committed):
    /// each is remembered, and the member here, if parked under that leadership, wakes; the
    /// groups woken elect another leader.
    pub(in crate::node) fn serve_withdrawals(&self, request: &QuiesceRequest) {
        let withdrawals = || request.groups.iter().filter(|g| !g.vote.committed);
        // A broker that takes no offer of quiet has none to refuse.
        if self.config.quiesce_after.is_some() {
            let mut withdrawn = self.withdrawn.lock();
            for g in withdrawals() {
                let heard = withdrawn.entry(g.partition.clone()).or_default();
                heard.retain(|w| !w.same_leadership(g));
                if heard.len() >= WITHDRAWALS_KEPT {
                    heard.remove(0);
                }
                heard.push(Withdrawn {
                    topic_id: g.topic_id,
                    vote: g.vote,
                    at: Instant::now(),
                });
            }
        }
        let woken: Vec<Arc<HostedReplica>> = {
            let replicas = self.replicas.read();
            withdrawals()
                .filter_map(|g| {
                    let r = replicas
                        .get(&g.partition)
                        .filter(|r| r.topic_id == g.topic_id)?;
                    Some((r, g))
                })
                .filter(|(r, g)| {
                    r.raft.parked_under() == Some(request.from) && r.raft.follows_vote_of(&g.vote)
                })
                .map(|(r, _)| Arc::clone(r))
                .collect()
        };
        if !woken.is_empty() {
            tracing::info!(
                broker = request.from,
                partitions = woken.len(),
                "peer broker lost the quiet partitions it led: they elect a new leader"
            );
            self.elect_instead_of(request.from, woken, false);
        }
    }

    /// Whether the leadership `group` offers quiet for was withdrawn (an offer made before
    /// the withdrawal and delivered after it), as `withdrawn` (the broker's, locked) says.
    pub(in crate::node) fn was_withdrawn(withdrawn: &WithdrawnMap, group: &QuietGroup) -> bool {
        (withdrawn.get(&group.partition))
            .is_some_and(|heard| heard.iter().any(|w| w.same_leadership(group)))
    }
}

impl Withdrawn {
    /// Whether `group` is of the leadership this withdrew (the same topic, term and leader).
    fn same_leadership(&self, group: &QuietGroup) -> bool {
        self.topic_id == group.topic_id && self.vote.leader_id() == group.vote.leader_id()
    }
}
