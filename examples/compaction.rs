//! Log compaction's figures, measured in one run: its throughput over a log of 1 KiB records,
//! how much it slows appends to another log while it runs, and how long the compacted log
//! takes to read from its beginning.
//!
//! ```text
//! cargo run --release --example compaction -- [MiB of input, default 256] [keys, default 10000] \
//!     [MiB/s compaction may read, default: no limit; a broker's default is 128]
//! ```
//!
//! The input is written in batches of 16 records of 1 KiB, each key (`key-000042`) written
//! over and over in turn, then sealed and synced. The other log takes batches of 16 records of
//! 1 KiB from one thread, without syncs, for two seconds alone, then for as long as the
//! compaction runs, then two seconds alone again; the rate during compaction over the mean of
//! the two alone is the slowdown.

use std::time::{Duration, Instant};

use replog::{CompactionPolicy, LogConfig, Offset, PartitionLog, Record};

const RECORD_BYTES: usize = 1024;
const BATCH_RECORDS: usize = 16;

fn config() -> LogConfig {
    let mut config = LogConfig::default();
    config.segment_bytes = 64 << 20;
    config.record_bytes_max = 2 << 10;
    config.batch_bytes_max = 1 << 20;
    config
}

fn batch(first: u64, keys: u64, value: &[u8]) -> Vec<Record> {
    (first..first + BATCH_RECORDS as u64)
        .map(|i| Record::new(value.to_vec()).with_key(format!("key-{:06}", i % keys)))
        .collect()
}

/// Appends to `log` until `done` says so (checked every batch); returns batches per second.
fn append_until(log: &PartitionLog, value: &[u8], done: impl Fn() -> bool) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    // Bounded by `done`, and by a minute in any case.
    while !done() && start.elapsed() < Duration::from_secs(60) {
        log.append(&batch(n * BATCH_RECORDS as u64, u64::MAX, value))
            .expect("append");
        n += 1;
        if log.segment_count() > 8 {
            // Keep the other log's disk use flat: drop what it wrote so far.
            log.purge_to(log.end_offset()).expect("purge");
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() -> replog::Result<()> {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let keys: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let budget: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let dir = tempfile::tempdir()?;
    let log = PartitionLog::open(dir.path().join("compacted"), config())?;
    let value = vec![b'v'; RECORD_BYTES - 16];
    let batches = mib * (1 << 20) / (RECORD_BYTES * BATCH_RECORDS) as u64;
    for i in 0..batches {
        log.append(&batch(i * BATCH_RECORDS as u64, keys, &value))?;
    }
    log.roll()?;
    log.flush()?;
    let input = log.size_bytes();

    let other = PartitionLog::open(dir.path().join("other"), config())?;
    let for_two_seconds = || {
        let until = Instant::now() + Duration::from_secs(2);
        move || Instant::now() >= until
    };
    let before = append_until(&other, &value, for_two_seconds());
    let upto = replog::LogIndex(log.next_log_index().get() - 1);
    let mut policy = CompactionPolicy::new(upto);
    policy.bytes_per_second = budget << 20;
    let started = Instant::now();
    let (stats, during) = std::thread::scope(|s| {
        let run = s.spawn(|| log.compact(&policy));
        let during = append_until(&other, &value, || run.is_finished());
        (run.join().expect("compaction thread"), during)
    });
    let stats = stats?;
    let took = started.elapsed();
    let after = append_until(&other, &value, for_two_seconds());
    let alone = (before + after) / 2.0;

    let read_start = Instant::now();
    let mut records = 0u64;
    for r in log.iter(Offset(0)) {
        r?;
        records += 1;
    }
    let read = read_start.elapsed();

    let mb = input as f64 / 1e6;
    println!(
        "compaction: {mb:.0} MB of input ({} keys) in {:.2} s = {:.0} MB/s on one thread; \
         {} segments rewritten, {} -> {} bytes, {} records removed",
        stats.keys,
        took.as_secs_f64(),
        mb / took.as_secs_f64(),
        stats.segments,
        stats.bytes_before,
        stats.bytes_after,
        stats.records_removed,
    );
    println!(
        "appends to another log: {during:.0} batches/s during compaction, {alone:.0} alone \
         (the mean of 2 s before, {before:.0}, and 2 s after, {after:.0}): {:.2} of alone",
        during / alone
    );
    println!(
        "read from the beginning: {records} records in {:.3} s (log now {} bytes)",
        read.as_secs_f64(),
        log.size_bytes()
    );
    Ok(())
}
