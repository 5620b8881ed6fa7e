//! Metrics: a `replog node` serves Prometheus' text format on
//! `--metrics-listen`, and a scrape of the leader shows a stopped follower's lag rise.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig, Record};

use crate::support::wait_until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One scrape of `addr`: the body of `GET /metrics`.
async fn scrape(addr: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("a scrape answered in time")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The value of the sample of `name` whose labels include every one of `labels`.
fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_of_the_leader_shows_a_stopped_followers_lag_rise() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = crate::process_addrs(3);
    let metrics = crate::process_addrs(3);
    let kafka = crate::process_addrs(3);
    let mut brokers: Vec<Option<crate::Broker>> = (1..=3u64)
        .map(|id| {
            let listen = metrics[id as usize - 1].to_string();
            let kafka = kafka[id as usize - 1].to_string();
            Some(crate::spawn_broker_with(
                id,
                &addrs,
                dir.path(),
                true,
                &["--metrics-listen", &listen, "--kafka-listen", &kafka],
            ))
        })
        .collect();
    // One deadline for the start, the election and the first scrape.
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = wait_until(deadline, "brokers to start", async || {
        Client::connect(&addrs, ClientConfig::default()).await
    })
    .await;
    let leader = wait_until(deadline, "a leader", async || {
        client.describe(crate::TOPIC).await.ok()?[0].leader
    })
    .await;
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = metrics[leader as usize - 1];
    // A Kafka client's Metadata request, counted by API.
    let (_, _): (usize, kafka_protocol::messages::MetadataResponse) = crate::kafka::kafka_call(
        kafka[leader as usize - 1],
        kafka_protocol::messages::ApiKey::Metadata,
        9,
        &kafka_protocol::messages::MetadataRequest::default(),
    )
    .await;
    let lag_labels = [
        format!("topic=\"{}\"", crate::TOPIC),
        "partition=\"0\"".to_string(),
        format!("follower=\"{follower}\""),
    ];
    let lag_labels: Vec<&str> = lag_labels.iter().map(String::as_str).collect();
    let lag = |body: &str| sample(body, "replog_follower_lag_entries", &lag_labels);
    client
        .send(crate::TOPIC, 0, &[Record::new("before")])
        .await
        .unwrap();
    // Caught up: the gauges are set every second.
    let caught_up = wait_until(deadline, "a lag gauge at 0", async || {
        let body = scrape(at).await;
        if lag(&body) == Some(0.0) {
            Ok(body)
        } else {
            Err(format!("\n{body}"))
        }
    })
    .await;
    assert_eq!(
        sample(
            &caught_up,
            "replog_partition_leader",
            &["partition=\"0\"", "topic="]
        ),
        Some(1.0)
    );
    assert!(
        sample(&caught_up, "replog_requests_total", &["op=\"produce\""]).is_some_and(|n| n >= 1.0),
        "{caught_up}"
    );
    assert!(
        caught_up.contains("replog_request_duration_seconds_bucket"),
        "{caught_up}"
    );
    assert_eq!(
        sample(
            &caught_up,
            "replog_kafka_requests_total",
            &["api=\"Metadata\""]
        ),
        Some(1.0),
        "{caught_up}"
    );
    assert!(
        caught_up.contains("replog_kafka_request_duration_seconds_bucket{api=\"Metadata\""),
        "{caught_up}"
    );

    // The follower stops; the leader goes on writing: its lag rises with every batch.
    drop(brokers[follower as usize - 1].take());
    let mut seen = Vec::new();
    for round in 1..=3u32 {
        for i in 0..20 {
            client
                .send(
                    crate::TOPIC,
                    0,
                    &[Record::new(format!("while-down-{round}-{i}"))],
                )
                .await
                .unwrap();
        }
        let what = format!("a lag of {} after {} batches", round * 20, round * 20);
        let value = wait_until(Duration::from_secs(10), &what, async || {
            let v = lag(&scrape(at).await).unwrap_or(0.0);
            if v >= f64::from(round * 20) {
                Ok(v)
            } else {
                Err(format!("lag {v}"))
            }
        })
        .await;
        seen.push(value);
    }
    println!("a stopped follower's lag in entries, scraped: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let body = scrape(at).await;
    assert!(
        sample(&body, "replog_follower_last_ack_seconds", &lag_labels).is_some_and(|s| s > 0.5),
        "{body}"
    );
    assert!(
        sample(&body, "replog_follower_lag_bytes", &lag_labels).is_some_and(|b| b > 0.0),
        "{body}"
    );
    drop(client);
    drop(brokers);
}
