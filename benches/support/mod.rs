//! What the benches share.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use replog::{PartitionLog, Record};

/// Appends `iters` batches to a local log (flushing each if `sync`), timing the appends and,
/// every 64 batches, the log's retention (`LogConfig::retention_bytes`, if set: a log in its
/// steady state deletes, or recycles, old segments as it writes); purges all but the active
/// segment afterwards so disk use stays bounded.
pub fn timed_local_appends(
    log: &PartitionLog,
    batch: &[Record],
    iters: u64,
    sync: bool,
) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        black_box(log.append(batch).expect("append"));
        if sync {
            log.flush().expect("flush");
        }
        if i % 64 == 63 {
            log.enforce_retention(0).expect("retention");
        }
    }
    let elapsed = start.elapsed();
    log.purge_to(log.end_offset()).expect("purge");
    elapsed
}

/// A benchmark group taking `samples` samples over `measure_secs` seconds after one second of
/// warm-up.
pub fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    samples: usize,
    measure_secs: u64,
) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(samples)
        .measurement_time(Duration::from_secs(measure_secs))
        .warm_up_time(Duration::from_secs(1));
    g
}
