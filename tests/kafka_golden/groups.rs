//! The group APIs, a consumer group's life at the oldest versions served and again at the
//! newest: FindCoordinator (0 to 3), JoinGroup (0 to 7; MEMBER_ID_REQUIRED first from 4),
//! SyncGroup (0 to 5), Heartbeat (0 to 4), OffsetCommit (2 to 8), OffsetFetch (1 to 7),
//! DescribeGroups (0 to 5), ListGroups (0 to 4), LeaveGroup (0 to 4); with their errors that
//! matter (a transactional coordinator asked for, a stale generation, a commit to a topic that
//! does not exist, a group that does not exist, a member that is not in the group). A broker
//! that is not the group's coordinator: `group_coordinator.rs`.

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
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
];

/// A member's subscription and assignment, as the consumer's protocol encodes them (opaque to
/// the coordinator).
const METADATA: &[u8] = b"\x00\x01subscription";
const ASSIGNMENT: &[u8] = b"\x00\x01assignment";

/// The versions of one run: each group API's oldest (`newest` false) or newest version served.
#[derive(Clone, Copy)]
struct At {
    newest: bool,
}

impl At {
    fn v(self, api: ApiKey) -> i16 {
        let v = versions(GOLDEN, api);
        if self.newest { v[v.len() - 1] } else { v[0] }
    }
}

/// FindCoordinator: the broker itself, at its Kafka address, once the offsets topic it makes
/// on the first request has its leader (until then COORDINATOR_NOT_AVAILABLE, which clients
/// retry); a transaction coordinator is refused.
async fn find_coordinator(broker: &mut Broker, at: At, group: &str) {
    let v = at.v(ApiKey::FindCoordinator);
    let request = FindCoordinatorRequest::default().with_key(s(group));
    let answer = broker
        .exchange_until(
            ApiKey::FindCoordinator,
            v,
            &request,
            |r: &FindCoordinatorResponse| r.error_code == 0,
        )
        .await;
    // An empty message with no error (the crate's default; Kafka's brokers send "NONE").
    let expected = FindCoordinatorResponse::default()
        .with_node_id(BrokerId(1))
        .with_host(s(&broker.kafka.ip().to_string()))
        .with_port(i32::from(broker.kafka.port()));
    broker.assert_answer(ApiKey::FindCoordinator, v, &answer, &expected);
    if v >= 1 {
        let request = request.with_key_type(1);
        let answer = broker.exchange(ApiKey::FindCoordinator, v, &request).await;
        let expected = FindCoordinatorResponse::default()
            .with_error_code(53)
            .with_error_message(Some(s("transactions are not served")))
            .with_node_id(BrokerId(-1))
            .with_host(s(""))
            .with_port(-1);
        broker.assert_answer(ApiKey::FindCoordinator, v, &answer, &expected);
    }
}

/// JoinGroup of a new member: from version 4 it is first asked to join again with the member
/// id the answer gives it (MEMBER_ID_REQUIRED), then it joins and leads generation 1 alone.
/// Returns its member id.
async fn join_group(broker: &mut Broker, at: At, group: &str) -> String {
    let v = at.v(ApiKey::JoinGroup);
    let mut request = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(10_000)
        // From version 1; version 0 rebalances within the session timeout.
        .with_rebalance_timeout_ms(if v >= 1 { 10_000 } else { -1 })
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(METADATA)),
        ]);
    if v >= 4 {
        let answer = broker.exchange(ApiKey::JoinGroup, v, &request).await;
        // The member id is the coordinator's making (the client id and a random part): taken
        // from the answer.
        let r: JoinGroupResponse = broker.decode(ApiKey::JoinGroup, v, &answer);
        assert!(r.member_id.starts_with(crate::CLIENT_ID), "{r:?}");
        // No protocol yet: an empty name, null from version 7 (where it is nullable), as
        // Kafka answers.
        let expected = JoinGroupResponse::default()
            .with_error_code(79)
            .with_protocol_name((v < 7).then(|| s("")))
            .with_member_id(r.member_id.clone());
        broker.assert_answer(ApiKey::JoinGroup, v, &answer, &expected);
        request = request.with_member_id(r.member_id);
    }
    let answer = broker.exchange(ApiKey::JoinGroup, v, &request).await;
    let r: JoinGroupResponse = broker.decode(ApiKey::JoinGroup, v, &answer);
    assert!(r.member_id.starts_with(crate::CLIENT_ID), "{r:?}");
    let member = r.member_id.clone();
    let expected = JoinGroupResponse::default()
        .with_generation_id(1)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_leader(member.clone())
        .with_member_id(member.clone())
        .with_members(vec![
            JoinGroupResponseMember::default()
                .with_member_id(member.clone())
                .with_metadata(Bytes::from_static(METADATA)),
        ]);
    broker.assert_answer(ApiKey::JoinGroup, v, &answer, &expected);
    member.to_string()
}

