//! The partition log through its public API, as an embedding service uses it: a model-based
//! property test with crashes, and crash and corruption tests that cut and flip bytes in real
//! segment files.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use replog::{CorruptKind, Error, LogConfig, LogIndex, Offset, PartitionLog, Preallocate, Record};

/// Tiny segments and index intervals, so that rolls and index rebuilds happen constantly.
fn tiny() -> LogConfig {
    let mut c = LogConfig::default();
    c.segment_bytes = 700;
    c.index_interval_bytes = 100;
    c.record_bytes_max = 128;
    c.batch_bytes_max = 256;
    c.preallocate = Preallocate::Fallocate;
    c
}

/// A record as the model keeps it.
type Rec = (Option<Vec<u8>>, Vec<u8>);

fn to_record((key, value): &Rec) -> Record {
    let r = Record::new(value.clone());
    match key {
        Some(k) => r.with_key(k.clone()),
        None => r,
    }
}

/// Every record in the log from its start, in order.
fn contents(log: &PartitionLog) -> Vec<(u64, Rec)> {
    log.iter(log.start_offset())
        .map(|r| {
            let (o, rec) = r.expect("read");
            (o.get(), (rec.key.map(|k| k.to_vec()), rec.value.to_vec()))
        })
        .collect()
}

/// Frame boundaries of a segment file, parsed the way FORMAT.md describes: positions where
/// each frame starts, and the position after the last one.
fn frames(path: &Path) -> (Vec<usize>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let mut pos = 32;
    let mut starts = Vec::new();
    while pos + 8 <= bytes.len() {
        let body_len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        if body_len == 0 || pos + 8 + body_len > bytes.len() {
            break;
        }
        starts.push(pos);
        pos += 8 + body_len;
    }
    (starts, pos)
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Model-based property test
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Rec>),
    Read {
        at: usize,
        max_bytes: usize,
    },
    TruncateAfter(usize),
    PurgeTo(usize),
    Roll,
    Flush,
    Reopen,
    /// Drop without closing, then destroy the unflushed tail of the last segment from a
    /// position chosen by the number, with zeros (`false`) or garbage (`true`).
    CrashCut(usize, bool),
}

fn rec() -> impl Strategy<Value = Rec> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => proptest::collection::vec(rec(), 1..4).prop_map(Op::Append),
        2 => (any::<usize>(), 1usize..400).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => any::<usize>().prop_map(Op::TruncateAfter),
        1 => any::<usize>().prop_map(Op::PurgeTo),
        1 => Just(Op::Roll),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, g)| Op::CrashCut(n, g)),
    ]
}

/// The model: batches in order, with the log's start offset and how many batches are durable.
#[derive(Debug, Default)]
struct Model {
    /// (log index, base offset, records)
    batches: Vec<(u64, u64, Vec<Rec>)>,
    start_offset: u64,
    first_log_index: u64,
    next_log_index: u64,
    next_offset: u64,
    /// Entries below this log index are durable.
    durable: u64,
}

impl Model {
    fn records(&self) -> Vec<(u64, Rec)> {
        let mut out = Vec::new();
        for (_, base, recs) in &self.batches {
            for (i, r) in recs.iter().enumerate() {
                let o = base + i as u64;
                if o >= self.start_offset {
                    out.push((o, r.clone()));
                }
            }
        }
        out
    }

    fn keep_batches(&mut self, n: usize) {
        self.batches.truncate(n);
        match self.batches.last() {
            Some((idx, base, recs)) => {
                self.next_log_index = idx + 1;
                self.next_offset = base + recs.len() as u64;
            }
            None => {
                self.next_log_index = self.first_log_index;
                self.next_offset = self.start_offset;
            }
        }
        self.durable = self.durable.min(self.next_log_index);
    }
}

