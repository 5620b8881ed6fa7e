//! `Consumer`: every partition of a topic, each record once and in
//! order, seek, pause and resume, lag, the end of the log, leader changes, and a stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::support::wait_until;
use replog::{
    Client, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Offset, Record, StartAt,
};

const TOPIC: &str = "consumed";

/// Polls until `n` records came (at most 30 s), as many polls in a row as find records.
pub(crate) async fn poll_n(consumer: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    wait_until(
        Duration::from_secs(30),
        &format!("{n} records"),
        async || {
            // Bounded: each turn takes at least one record, or ends this check.
            while out.len() < n {
                let got = consumer.poll(Duration::from_millis(500)).await.unwrap();
                if got.is_empty() {
                    break;
                }
                out.extend(got);
            }
            if out.len() >= n {
                Ok(())
            } else {
                Err(format!("{} of {n} records", out.len()))
            }
        },
    )
    .await;
    out
}

/// Three brokers with `TOPIC` in `partitions` partitions, and a client of theirs.
async fn cluster_and_client(
    dir: &std::path::Path,
    partitions: u32,
) -> (replog::LocalCluster, Arc<Client>) {
    let cluster = crate::local_cluster(3, dir, TOPIC, partitions, |_| {}).await;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    (cluster, Arc::new(client))
}

/// A poll of 300 ms returns nothing.
async fn assert_nothing_more(consumer: &mut Consumer, why: &str) {
    let got = consumer.poll(Duration::from_millis(300)).await.unwrap();
    assert!(got.is_empty(), "{why}: got {} records", got.len());
}

fn values(records: &[ConsumerRecord], partition: u32) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.partition == partition)
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

async fn write(client: &Client, partition: u32, range: std::ops::Range<u32>) {
    for i in range {
        client
            .send(TOPIC, partition, &[Record::new(format!("{partition}-{i}"))])
            .await
            .unwrap();
    }
}

