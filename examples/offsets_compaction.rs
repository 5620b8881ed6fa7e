//! How small the consumer groups' offsets topic stays: a million commits to a thousand
//! group-partitions on a three-broker cluster, with compaction run as each broker's retention
//! check runs it, and the offsets partition's size on every replica at the end against the
//! size of its live records.
//!
//! ```text
//! cargo run --release --example offsets_compaction -- [commits, default 1000000]
//! ```
//!
//! Ten groups commit offsets for the 100 partitions of one topic, a request per group and
//! round (a batch of 100 records), into one offsets partition. Every 100 rounds (100,000
//! commits) every broker runs its compaction, as the retention check does every
//! `retention_check_interval`. The live size is what the first round wrote: one record per
//! group and partition, in ten batches.

use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster, Node, OFFSETS_TOPIC, Offset};

const TOPIC: &str = "orders";
const PARTITIONS: u32 = 100;
const GROUPS: u32 = 10;

/// The bytes of the frames of `node`'s replica of offsets partition 0, as stored.
fn offsets_bytes(node: &Node) -> replog::Result<u64> {
    let status = node.status(OFFSETS_TOPIC, 0)?;
    let mut next = status.log_start;
    let mut bytes = 0u64;
    // Bounded by the high watermark: each read moves `next` past a batch at least.
    for _ in 0..10_000_000 {
        if next >= status.high_watermark {
            break;
        }
        let batches = node.read(OFFSETS_TOPIC, 0, next, 4 << 20)?;
        let Some(last) = batches.last() else { break };
        next = last.next_offset();
        bytes += batches.iter().map(|b| b.size_bytes() as u64).sum::<u64>();
    }
    Ok(bytes)
}

#[tokio::main]
async fn main() -> replog::Result<()> {
    let commits: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let per_round = u64::from(GROUPS * PARTITIONS);
    let rounds = commits.div_ceil(per_round);
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), PARTITIONS)];
        c.offsets_topic_partitions = 1;
        // Compaction is run below, every 100 rounds, as the retention check would.
        c.retention_check_interval = Duration::ZERO;
    })
    .await?;
    cluster
        .wait_for_leaders(TOPIC, PARTITIONS, Duration::from_secs(60))
        .await?;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default()).await?;
    let started = Instant::now();
    let mut live = 0u64;
    let mut written = 0u64;
    for round in 1..=rounds {
        let mut requests = Vec::new();
        for g in 0..GROUPS {
            let offsets: Vec<(String, u32, Option<Offset>)> = (0..PARTITIONS)
                .map(|p| {
                    (
                        TOPIC.to_string(),
                        p,
                        Some(Offset(round * 1000 + u64::from(p))),
                    )
                })
                .collect();
            let client = &client;
            requests.push(async move {
                client
                    .reset_group_offsets(&format!("group-{g:02}"), &offsets)
                    .await
            });
        }
        for r in futures_util::future::join_all(requests).await {
            r?;
        }
        if round == 1 {
            live = offsets_bytes(cluster.nodes().next().expect("a broker"))?;
        }
        if round % 100 == 0 || round == rounds {
            written = written.max(offsets_bytes(cluster.nodes().next().expect("a broker"))?);
            for node in cluster.nodes() {
                node.enforce_retention().await?;
            }
        }
    }
    let elapsed = started.elapsed();
    let mut sizes = Vec::new();
    for node in cluster.nodes() {
        sizes.push(offsets_bytes(node)?);
    }
    let worst = sizes.iter().copied().max().unwrap_or(0);
    println!(
        "{} commits to {} group-partitions in {:.1} s ({:.0} commits/s)",
        rounds * per_round,
        per_round,
        elapsed.as_secs_f64(),
        (rounds * per_round) as f64 / elapsed.as_secs_f64()
    );
    println!(
        "offsets partition: live {live} B; at most {written} B before a compaction; after: {sizes:?} B per replica, {:.2}x live",
        worst as f64 / live.max(1) as f64
    );
    drop(client);
    cluster.shutdown().await
}
