//! AlterPartitionReassignments (0 to 1) and ListPartitionReassignments (0) on three brokers,
//! one of them stopped so that a move to it stays under way: the move is recorded and listed
//! (the replicas it moves to, then those it leaves; what it adds and removes), a second move
//! of the moving partition is refused (REASSIGNMENT_IN_PROGRESS), null replicas take it back,
//! and once it is back a second cancellation finds nothing to take back
//! (NO_REASSIGNMENT_IN_PROGRESS); a broker the cluster lacks (INVALID_REPLICA_ASSIGNMENT), an
//! unknown partition, and from v1 a change of replica count the request does not allow
//! (INVALID_REPLICATION_FACTOR) are refused.

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    CreateTopicsRequest, CreateTopicsResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
};

use crate::{Broker, Golden, WAIT, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::AlterPartitionReassignments, &[0, 1]),
    (ApiKey::ListPartitionReassignments, &[0]),
];

const MOVED: &str = "moved";

fn brokers(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|b| BrokerId(*b)).collect()
}

/// A request moving `MOVED`'s partitions: each index with its replicas (`None`: cancel).
fn alter(
    moves: &[(i32, Option<&[i32]>)],
    allow_change: bool,
) -> AlterPartitionReassignmentsRequest {
    AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_allow_replication_factor_change(allow_change)
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(topic(MOVED))
                .with_partitions(
                    moves
                        .iter()
                        .map(|(p, r)| {
                            ReassignablePartition::default()
                                .with_partition_index(*p)
                                .with_replicas(r.map(brokers))
                        })
                        .collect(),
                ),
        ])
}

/// The answer to [`alter`]: each index with its error and message.
fn altered(
    results: &[(i32, i16, Option<&str>)],
    allow_change: bool,
) -> AlterPartitionReassignmentsResponse {
    AlterPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_allow_replication_factor_change(allow_change)
        .with_responses(vec![
            ReassignableTopicResponse::default()
                .with_name(topic(MOVED))
                .with_partitions(
                    results
                        .iter()
                        .map(|(p, c, m)| {
                            ReassignablePartitionResponse::default()
                                .with_partition_index(*p)
                                .with_error_code(*c)
                                .with_error_message(m.map(s))
                        })
                        .collect(),
                ),
        ])
}

/// A partition moving: its index, replicas, those added and those removed.
type Moving<'a> = (i32, &'a [i32], &'a [i32], &'a [i32]);

fn listed(moving: &[Moving<'_>]) -> ListPartitionReassignmentsResponse {
    let topics = if moving.is_empty() {
        vec![]
    } else {
        vec![
            OngoingTopicReassignment::default()
                .with_name(topic(MOVED))
                .with_partitions(
                    moving
                        .iter()
                        .map(|(p, replicas, adding, removing)| {
                            OngoingPartitionReassignment::default()
                                .with_partition_index(*p)
                                .with_replicas(brokers(replicas))
                                .with_adding_replicas(brokers(adding))
                                .with_removing_replicas(brokers(removing))
                        })
                        .collect(),
                ),
        ]
    };
    ListPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_topics(topics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_under_way_is_listed_refused_again_and_taken_back() {
    let mut broker = Broker::start_brokers(3).await;
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic(MOVED))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(
                    (0..2)
                        .map(|p| {
                            CreatableReplicaAssignment::default()
                                .with_partition_index(p)
                                .with_broker_ids(brokers(&[1]))
                        })
                        .collect(),
                ),
        ]);
    let answer = broker.exchange(ApiKey::CreateTopics, 7, &create).await;
    let created: CreateTopicsResponse = broker.decode(ApiKey::CreateTopics, 7, &answer);
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    broker
        .cluster()
        .wait_for_leaders(MOVED, 2, WAIT)
        .await
        .unwrap();
    // Broker 3 stops: a move to it is recorded but cannot end.
    broker.cluster_mut().stop(3).await.unwrap();
    let list = ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000);
    let answer = broker
        .exchange(ApiKey::ListPartitionReassignments, 0, &list)
        .await;
    broker.assert_answer(ApiKey::ListPartitionReassignments, 0, &answer, &listed(&[]));

    for &v in versions(GOLDEN, ApiKey::AlterPartitionReassignments) {
        let answer = broker
            .exchange(
                ApiKey::AlterPartitionReassignments,
                v,
                &alter(&[(0, Some(&[3])), (1, Some(&[9])), (7, Some(&[1]))], true),
            )
            .await;
        let expected = altered(
            &[
                (0, 0, None),
                (
                    1,
                    39,
                    Some("invalid replica assignment: broker 9 is not in the cluster"),
                ),
                (7, 3, Some("unknown partition moved/7")),
            ],
            true,
        );
        broker.assert_answer(ApiKey::AlterPartitionReassignments, v, &answer, &expected);
        let answer = broker
            .exchange(ApiKey::ListPartitionReassignments, 0, &list)
            .await;
        let moving = listed(&[(0, &[3, 1], &[3], &[1])]);
        broker.assert_answer(ApiKey::ListPartitionReassignments, 0, &answer, &moving);

        let answer = broker
            .exchange(
                ApiKey::AlterPartitionReassignments,
                v,
                &alter(&[(0, Some(&[2])), (0, None)], true),
            )
            .await;
        let expected = altered(
            &[
                (
                    0,
                    60,
                    Some("partition moved/0 is still moving to the replicas it was last given"),
                ),
                (0, 0, None),
            ],
            true,
        );
        broker.assert_answer(ApiKey::AlterPartitionReassignments, v, &answer, &expected);
        let nothing = listed(&[]);
        broker
            .exchange_until(
                ApiKey::ListPartitionReassignments,
                0,
                &list,
                |r: &ListPartitionReassignmentsResponse| *r == nothing,
            )
            .await;
        let answer = broker
            .exchange(
                ApiKey::AlterPartitionReassignments,
                v,
                &alter(&[(0, None)], true),
            )
            .await;
        let expected = altered(&[(0, 85, Some("partition moved/0 is not moving"))], true);
        broker.assert_answer(ApiKey::AlterPartitionReassignments, v, &answer, &expected);
        if v >= 1 {
            let answer = broker
                .exchange(
                    ApiKey::AlterPartitionReassignments,
                    v,
                    &alter(&[(1, Some(&[1, 2]))], false),
                )
                .await;
            let expected = altered(
                &[(
                    1,
                    38,
                    Some(
                        "2 replicas for a partition of 1; the request does not allow changing \
                         the replication factor",
                    ),
                )],
                false,
            );
            broker.assert_answer(ApiKey::AlterPartitionReassignments, v, &answer, &expected);
        }
    }
    broker.shutdown().await;
}
