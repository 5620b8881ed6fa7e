//! The group APIs at the Kafka door, as librdkafka's regression tests use them: committed
//! leader epochs through OffsetCommit and OffsetFetch, an emptied group's protocol type in
//! ListGroups and DescribeGroups, static members' instance ids in DescribeGroups, and static
//! membership (a member that restarts with its `group.instance.id` keeps its place without a
//! rebalance; the one it replaced is fenced). One broker in this process, with a Kafka
//! listener on loopback; requests are sent with the `kafka-protocol` crate as a client would.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::kafka::kafka_call;
use crate::support::wait_until;

const TOPIC: &str = "events";

/// Kafka's error codes met here.
const NONE: i16 = 0;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;

/// Errors that mean "the coordinator is not ready yet: ask again".
fn coordinator_not_ready(code: i16) -> bool {
    matches!(code, 14..=16)
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// One broker with a Kafka listener (the offsets topic has one partition, and a group's
/// first rebalance does not wait for more members); its Kafka address.
async fn broker(dir: &std::path::Path) -> (replog::LocalCluster, SocketAddr) {
    let kafka = crate::process_addrs(1)[0];
    let cluster = crate::local_cluster(1, dir, TOPIC, 2, |c| {
        c.kafka_listen = Some(kafka);
        c.offsets_topic_partitions = 1;
        c.group_initial_rebalance_delay = Duration::from_millis(0);
    })
    .await;
    (cluster, kafka)
}

/// Sends `request` until its answer's error (read by `code`) is not a coordinator still
/// being created or loaded, within 30 s.
async fn call<Req: Encodable + Clone, Resp: Decodable>(
    at: SocketAddr,
    api: ApiKey,
    version: i16,
    request: &Req,
    code: impl Fn(&Resp) -> i16,
) -> Resp {
    // `move`, owning a copy of the request: the wait runs in spawned tasks too, whose futures
    // must stay `Send`.
    let request = request.clone();
    wait_until(
        Duration::from_secs(30),
        "the coordinator to become ready",
        async move || {
            let (_, answer): (usize, Resp) = kafka_call(at, api, version, &request).await;
            (!coordinator_not_ready(code(&answer))).then_some(answer)
        },
    )
    .await
}

/// JoinGroup v5 (a first dynamic join is answered MEMBER_ID_REQUIRED and joins again with
/// its id).
async fn join(
    at: SocketAddr,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
) -> JoinGroupResponse {
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.session_timeout_ms = 10_000;
    r.rebalance_timeout_ms = 10_000;
    r.member_id = s(member_id);
    r.group_instance_id = instance.map(s);
    r.protocol_type = s("consumer");
    let mut p = JoinGroupRequestProtocol::default();
    p.name = s("range");
    p.metadata = Bytes::from_static(b"subscription");
    r.protocols = vec![p];
    let answer: JoinGroupResponse = call(at, ApiKey::JoinGroup, 5, &r, |a: &JoinGroupResponse| {
        a.error_code
    })
    .await;
    if answer.error_code == MEMBER_ID_REQUIRED {
        r.member_id = answer.member_id.clone();
        return call(at, ApiKey::JoinGroup, 5, &r, |a: &JoinGroupResponse| {
            a.error_code
        })
        .await;
    }
    answer
}

/// SyncGroup v3.
async fn sync(
    at: SocketAddr,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
    assignments: &[(&str, &'static [u8])],
) -> SyncGroupResponse {
    let mut r = SyncGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.generation_id = generation;
    r.member_id = s(member_id);
    r.group_instance_id = instance.map(s);
    r.assignments = assignments
        .iter()
        .map(|(m, a)| {
            let mut x = SyncGroupRequestAssignment::default();
            x.member_id = s(m);
            x.assignment = Bytes::from_static(a);
            x
        })
        .collect();
    call(at, ApiKey::SyncGroup, 3, &r, |a: &SyncGroupResponse| {
        a.error_code
    })
    .await
}

/// Heartbeat v3: its error code.
async fn heartbeat(
    at: SocketAddr,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> i16 {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(s(group));
    r.generation_id = generation;
    r.member_id = s(member_id);
    r.group_instance_id = instance.map(s);
    call(at, ApiKey::Heartbeat, 3, &r, |a: &HeartbeatResponse| {
        a.error_code
    })
    .await
    .error_code
}

/// LeaveGroup v4 for one member: the member's error code.
async fn leave(at: SocketAddr, group: &str, member_id: &str, instance: Option<&str>) -> i16 {
    let mut m = MemberIdentity::default();
    m.member_id = s(member_id);
    m.group_instance_id = instance.map(s);
    let mut r = LeaveGroupRequest::default();
    r.group_id = GroupId(s(group));
    r.members = vec![m];
    let answer = call(at, ApiKey::LeaveGroup, 4, &r, |a: &LeaveGroupResponse| {
        a.error_code
    })
    .await;
    assert_eq!(answer.error_code, NONE);
    answer.members[0].error_code
}

/// OffsetCommit v8 of partition 0 of [`TOPIC`] (with `epoch` as its committed leader
/// epoch): the partition's error code.
async fn commit(
    at: SocketAddr,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
    (partition, offset, epoch): (i32, i64, i32),
) -> i16 {
    let mut p = OffsetCommitRequestPartition::default();
    p.partition_index = partition;
    p.committed_offset = offset;
    p.committed_leader_epoch = epoch;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(s(TOPIC));
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(s(group));
    r.generation_id_or_member_epoch = generation;
    r.member_id = s(member_id);
    r.group_instance_id = instance.map(s);
    r.topics = vec![t];
    let code = |a: &OffsetCommitResponse| a.topics[0].partitions[0].error_code;
    code(&call(at, ApiKey::OffsetCommit, 8, &r, code).await)
}

/// OffsetFetch v7 of [`TOPIC`]'s partitions 0 and 1: (offset, committed leader epoch) of
/// each.
async fn fetch_offsets(at: SocketAddr, group: &str) -> Vec<(i64, i32)> {
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(s(TOPIC));
    t.partition_indexes = vec![0, 1];
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(s(group));
    r.topics = Some(vec![t]);
    let answer = call(at, ApiKey::OffsetFetch, 7, &r, |a: &OffsetFetchResponse| {
        a.error_code
    })
    .await;
    assert_eq!(answer.error_code, NONE);
    answer.topics[0]
        .partitions
        .iter()
        .map(|p| (p.committed_offset, p.committed_leader_epoch))
        .collect()
}

/// DescribeGroups v5 of one group.
async fn describe(
    at: SocketAddr,
    group: &str,
) -> kafka_protocol::messages::describe_groups_response::DescribedGroup {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(s(group))];
    let mut answer = call(
        at,
        ApiKey::DescribeGroups,
        5,
        &r,
        |a: &DescribeGroupsResponse| a.groups[0].error_code,
    )
    .await;
    assert_eq!(answer.groups[0].error_code, NONE);
    answer.groups.remove(0)
}

/// ListGroups v4: (group, protocol type, state) of each.
async fn list(at: SocketAddr) -> Vec<(String, String, String)> {
    let (_, answer): (usize, ListGroupsResponse) =
        kafka_call(at, ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await;
    assert_eq!(answer.error_code, NONE);
    answer
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect()
}

/// A Stable group of two: `a` static (instance "a", the leader, assigned "asg-a") and `b`
/// dynamic (assigned "asg-b"). Returns (generation, a's member id, b's member id).
async fn stable_pair(at: SocketAddr, group: &str) -> (i32, String, String) {
    let a = join(at, group, "", Some("a")).await;
    assert_eq!(a.error_code, NONE, "a static member joins at once");
    assert_eq!(a.leader, a.member_id);
    let a_id = a.member_id.to_string();
    // `b` joins: a rebalance, which `a` rejoins.
    let owned = group.to_string();
    let b = tokio::spawn(async move { join(at, &owned, "", None).await });
    // `a` learns of the rebalance from its heartbeat.
    wait_until(
        Duration::from_secs(30),
        "a rebalance for b's join",
        async || {
            heartbeat(at, group, a.generation_id, &a_id, Some("a")).await == REBALANCE_IN_PROGRESS
        },
    )
    .await;
    let a = join(at, group, &a_id, Some("a")).await;
    let b = b.await.unwrap();
    assert_eq!((a.error_code, b.error_code), (NONE, NONE));
    assert_eq!(a.generation_id, b.generation_id);
    assert_eq!(a.leader.to_string(), a_id, "the leader stays the leader");
    let b_id = b.member_id.to_string();
    let g = a.generation_id;
    let assignments = [
        (a_id.as_str(), &b"asg-a"[..]),
        (b_id.as_str(), &b"asg-b"[..]),
    ];
    let a_sync = sync(at, group, g, &a_id, Some("a"), &assignments).await;
    assert_eq!(a_sync.error_code, NONE);
    assert_eq!(a_sync.assignment, "asg-a");
    let b_sync = sync(at, group, g, &b_id, None, &[]).await;
    assert_eq!(b_sync.error_code, NONE);
    assert_eq!(b_sync.assignment, "asg-b");
    (g, a_id, b_id)
}

/// OffsetCommit v6+ carries the committer's leader epoch of each partition; OffsetFetch
/// answers it (and -1 where none was given), also once the coordinator has read the offsets
/// topic back after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_fetch_answers_the_committed_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, at) = broker(dir.path()).await;
    let group = "epochs";
    assert_eq!(commit(at, group, -1, "", None, (0, 17, 2)).await, NONE);
    assert_eq!(commit(at, group, -1, "", None, (1, 5, -1)).await, NONE);
    assert_eq!(fetch_offsets(at, group).await, vec![(17, 2), (5, -1)]);
    cluster.restart(1).await.unwrap();
    assert_eq!(fetch_offsets(at, group).await, vec![(17, 2), (5, -1)]);
    cluster.shutdown().await.unwrap();
}

/// A consumer group whose members all left is Empty and still a "consumer" group in
/// ListGroups and DescribeGroups (librdkafka listed it as a simple group); a group that
/// only ever had commits has no protocol type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_consumer_group_keeps_its_protocol_type() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, at) = broker(dir.path()).await;
    let joined = join(at, "emptied", "", None).await;
    assert_eq!(joined.error_code, NONE);
    let member = joined.member_id.to_string();
    let synced = sync(
        at,
        "emptied",
        joined.generation_id,
        &member,
        None,
        &[(member.as_str(), b"x")],
    )
    .await;
    assert_eq!(synced.error_code, NONE);
    assert_eq!(leave(at, "emptied", &member, None).await, NONE);
    assert_eq!(
        commit(at, "commits-only", -1, "", None, (0, 1, -1)).await,
        NONE
    );
    let groups = list(at).await;
    assert!(
        groups.contains(&("emptied".into(), "consumer".into(), "Empty".into())),
        "{groups:?}"
    );
    assert!(
        groups.contains(&("commits-only".into(), String::new(), "Empty".into())),
        "{groups:?}"
    );
    let d = describe(at, "emptied").await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert_eq!(d.protocol_type.as_str(), "consumer");
    assert!(d.members.is_empty());
    cluster.shutdown().await.unwrap();
}

/// DescribeGroups v4+ names each static member's `group.instance.id`, and null for a
/// dynamic member, as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_groups_answers_each_members_group_instance_id() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, at) = broker(dir.path()).await;
    let (_, a, b) = stable_pair(at, "described").await;
    let d = describe(at, "described").await;
    assert_eq!(d.group_state.as_str(), "Stable");
    let instance = |id: &str| {
        d.members
            .iter()
            .find(|m| m.member_id.as_str() == id)
            .map(|m| m.group_instance_id.as_ref().map(|i| i.to_string()))
    };
    assert_eq!(instance(&a), Some(Some("a".to_string())));
    assert_eq!(instance(&b), Some(None));
    cluster.shutdown().await.unwrap();
}

/// A static member that restarts without leaving and joins again with its instance id and
/// no member id gets its old place back: the same generation and assignment, no rebalance
/// for the other member. The member it replaced is answered FENCED_INSTANCE_ID on its next
/// Heartbeat, SyncGroup and OffsetCommit; a LeaveGroup may name the static member by its
/// instance id alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_that_returns_keeps_its_assignment_without_a_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, at) = broker(dir.path()).await;
    let group = "static";
    let (generation, old_a, b) = stable_pair(at, group).await;
    let back = join(at, group, "", Some("a")).await;
    assert_eq!(back.error_code, NONE);
    assert_eq!(back.generation_id, generation, "no new generation");
    let new_a = back.member_id.to_string();
    assert_ne!(new_a, old_a);
    // The leader as it was: the returning leader does not assign again.
    assert_eq!(back.leader.to_string(), old_a);
    assert!(back.members.is_empty());
    let synced = sync(at, group, generation, &new_a, Some("a"), &[]).await;
    assert_eq!(synced.error_code, NONE);
    assert_eq!(synced.assignment, "asg-a", "its old assignment");
    // The other member is undisturbed.
    assert_eq!(heartbeat(at, group, generation, &b, None).await, NONE);
    assert_eq!(
        heartbeat(at, group, generation, &new_a, Some("a")).await,
        NONE
    );
    let d = describe(at, group).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    let mut ids: Vec<String> = d.members.iter().map(|m| m.member_id.to_string()).collect();
    ids.sort();
    let mut want = vec![new_a.clone(), b.clone()];
    want.sort();
    assert_eq!(ids, want);
    // The replaced member is fenced.
    assert_eq!(
        heartbeat(at, group, generation, &old_a, Some("a")).await,
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        sync(at, group, generation, &old_a, Some("a"), &[])
            .await
            .error_code,
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        commit(at, group, generation, &old_a, Some("a"), (0, 3, -1)).await,
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        commit(at, group, generation, &new_a, Some("a"), (0, 3, -1)).await,
        NONE
    );
    // A second live member with the same instance id fences the one that returned.
    let again = join(at, group, "", Some("a")).await;
    assert_eq!(again.error_code, NONE);
    assert_eq!(again.generation_id, generation);
    assert_eq!(
        heartbeat(at, group, generation, &new_a, Some("a")).await,
        FENCED_INSTANCE_ID
    );
    // Named by its instance id alone, the static member leaves; the group rebalances.
    assert_eq!(leave(at, group, "", Some("a")).await, NONE);
    assert_eq!(
        heartbeat(at, group, generation, &b, None).await,
        REBALANCE_IN_PROGRESS
    );
    cluster.shutdown().await.unwrap();
}

