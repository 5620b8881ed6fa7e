//! Log compaction on a four-broker cluster: a compacted topic of three replicas written with
//! 1,000 keys × 100 versions while a follower is down (it comes back to a leader that
//! compacted what it lacks) and then with the leader stopped, and a replica then moved to the
//! fourth broker (it copies the compacted log); afterwards every replica serves the same
//! latest value of each key, its log within twice its live records, and kcat and kafka-python
//! read it from the beginning, also a topic kcat itself wrote, compressed, as Kafka batches,
//! with tombstones.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use replog::{ClientConfig, LocalCluster, Record, TopicConfigs};

use crate::kafka::{kcat, run};
use crate::support::{connect, local_cluster, wait_until};

const TOPIC: &str = "table";
const KEYS: u32 = 1_000;
const VERSIONS: u32 = 100;
/// Records per produce request.
const BATCH: u32 = 100;

fn value(key: u32, version: u32) -> String {
    format!("key-{key:04}-version-{version:03}-{}", "x".repeat(40))
}

/// Every record a broker's replica of the partition holds, in offset order: (offset, key,
/// value), and the bytes of its frames (headers and payloads).
fn replica_records(node: &replog::Node, topic: &str) -> (Vec<(u64, String, String)>, u64) {
    let status = node.status(topic, 0).unwrap();
    let mut next = status.log_start;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    // Bounded by the high watermark: each read moves `next` past at least one batch.
    for _ in 0..1_000_000 {
        if next >= status.high_watermark {
            break;
        }
        let batches = node.read(topic, 0, next, 1 << 20).unwrap();
        let Some(last) = batches.last() else { break };
        next = last.next_offset();
        for b in &batches {
            bytes += b.size_bytes() as u64;
            for (offset, r) in b.records() {
                if offset < status.log_start || offset >= status.high_watermark {
                    continue;
                }
                let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                out.push((
                    offset.get(),
                    key,
                    String::from_utf8(r.value.to_vec()).unwrap(),
                ));
            }
        }
    }
    (out, bytes)
}

