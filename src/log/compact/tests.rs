//! Unit tests of `log/compact.rs`: compaction of real segment files against a model (each
//! key's latest record, tombstones and their age), in both payload formats and every Kafka
//! codec; a replica fed the compacted entries; a run cut at each of its steps.

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use proptest::prelude::*;

use super::super::test_util::{KafkaFields, kafka_records};
use super::*;
use crate::config::LogConfig;
use crate::log::EntrySpec;
use crate::segment::kafka::CODECS;
use crate::segment::record::{Record, encode_records};
use crate::types::Offset;

/// One record written: its key (`None` for none), its value (`None` for a Kafka tombstone).
type Rec = (Option<u8>, Option<u8>);

/// A record as read back: offset, key, value (`None` for a tombstone read natively as empty
/// is not told apart: the model compares values as bytes).
type Read = (u64, Option<Vec<u8>>, Vec<u8>);

/// A record's key and value, either null.
type Fields = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A record written, for the model: offset, key, value, whether it is a tombstone, and the
/// time its batch was appended.
type Written = (u64, Option<Vec<u8>>, Vec<u8>, bool, u64);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 128,
        record_bytes_max: 256,
        batch_bytes_max: 1024,
        preallocate: crate::Preallocate::Fallocate,
        ..LogConfig::default()
    }
}

fn key_bytes(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

fn value_bytes(offset_hint: u64, v: u8) -> Vec<u8> {
    format!("value-{v}-{offset_hint}").into_bytes()
}

/// Appends one batch of `recs` at `time_ms`, in replog's format (tombstones written as empty
/// values: replog's records have no null) or as a Kafka batch with `codec`; returns what each
/// record is, with its offset, for the model: (offset, key, value, tombstone, time).
fn append(
    log: &PartitionLog,
    recs: &[Rec],
    kafka: Option<Compression>,
    time_ms: u64,
) -> Vec<Written> {
    append_with(log, recs, kafka, time_ms, EntrySpec::default())
}

/// [`append`] with a term and a producer from `spec`.
fn append_with(
    log: &PartitionLog,
    recs: &[Rec],
    kafka: Option<Compression>,
    time_ms: u64,
    spec: EntrySpec,
) -> Vec<Written> {
    let base = log.end_offset().get();
    let fields: Vec<Fields> = recs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let value = match (kafka, v) {
                (Some(_), None) => None,
                (_, v) => Some(value_bytes(base + i as u64, v.unwrap_or(0))),
            };
            (k.map(key_bytes), value)
        })
        .collect();
    let count = u32::try_from(recs.len()).unwrap();
    let (format, payload) = match kafka {
        Some(codec) => {
            let records: Vec<KafkaFields> = (1_000..)
                .zip(&fields)
                .map(|(t, (k, v))| (t, k.clone(), v.clone()))
                .collect();
            (PayloadFormat::Kafka, kafka_records(&records, codec, false))
        }
        None => {
            let records: Vec<Record> = fields
                .iter()
                .map(|(k, v)| Record {
                    key: k.clone().map(Bytes::from),
                    value: Bytes::from(v.clone().unwrap_or_default()),
                    headers: Vec::new(),
                })
                .collect();
            (
                PayloadFormat::Replog,
                encode_records(&records, 256).unwrap().0,
            )
        }
    };
    let spec = EntrySpec {
        format,
        timestamp_ms: Some(time_ms),
        ..spec
    };
    let info = log.append_entry(spec, count, &payload).unwrap();
    assert_eq!(info.base_offset.get(), base);
    fields
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            (
                base + i as u64,
                k,
                v.clone().unwrap_or_default(),
                v.is_none(),
                time_ms,
            )
        })
        .collect()
}

fn read_all(log: &PartitionLog) -> Vec<Read> {
    log.iter(Offset(0))
        .map(|r| {
            let (o, rec) = r.unwrap();
            (o.get(), rec.key.map(|k| k.to_vec()), rec.value.to_vec())
        })
        .collect()
}

