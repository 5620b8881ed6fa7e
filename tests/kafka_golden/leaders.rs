//! ElectLeaders (0 to 2) on one broker, which leads every partition it is preferred for: a
//! preferred election is not needed for any partition, an unknown one is named, the partitions
//! of every topic (null) answer nothing to do; an unclean election (from v1) is not needed
//! where a leader exists; an unknown election type is refused (INVALID_REQUEST).

use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse};

use crate::{Broker, Golden, TOPIC, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::ElectLeaders, &[0, 2])];

fn result(partition: i32, error_code: i16, message: Option<&str>) -> PartitionResult {
    PartitionResult::default()
        .with_partition_id(partition)
        .with_error_code(error_code)
        .with_error_message(message.map(s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_finds_the_preferred_replicas_leading() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::ElectLeaders) {
        let ask = |election_type: i8, partitions: Option<Vec<i32>>| {
            ElectLeadersRequest::default()
                .with_election_type(election_type)
                .with_timeout_ms(10_000)
                .with_topic_partitions(partitions.map(|p| {
                    vec![
                        TopicPartitions::default()
                            .with_topic(topic(TOPIC))
                            .with_partitions(p),
                    ]
                }))
        };
        let answered = |error_code: i16, results: Vec<PartitionResult>| {
            ElectLeadersResponse::default()
                .with_error_code(error_code)
                .with_replica_election_results(if results.is_empty() {
                    vec![]
                } else {
                    vec![
                        ReplicaElectionResult::default()
                            .with_topic(topic(TOPIC))
                            .with_partition_result(results),
                    ]
                })
        };
        let not_needed = || vec![result(0, 84, None), result(1, 84, None), result(7, 3, None)];
        let answer = broker
            .exchange(ApiKey::ElectLeaders, v, &ask(0, Some(vec![0, 1, 7])))
            .await;
        broker.assert_answer(ApiKey::ElectLeaders, v, &answer, &answered(0, not_needed()));
        let answer = broker
            .exchange(ApiKey::ElectLeaders, v, &ask(0, None))
            .await;
        broker.assert_answer(ApiKey::ElectLeaders, v, &answer, &answered(0, vec![]));
        if v >= 1 {
            let answer = broker
                .exchange(ApiKey::ElectLeaders, v, &ask(1, Some(vec![0, 1, 7])))
                .await;
            broker.assert_answer(ApiKey::ElectLeaders, v, &answer, &answered(0, not_needed()));
            let answer = broker
                .exchange(ApiKey::ElectLeaders, v, &ask(3, Some(vec![0])))
                .await;
            broker.assert_answer(
                ApiKey::ElectLeaders,
                v,
                &answer,
                &answered(42, vec![result(0, 42, Some("an unknown election type"))]),
            );
        }
    }
    broker.shutdown().await;
}
