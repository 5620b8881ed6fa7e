//! Append, read and reopen throughput of the partition log, with a memcpy+CRC baseline measured
//! in the same run so that every figure can be stated as a ratio.
//!
//! Run: `cargo bench --bench append`; then `python3 benches/report.py` prints the ratios.
//! `baseline/commitlog/1KiB/batch100` is another Rust commit log (`commitlog` 0.2) taking the
//! same batches, an anchor for `append/1KiB/batch100/nosync`. Sustained appends far past one
//! segment (1 GiB or more per case, default configuration against each preallocation mode and
//! `commitlog`) are `cargo run --release --example append_sustained`, which prints records/s
//! and their ratios from one run: a criterion sample of that size would take minutes.
//! Disk use stays bounded: old segments are purged between samples (outside the timing).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use replog::{LogConfig, Offset, PartitionLog, Preallocate, Record};
use support::{group, timed_local_appends};

mod support;

const SIZES: [(usize, &str); 2] = [(100, "100B"), (1024, "1KiB")];

fn records(value_len: usize, n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record::new(vec![(i % 251) as u8; value_len]))
        .collect()
}

fn open(dir: &std::path::Path, config: LogConfig) -> PartitionLog {
    PartitionLog::open(dir, config).expect("open log")
}

/// A log in its steady state under retention: it keeps 64 MiB (one 64 MiB segment besides
/// the active one), and rolls reuse the files retention deleted, whose pages are still cached.
fn steady() -> LogConfig {
    let mut config = LogConfig::default();
    config.retention_bytes = Some(64 << 20);
    config
}

/// A log that only grows, every segment a new file (`recycle_segments` 0).
fn growing(preallocate: Preallocate) -> LogConfig {
    let mut config = LogConfig::default();
    config.recycle_segments = 0;
    config.preallocate = preallocate;
    config
}

fn append(c: &mut Criterion) {
    let mut g = group(c, "append", 20, 4);
    let mut case = |name: String, config: LogConfig, batch: &[Record], sync: bool| {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), config);
        g.throughput(Throughput::Elements(batch.len() as u64));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| timed_local_appends(&log, batch, iters, sync));
        });
    };
    for (value_len, label) in SIZES {
        for (per_call, sync) in [(1usize, false), (100, false), (100, true)] {
            let name = format!(
                "{label}/batch{per_call}/{}",
                if sync { "sync" } else { "nosync" }
            );
            case(
                name,
                LogConfig::default(),
                &records(value_len, per_call),
                sync,
            );
        }
        let name = format!("{label}/batch100/nosync_steady");
        case(name, steady(), &records(value_len, 100), false);
    }
    // The synced load under retention, on recycled files, and on a log that only grows, with
    // segments preallocated by fallocate(2) (whose unwritten extents make the first sync of
    // each block convert it) or by writing zeros.
    for (config, name) in [
        (steady(), "sync_steady"),
        (growing(Preallocate::Fallocate), "sync_growing_fallocate"),
        (growing(Preallocate::Zeros), "sync_growing_zeros"),
    ] {
        case(
            format!("100B/batch100/{name}"),
            config,
            &records(100, 100),
            true,
        );
    }
    g.finish();
}

