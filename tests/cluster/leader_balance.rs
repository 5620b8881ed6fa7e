//! Leadership goes back to the preferred replicas: on three in-process brokers, a broker
//! stopped loses the partitions it led to the others, and once it is back they hand them
//! back to it by leadership transfers (Kafka's `auto.leader.rebalance.enable`), so a
//! rolling restart does not leave one broker leading everything.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use replog::ClientConfig;

use crate::support::{connect, local_cluster, wait_until};

const TOPIC: &str = "balanced";
const PARTITIONS: u32 = 6;

/// Each partition's leader as `node` sees it.
fn leaders(cluster: &replog::LocalCluster) -> BTreeMap<u32, Option<u64>> {
    (0..PARTITIONS)
        .map(|p| {
            let leader = cluster
                .nodes()
                .find_map(|n| n.status(TOPIC, p).ok().and_then(|s| s.leader));
            (p, leader)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_returns_to_the_preferred_replicas_after_a_broker_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), TOPIC, PARTITIONS, |c| {
        c.leader_imbalance_check_interval = Duration::from_millis(300);
    })
    .await;
    let client = connect(
        &cluster.addrs(),
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    let preferred: BTreeMap<u32, Option<u64>> = client
        .describe(TOPIC)
        .await
        .unwrap()
        .iter()
        .map(|d| (d.partition.partition, d.replicas.first().copied()))
        .collect();
    let balanced = |cluster: &replog::LocalCluster| {
        let now = leaders(cluster);
        (now == preferred)
            .then_some(())
            .ok_or(format!("leaders {now:?}, preferred {preferred:?}"))
    };
    wait_until(
        Duration::from_secs(30),
        "every preferred replica to lead",
        async || balanced(&cluster),
    )
    .await;

    // Broker 1 stops: the others take its partitions over.
    let ones: Vec<u32> = preferred
        .iter()
        .filter(|(_, l)| **l == Some(1))
        .map(|(p, _)| *p)
        .collect();
    assert!(
        !ones.is_empty(),
        "broker 1 is preferred for some partitions: {preferred:?}"
    );
    cluster.stop(1).await.unwrap();
    wait_until(
        Duration::from_secs(30),
        "the others to lead broker 1's partitions",
        async || {
            let now = leaders(&cluster);
            let taken = ones.iter().all(|p| now[p].is_some_and(|l| l != 1));
            taken.then_some(()).ok_or(format!("leaders {now:?}"))
        },
    )
    .await;

    // It comes back, catches up, and gets them back.
    cluster.restart(1).await.unwrap();
    let back = Instant::now();
    wait_until(
        Duration::from_secs(60),
        "broker 1 to lead its partitions again",
        async || balanced(&cluster),
    )
    .await;
    println!(
        "leadership back to the preferred replicas {:?} after the restart",
        back.elapsed()
    );
    drop(client);
    cluster.shutdown().await.unwrap();
}
