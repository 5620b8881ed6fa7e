//! DeleteGroups (0 to 2): a group without members is deleted with its committed offsets; one
//! with a member is refused (NON_EMPTY_GROUP), one that does not exist (GROUP_ID_NOT_FOUND,
//! also once deleted), an empty id (INVALID_GROUP_ID). And the helpers the group deletion
//! tests share: a group with commits and no members, a group with a member.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;

use crate::{Broker, Golden, TOPIC, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[(ApiKey::DeleteGroups, &[0, 2])];

/// Waits until `group`'s coordinator (the broker, whose first group request makes the
/// offsets topic) answers.
pub(crate) async fn coordinator_ready(broker: &mut Broker, group: &str) {
    let request = FindCoordinatorRequest::default().with_key(s(group));
    broker
        .exchange_until(
            ApiKey::FindCoordinator,
            3,
            &request,
            |r: &FindCoordinatorResponse| r.error_code == 0,
        )
        .await;
}

/// Commits offsets 5 and 6 of partitions 0 and 1 of [`TOPIC`] for `group`, which has no
/// members (an admin's commit: no generation, no member id).
pub(crate) async fn commit_without_members(broker: &mut Broker, group: &str) {
    let partitions = (0..2)
        .map(|p| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(5 + i64::from(p))
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(partitions),
        ]);
    let answer = broker.exchange(ApiKey::OffsetCommit, 8, &request).await;
    let r: OffsetCommitResponse = broker.decode(ApiKey::OffsetCommit, 8, &answer);
    assert!(
        r.topics[0].partitions.iter().all(|p| p.error_code == 0),
        "{r:?}"
    );
}

/// `group`'s committed offsets of partitions 0 and 1 of [`TOPIC`] (−1: none).
pub(crate) async fn committed(broker: &mut Broker, group: &str) -> Vec<i64> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(TOPIC))
                .with_partition_indexes(vec![0, 1]),
        ]));
    let answer = broker.exchange(ApiKey::OffsetFetch, 7, &request).await;
    let r: OffsetFetchResponse = broker.decode(ApiKey::OffsetFetch, 7, &answer);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect()
}

/// A consumer's subscription to `topics`, as the consumer protocol encodes it (version 0).
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(i32::try_from(topics.len()).unwrap());
    for t in topics {
        b.put_i16(i16::try_from(t.len()).unwrap());
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

/// One member joins `group` (of `protocol_type`, subscribed to [`TOPIC`]) and, as its
/// leader, syncs an empty assignment: the group is Stable with one member.
pub(crate) async fn group_with_a_member(broker: &mut Broker, group: &str, protocol_type: &str) {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(30_000)
        .with_protocol_type(s(protocol_type))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription(&[TOPIC])),
        ]);
    // Version 3: the first join is not asked to join again with an id.
    let answer = broker.exchange(ApiKey::JoinGroup, 3, &request).await;
    let joined: JoinGroupResponse = broker.decode(ApiKey::JoinGroup, 3, &answer);
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(joined.member_id)
                .with_assignment(Bytes::new()),
        ]);
    let answer = broker.exchange(ApiKey::SyncGroup, 3, &request).await;
    let synced: SyncGroupResponse = broker.decode(ApiKey::SyncGroup, 3, &answer);
    assert_eq!(synced.error_code, 0, "{synced:?}");
}

fn result(group: &str, error_code: i16) -> DeletableGroupResult {
    DeletableGroupResult::default()
        .with_group_id(GroupId(s(group)))
        .with_error_code(error_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_groups_deletes_a_group_without_members_and_refuses_the_others() {
    let mut broker = Broker::start().await;
    coordinator_ready(&mut broker, "any").await;
    for &v in versions(GOLDEN, ApiKey::DeleteGroups) {
        let (idle, live) = (format!("idle-{v}"), format!("live-{v}"));
        commit_without_members(&mut broker, &idle).await;
        group_with_a_member(&mut broker, &live, "consumer").await;
        let names = [idle.as_str(), live.as_str(), "no.such.group", ""];
        let request = DeleteGroupsRequest::default()
            .with_groups_names(names.iter().map(|g| GroupId(s(g))).collect());
        let answer = broker.exchange(ApiKey::DeleteGroups, v, &request).await;
        let expected = DeleteGroupsResponse::default().with_results(vec![
            result(&idle, 0),
            result(&live, 68),
            result("no.such.group", 69),
            result("", 24),
        ]);
        broker.assert_answer(ApiKey::DeleteGroups, v, &answer, &expected);
        // Its offsets went with it, and it is gone.
        assert_eq!(committed(&mut broker, &idle).await, [-1, -1]);
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&idle))]);
        let answer = broker.exchange(ApiKey::DeleteGroups, v, &request).await;
        let expected = DeleteGroupsResponse::default().with_results(vec![result(&idle, 69)]);
        broker.assert_answer(ApiKey::DeleteGroups, v, &answer, &expected);
    }
    broker.shutdown().await;
}
