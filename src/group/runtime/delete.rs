//! Deleting groups and committed offsets (Kafka's DeleteGroups and OffsetDelete), as Kafka's
//! classic coordinator does: only a group without members is deleted, with its committed
//! offsets; a committed offset is deleted unless the group's members consume its topic. Each
//! deletion is a record written to the group's offsets partition through Raft before it is
//! answered (`group/records.rs`), so no later coordinator, after a failover or a restart,
//! brings back what was deleted.

use std::sync::Arc;

use bytes::Bytes;

use super::{GroupCoordinator, Host};
use crate::group::api::PartitionResult;
use crate::group::records::{group_tombstone, offset_tombstone};
use crate::group::state::State;
use crate::group::{GroupError, GroupResult};
use crate::segment::record::Record;

impl GroupCoordinator {
    /// DeleteGroups for one group: refused with [`GroupError::NonEmptyGroup`] while it has
    /// members (it is not Empty), [`GroupError::GroupIdNotFound`] if the coordinator does not
    /// know it.
    pub(crate) async fn delete_group<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
    ) -> GroupResult<()> {
        let (replica, shard) = self.coordinate(host, group).await?;
        let host = host.as_ref();
        let _writer = shard.writer.lock().await;
        self.may_write(host, &shard)?;
        // An empty value for each committed offset, then the group's: compaction keeps only
        // each key's latest record, so the offsets are deleted under their own keys too.
        let mut records: Vec<Record> = {
            let groups = shard.groups.lock();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            if g.state != State::Empty {
                return Err(GroupError::NonEmptyGroup);
            }
            g.offsets
                .keys()
                .map(|(topic, partition)| {
                    Record::new(Bytes::new()).with_key(offset_tombstone(group, topic, *partition))
                })
                .collect()
        };
        records.push(Record::new(Bytes::new()).with_key(group_tombstone(group)));
        self.write_and_apply(host, &replica, &shard, group, records)
            .await
    }

    /// OffsetDelete: deletes the group's committed offsets of `partitions`, each answered
    /// with its own error ([`GroupError::GroupSubscribedToTopic`] while the group's members
    /// consume its topic, [`GroupError::UnknownTopicOrPartition`]). Refused whole with
    /// [`GroupError::GroupIdNotFound`] for a group the coordinator does not know, and
    /// [`GroupError::NonEmptyGroup`] for a group with members that is not a consumer group.
    /// A group left without members and offsets is deleted too, as Kafka's coordinator does.
    pub(crate) async fn delete_offsets<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
        partitions: Vec<(String, u32)>,
    ) -> GroupResult<Vec<PartitionResult>> {
        let (replica, shard) = self.coordinate(host, group).await?;
        let host = host.as_ref();
        let known: Vec<bool> = partitions
            .iter()
            .map(|(t, p)| host.partition_exists(t, *p))
            .collect();
        let _writer = shard.writer.lock().await;
        self.may_write(host, &shard)?;
        let mut results = Vec::with_capacity(partitions.len());
        let mut records = Vec::new();
        {
            let groups = shard.groups.lock();
            let g = groups.get(group).ok_or(GroupError::GroupIdNotFound)?;
            let active = g.state != State::Empty;
            if active && g.protocol_type.as_deref() != Some("consumer") {
                return Err(GroupError::NonEmptyGroup);
            }
            let mut left = g.offsets.len();
            for ((topic, partition), known) in partitions.into_iter().zip(known) {
                let error = if !known {
                    Some(GroupError::UnknownTopicOrPartition)
                } else if active && g.subscribed_to(&topic) {
                    Some(GroupError::GroupSubscribedToTopic)
                } else {
                    None
                };
                let committed = g.offsets.contains_key(&(topic.clone(), partition));
                let tombstone = offset_tombstone(group, &topic, partition);
                if error.is_none()
                    && committed
                    && !records
                        .iter()
                        .any(|r: &Record| r.key.as_ref() == Some(&tombstone))
                {
                    records.push(Record::new(Bytes::new()).with_key(tombstone));
                    left -= 1;
                }
                results.push(PartitionResult {
                    topic,
                    partition,
                    error,
                });
            }
            if !active && left == 0 && !records.is_empty() {
                records.push(Record::new(Bytes::new()).with_key(group_tombstone(group)));
            }
        }
        if !records.is_empty() {
            self.write_and_apply(host, &replica, &shard, group, records)
                .await?;
        }
        Ok(results)
    }
}