fn check(log: &PartitionLog, model: &Model) {
    assert_eq!(log.end_offset().get(), model.next_offset, "end offset");
    assert_eq!(
        log.next_log_index().get(),
        model.next_log_index,
        "next log index"
    );
    assert_eq!(log.start_offset().get(), model.start_offset, "start offset");
    assert_eq!(contents(log), model.records(), "contents");
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), tiny()).unwrap();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Append(recs) => {
                let records: Vec<Record> = recs.iter().map(to_record).collect();
                let info = log.append(&records).unwrap();
                assert_eq!(info.log_index.get(), model.next_log_index);
                assert_eq!(info.base_offset.get(), model.next_offset);
                model
                    .batches
                    .push((model.next_log_index, model.next_offset, recs.clone()));
                model.next_log_index += 1;
                model.next_offset += recs.len() as u64;
            }
            Op::Read { at, max_bytes } => {
                let span = model.next_offset - model.start_offset + 1;
                let from = model.start_offset + (at as u64 % span);
                let batches = log.read(Offset(from), max_bytes).unwrap();
                if from == model.next_offset {
                    assert!(batches.is_empty());
                } else {
                    let first = batches.first().expect("at least one batch below the end");
                    assert!(first.base_offset().get() <= from && from < first.next_offset().get());
                    for pair in batches.windows(2) {
                        assert_eq!(pair[0].next_offset(), pair[1].base_offset());
                    }
                }
                let expected = model.records();
                for b in &batches {
                    for (o, r) in b.records() {
                        let want = expected.iter().find(|(eo, _)| *eo == o.get()).unwrap();
                        assert_eq!(r.value.to_vec(), want.1.1);
                    }
                }
                // Below the start and past the end are typed errors.
                if model.start_offset > 0 {
                    assert!(matches!(
                        log.read(Offset(model.start_offset - 1), 10),
                        Err(Error::OffsetOutOfRange { .. })
                    ));
                }
                assert!(matches!(
                    log.read(Offset(model.next_offset + 1), 10),
                    Err(Error::OffsetOutOfRange { .. })
                ));
            }
            Op::TruncateAfter(n) => {
                // Keep a number of the model's batches, possibly none.
                let keep = n % (model.batches.len() + 1);
                let last_kept = keep.checked_sub(1).map(|i| LogIndex(model.batches[i].0));
                let last_kept = match last_kept {
                    None if model.first_log_index > 0 => Some(LogIndex(model.first_log_index - 1)),
                    other => other,
                };
                log.truncate_after(last_kept).unwrap();
                model.keep_batches(keep);
            }
            Op::PurgeTo(n) => {
                let span = model.next_offset - model.start_offset + 1;
                let to = model.start_offset + (n as u64 % span);
                let start = log.purge_to(Offset(to)).unwrap().get();
                assert!(start >= model.start_offset && start <= to.max(model.start_offset));
                model.start_offset = start;
                model
                    .batches
                    .retain(|(_, base, recs)| base + recs.len() as u64 > start);
                model.first_log_index = log.first_log_index().get();
            }
            Op::Roll => log.roll().unwrap(),
            Op::Flush => {
                log.flush().unwrap();
                model.durable = model.next_log_index;
            }
            Op::Reopen => {
                drop(log);
                log = PartitionLog::open(dir.path(), tiny()).unwrap();
                model.durable = model.next_log_index;
            }
            Op::CrashCut(n, garbage) => {
                log.abandon();
                crash_cut(dir.path(), model.durable, n, garbage);
                log = PartitionLog::open(dir.path(), tiny()).unwrap();
                // Everything durable survived; what survived is a prefix of the model.
                let next = log.next_log_index().get();
                assert!(
                    next >= model.durable,
                    "lost durable entries: {next} < {}",
                    model.durable
                );
                assert!(next <= model.next_log_index);
                let keep = model.batches.iter().take_while(|b| b.0 < next).count();
                model.keep_batches(keep);
                model.durable = model.next_log_index;
            }
        }
        check(&log, &model);
    }
    drop(log);
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    check(&log, &model);
}

