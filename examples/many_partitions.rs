//! Many partitions at once: how long a topic of many partitions takes to create and lead, and
//! how long a broker that hosts a replica of each takes to restart to ready.
//!
//! `cargo run --release --example many_partitions [PARTITIONS]` (default 1000) starts three
//! brokers in this process and creates one topic of `PARTITIONS` partitions with three
//! replicas through `Client::create_topic`. It prints how long the creation took to return,
//! and until every partition had a leader every broker agrees on. Then it stops broker 3
//! (each broker hosts `PARTITIONS` replicas) and times its `Node::start` (opening every
//! replica's log) and `Node::wait_ready` (every hosted replica knows a leader).

use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let partitions: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1000);
    let dir = tempfile::tempdir()?;
    let mut cluster = LocalCluster::start(3, dir.path(), |c| {
        c.request_timeout = Duration::from_secs(60);
    })
    .await?;
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_secs(60);
    let client = Client::connect(&cluster.addrs(), config).await?;

    let started = Instant::now();
    client.create_topic("many", partitions, 3).await?;
    let created = started.elapsed();
    cluster
        .wait_for_leaders("many", partitions, Duration::from_secs(300))
        .await?;
    let led = started.elapsed();
    println!(
        "{partitions} partitions x 3 replicas: create_topic returned after {:.2} s, every \
         partition led (all brokers agreeing) after {:.2} s",
        created.as_secs_f64(),
        led.as_secs_f64()
    );

    cluster.stop(3).await?;
    let restarting = Instant::now();
    cluster.restart(3).await?;
    let started_in = restarting.elapsed();
    let node = cluster.node(3).ok_or("broker 3 did not restart")?;
    // Bounded: 15,000 rounds of 20 ms.
    for _ in 0..15_000 {
        if node.partitions().len() >= partitions as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened = restarting.elapsed();
    // Ready once it hosts every replica again (it opens a created topic's replicas as it
    // replays the metadata log, after `Node::start` returned) and each knows its leader.
    let mut hosted = 0;
    // Bounded: 15,000 rounds of at least 20 ms, or `wait_ready`'s own deadline.
    for _ in 0..15_000 {
        hosted = node.wait_ready(Duration::from_secs(300)).await?;
        if hosted >= partitions as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "broker 3 ({hosted} replicas) restarted: Node::start returned after {:.2} s, every \
         replica open after {:.2} s, ready (every replica knows its leader) after {:.2} s",
        started_in.as_secs_f64(),
        opened.as_secs_f64(),
        restarting.elapsed().as_secs_f64()
    );
    drop(client);
    cluster.shutdown().await?;
    Ok(())
}
