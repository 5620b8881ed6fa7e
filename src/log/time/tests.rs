//! Unit tests of `log/time.rs`: lookups by time on real segment files, against a model (the
//! list of every record's offset and timestamp), with timestamps that go back and forth.

use kafka_protocol::records::Compression;
use proptest::prelude::*;

use super::super::test_util::{kafka_batch, small};
use super::*;
use crate::log::EntrySpec;
use crate::segment::format::{PayloadFormat, index_file_name};
use crate::segment::kafka::CODECS;
use crate::segment::record::{Record, encode_records};
use crate::types::LogIndex;

/// (offset, timestamp) of every record, in offset order.
type Model = Vec<(u64, i64)>;

/// Appends a Kafka batch (written at `append_ms`) and its records to the model.
fn append_kafka(
    log: &PartitionLog,
    model: &mut Model,
    times: &[i64],
    codec: Compression,
    log_append_time: bool,
    append_ms: u64,
) {
    let batch = kafka_batch(times, codec, log_append_time);
    let spec = EntrySpec {
        format: PayloadFormat::Kafka,
        timestamp_ms: Some(append_ms),
        ..EntrySpec::default()
    };
    let count = u32::try_from(times.len()).unwrap();
    let info = log.append_entry(spec, count, &batch).unwrap();
    let max = times.iter().copied().max().unwrap();
    for (i, t) in times.iter().enumerate() {
        let time = if log_append_time { max } else { *t };
        model.push((info.base_offset.get() + i as u64, time));
    }
}

/// Appends a batch of `count` of replog's records written at `append_ms`.
fn append_native(log: &PartitionLog, model: &mut Model, count: usize, append_ms: u64) {
    let records: Vec<Record> = (0..count).map(|i| Record::new(format!("n{i}"))).collect();
    let (payload, n) = encode_records(&records, 256).unwrap();
    let spec = EntrySpec {
        timestamp_ms: Some(append_ms),
        ..EntrySpec::default()
    };
    let info = log.append_entry(spec, n, &payload).unwrap();
    for i in 0..count as u64 {
        model.push((info.base_offset.get() + i, append_ms as i64));
    }
}

fn append_control(log: &PartitionLog) {
    let spec = EntrySpec {
        timestamp_ms: Some(0),
        ..EntrySpec::default()
    };
    log.append_entry(spec, 0, &[0]).unwrap();
}

/// What the model says: the first record whose timestamp is `t` or later.
fn expected(model: &[(u64, i64)], t: u64) -> Option<(Offset, u64)> {
    model
        .iter()
        .find(|(_, time)| *time >= i64::try_from(t).unwrap())
        .map(|(o, time)| (Offset(*o), u64::try_from(*time).unwrap()))
}

fn check_all(
    log: &PartitionLog,
    model: &[(u64, i64)],
    times: impl Iterator<Item = u64>,
    what: &str,
) {
    for t in times {
        assert_eq!(
            log.record_for_timestamp(t).unwrap(),
            expected(model, t),
            "{what}: at {t}"
        );
    }
    let max = model.iter().map(|(_, t)| *t).max();
    assert_eq!(
        log.max_record_timestamp(),
        max.and_then(|m| u64::try_from(m).ok()),
        "{what}: the largest timestamp"
    );
}

fn remove_indexes(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "index") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

