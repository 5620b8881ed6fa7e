//! A [`Consumer`]'s membership of a consumer group: joining (and, as the group's leader,
//! assigning the partitions), taking up the assigned partitions from their committed offsets,
//! heartbeating on a task of its own, committing, and giving the partitions back when the
//! group rebalances.
//!
//! The protocol is Kafka's classic one with eager rebalancing: when the coordinator starts a
//! rebalance (a member joined, left or was expired), every member commits what it has
//! returned (with auto-commit), gives up all its partitions, and joins again; the new
//! generation's leader assigns every partition anew. Rejoining happens inside
//! [`poll`](Consumer::poll), never behind the application's back: between two polls the
//! assignment and the generation stay as they are, and a poll returns records only of the
//! partitions assigned when it returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Consumer, StartAt};
use crate::client::{Client, PartitionDescription};
use crate::error::{Error, Result};
use crate::group::GroupError;
use crate::group::api::{CommitOffset, JoinAnswer, JoinGroup, JoinReply, SyncGroup};
use crate::group::assignor::{
    Assignor, CONSUMER_PROTOCOL, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription,
};
use crate::types::{Offset, PartitionId};

/// How many times a committed offset past a partition's end is checked again before the
/// partition starts where `auto_offset_reset` says instead.
const END_CHECKS: u32 = 3;

/// How many join attempts one rejoin makes before it gives up (each is bounded by the
/// rebalance timeout).
const JOIN_ATTEMPTS_MAX: u32 = 20;

/// The group side of a subscribed consumer.
pub(super) struct Membership {
    pub(super) group: String,
    pub(super) topics: Vec<String>,
    /// The coordinator's name for this member; empty before the first join (or after it was
    /// forgotten).
    pub(super) member_id: String,
    /// The current generation, once joined and synced.
    pub(super) generation: Option<i32>,
    /// The partitions of the current generation.
    pub(super) assigned: Vec<PartitionId>,
    /// Turns true when the heartbeat learns the group is rebalancing (or this member was
    /// fenced): the next poll rejoins.
    pub(super) rejoin: watch::Sender<bool>,
    pub(super) rejoin_rx: watch::Receiver<bool>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl Membership {
    pub(super) fn new(group: String, topics: Vec<String>) -> Membership {
        let (rejoin, rejoin_rx) = watch::channel(true);
        Membership {
            group,
            topics,
            member_id: String::new(),
            generation: None,
            assigned: Vec::new(),
            rejoin,
            rejoin_rx,
            heartbeat: None,
        }
    }

    pub(super) fn needs_rejoin(&self) -> bool {
        *self.rejoin.borrow()
    }

    pub(super) fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop_heartbeat();
    }
}

impl Consumer {
    /// Rejoins the group: gives up the current partitions (committing their positions first
    /// with auto-commit), joins, assigns as the leader, syncs, and takes up the new
    /// partitions from their committed offsets (or `auto_offset_reset` where none is).
    pub(super) async fn rejoin(&mut self) -> Result<()> {
        let Some(mut m) = self.group.take() else {
            return Ok(());
        };
        let outcome = self.rejoin_with(&mut m).await;
        if outcome.is_err() {
            // Not a member of any generation: the next poll tries again.
            let _ = m.rejoin.send(true);
        }
        self.group = Some(m);
        outcome
    }

    async fn rejoin_with(&mut self, m: &mut Membership) -> Result<()> {
        // Give the partitions back (eager rebalancing).
        m.stop_heartbeat();
        if m.generation.is_some() && self.config.auto_commit_interval.is_some() {
            let offsets = self.positions_of(&m.assigned);
            if let Err(e) = self.commit_as(m, offsets).await {
                tracing::info!(group = %m.group, error = %e, "commit before rebalance failed");
            }
        }
        // What was fetched ahead for the old generation is not returned.
        self.held = None;
        for id in std::mem::take(&mut m.assigned) {
            if let Some(mut a) = self.partitions.remove(&id)
                && let Some(f) = a.fetcher.take()
            {
                f.abort();
            }
        }
        m.generation = None;
        let _ = m.rejoin.send(false);
        let (generation, assigned) = self.join_and_sync(m).await?;
        // Take the new partitions up where the group left them.
        let list: Vec<(String, u32)> = assigned
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .collect();
        let committed = if list.is_empty() {
            Vec::new()
        } else {
            self.client
                .fetch_group_offsets(&m.group, Some(list.clone()))
                .await?
        };
        let mut described: BTreeMap<String, Vec<PartitionDescription>> = BTreeMap::new();
        for (topic, partition) in &list {
            let id = PartitionId::new(topic.clone(), *partition);
            if !described.contains_key(topic) {
                described.insert(topic.clone(), self.client.describe(topic).await?);
            }
            let committed = committed
                .iter()
                .find(|c| c.topic == *topic && c.partition == *partition)
                .and_then(|c| c.offset)
                .map(Offset);
            let position = match committed {
                Some(o) if self.committed_is_past_end(&id, o, &mut described).await? => {
                    tracing::warn!(
                        partition = %id,
                        committed = %o,
                        "the committed offset is past the partition's end (the topic was \
                         deleted and created again?): starting where auto_offset_reset says"
                    );
                    self.reset_position(&id, &described).await?
                }
                Some(o) => o,
                None => self.reset_position(&id, &described).await?,
            };
            self.start(id.clone(), position);
            m.assigned.push(id);
        }
        m.generation = Some(generation);
        tracing::info!(
            group = %m.group,
            member = %m.member_id,
            generation,
            partitions = m.assigned.len(),
            "joined the group"
        );
        m.heartbeat = Some(tokio::spawn(heartbeat(
            Arc::clone(&self.client),
            m.group.clone(),
            m.member_id.clone(),
            generation,
            self.config.heartbeat_interval,
            m.rejoin.clone(),
        )));
        Ok(())
    }

