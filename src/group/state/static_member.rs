//! Static membership (Kafka's KIP-345): a member that joins with a `group.instance.id` keeps
//! its place in the group when it restarts, without a rebalance.
//!
//! The rules, as Kafka's `GroupCoordinator` has them:
//! - A static member's first join is not asked to join again with a member id
//!   (`MEMBER_ID_REQUIRED` is for dynamic members): its instance id already names it.
//! - A static member that joins with no member id while the group has a member of its
//!   instance id takes that member's place under a new member id: its assignment, its
//!   leadership, its generation. In a Stable group whose protocol it keeps there is no
//!   rebalance: the group with the new member id is written first ([`StaticRejoin`]), and
//!   the join is answered once that record is applied ([`Group::rejoined`]), with the
//!   generation unchanged, no members, and the leader as it was before (so a returning leader
//!   does not assign again; it syncs for its assignment as a follower would). While a
//!   rebalance is under way, or when the returning member's protocols would change the
//!   group's, it takes the place and the group rebalances, as for any join.
//! - The member it replaced is fenced: a join, sync, heartbeat, commit or leave that names
//!   the instance id with another member id is answered `FENCED_INSTANCE_ID`, and so is a
//!   join or sync the replaced member was waiting on.
//! - A static member whose session ends is removed like any other (and the group
//!   rebalances): it must come back within its session timeout to keep its place.
//! - A LeaveGroup may name a static member by its instance id alone (see [`Group::leave`]).

use tokio::time::Instant;

use super::{
    Group, GroupLimits, JoinRequest, JoinStep, Joined, Snapshot, State, Ticket, millis_u32,
    new_member_suffix, update_member, vote,
};
use crate::group::GroupError;

/// A static member's return to a Stable group: the record to write before it takes its
/// place.
#[derive(Clone, Debug)]
pub(crate) struct StaticRejoin {
    /// The group as it stood when the join was handled: the rejoin applies only to it.
    base: Snapshot,
    /// The group with the returning member in its old member's place: what is written.
    pub(crate) snapshot: Snapshot,
    /// The member id it takes the place of.
    replaced: String,
    /// Its new member id.
    member_id: String,
    /// The leader before it returned: what its join answers.
    leader: String,
}

impl Group {
    /// The member id of the static member with this instance id.
    pub(crate) fn static_member_id(&self, instance: &str) -> Option<String> {
        self.members
            .iter()
            .find(|(_, m)| m.group_instance_id.as_deref() == Some(instance))
            .map(|(id, _)| id.clone())
    }

    /// A request that names an instance id held by another member id is fenced.
    pub(super) fn check_fenced(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), GroupError> {
        match instance.and_then(|i| self.static_member_id(i)) {
            Some(current) if current != member_id => Err(GroupError::FencedInstanceId),
            _ => Ok(()),
        }
    }

    /// A member id never handed out before.
    pub(super) fn new_member_id(&mut self, client_id: &str, nonce: u64) -> String {
        self.next_member += 1;
        format!(
            "{client_id}-{}-{}",
            self.generation,
            new_member_suffix(nonce, self.next_member)
        )
    }

