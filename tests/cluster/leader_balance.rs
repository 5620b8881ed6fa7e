//! Leadership goes back to the preferred replicas: on three in-process brokers, a broker
//! stopped loses the partitions it led to the others, and once it is back they hand them
//! back to it by leadership transfers, by themselves (Kafka's `auto.leader.rebalance.enable`),
//! so a rolling restart does not leave one broker leading everything, or when asked (Kafka's
//! preferred ElectLeaders).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use replog::{ClientConfig, Election, PartitionId};

use crate::support::{
    connect, local_cluster, spawn_writer, wait_for_acked_on_every_replica, wait_for_writes,
    wait_until,
};

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

/// Whether every partition is led by its preferred replica (else which lead them).
fn balanced(
    cluster: &replog::LocalCluster,
    preferred: &BTreeMap<u32, Option<u64>>,
) -> Result<(), String> {
    let now = leaders(cluster);
    (now == *preferred)
        .then_some(())
        .ok_or(format!("leaders {now:?}, preferred {preferred:?}"))
}

/// Each partition's preferred replica (the first of its replicas).
async fn preferred_leaders(client: &replog::Client) -> BTreeMap<u32, Option<u64>> {
    client
        .describe(TOPIC)
        .await
        .unwrap()
        .iter()
        .map(|d| (d.partition.partition, d.replicas.first().copied()))
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
    let preferred = preferred_leaders(&client).await;
    wait_until(
        Duration::from_secs(30),
        "every preferred replica to lead",
        async || balanced(&cluster, &preferred),
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
        async || balanced(&cluster, &preferred),
    )
    .await;
    println!(
        "leadership back to the preferred replicas {:?} after the restart",
        back.elapsed()
    );
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// With automatic rebalancing off, broker 1's partitions stay with the others after it
/// comes back, until a client asks for the preferred leaders: while broker 1 is down its
/// partitions' elections fail, naming why; once it is back and caught up they move to it,
/// the others need none, and an unknown partition is named as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_leaders_are_elected_when_a_client_asks() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), TOPIC, PARTITIONS, |c| {
        c.auto_leader_rebalance = false;
    })
    .await;
    let client = connect(
        &cluster.addrs(),
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    let preferred = preferred_leaders(&client).await;
    let ones: Vec<u32> = preferred
        .iter()
        .filter(|(_, l)| **l == Some(1))
        .map(|(p, _)| *p)
        .collect();
    assert!(!ones.is_empty(), "{preferred:?}");
    // Whoever leads now, asking makes the preferred replicas lead.
    wait_until(
        Duration::from_secs(30),
        "every partition to have a leader",
        async || {
            let now = leaders(&cluster);
            now.values()
                .all(Option::is_some)
                .then_some(())
                .ok_or(format!("{now:?}"))
        },
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        "the preferred replicas to lead when asked",
        async || {
            client.elect_leaders(None).await.unwrap();
            let now = leaders(&cluster);
            (now == preferred).then_some(()).ok_or(format!("{now:?}"))
        },
    )
    .await;

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
    let client = connect(
        &cluster.addrs()[1..],
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    let down = client.elect_leaders(None).await.unwrap();
    for (id, outcome) in &down {
        if ones.contains(&id.partition) {
            assert!(
                matches!(outcome, Election::PreferredUnavailable(why) if why.contains("broker 1")),
                "{id}: {outcome:?}"
            );
        } else {
            assert_eq!(outcome, &Election::NotNeeded, "{id}");
        }
    }

    cluster.restart(1).await.unwrap();
    // Broker 1 catches up; its partitions stay where they are until asked.
    let asked: Vec<PartitionId> = (0..PARTITIONS)
        .map(|p| PartitionId::new(TOPIC, p))
        .chain([
            PartitionId::new(TOPIC, PARTITIONS),
            PartitionId::new("nope", 0),
        ])
        .collect();
    let started = Instant::now();
    let outcomes = wait_until(
        Duration::from_secs(30),
        "broker 1 to take its partitions back when asked",
        async || {
            let outcomes = client.elect_leaders(Some(&asked)).await.unwrap();
            let elected = outcomes
                .iter()
                .filter(|(id, _)| ones.contains(&id.partition) && id.topic == TOPIC)
                .all(|(_, o)| matches!(o, Election::Elected | Election::NotNeeded));
            let why = format!("{outcomes:?}");
            elected.then_some(outcomes).ok_or(why)
        },
    )
    .await;
    println!(
        "preferred leaders elected {:?} after the restart",
        started.elapsed()
    );
    let by_partition: BTreeMap<PartitionId, Election> = outcomes.into_iter().collect();
    assert_eq!(by_partition.len(), asked.len(), "{by_partition:?}");
    for p in (0..PARTITIONS).filter(|p| !ones.contains(p)) {
        assert_eq!(
            by_partition[&PartitionId::new(TOPIC, p)],
            Election::NotNeeded
        );
    }
    assert_eq!(
        by_partition[&PartitionId::new(TOPIC, PARTITIONS)],
        Election::UnknownPartition
    );
    assert_eq!(
        by_partition[&PartitionId::new("nope", 0)],
        Election::UnknownPartition
    );
    wait_until(
        Duration::from_secs(5),
        "every broker to see the preferred leaders",
        async || {
            let now = leaders(&cluster);
            (now == preferred).then_some(()).ok_or(format!("{now:?}"))
        },
    )
    .await;
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A rolling restart of all three brokers under a producer, with automatic rebalancing on (the
/// default): each broker stops (handing its leaderships over), comes back, and leads its
/// preferred partitions again before the next one stops; at the end every preferred replica
/// leads, and every record acknowledged meanwhile is on every replica, once, at its offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_writes_ends_balanced_with_nothing_lost() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = local_cluster(3, dir.path(), TOPIC, PARTITIONS, |c| {
        c.leader_imbalance_check_interval = Duration::from_millis(300);
    })
    .await;
    let client = Arc::new(
        connect(
            &cluster.addrs(),
            ClientConfig::default(),
            Duration::from_secs(20),
        )
        .await,
    );
    let preferred = preferred_leaders(&client).await;
    wait_until(
        Duration::from_secs(30),
        "every preferred replica to lead",
        async || balanced(&cluster, &preferred),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = spawn_writer(
        Arc::clone(&client),
        TOPIC,
        PARTITIONS,
        (Arc::clone(&stop), Arc::clone(&written)),
    );
    for id in 1..=3 {
        cluster.stop(id).await.unwrap();
        cluster.restart(id).await.unwrap();
        let back = Instant::now();
        wait_until(
            Duration::from_secs(30),
            "the restarted broker to lead its preferred partitions again",
            async || balanced(&cluster, &preferred),
        )
        .await;
        println!(
            "broker {id}: balanced {:?} after its restart",
            back.elapsed()
        );
    }
    // Writes through every partition's leader after the last restart.
    let since = written.load(Ordering::Acquire);
    wait_for_writes(&written, since, 2 * PARTITIONS as usize).await;
    stop.store(true, Ordering::Release);
    let acked = writer.await.unwrap();
    assert!(acked.len() > PARTITIONS as usize, "{} writes", acked.len());
    // Every acknowledged record on every replica, at its offset.
    wait_for_acked_on_every_replica(&cluster, TOPIC, PARTITIONS, &acked).await;
    drop(client);
    cluster.shutdown().await.unwrap();
}