fn expected(partition: u32, range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("{partition}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_reads_every_partition_once_in_order_and_seeks_pauses_and_follows_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, client) = cluster_and_client(dir.path(), 2).await;
    write(&client, 0, 0..30).await;
    write(&client, 1, 0..30).await;
    // A consumer at the end sees only what comes after it started.
    let mut late = Consumer::new(Arc::clone(&client), ConsumerConfig::default());
    late.assign(TOPIC, None, StartAt::End).await.unwrap();
    assert_eq!(late.position(TOPIC, 0), Some(Offset(30)));

    let mut consumer = Consumer::new(Arc::clone(&client), ConsumerConfig::default());
    consumer
        .assign(TOPIC, None, StartAt::Beginning)
        .await
        .unwrap();
    let got = poll_n(&mut consumer, 60).await;
    assert_eq!(values(&got, 0), expected(0, 0..30));
    assert_eq!(values(&got, 1), expected(1, 0..30));
    assert_eq!(consumer.position(TOPIC, 1), Some(Offset(30)));
    assert_eq!(consumer.lag(TOPIC, 0), Some(0));

    // Seek back on one partition.
    consumer
        .seek(TOPIC, 0, StartAt::Offset(Offset(25)))
        .await
        .unwrap();
    let got = poll_n(&mut consumer, 5).await;
    assert_eq!(values(&got, 0), expected(0, 25..30));

    // A paused partition is not fetched; its records wait until it resumes.
    consumer.pause(TOPIC, 1);
    write(&client, 1, 30..35).await;
    write(&client, 0, 30..32).await;
    let got = poll_n(&mut consumer, 2).await;
    assert_eq!(values(&got, 0), expected(0, 30..32));
    assert!(values(&got, 1).is_empty());
    assert_nothing_more(&mut consumer, "nothing from the paused partition").await;
    consumer.resume(TOPIC, 1);
    let got = poll_n(&mut consumer, 5).await;
    assert_eq!(values(&got, 1), expected(1, 30..35));

    // The leader of partition 0 goes: the consumer reads on from the next one.
    let leaders = cluster
        .wait_for_leaders(TOPIC, 2, Duration::from_secs(20))
        .await
        .unwrap();
    cluster.stop(leaders[0]).await.unwrap();
    write(&client, 0, 32..40).await;
    let got = poll_n(&mut consumer, 8).await;
    assert_eq!(values(&got, 0), expected(0, 32..40));

    // The late consumer got exactly the records written after it started.
    let got = poll_n(&mut late, 15).await;
    assert_eq!(values(&got, 0), expected(0, 30..40));
    assert_eq!(values(&got, 1), expected(1, 30..35));

    // As a stream.
    let mut stream = Box::pin(consumer.into_stream());
    write(&client, 1, 35..37).await;
    let mut by_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        by_partition
            .entry(r.partition)
            .or_default()
            .push(r.offset.get());
    }
    assert_eq!(by_partition, BTreeMap::from([(1, vec![35, 36])]));
    drop(stream);
    drop(late);
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// A partition read over many answers, one batch each (`max_bytes` of 1: an answer holds its
/// first batch whatever its size), through a buffer that holds about one batch: the next
/// answer is fetched ahead while there is room, and not while an answer's records wait for
/// it. Every record comes once and in order, also after a seek back in the middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_fetching_ahead_through_a_small_buffer_returns_each_record_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = cluster_and_client(dir.path(), 2).await;
    let (batches, per_batch) = (40u32, 50u32);
    for b in 0..batches {
        let records: Vec<Record> = expected(0, b * per_batch..(b + 1) * per_batch)
            .into_iter()
            .map(Record::new)
            .collect();
        client.send(TOPIC, 0, &records).await.unwrap();
    }
    let total = batches * per_batch;
    let mut config = ConsumerConfig::default();
    config.max_bytes = 1;
    config.buffered_records = per_batch as usize + 10;
    config.max_poll_records = 7;
    let mut consumer = Consumer::new(Arc::clone(&client), config);
    consumer
        .assign(TOPIC, Some(&[0]), StartAt::Beginning)
        .await
        .unwrap();
    let got = poll_n(&mut consumer, total as usize / 2).await;
    assert_eq!(values(&got, 0), expected(0, 0..got.len() as u32));
    consumer
        .seek(TOPIC, 0, StartAt::Offset(Offset(300)))
        .await
        .unwrap();
    let got = poll_n(&mut consumer, (total - 300) as usize).await;
    assert_eq!(values(&got, 0), expected(0, 300..total));
    assert_nothing_more(&mut consumer, "nothing past the end").await;
    assert_eq!(consumer.position(TOPIC, 0), Some(Offset(u64::from(total))));
    drop(consumer);
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// `StartAt::Timestamp`: a consumer starts at the first record written at or after a time,
/// found by the leader without scanning (and at the end when every record is older).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_starts_at_the_first_record_written_at_or_after_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, client) = cluster_and_client(dir.path(), 1).await;
    write(&client, 0, 0..20).await;
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // A time after every record written so far, and before every one written next.
    let written = now_ms();
    let what = "the clock to move on";
    let between = wait_until(Duration::from_secs(5), what, async || {
        Some(now_ms()).filter(|t| *t > written)
    })
    .await;
    wait_until(Duration::from_secs(5), what, async || now_ms() > between).await;
    write(&client, 0, 20..30).await;
    assert_eq!(
        client
            .offset_for_timestamp(TOPIC, 0, between)
            .await
            .unwrap(),
        Some(Offset(20))
    );
    assert_eq!(
        client.offset_for_timestamp(TOPIC, 0, 0).await.unwrap(),
        Some(Offset(0))
    );
    let later = now_ms() + 60_000;
    assert_eq!(
        client.offset_for_timestamp(TOPIC, 0, later).await.unwrap(),
        None
    );
    let mut consumer = Consumer::new(Arc::clone(&client), ConsumerConfig::default());
    consumer
        .assign(TOPIC, None, StartAt::Timestamp(between))
        .await
        .unwrap();
    assert_eq!(consumer.position(TOPIC, 0), Some(Offset(20)));
    let got = poll_n(&mut consumer, 10).await;
    assert_eq!(values(&got, 0), expected(0, 20..30));
    consumer
        .seek(TOPIC, 0, StartAt::Timestamp(later))
        .await
        .unwrap();
    assert_eq!(consumer.position(TOPIC, 0), Some(Offset(30)));
    drop(consumer);
    drop(client);
    cluster.shutdown().await.unwrap();
}

/// `Client::wait_ready`: resolves once every partition of a topic has a leader (brokers just
/// started have none), after which a write is taken at once; an unknown topic times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_waits_until_a_topic_can_take_writes() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = replog::LocalCluster::start(3, dir.path(), |c| {
        c.topics = vec![(TOPIC.into(), 3)];
        c.heartbeat_interval = Duration::from_millis(100);
        c.election_timeout = Duration::from_millis(crate::ELECTION_TIMEOUT_MS);
    })
    .await
    .unwrap();
    let client = Client::connect(&cluster.addrs(), ClientConfig::default())
        .await
        .unwrap();
    client
        .wait_ready(TOPIC, Duration::from_secs(30))
        .await
        .unwrap();
    for d in client.describe(TOPIC).await.unwrap() {
        assert!(d.leader.is_some(), "{d}");
    }
    let mut config = ClientConfig::default();
    config.delivery_timeout = Duration::from_millis(2000);
    let quick = Client::connect(&cluster.addrs(), config).await.unwrap();
    quick
        .send(TOPIC, 2, &[Record::new("at once")])
        .await
        .unwrap();
    let unknown = client.wait_ready("nope", Duration::from_millis(300)).await;
    assert!(
        matches!(unknown, Err(replog::Error::Timeout { .. })),
        "{unknown:?}"
    );
    drop((client, quick));
    cluster.shutdown().await.unwrap();
}
