//! Long-poll fetch: a fetch at the end of the log waits, at most its
//! `max_wait`, for `min_bytes` of committed records and is woken by the commit that brings
//! them; every answer carries the partition's high watermark and log start.

use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, FetchOptions, LocalCluster, Offset, Record};

const TOPIC: &str = "polled";

async fn three_brokers(dir: &std::path::Path) -> (LocalCluster, Client) {
    let cluster = crate::local_cluster(3, dir, TOPIC, 1, |_| {}).await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    (cluster, client)
}

fn waiting(max_wait: Duration, min_bytes: u32) -> FetchOptions {
    let mut options = FetchOptions::default();
    options.max_wait = max_wait;
    options.min_bytes = min_bytes;
    options
}

/// A fetch from offset 0 waiting up to 30 s for `min_bytes`, on a task of its own.
fn spawn_poll(
    client: &std::sync::Arc<Client>,
    min_bytes: u32,
) -> tokio::task::JoinHandle<replog::Result<replog::Fetched>> {
    let client = std::sync::Arc::clone(client);
    tokio::spawn(async move {
        let options = waiting(Duration::from_secs(30), min_bytes);
        client.fetch_with(TOPIC, 0, Offset(0), &options).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_at_the_end_of_the_log_waits_for_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = three_brokers(dir.path()).await;
    let client = std::sync::Arc::new(client);
    // Nothing to read yet: the fetch waits (30 s at most), then the write's commit wakes it.
    let started = Instant::now();
    let poll = spawn_poll(&client, 1);
    // The time an empty fetch is given to answer when it must not: that it waits is checked.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "an empty fetch waits for records");
    client
        .send(TOPIC, 0, &[Record::new("wakes it")])
        .await
        .unwrap();
    let fetched = poll.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "woken by the commit, not by its deadline"
    );
    let values: Vec<Vec<u8>> = fetched
        .batches
        .iter()
        .flat_map(|b| b.records().map(|(_, r)| r.value.to_vec()))
        .collect();
    assert_eq!(values, vec![b"wakes it".to_vec()]);
    assert_eq!(fetched.high_watermark, Offset(1));
    assert_eq!(fetched.log_start, Offset(0));

    // With nothing new, it answers empty once its wait is over, with the marks.
    let fetched = client
        .fetch_with(TOPIC, 0, Offset(1), &waiting(Duration::from_millis(200), 1))
        .await
        .unwrap();
    assert!(fetched.batches.is_empty());
    assert_eq!(fetched.high_watermark, Offset(1));
    drop(client);
    cluster.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waits_until_min_bytes_are_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = three_brokers(dir.path()).await;
    let client = std::sync::Arc::new(client);
    let started = Instant::now();
    let poll = spawn_poll(&client, 1500);
    client
        .send(TOPIC, 0, &[Record::new(vec![1u8; 1000])])
        .await
        .unwrap();
    // The time the fetch is given to answer when it must not: that it waits is checked.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "1000 bytes are not the 1500 asked for");
    client
        .send(TOPIC, 0, &[Record::new(vec![2u8; 1000])])
        .await
        .unwrap();
    let fetched = poll.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "woken by the commit that completes min_bytes, not by its deadline"
    );
    let count: usize = fetched.batches.iter().map(|b| b.records().count()).sum();
    assert_eq!(count, 2);
    assert_eq!(fetched.high_watermark, Offset(2));
    // A follower answers with its own marks; a fetch from an offset past them is refused.
    let follower = cluster
        .nodes()
        .find(|n| n.status(TOPIC, 0).unwrap().leader != Some(n.id()))
        .unwrap()
        .addr();
    let mut from_follower = waiting(Duration::from_secs(10), 1);
    from_follower.replica = Some(follower.into());
    let fetched = client
        .fetch_with(TOPIC, 0, Offset(1), &from_follower)
        .await
        .unwrap();
    assert_eq!(fetched.high_watermark, Offset(2));
    assert!(
        client
            .fetch_with(TOPIC, 0, Offset(5), &from_follower)
            .await
            .is_err()
    );
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A long poll never outlives its broker: shutdown ends it (the fetch answers), and the broker
/// restarts in the same process at once. Before, the waiting request kept the replica (and
/// its directory lock) alive up to its whole wait, and the restart failed with `Locked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_long_poll_and_the_broker_restarts_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = crate::local_cluster(1, dir.path(), TOPIC, 1, |_| {}).await;
    let client = std::sync::Arc::new(
        Client::connect(&cluster.addrs(), ClientConfig::default())
            .await
            .unwrap(),
    );
    let poll = {
        let client = std::sync::Arc::clone(&client);
        tokio::spawn(async move {
            let options = waiting(Duration::from_secs(60), 1);
            client.fetch_with(TOPIC, 0, Offset(0), &options).await
        })
    };
    // Time for the fetch to reach the broker and park there: nothing outside the broker shows
    // a parked fetch, so this one sleep stays (were it short, the fetch would end at once on
    // the stopped broker, and the test would pass without checking its subject).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "the long poll waits");
    cluster.stop(1).await.unwrap();
    cluster.restart(1).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(30), poll)
        .await
        .expect("the long poll ended with its broker");
    drop(client);
    cluster.shutdown().await.unwrap();
}