fn policy(upto: u64, now_ms: u64, delete_retention_ms: u64) -> CompactionPolicy {
    CompactionPolicy {
        upto_log_index: upto,
        now_ms,
        min_lag_ms: 0,
        max_lag_ms: u64::MAX,
        delete_retention_ms,
        min_dirty_ratio: 0.0,
        bytes_per_second: 0,
        empty_values_are_tombstones: false,
    }
}

/// What a compacted log must read as: below `boundary` (the active segment's base offset,
/// which compaction leaves whole), each key's latest record there unless it is a tombstone
/// older than `delete_retention_ms`, and every record without a key; from `boundary` on,
/// everything.
fn expected(
    written: &[Written],
    boundary: u64,
    now_ms: u64,
    delete_retention_ms: u64,
) -> Vec<Read> {
    let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
    for (o, k, ..) in written.iter().filter(|w| w.0 < boundary) {
        if let Some(k) = k {
            latest.insert(k.clone(), *o);
        }
    }
    written
        .iter()
        .filter(|(o, k, _, tombstone, time)| {
            *o >= boundary
                || match k {
                    None => true,
                    Some(k) => {
                        latest.get(k) == Some(o)
                            && !(*tombstone && time + delete_retention_ms <= now_ms)
                    }
                }
        })
        .map(|(o, k, v, ..)| (*o, k.clone(), v.clone()))
        .collect()
}

/// The base offset of the active segment: compaction's range ends there.
fn boundary(log: &PartitionLog) -> u64 {
    log.segments.read().last().unwrap().base_offset
}

/// Every Kafka batch a Kafka fetch would serve decodes with a Kafka client's decoder, its
/// records at the offsets the log reads.
fn kafka_decodes(log: &PartitionLog) {
    for b in log.read(Offset(0), usize::MAX).unwrap() {
        let mut out = bytes::BytesMut::new();
        if b.format() == PayloadFormat::Kafka && !b.payload.is_empty() {
            crate::segment::kafka::encode::serve(&b.payload, b.base_offset().get(), 0, &mut out);
        } else {
            crate::segment::kafka::encode::encode_native(&b, &mut out);
        }
        if out.is_empty() {
            continue;
        }
        let mut bytes = out.freeze();
        let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
        let offsets: Vec<u64> = sets
            .iter()
            .flat_map(|s| s.records.iter().map(|r| u64::try_from(r.offset).unwrap()))
            .collect();
        let read: Vec<u64> = b.records().map(|(o, _)| o.get()).collect();
        assert_eq!(offsets, read, "a Kafka client reads what the log reads");
    }
}

#[derive(Clone, Debug)]
struct Batch_ {
    recs: Vec<Rec>,
    /// `None`: replog's format; else the Kafka codec's index in [`CODECS`].
    kafka: Option<usize>,
    /// Milliseconds after the log's start of time.
    age: u64,
    /// The batch starts a new term.
    new_term: bool,
    /// The idempotent producer (1 or 2) that writes it, if one does.
    producer: Option<u64>,
}

/// What Raft and the offsets see of an entry: log index, term, base offset, offsets spanned.
type EntryMeta = (u64, u64, u64, u32);

fn entry_meta(log: &PartitionLog, from: u64, to: u64) -> Vec<EntryMeta> {
    log.read_entries(from, to, usize::MAX)
        .unwrap()
        .iter()
        .map(|b| {
            let m = (b.log_index().get(), b.term().get(), b.base_offset().get());
            (m.0, m.1, m.2, b.record_count())
        })
        .collect()
}

/// Writes `entries` (read from another replica's log) to `log` as a follower does.
fn replicate(log: &PartitionLog, entries: &[crate::segment::batch::Batch]) {
    for b in entries {
        let spec = EntrySpec {
            log_index: Some(b.log_index().get()),
            term: Some(b.term().get()),
            format: b.format(),
            timestamp_ms: Some(b.timestamp_ms()),
            compacted: b.is_compacted(),
            producer_id: b.producer().map_or(0, |p| p.0),
            base_sequence: b.producer().map_or(0, |p| p.1),
            ..EntrySpec::default()
        };
        log.append_entry(spec, b.record_count(), &b.payload)
            .unwrap();
    }
}