/// The baseline: copy the same value bytes into a memory-mapped file and CRC them, batch by
/// batch, wrapping around a 64 MiB preallocated file (so its pages are warm: a generous
/// baseline).
fn baseline(c: &mut Criterion) {
    let mut g = group(c, "baseline", 20, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("baseline"))
        .expect("create");
    let len = 64usize << 20;
    file.set_len(len as u64).expect("set_len");
    #[expect(
        unsafe_code,
        reason = "the baseline writes through a memory map, as the log does"
    )]
    // SAFETY: the file was created above in a private temporary directory, nothing else maps or
    // truncates it, and it outlives the map (both are dropped at the end of this function).
    let map = unsafe { memmap2::MmapMut::map_mut(&file) };
    let mut map = map.expect("map");
    for (value_len, label) in SIZES {
        let batch = records(value_len, 100);
        g.throughput(Throughput::Elements(100));
        g.bench_function(
            BenchmarkId::new("memcpy_crc", format!("{label}/batch100")),
            |b| {
                let mut pos = 0usize;
                b.iter(|| {
                    let mut crc = crc32fast::Hasher::new();
                    for r in &batch {
                        if pos + r.value.len() > len {
                            pos = 0;
                        }
                        let dst = &mut map[pos..pos + r.value.len()];
                        dst.copy_from_slice(&r.value);
                        crc.update(dst);
                        pos += r.value.len();
                    }
                    black_box(crc.finalize())
                });
            },
        );
    }
    // The same copy into fresh file pages: a new 64 MiB file (fallocated, as the log's
    // segments are) each time one fills up, so every page is touched for the first time, as
    // in a log that writes new data. File creation is part of the cost, as a roll is for the log.
    for (value_len, label) in SIZES {
        let batch = records(value_len, 100);
        g.throughput(Throughput::Elements(100));
        let mut cold = ColdFile::new(dir.path());
        g.bench_function(
            BenchmarkId::new("memcpy_crc_cold", format!("{label}/batch100")),
            |b| {
                b.iter(|| {
                    let mut crc = crc32fast::Hasher::new();
                    for r in &batch {
                        let dst = cold.next(r.value.len());
                        dst.copy_from_slice(&r.value);
                        crc.update(dst);
                    }
                    black_box(crc.finalize())
                });
            },
        );
    }
    // The floor for a synced append on this disk: write the same bytes with pwrite(2) into a
    // preallocated file and fdatasync(2) after every batch.
    let batch = records(100, 100);
    let bytes: Vec<u8> = batch.iter().flat_map(|r| r.value.iter().copied()).collect();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("sync-floor"))
        .expect("create");
    let len = 64u64 << 20;
    rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len).expect("fallocate");
    g.throughput(Throughput::Elements(100));
    g.bench_function(BenchmarkId::new("write_fdatasync", "100B/batch100"), |b| {
        let mut pos = 0u64;
        b.iter(|| {
            use std::os::unix::fs::FileExt;
            if pos + bytes.len() as u64 > len {
                pos = 0;
            }
            file.write_all_at(&bytes, pos).expect("write");
            file.sync_data().expect("fdatasync");
            pos += bytes.len() as u64;
        });
    });
    commitlog_anchor(&mut g);
    g.finish();
}

/// Another Rust commit log taking the same batches of 100 × 1 KiB without sync, an anchor
/// for `append/1KiB/batch100/nosync` in the same run: `commitlog` 0.2 with 64 MiB segments,
/// as replog's default (it writes each batch with `write(2)`, indexes every message in a
/// mapped file, and never syncs unless asked). Each append encodes the batch into a reused
/// buffer first (every message with its CRC), as `PartitionLog::append` encodes its frame.
/// Each sample starts on a new log, created and removed outside the timing, so disk use stays
/// bounded.
fn commitlog_anchor(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let batch = records(1024, 100);
    let mut buf = commitlog::message::MessageBuf::default();
    g.throughput(Throughput::Elements(100));
    g.bench_function(BenchmarkId::new("commitlog", "1KiB/batch100"), |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut opts = commitlog::LogOptions::new(dir.path());
            opts.segment_max_bytes(64 << 20);
            let mut log = commitlog::CommitLog::new(opts).expect("commitlog");
            let start = Instant::now();
            for _ in 0..iters {
                buf.clear();
                for r in &batch {
                    buf.push(&r.value).expect("encode");
                }
                black_box(log.append(&mut buf).expect("append"));
            }
            start.elapsed()
        });
    });
}

