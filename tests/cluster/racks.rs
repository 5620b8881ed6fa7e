//! Racks: four in-process brokers in two racks (1 and 2 in `east`, 3 and 4 in `west`) register
//! them; a topic created then has each partition's two replicas in both racks, the brokers'
//! descriptions name their racks, and a broker decommissioned gives its place to a broker of
//! its own rack where the partition's other replica is in the other one.

use std::collections::BTreeSet;
use std::time::Duration;

use replog::ClientConfig;

use crate::support::{ELECTION_TIMEOUT, HEARTBEAT_INTERVAL, connect, wait_until};

const TOPIC: &str = "racked";

fn rack_of(id: u64) -> &'static str {
    if id <= 2 { "east" } else { "west" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_partitions_replicas_span_the_racks() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = replog::LocalCluster::start(4, dir.path(), |c| {
        c.heartbeat_interval = HEARTBEAT_INTERVAL;
        c.election_timeout = ELECTION_TIMEOUT;
        c.rack = Some(rack_of(c.id).to_string());
    })
    .await
    .unwrap();
    let client = connect(
        &cluster.addrs(),
        ClientConfig::default(),
        Duration::from_secs(20),
    )
    .await;
    wait_until(
        Duration::from_secs(20),
        "every broker's rack registered",
        async || {
            let brokers = client.describe_brokers().await.map_err(|e| e.to_string())?;
            let all = brokers.len() == 4
                && brokers
                    .iter()
                    .all(|b| b.rack.as_deref() == Some(rack_of(b.id)));
            all.then_some(()).ok_or(format!("{brokers:?}"))
        },
    )
    .await;
    client.create_topic(TOPIC, 8, 2).await.unwrap();
    let spans = |replicas: &[u64]| -> BTreeSet<&'static str> {
        replicas.iter().map(|b| rack_of(*b)).collect()
    };
    let described = client.describe(TOPIC).await.unwrap();
    for p in &described {
        assert_eq!(spans(&p.replicas).len(), 2, "{p}");
    }
    // Broker 1 leaves: each partition it was on keeps a replica in each rack, so its place
    // goes to broker 2, the other broker of its rack.
    client.decommission_broker(1).await.unwrap();
    wait_until(
        Duration::from_secs(60),
        "broker 1's partitions to move",
        async || {
            let now = client.describe(TOPIC).await.map_err(|e| e.to_string())?;
            let moved = now.iter().all(|p| !p.replicas.contains(&1));
            let why = format!("{now:?}");
            moved.then_some(()).ok_or(why)
        },
    )
    .await;
    for (before, after) in described
        .iter()
        .zip(client.describe(TOPIC).await.unwrap().iter())
    {
        assert_eq!(spans(&after.replicas).len(), 2, "{after}");
        if before.replicas.contains(&1) {
            assert!(after.replicas.contains(&2), "{before} → {after}");
        }
    }
    drop(client);
    cluster.shutdown().await.unwrap();
}
