//! Where a partition is: ListOffsets (its start, its high watermark, a time, its latest time)
//! and OffsetForLeaderEpoch (where a term's records end), for both doors.

use super::BrokerService;
use super::fetch::check_epoch;
use super::requests::OffsetSpec;
use crate::error::{Error, Result};
use crate::security::acl::AclOperation;
use crate::types::{Offset, PartitionId};

/// An offset ListOffsets found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) offset: Offset,
    /// The timestamp of the record found, for a lookup by time; `None` for the log start and
    /// the high watermark.
    pub(crate) timestamp_ms: Option<u64>,
}

impl BrokerService {
    /// ListOffsets on this broker's replica: the log start, the high watermark, the first
    /// record whose timestamp is a time or later, or the first record of the log's largest
    /// timestamp (Kafka's MAX_TIMESTAMP); `None` if there is no such record or it is not
    /// committed yet, as Kafka answers for a record past the high watermark. `current_epoch` is the asker's leader epoch
    /// (`None`: not checked).
    pub(crate) fn list_offset(
        &self,
        partition: &PartitionId,
        at: OffsetSpec,
        current_epoch: Option<u64>,
    ) -> Result<Option<Listed>> {
        self.authorize_topic(AclOperation::Describe, &partition.topic)?;
        let replica = self.broker.replica(partition)?;
        check_epoch(&replica, current_epoch)?;
        let log = replica.store.log();
        let high_watermark = replica.committed_end();
        let mark = |offset| Listed {
            offset,
            timestamp_ms: None,
        };
        let start = replica.log_start();
        let by_time = |ms| -> Result<Option<Listed>> {
            // Only a committed record counts; one DeleteRecords deleted is answered by the
            // first record left (its time unknown without a read).
            Ok(log
                .record_for_timestamp(ms)?
                .filter(|(o, _)| *o < high_watermark)
                .map(|(offset, ms)| {
                    if offset < start {
                        Listed {
                            offset: start,
                            timestamp_ms: None,
                        }
                    } else {
                        Listed {
                            offset,
                            timestamp_ms: Some(ms),
                        }
                    }
                }))
        };
        match at {
            OffsetSpec::Earliest => Ok(Some(mark(start))),
            OffsetSpec::Latest => Ok(Some(mark(high_watermark))),
            OffsetSpec::Timestamp(ms) => by_time(ms),
            OffsetSpec::MaxTimestamp => match log.max_record_timestamp() {
                Some(ms) => by_time(ms),
                None => Ok(None),
            },
        }
    }

    /// The leader epoch Kafka answers with an offset ListOffsets found (from version 4), so
    /// that a consumer can check its new position against the leader's log (KIP-320): for the
    /// high watermark (`OffsetSpec::Latest`), the replica's current term, as a Kafka leader
    /// names its latest epoch; for any other offset, the term of the batch that holds it, or
    /// the current term past the last batch. `None` if the replica cannot say.
    pub(crate) fn listed_epoch(
        &self,
        partition: &PartitionId,
        at: OffsetSpec,
        offset: Offset,
    ) -> Option<u64> {
        self.authorize_topic(AclOperation::Describe, &partition.topic)
            .ok()?;
        let replica = self.broker.replica(partition).ok()?;
        let current = replica.raft.term();
        if at == OffsetSpec::Latest {
            return Some(current);
        }
        let batches = replica.store.log().read(offset, 1).ok()?;
        Some(batches.first().map_or(current, |b| b.term().get()))
    }

    /// Kafka's OffsetForLeaderEpoch on this broker, which must lead the partition, with
    /// Kafka's answers (its `LeaderEpochFileCache::endOffsetFor`): for the current term, the
    /// high watermark (only committed records are ever served); for an earlier `epoch`, the
    /// largest term at or below it that the log holds and the offset where that term's
    /// records end (a leader's log never loses entries of earlier terms, so this is not capped
    /// by a high watermark that may still lag right after an election); for an epoch older
    /// than the log, the epoch itself and the log start; `Ok(None)` (Kafka's undefined epoch
    /// and offset) for an epoch above the current term. `current` is the asker's idea of the
    /// current term (`None`: not checked; otherwise [`Error::LeaderEpochMismatch`]).
    pub(crate) fn epoch_end(
        &self,
        partition: &PartitionId,
        epoch: u64,
        current: Option<u64>,
    ) -> Result<Option<(u64, Offset)>> {
        self.authorize_topic(AclOperation::Describe, &partition.topic)?;
        let replica = self.broker.replica(partition)?;
        let state = replica.raft.state();
        if state.leader != Some(self.broker.config.id) {
            return Err(Error::NotLeader {
                partition: partition.clone(),
                leader: None,
            });
        }
        check_epoch(&replica, current)?;
        if epoch > state.term {
            return Ok(None);
        }
        if epoch == state.term {
            return Ok(Some((state.term, replica.committed_end())));
        }
        let log = replica.store.log();
        let end = log.end_of_term(epoch)?;
        Ok(Some(end.unwrap_or((epoch, log.start_offset()))))
    }
}
