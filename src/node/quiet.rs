//! Quiet partitions, the broker's side (each member's side is `raft/quiet.rs`).
//!
//! Every half second the broker looks at the partitions it leads: one that has not been
//! written for `NodeConfig::quiesce_after`, whose log every member on a live broker holds,
//! committed and applied, and whose live members' brokers all speak protocol version 3, is
//! offered quiet. Members on brokers that are down are left out (as CockroachDB quiesces
//! ranges with a dead replica) while the leader and the live members that hold its log are a
//! majority of the voters, in a configuration that is not joint: a broker that is down does
//! not keep every Raft group it belongs to heartbeating, and its return wakes them (below).
//! The offers go out in one `Quiesce` message per follower broker (`Op::Quiesce`, body
//! `QuiesceRequest`, answer `Result<Vec<bool>, WireError>`: one yes or no per group, in
//! order); a group whose followers all said yes parks on the leader too. The metadata Raft
//! group and the offsets topic's partitions never go quiet: the cluster's and the consumer
//! groups' coordination runs through them.
//!
//! When a broker turns silent (`liveness.rs`), this broker's members of the groups that broker
//! led campaign, quiet or not: the first survivor by id at once, the next half an election
//! timeout later, and so on, [`WOKEN_AT_ONCE`] at a time, so that a thousand groups do not all
//! campaign in the same instant. When a broker is heard again, or restarted, this broker wakes the quiet groups it
//! leads with a replica there. When a broker takes out of service a replica that leads a
//! quiet group (its member stopped, could not be built again from dormancy, or its files
//! were found damaged), it withdraws the group's quiet ([`Broker::withdraw_quiet`]): the
//! members parked under it would otherwise wait for a leader whose broker stays live. Each
//! member's broker acknowledges the withdrawal, and is sent it again until it has
//! (`quiet/withdraw.rs`).
//!
//! ## Why quiet cannot lose a write or elect two leaders
//!
//! Quiet changes only *when* members act, never what Raft lets them do. A write is
//! acknowledged only once a quorum appended it in the leader's term, and a new leader is
//! elected only by a quorum that then refuses the old term's appends; the two quorums share a
//! member, so a quiet leader that was deposed while it slept commits nothing more, however
//! long it slept and however wrong any broker's view of liveness is. Its first write after
//! waking fails: openraft refuses writes until a quorum renewed the leader's lease, and the
//! renewal cannot reach a quorum that follows someone else. The refusals added here (a parked
//! member refusing votes while the leader's broker is live) only withhold votes, which Raft
//! always allows; a leadership transfer's vote is never refused, nor one from the parked
//! leader itself (a leader that campaigns has lost what it led with). A withdrawal only wakes
//! members and starts a campaign, which every voter checks as always. The campaign a survivor starts
//! when the leader's broker turns silent is a pre-vote and then an ordinary election, checked
//! by every voter as one its timer started would be. What the timing does decide is
//! how soon a group led by a dead broker elects (the session timeout, then an election), and
//! that a broker cut off from some of the others one way cannot depose leaders the rest hear.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::catalog::METADATA_TOPIC;
use crate::group::OFFSETS_TOPIC;
use crate::protocol::WireError;
use crate::raft::quiet::QuietOffer;
use crate::raft::types::{LogId, Vote};
use crate::transport::frame::Op;
use crate::types::{NodeId, PartitionId};

use super::{Broker, HostedReplica};

/// Groups woken together after a broker turned silent, before the next few.
const WOKEN_AT_ONCE: usize = 256;

/// The pause between two batches of groups woken.
const WAKE_PAUSE: Duration = Duration::from_millis(50);

/// Wakes each of `replicas` that `still` holds for, [`WOKEN_AT_ONCE`] at a time, a pause
/// between batches: woken groups tick, heartbeat and may elect, and thousands at once would
/// take the cores from the groups already awake.
async fn wake_in_batches(
    replicas: Vec<Arc<HostedReplica>>,
    still: impl Fn(&HostedReplica) -> bool,
) {
    for batch in replicas.chunks(WOKEN_AT_ONCE) {
        for r in batch.iter().filter(|r| still(r)) {
            r.raft.wake().await;
        }
        tokio::time::sleep(WAKE_PAUSE).await;
    }
}

/// Groups offered quiet in one message to one broker.
pub(super) const OFFERS_PER_MESSAGE: usize = 1024;

/// One group offered quiet to a follower broker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct QuietGroup {
    pub(crate) partition: PartitionId,
    pub(crate) topic_id: u64,
    /// The leader's committed vote.
    pub(crate) vote: Vote,
    /// The leader's last log id, committed and applied.
    pub(crate) last: LogId,
}