/// The latest value of each key, in `records`' order.
fn latest(records: &[(u64, String, String)]) -> BTreeMap<String, String> {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

async fn write_versions(client: &replog::Client, versions: std::ops::Range<u32>) {
    for version in versions {
        for first in (0..KEYS).step_by(BATCH as usize) {
            let records: Vec<Record> = (first..first + BATCH)
                .map(|k| Record::new(value(k, version)).with_key(format!("key-{k:04}")))
                .collect();
            client.send(TOPIC, 0, &records).await.unwrap();
        }
    }
}

fn leader(cluster: &LocalCluster, topic: &str) -> Option<u64> {
    cluster
        .nodes()
        .find_map(|n| n.status(topic, 0).ok().and_then(|s| s.leader))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_keeps_each_keys_latest_value_through_failures() {
    let dir = tempfile::tempdir().unwrap();
    // Four brokers for a topic of three replicas: the fourth gets one by reassignment.
    let kafka: Vec<SocketAddr> = crate::process_addrs(4);
    let listen = kafka.clone();
    let mut cluster = local_cluster(4, dir.path(), "other", 1, move |c| {
        // Compaction runs when the test asks.
        c.retention_check_interval = Duration::ZERO;
        c.log.record_bytes_max = 16 << 10;
        c.log.batch_bytes_max = 64 << 10;
        c.kafka_listen = Some(listen[usize::try_from(c.id).unwrap() - 1]);
    })
    .await;
    let addrs = cluster.addrs();
    let client = connect(&addrs, ClientConfig::default(), Duration::from_secs(20)).await;
    let configs = TopicConfigs::from_pairs([
        ("cleanup.policy", "compact"),
        ("segment.bytes", "131072"),
        ("segment.ms", "500"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ])
    .unwrap();
    client
        .create_topic_with_configs(TOPIC, 1, 3, &configs)
        .await
        .unwrap();
    let first_leader = wait_until(Duration::from_secs(20), "a leader", async || {
        leader(&cluster, TOPIC)
    })
    .await;
    let replicas = client.describe(TOPIC).await.unwrap()[0].replicas.clone();
    let follower = *replicas.iter().find(|id| **id != first_leader).unwrap();

    // Half the versions while a follower is down; the others compact what it lacks.
    cluster.stop(follower).await.unwrap();
    write_versions(&client, 0..VERSIONS / 2).await;
    let mut compacted = 0;
    for node in cluster.nodes() {
        compacted += node.compact().await.unwrap().segments;
    }
    assert!(compacted > 0, "the live replicas compacted");
    cluster.restart(follower).await.unwrap();
    let end = cluster
        .node(first_leader)
        .unwrap()
        .status(TOPIC, 0)
        .unwrap()
        .log_end;
    wait_until(
        Duration::from_secs(60),
        "the follower to catch up",
        async || {
            let s = cluster.node(follower)?.status(TOPIC, 0).ok()?;
            (s.high_watermark >= end).then_some(())
        },
    )
    .await;

    // The other half with the first leader stopped.
    cluster.stop(first_leader).await.unwrap();
    write_versions(&client, VERSIONS / 2..VERSIONS).await;
    cluster.restart(first_leader).await.unwrap();
    let end = client.describe(TOPIC).await.unwrap()[0].high_watermark;

    // Every replica compacts; then a replica moves to the fourth broker, which copies the
    // compacted log from the leader.
    for node in cluster.nodes() {
        node.compact().await.unwrap();
    }
    let newcomer = (1..=4u64).find(|id| !replicas.contains(id)).unwrap();
    let mut moved: Vec<u64> = replicas
        .iter()
        .copied()
        .filter(|id| *id != follower)
        .collect();
    moved.push(newcomer);
    client.reassign_partition(TOPIC, 0, &moved).await.unwrap();

    // Every replica, once caught up and compacted, holds each key's latest value and not
    // much else.
    let want: BTreeMap<String, String> = (0..KEYS)
        .map(|k| (format!("key-{k:04}"), value(k, VERSIONS - 1)))
        .collect();
    // The live records as a compacted log stores them: each with its offset delta (4 bytes)
    // and its fixed fields (10), besides its key and value (FORMAT.md §4.1, §4.3).
    let live: u64 = want
        .iter()
        .map(|(k, v)| (4 + 10 + k.len() + v.len()) as u64)
        .sum();
    let mut sizes = Vec::new();
    for &id in &moved {
        let size = wait_until(
            Duration::from_secs(60),
            "a replica caught up and compacted",
            async || {
                let node = cluster.node(id)?;
                let s = node.status(TOPIC, 0).ok()?;
                if s.high_watermark < end {
                    return None;
                }
                node.enforce_retention().await.ok()?;
                let (records, bytes) = replica_records(node, TOPIC);
                (latest(&records) == want && bytes <= 2 * live).then_some(bytes)
            },
        )
        .await;
        sizes.push(size);
    }
    println!("live {live} bytes; replicas {sizes:?} bytes");

    // kcat reads it from the beginning through each broker: each key's latest value last.
    let Some(kcat) = kcat() else { return };
    for at in &kafka {
        let addr = at.to_string();
        let (ok, out, err) = tokio::task::spawn_blocking(move || {
            run(
                kcat,
                &[
                    "-C",
                    "-b",
                    &addr,
                    "-t",
                    TOPIC,
                    "-o",
                    "beginning",
                    "-e",
                    "-f",
                    "%k=%s\n",
                ],
                "",
            )
        })
        .await
        .unwrap();
        assert!(ok, "{err}");
        let read: BTreeMap<String, String> = out
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(read, want, "through {at}");
    }
    // kafka-python's consumer too, stepping over the batches compaction emptied.
    if let Some(read) = kafka_python_reads(kafka[1], TOPIC).await {
        assert_eq!(read, want);
    }
    kcat_writes_a_compacted_topic(kcat, &client, &cluster, &kafka).await;
}

/// Each key's last value as kafka-python's consumer reads `topic` from its beginning to its
/// end through `at` (`None` where the Python clients are not installed).
async fn kafka_python_reads(at: SocketAddr, topic: &str) -> Option<BTreeMap<String, String>> {
    if !crate::kafka_python::python_clients() {
        return None;
    }
    let (ok, out, err) =
        crate::kafka_python::python("compacted.py", vec![at.to_string(), topic.into()]).await;
    assert!(ok, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["position"], r["end"], "{r}");
    Some(serde_json::from_value(r["latest"].clone()).unwrap())
}

/// A topic kcat writes (gzip, so stored as Kafka's compressed batches), compacted, reads
/// back through kcat with each key's latest value and tombstoned keys gone once
/// `delete.retention.ms` passed.
async fn kcat_writes_a_compacted_topic(
    kcat: &'static str,
    client: &replog::Client,
    cluster: &LocalCluster,
    kafka: &[SocketAddr],
) {
    let topic = "kcat-table";
    let configs = TopicConfigs::from_pairs([
        ("cleanup.policy", "compact"),
        ("segment.ms", "200"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
    ])
    .unwrap();
    client
        .create_topic_with_configs(topic, 1, 3, &configs)
        .await
        .unwrap();
    let at = kafka[0].to_string();
    let mut input = String::new();
    for version in 0..20 {
        for k in 0..50 {
            input.push_str(&format!("k{k}:v{k}-{version}\n"));
        }
    }
    // Keys 0..10 deleted: a tombstone each (kcat's -Z writes an empty value as null).
    for k in 0..10 {
        input.push_str(&format!("k{k}:\n"));
    }
    let (ok, _, err) = tokio::task::spawn_blocking(move || {
        run(
            kcat,
            &[
                "-P", "-b", &at, "-t", topic, "-K:", "-Z", "-z", "gzip", "-p", "0",
            ],
            &input,
        )
    })
    .await
    .unwrap();
    assert!(ok, "{err}");
    let want: BTreeMap<String, String> = (10..50)
        .map(|k| (format!("k{k}"), format!("v{k}-19")))
        .collect();
    for at in kafka {
        let at = at.to_string();
        wait_until(
            Duration::from_secs(60),
            "kcat to read the compacted topic",
            async || {
                for node in cluster.nodes() {
                    node.enforce_retention().await.ok()?;
                }
                let at = at.clone();
                let (ok, out, _) = tokio::task::spawn_blocking(move || {
                    run(
                        kcat,
                        &[
                            "-C",
                            "-b",
                            &at,
                            "-t",
                            topic,
                            "-o",
                            "beginning",
                            "-e",
                            "-Z",
                            "-f",
                            "%o %k=%s\n",
                        ],
                        "",
                    )
                })
                .await
                .ok()?;
                if !ok {
                    return None;
                }
                let lines: Vec<&str> = out.lines().collect();
                let read: BTreeMap<String, String> = lines
                    .iter()
                    .filter_map(|l| l.split_once(' ')?.1.split_once('='))
                    .filter(|(_, v)| !v.is_empty() && *v != "NULL")
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                // Compacted: each live key once, tombstones and older versions gone (the
                // last segment written may still be whole on the first pass).
                (read == want && lines.len() == want.len()).then_some(())
            },
        )
        .await;
    }
    if let Some(read) = kafka_python_reads(kafka[2], topic).await {
        assert_eq!(read, want);
    }
}