/// SyncGroup by the leader: its own assignment back, with the group's protocol (from
/// version 5).
async fn sync_group(broker: &mut Broker, at: At, group: &str, member: &str) {
    let v = at.v(ApiKey::SyncGroup);
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(1)
        .with_member_id(s(member))
        // From version 5, checked against the group's.
        .with_protocol_type((v >= 5).then(|| s("consumer")))
        .with_protocol_name((v >= 5).then(|| s("range")))
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(s(member))
                .with_assignment(Bytes::from_static(ASSIGNMENT)),
        ]);
    let answer = broker.exchange(ApiKey::SyncGroup, v, &request).await;
    let expected = SyncGroupResponse::default()
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignment(Bytes::from_static(ASSIGNMENT));
    broker.assert_answer(ApiKey::SyncGroup, v, &answer, &expected);
}

/// Heartbeat: none for the current generation; ILLEGAL_GENERATION for another.
async fn heartbeat(broker: &mut Broker, at: At, group: &str, member: &str) {
    let v = at.v(ApiKey::Heartbeat);
    for (generation, error_code) in [(1, 0), (7, 22)] {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member));
        let answer = broker.exchange(ApiKey::Heartbeat, v, &request).await;
        let expected = HeartbeatResponse::default().with_error_code(error_code);
        broker.assert_answer(ApiKey::Heartbeat, v, &answer, &expected);
    }
}

/// OffsetCommit of partition 0 of [`TOPIC`] (offset 2, with metadata and, from version 6, a
/// leader epoch) and of a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION).
async fn offset_commit(broker: &mut Broker, at: At, group: &str, member: &str) {
    let v = at.v(ApiKey::OffsetCommit);
    let commit = |name: &str, offset: i64| {
        OffsetCommitRequestTopic::default()
            .with_name(topic(name))
            .with_partitions(vec![
                OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)
                    // From version 6.
                    .with_committed_leader_epoch(if v >= 6 { 7 } else { -1 })
                    .with_committed_metadata(Some(s("m"))),
            ])
    };
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(1)
        .with_member_id(s(member))
        .with_topics(vec![commit(TOPIC, 2), commit("no.such.topic", 1)]);
    let answer = broker.exchange(ApiKey::OffsetCommit, v, &request).await;
    let committed = |name: &str, error_code: i16| {
        OffsetCommitResponseTopic::default()
            .with_name(topic(name))
            .with_partitions(vec![
                OffsetCommitResponsePartition::default()
                    .with_partition_index(0)
                    .with_error_code(error_code),
            ])
    };
    let expected = OffsetCommitResponse::default()
        .with_topics(vec![committed(TOPIC, 0), committed("no.such.topic", 3)]);
    broker.assert_answer(ApiKey::OffsetCommit, v, &answer, &expected);
}

/// OffsetFetch of partitions 0 and 1 of [`TOPIC`]: 0's commit (its leader epoch from
/// version 5 when committed at 6 or later), none for 1 (offset −1, empty metadata).
async fn offset_fetch(broker: &mut Broker, at: At, group: &str) {
    let v = at.v(ApiKey::OffsetFetch);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(TOPIC))
                .with_partition_indexes(vec![0, 1]),
        ]));
    let answer = broker.exchange(ApiKey::OffsetFetch, v, &request).await;
    let epoch = if at.v(ApiKey::OffsetCommit) >= 6 {
        7
    } else {
        -1
    };
    let expected = OffsetFetchResponse::default().with_topics(vec![
        OffsetFetchResponseTopic::default()
            .with_name(topic(TOPIC))
            .with_partitions(vec![
                OffsetFetchResponsePartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(2)
                    .with_committed_leader_epoch(epoch)
                    .with_metadata(Some(s("m"))),
                OffsetFetchResponsePartition::default()
                    .with_partition_index(1)
                    .with_committed_offset(-1)
                    .with_metadata(Some(s(""))),
            ]),
    ]);
    broker.assert_answer(ApiKey::OffsetFetch, v, &answer, &expected);
}

