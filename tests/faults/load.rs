//! A busy leader keeps its leadership: three brokers at their default timing (heartbeat
//! 250 ms, election timeout 1 s) and durability (`Fsync`), 64 batches of 100 KiB in flight to
//! one partition for `LOAD_SECS` seconds (default 60), beside a thread that keeps a core busy.
//! Heartbeats go on a connection of their own and are answered without waiting for a sync, so
//! bulk appends and the followers' syncs must not make a follower miss its leader: the term
//! must not change.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// Batches in flight.
const IN_FLIGHT: usize = 64;
/// Records per batch, each of [`RECORD_BYTES`].
const RECORDS: usize = 100;
const RECORD_BYTES: usize = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_leader_keeps_its_leadership_under_full_fsync_load() {
    let secs = env_u64("LOAD_SECS", 60);
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![("load".into(), 1)];
    })
    .await
    .unwrap();
    cluster
        .wait_for_leaders("load", 1, Duration::from_secs(30))
        .await
        .unwrap();
    let client = Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    // The term once every broker follows the same leader.
    let settled = |cluster: &LocalCluster| {
        let seen: Vec<(Option<u64>, u64)> = cluster
            .nodes()
            .filter_map(|n| n.status("load", 0).ok())
            .map(|s| (s.leader, s.term))
            .collect();
        let first = *seen.first()?;
        (seen.len() == 3 && first.0.is_some() && seen.iter().all(|s| *s == first)).then_some(first)
    };
    let before = wait_until(Duration::from_secs(30), "one leader", async || {
        settled(&cluster).ok_or("not settled")
    })
    .await;

    let _hog = CpuHog::start(1);
    let batch: Vec<Record> = (0..RECORDS)
        .map(|i| Record::new(vec![(i % 251) as u8; RECORD_BYTES]))
        .collect();
    let batch = Arc::new(batch);
    let (written, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let senders: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (client, batch) = (Arc::clone(&client), Arc::clone(&batch));
            let (written, failed) = (Arc::clone(&written), Arc::clone(&failed));
            tokio::spawn(async move {
                // Bounded by the run's end.
                while Instant::now() < until {
                    match client.send("load", 0, &batch).await {
                        Ok(_) => written.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("a send failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        })
        .collect();
    for s in senders {
        s.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let written = written.load(Ordering::Relaxed);
    eprintln!(
        "{written} batches of {} KiB written in {elapsed:.1} s ({:.1} MiB/s), {} failed",
        RECORDS * RECORD_BYTES / 1024,
        (written as f64 * (RECORDS * RECORD_BYTES) as f64) / elapsed / f64::from(1 << 20),
        failed.load(Ordering::Relaxed),
    );
    let after = settled(&cluster);
    assert_eq!(
        after,
        Some(before),
        "the leadership moved under load (leader, term before: {before:?})"
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "sends failed under load");
    assert!(written > 0, "nothing was written");
    cluster.shutdown().await.unwrap();
}
