//! Kafka's clients delete consumer groups: kafka-python's `KafkaAdminClient` and
//! confluent-kafka's `AdminClient.delete_consumer_groups`, against three `replog node`
//! processes. A group is refused (NON_EMPTY_GROUP) while a consumer is in it, deleted with its
//! committed offsets once the consumer left, and not found after.

use std::sync::Arc;
use std::time::Duration;

use replog::{Consumer, ConsumerConfig, Offset, Record, StartAt};

use crate::kafka::*;
use crate::kafka_python::{python, python_clients};
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_python_clients_delete_a_group_once_its_consumer_left() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = Arc::new(connect(&addrs).await);
    client.create_topic("doomed", 1, 3).await.unwrap();
    let records: Vec<Record> = (0..10).map(|i| Record::new(format!("r{i}"))).collect();
    client.send("doomed", 0, &records).await.unwrap();
    for script in ["kafka_python.py", "confluent_kafka_cli.py"] {
        let group = format!("doomed-by-{script}");
        let at = kafka[1].to_string();
        let delete = async || {
            let args = vec!["delete-group".to_string(), at.clone(), group.clone()];
            let (ok, out, err) = python(script, args).await;
            assert!(ok, "{script}: {err}");
            out.trim().to_string()
        };
        let mut config = ConsumerConfig::default();
        config.group_id = Some(group.clone());
        config.session_timeout = Duration::from_secs(30);
        config.auto_offset_reset = StartAt::Beginning;
        config.auto_commit_interval = None;
        let mut member = Consumer::new(Arc::clone(&client), config);
        member.subscribe(&["doomed"]).unwrap();
        wait_until(
            Duration::from_secs(30),
            "the consumer in its group",
            async || {
                member.poll(Duration::from_millis(100)).await.unwrap();
                member.generation().is_some()
            },
        )
        .await;
        member
            .commit_offsets(&[("doomed", 0, Offset(4))])
            .await
            .unwrap();
        assert_eq!(delete().await, "NON_EMPTY_GROUP", "{script}");
        member.close().await.unwrap();
        assert_eq!(delete().await, "OK", "{script}");
        assert!(client.committed_offsets(&group).await.unwrap().is_empty());
        assert_eq!(client.describe_group(&group).await.unwrap().state, "Dead");
        assert_eq!(delete().await, "GROUP_ID_NOT_FOUND", "{script}");
    }
    drop(client);
    drop(brokers);
}
