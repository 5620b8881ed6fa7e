//! What a broker tells about partitions: [`PartitionStatus`], the ISR, and metadata answers
//! that name every partition's current leader.

use std::collections::HashMap;

use crate::error::Result;
use crate::protocol::{MetadataRequest, MetadataResponse};
use crate::transport::frame::Op;
use crate::types::{NodeId, Offset, PartitionId};

use super::service::{ClusterMetadata, PartitionInfo, SizeLimits};
use super::{Broker, HostedReplica, ISR_LAG_ENTRIES_MAX, ISR_LAG_REQUESTS_MAX, PartitionStatus};

/// How many entries a follower that matched `matched` is behind a leader whose last entry is
/// `last` (what [`PartitionStatus::follower_lag`] reports).
pub(super) fn entries_behind(last: u64, matched: Option<u64>) -> u64 {
    // One that matched nothing lacks every entry up to `last`, the first included.
    matched.map_or(last.saturating_add(1), |m| last.saturating_sub(m))
}

impl Broker {
    /// See [`Node::status`].
    pub(crate) fn status(&self, topic: &str, partition: u32) -> Result<PartitionStatus> {
        let id = PartitionId::new(topic, partition);
        if let Some(down) = self.down.lock().get(&id) {
            return Ok(down.status.clone());
        }
        let replica = self.replica(&id)?;
        Ok(self.status_of(&replica))
    }

    pub(super) fn status_of(&self, replica: &HostedReplica) -> PartitionStatus {
        let state = replica.raft.state();
        let last = state.last_log_index.unwrap_or(0);
        let follower_lag = state
            .members
            .map(|members| {
                members
                    .into_iter()
                    .filter(|(id, _)| *id != self.config.id)
                    .map(|(id, m)| (id, entries_behind(last, m.matched)))
                    .collect()
            })
            .unwrap_or_default();
        PartitionStatus {
            leader: state.leader,
            term: state.term,
            log_end: replica.store.log().end_offset(),
            high_watermark: Offset(replica.sm.high_watermark()),
            log_start: replica.log_start(),
            follower_lag,
            stopped: replica.raft.stopped().map(|why| why.to_string()),
        }
    }

    /// This broker's view of one replica it hosts.
    fn partition_info(&self, replica: &HostedReplica, replicas: Vec<NodeId>) -> PartitionInfo {
        let state = replica.raft.state();
        let quiet = replica.raft.is_parked();
        let last = state.last_log_index.unwrap_or(0);
        // In sync: the leader, and followers that are at most ISR_LAG_ENTRIES_MAX entries and
        // ISR_LAG_REQUESTS_MAX full replication requests of bytes behind, and acknowledged the
        // leader within two election timeouts (a follower far behind in bytes with few large
        // entries is not in sync, however often it answers), and whose broker this one could
        // connect to at its last try (a new leader heard its predecessor a moment ago, but
        // once the predecessor's port refuses, it is not in sync).
        let silence_max = self.config.election_timeout * 2;
        let bytes_max =
            (self.config.payload_bytes_max() as u64).saturating_mul(ISR_LAG_REQUESTS_MAX);
        let log = replica.store.log();
        let lag = state
            .members
            .iter()
            .flatten()
            .filter(|(id, _)| **id != self.config.id)
            .map(|(id, m)| (*id, entries_behind(last, m.matched)))
            .collect();
        let isr = state
            .members
            .map(|members| {
                members
                    .into_iter()
                    .filter(|(id, m)| {
                        if *id == self.config.id {
                            return true;
                        }
                        let matched = m.matched.unwrap_or(0);
                        let behind = last.saturating_sub(matched);
                        // A quiet group's followers acknowledged its whole log when it went
                        // quiet, and hear nothing since; one on a broker that is not live was
                        // left out of the quiet.
                        let heard = if quiet {
                            self.liveness.is_live(*id)
                        } else {
                            m.ack_age.is_some_and(|age| age < silence_max)
                        };
                        heard
                            && !self.peers.is_lost(*id)
                            && behind <= ISR_LAG_ENTRIES_MAX
                            && (behind == 0 || log.bytes_after(matched) <= bytes_max)
                    })
                    .map(|(id, _)| id)
                    .collect()
            })
            .unwrap_or_default();
        PartitionInfo {
            partition: replica.id.clone(),
            leader: state.leader,
            term: state.term,
            replicas,
            isr,
            lag,
            log_start: replica.log_start().get(),
            high_watermark: replica.sm.high_watermark(),
        }
    }

    /// What this broker knows of the cluster: every broker and, per partition, the leader,
    /// its term, the replicas and (from the leader) the in-sync replicas. A partition hosted
    /// here is described by its local replica, which tracks the leader; one hosted elsewhere
    /// by asking its replicas (unless `local_only`: then it is left out).
    pub(crate) async fn metadata(&self, topic: Option<&str>, local_only: bool) -> ClusterMetadata {
        let all = self.catalog.read().brokers();
        let brokers: Vec<(NodeId, String)> = self.members(&all).into_iter().collect();
        let wanted = self.wanted_partitions(topic);
        let Described {
            mut partitions,
            remote,
            elsewhere,
        } = self.describe_here(wanted, local_only);
        if !remote.is_empty() {
            self.ask_elsewhere(topic, &remote, &elsewhere, &mut partitions)
                .await;
        }
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        ClusterMetadata {
            broker: self.config.id,
            brokers,
            partitions,
            limits: SizeLimits {
                record_bytes_max: self.config.log.record_bytes_max,
                batch_bytes_max: self.config.log.batch_bytes_max,
                frame_bytes_max: self.config.frame_bytes_max,
            },
        }
    }

