//! Topic configs with Kafka's own admin clients: kafka-python's and confluent-kafka's create
//! topics with configs through one `replog node` process, describe them through another,
//! change them with AlterConfigs and IncrementalAlterConfigs, and see a value out of range
//! refused and a compacted topic refuse a record without a key; grow topics (never shrink
//! them) with CreatePartitions, on the brokers they name too; and delete records.

use crate::kafka::{cluster, kcat, run};
use crate::kafka_python::{python, python_clients};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_admin_clients_create_describe_and_change_topic_configs() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_brokers, _addrs, kafka) = cluster(dir.path());
    let (ok, out, err) = python(
        "configs.py",
        vec![kafka[0].to_string(), kafka[1].to_string()],
    )
    .await;
    assert!(ok, "{out}{err}");
    println!("{out}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let c = &r["confluent"];
    assert_eq!(c["created"]["cleanup.policy"], "compact", "{r}");
    assert_eq!(c["created"]["retention.ms"], "1000", "{r}");
    assert_eq!(c["created"]["segment.ms"], "604800000", "{r}");
    // confluent-kafka's ConfigSource.DYNAMIC_TOPIC_CONFIG.
    assert_eq!(c["retention_source"], 1, "{r}");
    assert_eq!(c["keyless"], "INVALID_RECORD", "{r}");
    assert!(c["keyed"].is_null(), "{r}");
    assert_eq!(c["incremental"]["cleanup.policy"], "compact,delete", "{r}");
    assert_eq!(c["incremental"]["retention.ms"], "5000", "{r}");
    assert_eq!(c["bad_value"], "INVALID_CONFIG", "{r}");
    assert_eq!(c["after_bad"], "5000", "{r}");
    assert_eq!(c["partitions"], 3, "{r}");
    assert_eq!(c["shrink"], "INVALID_PARTITIONS", "{r}");
    assert_eq!(c["placed"], serde_json::json!([[3, 1], [2, 3]]), "{r}");
    assert_eq!(
        c["grown_placed"],
        serde_json::json!([[3, 1], [2, 3], [1, 2]]),
        "{r}"
    );
    assert_eq!(c["bad_assignment"], "INVALID_REPLICA_ASSIGNMENT", "{r}");
    // DeleteRecords up to offset 3 of 5, then to the end (-1).
    assert_eq!(c["deleted_to"], 3, "{r}");
    assert_eq!(c["deleted_all_to"], 5, "{r}");
    // A topic created again under its name has another id, and neither is Kafka's "none".
    let ids = c["ids"].as_array().unwrap();
    assert_ne!(ids[0], ids[1], "{r}");
    assert!(
        ids.iter().all(|i| i
            .as_str()
            .is_some_and(|s| !s.starts_with("AAAAAAAAAAAAAAAAAAAAAA"))),
        "{r}"
    );
    let k = &r["kafka_python"];
    assert_eq!(k["created"]["retention.ms"], "3000", "{r}");
    assert_eq!(k["created"]["segment.ms"], "600000", "{r}");
    assert_eq!(k["created"]["cleanup.policy"], "delete", "{r}");
    assert_eq!(k["altered"]["retention.ms"], "4000", "{r}");
    // kafka-python's AlterConfigs carries the topic's other keys along.
    assert_eq!(k["altered"]["segment.ms"], "600000", "{r}");
    assert_eq!(k["incremental"], "delete,compact", "{r}");
    assert_eq!(k["partitions"], 2, "{r}");
    assert_eq!(k["deleted_to"]["kp.trimmed-0"]["low_watermark"], 2, "{r}");
    assert_eq!(k["deleted_to"]["kp.trimmed-0"]["error_code"], 0, "{r}");
}

