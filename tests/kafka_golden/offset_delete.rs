//! OffsetDelete (0): a group's committed offsets deleted partition by partition, each
//! partition answered with its own error (UNKNOWN_TOPIC_OR_PARTITION; GROUP_SUBSCRIBED_TO_TOPIC
//! while the group's consumers read the topic); a group left with no members and no offsets
//! deleted with them; the whole request refused for a group that does not exist
//! (GROUP_ID_NOT_FOUND) and for a group with members that is not a consumer group
//! (NON_EMPTY_GROUP).

use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::*;

use crate::delete_groups::{
    commit_without_members, committed, coordinator_ready, group_with_a_member,
};
use crate::{Broker, Golden, TOPIC, s, topic};

pub(crate) const GOLDEN: Golden = &[(ApiKey::OffsetDelete, &[0])];

/// OffsetDelete of `group`'s `partitions` of each topic.
fn request(group: &str, topics: &[(&str, &[i32])]) -> OffsetDeleteRequest {
    OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(
            topics
                .iter()
                .map(|(name, ps)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(topic(name))
                        .with_partitions(
                            ps.iter()
                                .map(|p| {
                                    OffsetDeleteRequestPartition::default().with_partition_index(*p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// The answer: each topic's partitions with their error codes.
fn answered(topics: &[(&str, &[(i32, i16)])]) -> OffsetDeleteResponse {
    OffsetDeleteResponse::default().with_topics(
        topics
            .iter()
            .map(|(name, ps)| {
                OffsetDeleteResponseTopic::default()
                    .with_name(topic(name))
                    .with_partitions(
                        ps.iter()
                            .map(|(p, e)| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(*p)
                                    .with_error_code(*e)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_delete_deletes_committed_offsets_partition_by_partition() {
    let mut broker = Broker::start().await;
    coordinator_ready(&mut broker, "any").await;
    let v = 0;
    let api = ApiKey::OffsetDelete;

    // A group without members: partition 0's offset goes, 1's stays; the others are unknown.
    commit_without_members(&mut broker, "idle").await;
    let asked = request("idle", &[(TOPIC, &[0, 9]), ("no.such.topic", &[0])]);
    let answer = broker.exchange(api, v, &asked).await;
    let expected = answered(&[(TOPIC, &[(0, 0), (9, 3)]), ("no.such.topic", &[(0, 3)])]);
    broker.assert_answer(api, v, &answer, &expected);
    assert_eq!(committed(&mut broker, "idle").await, [-1, 6]);
    // Its last offset: the group goes with it.
    let answer = broker
        .exchange(api, v, &request("idle", &[(TOPIC, &[1])]))
        .await;
    broker.assert_answer(api, v, &answer, &answered(&[(TOPIC, &[(1, 0)])]));
    let answer = broker
        .exchange(api, v, &request("idle", &[(TOPIC, &[1])]))
        .await;
    let gone = OffsetDeleteResponse::default().with_error_code(69);
    broker.assert_answer(api, v, &answer, &gone);

    // A consumer group whose member reads the topic keeps its offsets of it.
    group_with_a_member(&mut broker, "reading", "consumer").await;
    let answer = broker
        .exchange(api, v, &request("reading", &[(TOPIC, &[0])]))
        .await;
    broker.assert_answer(api, v, &answer, &answered(&[(TOPIC, &[(0, 86)])]));
    // A group of another kind with a member is refused whole.
    group_with_a_member(&mut broker, "connecting", "connect").await;
    let answer = broker
        .exchange(api, v, &request("connecting", &[(TOPIC, &[0])]))
        .await;
    let refused = OffsetDeleteResponse::default().with_error_code(68);
    broker.assert_answer(api, v, &answer, &refused);
    broker.shutdown().await;
}
