//! How fast a follower far behind catches up, as a ratio of the same run's replicated write
//! throughput ("2 of 4": a follower 256 MiB behind, with 512 KiB entries).
//!
//! `cargo run --release --example catch_up [MiB]` (default 256) starts three brokers in this
//! process under `Durability::Fsync`, then:
//!
//! 1. writes `MiB` in entries of one 512 KiB record each to the leader, 8 appends in flight,
//!    with every broker up: the replicated write throughput;
//! 2. stops a follower, writes `MiB` more the same way, starts the follower again and times
//!    until its replica has committed the leader's whole log: the catch-up throughput.
//!
//! It prints both in MiB/s and their ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{Durability, LocalCluster, Node, Record};
use tokio::task::JoinSet;

const TOPIC: &str = "catch-up";
const ENTRY_BYTES: usize = 512 << 10;
const IN_FLIGHT: usize = 8;

/// Appends `count` entries of [`ENTRY_BYTES`] to `leader`, `IN_FLIGHT` at a time; returns the
/// time until the last is committed.
async fn write(leader: &Arc<Node>, count: usize) -> replog::Result<Duration> {
    let record = Arc::new(vec![Record::new(vec![7u8; ENTRY_BYTES])]);
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..count {
        if tasks.len() >= IN_FLIGHT
            && let Some(done) = tasks.join_next().await
        {
            done.map_err(|e| replog::Error::from(std::io::Error::other(e)))??;
        }
        let (leader, record) = (Arc::clone(leader), Arc::clone(&record));
        tasks.spawn(async move { leader.append(TOPIC, 0, &record).await.map(|_| i) });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| replog::Error::from(std::io::Error::other(e)))??;
    }
    Ok(started.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> replog::Result<()> {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let count = (mib << 20) / ENTRY_BYTES;
    let dir = tempfile::tempdir()?;
    let mut cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 1)];
        c.heartbeat_interval = Duration::from_millis(250);
        c.election_timeout = Duration::from_millis(1000);
        c.durability = Durability::Fsync;
        c.log.segment_bytes = 64 << 20;
    })
    .await?;
    let leader_id = cluster
        .wait_for_leaders(TOPIC, 1, Duration::from_secs(30))
        .await?[0];
    let leader = cluster.shared(leader_id).ok_or(replog::Error::Timeout {
        elapsed_ms: 0,
        last: "the leader stopped".into(),
    })?;
    let follower = (1..=3).find(|id| *id != leader_id).unwrap_or(1);

    let replicated = write(&leader, count).await?;
    let replicated_rate = mib as f64 / replicated.as_secs_f64();
    println!(
        "replicated write, all three up: {mib} MiB in {replicated:.2?}: {replicated_rate:.1} MiB/s"
    );

    cluster.stop(follower).await?;
    let alone = write(&leader, count).await?;
    println!("written with broker {follower} down: {mib} MiB in {alone:.2?}");
    let target = leader.status(TOPIC, 0)?.high_watermark;
    let restarted = Instant::now();
    cluster.restart(follower).await?;
    // Bounded: ten minutes at most.
    loop {
        let caught_up = cluster
            .node(follower)
            .and_then(|n| n.status(TOPIC, 0).ok())
            .is_some_and(|s| s.high_watermark >= target);
        if caught_up {
            break;
        }
        if restarted.elapsed() > Duration::from_secs(600) {
            return Err(replog::Error::Timeout {
                elapsed_ms: 600_000,
                last: "the follower never caught up".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let catch_up = restarted.elapsed();
    let catch_up_rate = mib as f64 / catch_up.as_secs_f64();
    println!(
        "catch-up of broker {follower}, {mib} MiB behind: {catch_up:.2?} from its restart: \
         {catch_up_rate:.1} MiB/s"
    );
    println!(
        "catch-up / replicated write: {:.2}",
        catch_up_rate / replicated_rate
    );
    drop(leader);
    cluster.shutdown().await
}