fn batch_strategy() -> impl Strategy<Value = Batch_> {
    (
        prop::collection::vec(
            (
                prop::option::weighted(0.9, 0u8..6),
                prop::option::weighted(0.85, any::<u8>()),
            ),
            1..6,
        ),
        prop::option::of(0usize..CODECS.len()),
        0u64..1_000,
        prop::bool::weighted(0.1),
        prop::option::weighted(0.2, 1u64..3),
    )
        .prop_map(|(recs, kafka, age, new_term, producer)| Batch_ {
            recs,
            kafka,
            age,
            new_term,
            producer,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A compacted log reads as the model says, reads the same after a reopen and after a
    /// second run (which rewrites nothing), serves Kafka batches a Kafka client decodes, and
    /// hands Raft the same entries (log index, term, offsets) as before, runs of emptied ones
    /// merged into gap frames included; a replica written from its entries reads the same,
    /// and so does one that held the log before compaction up to any entry and catches up.
    #[test]
    fn compaction_keeps_each_keys_latest_record(
        batches in prop::collection::vec(batch_strategy(), 1..60),
        delete_retention_ms in prop::option::of(0u64..1_000),
        caught_up_to in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let now = 10_000u64;
        let delete_retention_ms = delete_retention_ms.unwrap_or(u64::MAX / 2);
        let mut written = Vec::new();
        let log = PartitionLog::open(dir.path(), config()).unwrap();
        let mut term = 1;
        let mut sequences = [0u32; 3];
        for b in &batches {
            let kafka = b.kafka.map(|i| CODECS[i]);
            term += u64::from(b.new_term);
            let mut spec = EntrySpec { term: Some(term), ..EntrySpec::default() };
            if let Some(p) = b.producer {
                spec.producer_id = p;
                spec.base_sequence = sequences[p as usize];
                sequences[p as usize] += b.recs.len() as u32;
            }
            written.extend(append_with(&log, &b.recs, kafka, now - 1_000 + b.age, spec));
        }
        let entries_before = log.next_log_index().get();
        let meta_before = entry_meta(&log, 0, entries_before);
        // The entries before compaction, copied out of the segments compaction replaces.
        let original: Vec<_> = log
            .read_entries(0, entries_before, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|mut b| {
                b.payload = Bytes::copy_from_slice(&b.payload);
                b
            })
            .collect();
        let end = log.end_offset();
        let upto = entries_before - 1;
        let stats = log.compact(&policy(upto, now, delete_retention_ms)).unwrap();
        prop_assert_eq!(entry_meta(&log, 0, entries_before), meta_before.clone());
        // Each producer's last batch keeps its producer and sequence.
        for p in 1..3u64 {
            let last = |entries: &[crate::segment::batch::Batch]| {
                entries.iter().rev().find_map(|b| b.producer().filter(|q| q.0 == p))
            };
            let after = log.read_entries(0, entries_before, usize::MAX).unwrap();
            prop_assert_eq!(last(&after), last(&original));
        }
        let want = expected(&written, boundary(&log), now, delete_retention_ms);
        prop_assert_eq!(read_all(&log), want.clone());
        prop_assert_eq!(log.end_offset(), end);
        prop_assert_eq!(log.next_log_index().get(), entries_before);
        let removed = written.len() as u64 - want.len() as u64;
        prop_assert_eq!(stats.records_removed, removed);
        kafka_decodes(&log);

        // Again: nothing left to do.
        let again = log.compact(&policy(upto, now, delete_retention_ms)).unwrap();
        prop_assert_eq!(again.segments, 0);
        prop_assert_eq!(again.records_removed, 0);

        // A replica written from the compacted entries, as a follower is.
        let replica_dir = tempfile::tempdir().unwrap();
        let replica = PartitionLog::open(replica_dir.path(), config()).unwrap();
        replicate(&replica, &log.read_entries(0, entries_before, usize::MAX).unwrap());
        prop_assert_eq!(read_all(&replica), want.clone());
        prop_assert_eq!(entry_meta(&replica, 0, entries_before), meta_before.clone());

        // One that held the log up to some entry before compaction, and catches up over the
        // compacted rest (a follower that was down): the same entries at the same offsets,
        // and every record the leader keeps.
        let k = caught_up_to.index(original.len() + 1) as u64;
        let behind_dir = tempfile::tempdir().unwrap();
        let behind = PartitionLog::open(behind_dir.path(), config()).unwrap();
        replicate(&behind, &original[..k as usize]);
        replicate(&behind, &log.read_entries(k, entries_before, usize::MAX).unwrap());
        prop_assert_eq!(entry_meta(&behind, 0, entries_before), meta_before);
        prop_assert_eq!(behind.end_offset(), end);
        let behind_reads = read_all(&behind);
        prop_assert!(want.iter().all(|r| behind_reads.contains(r)));

        drop(log);
        let log = PartitionLog::open(dir.path(), config()).unwrap();
        prop_assert_eq!(read_all(&log), want);
        prop_assert_eq!(log.end_offset(), end);
    }
}

/// A run cut after any of its steps (as a crash would) leaves a log that opens with no
/// temporary file and reads as the log before the run less some of the records the run
/// removes (the segments it finished), never one the compacted log keeps; the next run
/// finishes the job. The run merges segments, so the cut after its first rename leaves the
/// merged file beside the segments it replaces, which the open reads past.
#[test]
fn a_run_cut_at_any_step_loses_nothing() {
    for step in [
        CompactionStep::Written,
        CompactionStep::IndexRemoved,
        CompactionStep::Renamed,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let now = 10_000;
        let mut written = Vec::new();
        let (before, want) = {
            let log = PartitionLog::open(dir.path(), config()).unwrap();
            for i in 0..40u8 {
                let codec = (i % 3 == 0).then_some(Compression::Gzip);
                written.extend(append(
                    &log,
                    &[(Some(i % 4), Some(i)), (Some(i % 5), Some(i))],
                    codec,
                    now,
                ));
            }
            let before = read_all(&log);
            let want = expected(&written, boundary(&log), now, u64::MAX / 2);
            let upto = log.next_log_index().get() - 1;
            let _ = log.compact_until(&policy(upto, now, u64::MAX / 2), Some(step));
            log.abandon();
            (before, want)
        };
        let files = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .ends_with(".log")
                })
                .count()
        };
        let at_cut = files();
        let log = PartitionLog::open(dir.path(), config()).unwrap();
        let got = read_all(&log);
        assert!(got.iter().all(|r| before.contains(r)), "{step:?}: {got:?}");
        assert!(want.iter().all(|r| got.contains(r)), "{step:?}: {got:?}");
        let leftovers: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{step:?}: {leftovers:?}");
        let upto = log.next_log_index().get() - 1;
        log.compact(&policy(upto, now, u64::MAX / 2)).unwrap();
        assert_eq!(read_all(&log), want, "{step:?}");
        let sizes: Vec<usize> = log.segments.read().iter().map(|s| s.data_len()).collect();
        assert!(
            files() < at_cut,
            "{step:?}: the run merges segments: {at_cut} {sizes:?}"
        );
    }
}