/// A `Quiesce` message's body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QuiesceRequest {
    /// The leader broker.
    pub(crate) from: NodeId,
    pub(crate) groups: Vec<QuietGroup>,
}

impl super::Node {
    /// How many of the partition replicas this broker hosts are quiet now: their Raft groups
    /// stopped their heartbeats and timers here until the next write (see
    /// [`NodeConfig::quiesce_after`](crate::NodeConfig::quiesce_after)).
    pub fn quiet_replicas(&self) -> usize {
        self.broker.quiet_replicas()
    }

    /// How many of the partition replicas this broker hosts are dormant now: quiet for
    /// [`NodeConfig::dormant_after`](crate::NodeConfig::dormant_after), their Raft members
    /// dropped until something needs them.
    pub fn dormant_replicas(&self) -> usize {
        self.broker.dormant_replicas()
    }
}

impl Broker {
    /// Every half second until shutdown, offers quiet to the idle groups this broker leads
    /// (if `quiesce_after` is set).
    pub(super) async fn run_quiet(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let Some(idle) = self.config.quiesce_after else {
            return;
        };
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Ends at shutdown.
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tick.tick() => {
                    self.retry_withdrawals().await;
                    self.offer_quiet(idle).await;
                    if let Some(after) = self.config.dormant_after {
                        self.go_dormant(after).await;
                    }
                }
            }
        }
    }

    /// Whether `replica`'s Raft group may ever go quiet.
    fn may_go_quiet(replica: &HostedReplica) -> bool {
        replica.id.topic != METADATA_TOPIC && replica.id.topic != OFFSETS_TOPIC
    }

    /// One round of offers (see the module's docs).
    async fn offer_quiet(self: &Arc<Self>, idle: Duration) {
        let me = self.config.id;
        let replicas: Vec<Arc<HostedReplica>> = self.replicas.read().values().cloned().collect();
        let speaks_quiesce = |id: &NodeId| {
            self.peers
                .live_version(*id)
                .is_some_and(|v| v >= Op::Quiesce.since())
        };
        let offers: Vec<(Arc<HostedReplica>, QuietOffer)> = replicas
            .into_iter()
            .filter(|r| Self::may_go_quiet(r))
            .filter_map(|r| {
                let offer = r
                    .raft
                    .quiet_offer(me, idle, |id| self.takes_part_in_quiet(id))?;
                offer
                    .followers
                    .iter()
                    .all(speaks_quiesce)
                    .then_some((r, offer))
            })
            .collect();
        if offers.is_empty() {
            return;
        }
        for (r, _) in &offers {
            r.raft.pause_heartbeats();
        }
        let mut by_broker: HashMap<NodeId, Vec<usize>> = HashMap::new();
        for (i, (_, offer)) in offers.iter().enumerate() {
            for f in &offer.followers {
                by_broker.entry(*f).or_default().push(i);
            }
        }
        let mut yes = vec![0usize; offers.len()];
        let mut asked = tokio::task::JoinSet::new();
        for (broker, indices) in by_broker {
            for chunk in indices.chunks(OFFERS_PER_MESSAGE) {
                let groups = chunk
                    .iter()
                    .map(|i| {
                        let (r, o) = &offers[*i];
                        QuietGroup {
                            partition: r.id.clone(),
                            topic_id: r.topic_id,
                            vote: o.vote,
                            last: o.last,
                        }
                    })
                    .collect();
                let this = Arc::clone(self);
                let chunk = chunk.to_vec();
                asked.spawn(async move {
                    let answers = this.ask_quiet(broker, groups).await;
                    (chunk, answers)
                });
            }
        }
        // Bounded by the tasks spawned above, each bounded by its call's deadline.
        while let Some(Ok((chunk, answers))) = asked.join_next().await {
            for (i, said_yes) in chunk.into_iter().zip(answers) {
                yes[i] += usize::from(said_yes);
            }
        }
        let mut parked = 0;
        for ((r, offer), n) in offers.iter().zip(yes) {
            if n == offer.followers.len() && r.raft.park_leader(me, offer) {
                parked += 1;
            } else {
                r.raft.resume_heartbeats();
            }
        }
        if parked > 0 {
            tracing::debug!(groups = parked, "partitions gone quiet");
        }
    }

    /// Whether a member on broker `id` must hold the leader's log and say yes for its Raft
    /// group to go quiet: if its broker is live, or reachable and of a version before quiet
    /// (which sends no liveness heartbeats: its groups stay awake, as before quiet). A member
    /// on a broker that is down is left out of the quiet.
    fn takes_part_in_quiet(&self, id: NodeId) -> bool {
        self.may_be_live(id)
    }

    /// Whether broker `id` may be up: heard within the liveness session, or reachable and of
    /// a version before liveness heartbeats (its silence says nothing).
    pub(super) fn may_be_live(&self, id: NodeId) -> bool {
        self.liveness.is_live(id)
            || self
                .peers
                .live_version(id)
                .is_some_and(|v| v < Op::Quiesce.since())
    }

    /// Offers `groups` quiet to broker `to`: one yes or no per group (all no if it does not
    /// answer).
    pub(super) async fn ask_quiet(&self, to: NodeId, groups: Vec<QuietGroup>) -> Vec<bool> {
        let n = groups.len();
        let request = QuiesceRequest {
            from: self.config.id,
            groups,
        };
        let (Some(peer), Ok(body)) = (
            self.peers.get(to, true),
            crate::transport::body::encode(&request),
        ) else {
            return vec![false; n];
        };
        let timeout = self.config.election_timeout;
        let answer = match self.peers.call(&peer, to, Op::Quiesce, body, timeout).await {
            Ok(answer) => answer,
            Err(_) => return vec![false; n],
        };
        match postcard::from_bytes::<Result<Vec<bool>, WireError>>(&answer) {
            Ok(Ok(answers)) if answers.len() == n => answers,
            _ => vec![false; n],
        }
    }

    /// Serves a leader broker's offers: each group parks here if this broker's replica of it
    /// holds exactly the leader's log and follows its vote. A group whose vote is not
    /// committed is a withdrawal instead ([`withdraw_quiet`](Self::withdraw_quiet)): its
    /// member here, if parked under the sender, wakes and the group elects another leader;
    /// answered yes, so that the sender stops sending it.
    pub(super) fn serve_quiesce(&self, request: QuiesceRequest) -> Vec<bool> {
        self.serve_withdrawals(&request);
        // A broker whose partitions never go quiet says no to every offer.
        let takes_offers = self.config.quiesce_after.is_some();
        let replicas = self.replicas.read();
        // Held from the check to the park, so that a withdrawal served at the same time
        // either is seen here or finds the member parked and wakes it.
        let withdrawn = self.withdrawn.lock();
        request
            .groups
            .iter()
            .map(|g| {
                use openraft::vote::RaftLeaderId;
                // A withdrawal is acknowledged: acted on above, or nothing here waits for it.
                if !g.vote.committed {
                    return true;
                }
                let from_leader = *g.vote.leader_id().node_id() == request.from;
                replicas.get(&g.partition).is_some_and(|r| {
                    takes_offers
                        && from_leader
                        && !Self::was_withdrawn(&withdrawn, g)
                        && r.topic_id == g.topic_id
                        && Self::may_go_quiet(r)
                        && r.raft.park_follower(&g.vote, &g.last)
                })
            })
            .collect()
    }

    /// Broker `silent` stopped answering (or restarted): the Raft groups it led here elect a
    /// new leader. On the first survivor by id among each group's voters, the member campaigns
    /// at once (a pre-vote first); the other survivors' members of quiet groups wake half an
    /// election timeout later per rank, and their own timers campaign if the first did not
    /// win. Groups awake here campaign on the first survivor too rather than wait for their
    /// timers, which run out only a lease and an election timeout after the leader was last
    /// heard. [`WOKEN_AT_ONCE`] at a time, a pause between them, so that a thousand
    /// elections do not all start in the same instant.
    ///
    /// A campaign asked for here goes through openraft's own checks: the member skips it while
    /// it heard a leader within its lease, and every voter refuses it while it did (or, parked,
    /// while the leader's broker is live in its view). So a broker that wrongly thinks another
    /// silent (a one-way cut) deposes no one.
    pub(super) fn broker_turned_silent(&self, silent: NodeId) {
        let led: Vec<Arc<HostedReplica>> = self
            .replicas
            .read()
            .values()
            .filter(|r| {
                r.raft.parked_under() == Some(silent)
                    || (!r.raft.is_parked() && r.raft.leader() == Some(silent))
            })
            .cloned()
            .collect();
        if !led.is_empty() {
            tracing::info!(
                broker = silent,
                partitions = led.len(),
                "peer broker silent: the partitions it led here elect a new leader"
            );
        }
        self.elect_instead_of(silent, led, true);
    }

    /// The groups of `led`, which broker `gone` led, elect another leader, as
    /// [`broker_turned_silent`](Self::broker_turned_silent) says; without `stagger`, every
    /// survivor's member wakes at once (a withdrawal reaches them all together, and a member
    /// still parked would refuse the first survivor's vote while `gone` is live).
    pub(super) fn elect_instead_of(
        &self,
        gone: NodeId,
        led: Vec<Arc<HostedReplica>>,
        stagger: bool,
    ) {
        let me = self.config.id;
        let mut led: Vec<(usize, Arc<HostedReplica>)> = led
            .into_iter()
            .map(|r| {
                let (voters, _) = r.raft.voters();
                let rank = voters.iter().filter(|v| **v != gone).position(|v| *v == me);
                (rank.unwrap_or(usize::MAX), r)
            })
            .collect();
        // Only the first survivor acts on a group awake here: the others' timers are running.
        led.retain(|(rank, r)| *rank == 0 || r.raft.is_parked());
        if led.is_empty() {
            return;
        }
        led.sort_by_key(|(rank, r)| (*rank, r.id.clone()));
        let step = if stagger {
            self.config.election_timeout / 2
        } else {
            Duration::ZERO
        };
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            for batch in led.chunks(WOKEN_AT_ONCE) {
                for (rank, r) in batch {
                    let at =
                        started + step.saturating_mul(u32::try_from(*rank).unwrap_or(8).min(8));
                    tokio::time::sleep_until(at).await;
                    // A new leader's append may have woken it, or made it follow, already.
                    let parked = r.raft.parked_under() == Some(gone);
                    if parked {
                        r.raft.wake().await;
                    }
                    if *rank == 0 && (parked || r.raft.leader() == Some(gone)) {
                        r.raft.campaign().await;
                    }
                }
                // At most `WOKEN_AT_ONCE` campaigns start in one stretch: the survivors'
                // votes and blank entries are each a sync on several brokers.
                tokio::time::sleep(WAKE_PAUSE).await;
            }
        });
    }

    /// Broker `back` is heard again, or restarted: the quiet groups this broker leads with a
    /// replica there wake ([`WOKEN_AT_ONCE`] at a time), so that the replica hears its leader
    /// before its own election timer runs out. Those it leads awake count it as activity: an
    /// offer of quiet made while `back` was away, which left it out, does not end parked.
    pub(super) fn broker_back(&self, back: NodeId) {
        let me = self.config.id;
        let mut woken: Vec<Arc<HostedReplica>> = Vec::new();
        let mut awake: Vec<Arc<HostedReplica>> = Vec::new();
        for r in self.replicas.read().values() {
            if !r.raft.member_ids().contains(&back) {
                continue;
            }
            if r.raft.parked_under() == Some(me) {
                woken.push(Arc::clone(r));
            } else if r.raft.leader() == Some(me) {
                awake.push(Arc::clone(r));
            }
        }
        if woken.is_empty() && awake.is_empty() {
            return;
        }
        if !woken.is_empty() {
            tracing::debug!(
                broker = back,
                partitions = woken.len(),
                "waking quiet partitions led here for a returning broker"
            );
        }
        tokio::spawn(async move {
            // Those awake count it as activity at once; they build nothing.
            for r in awake {
                r.raft.wake().await;
            }
            wake_in_batches(woken, move |r| r.raft.parked_under() == Some(me)).await;
        });
    }

    /// Drops the Raft members of the replicas here that have been quiet for `after` (see
    /// `raft/dormant.rs`).
    async fn go_dormant(&self, after: Duration) {
        let replicas: Vec<Arc<HostedReplica>> = self
            .replicas
            .read()
            .values()
            .filter(|r| Self::may_go_quiet(r) && r.raft.is_parked() && !r.raft.is_dormant())
            .cloned()
            .collect();
        let mut dormant = 0usize;
        for r in replicas {
            dormant += usize::from(r.raft.go_dormant(after).await);
        }
        if dormant > 0 {
            tracing::debug!(partitions = dormant, "quiet partitions gone dormant");
        }
    }

    /// How many of the replicas here are dormant now.
    fn dormant_replicas(&self) -> usize {
        self.replicas
            .read()
            .values()
            .filter(|r| r.raft.is_dormant())
            .count()
    }

    /// How many of the replicas here are quiet now.
    fn quiet_replicas(&self) -> usize {
        self.replicas
            .read()
            .values()
            .filter(|r| r.raft.is_parked())
            .count()
    }
}

mod withdraw;

pub(super) use withdraw::{Withdrawal, WithdrawnMap};

#[cfg(test)]
mod tests;
