//! Sustained append without sync: a local log that only grows, written past the page cache's
//! dirty limits (by default 6 GiB per case; `vm.dirty_ratio` is 20 % of RAM, 4.4 GiB on a
//! 24 GiB machine), with the default configuration and with each [`Preallocate`] mode, next
//! to the `commitlog` crate taking the same batches, all in one run so that the figures can
//! be read as ratios. Each append encodes its batch from the same records, for both logs
//! (replog's frame with its CRC, `commitlog`'s messages with theirs).
//!
//! Run: `cargo run --release --example append_sustained [GIB [ROUNDS [CASES]]]` (defaults:
//! 6 GiB per case, in batches of 100 records of 1 KiB, and 3 rounds, each running the cases
//! in a different order; every figure is the median of its rounds). The disk is synced
//! before each case, outside the timing. CASES is a comma-separated list of `default`,
//! `Fallocate`, `Zeros` and `commitlog` (default: all but `Zeros`, whose second write of
//! every byte makes it several times slower than the rest); one case alone is handy under
//! `strace -f -c`.

use std::time::{Duration, Instant};

use replog::{LogConfig, PartitionLog, Preallocate, Record};

const BATCH: usize = 100;
const VALUE_LEN: usize = 1024;
const CASES: [&str; 4] = ["default", "Fallocate", "Zeros", "commitlog"];

fn main() -> std::io::Result<()> {
    let arg = |i: usize| std::env::args().nth(i);
    let gib: f64 = arg(1).map_or(Ok(6.0), |a| a.parse().map_err(std::io::Error::other))?;
    let rounds: usize = arg(2).map_or(Ok(3), |a| a.parse().map_err(std::io::Error::other))?;
    let only = arg(3).unwrap_or_else(|| "default,Fallocate,commitlog".into());
    let batches = ((gib * f64::from(1u32 << 30)) / (BATCH * VALUE_LEN) as f64).ceil() as u64;
    let records = batches * BATCH as u64;
    println!("{batches} batches of {BATCH} x {VALUE_LEN} B per case, no sync, {rounds} rounds");
    let cases: Vec<&str> = CASES
        .into_iter()
        .filter(|c| only.split(',').any(|o| o == *c))
        .collect();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        // Each round starts at another case, so that none always runs first.
        for k in 0..cases.len() {
            let i = (round + k) % cases.len();
            let took = run(cases[i], batches)?;
            let rate = records as f64 / took.as_secs_f64();
            println!(
                "round {round} {:>10}: {:.3} M records/s ({:.0} MB/s)",
                cases[i],
                rate / 1e6,
                rate * VALUE_LEN as f64 / 1e6
            );
            rates[i].push(rate);
        }
    }
    let median = |name: &str| {
        let i = cases.iter().position(|c| *c == name)?;
        let mut r = rates[i].clone();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied()
    };
    for name in &cases {
        if let Some(m) = median(name) {
            println!("median {name:>10}: {:.3} M records/s", m / 1e6);
        }
    }
    for (a, b) in [
        ("default", "Fallocate"),
        ("default", "commitlog"),
        ("Fallocate", "commitlog"),
        ("Zeros", "Fallocate"),
    ] {
        if let (Some(x), Some(y)) = (median(a), median(b)) {
            println!("{a}/{b}: {:.2}", x / y);
        }
    }
    Ok(())
}

/// One case: the time its appends took.
fn run(case: &str, batches: u64) -> std::io::Result<Duration> {
    let mode = match case {
        "Fallocate" => Preallocate::Fallocate,
        "Zeros" => Preallocate::Zeros,
        "commitlog" => return commitlog_case(batches),
        _ => Preallocate::default(),
    };
    let mut config = LogConfig::default();
    config.preallocate = mode;
    replog_case(config, batches)
}

fn batch() -> Vec<Record> {
    (0..BATCH)
        .map(|i| Record::new(vec![(i % 251) as u8; VALUE_LEN]))
        .collect()
}

/// Writes back every dirty page, so that no case pays for the one before it.
fn settle() {
    rustix::fs::sync();
}

/// The time `batches` appends take on a new log (its close, which syncs, is not timed).
fn replog_case(config: LogConfig, batches: u64) -> std::io::Result<Duration> {
    settle();
    let dir = tempfile::tempdir()?;
    let log = PartitionLog::open(dir.path(), config).map_err(std::io::Error::other)?;
    let batch = batch();
    let start = Instant::now();
    for _ in 0..batches {
        log.append(&batch).map_err(std::io::Error::other)?;
    }
    let took = start.elapsed();
    drop(log);
    Ok(took)
}

/// The same on a `commitlog` log with 64 MiB segments, as replog's default. Each append
/// encodes the batch into a reused buffer first, as `PartitionLog::append` does.
fn commitlog_case(batches: u64) -> std::io::Result<Duration> {
    settle();
    let dir = tempfile::tempdir()?;
    let mut opts = commitlog::LogOptions::new(dir.path());
    opts.segment_max_bytes(64 << 20);
    let mut log = commitlog::CommitLog::new(opts)?;
    let batch = batch();
    let mut buf = commitlog::message::MessageBuf::default();
    let start = Instant::now();
    for _ in 0..batches {
        buf.clear();
        for r in &batch {
            buf.push(&r.value)
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
        log.append(&mut buf).map_err(std::io::Error::other)?;
    }
    let took = start.elapsed();
    log.flush()?;
    Ok(took)
}