    /// Where a partition with no usable committed offset starts: `auto_offset_reset`.
    async fn reset_position(
        &self,
        id: &PartitionId,
        described: &BTreeMap<String, Vec<PartitionDescription>>,
    ) -> Result<Offset> {
        let d = described
            .get(&id.topic)
            .and_then(|ds| ds.iter().find(|d| d.partition.partition == id.partition))
            .ok_or_else(|| Error::UnknownPartition(id.clone()))?;
        Ok(match self.config.auto_offset_reset {
            StartAt::Beginning => d.log_start,
            StartAt::End => d.high_watermark,
            StartAt::Offset(o) => o,
            StartAt::Timestamp(ms) => self
                .client
                .offset_for_timestamp(&id.topic, id.partition, ms)
                .await?
                .unwrap_or(d.high_watermark),
        })
    }

    /// Whether `committed` is past the partition's committed end, asked again a few times
    /// (a leader elected a moment ago may not have caught its high watermark up yet).
    async fn committed_is_past_end(
        &self,
        id: &PartitionId,
        committed: Offset,
        described: &mut BTreeMap<String, Vec<PartitionDescription>>,
    ) -> Result<bool> {
        let end = |described: &BTreeMap<String, Vec<PartitionDescription>>| {
            described
                .get(&id.topic)
                .and_then(|ds| ds.iter().find(|d| d.partition.partition == id.partition))
                .map(|d| d.high_watermark)
        };
        for _ in 0..END_CHECKS {
            if end(described).is_none_or(|e| committed <= e) {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            described.insert(id.topic.clone(), self.client.describe(&id.topic).await?);
        }
        Ok(end(described).is_some_and(|e| committed > e))
    }

    /// Joins and syncs until a generation is complete: the generation and this member's
    /// partitions.
    async fn join_and_sync(&self, m: &mut Membership) -> Result<(i32, Vec<(String, Vec<u32>)>)> {
        let subscription = encode_subscription(&m.topics);
        let protocols = self
            .config
            .assignors
            .iter()
            .map(|a| (a.name().to_string(), subscription.clone()))
            .collect::<Vec<_>>();
        let mut last = None;
        for _ in 0..JOIN_ATTEMPTS_MAX {
            let request = JoinGroup {
                group: m.group.clone(),
                member_id: m.member_id.clone(),
                client_id: self.config.client_id.clone(),
                session_timeout_ms: millis(self.config.session_timeout),
                rebalance_timeout_ms: millis(self.config.rebalance_timeout),
                protocol_type: CONSUMER_PROTOCOL.into(),
                protocols: protocols.clone(),
                require_known_member_id: true,
                group_instance_id: None,
            };
            let joined = match self.client.join_group(request).await {
                Ok(JoinReply::Joined(j)) => j,
                // The coordinator's id for this member first; the next join uses it.
                Ok(JoinReply::MemberIdRequired(id)) => {
                    m.member_id = id;
                    continue;
                }
                Err(e) => {
                    self.retry_after(m, &e).await?;
                    last = Some(e);
                    continue;
                }
            };
            m.member_id = joined.member_id.clone();
            let assignments = if joined.leader == joined.member_id {
                self.assign_as_leader(&joined).await?
            } else {
                Vec::new()
            };
            let sync = SyncGroup {
                group: m.group.clone(),
                generation: joined.generation,
                member_id: joined.member_id.clone(),
                assignments,
                group_instance_id: None,
            };
            match self
                .client
                .sync_group(sync, self.config.session_timeout)
                .await
            {
                Ok(bytes) => {
                    let assigned = decode_assignment(&bytes).ok_or_else(|| {
                        Error::Remote(format!(
                            "group {}: an assignment that does not decode",
                            m.group
                        ))
                    })?;
                    return Ok((joined.generation, assigned));
                }
                Err(e) => {
                    self.retry_after(m, &e).await?;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Remote("no join attempt made".into())))
    }

    /// Whether a failed join or sync is worth another attempt (returns the error if not).
    async fn retry_after(&self, m: &mut Membership, e: &Error) -> Result<()> {
        match e {
            Error::Group {
                error: GroupError::UnknownMemberId,
                ..
            } => {
                m.member_id.clear();
                Ok(())
            }
            Error::Group {
                error: GroupError::RebalanceInProgress | GroupError::IllegalGeneration,
                ..
            } => Ok(()),
            Error::Timeout { .. } | Error::NoBrokerReachable { .. } => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(())
            }
            other => Err(other.clone()),
        }
    }

    /// As the generation's leader: every member's partitions, by the chosen assignor.
    async fn assign_as_leader(&self, joined: &JoinAnswer) -> Result<Vec<(String, bytes::Bytes)>> {
        let subscriptions: BTreeMap<String, Vec<String>> = joined
            .members
            .iter()
            .map(|(id, meta)| (id.clone(), decode_subscription(meta).unwrap_or_default()))
            .collect();
        let mut counts = BTreeMap::new();
        for topic in subscriptions.values().flatten() {
            if counts.contains_key(topic) {
                continue;
            }
            // A topic that does not exist (yet) has no partitions to assign.
            let n = match self.client.partition_count(topic).await {
                Ok(n) => n,
                Err(Error::UnknownTopic(_)) => 0,
                Err(e) => return Err(e),
            };
            counts.insert(topic.clone(), n);
        }
        let assignor = Assignor::from_name(&joined.protocol).unwrap_or_default();
        let plan = assignor.assign(&subscriptions, &counts);
        Ok(subscriptions
            .keys()
            .map(|member| {
                let mine = plan.get(member).cloned().unwrap_or_default();
                (member.clone(), encode_assignment(&mine))
            })
            .collect())
    }

    /// Each partition's position.
    pub(super) fn positions_of(&self, ids: &[PartitionId]) -> Vec<(PartitionId, Offset)> {
        ids.iter()
            .filter_map(|id| Some((id.clone(), self.partitions.get(id)?.position)))
            .collect()
    }

    /// Commits `offsets` as this member of its generation (or, outside a generation, as a
    /// consumer with no membership: allowed only while the group has no members).
    pub(super) async fn commit_as(
        &self,
        m: &Membership,
        offsets: Vec<(PartitionId, Offset)>,
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let (generation, member) = match m.generation {
            Some(g) => (g, m.member_id.as_str()),
            None => (-1, ""),
        };
        let offsets = offsets
            .into_iter()
            .map(|(id, o)| CommitOffset {
                topic: id.topic,
                partition: id.partition,
                offset: Some(o.get()),
                metadata: String::new(),
                leader_epoch: None,
            })
            .collect();
        let result = self
            .client
            .commit_group(&m.group, generation, member, offsets)
            .await;
        if let Err(Error::Group {
            error:
                GroupError::IllegalGeneration
                | GroupError::UnknownMemberId
                | GroupError::RebalanceInProgress,
            ..
        }) = &result
        {
            // Fenced: the partitions may be someone else's now. Rejoin at the next poll.
            let _ = m.rejoin.send(true);
        }
        result
    }

    /// Commits every assigned partition's position if the auto-commit interval has passed.
    pub(super) async fn maybe_auto_commit(&mut self) {
        let Some(interval) = self.config.auto_commit_interval else {
            return;
        };
        let now = Instant::now();
        if self.next_auto_commit.is_some_and(|at| now < at) {
            return;
        }
        self.next_auto_commit = Some(now + interval);
        let Some(m) = self.group.as_ref() else {
            return;
        };
        if m.generation.is_none() {
            return;
        }
        let offsets = self.positions_of(&m.assigned);
        if let Err(e) = self.commit_as(m, offsets).await {
            tracing::info!(group = %m.group, error = %e, "auto-commit failed");
        }
    }
}

/// Heartbeats every `interval` until the group rebalances or fences this member (then
/// `rejoin` turns true and the task ends) or the task is aborted. A coordinator that cannot be
/// reached is tried again at the next beat (its session outlasts a few).
async fn heartbeat(
    client: Arc<Client>,
    group: String,
    member_id: String,
    generation: i32,
    interval: Duration,
    rejoin: watch::Sender<bool>,
) {
    // Ends when this member is fenced, or by abort (when the member rejoins or closes).
    loop {
        tokio::time::sleep(interval).await;
        match client.heartbeat(&group, generation, &member_id).await {
            Ok(()) => {}
            // The group is rebalancing: rejoin at the next poll, and go on beating meanwhile
            // so that the session holds until then (Kafka's heartbeat thread does the same;
            // the rebalance timeout, not the session, bounds how long the poll may take).
            Err(Error::Group {
                error: GroupError::RebalanceInProgress,
                ..
            }) => {
                let _ = rejoin.send(true);
            }
            Err(Error::Group { error, .. }) if !error.coordinator_moved() => {
                tracing::debug!(%group, %error, "heartbeat: fenced, rejoin");
                let _ = rejoin.send(true);
                return;
            }
            Err(e) => tracing::debug!(%group, error = %e, "heartbeat failed; trying again"),
        }
    }
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
