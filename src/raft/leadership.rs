//! A replica's leadership: handing it over (controlled shutdown, preferred leaders), and
//! founding a new partition's Raft group and running for its leadership.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::Instant as _;
use openraft::async_runtime::watch::WatchReceiver;

use super::quiet::acked_at;
use super::replica::{Replica, TransferRefused, leads};
use super::types::BrokerNode;
use crate::types::NodeId;

impl Replica {
    /// Controlled shutdown's step for one replica (Kafka's controlled shutdown): if this replica
    /// leads, hands the leadership to the live voter that holds the most of the log, and waits, at
    /// most `timeout`, until another member leads. Returns the new leader, or `None` if this
    /// replica did not lead, had no voter to hand to, or the hand-off did not finish in time
    /// (the Raft group then elects a leader after an election timeout, as after a crash).
    pub(crate) async fn hand_off(&self, me: NodeId, timeout: Duration) -> Option<NodeId> {
        if self.leader() != Some(me) {
            return None;
        }
        // A quiet leader's followers acknowledged nothing lately: it heartbeats first, so that
        // they count as live (a quiet follower stays quiet: it leads nothing to hand over).
        let (raft, _) = self
            .wake_to_write(self.lease_wait.min(timeout))
            .await
            .ok()?;
        let (target, vote) = {
            let m = raft.metrics().borrow_watched().clone();
            if !leads(&m, me) {
                return None;
            }
            let voters: std::collections::BTreeSet<NodeId> =
                m.membership_config.membership().voter_ids().collect();
            // A follower that has not acknowledged within the timeout is down or cut off: a
            // hand-off to it would only wait the timeout out.
            let live = |id: &NodeId| acked_at(&m, *id).is_some_and(|t| t.elapsed() < timeout);
            m.replication
                .as_ref()?
                .iter()
                .filter(|(id, _)| **id != me && voters.contains(id) && live(id))
                .max_by_key(|(id, matched)| {
                    (matched.as_ref().map(|l| l.index), std::cmp::Reverse(**id))
                })
                .map(|(id, _)| (*id, m.vote))?
        };
        self.handing_over(vote).await;
        raft.trigger().transfer_leader(target).await.ok()?;
        let mut metrics = raft.server_metrics();
        let moved = tokio::time::timeout(timeout, async {
            // Bounded by the timeout around it.
            loop {
                let leader = metrics.borrow_watched().current_leader;
                if let Some(l) = leader.filter(|l| *l != me) {
                    return Some(l);
                }
                if metrics.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        moved.ok().flatten()
    }

    /// Hands this replica's leadership to `target` if this replica leads, and `target` is a
    /// voter that answers a heartbeat sent for the transfer (within an election timeout, and
    /// only if it acknowledged one within `timeout` before) and holds every entry this leader
    /// has (so the transfer waits for no election timeout and no catch-up); `Ok` once `target`
    /// leads, within `timeout`, else why not.
    pub(crate) async fn transfer_to(
        &self,
        me: NodeId,
        target: NodeId,
        timeout: Duration,
    ) -> std::result::Result<(), TransferRefused> {
        // The target must answer a heartbeat sent now. An acknowledgement within the timeout is
        // not enough: a broker that stopped a moment ago sent one, and a leader that triggers a
        // transfer to a member that cannot take over stays handing over (openraft then refuses
        // writes and sends no heartbeat) until another member's election timer runs out.
        // Refused from what the member knows, before a dormant one is built again for it.
        let refused = self.read_metrics(|m| {
            if m.current_leader == Some(target) {
                return Some(Ok(()));
            }
            if !leads(m, me) || target == me {
                return Some(Err(TransferRefused::NotLeader));
            }
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == target);
            (!voter).then_some(Err(TransferRefused::NotAVoter))
        });
        if let Some(refused) = refused {
            return refused;
        }
        let raft = self.awake().await.map_err(|_| TransferRefused::Stopped)?;
        let since = self
            .heartbeat_for_transfer(&raft, me, target, timeout)
            .await;
        let vote = {
            let m = raft.metrics().borrow_watched().clone();
            if m.current_leader == Some(target) {
                return Ok(());
            }
            if !leads(&m, me) || target == me {
                return Err(TransferRefused::NotLeader);
            }
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == target);
            if !voter {
                return Err(TransferRefused::NotAVoter);
            }
            let live = acked_at(&m, target).is_some_and(|t| since.is_some_and(|since| t >= since));
            if !live {
                return Err(TransferRefused::NotHeardFrom);
            }
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&target))
                .and_then(|l| l.as_ref())
                .map(|l| l.index);
            if matched < m.last_log_index {
                return Err(TransferRefused::Behind);
            }
            m.vote
        };
        self.handing_over(vote).await;
        if raft.trigger().transfer_leader(target).await.is_err() {
            return Err(TransferRefused::Stopped);
        }
        let mut metrics = raft.server_metrics();
        let moved = tokio::time::timeout(timeout, async {
            // Bounded by the timeout around it.
            loop {
                if metrics.borrow_watched().current_leader == Some(target) {
                    return true;
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        })
        .await;
        if moved.unwrap_or(false) {
            Ok(())
        } else {
            Err(TransferRefused::NotTakenOver)
        }
    }

    /// On the leader of `me`, before a transfer to `target`: wakes a quiet leader, or sends a
    /// heartbeat now, and waits (at most an election timeout more) until `target` acknowledged
    /// it.
    /// Returns when that heartbeat was sent, or `None` if this member does not lead or
    /// `target` has not answered within `timeout` (it is down: no point waiting for it).
    async fn heartbeat_for_transfer(
        &self,
        raft: &super::dormant::Member,
        me: NodeId,
        target: NodeId,
        timeout: Duration,
    ) -> Option<openraft::type_config::alias::InstantOf<super::types::C>> {
        let wait = self.lease_wait.min(timeout);
        let asked = openraft::type_config::alias::InstantOf::<super::types::C>::now();
        let since = match self.wake_to_write(wait).await.ok()?.1 {
            // Woken now, or earlier (a member built again from dormancy) with its lease not
            // renewed since: `wake_to_write` heartbeats in either case, after `asked`. An
            // acknowledgement from before `asked` says nothing about the target now.
            Some(woke) => woke.max(asked),
            None => {
                {
                    let m = raft.metrics();
                    let m = m.borrow_watched();
                    let heard = acked_at(&m, target).is_some_and(|t| t.elapsed() < timeout);
                    if !leads(&m, me) || target == me || !heard {
                        return None;
                    }
                }
                // Counts as activity: an offer of quiet out now does not end parked.
                self.wake().await;
                let now = openraft::type_config::alias::InstantOf::<super::types::C>::now();
                raft.trigger().heartbeat().await.ok()?;
                now
            }
        };
        Self::wait_heard_from(raft, target, since, wait).await;
        Some(since)
    }

    /// Initializes a fresh Raft group with these members (id and address). Does nothing if this
    /// replica has a log or has seen a vote. Returns whether it initialized.
    pub(crate) async fn initialize(&self, members: &BTreeMap<NodeId, String>) -> bool {
        let members: BTreeMap<NodeId, BrokerNode> = members
            .iter()
            .map(|(id, addr)| (*id, BrokerNode { addr: addr.clone() }))
            .collect();
        let raft = match self.awake().await {
            Ok(raft) => raft,
            Err(e) => {
                tracing::debug!(error = %e, "not initializing");
                return false;
            }
        };
        match raft.initialize(members).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "not initializing");
                false
            }
        }
    }

    /// Lets this member run for leader when its election timeout passes, or not (it still
    /// votes and follows a leader either way).
    pub(crate) fn allow_elections(&self, allowed: bool) {
        self.elections
            .store(allowed, std::sync::atomic::Ordering::Release);
        if let Some(raft) = self.awake_now() {
            raft.runtime_config().elect(allowed);
        }
    }

    /// Campaigns now, a pre-vote first, as the member's election timer would once it ran
    /// out: for a leader's broker that fell silent. openraft skips it while this member heard
    /// a leader within its lease, and the voters refuse it while they did.
    pub(crate) async fn campaign(&self) {
        if let Ok(raft) = self.awake().await {
            let _ = raft.trigger().elect(true).await;
        }
    }

    /// Runs for leader again after 10, 20, 40, ... ms (openraft's `initialize` ran the first
    /// campaign) for as long as its vote requests fail unanswered (no voter has the Raft group
    /// yet) and no leader is known, until `within` has passed; then the election timer takes
    /// over, as for any member. For a Raft group's preferred founder: its peers open their
    /// replicas as they learn of the Raft group, a few milliseconds apart, and a vote asked of a
    /// peer that has not opened its replica yet fails at once; asking again soon makes the Raft
    /// group led within a few round trips instead of after an election timeout.
    ///
    /// It stops at the first refusal from a voter of a Raft group that formed: one that follows a
    /// leader (whose lease holds), or holds more log, refuses for a reason asking again will
    /// not change (a refusal because the voter campaigns in the same term, as founders do at
    /// formation, is no such reason). So a founder that comes up after its Raft group formed asks
    /// at most once more and then follows; retrying would raise its term past the leader's and
    /// depose it. And it does not ask at all once it has heard the leader (see the pre-vote
    /// below).
    pub(crate) async fn run_for_leader_soon(&self, within: Duration) {
        use std::sync::atomic::Ordering;
        let started = std::time::Instant::now();
        let Ok(raft) = self.awake().await else {
            return;
        };
        let mut metrics = raft.metrics();
        let mut pause = Duration::from_millis(10);
        self.vote_refused.store(false, Ordering::Release);
        // The first campaign is the one openraft's `initialize` starts by itself, from term 0
        // (it initialized a fresh member); the later ones are asked for here.
        let mut term = 0;
        let mut first = true;
        // Bounded by `within` (and at most a few dozen tries: the pause doubles).
        loop {
            if !first {
                term = metrics.borrow_watched().current_term;
                // A pre-vote first: openraft makes it a no-op while this member has heard a
                // leader within its lease, a check made inside the Raft core, so a leader's
                // append that arrives just before cannot be followed by a campaign that deposes
                // it (the real election after it raises the term; replog's peers grant
                // pre-votes, so it costs no round trip).
                if raft.trigger().elect(true).await.is_err() {
                    return;
                }
            }
            first = false;
            let until = (std::time::Instant::now() + pause).min(started + within);
            let until = tokio::time::Instant::from_std(until);
            // Led, or campaign over (refused, or another's vote seen): done. The pause passed
            // with the campaign standing: again.
            let settled = tokio::time::timeout_at(until, async {
                loop {
                    {
                        let m = metrics.borrow_watched();
                        let campaigning = m.state == openraft::ServerState::Candidate
                            && m.current_term == term + 1;
                        if m.current_leader.is_some() || (m.current_term > term && !campaigning) {
                            return;
                        }
                    }
                    if metrics.changed().await.is_err() {
                        return;
                    }
                }
            })
            .await;
            if settled.is_ok()
                || self.vote_refused.load(Ordering::Acquire)
                || started.elapsed() >= within
            {
                return;
            }
            pause *= 2;
        }
    }
}
