//! The broker's side of consumer groups: which broker coordinates a group, loading a
//! coordinator's shard from its offsets partition, serving the group requests against it, and
//! the timers that expire sessions and finish rebalances (a shard's loading is `shards.rs`'s,
//! deleting groups and offsets `delete.rs`'s). The
//! rules themselves are `group/state.rs`'s; the records `group/records.rs`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::error::Error;
use crate::group::api::{
    CommittedOffset, Coordinator, GroupDescription, GroupListing, JoinAnswer, JoinGroup, JoinReply,
    MemberDescription, MemberRef, OffsetCommit, PartitionResult, SyncGroup,
};
use crate::group::coordinator::Shard;
use crate::group::live::{JoinOutcome, SyncOutcome};
use crate::group::records::{group_record, offset_record, offset_tombstone};
use crate::group::state::{Committed, GroupLimits, JoinRequest, Snapshot, State};
use crate::group::{
    COMMIT_METADATA_BYTES_MAX, GROUP_NAME_BYTES_MAX, GroupError, MEMBER_BLOB_BYTES_MAX,
    OFFSETS_TOPIC, check_group_id, coordinator_partition,
};
use crate::protocol::CreateTopicRequest;
use crate::raft::types::AppendRequest;
use crate::segment::record::{Record, encode_records};
use crate::types::PartitionId;

use crate::node::write::read_committed;
use crate::node::{Broker, HostedReplica};

mod delete;
mod shards;

type GroupResult<T> = std::result::Result<T, GroupError>;

/// How often the coordinators' timers run (session expiry, rebalance deadlines).
const TICK: Duration = Duration::from_millis(100);

/// Bytes of the offsets partition read at once while loading.
const LOAD_BYTES: usize = 4 << 20;

impl Broker {
    /// Each topic's partition count, as this broker's copy of the metadata has it.
    fn partition_counts(&self) -> std::collections::BTreeMap<String, usize> {
        self.catalog
            .read()
            .topics()
            .map(|(name, t)| (name.clone(), t.assignment.len()))
            .collect()
    }

    fn group_limits(&self) -> GroupLimits {
        GroupLimits {
            session_timeout_min: self.config.group_session_timeout_min,
            session_timeout_max: self.config.group_session_timeout_max,
            members_max: self.config.group_members_max,
            initial_rebalance_delay: self.config.group_initial_rebalance_delay,
        }
    }

    /// The offsets topic's partition count, once it exists; otherwise its creation is started
    /// (once at a time) and the caller is told to retry.
    fn offsets_partitions(self: &Arc<Self>) -> GroupResult<u32> {
        let count = self
            .catalog
            .read()
            .topic(OFFSETS_TOPIC)
            .map(|t| t.assignment.len());
        if let Some(n) = count.and_then(|n| u32::try_from(n).ok()) {
            return Ok(n);
        }
        if !self.offsets_topic_creating.swap(true, Ordering::AcqRel) {
            let broker = Arc::clone(self);
            tokio::spawn(async move {
                let brokers = u32::try_from(broker.catalog.read().brokers().len()).unwrap_or(1);
                let request = CreateTopicRequest {
                    // Compacted whatever it says (`retention.rs`); it says so to clients.
                    configs: crate::topic_config::TopicConfigs::from_pairs([(
                        "cleanup.policy",
                        "compact",
                    )])
                    .unwrap_or_default(),
                    assignment: Vec::new(),
                    name: OFFSETS_TOPIC.into(),
                    partitions: broker.config.offsets_topic_partitions,
                    replication_factor: broker
                        .config
                        .offsets_topic_replication_factor
                        .min(brokers)
                        .max(1),
                    forwarded: false,
                };
                match broker.create_topic(request).await {
                    Ok(()) | Err(Error::TopicExists(_)) => {
                        tracing::info!(topic = OFFSETS_TOPIC, "offsets topic created");
                    }
                    Err(e) => tracing::warn!(error = %e, "creating the offsets topic failed"),
                }
                broker
                    .offsets_topic_creating
                    .store(false, Ordering::Release);
            });
        }
        Err(GroupError::CoordinatorNotAvailable)
    }

