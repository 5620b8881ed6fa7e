//! The write and read paths: a batch validated and proposed to its partition's Raft group, the
//! answer mapped to `NotLeader`, `TryAgain`, `Indeterminate` or the offsets it got; committed
//! reads from any replica.

use std::sync::Arc;

use crate::error::{CorruptKind, Error, Result};
use crate::log::AppendInfo;
use crate::raft::replica::WriteError;
use crate::raft::types::AppendRequest;
use crate::segment::batch::Batch;
use crate::segment::format::PayloadFormat;
use crate::segment::record::{Record, encode_records};
use crate::transport::Turn;
use crate::types::{LeaderHint, LogIndex, Offset, PartitionId, ProducerSeq};

use super::service::ProduceBatch;
use super::supervise::RebuildCause;
use super::{Broker, HostedReplica};
use crate::segment::frame::Limits;
use crate::topic_config::TopicSettings;

/// Whether a replog payload of `count` records (validated) has a record without a key.
fn has_keyless(payload: &[u8], count: u32) -> bool {
    let mut pos = 0usize;
    (0..count).any(|_| {
        crate::segment::record::RecordRef::read(payload, &mut pos).is_none_or(|r| r.key.is_none())
    })
}

/// The largest uncompressed Kafka batch a leader checks on the runtime worker that received it
/// (about 25 µs of CRC-32C and record walking); larger and compressed ones are checked on the
/// blocking pool.
const KAFKA_INLINE_CHECK_BYTES: usize = 256 << 10;