/// Destroys the bytes of one segment of the tail (the segments after the last one with an
/// index, which may not have been synced) from a position at or after the first non-durable
/// frame.
fn crash_cut(dir: &Path, durable: u64, n: usize, garbage: bool) {
    let segs = segment_files(dir);
    let tail_from = segs[..segs.len() - 1]
        .iter()
        .rposition(|p| p.with_extension("index").exists())
        .map_or(0, |i| i + 1);
    let tail = &segs[tail_from..];
    let path = tail[n % tail.len()].clone();
    let mut bytes = std::fs::read(&path).unwrap();
    let (starts, end) = frames(&path);
    let first_unsynced = starts
        .iter()
        .copied()
        .find(|&p| u64::from_le_bytes(bytes[p + 8..p + 16].try_into().unwrap()) >= durable)
        .unwrap_or(end);
    let cut = first_unsynced + n % (end - first_unsynced + 1);
    let mut x = n as u32 | 1;
    for b in &mut bytes[cut..] {
        *b = if garbage {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        } else {
            0
        };
    }
    std::fs::write(&path, &bytes).unwrap();
}

fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(), ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

// ---------------------------------------------------------------------------------------------
// Crash and corruption matrix on real files
// ---------------------------------------------------------------------------------------------

/// A log of `n` single-record batches in one segment, closed without an index (as a crash
/// leaves it), and what each record holds.
fn crashed_log(dir: &Path, n: u64) -> Vec<(u64, Rec)> {
    let log = reopen(dir).unwrap();
    let mut expected = Vec::new();
    for i in 0..n {
        let r: Rec = (
            Some(format!("k{i}").into_bytes()),
            format!("value number {i}").into_bytes(),
        );
        log.append(&[to_record(&r).with_header("h", "v")]).unwrap();
        expected.push((i, r));
    }
    log.flush().unwrap();
    log.abandon();
    expected
}

fn reopen(dir: &Path) -> replog::Result<PartitionLog> {
    let mut cfg = LogConfig::default();
    cfg.segment_bytes = 64 << 10;
    cfg.record_bytes_max = 4 << 10;
    cfg.batch_bytes_max = 16 << 10;
    cfg.preallocate = Preallocate::Fallocate;
    PartitionLog::open(dir, cfg)
}

#[test]
fn cut_at_every_byte_of_the_last_frames_recovers_the_longest_valid_prefix() {
    let src = tempfile::tempdir().unwrap();
    let expected = crashed_log(src.path(), 6);
    let seg = segment_files(src.path()).pop().unwrap();
    let (starts, end) = frames(&seg);
    let from = starts[starts.len() - 2];
    for cut in from..=end {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let path = dir.path().join(seg.file_name().unwrap());
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(cut as u64).unwrap();
        drop(f);
        let log = reopen(dir.path()).unwrap();
        // Frames that end at or before the cut survive whole.
        let whole = starts
            .iter()
            .filter(|&&s| next_start(&starts, s, end) <= cut)
            .count();
        assert_eq!(contents(&log), expected[..whole].to_vec(), "cut at {cut}");
        assert_eq!(
            log.recovery().position,
            starts.get(whole).copied().unwrap_or(end) as u64
        );
        // The log is usable after recovery, and the new record is read back after reopening.
        log.append(&[Record::new("after")]).unwrap();
        drop(log);
        let log = reopen(dir.path()).unwrap();
        assert_eq!(contents(&log).len(), whole + 1, "cut at {cut}");
    }
}

/// The position after the frame starting at `s`.
fn next_start(starts: &[usize], s: usize, end: usize) -> usize {
    starts.iter().copied().find(|&p| p > s).unwrap_or(end)
}

