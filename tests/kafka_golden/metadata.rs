//! Metadata (1 to 12): the broker's Kafka address, each topic asked for with its partitions'
//! leader, leader epoch (the Raft term), replicas and in-sync replicas, and the topics that do
//! not exist (UNKNOWN_TOPIC_OR_PARTITION) or cannot (INVALID_TOPIC_EXCEPTION) answered with
//! their error.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse};

use crate::{Broker, Golden, TOPIC, TOPIC_PARTITIONS, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::Metadata, &[1, 12])];

/// A name no topic has, and one no topic can have.
const UNKNOWN: &str = "no.such.topic";
const INVALID: &str = "not a topic name!";

/// The broker's answer for itself: broker 1 at its Kafka address, named controller (replog
/// has no controller; the answering broker stands in), cluster id "replog".
pub(crate) fn brokers(broker: &Broker) -> MetadataResponse {
    MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(s(&broker.kafka.ip().to_string()))
                .with_port(i32::from(broker.kafka.port())),
        ])
        .with_cluster_id(Some(s("replog")))
        .with_controller_id(BrokerId(1))
}

/// [`TOPIC`]'s entry: every partition led by broker 1, its only replica, in sync, at the
/// partition's term.
pub(crate) fn golden_topic(broker: &Broker) -> MetadataResponseTopic {
    led_topic(broker, TOPIC, TOPIC_PARTITIONS)
        // A configured topic's catalog id is 0.
        .with_topic_id(crate::topic_uuid(TOPIC, 0))
}

/// The entry of `name`, of `partitions` partitions, each led by broker 1, its only replica
/// (without its id).
fn led_topic(broker: &Broker, name: &str, partitions: u32) -> MetadataResponseTopic {
    let partitions = (0..partitions)
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(i32::try_from(p).unwrap())
                .with_leader_id(BrokerId(1))
                .with_leader_epoch(broker.term(name, p))
                .with_replica_nodes(vec![BrokerId(1)])
                .with_isr_nodes(vec![BrokerId(1)])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic(name)))
        .with_partitions(partitions)
}

fn absent(name: &str, error_code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic(name)))
        .with_error_code(error_code)
}

/// The topics asked for are answered sorted by name, each found topic with its partitions,
/// the others with their error and no partitions; no topic id (replog's topics have none),
/// no authorized operations (not asked for). (A broker that creates no topics by itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_the_broker_the_topics_partitions_and_why_a_topic_is_missing() {
    let mut broker = Broker::start_configured(1, |c| c.auto_create_topics = false).await;
    for &v in versions(GOLDEN, ApiKey::Metadata) {
        let asked = [TOPIC, UNKNOWN, INVALID]
            .iter()
            .map(|n| MetadataRequestTopic::default().with_name(Some(topic(n))))
            .collect();
        let request = MetadataRequest::default().with_topics(Some(asked));
        let answer = broker.exchange(ApiKey::Metadata, v, &request).await;
        let expected = brokers(&broker).with_topics(vec![
            golden_topic(&broker),
            absent(UNKNOWN, 3),
            absent(INVALID, 17),
        ]);
        broker.assert_answer(ApiKey::Metadata, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// A topic asked for that does not exist is created where the request allows it (always
/// before version 4), with the broker's defaults (`num_partitions`), and answered as any
/// topic once its leader is elected; not where the request forbids it (from version 4), nor
/// a name starting with `__` or one no topic can have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_creates_a_missing_topic_where_allowed() {
    let mut broker = Broker::start_configured(1, |c| c.num_partitions = 2).await;
    for &v in versions(GOLDEN, ApiKey::Metadata) {
        let made = format!("made.by.metadata.v{v}");
        let ask = |names: &[&str], allow: bool| {
            let asked = names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic(n))))
                .collect();
            MetadataRequest::default()
                .with_topics(Some(asked))
                .with_allow_auto_topic_creation(allow)
        };
        if v >= 4 {
            let answer = broker
                .exchange(ApiKey::Metadata, v, &ask(&[&made], false))
                .await;
            let expected = brokers(&broker).with_topics(vec![absent(&made, 3)]);
            broker.assert_answer(ApiKey::Metadata, v, &answer, &expected);
        }
        broker
            .exchange(
                ApiKey::Metadata,
                v,
                &ask(&[&made, "__internal", INVALID], true),
            )
            .await;
        broker
            .cluster()
            .wait_for_leaders(&made, 2, std::time::Duration::from_secs(20))
            .await
            .unwrap();
        let answer = broker
            .exchange(
                ApiKey::Metadata,
                v,
                &ask(&[&made, "__internal", INVALID], true),
            )
            .await;
        // Its id (from version 10): derived from its catalog id, which the test does not
        // know; the answer's is checked against the derivation.
        let decoded: MetadataResponse = broker.decode(ApiKey::Metadata, v, &answer);
        let id = decoded.topics[1].topic_id;
        if v >= 10 {
            assert!(
                (1..10_000).any(|n| crate::topic_uuid(&made, n) == id),
                "{id} is not the topic's derived id"
            );
        }
        let expected = brokers(&broker).with_topics(vec![
            absent("__internal", 17),
            led_topic(&broker, &made, 2).with_topic_id(id),
            absent(INVALID, 17),
        ]);
        broker.assert_answer(ApiKey::Metadata, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// All topics (a null list, or from version 1 an empty one, as clients ask): the topics that
/// exist, replog's own (`__`) ones left out until the offsets topic is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_all_topics_lists_the_clients_topics() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::Metadata) {
        let request = MetadataRequest::default().with_topics(None);
        let answer = broker.exchange(ApiKey::Metadata, v, &request).await;
        let expected = brokers(&broker).with_topics(vec![golden_topic(&broker)]);
        broker.assert_answer(ApiKey::Metadata, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// An empty list of topics (from version 1; a null list asks for all) asks for none: the
/// answer names the brokers only, as a client asks when it wants only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_of_an_empty_topic_list_names_only_the_brokers() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::Metadata) {
        let request = MetadataRequest::default().with_topics(Some(Vec::new()));
        let answer = broker.exchange(ApiKey::Metadata, v, &request).await;
        broker.assert_answer(ApiKey::Metadata, v, &answer, &brokers(&broker));
    }
    broker.shutdown().await;
}