/// The coordinator reads static members back from the offsets topic: after a restart, the
/// static member that restarted too takes its old place without a rebalance, and the
/// instance id it left behind is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_keeps_its_place_across_a_coordinator_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, at) = broker(dir.path()).await;
    let group = "static-restart";
    let (generation, old_a, b) = stable_pair(at, group).await;
    cluster.restart(1).await.unwrap();
    let back = join(at, group, "", Some("a")).await;
    assert_eq!(back.error_code, NONE);
    assert_eq!(back.generation_id, generation, "no new generation");
    let new_a = back.member_id.to_string();
    let synced = sync(at, group, generation, &new_a, Some("a"), &[]).await;
    assert_eq!(
        (synced.error_code, &synced.assignment[..]),
        (NONE, &b"asg-a"[..])
    );
    assert_eq!(heartbeat(at, group, generation, &b, None).await, NONE);
    assert_eq!(
        heartbeat(at, group, generation, &old_a, Some("a")).await,
        FENCED_INSTANCE_ID
    );
    let d = describe(at, group).await;
    let static_ids: Vec<_> = d
        .members
        .iter()
        .filter(|m| m.group_instance_id.as_deref() == Some("a"))
        .map(|m| m.member_id.to_string())
        .collect();
    assert_eq!(static_ids, vec![new_a]);
    cluster.shutdown().await.unwrap();
}
