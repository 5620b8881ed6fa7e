//! Kafka's Fetch (versions 4 to 12) over the broker service's fetch: the request mapped to the
//! service's, the answer mapped back. Which records are answered, the long poll and the
//! epoch checks are the service's (`node/service/fetch.rs`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};

use crate::kafka::{Held, KafkaConfig, broker_id, code, current_leader, error_code, take};
use crate::node::service::{BrokerService, Fetch, Fetched, PartitionFetch};
use crate::segment::batch::Batch;
use crate::segment::format::PayloadFormat;
use crate::segment::kafka as kafka_batch;
use crate::types::{Offset, PartitionId};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::Fetch, 4, 12)];

/// A Kafka offset as the service takes it: a negative one names no record, and is past any
/// log's end (answered OFFSET_OUT_OF_RANGE).
pub(crate) fn offset(kafka: i64) -> Offset {
    u64::try_from(kafka).map_or(Offset(u64::MAX), Offset)
}

/// A Kafka leader epoch as the service takes it: −1 (and any negative) is "not checked".
pub(crate) fn epoch(kafka: i32) -> Option<u64> {
    u64::try_from(kafka).ok()
}

/// A Kafka partition index as the service takes it: a negative one is a partition no topic
/// has.
pub(crate) fn partition(topic: &str, index: i32) -> PartitionId {
    PartitionId::new(topic, u32::try_from(index).unwrap_or(u32::MAX))
}

/// The service's fetch for a Kafka Fetch request.
fn service_fetch(request: &FetchRequest, config: &KafkaConfig) -> Fetch {
    // An answer leaves room for its own framing within the frame limit.
    let frame_budget = (config.limits.frame_bytes_max as usize).saturating_sub(64 << 10);
    let partitions = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| PartitionFetch {
                partition: partition(&t.topic, p.partition),
                offset: offset(p.fetch_offset),
                max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                current_epoch: epoch(p.current_leader_epoch),
            })
        })
        .collect();
    Fetch {
        partitions,
        max_bytes: usize::try_from(request.max_bytes)
            .unwrap_or(0)
            .min(frame_budget),
        max_wait: Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)),
        min_bytes: usize::try_from(request.min_bytes).unwrap_or(0),
    }
}

/// What a Kafka fetch answer may hold in memory, reserved before the log is read: the batches
/// the service may answer with, grown by an eighth (a Kafka batch built from replog's records
/// is a little longer than its frame; a Kafka producer's batch is sent from where it lies, and
/// counts as held until written), and each partition's fields; at most two frames (which the
/// answer budget always holds).
fn answer_bytes(fetch: &Fetch, service: &BrokerService, config: &KafkaConfig) -> usize {
    let batches = service.fetch_answer_bytes(fetch);
    batches
        .saturating_add(batches / 8)
        .saturating_add(fetch.partitions.len().saturating_mul(128))
        .min((config.limits.frame_bytes_max as usize).saturating_mul(2))
}

/// Serves a Kafka Fetch: waits (holding nothing) for the service's long poll, then takes the
/// answer's bytes from the broker's answer budget and reads. While the budget is spent
/// (clients that never read hold it until the frame timeout closes them), a fetch waits for it
/// no longer than it would long-poll and is answered with its partitions' marks and no
/// records: the client asks again, and fetches do not queue up behind the budget. Returns the
/// answer without its records, each partition's records as pieces (see `fetch_answer.rs`),
/// and the budget held until the answer is written.
pub(crate) async fn fetch(
    request: FetchRequest,
    version: i16,
    service: &BrokerService,
    config: &KafkaConfig,
) -> (FetchResponse, Vec<Vec<Bytes>>, Held) {
    let fetch = service_fetch(&request, config);
    service.wait_for_fetch(&fetch).await;
    let within = fetch
        .max_wait
        .clamp(Duration::from_millis(10), Duration::from_secs(5));
    let wanted = answer_bytes(&fetch, service, config);
    let held = tokio::time::timeout(within, take(&config.budgets.answers, wanted))
        .await
        .ok()
        .flatten();
    let mut answers = if held.is_some() {
        service.fetch(&fetch)
    } else {
        service.fetch_marks(&fetch)
    }
    .into_iter();
    let mut r = FetchResponse::default();
    let mut records = Vec::with_capacity(fetch.partitions.len());
    let committed = request.isolation_level == READ_COMMITTED;
    for topic in request.topics {
        let mut t = FetchableTopicResponse::default();
        for p in &topic.partitions {
            let Some(answer) = answers.next() else { break };
            let (pd, pieces) =
                partition_answer(p.partition, answer, version, committed, service).await;
            t.partitions.push(pd);
            records.push(pieces);
        }
        t.topic = topic.topic;
        r.responses.push(t);
    }
    r.error_code = code::NONE;
    (r, records, held)
}