impl Broker {
    /// See [`Node::append`].
    pub(crate) async fn append(
        &self,
        topic: &str,
        partition: u32,
        records: &[Record],
        producer: Option<ProducerSeq>,
    ) -> Result<AppendInfo> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let (payload, record_count) = encode_records(records, self.config.log.record_bytes_max)?;
        let batch = ProduceBatch {
            records: payload,
            format: PayloadFormat::Replog,
            record_count,
            producer: producer.unwrap_or(ProducerSeq::new(0, 0)),
        };
        self.append_encoded(&PartitionId::new(topic, partition), batch, None)
            .await
    }

    /// Appends an encoded batch: validated here, before it is proposed, so that no replica
    /// is ever asked to store a malformed one.
    /// `turn`, if given, is the request's place among its connection's requests; batches of
    /// one producer are checked in that order.
    pub(crate) async fn append_encoded(
        &self,
        id: &PartitionId,
        batch: ProduceBatch,
        turn: Option<Turn>,
    ) -> Result<AppendInfo> {
        let replica = self.replica(id)?;
        self.append_to(&replica, log_entry(batch), turn).await
    }

    /// [`append_encoded`](Self::append_encoded) to a replica of this broker.
    pub(super) async fn append_to(
        &self,
        replica: &HostedReplica,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> Result<AppendInfo> {
        let settings = *replica.settings.read();
        check_batch(replica, &request, settings).await?;
        let record_count = request.record_count;
        // The leader's clock stamps the batch (Kafka's LogAppendTime); replicas store it as is.
        // Never below the log's latest stamp (a predecessor's clock may have been ahead), so
        // that append times, and so replog's records' timestamps, follow offset order.
        let timestamp_ms = crate::env::now_ms().max(replica.store.log().max_timestamp_ms());
        // A `LogAppendTime` topic's Kafka batches carry that stamp for Kafka's consumers too
        // (replog's own batches have no other time).
        let records = if settings.log_append_time && request.format == PayloadFormat::Kafka {
            crate::segment::kafka::stamp_log_append_time(&request.records, timestamp_ms)
        } else {
            request.records
        };
        let request = AppendRequest {
            timestamp_ms,
            records,
            ..request
        };
        let (log_index, response) = self.commit(replica, request, turn).await?;
        Ok(AppendInfo {
            log_index: LogIndex(log_index),
            base_offset: Offset(response.base_offset),
            record_count,
            timestamp_ms: response.timestamp_ms,
        })
    }

    /// Commits `request` through `replica`'s Raft member on this broker, its leader, within the
    /// request timeout: its log index and the state machine's answer, or the refusal as the
    /// caller's error (`NotLeader` with where the leader is now, `TryAgain`, a producer's
    /// sequence or epoch refused, `Indeterminate` when the outcome is unknown).
    pub(super) async fn commit(
        &self,
        replica: &HostedReplica,
        request: AppendRequest,
        turn: Option<Turn>,
    ) -> Result<(u64, crate::raft::types::AppendResponse)> {
        let (producer_id, epoch, got) = (
            request.producer_id,
            request.producer_epoch,
            request.base_sequence,
        );
        let timeout = self.config.request_timeout;
        let outcome = tokio::time::timeout(timeout, replica.raft.write(request, turn)).await;
        let indeterminate = |reason: String| Error::Indeterminate {
            partition: replica.id.clone(),
            reason,
        };
        match outcome {
            Err(_) => Err(indeterminate(format!(
                "not committed within {} ms",
                timeout.as_millis()
            ))),
            Ok(Ok(committed)) => Ok(committed),
            Ok(Err(WriteError::NotLeader(leader))) => Err(Error::NotLeader {
                partition: replica.id.clone(),
                // Where the catalog says the broker is now; the Raft group's membership keeps the
                // address the broker had when it joined.
                leader: leader.map(|hint| LeaderHint {
                    addr: self.broker_addr(hint.node_id).unwrap_or(hint.addr),
                    ..hint
                }),
            }),
            Ok(Err(WriteError::Discarded)) => Err(indeterminate(
                "leadership changed after the batch was appended".into(),
            )),
            Ok(Err(WriteError::Other(reason))) => Err(indeterminate(reason)),
            Ok(Err(WriteError::TryAgain(reason))) => Err(Error::TryAgain {
                partition: replica.id.clone(),
                reason: reason.into(),
            }),
            Ok(Err(WriteError::OutOfOrder { expected })) => Err(Error::OutOfOrderSequence {
                partition: replica.id.clone(),
                producer_id,
                expected,
                got,
            }),
            Ok(Err(WriteError::Fenced { current })) => Err(Error::ProducerFenced {
                partition: replica.id.clone(),
                producer_id,
                epoch,
                current,
            }),
        }
    }

    /// See [`Node::read`].
    pub(crate) fn read(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Batch>> {
        Ok(self
            .read_marked(topic, partition, offset, max_bytes)?
            .batches)
    }

    /// [`read`](Self::read), with the replica's high watermark and log start.
    pub(crate) fn read_marked(
        self: &Arc<Self>,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Fetched> {
        let replica = self.replica(&PartitionId::new(topic, partition))?;
        self.read_replica(&replica, offset, max_bytes)
    }

    /// [`read_marked`](Self::read_marked) of a replica already looked up.
    pub(crate) fn read_replica(
        self: &Arc<Self>,
        replica: &Arc<HostedReplica>,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Fetched> {
        let read = read_committed(replica, offset, max_bytes);
        // Never served: the reader gets the error, and the replica is rebuilt from the leader.
        if let Err(damage @ Error::Corrupt { .. }) = &read {
            self.request_rebuild(Arc::clone(replica), RebuildCause::Damaged(damage.clone()));
        }
        Ok(Fetched {
            batches: read?,
            high_watermark: replica.committed_end(),
            log_start: replica.log_start(),
        })
    }
}

/// The Raft log entry of a new batch: not compacted, and stamped by the leader's log
/// (`append_to` sets its time).
fn log_entry(batch: ProduceBatch) -> AppendRequest {
    AppendRequest {
        records: batch.records,
        record_count: batch.record_count,
        producer_id: batch.producer.producer_id,
        producer_epoch: batch.producer.epoch,
        base_sequence: batch.producer.base_sequence,
        timestamp_ms: 0,
        format: batch.format,
        compacted: false,
    }
}

/// Committed batches of a partition, and where its committed records end and its log starts
/// on the replica that read them.
pub(crate) struct Fetched {
    pub(crate) batches: Vec<Batch>,
    pub(crate) high_watermark: Offset,
    pub(crate) log_start: Offset,
}

/// Reads committed batches of `replica` from `offset` on, up to about `max_bytes`.
pub(super) fn read_committed(
    replica: &HostedReplica,
    offset: Offset,
    max_bytes: usize,
) -> Result<Vec<Batch>> {
    let log = replica.store.log();
    let high_watermark = replica.committed_end();
    let start = replica.log_start();
    if offset > high_watermark || offset < start {
        return Err(Error::OffsetOutOfRange {
            requested: offset,
            start,
            end: high_watermark,
        });
    }
    if offset == high_watermark {
        return Ok(Vec::new());
    }
    let mut batches = log.read(offset, max_bytes)?;
    batches.retain(|b| b.base_offset() < high_watermark);
    Ok(batches)
}

/// Checks `request` against `replica`'s limits and its topic's `settings` before it reaches
/// Raft: not empty, not too large, its records well formed, and keyed if the topic is
/// compacted.
async fn check_batch(
    replica: &HostedReplica,
    request: &AppendRequest,
    settings: TopicSettings,
) -> Result<()> {
    if request.record_count == 0 {
        return Err(Error::EmptyBatch);
    }
    // The replica's own limits: the metadata log's differ from the partitions'. Checked here,
    // before anything reaches Raft: a batch the log would refuse to store must never be
    // proposed (its storage error would stop the replica for good).
    let limits = replica.store.log().limits();
    let len = request.records.len() as u64;
    let max = limits.batch_bytes_max.min(settings.max_message_bytes);
    if len > u64::from(max) {
        return Err(Error::BatchTooLarge {
            len,
            max: u64::from(max),
        });
    }
    let checked = check_records(request, limits, settings).await;
    let checked = checked.map_err(|kind| match kind {
        CorruptKind::LengthOutOfRange { len, max } => Error::RecordTooLarge { len, max },
        kind => Error::InvalidBatch { kind },
    })?;
    if checked.keyless && settings.compact {
        return Err(Error::InvalidRecord(format!(
            "topic {} is compacted: every record needs a key",
            replica.id.topic
        )));
    }
    if let Some(times) = checked.producer_times
        && !settings.log_append_time
    {
        check_times(times, crate::env::now_ms(), settings)?;
    }
    Ok(())
}

/// What [`check_records`] found of a batch's records.
struct Checked {
    /// A record has no key (looked for in a replog batch only where the topic is compacted).
    keyless: bool,
    /// The earliest and latest record timestamps its producer gave (a Kafka batch of
    /// CreateTime).
    producer_times: Option<(i64, i64)>,
}

/// Refuses a batch with a record stamped outside the topic's window around the leader's
/// clock `now` (`message.timestamp.before.max.ms`, `message.timestamp.after.max.ms`), as
/// Kafka's leader refuses it (`INVALID_TIMESTAMP`).
fn check_times((earliest, latest): (i64, i64), now: u64, settings: TopicSettings) -> Result<()> {
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    // Kafka's default, the largest long, is no bound at all.
    let window = |ms: u64| i64::try_from(ms).ok().filter(|ms| *ms < i64::MAX);
    let from = window(settings.timestamp_before_max_ms).map_or(i64::MIN, |w| now.saturating_sub(w));
    let to = window(settings.timestamp_after_max_ms).map_or(i64::MAX, |w| now.saturating_add(w));
    let outside = if latest > to {
        Some(latest)
    } else {
        (earliest < from).then_some(earliest)
    };
    match outside {
        Some(t) => Err(Error::InvalidTimestamp(format!(
            "a record's timestamp {t} is outside [{from}, {to}] (the leader's clock {now}, the \
             topic's message.timestamp.before.max.ms and message.timestamp.after.max.ms)"
        ))),
        None => Ok(()),
    }
}

/// Checks `request`'s records against `limits`, in their format.
async fn check_records(
    request: &AppendRequest,
    limits: &Limits,
    settings: TopicSettings,
) -> std::result::Result<Checked, CorruptKind> {
    // A Kafka batch is checked whole here (CRC-32C, records, codec, limits), once;
    // replicas and readers after it check only its header and the frame's CRC. An
    // uncompressed batch of up to `KAFKA_INLINE_CHECK_BYTES` is checked on this worker (one
    // CRC pass and one walk of its records: tens of microseconds); a larger or compressed
    // one (decompressing costs a few milliseconds per MiB) off the runtime's workers.
    match request.format {
        PayloadFormat::Replog => {
            crate::segment::record::validate_records(&request.records, request.record_count, limits)
                .map(|()| Checked {
                    keyless: settings.compact
                        && has_keyless(&request.records, request.record_count),
                    producer_times: None,
                })
        }
        PayloadFormat::Kafka => {
            let (records, limits) = (request.records.clone(), *limits);
            let accept = move || crate::segment::kafka::accept_keyed(&records, &limits);
            let inline = request.records.len() <= KAFKA_INLINE_CHECK_BYTES
                && crate::segment::kafka::header(&request.records).is_ok_and(|h| h.codec == 0);
            let info = if inline {
                accept()
            } else {
                tokio::task::spawn_blocking(accept)
                    .await
                    .unwrap_or(Err(CorruptKind::BadKafkaBatch("records do not decode")))
            };
            info.and_then(|a| {
                if a.info.record_count == request.record_count {
                    Ok(Checked {
                        keyless: a.keyless,
                        producer_times: (!a.info.log_append_time)
                            .then_some((a.earliest, a.info.max_timestamp)),
                    })
                } else {
                    Err(CorruptKind::BadKafkaBatch(
                        "record count differs from the request's",
                    ))
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's producer times are taken within the topic's window around the leader's
    /// clock, its edges included, and refused past either edge, naming the time.
    #[test]
    fn producer_times_outside_the_topics_window_are_refused() {
        let mut settings = TopicSettings::unconstrained();
        settings.timestamp_before_max_ms = 1_000;
        settings.timestamp_after_max_ms = 3_600_000;
        let now = 1_800_000_000_000u64;
        let at = |ms: i64| i64::try_from(now).unwrap() + ms;
        assert!(check_times((at(-1_000), at(3_600_000)), now, settings).is_ok());
        let late = check_times((at(0), at(3_600_001)), now, settings);
        assert!(
            matches!(&late, Err(Error::InvalidTimestamp(why)) if why.contains(&at(3_600_001).to_string())),
            "{late:?}"
        );
        let early = check_times((at(-1_001), at(0)), now, settings);
        assert!(
            matches!(early, Err(Error::InvalidTimestamp(_))),
            "{early:?}"
        );
        // Kafka's defaults for the window before: none.
        let open = TopicSettings::unconstrained();
        assert!(check_times((i64::MIN, at(0)), now, open).is_ok());
    }
}
