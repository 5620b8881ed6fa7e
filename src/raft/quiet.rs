//! Quiet Raft groups: a group whose log is written, committed and applied on every member
//! whose broker is live, and that no one has written for a while, stops its timers on those
//! members (no ticks, no heartbeats, no election timer), so that an idle partition costs its
//! brokers nothing. Members on brokers that are down are left out (see `node/quiet.rs`).
//!
//! The leader offers quiet (`quiet_offer`), the broker asks every follower it includes
//! (`node/quiet.rs`, one message per peer broker for all its groups), each follower parks only
//! if it holds exactly the leader's log and vote (`park_follower`), and the leader parks last,
//! once every follower asked said yes and nothing was written meanwhile (`park_leader`). A
//! leader that started handing its leadership over (`handing_over`) neither offers quiet nor
//! parks under that vote: openraft's leader sends no heartbeat while it hands over, and only
//! its followers' election timers end a hand-over that failed. Anything new wakes a member: a
//! write, an admin change or a hand-over on the leader (`wake_to_write`), any Raft message on
//! a follower (the broker's peer server calls [`Replica::wake`] after serving it), a vote the
//! parked leader refuses, a member's broker coming back (its leader's broker wakes the group),
//! or the broker that led the group turning silent (the broker's liveness view wakes the
//! groups it led, and their members elect as after any leader's loss).
//!
//! A parked follower's own election timer is off, so nothing in openraft protects a quiet
//! leader from a candidate: the broker's peer server refuses a vote or pre-vote against a
//! parked group's leader while that leader's broker is live in its view
//! ([`Replica::refuses_vote_while_quiet`]). Refusing a vote is always safe; Raft's rules, not
//! these timers, keep two leaders from committing (see DESIGN notes in `node/quiet.rs`).

use std::time::{Duration, Instant};

use openraft::Instant as _;
use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::raft::{VoteRequest, VoteResponse};

use super::replica::Replica;
use super::types::{C, LogId, Vote};
use crate::types::NodeId;

/// When member `id` last acknowledged this leader (the sending time of the heartbeat or
/// append it acknowledged), as openraft's metrics have it.
pub(super) fn acked_at(
    m: &openraft::RaftMetrics<C>,
    id: NodeId,
) -> Option<openraft::type_config::alias::InstantOf<C>> {
    m.heartbeat.as_ref()?.get(&id)?.as_ref().map(|t| **t)
}

/// A member's quiet state.
#[derive(Debug)]
pub(crate) struct Quiet {
    state: parking_lot::Mutex<QuietState>,
}

#[derive(Debug)]
struct QuietState {
    /// Timers stopped.
    parked: bool,
    /// The leader the member parked under (itself on the leader).
    leader: Option<NodeId>,
    /// Counts writes and wakes: the leader parks only if none came since its offer.
    activity: u64,
    /// The last write or wake.
    active_at: Instant,
    /// When the member last parked.
    parked_at: Instant,
    /// On a leader woken from quiet whose lease no quorum has renewed since: when it woke.
    /// Writes wait for the renewal, as openraft refuses them until then.
    lease_from: Option<openraft::type_config::alias::InstantOf<C>>,
    /// The vote under which this member, as leader, started handing its leadership over.
    /// openraft's leader then sends no heartbeat until another member leads, so it must not
    /// go quiet: its followers' election timers are what end a hand-over that failed.
    handing_over: Option<Vote>,
}

impl Quiet {
    /// [`Replica::wake`] of the running member `raft`.
    pub(super) fn wake(&self, raft: &super::dormant::Member) -> bool {
        Self::unpark(&mut self.state.lock(), raft)
    }

    fn unpark(state: &mut QuietState, raft: &super::dormant::Member) -> bool {
        state.activity += 1;
        state.active_at = Instant::now();
        if !state.parked {
            return false;
        }
        state.parked = false;
        state.leader = None;
        let config = raft.runtime_config();
        config.heartbeat(true);
        config.tick(true);
        true
    }

    /// On leader `me`: wakes it if it is parked, and returns when it woke, while no quorum
    /// has renewed its lease since (this wake's, or an earlier one's); `None` once renewed.
    pub(super) fn wake_leader(
        &self,
        me: NodeId,
        raft: &super::dormant::Member,
    ) -> Option<openraft::type_config::alias::InstantOf<C>> {
        let mut state = self.state.lock();
        if state.parked && state.leader == Some(me) && Self::unpark(&mut state, raft) {
            state.lease_from = Some(openraft::type_config::alias::InstantOf::<C>::now());
        }
        state.lease_from
    }