/// DescribeGroups of the group (Stable, its one member with its client id, host, metadata
/// and assignment) and of one that does not exist (Kafka's answer: no error, state Dead).
async fn describe_groups(broker: &mut Broker, at: At, group: &str, member: &str) {
    let v = at.v(ApiKey::DescribeGroups);
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(s(group)), GroupId(s("no.such.group"))]);
    let answer = broker.exchange(ApiKey::DescribeGroups, v, &request).await;
    let expected = DescribeGroupsResponse::default().with_groups(vec![
        DescribedGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_group_state(s("Stable"))
            .with_protocol_type(s("consumer"))
            .with_protocol_data(s("range"))
            .with_members(vec![
                DescribedGroupMember::default()
                    .with_member_id(s(member))
                    .with_client_id(s(crate::CLIENT_ID))
                    .with_client_host(s("/127.0.0.1"))
                    .with_member_metadata(Bytes::from_static(METADATA))
                    .with_member_assignment(Bytes::from_static(ASSIGNMENT)),
            ]),
        DescribedGroup::default()
            .with_group_id(GroupId(s("no.such.group")))
            .with_group_state(s("Dead")),
    ]);
    broker.assert_answer(ApiKey::DescribeGroups, v, &answer, &expected);
}

/// ListGroups: the group, with its protocol type and (from version 4) its state.
async fn list_groups(broker: &mut Broker, at: At, group: &str) {
    let v = at.v(ApiKey::ListGroups);
    let answer = broker
        .exchange(ApiKey::ListGroups, v, &ListGroupsRequest::default())
        .await;
    // The group type (version 5, not served) is not written.
    let expected = ListGroupsResponse::default().with_groups(vec![
        ListedGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_protocol_type(s("consumer"))
            .with_group_state(s("Stable"))
            .with_group_type(s("classic")),
    ]);
    broker.assert_answer(ApiKey::ListGroups, v, &answer, &expected);
}

/// LeaveGroup of the member, then of a member not in the group (UNKNOWN_MEMBER_ID; from
/// version 3 per member, the request itself answered without error).
async fn leave_group(broker: &mut Broker, at: At, group: &str, member: &str) {
    let v = at.v(ApiKey::LeaveGroup);
    for (who, error_code) in [(member, 0), ("not-a-member", 25)] {
        // One member by its id before version 3; a list of members from 3.
        let request = LeaveGroupRequest::default().with_group_id(GroupId(s(group)));
        let request = if v >= 3 {
            request.with_members(vec![MemberIdentity::default().with_member_id(s(who))])
        } else {
            request.with_member_id(s(who))
        };
        let answer = broker.exchange(ApiKey::LeaveGroup, v, &request).await;
        let expected = if v >= 3 {
            LeaveGroupResponse::default().with_members(vec![
                MemberResponse::default()
                    .with_member_id(s(who))
                    .with_group_instance_id(None)
                    .with_error_code(error_code),
            ])
        } else {
            LeaveGroupResponse::default().with_error_code(error_code)
        };
        broker.assert_answer(ApiKey::LeaveGroup, v, &answer, &expected);
    }
}

/// A group's life at the versions of `at`, on a broker of its own.
async fn group_life(at: At) {
    let mut broker = Broker::start().await;
    let group = "golden-group";
    find_coordinator(&mut broker, at, group).await;
    let member = join_group(&mut broker, at, group).await;
    sync_group(&mut broker, at, group, &member).await;
    heartbeat(&mut broker, at, group, &member).await;
    offset_commit(&mut broker, at, group, &member).await;
    offset_fetch(&mut broker, at, group).await;
    describe_groups(&mut broker, at, group, &member).await;
    list_groups(&mut broker, at, group).await;
    leave_group(&mut broker, at, group, &member).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_groups_life_is_answered_at_the_oldest_group_versions_served() {
    group_life(At { newest: false }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_groups_life_is_answered_at_the_newest_group_versions_served() {
    group_life(At { newest: true }).await;
}
