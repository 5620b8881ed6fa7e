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
