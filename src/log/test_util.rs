//! Helpers shared by the log's unit tests.

use std::path::Path;
use std::sync::Arc;

use super::PartitionLog;
use crate::config::LogConfig;
use crate::env::{Env, FaultInjector};
use crate::error::Result;
use crate::segment::format::SEGMENT_HEADER_LEN;
use crate::segment::record::Record;
use crate::types::Offset;

/// Tiny segments so that rolls happen every few batches.
pub(super) fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        record_bytes_max: 256,
        batch_bytes_max: 512,
        preallocate: crate::Preallocate::Fallocate,
        ..LogConfig::default()
    }
}

/// [`small`], and an environment with a fault injector to open it in.
pub(super) fn small_with_faults() -> (Arc<FaultInjector>, LogConfig, Env) {
    let faults = FaultInjector::new();
    let env = Env::default().with_disk_faults(Arc::clone(&faults));
    (faults, small(), env)
}

pub(super) fn values(log: &PartitionLog, from: u64) -> Vec<(u64, Vec<u8>)> {
    log.iter(Offset(from))
        .map(|r| r.map(|(o, rec)| (o.0, rec.value.to_vec())))
        .collect::<Result<_>>()
        .unwrap()
}

pub(super) fn fill(log: &PartitionLog, n: u64) {
    for i in 0..n {
        log.append(&[Record::new(format!("value-{i}"))]).unwrap();
    }
}

/// Segments of exactly four 80-byte frames (one record of a 6-byte value each).
pub(super) fn four_frame_segments(recycle_segments: usize) -> LogConfig {
    LogConfig {
        segment_bytes: (SEGMENT_HEADER_LEN + 4 * 80) as u64,
        index_interval_bytes: 64,
        record_bytes_max: 64,
        batch_bytes_max: 256,
        preallocate: crate::Preallocate::Fallocate,
        recycle_segments,
        ..LogConfig::default()
    }
}

pub(super) fn append_numbered(log: &PartitionLog, range: std::ops::Range<u64>) {
    for i in range {
        let info = log.append(&[Record::new(format!("{i:06}"))]).unwrap();
        assert_eq!(info.base_offset, Offset(i));
    }
}

pub(super) fn numbered(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
    range.map(|i| (i, format!("{i:06}").into_bytes())).collect()
}

pub(super) fn recycled_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("recycled-")
        })
        .count()
}

/// A Kafka producer's batch of records with these timestamps (values `v0`, `v1`, …), as a
/// Kafka client encodes it: as CreateTime, or under LogAppendTime, which gives each record the
/// batch's max timestamp.
pub(super) fn kafka_batch(
    times: &[i64],
    compression: kafka_protocol::records::Compression,
    log_append_time: bool,
) -> bytes::Bytes {
    let records: Vec<KafkaFields> = (0..)
        .zip(times)
        .map(|(i, t)| (*t, None, Some(format!("v{i}").into_bytes())))
        .collect();
    kafka_records(&records, compression, log_append_time)
}

/// A Kafka record's timestamp, key and value (either null).
pub(super) type KafkaFields = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// A Kafka producer's batch of these records, as a Kafka client encodes it (see
/// [`kafka_batch`]).
pub(super) fn kafka_records(
    records: &[KafkaFields],
    compression: kafka_protocol::records::Compression,
    log_append_time: bool,
) -> bytes::Bytes {
    use kafka_protocol::records::{
        Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<KafkaRecord> = (0i64..)
        .zip(records)
        .map(|(i, (t, key, value))| KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: if log_append_time {
                TimestampType::LogAppend
            } else {
                TimestampType::Creation
            },
            offset: i,
            // The encoder keeps records in one batch while offset − sequence is constant;
            // -1 is the batch's "no sequence".
            sequence: i32::try_from(i).unwrap() - 1,
            timestamp: *t,
            key: key.clone().map(bytes::Bytes::from),
            value: value.clone().map(bytes::Bytes::from),
            headers: Default::default(),
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}
