//! Rolling restart under producer load: the write pause each partition sees while each of three
//! brokers in turn shuts down (handing its leaderships over first) and comes back.
//!
//! `cargo run --release --example rolling_restart` prints, over every partition and every
//! restart, the longest gap between two acknowledged writes of that partition, as p50, p99 and
//! max, next to the election timeout (what a crash would cost at least).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster, Record};

const TOPIC: &str = "rolling";
const PARTITIONS: u32 = 6;
const ELECTION_TIMEOUT_MS: u64 = 1000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), PARTITIONS)];
        c.heartbeat_interval = Duration::from_millis(250);
        c.election_timeout = Duration::from_millis(ELECTION_TIMEOUT_MS);
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, PARTITIONS, Duration::from_secs(30))
        .await?;
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    // One writer per partition, one write in flight each; each records when its writes were
    // acknowledged. Bounded by the stop flag (and each send by the delivery timeout).
    let writers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut acks = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if client.send(TOPIC, p, &[Record::new("x")]).await.is_ok() {
                        acks.push(started.elapsed());
                    }
                }
                acks
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut windows = Vec::new();
    for id in 1..=3 {
        let from = started.elapsed();
        cluster.stop(id).await?;
        cluster.restart(id).await?;
        cluster
            .wait_for_leaders(TOPIC, PARTITIONS, Duration::from_secs(30))
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        windows.push((from, started.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    let mut pauses = Vec::new();
    for w in writers {
        let acks = w.await.map_err(|e| replog::Error::Remote(e.to_string()))?;
        for (from, to) in &windows {
            let inside: Vec<Duration> = acks
                .iter()
                .copied()
                .filter(|t| t >= from && t <= to)
                .collect();
            let longest = inside
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default();
            pauses.push(longest);
        }
    }
    pauses.sort();
    let at = |q: f64| pauses[((pauses.len() - 1) as f64 * q).round() as usize];
    println!(
        "write pause per partition and restart ({} samples): p50 {} ms, p99 {} ms, max {} ms; election timeout {} ms",
        pauses.len(),
        at(0.5).as_millis(),
        at(0.99).as_millis(),
        at(1.0).as_millis(),
        ELECTION_TIMEOUT_MS
    );
    drop(client);
    cluster.shutdown().await
}