    /// FindCoordinator: the broker that leads the group's offsets partition.
    pub(crate) async fn find_coordinator(
        self: &Arc<Self>,
        group: &str,
    ) -> GroupResult<Coordinator> {
        check_group_id(group)?;
        let n = self.offsets_partitions()?;
        let p = coordinator_partition(group, n);
        let meta = self.metadata(Some(OFFSETS_TOPIC), false).await;
        let leader = meta
            .partitions
            .iter()
            .find(|m| m.partition.partition == p)
            .and_then(|m| m.leader)
            .ok_or(GroupError::CoordinatorNotAvailable)?;
        let addr = meta
            .brokers
            .iter()
            .find(|(id, _)| *id == leader)
            .map(|(_, a)| a.clone())
            .ok_or(GroupError::CoordinatorNotAvailable)?;
        Ok(Coordinator { node: leader, addr })
    }

    /// The group's offsets partition and its loaded shard, if this broker coordinates it.
    async fn coordinate(
        self: &Arc<Self>,
        group: &str,
    ) -> GroupResult<(Arc<HostedReplica>, Arc<Shard>)> {
        check_group_id(group)?;
        let n = self.offsets_partitions()?;
        self.coordinate_partition(coordinator_partition(group, n))
            .await
    }

    /// Appends records to the offsets partition (in batches within the log's limits) and
    /// waits for their commit.
    async fn write_group_records(
        &self,
        hosted: &HostedReplica,
        records: Vec<Record>,
    ) -> GroupResult<()> {
        let limits = hosted.store.log().limits();
        let budget = (limits.batch_bytes_max as usize / 2).max(1);
        let mut chunk: Vec<Record> = Vec::new();
        let mut bytes = 0usize;
        let mut chunks = Vec::new();
        for r in records {
            let len = r.value.len() + r.key.as_ref().map_or(0, Bytes::len) + 32;
            if !chunk.is_empty() && bytes + len > budget {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
            bytes += len;
            chunk.push(r);
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        for chunk in chunks {
            let (payload, record_count) = encode_records(&chunk, limits.record_bytes_max)
                .map_err(|_| GroupError::OffsetMetadataTooLarge)?;
            let request = AppendRequest {
                format: crate::segment::format::PayloadFormat::Replog,
                compacted: false,
                timestamp_ms: 0,
                records: payload,
                record_count,
                producer_id: 0,
                producer_epoch: 0,
                base_sequence: 0,
            };
            self.append_to(hosted, request, None)
                .await
                .map_err(|e| match e {
                    Error::TryAgain { .. } => GroupError::CoordinatorLoadInProgress,
                    Error::RecordTooLarge { .. } | Error::BatchTooLarge { .. } => {
                        GroupError::OffsetMetadataTooLarge
                    }
                    other => {
                        tracing::debug!(error = %other, "an offsets write failed");
                        GroupError::NotCoordinator
                    }
                })?;
        }
        Ok(())
    }

    /// After taking a shard's writer: whether the shard may still write (it was not dropped,
    /// and this broker still leads its partition in its term). A write checked against an
    /// older term's state must not land in a newer term's log.
    fn may_write(&self, shard: &Shard) -> GroupResult<()> {
        if shard.is_dead() || !self.still_leads(shard) {
            return Err(GroupError::NotCoordinator);
        }
        Ok(())
    }

    /// Writes a group's snapshot; the caller holds the shard's writer. Not for a group
    /// deleted since the snapshot was taken (an emptied group's, or a sync's that lost its
    /// members meanwhile): that would bring the group back.
    async fn write_snapshot(
        &self,
        hosted: &HostedReplica,
        shard: &Shard,
        group: &str,
        snapshot: &Snapshot,
    ) -> GroupResult<()> {
        if !shard.groups.lock().contains_key(group) {
            return Err(GroupError::GroupIdNotFound);
        }
        let (key, value) = group_record(group, snapshot);
        self.write_group_records(hosted, vec![Record::new(value).with_key(key)])
            .await?;
        Ok(())
    }

    /// JoinGroup: answered once the rebalance completes.
    pub(crate) async fn join_group(
        self: &Arc<Self>,
        request: JoinGroup,
        from: Option<SocketAddr>,
    ) -> GroupResult<JoinReply> {
        let too_long = |s: &str| s.len() > GROUP_NAME_BYTES_MAX;
        if too_long(&request.member_id)
            || too_long(&request.client_id)
            || too_long(&request.protocol_type)
            || request.protocols.len() > 16
            || request
                .protocols
                .iter()
                .any(|(n, m)| too_long(n) || m.len() > MEMBER_BLOB_BYTES_MAX)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let (hosted, shard) = self.coordinate(&request.group).await?;
        let rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms.into());
        let join = JoinRequest {
            member_id: request.member_id,
            client_id: request.client_id,
            client_host: from.map_or_else(String::new, |a| format!("/{}", a.ip())),
            session_timeout: Duration::from_millis(request.session_timeout_ms.into()),
            rebalance_timeout,
            protocol_type: request.protocol_type,
            protocols: request.protocols,
            require_known_member_id: request.require_known_member_id,
            group_instance_id: request.group_instance_id,
            nonce: crate::client::new_producer_id(),
        };
        let outcome = {
            let mut groups = shard.groups.lock();
            let group = groups.entry(request.group.clone()).or_default();
            group.join(join, &self.group_limits(), Instant::now())
        };
        let joined = match outcome {
            JoinOutcome::MemberIdRequired(id) => return Ok(JoinReply::MemberIdRequired(id)),
            JoinOutcome::Now(r) => r,
            // A static member back in a Stable group: its new member id is written, then
            // applied, before it is answered (no rebalance).
            JoinOutcome::Rejoin(rejoin) => {
                let _writer = shard.writer.lock().await;
                let stands = shard
                    .groups
                    .lock()
                    .get(&request.group)
                    .is_some_and(|g| g.rejoin_stands(&rejoin));
                let written = if !stands {
                    Err(GroupError::RebalanceInProgress)
                } else {
                    match self.may_write(&shard) {
                        Ok(()) => self
                            .write_snapshot(&hosted, &shard, &request.group, &rejoin.snapshot)
                            .await
                            .map_err(|_| GroupError::CoordinatorNotAvailable),
                        Err(e) => Err(e),
                    }
                };
                match shard.groups.lock().get_mut(&request.group) {
                    Some(g) => g.rejoined(&rejoin, written, Instant::now()),
                    None => Err(GroupError::UnknownMemberId),
                }
            }
            // The rebalance ends by its deadline (the timers complete it); a dropped answer
            // means the shard went away with the leadership.
            JoinOutcome::Parked(rx) => {
                let wait = rebalance_timeout + Duration::from_secs(5);
                match tokio::time::timeout(wait, rx).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) => Err(GroupError::NotCoordinator),
                    Err(_) => Err(GroupError::RebalanceInProgress),
                }
            }
        }?;
        Ok(JoinReply::Joined(JoinAnswer {
            generation: joined.generation,
            protocol: joined.protocol,
            leader: joined.leader,
            member_id: joined.member_id,
            members: joined.members,
        }))
    }

    /// SyncGroup: the member's assignment, once the leader's is written.
    pub(crate) async fn sync_group(self: &Arc<Self>, request: SyncGroup) -> GroupResult<Bytes> {
        if request
            .assignments
            .iter()
            .any(|(m, a)| m.len() > GROUP_NAME_BYTES_MAX || a.len() > MEMBER_BLOB_BYTES_MAX)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let (hosted, shard) = self.coordinate(&request.group).await?;
        let limits = self.group_limits();
        let outcome = {
            let mut groups = shard.groups.lock();
            let Some(group) = groups.get_mut(&request.group) else {
                return Err(GroupError::UnknownMemberId);
            };
            group.sync(
                &request.member_id,
                request.group_instance_id.as_deref(),
                request.generation,
                request.assignments,
                Instant::now(),
            )
        };
        let rx = match outcome {
            SyncOutcome::Now(r) => return r,
            SyncOutcome::Parked(rx) => rx,
            SyncOutcome::Write(snapshot, rx) => {
                let written = {
                    let _writer = shard.writer.lock().await;
                    match self.may_write(&shard) {
                        Ok(()) => self
                            .write_snapshot(&hosted, &shard, &request.group, &snapshot)
                            .await
                            // A SyncGroup answers only what Kafka's clients expect of it.
                            .map_err(|_| GroupError::CoordinatorNotAvailable),
                        Err(e) => Err(e),
                    }
                };
                if let Some(group) = shard.groups.lock().get_mut(&request.group) {
                    group.synced(snapshot.generation, written, &limits, Instant::now());
                }
                rx
            }
        };
        // A follower waits for the leader's sync, within its session (the timers end the
        // wait by rebalancing when the leader's session ends).
        let wait = limits.session_timeout_max.min(Duration::from_secs(300));
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(GroupError::NotCoordinator),
            Err(_) => Err(GroupError::RebalanceInProgress),
        }
    }

    /// Heartbeat.
    pub(crate) async fn heartbeat(
        self: &Arc<Self>,
        group: &str,
        generation: i32,
        member: &MemberRef,
    ) -> GroupResult<()> {
        let (_hosted, shard) = self.coordinate(group).await?;
        let mut groups = shard.groups.lock();
        let g = groups.get_mut(group).ok_or(GroupError::UnknownMemberId)?;
        g.heartbeat(
            &member.member_id,
            member.group_instance_id.as_deref(),
            generation,
            Instant::now(),
        )
    }

    /// LeaveGroup.
    pub(crate) async fn leave_group(
        self: &Arc<Self>,
        group: &str,
        member: &MemberRef,
    ) -> GroupResult<()> {
        let (hosted, shard) = self.coordinate(group).await?;
        let emptied = {
            let mut groups = shard.groups.lock();
            let g = groups.get_mut(group).ok_or(GroupError::UnknownMemberId)?;
            let was_empty = g.state == State::Empty;
            g.leave(
                &member.member_id,
                member.group_instance_id.as_deref(),
                &self.group_limits(),
                Instant::now(),
            )?;
            (!was_empty && g.state == State::Empty).then(|| g.snapshot())
        };
        if let Some(snapshot) = emptied {
            let _writer = shard.writer.lock().await;
            let written = match self.may_write(&shard) {
                Ok(()) => self.write_snapshot(&hosted, &shard, group, &snapshot).await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::debug!(error = ?e, "writing an emptied group failed");
            }
        }
        Ok(())
    }

    /// OffsetCommit: each partition's offset written through Raft before it is answered.
    pub(crate) async fn commit_offsets(
        self: &Arc<Self>,
        request: OffsetCommit,
    ) -> GroupResult<Vec<PartitionResult>> {
        let (hosted, shard) = self.coordinate(&request.group).await?;
        let _writer = shard.writer.lock().await;
        self.may_write(&shard)?;
        let now = Instant::now();
        let commit_timestamp_ms = crate::env::now_ms();
        // The fencing check, then each partition's own.
        {
            let mut groups = shard.groups.lock();
            let g = groups.entry(request.group.clone()).or_default();
            g.check_commit(
                &request.member_id,
                request.group_instance_id.as_deref(),
                request.generation,
                now,
            )?;
        }
        let mut results = Vec::with_capacity(request.offsets.len());
        let mut records = Vec::new();
        for o in request.offsets {
            let error = if o.metadata.len() > COMMIT_METADATA_BYTES_MAX {
                Some(GroupError::OffsetMetadataTooLarge)
            } else if !self.partition_exists(&o.topic, o.partition) {
                Some(GroupError::UnknownTopicOrPartition)
            } else {
                None
            };
            if error.is_none() {
                let record = match o.offset {
                    Some(offset) => {
                        let committed = Committed {
                            offset,
                            metadata: o.metadata.clone(),
                            commit_timestamp_ms,
                            leader_epoch: o.leader_epoch,
                        };
                        let (key, value) = offset_record(
                            &request.group,
                            &o.topic,
                            o.partition,
                            &committed,
                            request.generation,
                        );
                        Record::new(value).with_key(key)
                    }
                    None => Record::new(Bytes::new()).with_key(offset_tombstone(
                        &request.group,
                        &o.topic,
                        o.partition,
                    )),
                };
                records.push(record);
            }
            results.push(PartitionResult {
                topic: o.topic,
                partition: o.partition,
                error,
            });
        }
        if !records.is_empty() {
            self.write_and_apply(&hosted, &shard, &request.group, records)
                .await?;
        }
        Ok(results)
    }

    fn partition_exists(&self, topic: &str, partition: u32) -> bool {
        self.catalog
            .read()
            .topic(topic)
            .is_some_and(|t| (partition as usize) < t.assignment.len())
    }

    /// OffsetFetch.
    pub(crate) async fn fetch_offsets(
        self: &Arc<Self>,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> GroupResult<Vec<CommittedOffset>> {
        let (_hosted, shard) = self.coordinate(group).await?;
        let groups = shard.groups.lock();
        let g = groups.get(group);
        let lookup = |topic: String, partition: u32| {
            let c = g.and_then(|g| g.offsets.get(&(topic.clone(), partition)));
            CommittedOffset {
                topic,
                partition,
                offset: c.map(|c| c.offset),
                metadata: c.map(|c| c.metadata.clone()).unwrap_or_default(),
                leader_epoch: c.and_then(|c| c.leader_epoch),
                error: None,
            }
        };
        let mut out: Vec<CommittedOffset> = match partitions {
            Some(ps) => ps.into_iter().map(|(t, p)| lookup(t, p)).collect(),
            None => g
                .map(|g| g.offsets.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(|(t, p)| lookup(t, p))
                .collect(),
        };
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// ListGroups: the groups of every offsets partition this broker leads (each loaded
    /// first, if no group request has loaded it since its election).
    pub(crate) async fn list_groups(self: &Arc<Self>) -> Vec<GroupListing> {
        let mut out = Vec::new();
        let Ok(n) = self.offsets_partitions() else {
            return out;
        };
        for p in 0..n {
            let Ok((_hosted, shard)) = self.coordinate_partition(p).await else {
                continue;
            };
            for (name, g) in shard.groups.lock().iter() {
                out.push(GroupListing {
                    group: name.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state.name().to_string(),
                });
            }
        }
        out.sort_by(|a, b| a.group.cmp(&b.group));
        out
    }

    /// DescribeGroups for one group.
    pub(crate) async fn describe_group(
        self: &Arc<Self>,
        group: &str,
    ) -> GroupResult<GroupDescription> {
        let (_hosted, shard) = self.coordinate(group).await?;
        let groups = shard.groups.lock();
        let Some(g) = groups.get(group) else {
            return Ok(GroupDescription {
                group: group.to_string(),
                state: "Dead".into(),
                protocol_type: String::new(),
                protocol: String::new(),
                generation: -1,
                members: Vec::new(),
            });
        };
        let protocol = g.protocol.clone().unwrap_or_default();
        Ok(GroupDescription {
            group: group.to_string(),
            state: g.state.name().to_string(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            generation: g.generation,
            members: g
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                })
                .collect(),
        })
    }

    fn still_leads(&self, shard: &Shard) -> bool {
        self.replica(&PartitionId::new(OFFSETS_TOPIC, shard.partition))
            .is_ok_and(|h| {
                let s = h.raft.state();
                s.leader == Some(self.config.id) && s.term == shard.term
            })
    }

    /// The coordinators' timers, until shutdown: every [`TICK`], each shard's groups move
    /// time on (sessions end, rebalances complete), emptied groups are written, groups with
    /// nothing left are forgotten, and shards of partitions this broker no longer leads are
    /// dropped (their waiting requests are answered `NotCoordinator`).
    pub(crate) async fn run_group_timers(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut counts = self.partition_counts();
        // Ends at shutdown.
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            let limits = self.group_limits();
            // Topics that grew since the last tick: the groups that consume them rebalance.
            let now_counts = self.partition_counts();
            let grew: Vec<&String> = now_counts
                .iter()
                .filter(|(t, n)| counts.get(*t).is_some_and(|before| before < n))
                .map(|(t, _)| t)
                .collect();
            for shard in self.coordinator.all() {
                if !self.still_leads(&shard) {
                    self.coordinator.drop_shard(&shard);
                    continue;
                }
                let now = Instant::now();
                let emptied: Vec<(String, Snapshot)> = {
                    let mut groups = shard.groups.lock();
                    let mut out = Vec::new();
                    for (name, g) in groups.iter_mut() {
                        for topic in &grew {
                            if g.topic_grew(topic, &limits, now) {
                                tracing::info!(group = %name, %topic,
                                    "group rebalancing: a topic it consumes has new partitions");
                            }
                        }
                        let ticked = g.tick(&limits, now);
                        for member in ticked.expired {
                            tracing::info!(group = %name, %member, "group member's session expired");
                        }
                        out.extend(ticked.emptied.map(|s| (name.clone(), s)));
                    }
                    groups.retain(|_, g| !g.is_forgettable());
                    out
                };
                if emptied.is_empty() {
                    continue;
                }
                let broker = Arc::clone(&self);
                tokio::spawn(async move {
                    let Ok(hosted) =
                        broker.replica(&PartitionId::new(OFFSETS_TOPIC, shard.partition))
                    else {
                        return;
                    };
                    let _writer = shard.writer.lock().await;
                    if broker.may_write(&shard).is_err() {
                        return;
                    }
                    for (name, snapshot) in emptied {
                        if let Err(e) = broker
                            .write_snapshot(&hosted, &shard, &name, &snapshot)
                            .await
                        {
                            tracing::debug!(group = %name, error = ?e, "writing an emptied group failed");
                        }
                    }
                });
            }
            counts = now_counts;
        }
    }
}
