//! The admin APIs: CreateTopics (2 to 7), DeleteTopics (1 to 6) and DescribeCluster (0 to 2),
//! with their refusals (a topic that exists, a name no topic can have, a manual assignment, a
//! config no topic can have, a topic that does not exist, an endpoint type replog does not
//! have).

use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::*;

use crate::{Broker, Golden, TOPIC, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::CreateTopics, &[2, 7]),
    (ApiKey::DeleteTopics, &[1, 6]),
    (ApiKey::CreatePartitions, &[0, 3]),
    (ApiKey::DescribeCluster, &[0, 2]),
];

fn creatable(name: &str, partitions: i32, factor: i16) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(factor)
}

/// A new topic's result: the crate's default empty message; from version 5 its configs, as
/// DescribeConfigs lists them (`retention.ms` set on it).
fn created(name: &str, partitions: i32, factor: i16) -> CreatableTopicResult {
    created_with(name, partitions, factor, &[("retention.ms", "1000")])
}

/// [`created`] with the configs `set` on it.
fn created_with(
    name: &str,
    partitions: i32,
    factor: i16,
    set: &[(&str, &str)],
) -> CreatableTopicResult {
    let configs = crate::configs::topic_configs(set)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(c.name)
                .with_value(c.value)
                .with_config_source(c.config_source)
        })
        .collect();
    CreatableTopicResult::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(factor)
        .with_configs(Some(configs))
}

fn refused(name: &str, error_code: i16, message: &str) -> CreatableTopicResult {
    CreatableTopicResult::default()
        .with_name(topic(name))
        .with_error_code(error_code)
        .with_error_message(Some(s(message)))
}

/// CreateTopics of a new topic (its partitions and replicas as asked, or the broker's
/// defaults for −1), and refusals; then DeleteTopics of it and of one that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_delete_topics_answer_each_topic() {
    let mut broker = Broker::start().await;
    let create = versions(GOLDEN, ApiKey::CreateTopics);
    let delete = versions(GOLDEN, ApiKey::DeleteTopics);
    for (&cv, &dv) in create.iter().zip(delete) {
        let made = format!("made.v{cv}");
        let assigned_name = format!("assigned.v{cv}");
        let placed = |name: &str, brokers: &[Vec<i32>]| {
            CreatableTopic::default()
                .with_name(topic(name))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(
                    brokers
                        .iter()
                        .enumerate()
                        .map(|(p, b)| {
                            CreatableReplicaAssignment::default()
                                .with_partition_index(i32::try_from(p).unwrap())
                                .with_broker_ids(b.iter().map(|b| BrokerId(*b)).collect())
                        })
                        .collect(),
                )
        };
        let assigned = placed(&assigned_name, &[vec![1], vec![1]]);
        let elsewhere = placed("elsewhere", &[vec![7]]);
        let twice = placed("twice", &[vec![1, 1]]);
        let both = placed("both", &[vec![1]]).with_num_partitions(1);
        let config = |name: &str, value: Option<&str>| {
            CreatableTopicConfig::default()
                .with_name(s(name))
                .with_value(value.map(s))
        };
        let made_topic =
            creatable(&made, 3, -1).with_configs(vec![config("retention.ms", Some("1000"))]);
        let misconfigured = creatable("misconfigured", 1, 1)
            .with_configs(vec![config("retention.ms", Some("a week"))]);
        let unvalued =
            creatable("unvalued", 1, 1).with_configs(vec![config("cleanup.policy", None)]);
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![
                made_topic,
                creatable(TOPIC, 1, 1),
                creatable("not a topic name!", 1, 1),
                assigned,
                elsewhere,
                twice,
                both,
                misconfigured,
                unvalued,
            ]);
        let answer = broker.exchange(ApiKey::CreateTopics, cv, &request).await;
        // From version 7 the new topic's id, derived from its catalog id (which the test does
        // not know: the answer's is checked against the derivation).
        let decoded: CreateTopicsResponse = broker.decode(ApiKey::CreateTopics, cv, &answer);
        let id = decoded.topics[0].topic_id;
        let assigned_id = decoded.topics[3].topic_id;
        if cv >= 7 {
            assert!(
                (1..10_000).any(|n| crate::topic_uuid(&made, n) == id),
                "{id}"
            );
        }
        // The service's reasons, as the messages say them.
        let expected = CreateTopicsResponse::default().with_topics(vec![
            created(&made, 3, 1).with_topic_id(id),
            refused(TOPIC, 36, "topic golden already exists"),
            refused(
                "not a topic name!",
                17,
                "invalid topic request: topic names use ASCII letters, digits, '.', '_' and '-', \
                 not ' '",
            ),
            created_with(&assigned_name, 2, 1, &[]).with_topic_id(assigned_id),
            refused(
                "elsewhere",
                39,
                "invalid replica assignment: partition 0: broker 7 is not in the cluster",
            ),
            refused(
                "twice",
                39,
                "invalid replica assignment: partition 0 names a broker twice",
            ),
            refused(
                "both",
                42,
                "a replica assignment goes without a partition count or replication factor",
            ),
            refused(
                "misconfigured",
                40,
                "invalid topic config retention.ms=a week: must be a whole number",
            ),
            refused("unvalued", 40, "cleanup.policy needs a value"),
        ]);
        broker.assert_answer(ApiKey::CreateTopics, cv, &answer, &expected);

        // By name before version 6; from 6 in a list of names or ids (the new topic by its
        // id, and an id no topic has).
        let request = DeleteTopicsRequest::default().with_timeout_ms(10_000);
        let stray = crate::topic_uuid("never.made", 77);
        let request = if dv >= 6 {
            request.with_topics(vec![
                DeleteTopicState::default()
                    .with_name(None)
                    .with_topic_id(id),
                DeleteTopicState::default().with_name(Some(topic("no.such.topic"))),
                DeleteTopicState::default()
                    .with_name(None)
                    .with_topic_id(stray),
            ])
        } else {
            request.with_topic_names(vec![topic(&made), topic("no.such.topic")])
        };
        let answer = broker.exchange(ApiKey::DeleteTopics, dv, &request).await;
        let mut results = vec![
            DeletableTopicResult::default()
                .with_name(Some(topic(&made)))
                .with_topic_id(id),
            DeletableTopicResult::default()
                .with_name(Some(topic("no.such.topic")))
                .with_error_code(3)
                .with_error_message(Some(s("unknown topic no.such.topic"))),
        ];
        if dv >= 6 {
            results.push(
                DeletableTopicResult::default()
                    .with_name(None)
                    .with_topic_id(stray)
                    .with_error_code(100)
                    .with_error_message(Some(s(&format!("no topic has id {stray}")))),
            );
        }
        let expected = DeleteTopicsResponse::default().with_responses(results);
        broker.assert_answer(ApiKey::DeleteTopics, dv, &answer, &expected);
    }
    broker.shutdown().await;
}