    /// A quorum renewed the lease of the leader that woke at `woke`.
    fn lease_renewed(&self, woke: openraft::type_config::alias::InstantOf<C>) {
        let mut state = self.state.lock();
        if state.lease_from == Some(woke) {
            state.lease_from = None;
        }
    }

    /// Runs `then` if the member has been parked for `after` or longer, holding the quiet
    /// state's lock throughout, so that nothing wakes it meanwhile.
    pub(super) fn while_parked_for<T>(
        &self,
        after: Duration,
        then: impl FnOnce() -> Option<T>,
    ) -> Option<T> {
        let state = self.state.lock();
        if !state.parked || state.parked_at.elapsed() < after {
            return None;
        }
        then()
    }

    /// Counts activity on a member that is not running (dormant, or shut down).
    fn touch(&self) {
        let mut state = self.state.lock();
        state.activity += 1;
        state.active_at = Instant::now();
    }
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet {
            state: parking_lot::Mutex::new(QuietState {
                parked: false,
                leader: None,
                activity: 0,
                active_at: Instant::now(),
                parked_at: Instant::now(),
                lease_from: None,
                handing_over: None,
            }),
        }
    }
}

/// A leader's offer of quiet to its followers: what each must hold to park.
#[derive(Clone, Debug)]
pub(crate) struct QuietOffer {
    /// The leader's committed vote.
    pub(crate) vote: Vote,
    /// The leader's last log id, committed and applied.
    pub(crate) last: LogId,
    /// Every other member (voters and learners) whose broker is live, each holding `last`.
    pub(crate) followers: Vec<NodeId>,
    activity: u64,
}

impl Replica {
    /// Makes this member's elections on a timer start with a pre-vote, or not (tests: a
    /// member that campaigns for real raises its term, which they watch).
    #[cfg(test)]
    pub(crate) fn pre_vote(&self, on: bool) {
        if let Some(raft) = self.awake_now() {
            raft.runtime_config().pre_vote(on);
        }
    }

    /// Whether this member's timers are stopped.
    pub(crate) fn is_parked(&self) -> bool {
        self.quiet.state.lock().parked
    }

    /// The leader this member parked under, while parked.
    pub(crate) fn parked_under(&self) -> Option<NodeId> {
        let state = self.quiet.state.lock();
        state.parked.then_some(state.leader).flatten()
    }

    /// Marks this leader as handing its leadership over under `vote` (the vote it checked the
    /// transfer against), just before it triggers the transfer: it offers no quiet under that
    /// vote any more, and an offer already out does not end parked (this counts as activity).
    pub(crate) async fn handing_over(&self, vote: Vote) {
        self.quiet.state.lock().handing_over = Some(vote);
        self.wake().await;
    }

    /// Starts this member's timers again if they were stopped (building it again first if it
    /// is dormant), and counts the activity (a leader that offered quiet before it does not
    /// park). Returns whether it was parked.
    pub(crate) async fn wake(&self) -> bool {
        match self.awake().await {
            Ok(raft) => self.quiet.wake(&raft),
            Err(_) => {
                self.quiet.touch();
                false
            }
        }
    }

