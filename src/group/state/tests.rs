//! The state machine's rules, one scenario each.

use super::*;
use crate::group::live::{JoinOutcome, LiveGroup, SyncOutcome};
use tokio::sync::oneshot;

pub(super) const LIMITS: GroupLimits = GroupLimits {
    session_timeout_min: Duration::from_millis(100),
    session_timeout_max: Duration::from_secs(60),
    members_max: 3,
    initial_rebalance_delay: Duration::from_millis(0),
};

pub(super) fn join_request(member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(5),
        require_known_member_id: false,
        group_instance_id: None,
        nonce: 7,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("sub-{p}"))))
            .collect(),
    }
}

pub(super) fn parked(outcome: JoinOutcome) -> oneshot::Receiver<Result<Joined, GroupError>> {
    match outcome {
        JoinOutcome::Parked(rx) => rx,
        JoinOutcome::Now(r) => panic!("answered at once: {r:?}"),
        JoinOutcome::MemberIdRequired(id) => panic!("asked to join again as {id}"),
        JoinOutcome::Rejoin(r) => panic!("a static member's return: {r:?}"),
    }
}

/// Kafka's JoinGroup v4+: a first join gets its id and joins with it; a join sent twice
/// before it adds one member; an id handed out and never used expires with its session.
#[test]
fn a_first_join_may_ask_for_its_member_id_first() {
    let now = Instant::now();
    let mut g = LiveGroup::default();
    let mut first = join_request("", &["range"]);
    first.require_known_member_id = true;
    let JoinOutcome::MemberIdRequired(id) = g.join(first.clone(), &LIMITS, now) else {
        panic!("an id first");
    };
    // The same first join again (its answer was lost): another id, nobody joined.
    let JoinOutcome::MemberIdRequired(ghost) = g.join(first, &LIMITS, now) else {
        panic!("an id first");
    };
    assert!(g.members.is_empty());
    let mut again = join_request(&id, &["range"]);
    again.require_known_member_id = true;
    let joined = answered(&mut parked(g.join(again, &LIMITS, now))).unwrap();
    assert_eq!(joined.member_id, id);
    assert_eq!(g.members.len(), 1);
    // The unused id expires with its session; then it is unknown.
    g.tick(&LIMITS, now + Duration::from_secs(11));
    assert!(matches!(
        g.join(join_request(&ghost, &["range"]), &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::UnknownMemberId))
    ));
}

pub(super) fn answered<T: std::fmt::Debug>(
    rx: &mut oneshot::Receiver<Result<T, GroupError>>,
) -> Result<T, GroupError> {
    rx.try_recv().expect("answered")
}