/// A mapped file that is replaced by a new one when full.
struct ColdFile {
    dir: std::path::PathBuf,
    map: memmap2::MmapMut,
    pos: usize,
    files: u64,
}

impl ColdFile {
    const LEN: usize = 64 << 20;

    fn new(dir: &std::path::Path) -> Self {
        let map = Self::create(dir, 0);
        ColdFile {
            dir: dir.to_path_buf(),
            map,
            pos: 0,
            files: 1,
        }
    }

    fn create(dir: &std::path::Path, n: u64) -> memmap2::MmapMut {
        let path = dir.join(format!("cold-{n}"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        rustix::fs::fallocate(
            &file,
            rustix::fs::FallocateFlags::empty(),
            0,
            Self::LEN as u64,
        )
        .expect("fallocate");
        // The previous file is deleted; its map (dropped by the caller) keeps it alive till then.
        let _ = std::fs::remove_file(&path);
        #[expect(
            unsafe_code,
            reason = "the baseline writes through a memory map, as the log does"
        )]
        // SAFETY: a fresh file in a private temporary directory, unlinked so nobody else can
        // open it, never truncated; the map keeps the inode alive.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) };
        map.expect("map")
    }

    fn next(&mut self, len: usize) -> &mut [u8] {
        if self.pos + len > Self::LEN {
            self.map = Self::create(&self.dir, self.files);
            self.files += 1;
            self.pos = 0;
        }
        let start = self.pos;
        self.pos += len;
        &mut self.map[start..start + len]
    }
}

fn read(c: &mut Criterion) {
    let mut g = group(c, "read", 20, 4);
    for (value_len, label) in SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path(), LogConfig::default());
        let batch = records(value_len, 100);
        let batches = (64usize << 20) / (value_len * 100);
        for _ in 0..batches {
            log.append(&batch).expect("append");
        }
        let end = log.end_offset();
        g.throughput(Throughput::Elements(100 * 1024));
        // One iteration reads 1024 batches (every record's value is touched), wrapping around.
        g.bench_function(format!("{label}/batch100"), |b| {
            let mut next = Offset(0);
            b.iter(|| {
                let mut n = 0usize;
                let mut bytes = 0usize;
                while n < 100 * 1024 {
                    if next >= end {
                        next = Offset(0);
                    }
                    for batch in log.read(next, 1 << 20).expect("read") {
                        for (_, r) in batch.records() {
                            bytes += r.value.len();
                            n += 1;
                        }
                        next = batch.next_offset();
                    }
                }
                black_box(bytes)
            });
        });
    }
    g.finish();
}

/// Reopen cost: a clean close versus a crash, for logs of different sizes, to show that clean
/// reopens do not scan and crash reopens scan only the active segment.
fn reopen(c: &mut Criterion) {
    let mut g = group(c, "reopen", 10, 3);
    let gib = 1u64 << 30;
    for (total, segment, label) in [
        (gib, 128u64 << 20, "1GiB_in_8x128MiB"),
        (128 << 20, 128 << 20, "128MiB_in_1x128MiB"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = LogConfig::default();
        config.segment_bytes = segment;
        config.preallocate = Preallocate::Fallocate;
        {
            let log = open(dir.path(), config.clone());
            let batch = records(1024, 100);
            // Fill so that the active segment is about half full.
            let target = total - segment / 2;
            while log.size_bytes() < target {
                log.append(&batch).expect("append");
            }
        }
        g.bench_function(BenchmarkId::new("clean", label), |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let log = open(dir.path(), config.clone());
                    t += start.elapsed();
                    drop(log);
                }
                t
            });
        });
        g.bench_function(BenchmarkId::new("crash", label), |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let log = open(dir.path(), config.clone());
                    t += start.elapsed();
                    log.abandon();
                }
                t
            });
        });
        drop(open(dir.path(), config.clone()));
    }
    g.finish();
}

criterion_group!(benches, baseline, append, read, reopen);
criterion_main!(benches);