    /// Every partition of `topic` (or of every topic), with its replicas, as the catalog has
    /// them.
    fn wanted_partitions(&self, topic: Option<&str>) -> Vec<(PartitionId, Vec<NodeId>)> {
        let catalog = self.catalog.read();
        catalog
            .topics()
            .filter(|(name, _)| topic.is_none_or(|t| t == name.as_str()))
            .flat_map(|(name, t)| {
                t.assignment.iter().enumerate().map(|(p, replicas)| {
                    let p = u32::try_from(p).unwrap_or(u32::MAX);
                    (PartitionId::new(name.clone(), p), replicas.clone())
                })
            })
            .collect()
    }

    /// Describes each `wanted` partition as far as this broker can: a partition hosted here by
    /// its local replica, one hosted elsewhere with no leader yet (left out if `local_only`),
    /// and names the brokers to ask for the rest.
    fn describe_here(
        &self,
        wanted: Vec<(PartitionId, Vec<NodeId>)>,
        local_only: bool,
    ) -> Described {
        let mut partitions = Vec::with_capacity(wanted.len());
        // Brokers to ask, and where each partition hosted elsewhere sits in `partitions`.
        let mut remote: std::collections::BTreeSet<NodeId> = Default::default();
        let mut elsewhere: HashMap<PartitionId, usize> = HashMap::new();
        for (id, replicas) in wanted {
            let replica = self.replicas.read().get(&id).cloned();
            match replica {
                Some(replica) => {
                    let ours = self.partition_info(&replica, replicas);
                    // A follower knows its leader but not which replicas are caught up: the
                    // leader is asked for its in-sync set, so that every broker answers with
                    // the same Isr (Kafka's metadata does).
                    if let Some(leader) = ours.leader
                        && leader != self.config.id
                        && !local_only
                    {
                        remote.insert(leader);
                        elsewhere.insert(id.clone(), partitions.len());
                    }
                    partitions.push(ours);
                }
                None if local_only => {}
                None => {
                    remote.extend(replicas.iter().copied());
                    elsewhere.insert(id.clone(), partitions.len());
                    partitions.push(PartitionInfo {
                        partition: id,
                        leader: None,
                        term: 0,
                        replicas,
                        isr: Vec::new(),
                        lag: Vec::new(),
                        log_start: 0,
                        high_watermark: 0,
                    });
                }
            }
        }
        Described {
            partitions,
            remote,
            elsewhere,
        }
    }

    /// Asks the `remote` brokers for their descriptions of `topic`'s partitions, and updates
    /// each partition in `partitions` that `elsewhere` places there with the best answer.
    async fn ask_elsewhere(
        &self,
        topic: Option<&str>,
        remote: &std::collections::BTreeSet<NodeId>,
        elsewhere: &HashMap<PartitionId, usize>,
        partitions: &mut [PartitionInfo],
    ) {
        // Ask each broker hosting such partitions, at once, and keep, per partition, the
        // answer that names a leader in the highest term.
        let asks = remote.iter().map(|broker| {
            let request = MetadataRequest {
                topic: topic.map(str::to_string),
                local_only: true,
            };
            self.ask::<_, MetadataResponse>(*broker, Op::Metadata, request)
        });
        let answers = futures_util::future::join_all(asks).await;
        for answer in answers.into_iter().flatten() {
            for theirs in answer.partitions.into_iter().map(PartitionInfo::from) {
                let Some(slot) = elsewhere
                    .get(&theirs.partition)
                    .and_then(|i| partitions.get_mut(*i))
                else {
                    continue;
                };
                let better = theirs.leader.is_some()
                    && (slot.leader.is_none()
                        || theirs.term > slot.term
                        || (theirs.term == slot.term
                            && slot.isr.is_empty()
                            && !theirs.isr.is_empty()));
                if better {
                    let replicas = std::mem::take(&mut slot.replicas);
                    *slot = PartitionInfo { replicas, ..theirs };
                }
            }
        }
    }
}

/// The partitions a broker described itself, and what is left to ask other brokers.
struct Described {
    /// The partitions described, in the catalog's order.
    partitions: Vec<PartitionInfo>,
    /// The brokers to ask.
    remote: std::collections::BTreeSet<NodeId>,
    /// Where each partition to ask about sits in `partitions`.
    elsewhere: HashMap<PartitionId, usize>,
}

/// A peer's description of a partition (its `Op::Metadata` answer), as the service tells it.
impl From<crate::protocol::PartitionMetadata> for PartitionInfo {
    fn from(p: crate::protocol::PartitionMetadata) -> Self {
        PartitionInfo {
            partition: p.partition,
            leader: p.leader,
            term: p.term,
            replicas: p.replicas,
            isr: p.isr,
            lag: p.lag,
            log_start: p.log_start,
            high_watermark: p.high_watermark,
        }
    }
}