#[test]
fn every_bit_flip_in_the_last_frame_header_drops_only_that_frame() {
    let src = tempfile::tempdir().unwrap();
    let expected = crashed_log(src.path(), 4);
    let seg = segment_files(src.path()).pop().unwrap();
    let (starts, _) = frames(&seg);
    let last = *starts.last().unwrap();
    let original = std::fs::read(&seg).unwrap();
    for byte in last..last + 48 {
        for bit in 0..8 {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(src.path(), dir.path());
            let mut bytes = original.clone();
            bytes[byte] ^= 1 << bit;
            std::fs::write(dir.path().join(seg.file_name().unwrap()), &bytes).unwrap();
            let log = reopen(dir.path()).unwrap();
            assert_eq!(contents(&log), expected[..3].to_vec(), "flip {byte}:{bit}");
            assert_eq!(log.recovery().position, last as u64);
            assert!(log.recovery().reason.is_some(), "flip {byte}:{bit}");
        }
    }
}

#[test]
fn sampled_payload_bit_flips_are_caught_by_the_crc() {
    let src = tempfile::tempdir().unwrap();
    let expected = crashed_log(src.path(), 4);
    let seg = segment_files(src.path()).pop().unwrap();
    let (starts, end) = frames(&seg);
    let last = *starts.last().unwrap();
    let original = std::fs::read(&seg).unwrap();
    for byte in (last + 48..end).step_by(3) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(src.path(), dir.path());
        let mut bytes = original.clone();
        bytes[byte] ^= 1 << (byte % 8);
        std::fs::write(dir.path().join(seg.file_name().unwrap()), &bytes).unwrap();
        let log = reopen(dir.path()).unwrap();
        assert_eq!(contents(&log), expected[..3].to_vec());
        assert!(matches!(
            log.recovery().reason,
            Some(CorruptKind::ChecksumMismatch { .. })
        ));
    }
}

#[test]
fn zeroed_last_page_and_garbage_after_the_end() {
    let src = tempfile::tempdir().unwrap();
    let expected = crashed_log(src.path(), 200);
    let seg = segment_files(src.path()).pop().unwrap();
    let name = seg.file_name().unwrap().to_owned();
    let (starts, end) = frames(&seg);
    let original = std::fs::read(&seg).unwrap();

    // Zero the last 4 KiB page of data.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(src.path(), dir.path());
    let page_start = (end - 1) / 4096 * 4096;
    let mut bytes = original.clone();
    bytes[page_start..end].fill(0);
    std::fs::write(dir.path().join(&name), &bytes).unwrap();
    let log = reopen(dir.path()).unwrap();
    let whole = starts
        .iter()
        .filter(|&&s| next_start(&starts, s, end) <= page_start)
        .count();
    assert_eq!(contents(&log), expected[..whole].to_vec());
    drop(log);

    // Garbage after the end of the data: ignored, then wiped, so it can never come back.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(src.path(), dir.path());
    let mut bytes = original.clone();
    for (i, b) in bytes[end + 8..end + 2000].iter_mut().enumerate() {
        *b = (i * 131 + 7) as u8;
    }
    std::fs::write(dir.path().join(&name), &bytes).unwrap();
    let log = reopen(dir.path()).unwrap();
    assert_eq!(contents(&log), expected);
    drop(log);
    let after = std::fs::read(dir.path().join(&name)).unwrap();
    let (_, new_end) = frames(&dir.path().join(&name));
    assert!(
        after[new_end..].iter().all(|&b| b == 0),
        "the stale tail was wiped"
    );
}

#[test]
fn stale_frame_after_a_torn_one_never_resurrects() {
    // Frames N and N+1 written, N torn, N+1 intact (write-back out of order). Recovery cuts at
    // N. A new frame N' of the same length must not make the old N+1 visible again.
    let src = tempfile::tempdir().unwrap();
    let expected = crashed_log(src.path(), 5);
    let seg = segment_files(src.path()).pop().unwrap();
    let (starts, _) = frames(&seg);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[starts[3] + 20] ^= 0xFF;
    std::fs::write(&seg, &bytes).unwrap();
    let log = reopen(src.path()).unwrap();
    assert_eq!(contents(&log), expected[..3].to_vec());
    let r: Rec = (Some(b"k3".to_vec()), b"value number 3".to_vec());
    log.append(&[to_record(&r).with_header("h", "v")]).unwrap();
    log.flush().unwrap();
    log.abandon();
    let log = reopen(src.path()).unwrap();
    assert_eq!(contents(&log).len(), 4, "old frame 4 stays gone");
}