/// A newcomer's first `kcat -P -t new-topic`: the topic is created by the Metadata request
/// kcat makes (Kafka's `auto.create.topics.enable`, on by default), with the brokers'
/// defaults, and what kcat wrote reads back from another broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_creates_the_topic_it_produces_to() {
    let Some(kcat) = kcat() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_brokers, addrs, kafka) = cluster(dir.path());
    let (first, second) = (kafka[1].to_string(), kafka[2].to_string());
    crate::kafka::connect(&addrs).await;
    wait_until(
        std::time::Duration::from_secs(30),
        "kcat to list the brokers",
        async || {
            let first = first.clone();
            let (ok, out, err) =
                tokio::task::spawn_blocking(move || run(kcat, &["-L", "-b", &first], ""))
                    .await
                    .unwrap();
            if ok && out.contains("3 brokers") {
                Ok(())
            } else {
                Err(format!("{out}{err}"))
            }
        },
    )
    .await;
    let first = kafka[1].to_string();
    let produced = tokio::task::spawn_blocking(move || {
        run(
            kcat,
            &["-P", "-b", &first, "-t", "fresh.topic"],
            "one\ntwo\n",
        )
    })
    .await
    .unwrap();
    assert!(produced.0, "{produced:?}");
    let read = wait_until(
        std::time::Duration::from_secs(30),
        "kcat to read both",
        async || {
            let second = second.clone();
            let (ok, out, err) = tokio::task::spawn_blocking(move || {
                run(
                    kcat,
                    &[
                        "-C",
                        "-b",
                        &second,
                        "-t",
                        "fresh.topic",
                        "-o",
                        "beginning",
                        "-e",
                    ],
                    "",
                )
            })
            .await
            .unwrap();
            if ok && out.lines().count() == 2 {
                Ok(out)
            } else {
                Err(format!("{out}{err}"))
            }
        },
    )
    .await;
    assert_eq!(read, "one\ntwo\n");
}

/// A producer on a `message.timestamp.type=LogAppendTime` topic learns the broker's stamp
/// from the ProduceResponse (its `log_append_time_ms`): kafka-python's and confluent-kafka's
/// record metadata have the timestamp a consumer then reads, the broker's, not the one the
/// producer gave; on a CreateTime topic the answer's −1 leaves them the producer's own,
/// and a record stamped two hours ahead of the leader's clock is refused with
/// INVALID_TIMESTAMP (`message.timestamp.after.max.ms`, an hour by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_learn_the_brokers_log_append_time() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = crate::local_cluster(3, dir.path(), "other", 1, |c| {
        c.kafka_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    })
    .await;
    let kafka = cluster.node(1).unwrap().kafka_addr().unwrap().to_string();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (ok, out, err) = python("append_time.py", vec![kafka]).await;
    assert!(ok, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // Each client's codes for (LogAppendTime, CreateTime): kafka-python's are Kafka's,
    // confluent-kafka's are librdkafka's.
    for (client, log_append_time, create_time) in [("kafka_python", 1, 0), ("confluent", 2, 1)] {
        let stamped = &r["stamped"][client];
        let produced = stamped["produced"].as_i64().unwrap();
        assert!(produced >= before, "the broker's stamp: {r}");
        assert_eq!(stamped["read"], stamped["produced"], "{r}");
        assert_eq!(stamped["read_type"], log_append_time, "{r}");
        let created = &r["created"][client];
        assert_eq!(created["produced"], 1_000_000, "the record's own: {r}");
        assert_eq!(created["read"], 1_000_000, "{r}");
        assert_eq!(created["read_type"], create_time, "{r}");
    }
    // confluent-kafka's delivery report names the stamp's type too.
    assert_eq!(r["stamped"]["confluent"]["produced_type"], 2, "{r}");
    assert_eq!(r["created"]["confluent"]["produced_type"], 1, "{r}");
    assert_eq!(r["future"]["kafka_python"], "InvalidTimestampError", "{r}");
    assert_eq!(r["future"]["confluent"], "INVALID_TIMESTAMP", "{r}");
    cluster.shutdown().await.unwrap();
}
