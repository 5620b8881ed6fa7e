//! A group's committed offsets and what the group looks like: OffsetCommit (each offset
//! written through Raft before it is answered), OffsetFetch, ListGroups and DescribeGroups.

use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use super::{GroupCoordinator, Host};
use crate::group::api::{
    CommittedOffset, GroupDescription, GroupListing, MemberDescription, OffsetCommit,
    PartitionResult,
};
use crate::group::records::{offset_record, offset_tombstone};
use crate::group::state::Committed;
use crate::group::{COMMIT_METADATA_BYTES_MAX, GroupError, GroupResult};
use crate::segment::record::Record;

impl GroupCoordinator {
    /// OffsetCommit: each partition's offset written through Raft before it is answered.
    pub(crate) async fn commit_offsets<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        request: OffsetCommit,
    ) -> GroupResult<Vec<PartitionResult>> {
        let (replica, shard) = self.coordinate(host, &request.group).await?;
        let host = host.as_ref();
        let _writer = shard.writer.lock().await;
        self.may_write(host, &shard)?;
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
            } else if !host.partition_exists(&o.topic, o.partition) {
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
            self.write_and_apply(host, &replica, &shard, &request.group, records)
                .await?;
        }
        Ok(results)
    }

    /// OffsetFetch.
    pub(crate) async fn fetch_offsets<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> GroupResult<Vec<CommittedOffset>> {
        let (_replica, shard) = self.coordinate(host, group).await?;
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
    pub(crate) async fn list_groups<H: Host>(self: &Arc<Self>, host: &Arc<H>) -> Vec<GroupListing> {
        let mut out = Vec::new();
        let Ok(n) = self.offsets_partitions(host) else {
            return out;
        };
        for p in 0..n {
            let Ok((_replica, shard)) = self.coordinate_partition(host.as_ref(), p).await else {
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
    pub(crate) async fn describe_group<H: Host>(
        self: &Arc<Self>,
        host: &Arc<H>,
        group: &str,
    ) -> GroupResult<GroupDescription> {
        let (_replica, shard) = self.coordinate(host, group).await?;
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
}