#[test]
fn damage_in_a_sealed_segment_is_reported_never_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    for i in 0..40u32 {
        log.append(&[Record::new(format!("value-{i}"))]).unwrap();
    }
    drop(log);
    let segs = segment_files(dir.path());
    assert!(segs.len() >= 3);
    let sealed = &segs[1];
    let (starts, _) = frames(sealed);
    let victim = starts[1];
    let mut bytes = std::fs::read(sealed).unwrap();
    bytes[victim + 30] ^= 0x01;
    std::fs::write(sealed, &bytes).unwrap();

    // With its index, the sealed segment opens without a scan, and the damage is found on read.
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    let all = log.iter(Offset(0)).collect::<Vec<_>>();
    let err = all
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("a read error");
    match err {
        Error::Corrupt {
            file,
            position,
            kind: CorruptKind::ChecksumMismatch { .. },
        } => {
            assert_eq!(file, sealed);
            assert_eq!(*position, victim as u64);
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    drop(log);

    // Without it, open scans the segment and refuses to truncate sealed data.
    std::fs::remove_file(sealed.with_extension("index")).unwrap();
    match PartitionLog::open(dir.path(), tiny()) {
        Err(Error::Corrupt {
            file,
            position,
            kind: CorruptKind::ChecksumMismatch { .. },
        }) => {
            assert_eq!(file, *sealed);
            assert_eq!(position, victim as u64);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn bad_or_missing_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    for i in 0..60u32 {
        log.append(&[Record::new(format!("value-{i}"))]).unwrap();
    }
    let expected = contents(&log);
    drop(log);
    let indexes: Vec<PathBuf> = segment_files(dir.path())
        .iter()
        .map(|p| p.with_extension("index"))
        .filter(|p| p.exists())
        .collect();
    assert!(indexes.len() >= 3);
    std::fs::remove_file(&indexes[0]).unwrap();
    std::fs::write(&indexes[1], b"garbage").unwrap();
    let mut bytes = std::fs::read(&indexes[2]).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x40;
    std::fs::write(&indexes[2], bytes).unwrap();
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    assert_eq!(contents(&log), expected);
    drop(log);
    assert!(
        indexes.iter().all(|p| p.exists()),
        "rebuilt indexes were written back"
    );
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    assert_eq!(contents(&log), expected);
}

#[test]
fn hostile_files_never_panic() {
    // A segment file of every small length and a few patterns: open returns Ok or a typed error.
    for len in [0usize, 1, 31, 32, 33, 100, 4096] {
        for pattern in [0x00u8, 0xFF, 0x5A] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("00000000000000000000.log"),
                vec![pattern; len],
            )
            .unwrap();
            match PartitionLog::open(dir.path(), tiny()) {
                Ok(log) => drop(log),
                Err(Error::Corrupt { .. }) => {}
                Err(e) => panic!("len {len} pattern {pattern:#x}: {e}"),
            }
        }
    }
    // A valid header followed by a 4 GiB length prefix.
    let dir = tempfile::tempdir().unwrap();
    drop(PartitionLog::open(dir.path(), tiny()).unwrap());
    let path = segment_files(dir.path()).pop().unwrap();
    std::fs::remove_file(path.with_extension("index")).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    assert_eq!(log.end_offset(), Offset(0));
    // The on-disk limit is the format's (any u32 length), so this is a frame that runs past
    // the end of the file.
    assert!(
        matches!(log.recovery().reason, Some(CorruptKind::Truncated)),
        "{:?}",
        log.recovery()
    );
}

#[test]
fn replog_check_reports_clean_and_damaged_directories() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    for i in 0..30u32 {
        log.append(&[Record::new(format!("value-{i}"))]).unwrap();
    }
    drop(log);
    let run = |dir: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_replog"))
            .args([
                "check",
                "--record-bytes-max",
                "128",
                "--batch-bytes-max",
                "256",
            ])
            .arg(dir)
            .output()
            .unwrap()
    };
    let out = run(dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().count(), segment_files(dir.path()).len());
    assert!(text.lines().all(|l| l.contains("clean end")), "{text}");

    let sealed = &segment_files(dir.path())[0];
    let mut bytes = std::fs::read(sealed).unwrap();
    bytes[40] ^= 0x08;
    std::fs::write(sealed, bytes).unwrap();
    let out = run(dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("checksum mismatch"), "{text}");
}