    /// A static member joins with no member id while `old` holds its instance id.
    pub(super) fn replace_static_member(
        &mut self,
        old: String,
        request: JoinRequest,
        ticket: Ticket,
        limits: &GroupLimits,
        now: Instant,
    ) -> JoinStep {
        let member_id = self.new_member_id(&request.client_id, request.nonce);
        if self.state == State::Stable && self.keeps_protocol(&old, &request) {
            let base = self.snapshot();
            let mut snapshot = base.clone();
            let protocol = self.protocol.clone().unwrap_or_default();
            for m in snapshot.members.iter_mut().filter(|m| m.member_id == old) {
                m.member_id.clone_from(&member_id);
                m.client_id.clone_from(&request.client_id);
                m.client_host.clone_from(&request.client_host);
                m.session_timeout_ms = millis_u32(request.session_timeout);
                m.rebalance_timeout_ms = millis_u32(request.rebalance_timeout);
                m.subscription = request
                    .protocols
                    .iter()
                    .find(|(name, _)| *name == protocol)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_default();
            }
            if snapshot.leader == old {
                snapshot.leader.clone_from(&member_id);
            }
            return JoinStep::Rejoin(StaticRejoin {
                leader: base.leader.clone(),
                base,
                snapshot,
                replaced: old,
                member_id,
            });
        }
        let Some(mut member) = self.members.remove(&old) else {
            return JoinStep::Now(Err(GroupError::UnknownMemberId));
        };
        self.answer_waiting(&mut member, GroupError::FencedInstanceId);
        if self.leader.as_deref() == Some(old.as_str()) {
            self.leader = Some(member_id.clone());
        }
        member.deadline = now + request.session_timeout;
        update_member(&mut member, request, ticket);
        self.members.insert(member_id, member);
        if self.state == State::PreparingRebalance {
            self.maybe_complete_join(now);
        } else {
            self.prepare_rebalance(now, limits);
        }
        JoinStep::Parked
    }

    /// Whether the group's protocol stays its protocol with `request`'s protocols in place of
    /// `old`'s (Kafka rebalances a Stable group a returning static member would change).
    fn keeps_protocol(&self, old: &str, request: &JoinRequest) -> bool {
        let Some(current) = self.protocol.as_deref() else {
            return false;
        };
        let chosen = vote(self.members.iter().map(|(id, m)| {
            if id == old {
                request.protocols.as_slice()
            } else {
                m.protocols.as_slice()
            }
        }));
        chosen == current
    }

    /// Whether the group still stands as it did when `rejoin` was made (nothing else changed
    /// its membership since): only then is it written and applied.
    pub(crate) fn rejoin_stands(&self, rejoin: &StaticRejoin) -> bool {
        self.state == State::Stable
            && self.members.contains_key(&rejoin.replaced)
            && self.snapshot() == rejoin.base
    }

