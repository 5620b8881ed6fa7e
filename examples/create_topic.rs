//! How soon a new topic's partition has a leader and takes a write.
//!
//! `cargo run --release --example create_topic [TOPICS]` (default 30) starts three brokers in
//! this process and creates `TOPICS` topics of one partition with three replicas, one after
//! another. For each it times, from the moment `Client::create_topic` is called (it returns
//! once the topic is committed and its partition led), how long until Metadata
//! (`Client::describe`) names the partition's leader, and then how long a first record takes
//! to be acknowledged by a new client. It prints the median and the slowest of each.
//!
//! Then the same through the Kafka door, with confluent-kafka's AdminClient
//! (`examples/kafka_clients/create_latency.py`; skipped if Python or the package is missing):
//! from each CreateTopics answer (Kafka's does not wait for leaders) to a Metadata answer
//! that names the partition's leader.
//!
//! Last, five times: three brokers started with a configured topic (`NodeConfig::topics`), and
//! the time from `LocalCluster::start` returning to a first record acknowledged.

use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, LocalCluster, Record};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topics: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(30);
    let dir = tempfile::tempdir()?;
    let cluster = LocalCluster::start(3, dir.path(), |c| {
        c.kafka_listen = Some(([127, 0, 0, 1], 0).into());
    })
    .await?;
    let addrs = cluster.addrs();
    let admin = Client::connect(&addrs, ClientConfig::default()).await?;
    let (mut led, mut written) = (Vec::new(), Vec::new());
    for n in 0..topics {
        let topic = format!("new-{n}");
        let created = Instant::now();
        admin.create_topic(&topic, 1, 3).await?;
        let deadline = created + Duration::from_secs(30);
        // Metadata as a client sees it: asked again until it names a leader (no sleep, as a
        // client retrying LEADER_NOT_AVAILABLE at once would; bounded by the deadline).
        loop {
            if admin.describe(&topic).await?[0].leader.is_some() {
                led.push(created.elapsed());
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{topic} has no leader after 30 s").into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A first write, by a client that has not asked for the topic's metadata yet.
        let created = Instant::now();
        let writer = Client::connect(&addrs, ClientConfig::default()).await?;
        writer
            .send(&topic, 0, &[Record::new(b"first".to_vec())])
            .await?;
        written.push(created.elapsed());
    }
    let show = |what: &str, mut times: Vec<Duration>| {
        times.sort();
        println!(
            "{what}: median {:.1} ms, slowest {:.1} ms ({} tries)",
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3,
            times.len()
        );
    };
    show("created -> leader in Metadata", led);
    show("leader known -> first write acknowledged", written);
    // The Kafka door.
    let kafka = cluster
        .nodes()
        .filter_map(|n| n.kafka_addr())
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kafka_clients/create_latency.py"
    );
    let out = std::process::Command::new("python3")
        .args([script, &kafka, &topics.to_string()])
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let millis: Vec<f64> = text
                .trim()
                .trim_matches(['[', ']'])
                .split(',')
                .filter_map(|t| t.trim().parse().ok())
                .collect();
            let times = millis
                .iter()
                .map(|ms| Duration::from_secs_f64(ms / 1e3))
                .collect();
            show(
                "Kafka CreateTopics answered -> leader in Kafka Metadata",
                times,
            );
        }
        _ => println!("Kafka door: skipped (python3 with confluent-kafka needed)"),
    }
    cluster.shutdown().await?;
    let mut first = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir()?;
        let cluster = LocalCluster::start(3, dir.path(), |c| {
            c.topics = vec![("configured".into(), 1)];
        })
        .await?;
        let started = Instant::now();
        let client = Client::connect(&cluster.addrs(), ClientConfig::default()).await?;
        client
            .send("configured", 0, &[Record::new(b"first".to_vec())])
            .await?;
        first.push(started.elapsed());
        cluster.shutdown().await?;
    }
    show(
        "started with a configured topic -> first write acknowledged",
        first,
    );
    Ok(())
}