/// Two members join, the leader assigns, both are Stable with their assignments.
#[test]
fn two_members_join_sync_and_heartbeat() {
    let now = Instant::now();
    let mut g = LiveGroup::default();
    let mut a = parked(g.join(join_request("", &["range"]), &LIMITS, now));
    // Alone and the initial delay is 0: the first join completes at once.
    let a_joined = answered(&mut a).unwrap();
    assert_eq!(a_joined.generation, 1);
    assert_eq!(a_joined.leader, a_joined.member_id);
    // A second member starts a rebalance; the first must rejoin.
    let mut b = parked(g.join(join_request("", &["range", "roundrobin"]), &LIMITS, now));
    assert_eq!(
        g.heartbeat(&a_joined.member_id, None, 1, now),
        Err(GroupError::RebalanceInProgress)
    );
    let mut a = parked(g.join(join_request(&a_joined.member_id, &["range"]), &LIMITS, now));
    let a2 = answered(&mut a).unwrap();
    let b2 = answered(&mut b).unwrap();
    assert_eq!((a2.generation, b2.generation), (2, 2));
    assert_eq!(a2.protocol, "range");
    assert_eq!(a2.leader, a_joined.member_id, "the leader stays the leader");
    assert_eq!(a2.members.len(), 2, "the leader sees every subscription");
    assert!(b2.members.is_empty());
    // A follower's sync waits for the leader's.
    let SyncOutcome::Parked(mut b_sync) = g.sync(&b2.member_id, None, 2, vec![], now) else {
        panic!("the follower waits");
    };
    assert_eq!(
        g.check_commit(&b2.member_id, None, 2, now),
        Err(GroupError::RebalanceInProgress)
    );
    let assignments = vec![
        (a2.member_id.clone(), Bytes::from_static(b"A")),
        (b2.member_id.clone(), Bytes::from_static(b"B")),
    ];
    let SyncOutcome::Write(snapshot, mut a_sync) = g.sync(&a2.member_id, None, 2, assignments, now)
    else {
        panic!("the leader's sync writes");
    };
    assert_eq!(snapshot.members.len(), 2);
    assert!(b_sync.try_recv().is_err(), "not before it is written");
    g.synced(2, Ok(()), &LIMITS, now);
    assert_eq!(answered(&mut a_sync).unwrap(), "A");
    assert_eq!(answered(&mut b_sync).unwrap(), "B");
    assert_eq!(g.state, State::Stable);
    assert_eq!(g.heartbeat(&b2.member_id, None, 2, now), Ok(()));
    assert_eq!(
        g.heartbeat(&b2.member_id, None, 1, now),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        g.check_commit(&b2.member_id, None, 1, now),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(g.check_commit(&b2.member_id, None, 2, now), Ok(()));
    assert_eq!(
        g.check_commit("", None, -1, now),
        Err(GroupError::UnknownMemberId)
    );
}

/// A member that stops heartbeating is removed once its session ends, and the others
/// rebalance without it; a member that does not rejoin in time is dropped.
#[test]
fn a_silent_member_is_expired_and_the_group_rebalances() {
    let t0 = Instant::now();
    let mut g = LiveGroup::default();
    let a = answered(&mut parked(g.join(
        join_request("", &["range"]),
        &LIMITS,
        t0,
    )))
    .unwrap();
    let mut b = parked(g.join(join_request("", &["range"]), &LIMITS, t0));
    let a = answered(&mut parked(g.join(
        join_request(&a.member_id, &["range"]),
        &LIMITS,
        t0,
    )))
    .unwrap();
    let b = answered(&mut b).unwrap();
    let SyncOutcome::Write(_, _rx) = g.sync(&a.member_id, None, a.generation, vec![], t0) else {
        panic!()
    };
    g.synced(a.generation, Ok(()), &LIMITS, t0);
    // b keeps heartbeating; a falls silent.
    let t1 = t0 + Duration::from_secs(6);
    g.heartbeat(&b.member_id, None, b.generation, t1).unwrap();
    let ticked = g.tick(&LIMITS, t1);
    assert!(ticked.emptied.is_none() && ticked.expired.is_empty());
    assert_eq!(g.members.len(), 2);
    let t2 = t0 + Duration::from_secs(11);
    assert_eq!(g.tick(&LIMITS, t2).expired, vec![a.member_id.clone()]);
    assert_eq!(g.members.len(), 1, "a's session ended");
    assert_eq!(g.state, State::PreparingRebalance);
    assert_eq!(
        g.heartbeat(&b.member_id, None, b.generation, t2),
        Err(GroupError::RebalanceInProgress)
    );
    let b3 = answered(&mut parked(g.join(
        join_request(&b.member_id, &["range"]),
        &LIMITS,
        t2,
    )))
    .unwrap();
    assert_eq!(b3.generation, b.generation + 1);
    assert_eq!(b3.leader, b.member_id, "the survivor leads");
    // The expired member is gone for good: its heartbeats (and, once the group is
    // stable, its commits) are refused.
    assert_eq!(
        g.heartbeat(&a.member_id, None, a.generation, t2),
        Err(GroupError::UnknownMemberId)
    );
    let SyncOutcome::Write(_, _rx) = g.sync(&b3.member_id, None, b3.generation, vec![], t2) else {
        panic!()
    };
    g.synced(b3.generation, Ok(()), &LIMITS, t2);
    assert_eq!(
        g.check_commit(&a.member_id, None, a.generation, t2),
        Err(GroupError::UnknownMemberId)
    );
}

/// A rebalance completes without a member that does not rejoin within the rebalance
/// timeout, and a group whose last member leaves is Empty (and says so to be written).
#[test]
fn a_member_that_does_not_rejoin_is_dropped_and_the_last_leave_empties_the_group() {
    let t0 = Instant::now();
    let mut g = LiveGroup::default();
    let a = answered(&mut parked(g.join(
        join_request("", &["range"]),
        &LIMITS,
        t0,
    )))
    .unwrap();
    let mut b = parked(g.join(join_request("", &["range"]), &LIMITS, t0));
    // `a` never rejoins: the rebalance waits its 5 s, then goes on without it.
    g.tick(&LIMITS, t0 + Duration::from_secs(4));
    assert!(b.try_recv().is_err());
    g.tick(&LIMITS, t0 + Duration::from_secs(5));
    let b = answered(&mut b).unwrap();
    assert_eq!(g.members.len(), 1);
    assert_eq!(b.leader, b.member_id);
    assert!(!g.members.contains_key(&a.member_id));
    g.leave(&b.member_id, None, &LIMITS, t0).unwrap();
    assert_eq!(g.state, State::Empty);
    // It keeps its protocol type (Kafka lists an emptied consumer group as one), also in
    // what is written of it and once read back.
    assert_eq!(g.protocol_type.as_deref(), Some("consumer"));
    let written = g.snapshot();
    assert_eq!(written.protocol_type, "consumer");
    let mut restored = LiveGroup::default();
    restored.restore(written, t0);
    assert_eq!(restored.state, State::Empty);
    assert_eq!(restored.protocol_type.as_deref(), Some("consumer"));
    // A group that only ever had commits has none.
    let mut commits_only = LiveGroup::default();
    assert_eq!(commits_only.check_commit("", None, -1, t0), Ok(()));
    assert_eq!(commits_only.protocol_type, None);
    // Kept: its generation must not go back to 0 (a later snapshot would read as older).
    assert!(!g.is_forgettable());
    assert!(LiveGroup::default().is_forgettable());
    assert_eq!(g.check_commit("", None, -1, t0), Ok(()));
    assert_eq!(
        g.leave(&b.member_id, None, &LIMITS, t0),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn joins_that_do_not_fit_are_refused() {
    let now = Instant::now();
    let mut g = LiveGroup::default();
    let mut short = join_request("", &["range"]);
    short.session_timeout = Duration::from_millis(1);
    assert!(matches!(
        g.join(short, &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::InvalidSessionTimeout))
    ));
    let _a = parked(g.join(join_request("", &["range"]), &LIMITS, now));
    assert!(matches!(
        g.join(join_request("", &["roundrobin"]), &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::InconsistentGroupProtocol))
    ));
    let mut other_type = join_request("", &["range"]);
    other_type.protocol_type = "connect".into();
    assert!(matches!(
        g.join(other_type, &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::InconsistentGroupProtocol))
    ));
    let _b = parked(g.join(join_request("", &["range"]), &LIMITS, now));
    let _c = parked(g.join(join_request("", &["range"]), &LIMITS, now));
    assert!(matches!(
        g.join(join_request("", &["range"]), &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::GroupMaxSizeReached))
    ));
    assert!(matches!(
        g.join(join_request("nobody", &["range"]), &LIMITS, now),
        JoinOutcome::Now(Err(GroupError::UnknownMemberId))
    ));
}