/// Kafka's isolation level of a consumer that reads committed transactions only.
const READ_COMMITTED: i8 = 1;

/// One partition's part of the answer, and its records as pieces. `read_committed`: the
/// consumer reads committed transactions only, and is answered the aborted ones among the
/// records (none: replog has no transactions); Kafka lists none (a null list) for the others
/// and for a partition refused.
async fn partition_answer(
    index: i32,
    answer: crate::Result<Fetched>,
    version: i16,
    read_committed: bool,
    service: &BrokerService,
) -> (PartitionData, Vec<Bytes>) {
    let mut pd = PartitionData::default();
    pd.partition_index = index;
    pd.high_watermark = -1;
    pd.last_stable_offset = -1;
    pd.log_start_offset = -1;
    pd.aborted_transactions = None;
    pd.preferred_read_replica = BrokerId(-1);
    let mut pieces = Vec::new();
    match answer {
        Ok(fetched) => {
            let hw = i64::try_from(fetched.high_watermark.get()).unwrap_or(i64::MAX);
            pd.high_watermark = hw;
            pd.last_stable_offset = hw;
            pd.log_start_offset = i64::try_from(fetched.log_start.get()).unwrap_or(0);
            if read_committed {
                pd.aborted_transactions = Some(Vec::new());
            }
            pieces = kafka_batches(&fetched.batches);
        }
        Err(e) => {
            pd.error_code = error_code(&e);
            // The leader, for a broker that hosts no replica (Fetch v12+ carries it).
            if version >= 12
                && let Some((node, term, _)) = current_leader(&e, service).await
            {
                pd.current_leader.leader_id = broker_id(node);
                pd.current_leader.leader_epoch = i32::try_from(term).unwrap_or(i32::MAX);
            }
        }
    }
    (pd, pieces)
}

/// Batches as a Kafka fetch answers them, as pieces: one a Kafka producer sent as it was sent
/// (its base offset and leader epoch set, FORMAT.md §4.2), from where it lies but for its first
/// 16 bytes; a run of replog's batches as uncompressed Kafka v2 batches with the same offsets,
/// stamped with their append time, encoded into one piece allocated at its exact size.
fn kafka_batches(batches: &[Batch]) -> Vec<Bytes> {
    let mut pieces = Vec::new();
    let mut rest = batches;
    // Each turn takes one Kafka batch or one run of replog's: bounded by the batches.
    while let Some(first) = rest.first() {
        if first.format() == PayloadFormat::Kafka && first.payload.is_empty() {
            // A frame compaction emptied.
            let mut out = BytesMut::with_capacity(kafka_batch::BATCH_HEADER_LEN);
            kafka_batch::encode::encode_empty(first, &mut out);
            pieces.push(out.freeze());
            rest = rest.get(1..).unwrap_or_default();
            continue;
        }
        if first.format() == PayloadFormat::Kafka {
            let base = first.base_offset().get();
            pieces.extend(kafka_batch::encode::serve_pieces(
                &first.payload,
                base,
                first.term().get(),
            ));
            rest = rest.get(1..).unwrap_or_default();
            continue;
        }
        let run_len = rest
            .iter()
            .position(|b| b.format() == PayloadFormat::Kafka)
            .unwrap_or(rest.len());
        let (run, after) = rest.split_at(run_len);
        let size = run.iter().map(kafka_batch::encode::native_len).sum();
        let mut out = BytesMut::with_capacity(size);
        for b in run {
            kafka_batch::encode::encode_native(b, &mut out);
        }
        debug_assert_eq!(out.len(), size, "native_len is encode_native's length");
        if !out.is_empty() {
            pieces.push(out.freeze());
        }
        rest = after;
    }
    pieces
}