/// CreatePartitions: a created topic grown (its new partitions get leaders and take records),
/// and refusals: no more partitions than it has (INVALID_PARTITIONS), a topic that does not
/// exist, an assignment naming a broker the cluster does not have, a topic configured on the
/// brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_grows_a_topic() {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::CreatePartitions) {
        let name = format!("grown.v{v}");
        let create = CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![creatable(&name, 1, 1)]);
        broker.exchange(ApiKey::CreateTopics, 7, &create).await;
        let grow = |topic: &str, count: i32| {
            CreatePartitionsTopic::default()
                .with_name(crate::topic(topic))
                .with_count(count)
                .with_assignments(None)
        };
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![
                grow(&name, 3),
                grow("no.such.topic", 2),
                grow(TOPIC, 5),
                grow(&name, 4).with_assignments(Some(vec![
                    CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(9)]),
                ])),
            ]);
        let answer = broker.exchange(ApiKey::CreatePartitions, v, &request).await;
        let result = |topic: &str, code: i16, message: Option<&str>| {
            CreatePartitionsTopicResult::default()
                .with_name(crate::topic(topic))
                .with_error_code(code)
                .with_error_message(message.map(s))
        };
        let expected = CreatePartitionsResponse::default().with_results(vec![
            result(&name, 0, None),
            result("no.such.topic", 3, Some("unknown topic no.such.topic")),
            result(
                TOPIC,
                17,
                Some(
                    "invalid topic request: topic golden is configured on the brokers: its \
                     partitions are theirs",
                ),
            ),
            result(
                &name,
                39,
                Some("invalid replica assignment: partition 0: broker 9 is not in the cluster"),
            ),
        ]);
        broker.assert_answer(ApiKey::CreatePartitions, v, &answer, &expected);
        // Asked again with the count it has now: refused.
        let again = CreatePartitionsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![grow(&name, 3)]);
        let answer = broker.exchange(ApiKey::CreatePartitions, v, &again).await;
        let expected = CreatePartitionsResponse::default().with_results(vec![result(
            &name,
            37,
            Some(&format!(
                "topic {name} has 3 partitions; it only grows, not to 3"
            )),
        )]);
        broker.assert_answer(ApiKey::CreatePartitions, v, &answer, &expected);
        broker
            .cluster()
            .wait_for_leaders(&name, 3, std::time::Duration::from_secs(20))
            .await
            .unwrap();
    }
    broker.shutdown().await;
}

/// DescribeCluster: the broker at its Kafka address, standing in as the controller; from
/// version 1 a request for the controllers' endpoints is refused
/// (UNSUPPORTED_ENDPOINT_TYPE: replog has no KRaft quorum).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_names_the_brokers() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::DescribeCluster) {
        let answer = broker
            .exchange(
                ApiKey::DescribeCluster,
                v,
                &DescribeClusterRequest::default(),
            )
            .await;
        let expected = DescribeClusterResponse::default()
            .with_cluster_id(s("replog"))
            .with_controller_id(BrokerId(1))
            .with_brokers(vec![
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(1))
                    .with_host(s(&broker.kafka.ip().to_string()))
                    .with_port(i32::from(broker.kafka.port())),
            ]);
        broker.assert_answer(ApiKey::DescribeCluster, v, &answer, &expected);
        if v >= 1 {
            let request = DescribeClusterRequest::default().with_endpoint_type(2);
            let answer = broker.exchange(ApiKey::DescribeCluster, v, &request).await;
            let expected = DescribeClusterResponse::default()
                .with_error_code(119)
                .with_error_message(Some(s("replog describes its brokers only")))
                .with_endpoint_type(2);
            broker.assert_answer(ApiKey::DescribeCluster, v, &answer, &expected);
        }
    }
    broker.shutdown().await;
}