/// `min.compaction.lag.ms` keeps recent segments whole, the dirty ratio holds a run back, and
/// nothing past the committed log index is compacted.
#[test]
fn lags_ratio_and_the_commit_point_hold_compaction_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    let now = 100_000;
    for i in 0..60u8 {
        append(&log, &[(Some(i % 2), Some(i))], None, now - 1_000);
    }
    let upto = log.next_log_index().get() - 1;
    let mut p = policy(upto, now, 0);
    p.min_lag_ms = 5_000;
    assert_eq!(log.compact(&p).unwrap(), CompactionStats::default());
    p.min_lag_ms = 0;
    p.upto_log_index = 0;
    assert_eq!(
        log.compact(&p).unwrap().segments,
        0,
        "nothing committed yet"
    );
    p.upto_log_index = upto;
    p.min_dirty_ratio = 1.5;
    assert_eq!(log.compact(&p).unwrap().segments, 0, "ratio never reached");
    p.max_lag_ms = 500;
    assert!(log.compact(&p).unwrap().segments > 0, "overdue segments go");
}

/// A log of one-record batches over a few keys (a group's committed offsets) compacts to a
/// small fraction of its size and a few segments: the runs of emptied entries become gap
/// frames of a few bytes, not a 64-byte frame header each, and the segments merge; the
/// entries Raft reads are the same.
#[test]
fn runs_of_emptied_batches_shrink_to_gap_frames() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), config()).unwrap();
    let now = 10_000;
    for i in 0..3_000u32 {
        append(&log, &[(Some((i % 3) as u8), Some(i as u8))], None, now);
    }
    let size = |log: &PartitionLog| -> usize {
        let segs = log.segments.read();
        segs[..segs.len() - 1].iter().map(|s| s.data_len()).sum()
    };
    let next = log.next_log_index().get();
    let meta = entry_meta(&log, 0, next);
    let before = size(&log);
    log.compact(&policy(next - 1, now, u64::MAX / 2)).unwrap();
    let after = size(&log);
    assert!(after * 15 < before, "{after} bytes of {before} left");
    // And the segments they were in merge: a compacted log keeps about one segment per
    // segment size of what it holds.
    let segments = log.segments.read().len();
    assert!(segments <= 3, "{segments} segments left");
    assert_eq!(entry_meta(&log, 0, next), meta);
    // Read in small pieces, the entries still come one by one and in order.
    let mut from = 0;
    let mut seen = Vec::new();
    for _ in 0..next {
        if from == next {
            break;
        }
        let got = log.read_entries(from, next, 1_000).unwrap();
        from = got.last().unwrap().log_index().get() + 1;
        seen.extend(got.iter().map(|b| b.log_index().get()));
    }
    assert_eq!(seen, (0..next).collect::<Vec<_>>());
}