/// Over many segments of Kafka batches (every codec, CreateTime that goes back and forth
/// within and across batches, one batch under LogAppendTime), replog's batches and control
/// frames, the lookup answers the first record late enough, inside its batch; and the same
/// after a reopen (indexes read back), after the indexes are rebuilt, and after a truncation
/// cut a segment.
#[test]
fn lookups_by_time_find_the_record_inside_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), small()).unwrap();
    let mut model = Model::new();
    let mut append_ms = 10_000u64;
    // A small LCG: times in [1000, 1600), unordered.
    let mut seed = 7u64;
    let mut next_time = || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        1000 + i64::try_from((seed >> 33) % 600).unwrap()
    };
    for i in 0..120usize {
        append_ms += 1;
        match i % 6 {
            0 => append_native(&log, &mut model, 2, 900 + i as u64 * 5),
            3 => append_control(&log),
            5 if i == 35 => {
                let times = [next_time(), next_time()];
                append_kafka(&log, &mut model, &times, CODECS[i % 5], true, append_ms);
            }
            _ => {
                let times: Vec<i64> = (0..1 + i % 4).map(|_| next_time()).collect();
                append_kafka(&log, &mut model, &times, CODECS[i % 5], false, append_ms);
            }
        }
    }
    assert!(log.segments.read().len() > 10, "many segments");
    check_all(&log, &model, 880..1620, "written");

    drop(log);
    let log = PartitionLog::open(dir.path(), small()).unwrap();
    check_all(&log, &model, 880..1620, "reopened");

    drop(log);
    remove_indexes(dir.path());
    let log = PartitionLog::open(dir.path(), small()).unwrap();
    assert!(dir.path().join(index_file_name(0)).exists(), "rebuilt");
    check_all(&log, &model, 880..1620, "indexes rebuilt");

    // Cut the middle of a segment: what it held past the cut no longer answers.
    let keep = {
        let segs = log.segments.read();
        let s = &segs[segs.len() / 2];
        s.base_log_index + 2
    };
    let kept_offset = log
        .read_entries(keep + 1, keep + 2, 1 << 20)
        .unwrap()
        .first()
        .map(|b| b.base_offset().get())
        .unwrap();
    log.truncate_after(Some(LogIndex(keep))).unwrap();
    model.retain(|(o, _)| *o < kept_offset);
    check_all(&log, &model, 880..1620, "truncated");
}

/// Over many segments with control frames between batches and on index points, the
/// lookup by time answers what a scan of every batch answers, for every time.
#[test]
fn offset_for_timestamp_matches_a_scan_of_every_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), small()).unwrap();
    let mut model: Vec<(u64, u64)> = Vec::new(); // (timestamp, base offset) of each batch
    let mut ts = 1_000u64;
    for i in 0..300u64 {
        if i % 7 == 3 {
            let spec = EntrySpec {
                timestamp_ms: Some(0),
                ..EntrySpec::default()
            };
            log.append_entry(spec, 0, &[0]).unwrap();
            continue;
        }
        // Some batches share a millisecond; most move on.
        ts += [0, 3, 10][(i % 3) as usize];
        let records = [Record::new(format!("v{i}")), Record::new("w")];
        let (payload, count) = encode_records(&records, 256).unwrap();
        let spec = EntrySpec {
            timestamp_ms: Some(ts),
            ..EntrySpec::default()
        };
        let info = log.append_entry(spec, count, &payload).unwrap();
        model.push((ts, info.base_offset.get()));
    }
    assert!(log.segments.read().len() > 10, "many segments");
    for t in 990..ts + 5 {
        let want = model
            .iter()
            .find(|(bt, _)| *bt >= t)
            .map(|(_, o)| Offset(*o));
        assert_eq!(log.offset_for_timestamp(t).unwrap(), want, "at {t}");
    }
    // After a reopen (the segments' maxima and indexes read back from disk), the same.
    drop(log);
    let log = PartitionLog::open(dir.path(), small()).unwrap();
    for t in (990..ts + 5).step_by(7) {
        let want = model
            .iter()
            .find(|(bt, _)| *bt >= t)
            .map(|(_, o)| Offset(*o));
        assert_eq!(
            log.offset_for_timestamp(t).unwrap(),
            want,
            "at {t} after reopen"
        );
    }
    assert_eq!(log.max_timestamp_ms(), ts);
}

/// One batch: a Kafka batch of these times, or (if empty) two of replog's records.
fn arb_batch() -> impl Strategy<Value = (Vec<i64>, usize)> {
    (prop::collection::vec(-1i64..200, 0..6), 0usize..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Against the model, for every time, with any timestamps (a record without one, -1,
    /// never answers), and after a reopen.
    #[test]
    fn lookups_by_time_agree_with_the_model(batches in prop::collection::vec(arb_batch(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        let mut model = Model::new();
        for (i, (times, codec)) in batches.iter().enumerate() {
            let append_ms = 100 + i as u64 * 4;
            if times.is_empty() {
                append_native(&log, &mut model, 2, append_ms);
            } else {
                append_kafka(&log, &mut model, times, CODECS[*codec], false, append_ms);
            }
        }
        check_all(&log, &model, 0..300, "written");
        drop(log);
        let log = PartitionLog::open(dir.path(), small()).unwrap();
        check_all(&log, &model, 0..300, "reopened");
    }
}