/// `replog check` reads segment files as recovery does, with the format's limits: records and
/// batches larger than its `--record-bytes-max`/`--batch-bytes-max` (or than the limits the
/// log is opened with later) are valid data, not invalid frames.
#[test]
fn replog_check_calls_frames_above_its_limit_flags_valid_as_recovery_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = tiny();
    big.segment_bytes = 4096;
    big.record_bytes_max = 1024;
    big.batch_bytes_max = 2048;
    let log = PartitionLog::open(dir.path(), big).unwrap();
    for i in 0..20u32 {
        log.append(&[Record::new(vec![b'a' + (i % 26) as u8; 600])])
            .unwrap();
    }
    drop(log);
    let segments = segment_files(dir.path()).len();
    assert!(segments >= 3, "some segments are sealed");
    // Recovery, with limits lower than the frames: every record is still there.
    let log = PartitionLog::open(dir.path(), tiny()).unwrap();
    assert_eq!(contents(&log).len(), 20);
    drop(log);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_replog"))
        .args([
            "check",
            "--record-bytes-max",
            "128",
            "--batch-bytes-max",
            "256",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().count(), segments, "{text}");
    assert!(text.lines().all(|l| l.contains("clean end")), "{text}");
    let records: u64 = text
        .lines()
        .filter_map(|l| {
            l.split(" records")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(records, 20, "{text}");
}

#[cfg(feature = "failpoints")]
#[test]
fn a_torn_segment_before_the_active_one_ends_the_log_there() {
    use replog::{Env, FaultInjector, FaultPoint};
    // The segment sealed by the last roll is synced in the background; here its index never
    // gets written (as if the process died first), then its last frame is torn.
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultInjector::new();
    faults.fail_always(FaultPoint::WriteIndex, std::io::ErrorKind::Other);
    let env = Env::default().with_disk_faults(faults.clone());
    let cfg = tiny();
    let log = PartitionLog::open_in(dir.path(), cfg.clone(), &env).unwrap();
    log.append(&[Record::new("durable")]).unwrap();
    log.flush().unwrap();
    let segments_before = log.segment_count();
    let mut n = 1;
    while log.segment_count() < segments_before + 2 {
        log.append(&[Record::new(format!("value-{n}"))]).unwrap();
        n += 1;
    }
    log.abandon();
    let segs = segment_files(dir.path());
    let torn = &segs[segs.len() - 2];
    let (starts, _) = frames(torn);
    let last_frame = *starts.last().unwrap();
    let mut bytes = std::fs::read(torn).unwrap();
    bytes[last_frame + 70] ^= 0xFF;
    std::fs::write(torn, bytes).unwrap();

    faults.clear();
    let log = PartitionLog::open_in(dir.path(), cfg, &env).unwrap();
    assert_eq!(
        segment_files(dir.path()).len(),
        segs.len() - 1,
        "the newer segment is dropped"
    );
    assert_eq!(log.recovery().file, *torn);
    assert_eq!(log.recovery().position, last_frame as u64);
    let got = contents(&log);
    assert_eq!(got[0].1.1, b"durable");
    assert_eq!(got.len() as u64, log.end_offset().get());
    log.append(&[Record::new("after")]).unwrap();
    drop(log);
}
