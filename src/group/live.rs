//! A group as its coordinator serves it: the state machine (`state.rs`), which holds no
//! channel, and the channels of the joins and syncs that wait on it.
//!
//! Each join and sync gets a ticket; the state machine parks the ticket in the member and,
//! when it answers, hands back a [`Reply`] for it, which is sent here to the request's
//! channel. Every call that can answer waiting requests goes through [`LiveGroup`], which
//! delivers the answers before it returns; reads go straight to the [`Group`] (`Deref`).
//! A request no member waits on any more (a join sent again replaced it, or a restored
//! snapshot dropped its member) loses its channel, and its asker sees the coordinator gone,
//! as it does when the whole shard is dropped with the leadership.

use std::collections::HashMap;
use std::ops::Deref;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::GroupError;
use super::state::{
    Committed, Group, GroupLimits, JoinRequest, JoinStep, Joined, Reply, Snapshot, StaticRejoin,
    SyncStep, Ticked, Ticket,
};

type JoinReceiver = oneshot::Receiver<Result<Joined, GroupError>>;
type SyncReceiver = oneshot::Receiver<Result<Bytes, GroupError>>;

/// The answer to a join: now, or through the receiver once the rebalance completes.
pub(crate) enum JoinOutcome {
    Now(Result<Joined, GroupError>),
    /// A first join that asked for it gets its member id to join again with
    /// (`MEMBER_ID_REQUIRED`).
    MemberIdRequired(String),
    Parked(JoinReceiver),
    /// A static member came back to a Stable group: write the rejoin's snapshot, then apply
    /// it with [`LiveGroup::rejoined`], which answers the join.
    Rejoin(StaticRejoin),
}

/// The answer to a sync.
pub(crate) enum SyncOutcome {
    Now(Result<Bytes, GroupError>),
    /// Waiting for the leader's assignment to be written.
    Parked(SyncReceiver),
    /// The leader's sync: write the snapshot, then call [`LiveGroup::synced`]; the member's
    /// answer comes through the receiver.
    Write(Snapshot, SyncReceiver),
}

/// One group and the requests waiting on it.
#[derive(Default)]
pub(crate) struct LiveGroup {
    group: Group,
    joins: HashMap<Ticket, oneshot::Sender<Result<Joined, GroupError>>>,
    syncs: HashMap<Ticket, oneshot::Sender<Result<Bytes, GroupError>>>,
    next_ticket: Ticket,
}

impl Deref for LiveGroup {
    type Target = Group;

    fn deref(&self) -> &Group {
        &self.group
    }
}

impl LiveGroup {
    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Sends the state machine's answers to their requests, and drops the channels of
    /// requests no member waits on any more.
    fn deliver(&mut self) {
        for reply in self.group.take_replies() {
            match reply {
                Reply::Join(ticket, answer) => {
                    if let Some(tx) = self.joins.remove(&ticket) {
                        let _ = tx.send(answer);
                    }
                }
                Reply::Sync(ticket, answer) => {
                    if let Some(tx) = self.syncs.remove(&ticket) {
                        let _ = tx.send(answer);
                    }
                }
            }
        }
        let group = &self.group;
        self.joins.retain(|ticket, _| group.holds(*ticket));
        self.syncs.retain(|ticket, _| group.holds(*ticket));
    }

    /// [`Group::join`].
    pub(crate) fn join(
        &mut self,
        request: JoinRequest,
        limits: &GroupLimits,
        now: Instant,
    ) -> JoinOutcome {
        let ticket = self.ticket();
        let (tx, rx) = oneshot::channel();
        self.joins.insert(ticket, tx);
        let outcome = match self.group.join(request, ticket, limits, now) {
            JoinStep::Now(answer) => JoinOutcome::Now(answer),
            JoinStep::MemberIdRequired(id) => JoinOutcome::MemberIdRequired(id),
            JoinStep::Parked => JoinOutcome::Parked(rx),
            JoinStep::Rejoin(rejoin) => JoinOutcome::Rejoin(rejoin),
        };
        self.deliver();
        outcome
    }

    /// [`Group::sync`].
    pub(crate) fn sync(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> SyncOutcome {
        let ticket = self.ticket();
        let (tx, rx) = oneshot::channel();
        self.syncs.insert(ticket, tx);
        let step = self.group.sync(
            member_id,
            group_instance_id,
            generation,
            assignments,
            ticket,
            now,
        );
        let outcome = match step {
            SyncStep::Now(answer) => SyncOutcome::Now(answer),
            SyncStep::Parked => SyncOutcome::Parked(rx),
            SyncStep::Write(snapshot) => SyncOutcome::Write(snapshot, rx),
        };
        self.deliver();
        outcome
    }

    /// [`Group::synced`].
    pub(crate) fn synced(
        &mut self,
        generation: i32,
        written: Result<(), GroupError>,
        limits: &GroupLimits,
        now: Instant,
    ) {
        self.group.synced(generation, written, limits, now);
        self.deliver();
    }

    /// [`Group::rejoined`].
    pub(crate) fn rejoined(
        &mut self,
        rejoin: &StaticRejoin,
        written: Result<(), GroupError>,
        now: Instant,
    ) -> Result<Joined, GroupError> {
        let answer = self.group.rejoined(rejoin, written, now);
        self.deliver();
        answer
    }

    /// [`Group::heartbeat`].
    pub(crate) fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        self.group
            .heartbeat(member_id, group_instance_id, generation, now)
    }

    /// [`Group::leave`].
    pub(crate) fn leave(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        limits: &GroupLimits,
        now: Instant,
    ) -> Result<(), GroupError> {
        let left = self.group.leave(member_id, group_instance_id, limits, now);
        self.deliver();
        left
    }

    /// [`Group::check_commit`].
    pub(crate) fn check_commit(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        self.group
            .check_commit(member_id, group_instance_id, generation, now)
    }

    /// [`Group::tick`].
    pub(crate) fn tick(&mut self, limits: &GroupLimits, now: Instant) -> Ticked {
        let ticked = self.group.tick(limits, now);
        self.deliver();
        ticked
    }

    /// [`Group::restore`].
    pub(crate) fn restore(&mut self, snapshot: Snapshot, now: Instant) {
        self.group.restore(snapshot, now);
        self.deliver();
    }

    /// [`Group::topic_grew`], if the group's members consume `topic`; whether it rebalances.
    pub(crate) fn topic_grew(&mut self, topic: &str, limits: &GroupLimits, now: Instant) -> bool {
        if !self.subscribed_to(topic) {
            return false;
        }
        self.group.topic_grew(now, limits);
        self.deliver();
        true
    }

    /// Whether the group's members consume `topic`, as Kafka's classic coordinator tells it
    /// (its `isSubscribedToTopic`): a consumer group with a chosen protocol, one of whose
    /// members' subscriptions names the topic. A subscription that does not decode names
    /// none.
    pub(crate) fn subscribed_to(&self, topic: &str) -> bool {
        let group = &self.group;
        let Some(protocol) = group.protocol.as_deref() else {
            return false;
        };
        group.protocol_type.as_deref() == Some("consumer")
            && group.members.values().any(|m| {
                super::assignor::decode_subscription(&m.metadata(protocol))
                    .is_some_and(|topics| topics.iter().any(|t| t == topic))
            })
    }

    /// [`Group::commit`].
    pub(crate) fn commit(&mut self, topic: String, partition: u32, committed: Option<Committed>) {
        self.group.commit(topic, partition, committed);
    }
}