    /// `rejoin`'s record was written (`Ok`) or could not be (`Err`): applied as any group
    /// record is ([`Group::restore`]), it puts the returning member in its old place, and
    /// its join is answered. A group that changed in between is left as it is, and the member
    /// is told to join again.
    pub(crate) fn rejoined(
        &mut self,
        rejoin: &StaticRejoin,
        written: Result<(), GroupError>,
        now: Instant,
    ) -> Result<Joined, GroupError> {
        written?;
        if !self.rejoin_stands(rejoin) {
            return Err(GroupError::RebalanceInProgress);
        }
        if let Some(mut old) = self.members.remove(&rejoin.replaced) {
            self.answer_waiting(&mut old, GroupError::FencedInstanceId);
        }
        self.restore(rejoin.snapshot.clone(), now);
        Ok(Joined {
            generation: self.generation,
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: rejoin.leader.clone(),
            member_id: rejoin.member_id.clone(),
            members: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::super::tests::{LIMITS, answered, join_request, parked};
    use super::*;
    use crate::group::live::{JoinOutcome, LiveGroup, SyncOutcome};

    fn static_join(member_id: &str, instance: &str) -> JoinRequest {
        let mut r = join_request(member_id, &["range"]);
        r.group_instance_id = Some(instance.into());
        r.require_known_member_id = true;
        r
    }

    /// A Stable group of two: `a` static (instance "a", the leader), `b` dynamic, with
    /// assignments "A" and "B".
    fn stable_pair(now: Instant) -> (LiveGroup, Joined, Joined) {
        let mut g = LiveGroup::default();
        // A static member joins at once: it is not asked to join again with a member id.
        let a = answered(&mut parked(g.join(static_join("", "a"), &LIMITS, now))).unwrap();
        let mut b = parked(g.join(join_request("", &["range"]), &LIMITS, now));
        let a = answered(&mut parked(g.join(
            static_join(&a.member_id, "a"),
            &LIMITS,
            now,
        )))
        .unwrap();
        let b = answered(&mut b).unwrap();
        let assignments = vec![
            (a.member_id.clone(), Bytes::from_static(b"A")),
            (b.member_id.clone(), Bytes::from_static(b"B")),
        ];
        let SyncOutcome::Write(_, _rx) =
            g.sync(&a.member_id, Some("a"), a.generation, assignments, now)
        else {
            panic!("the leader's sync writes");
        };
        g.synced(a.generation, Ok(()), &LIMITS, now);
        assert_eq!(g.state, State::Stable);
        (g, a, b)
    }

    fn rejoin(outcome: JoinOutcome) -> StaticRejoin {
        match outcome {
            JoinOutcome::Rejoin(r) => r,
            JoinOutcome::Now(r) => panic!("answered at once: {r:?}"),
            JoinOutcome::MemberIdRequired(id) => panic!("asked to join again as {id}"),
            JoinOutcome::Parked(_) => panic!("a rebalance"),
        }
    }

    /// A static member that restarts (no LeaveGroup) and joins again with its instance id and
    /// no member id gets its old place back: same generation, same assignment, the other
    /// member undisturbed; the member it replaced is fenced.
    #[test]
    fn a_static_member_that_returns_keeps_its_assignment_without_a_rebalance() {
        let t0 = Instant::now();
        let (mut g, a, b) = stable_pair(t0);
        let t1 = t0 + Duration::from_secs(3);
        let r = rejoin(g.join(static_join("", "a"), &LIMITS, t1));
        // Nothing changes before its record is written and applied.
        assert_eq!(g.static_member_id("a"), Some(a.member_id.clone()));
        assert_eq!(r.snapshot.generation, a.generation);
        let returned = r
            .snapshot
            .members
            .iter()
            .find(|m| m.group_instance_id.as_deref() == Some("a"))
            .expect("the static member is written");
        assert_ne!(returned.member_id, a.member_id);
        assert_eq!(returned.assignment, "A");
        let joined = g.rejoined(&r, Ok(()), t1).unwrap();
        assert_eq!(joined.generation, a.generation, "no new generation");
        assert_ne!(joined.member_id, a.member_id);
        // The leader as it was: the returning leader does not assign again.
        assert_eq!(joined.leader, a.member_id);
        assert!(joined.members.is_empty());
        assert_eq!(g.state, State::Stable);
        assert_eq!(g.leader.as_deref(), Some(joined.member_id.as_str()));
        // Its sync gets its old assignment; the other member heartbeats on undisturbed.
        let SyncOutcome::Now(Ok(assignment)) =
            g.sync(&joined.member_id, Some("a"), joined.generation, vec![], t1)
        else {
            panic!("a Stable group answers a sync at once");
        };
        assert_eq!(assignment, "A");
        assert_eq!(g.heartbeat(&b.member_id, None, b.generation, t1), Ok(()));
        // The replaced member is fenced wherever it names its instance id.
        let fenced = Err(GroupError::FencedInstanceId);
        assert_eq!(
            g.heartbeat(&a.member_id, Some("a"), a.generation, t1),
            fenced
        );
        assert_eq!(
            g.check_commit(&a.member_id, Some("a"), a.generation, t1),
            fenced
        );
        assert!(matches!(
            g.sync(&a.member_id, Some("a"), a.generation, vec![], t1),
            SyncOutcome::Now(Err(GroupError::FencedInstanceId))
        ));
        assert!(matches!(
            g.join(static_join(&a.member_id, "a"), &LIMITS, t1),
            JoinOutcome::Now(Err(GroupError::FencedInstanceId))
        ));
        assert_eq!(g.leave(&a.member_id, Some("a"), &LIMITS, t1), fenced);
        assert_eq!(
            g.heartbeat(&a.member_id, None, a.generation, t1),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(g.state, State::Stable);
        // Read back after a failover, the group knows the member by its new id.
        let mut restored = LiveGroup::default();
        restored.restore(r.snapshot.clone(), t1);
        assert_eq!(
            restored.static_member_id("a"),
            Some(joined.member_id.clone())
        );
        // A static member leaves by its instance id alone; the group rebalances.
        g.leave("", Some("a"), &LIMITS, t1).unwrap();
        assert_eq!(g.static_member_id("a"), None);
        assert_eq!(g.state, State::PreparingRebalance);
    }

    /// A rejoin that could not be written changes nothing; one whose group moved on while it
    /// was written is not applied.
    #[test]
    fn a_static_rejoin_applies_only_once_written_to_the_group_it_was_made_for() {
        let t0 = Instant::now();
        let (mut g, a, b) = stable_pair(t0);
        let r = rejoin(g.join(static_join("", "a"), &LIMITS, t0));
        assert_eq!(
            g.rejoined(&r, Err(GroupError::NotCoordinator), t0),
            Err(GroupError::NotCoordinator)
        );
        assert_eq!(g.static_member_id("a"), Some(a.member_id.clone()));
        let r = rejoin(g.join(static_join("", "a"), &LIMITS, t0));
        g.leave(&b.member_id, None, &LIMITS, t0).unwrap();
        assert!(!g.rejoin_stands(&r));
        assert_eq!(
            g.rejoined(&r, Ok(()), t0),
            Err(GroupError::RebalanceInProgress)
        );
        assert_eq!(g.static_member_id("a"), Some(a.member_id.clone()));
    }

    /// During a rebalance a returning static member takes its place at once and joins the
    /// rebalance; the replaced member's waiting join is answered FENCED_INSTANCE_ID.
    #[test]
    fn a_static_member_returning_during_a_rebalance_fences_the_waiting_one() {
        let t0 = Instant::now();
        let (mut g, a, b) = stable_pair(t0);
        // `b` rejoins with other protocols: a rebalance; `a` rejoins with its member id.
        let mut b_join = parked(g.join(join_request(&b.member_id, &["range", "x"]), &LIMITS, t0));
        assert_eq!(g.state, State::PreparingRebalance);
        let mut old = parked(g.join(static_join(&a.member_id, "a"), &LIMITS, t0));
        // Both rejoined: the rebalance completed.
        let first = answered(&mut old).unwrap();
        answered(&mut b_join).unwrap();
        assert_eq!(g.state, State::CompletingRebalance);
        // The old `a` waits for its assignment; a second `a` shows up.
        let SyncOutcome::Write(_, mut old_sync) =
            g.sync(&first.member_id, Some("a"), first.generation, vec![], t0)
        else {
            panic!("the leader's sync writes");
        };
        let mut second = parked(g.join(static_join("", "a"), &LIMITS, t0));
        assert_eq!(answered(&mut old_sync), Err(GroupError::FencedInstanceId));
        assert_eq!(g.state, State::PreparingRebalance);
        let _b = parked(g.join(join_request(&b.member_id, &["range"]), &LIMITS, t0));
        let second = answered(&mut second).unwrap();
        assert_eq!(second.generation, first.generation + 1);
        assert_eq!(second.leader, second.member_id, "it keeps the leadership");
        assert_eq!(g.static_member_id("a"), Some(second.member_id));
    }

    /// A static member must come back within its session: once it ended, the member was
    /// removed (and the group rebalanced), and its return is a new member's join.
    #[test]
    fn a_static_member_whose_session_ended_joins_as_a_new_member() {
        let t0 = Instant::now();
        let (mut g, a, b) = stable_pair(t0);
        let t1 = t0 + Duration::from_secs(8);
        g.heartbeat(&b.member_id, None, b.generation, t1).unwrap();
        g.tick(&LIMITS, t0 + Duration::from_secs(11));
        assert_eq!(g.static_member_id("a"), None);
        assert_eq!(g.state, State::PreparingRebalance);
        let _back = parked(g.join(static_join("", "a"), &LIMITS, t1));
        assert_ne!(g.static_member_id("a"), Some(a.member_id));
    }
}
