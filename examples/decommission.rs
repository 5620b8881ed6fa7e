//! How long a broker takes to leave, against the time to copy the same bytes between two
//! brokers, with a producer writing throughout.
//!
//! `cargo run --release --example decommission [MiB]` (default 1024) starts four brokers in
//! this process (automatic leader rebalancing off), then:
//!
//! 1. **Copy:** writes `MiB` to a partition with one replica, on broker 1, moves it to broker
//!    2 (`Client::reassign_partition`) and times until the move has ended: the time to copy
//!    `MiB` between two brokers.
//! 2. **Decommission:** creates a topic of 100 partitions with three replicas, every one of
//!    them on broker 4, writes `MiB` to it (so broker 4 holds `MiB` in 100 replicas), then
//!    decommissions broker 4 (`Client::decommission_broker`) and times until it has left,
//!    while a producer writes a record to each partition in turn.
//!
//! It prints both times, their ratio, and the producer's writes, failures and longest write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster, Record};
use tokio::task::JoinSet;

const PARTITIONS: u32 = 100;
const RECORD_BYTES: usize = 16 << 10;
const RECORDS_PER_SEND: usize = 32;
const IN_FLIGHT: usize = 8;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Writes `mib` MiB to `topic`'s partitions in turn, `IN_FLIGHT` sends at a time.
async fn fill(client: &Arc<Client>, topic: &str, partitions: u32, mib: usize) -> Result<()> {
    let batch: Arc<Vec<Record>> = Arc::new(
        (0..RECORDS_PER_SEND)
            .map(|_| Record::new(vec![7u8; RECORD_BYTES]))
            .collect(),
    );
    let sends = (mib << 20) / (RECORD_BYTES * RECORDS_PER_SEND);
    let mut tasks = JoinSet::new();
    for i in 0..sends {
        if tasks.len() >= IN_FLIGHT
            && let Some(done) = tasks.join_next().await
        {
            done??;
        }
        let (client, batch, topic) = (Arc::clone(client), Arc::clone(&batch), topic.to_string());
        let p = u32::try_from(i).unwrap_or(0) % partitions;
        tasks.spawn(async move { client.send(&topic, p, &batch).await.map(|_| ()) });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Waits (at most `within`) until `done` holds, polling.
async fn until(within: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + within;
    while !done().await {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1024);
    // `RUST_LOG=replog=info` prints the brokers' events.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .try_init();
    }
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(4, dir.path(), |c| c.auto_leader_rebalance = false).await?;
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);

    // 1. Copy `mib` between two brokers: a one-replica partition moved from 1 to 2.
    client.create_topic("copied", 1, 1).await?;
    let on = client.describe("copied").await?[0].replicas.clone();
    let from = on[0];
    let to = if from == 1 { 2 } else { 1 };
    fill(&client, "copied", 1, mib).await?;
    let started = Instant::now();
    client.reassign_partition("copied", 0, &[to]).await?;
    until(Duration::from_secs(600), "the copy", async || {
        client
            .list_reassignments(None)
            .await
            .is_ok_and(|m| m.is_empty())
    })
    .await?;
    let copy = started.elapsed();
    client.delete_topic("copied").await?;

    // 2. Broker 4 holds `mib` in 100 replicas, then leaves.
    client.create_topic("drained", 1, 3).await?;
    let first = client.describe("drained").await?[0].replicas.clone();
    let others = [[1, 2], [2, 3], [3, 1]];
    let grown: Vec<Vec<u64>> = (1..PARTITIONS as usize)
        .map(|p| {
            let [a, b] = others[p % 3];
            vec![4, a, b]
        })
        .collect();
    client
        .create_partitions_assigned("drained", PARTITIONS, &grown)
        .await?;
    cluster
        .wait_for_leaders("drained", PARTITIONS, Duration::from_secs(120))
        .await?;
    fill(&client, "drained", PARTITIONS, mib).await?;
    let on_four = if first.contains(&4) {
        PARTITIONS
    } else {
        PARTITIONS - 1
    };

    let stop = Arc::new(AtomicBool::new(false));
    let (written, failed, slowest) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let writer = {
        let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
        let (written, failed, slowest) = (
            Arc::clone(&written),
            Arc::clone(&failed),
            Arc::clone(&slowest),
        );
        tokio::spawn(async move {
            // Bounded by `stop`, set once the broker has left.
            for n in 0u64.. {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let p = u32::try_from(n % u64::from(PARTITIONS)).unwrap_or(0);
                let sent = Instant::now();
                match client
                    .send("drained", p, &[Record::new(n.to_le_bytes().to_vec())])
                    .await
                {
                    Ok(_) => written.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                let ms = u64::try_from(sent.elapsed().as_millis()).unwrap_or(u64::MAX);
                if ms > 1000 {
                    tracing::warn!(partition = p, ms, "a write took over a second");
                }
                slowest.fetch_max(ms, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    client.decommission_broker(4).await?;
    let four = cluster.node(4).ok_or("no broker 4")?;
    until(Duration::from_secs(600), "broker 4 to leave", async || {
        four.has_left()
    })
    .await?;
    let decommission = started.elapsed();
    stop.store(true, Ordering::Release);
    writer.await?;
    println!(
        "copy of {mib} MiB between two brokers: {copy:?}; decommission of a broker holding \
         {mib} MiB in {on_four} replicas: {decommission:?} ({:.2}× the copy); producer \
         meanwhile: {} writes, {} failed, longest {} ms",
        decommission.as_secs_f64() / copy.as_secs_f64(),
        written.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        slowest.load(Ordering::Relaxed)
    );
    drop(client);
    cluster.shutdown().await?;
    Ok(())
}
