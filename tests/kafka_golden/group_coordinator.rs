//! The group APIs at a broker that is not the group's coordinator, at the oldest and newest
//! versions served: FindCoordinator names the coordinator; the others (DeleteGroups and
//! OffsetDelete too) are refused with NOT_COORDINATOR where each answer carries it (the
//! client finds the coordinator again), and ListGroups lists only the groups a broker
//! coordinates.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::*;

use crate::{Broker, Golden, TOPIC, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::FindCoordinator, &[0, 3]),
    (ApiKey::JoinGroup, &[0, 7]),
    (ApiKey::SyncGroup, &[0, 5]),
    (ApiKey::Heartbeat, &[0, 4]),
    (ApiKey::LeaveGroup, &[0, 4]),
    (ApiKey::OffsetCommit, &[2, 8]),
    (ApiKey::OffsetFetch, &[1, 7]),
    (ApiKey::ListGroups, &[0, 4]),
    (ApiKey::DescribeGroups, &[0, 5]),
    (ApiKey::DeleteGroups, &[0, 2]),
    (ApiKey::OffsetDelete, &[0]),
];

const GROUP: &str = "golden-group";
const NOT_COORDINATOR: i16 = 16;

/// Three brokers; the offsets topic has one partition and one replica, so one broker is
/// every group's coordinator and the two others are not. Returns the fixture connected to
/// broker 1, and the coordinator's id, which FindCoordinator at broker 1 named (checked
/// against its answer byte for byte at each version).
async fn three_brokers() -> (Broker, u64) {
    let mut broker = Broker::start_brokers(3).await;
    let mut coordinator = None;
    for &v in versions(GOLDEN, ApiKey::FindCoordinator) {
        let request = FindCoordinatorRequest::default().with_key(s(GROUP));
        let answer = broker
            .exchange_until(
                ApiKey::FindCoordinator,
                v,
                &request,
                |r: &FindCoordinatorResponse| r.error_code == 0,
            )
            .await;
        // Where the offsets partition's one replica was placed is the cluster's choice:
        // the coordinator's id is taken from the answer, its address from the cluster.
        let r: FindCoordinatorResponse = broker.decode(ApiKey::FindCoordinator, v, &answer);
        let id = u64::try_from(r.node_id.0).unwrap();
        let at = broker.kafka_of(id);
        let expected = FindCoordinatorResponse::default()
            .with_node_id(r.node_id)
            .with_host(s(&at.ip().to_string()))
            .with_port(i32::from(at.port()));
        broker.assert_answer(ApiKey::FindCoordinator, v, &answer, &expected);
        assert!(coordinator.is_none_or(|c| c == id));
        coordinator = Some(id);
    }
    (broker, coordinator.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_is_not_the_coordinator_refuses_group_requests_with_not_coordinator() {
    let (mut broker, coordinator) = three_brokers().await;
    let other = (1..=3).find(|id| *id != coordinator).unwrap();
    broker.connect_to(other).await;
    for newest in [false, true] {
        let at = |api: ApiKey| {
            let v = versions(GOLDEN, api);
            if newest { v[v.len() - 1] } else { v[0] }
        };

        let v = at(ApiKey::JoinGroup);
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(if v >= 1 { 10_000 } else { -1 })
            .with_protocol_type(s("consumer"));
        let answer = broker.exchange(ApiKey::JoinGroup, v, &request).await;
        let expected = JoinGroupResponse::default()
            .with_error_code(NOT_COORDINATOR)
            .with_protocol_name((v < 7).then(|| s("")));
        broker.assert_answer(ApiKey::JoinGroup, v, &answer, &expected);

        let v = at(ApiKey::SyncGroup);
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(1)
            .with_member_id(s("m"));
        let answer = broker.exchange(ApiKey::SyncGroup, v, &request).await;
        let expected = SyncGroupResponse::default().with_error_code(NOT_COORDINATOR);
        broker.assert_answer(ApiKey::SyncGroup, v, &answer, &expected);

        let v = at(ApiKey::Heartbeat);
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(1)
            .with_member_id(s("m"));
        let answer = broker.exchange(ApiKey::Heartbeat, v, &request).await;
        let expected = HeartbeatResponse::default().with_error_code(NOT_COORDINATOR);
        broker.assert_answer(ApiKey::Heartbeat, v, &answer, &expected);

        // From version 3 the group's error is the answer's, with no member listed, as Kafka
        // answers an error of the coordinator rather than of a member.
        let v = at(ApiKey::LeaveGroup);
        let request = LeaveGroupRequest::default().with_group_id(GroupId(s(GROUP)));
        let request = if v >= 3 {
            request.with_members(vec![MemberIdentity::default().with_member_id(s("m"))])
        } else {
            request.with_member_id(s("m"))
        };
        let answer = broker.exchange(ApiKey::LeaveGroup, v, &request).await;
        let expected = LeaveGroupResponse::default().with_error_code(NOT_COORDINATOR);
        broker.assert_answer(ApiKey::LeaveGroup, v, &answer, &expected);

        let v = at(ApiKey::OffsetCommit);
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(1),
                    ]),
            ]);
        let answer = broker.exchange(ApiKey::OffsetCommit, v, &request).await;
        let expected = OffsetCommitResponse::default().with_topics(vec![
            OffsetCommitResponseTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(vec![
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(0)
                        .with_error_code(NOT_COORDINATOR),
                ]),
        ]);
        broker.assert_answer(ApiKey::OffsetCommit, v, &answer, &expected);

        // Before version 2 the answer has no error of its own: each partition asked for
        // carries it, with no offset, as Kafka answers.
        let v = at(ApiKey::OffsetFetch);
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 1]),
            ]));
        let answer = broker.exchange(ApiKey::OffsetFetch, v, &request).await;
        let expected = if v >= 2 {
            OffsetFetchResponse::default().with_error_code(NOT_COORDINATOR)
        } else {
            let refused = |p: i32| {
                OffsetFetchResponsePartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(-1)
                    .with_metadata(Some(s("")))
                    .with_error_code(NOT_COORDINATOR)
            };
            OffsetFetchResponse::default().with_topics(vec![
                OffsetFetchResponseTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![refused(0), refused(1)]),
            ])
        };
        broker.assert_answer(ApiKey::OffsetFetch, v, &answer, &expected);

        let v = at(ApiKey::DescribeGroups);
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]);
        let answer = broker.exchange(ApiKey::DescribeGroups, v, &request).await;
        let expected = DescribeGroupsResponse::default().with_groups(vec![
            DescribedGroup::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_error_code(NOT_COORDINATOR),
        ]);
        broker.assert_answer(ApiKey::DescribeGroups, v, &answer, &expected);

        let v = at(ApiKey::DeleteGroups);
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(GROUP))]);
        let answer = broker.exchange(ApiKey::DeleteGroups, v, &request).await;
        let expected = DeleteGroupsResponse::default().with_results(vec![
            DeletableGroupResult::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_error_code(NOT_COORDINATOR),
        ]);
        broker.assert_answer(ApiKey::DeleteGroups, v, &answer, &expected);

        // The whole request's error, with no partition listed, as Kafka answers.
        let v = at(ApiKey::OffsetDelete);
        let request = OffsetDeleteRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![OffsetDeleteRequestPartition::default()]),
            ]);
        let answer = broker.exchange(ApiKey::OffsetDelete, v, &request).await;
        let expected = OffsetDeleteResponse::default().with_error_code(NOT_COORDINATOR);
        broker.assert_answer(ApiKey::OffsetDelete, v, &answer, &expected);

        let v = at(ApiKey::ListGroups);
        let answer = broker
            .exchange(ApiKey::ListGroups, v, &ListGroupsRequest::default())
            .await;
        broker.assert_answer(
            ApiKey::ListGroups,
            v,
            &answer,
            &ListGroupsResponse::default(),
        );
    }
    broker.shutdown().await;
}