    /// Wakes this member before a write, a membership change or a leadership transfer, if it
    /// is a parked leader: it heartbeats at once and waits (at most `lease_wait`) until a
    /// quorum acknowledged it, since openraft refuses writes until its lease is renewed after
    /// the quiet. A write after quiet costs one round trip more.
    /// Returns the running member (built again if the replica was dormant), and when it woke,
    /// if it did.
    pub(crate) async fn wake_to_write(
        &self,
        lease_wait: Duration,
    ) -> Result<
        (
            super::dormant::InUse<'_>,
            Option<openraft::type_config::alias::InstantOf<C>>,
        ),
        String,
    > {
        let raft = self.awake().await?;
        // A quiet follower stays quiet: it refuses the write with its leader's name, and its
        // leader hears nothing it must wake for. A leader woken by another caller, or built
        // again from dormancy, whose lease is not renewed yet, waits as the waker does.
        let Some(woke) = self.quiet.wake_leader(self.recipe.id, &raft) else {
            return Ok((raft, None));
        };
        // A stopped member refuses the write that follows, with its reason.
        let _ = raft.trigger().heartbeat().await;
        let mut metrics = raft.metrics();
        let _ = tokio::time::timeout(lease_wait, async {
            // Bounded by the timeout around it.
            loop {
                let (renewed, leads) = {
                    let m = metrics.borrow_watched();
                    let renewed = m.last_quorum_acked.as_ref().is_some_and(|t| **t >= woke);
                    (renewed, m.state == ServerState::Leader)
                };
                // Out of the metrics' borrow: the quiet state's lock is taken under none.
                if renewed {
                    self.quiet.lease_renewed(woke);
                }
                if renewed || !leads {
                    return;
                }
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        Ok((raft, Some(woke)))
    }

    /// Waits, at most `timeout`, until member `target` acknowledged a heartbeat of this leader
    /// sent at `since` or later: after a leader woke, its followers' last acknowledgements are
    /// as old as the quiet, and a transfer checks that its target answers.
    pub(crate) async fn wait_heard_from(
        raft: &super::dormant::Member,
        target: NodeId,
        since: openraft::type_config::alias::InstantOf<C>,
        timeout: Duration,
    ) {
        let mut metrics = raft.metrics();
        let _ = tokio::time::timeout(timeout, async {
            // Bounded by the timeout around it.
            loop {
                {
                    let m = metrics.borrow_watched();
                    let acked = acked_at(&m, target).is_some_and(|t| t >= since);
                    if acked || m.state != ServerState::Leader {
                        return;
                    }
                }
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    /// On the leader of `me`: the offer of quiet if the group can go quiet now. It can when
    /// this member leads with a committed vote and is not handing its leadership over,
    /// nothing was written or woken for `idle`, its last entry is committed and applied, its
    /// membership is committed, and every other member whose broker is `live` holds that
    /// entry. Members whose brokers are not live are left out of the offer (they hear nothing
    /// either way, and their brokers' return wakes the group), as long as the leader and the
    /// live members that hold its log are a majority of the voters, in a configuration that is
    /// not joint.
    pub(crate) fn quiet_offer(
        &self,
        me: NodeId,
        idle: Duration,
        live: impl Fn(NodeId) -> bool,
    ) -> Option<QuietOffer> {
        let activity = {
            let state = self.quiet.state.lock();
            if state.parked || state.active_at.elapsed() < idle {
                return None;
            }
            state.activity
        };
        let m = self.read_metrics(|m| m.clone());
        if m.state != ServerState::Leader || m.current_leader != Some(me) || !m.vote.committed {
            return None;
        }
        if self.quiet.state.lock().handing_over == Some(m.vote) {
            return None;
        }
        let last = m.last_applied?;
        if m.last_log_index != Some(last.index) || m.local_committed != Some(last) {
            return None;
        }
        if m.membership_config.log_id() != m.committed_membership_config.log_id() {
            return None;
        }
        let replication = m.replication.as_ref()?;
        let members = m.membership_config.membership();
        let joint = members.get_joint_config().len() > 1;
        let mut followers = Vec::new();
        for id in members.nodes().map(|(id, _)| *id).filter(|id| *id != me) {
            if live(id) {
                let holds = replication
                    .get(&id)
                    .is_some_and(|l| l.as_ref() == Some(&last));
                if !holds {
                    return None;
                }
                followers.push(id);
            } else if joint {
                return None;
            }
        }
        // A Raft group of one member goes quiet alone.
        let voters: Vec<NodeId> = members.voter_ids().collect();
        let present = voters
            .iter()
            .filter(|v| **v == me || followers.contains(v))
            .count();
        if present * 2 <= voters.len() {
            return None;
        }
        Some(QuietOffer {
            vote: m.vote,
            last,
            followers,
            activity,
        })
    }

    /// On the leader, once every follower parked on `offer`: parks, unless something was
    /// written or woken since the offer, or the log moved. Returns whether it parked.
    pub(crate) fn park_leader(&self, me: NodeId, offer: &QuietOffer) -> bool {
        let mut state = self.quiet.state.lock();
        if state.parked
            || state.activity != offer.activity
            || state.handing_over == Some(offer.vote)
        {
            return false;
        }
        let same = self.read_metrics(|m| {
            super::replica::leads(m, me)
                && m.vote == offer.vote
                && m.last_log_index == Some(offer.last.index)
        });
        same && self.park(&mut state, Some(me))
    }

    /// On a follower: parks if it follows `vote` (committed) and its log ends, committed, at
    /// `last`, as the leader's does. Returns whether it parked (or already was).
    pub(crate) fn park_follower(&self, vote: &Vote, last: &LogId) -> bool {
        let mut state = self.quiet.state.lock();
        let leader = self.read_metrics(|m| {
            let holds = m.vote == *vote
                && vote.committed
                && m.state != ServerState::Leader
                && m.last_log_index == Some(last.index)
                && m.local_committed.as_ref() == Some(last);
            holds.then_some(m.current_leader).flatten()
        });
        let Some(leader) = leader else {
            return false;
        };
        if state.parked {
            return state.leader == Some(leader);
        }
        self.park(&mut state, Some(leader))
    }

    /// On the leader, while its offer of quiet is out: no heartbeats, so that none is in
    /// flight to a follower that parks (it would wake it, and two followers woken under a quiet
    /// leader would elect one of them once their timers ran out). Writes still replicate.
    pub(crate) fn pause_heartbeats(&self) {
        if let Some(raft) = self.awake_now() {
            raft.runtime_config().heartbeat(false);
        }
    }

    /// Heartbeats again after an offer that did not end parked (see
    /// [`pause_heartbeats`](Self::pause_heartbeats)).
    pub(crate) fn resume_heartbeats(&self) {
        let state = self.quiet.state.lock();
        if !state.parked
            && let Some(raft) = self.awake_now()
        {
            raft.runtime_config().heartbeat(true);
        }
    }

    /// Parks this member under `leader`; `false` if it is not running (a member that is not
    /// parked is never dormant, so only a shut-down one).
    fn park(&self, state: &mut QuietState, leader: Option<NodeId>) -> bool {
        let Some(raft) = self.awake_now() else {
            return false;
        };
        state.parked = true;
        state.parked_at = Instant::now();
        state.leader = leader;
        let config = raft.runtime_config();
        config.tick(false);
        config.heartbeat(false);
        true
    }

    /// On a member parked as leader `me`, or whose committed vote names `me` (running,
    /// dormant or stopped; its followers may have parked on an offer before it did): its
    /// vote, no longer committed, and its last applied log id, the entry of a `Quiesce`
    /// message that withdraws the group's quiet (see `node/quiet.rs`). `None` otherwise.
    pub(crate) fn quiet_withdrawal(&self, me: NodeId) -> Option<(Vote, LogId)> {
        let parked = self.parked_under() == Some(me);
        self.read_metrics(|m| {
            let mine = m.vote.committed && m.vote.leader_id().voted_for == me;
            if !parked && !mine {
                return None;
            }
            let mut vote = m.vote;
            vote.committed = false;
            Some((vote, m.last_applied?))
        })
    }

    /// Whether this member's vote is for the same leadership (term and leader) as `vote`.
    pub(crate) fn follows_vote_of(&self, vote: &Vote) -> bool {
        self.read_metrics(|m| m.vote.leader_id() == vote.leader_id())
    }

    /// Whether the vote or pre-vote request `body` comes from the leader this member is parked
    /// under: a leader that campaigns lost what it led with (its replica was brought back
    /// after its Raft member stopped), so its quiet followers must wake and elect.
    pub(crate) fn asked_by_parked_leader(&self, body: &[u8]) -> bool {
        let Some(leader) = self.parked_under() else {
            return false;
        };
        postcard::from_bytes::<VoteRequest<C>>(body)
            .is_ok_and(|request| request.vote.leader_id().voted_for == leader)
    }

    /// The refusal to send for a vote or pre-vote request (`body`, after the partition's ids)
    /// to a parked member whose leader's broker is live (`live`), unless the request is part
    /// of a leadership transfer: the leader's lease as the member's own timers would keep it,
    /// had they run. `None`: serve the request (after waking the member).
    pub(crate) fn refuses_vote_while_quiet(
        &self,
        body: &[u8],
        live: impl Fn(NodeId) -> bool,
    ) -> Option<Vec<u8>> {
        let leader = self.parked_under()?;
        let request: VoteRequest<C> = postcard::from_bytes(body).ok()?;
        // The leader itself campaigning has lost its leadership (its replica was brought back
        // after its member stopped): nothing is left to protect, and only its followers can
        // elect the next leader.
        if request.leadership_transfer
            || !live(leader)
            || request.vote.leader_id().voted_for == leader
        {
            return None;
        }
        let (vote, last) = self.read_metrics(|m| {
            (
                m.vote,
                m.last_applied.filter(|l| Some(l.index) == m.last_log_index),
            )
        });
        let last = last.or(request.last_log_id);
        let answer: std::result::Result<VoteResponse<C>, String> =
            Ok(VoteResponse::new(vote, last, false));
        postcard::to_stdvec(&answer).ok()
    }
}
