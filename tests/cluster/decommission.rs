//! A broker leaves: on four in-process brokers, a topic of 12 partitions with three replicas
//! takes writes while broker 4 is decommissioned. Its replicas move to the other three (its
//! leaderships handed over first), it leaves the metadata Raft group and the cluster, and once it
//! is stopped every partition still takes writes; every acknowledged record is on every
//! remaining replica exactly once, at the offset it was acknowledged at. With three brokers
//! left, decommissioning another is refused: they could not hold three replicas per partition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use replog::{BrokerState, ClientConfig, Error, Node, Offset, Record};

use crate::support::{ELECTION_TIMEOUT, HEARTBEAT_INTERVAL, connect, wait_until};

const TOPIC: &str = "leaving";
const PARTITIONS: u32 = 12;

/// Every record of partition `p` on `node`'s replica, by offset.
fn records(node: &Node, p: u32) -> BTreeMap<u64, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut next = Offset(0);
    // Bounded: each pass moves `next` forward.
    for _ in 0..10_000 {
        let batches = node.read(TOPIC, p, next, 1 << 20).unwrap();
        if batches.is_empty() {
            break;
        }
        for b in batches {
            for (o, r) in b.records() {
                out.insert(o.get(), r.value.to_vec());
                next = Offset(o.get() + 1);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_broker_leaves_with_nothing_lost_or_doubled() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "replog=debug,openraft=off",
        ))
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = replog::LocalCluster::start(4, dir.path(), |c| {
        c.heartbeat_interval = HEARTBEAT_INTERVAL;
        c.election_timeout = ELECTION_TIMEOUT;
        c.auto_leader_rebalance = false;
    })
    .await
    .unwrap();
    let client = Arc::new(
        connect(
            &cluster.addrs()[..3],
            ClientConfig::default(),
            Duration::from_secs(20),
        )
        .await,
    );
    client.create_topic(TOPIC, PARTITIONS, 3).await.unwrap();
    cluster
        .wait_for_leaders(TOPIC, PARTITIONS, Duration::from_secs(30))
        .await
        .unwrap();

    // A writer, round robin over the partitions, remembering what was acknowledged where.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut acked: Vec<(u32, u64, Vec<u8>)> = Vec::new();
            // Bounded by `stop`, and by a count.
            for n in 0u64..200_000 {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let p = u32::try_from(n % u64::from(PARTITIONS)).unwrap();
                let value = format!("record-{n}").into_bytes();
                let sent = client.send(TOPIC, p, &[Record::new(value.clone())]).await;
                let d = sent.unwrap_or_else(|e| panic!("write {n} to partition {p}: {e}"));
                acked.push((p, d.base_offset.get(), value));
            }
            acked
        })
    };
    wait_until(Duration::from_secs(10), "some writes", async || {
        (!writer.is_finished()).then_some(())
    })
    .await;

    let started = std::time::Instant::now();
    client.decommission_broker(4).await.unwrap();
    // Asked again: no change, no error.
    client.decommission_broker(4).await.unwrap();
    let described = client.describe_brokers().await.unwrap();
    let four = described.iter().find(|b| b.id == 4).unwrap();
    assert_eq!(four.state, BrokerState::Draining, "{described:?}");
    wait_until(
        Duration::from_secs(60),
        "broker 4 to leave the cluster",
        async || {
            let brokers = client.describe_brokers().await.map_err(|e| e.to_string())?;
            let ids: Vec<u64> = brokers.iter().map(|b| b.id).collect();
            (ids == [1, 2, 3])
                .then_some(())
                .ok_or(format!("{brokers:?}"))
        },
    )
    .await;
    for p in client.describe(TOPIC).await.unwrap() {
        assert!(!p.replicas.contains(&4), "{p}");
        assert_eq!(p.replicas.len(), 3, "{p}");
    }
    let node4 = cluster.node(4).unwrap();
    wait_until(
        Duration::from_secs(20),
        "broker 4 to drop its replicas and leave the metadata Raft group",
        async || {
            let left = node4.partitions();
            (left.is_empty() && node4.has_left())
                .then_some(())
                .ok_or(format!("{left:?}"))
        },
    )
    .await;
    println!("broker 4 drained and removed in {:?}", started.elapsed());
    cluster.stop(4).await.unwrap();

    // Every partition still takes writes.
    for p in 0..PARTITIONS {
        client
            .send(TOPIC, p, &[Record::new(format!("after-{p}"))])
            .await
            .unwrap();
    }
    stop.store(true, Ordering::Release);
    let acked = writer.await.unwrap();
    assert!(acked.len() > PARTITIONS as usize, "{} writes", acked.len());
    println!("{} writes acknowledged while broker 4 left", acked.len());
    let brokers: Vec<u64> = client
        .brokers()
        .await
        .unwrap()
        .iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(brokers, [1, 2, 3]);

    // Each acknowledged record once, at its offset, on every remaining replica.
    for p in 0..PARTITIONS {
        let copies: Vec<BTreeMap<u64, Vec<u8>>> = (1..=3)
            .map(|id| records(cluster.node(id).unwrap(), p))
            .collect();
        wait_until(
            Duration::from_secs(20),
            "the replicas to hold the same records",
            async || {
                let now: Vec<_> = (1..=3)
                    .map(|id| records(cluster.node(id).unwrap(), p))
                    .collect();
                (now[0] == now[1] && now[1] == now[2])
                    .then_some(())
                    .ok_or(format!("partition {p}"))
            },
        )
        .await;
        let copy = &copies[0];
        let mut seen = std::collections::BTreeSet::new();
        for (partition, offset, value) in acked.iter().filter(|(q, _, _)| *q == p) {
            assert_eq!(
                copy.get(offset),
                Some(value),
                "partition {partition} offset {offset}"
            );
            assert!(seen.insert(value.clone()));
        }
        let values: Vec<&Vec<u8>> = copy.values().collect();
        let distinct: std::collections::BTreeSet<&Vec<u8>> = values.iter().copied().collect();
        assert_eq!(
            values.len(),
            distinct.len(),
            "a record written twice in {p}"
        );
    }

    // Three brokers cannot hold three replicas per partition without one of them.
    match client.decommission_broker(3).await {
        Err(Error::CannotDecommission { broker: 3, reason }) => {
            assert!(reason.contains("cannot hold"), "{reason}");
        }
        other => panic!("decommissioning broker 3 of three: {other:?}"),
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// Replica balancing (opt-in): three brokers hold a topic of 6 partitions with two replicas,
/// four replicas each; a fourth broker joins and, a few partitions at a time, takes replicas
/// over until every broker holds three, with the writes made before readable after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_broker_takes_its_share_of_replicas() {
    use crate::support::{free_addrs, shutdown_all, start_all, start_node};
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(4);
    let balanced = |id| {
        let mut c = crate::bare(id, &addrs[..3], dir.path());
        c.replica_balance = true;
        c
    };
    let mut nodes = start_all(balanced).await;
    let client = connect(
        &addrs[..3],
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    client.create_topic(TOPIC, 6, 2).await.unwrap();
    for p in 0..6 {
        client
            .send(TOPIC, p, &[Record::new(format!("before-{p}"))])
            .await
            .unwrap();
    }
    let mut joiner = crate::bare(4, &addrs, dir.path());
    joiner.join = true;
    joiner.replica_balance = true;
    nodes.push(Some(start_node(joiner).await.unwrap()));
    let started = std::time::Instant::now();
    let counts = wait_until(
        Duration::from_secs(60),
        "every broker to hold three replicas",
        async || {
            let brokers = client.describe_brokers().await.map_err(|e| e.to_string())?;
            let counts: Vec<(u64, u32)> = brokers.iter().map(|b| (b.id, b.replicas)).collect();
            let moving = client
                .list_reassignments(None)
                .await
                .map_err(|e| e.to_string())?;
            let even = counts.len() == 4 && counts.iter().all(|(_, n)| *n == 3);
            (even && moving.is_empty())
                .then_some(counts.clone())
                .ok_or(format!("{counts:?}, moving {moving:?}"))
        },
    )
    .await;
    println!("balanced {counts:?} in {:?}", started.elapsed());
    for p in 0..6 {
        let batches = client
            .fetch(TOPIC, p, Offset(0), 1 << 20, None)
            .await
            .unwrap();
        let values: Vec<Vec<u8>> = batches
            .iter()
            .flat_map(|b| b.records().map(|(_, r)| r.value.to_vec()))
            .collect();
        assert_eq!(values, vec![format!("before-{p}").into_bytes()]);
    }
    drop(client);
    shutdown_all(nodes).await;
}

/// Brokers seen from outside: a stopped broker's replicas fall out of sync and behind by the
/// entries written meanwhile (`describe_brokers`, `replog brokers --describe`); back, it
/// catches up to no lag and every replica in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brokers_lag_shows_while_it_is_down_and_clears_once_it_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = replog::LocalCluster::start(3, dir.path(), |c| {
        c.heartbeat_interval = HEARTBEAT_INTERVAL;
        c.election_timeout = ELECTION_TIMEOUT;
        c.auto_leader_rebalance = false;
    })
    .await
    .unwrap();
    let client = connect(
        &cluster.addrs(),
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    client.create_topic(TOPIC, 2, 3).await.unwrap();
    // The new leaders' first entries reach their followers a moment after the leaders are
    // known.
    wait_until(
        Duration::from_secs(10),
        "every broker in sync after the topic's creation",
        async || {
            let described = client.describe_brokers().await.map_err(|e| e.to_string())?;
            described
                .iter()
                .all(|b| b.lag == 0 && b.out_of_sync == 0)
                .then_some(())
                .ok_or(format!("{described:?}"))
        },
    )
    .await;
    // Broker 3 stops; each partition takes 20 one-record writes without it.
    let down = 3;
    cluster.stop(down).await.unwrap();
    let live: Vec<_> = cluster
        .addrs()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 + 1 != down)
        .map(|(_, a)| a)
        .collect();
    let client = connect(&live, ClientConfig::default(), Duration::from_secs(20)).await;
    for n in 0..20 {
        for p in 0..2 {
            client
                .send(TOPIC, p, &[Record::new(format!("{n}"))])
                .await
                .unwrap();
        }
    }
    wait_until(
        Duration::from_secs(10),
        "the stopped broker's lag to show",
        async || {
            let brokers = client.describe_brokers().await.map_err(|e| e.to_string())?;
            let it = brokers.iter().find(|b| b.id == down).ok_or("no broker")?;
            let others_fine = brokers
                .iter()
                .filter(|b| b.id != down)
                .all(|b| b.lag == 0 && b.out_of_sync == 0);
            (it.lag >= 40 && it.out_of_sync == 2 && others_fine)
                .then_some(())
                .ok_or(format!("{brokers:?}"))
        },
    )
    .await;
    cluster.restart(down).await.unwrap();
    wait_until(
        Duration::from_secs(20),
        "the broker to catch up",
        async || {
            let brokers = client.describe_brokers().await.map_err(|e| e.to_string())?;
            brokers
                .iter()
                .all(|b| b.lag == 0 && b.out_of_sync == 0)
                .then_some(())
                .ok_or(format!("{brokers:?}"))
        },
    )
    .await;
    cluster.shutdown().await.unwrap();
}