/// A restored snapshot serves the same generation: its members' heartbeats and commits
/// pass, a stranger's do not.
#[test]
fn a_restored_group_keeps_its_generation_and_members() {
    let now = Instant::now();
    let mut g = LiveGroup::default();
    let a = answered(&mut parked(g.join(
        join_request("", &["range"]),
        &LIMITS,
        now,
    )))
    .unwrap();
    let SyncOutcome::Write(snapshot, _rx) = g.sync(&a.member_id, None, a.generation, vec![], now)
    else {
        panic!()
    };
    let mut restored = LiveGroup::default();
    restored.restore(snapshot, now);
    assert_eq!(restored.state, State::Stable);
    assert_eq!(
        restored.heartbeat(&a.member_id, None, a.generation, now),
        Ok(())
    );
    assert_eq!(
        restored.check_commit(&a.member_id, None, a.generation, now),
        Ok(())
    );
    assert_eq!(
        restored.heartbeat("stranger", None, a.generation, now),
        Err(GroupError::UnknownMemberId)
    );
}

/// Snapshots read back one after the other (a coordinator loading a partition) leave each
/// member with the last one's protocol and subscription, and its session from the first.
#[test]
fn a_later_snapshot_read_back_replaces_the_protocol_and_subscriptions() {
    let now = Instant::now();
    let member = |subscription: &'static [u8]| SnapshotMember {
        member_id: "m".into(),
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 5_000,
        subscription: Bytes::from_static(subscription),
        assignment: Bytes::from_static(b"A"),
        group_instance_id: None,
    };
    let snapshot = |generation: i32, protocol: &str, subscription: &'static [u8]| Snapshot {
        generation,
        protocol_type: "consumer".into(),
        protocol: protocol.into(),
        leader: "m".into(),
        members: vec![member(subscription)],
    };
    let mut g = LiveGroup::default();
    g.restore(snapshot(5, "range", b"sub-range"), now);
    g.restore(
        snapshot(6, "roundrobin", b"sub-rr"),
        now + Duration::from_secs(1),
    );
    assert_eq!(g.generation, 6);
    assert_eq!(g.snapshot(), snapshot(6, "roundrobin", b"sub-rr"));
    assert_eq!(g.heartbeat("m", None, 6, now), Ok(()));
}

/// The state machine alone, with no channel: a join that waits is answered as a reply for
/// its ticket once the rebalance completes, and the same requests at the same times give the
/// same member ids and answers (it draws nothing of its own).
#[test]
fn the_state_machine_answers_waiting_joins_as_replies_for_their_tickets() {
    let run = || {
        let limits = GroupLimits {
            initial_rebalance_delay: Duration::from_secs(1),
            ..LIMITS
        };
        let now = Instant::now();
        let mut g = Group::new();
        assert!(matches!(
            g.join(join_request("", &["range"]), 1, &limits, now),
            JoinStep::Parked
        ));
        assert!(matches!(
            g.join(join_request("", &["range"]), 2, &limits, now),
            JoinStep::Parked
        ));
        assert!(g.holds(1) && g.holds(2));
        assert!(g.take_replies().is_empty(), "waiting out the initial delay");
        let ticked = g.tick(&limits, now + Duration::from_secs(1));
        assert!(ticked.expired.is_empty());
        let replies = g.take_replies();
        assert!(!g.holds(1) && !g.holds(2), "both answered");
        assert!(g.take_replies().is_empty(), "each answer is taken once");
        replies
            .into_iter()
            .map(|r| match r {
                Reply::Join(ticket, Ok(joined)) => (ticket, joined.member_id, joined.generation),
                other => panic!("a join's answer: {other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first.len(), 2);
    assert_eq!(
        first.iter().map(|(t, _, _)| *t).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(first.iter().all(|(_, _, generation)| *generation == 1));
    assert_eq!(first, run(), "deterministic");
}
