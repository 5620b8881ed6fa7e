//! Descriptors and memory maps an idle partition log holds, by how many sealed segments it has.
//!
//! Run: `cargo run --release --example open_files -- 200` (logs per size; default 200).
//! For each size (a log of one segment, and one of about ten sealed segments and an active
//! one) it writes the logs, closes them, opens them again (as a restarted broker does) and
//! counts the process's open descriptors (`/proc/self/fd`) and memory maps (`/proc/self/maps`)
//! against the count before they were opened; then it reads every log whole and counts again.
//! It does so twice: for logs each in a directory of its own, and for logs in a directory the
//! process holds, as a broker's replicas are in its data directory (held here by a log opened
//! on it, the public way to hold a directory): those need no lock descriptor of their own.
//! Beside the counts, the process's resident memory per log once they are open (what replog's
//! own storage costs an idle replica, without its Raft group): anonymous (heap) and
//! file-backed (the pages of the active segment's map that recovery read, which the kernel may
//! reclaim as it does the page cache). Heap a round frees is reused by the next, so a later
//! round's anonymous figure reads low: the first round of each log size is the fair one.

use replog::{LogConfig, PartitionLog, Preallocate, Record};

#[path = "support/process.rs"]
mod process;
use process::{count_fds, count_maps, status_kib};

fn config() -> LogConfig {
    let mut c = LogConfig::default();
    c.segment_bytes = 64 << 10;
    c.record_bytes_max = 8 << 10;
    c.batch_bytes_max = 16 << 10;
    c.preallocate = Preallocate::Fallocate;
    c
}

fn main() -> replog::Result<()> {
    let logs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let root = tempfile::tempdir()?;
    let held = root.path().join("held");
    let _holder = PartitionLog::open(&held, config())?;
    // 0 records: one (active) segment; 600 records of 1 KiB: about ten sealed ones.
    for (records, parent, layout) in [
        (0usize, root.path(), "alone"),
        (600, root.path(), "alone"),
        (0, &held, "in a held directory"),
        (600, &held, "in a held directory"),
    ] {
        let dirs: Vec<_> = (0..logs)
            .map(|i| parent.join(format!("{records}-{i}")))
            .collect();
        for dir in &dirs {
            let log = PartitionLog::open(dir, config())?;
            for _ in 0..records {
                log.append(&[Record::new(vec![7u8; 1000])])?;
            }
            log.flush()?;
        }
        let (fds0, maps0) = (count_fds(), count_maps());
        let rss0 = (status_kib("RssAnon"), status_kib("RssFile"));
        let open: Vec<PartitionLog> = dirs
            .iter()
            .map(|d| PartitionLog::open(d, config()))
            .collect::<replog::Result<_>>()?;
        let segments = open.first().map_or(0, |l| l.segment_count());
        let per = |now: usize, before: usize| now.saturating_sub(before) as f64 / logs as f64;
        let (fds1, maps1) = (count_fds(), count_maps());
        let rss1 = (status_kib("RssAnon"), status_kib("RssFile"));
        let kib = |now: u64, before: u64| now.saturating_sub(before) as f64 / logs as f64;
        println!(
            "{logs} logs of {segments} segments {layout}, idle after open: {:.2} descriptors, \
             {:.2} maps, {:.1} KiB anonymous and {:.1} KiB file-backed resident memory per log",
            per(fds1, fds0),
            per(maps1, maps0),
            kib(rss1.0, rss0.0),
            kib(rss1.1, rss0.1),
        );
        for log in &open {
            let mut at = log.start_offset();
            while at < log.end_offset() {
                let batches = log.read(at, 1 << 20)?;
                let Some(last) = batches.last() else { break };
                at = last.next_offset();
            }
        }
        println!(
            "{logs} logs of {segments} segments {layout}, after reading each whole: {:.2} descriptors and {:.2} maps per log",
            per(count_fds(), fds0),
            per(count_maps(), maps0),
        );
    }
    Ok(())
}