/// With `empty_values_are_tombstones` (the offsets topic's deletions), a record of replog's
/// with an empty value deletes its key: it goes once it is older than `delete.retention.ms`,
/// and the records it superseded go at once; without it, it is a value like any other.
#[test]
fn empty_values_delete_their_keys_where_the_policy_says_so() {
    let now = 100_000;
    for flag in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(dir.path(), config()).unwrap();
        let record = |k: &str, v: &str| Record {
            key: Some(Bytes::from(k.to_string())),
            value: Bytes::from(v.to_string()),
            headers: Vec::new(),
        };
        let write = |recs: &[Record], time: u64| {
            let (payload, _) = encode_records(recs, 256).unwrap();
            let spec = EntrySpec {
                timestamp_ms: Some(time),
                ..EntrySpec::default()
            };
            log.append_entry(spec, recs.len() as u32, &payload).unwrap();
        };
        write(&[record("old", "1"), record("recent", "1")], now - 10_000);
        write(&[record("old", "")], now - 5_000);
        write(&[record("recent", "")], now - 100);
        write(&[record("kept", "1")], now - 100);
        log.roll().unwrap();
        let mut p = policy(log.next_log_index().get() - 1, now, 1_000);
        p.empty_values_are_tombstones = flag;
        log.compact(&p).unwrap();
        let keys: Vec<(String, String)> = read_all(&log)
            .into_iter()
            .map(|(_, k, v)| {
                (
                    String::from_utf8(k.unwrap()).unwrap(),
                    String::from_utf8(v).unwrap(),
                )
            })
            .collect();
        let want: Vec<(&str, &str)> = if flag {
            vec![("recent", ""), ("kept", "1")]
        } else {
            vec![("old", ""), ("recent", ""), ("kept", "1")]
        };
        let want: Vec<(String, String)> = want
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(keys, want, "empty values are tombstones: {flag}");
    }
}
