//! How long a preferred-leader election of many partitions takes, with writes going on.
//!
//! `cargo run --release --example elect_leaders [PARTITIONS]` (default 100) starts three
//! brokers in this process (automatic rebalancing off), creates a topic of `PARTITIONS`
//! partitions with three replicas, and reorders each partition's replicas (a reassignment to
//! the same brokers) so that its preferred replica is one that does not lead it. While a
//! client writes a record to each partition in turn, it then asks for the preferred leaders
//! (`Client::elect_leaders`, Kafka's ElectLeaders) and prints how long that took, how many
//! partitions moved, and how many writes failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, Election, LocalCluster, Record};

const TOPIC: &str = "elected";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let partitions: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100);
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(3, dir.path(), |c| c.auto_leader_rebalance = false).await?;
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    client.create_topic(TOPIC, partitions, 3).await?;
    // Every partition led, then each given a preferred replica that does not lead it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let described = loop {
        let d = client.describe(TOPIC).await?;
        if d.len() == partitions as usize && d.iter().all(|p| p.leader.is_some()) {
            break d;
        }
        if Instant::now() > deadline {
            return Err("the partitions did not all get a leader".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for p in &described {
        let leader = p.leader.unwrap_or(0);
        let mut replicas: Vec<u64> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != leader)
            .collect();
        replicas.push(leader);
        client
            .reassign_partition(TOPIC, p.partition.partition, &replicas)
            .await?;
    }
    // The reorders are done once no move is listed; then the writes start.
    while !client.list_reassignments(None).await?.is_empty() {
        if Instant::now() > deadline {
            return Err("the reassignments did not end".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (written, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = {
        let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
        let (written, failed) = (Arc::clone(&written), Arc::clone(&failed));
        tokio::spawn(async move {
            // Bounded by `stop`, set after the election.
            for n in 0u64.. {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let p = u32::try_from(n % u64::from(partitions)).unwrap_or(0);
                match client
                    .send(TOPIC, p, &[Record::new(n.to_le_bytes().to_vec())])
                    .await
                {
                    Ok(_) => written.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let outcomes = client.elect_leaders(None).await?;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    writer.await?;
    let mut by_outcome: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, outcome) in outcomes.iter().filter(|(id, _)| id.topic == TOPIC) {
        let kind = match outcome {
            Election::Elected => "elected".to_string(),
            Election::NotNeeded => "not needed".to_string(),
            other => format!("{other:?}"),
        };
        *by_outcome.entry(kind).or_default() += 1;
    }
    println!(
        "preferred-leader election of {partitions} partitions: {took:?}; {by_outcome:?}; \
         writes meanwhile: {} acknowledged, {} failed",
        written.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    cluster.shutdown().await?;
    Ok(())
}
