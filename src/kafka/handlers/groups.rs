//! Kafka's group APIs over the broker's coordinator (`group/runtime.rs`): FindCoordinator,
//! JoinGroup (MEMBER_ID_REQUIRED from v4), SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
//! OffsetFetch, ListGroups and DescribeGroups. Field for field; the meanings are the
//! coordinator's, which are Kafka's classic protocol.

use std::net::SocketAddr;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestKind, ResponseKind, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::group::GroupError;
use crate::group::api::{
    CommitOffset, JoinGroup, JoinReply, MemberRef, OffsetCommit, PartitionResult, SyncGroup,
};
use crate::node::service::BrokerService;
// For what no coordinator here serves (transactions).
use crate::kafka::code::COORDINATOR_NOT_AVAILABLE;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (kafka_protocol::messages::ApiKey::FindCoordinator, 0, 3),
    (kafka_protocol::messages::ApiKey::JoinGroup, 0, 7),
    (kafka_protocol::messages::ApiKey::SyncGroup, 0, 5),
    (kafka_protocol::messages::ApiKey::Heartbeat, 0, 4),
    (kafka_protocol::messages::ApiKey::LeaveGroup, 0, 4),
    (kafka_protocol::messages::ApiKey::OffsetCommit, 2, 8),
    (kafka_protocol::messages::ApiKey::OffsetFetch, 1, 7),
    (kafka_protocol::messages::ApiKey::ListGroups, 0, 4),
    (kafka_protocol::messages::ApiKey::DescribeGroups, 0, 5),
];

/// MEMBER_ID_REQUIRED.
const MEMBER_ID_REQUIRED: i16 = 79;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A request's `group_instance_id`: a static member's, or `None` (null, or empty: Kafka
/// takes no empty instance id).
fn instance_id(id: Option<&StrBytes>) -> Option<String> {
    id.map(|i| i.to_string()).filter(|i| !i.is_empty())
}

pub(crate) async fn find_coordinator(
    request: FindCoordinatorRequest,
    service: &BrokerService,
) -> FindCoordinatorResponse {
    let mut r = FindCoordinatorResponse::default();
    r.node_id = BrokerId(-1);
    r.host = s("");
    r.port = -1;
    if request.key_type != 0 {
        // A transactional producer asks first: a fatal error for it, with the reason (a
        // retriable one would have it ask until its timeout).
        r.error_code = crate::kafka::code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        r.error_message = Some(s("transactions are not served"));
        return r;
    }
    match service.find_coordinator(&request.key).await {
        Ok(c) => match service.kafka_brokers().get(&c.node) {
            Some(addr) => {
                r.node_id = crate::kafka::broker_id(c.node);
                r.host = s(addr.host());
                r.port = i32::from(addr.port());
            }
            None => r.error_code = COORDINATOR_NOT_AVAILABLE,
        },
        Err(e) => r.error_code = e.code(),
    }
    r
}

pub(crate) async fn join_group(
    request: JoinGroupRequest,
    version: i16,
    client_id: &str,
    from: Option<SocketAddr>,
    service: &BrokerService,
) -> JoinGroupResponse {
    let session = u32::try_from(request.session_timeout_ms).unwrap_or(0);
    let rebalance = if version == 0 {
        session
    } else {
        u32::try_from(request.rebalance_timeout_ms).unwrap_or(0)
    };
    let join = JoinGroup {
        group: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        client_id: client_id.to_string(),
        session_timeout_ms: session,
        rebalance_timeout_ms: rebalance,
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
        group_instance_id: instance_id(request.group_instance_id.as_ref()),
    };
    let mut r = JoinGroupResponse::default();
    r.generation_id = -1;
    r.member_id = request.member_id.clone();
    r.leader = s("");
    // No protocol chosen (yet): Kafka's empty name, null from version 7, where it may be.
    r.protocol_name = (version < 7).then(|| s(""));
    match service.join_group(join, from).await {
        Ok(JoinReply::Joined(j)) => {
            r.generation_id = j.generation;
            r.protocol_type = Some(request.protocol_type.clone());
            r.protocol_name = Some(s(&j.protocol));
            r.leader = s(&j.leader);
            r.member_id = s(&j.member_id);
            r.members = j
                .members
                .into_iter()
                .map(|(id, metadata)| {
                    let mut m = JoinGroupResponseMember::default();
                    m.member_id = s(&id);
                    m.metadata = metadata;
                    m
                })
                .collect();
        }
        Ok(JoinReply::MemberIdRequired(id)) => {
            r.error_code = MEMBER_ID_REQUIRED;
            r.member_id = s(&id);
        }
        Err(e) => r.error_code = e.code(),
    }
    r
}

pub(crate) async fn sync_group(
    request: SyncGroupRequest,
    service: &BrokerService,
) -> SyncGroupResponse {
    let sync = SyncGroup {
        group: request.group_id.0.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        assignments: request
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
        group_instance_id: instance_id(request.group_instance_id.as_ref()),
    };
    let mut r = SyncGroupResponse::default();
    match service.sync_group(sync).await {
        Ok(assignment) => {
            r.assignment = assignment;
            r.protocol_type = request.protocol_type.clone();
            r.protocol_name = request.protocol_name.clone();
        }
        Err(e) => r.error_code = e.code(),
    }
    r
}

pub(crate) async fn heartbeat(
    request: HeartbeatRequest,
    service: &BrokerService,
) -> HeartbeatResponse {
    let mut r = HeartbeatResponse::default();
    let member = MemberRef {
        member_id: request.member_id.to_string(),
        group_instance_id: instance_id(request.group_instance_id.as_ref()),
    };
    if let Err(e) = service
        .heartbeat(&request.group_id.0, request.generation_id, &member)
        .await
    {
        r.error_code = e.code();
    }
    r
}

pub(crate) async fn leave_group(
    request: LeaveGroupRequest,
    version: i16,
    service: &BrokerService,
) -> LeaveGroupResponse {
    let group = request.group_id.0.to_string();
    let mut r = LeaveGroupResponse::default();
    if version < 3 {
        let member = MemberRef {
            member_id: request.member_id.to_string(),
            group_instance_id: None,
        };
        if let Err(e) = service.leave_group(&group, &member).await {
            r.error_code = e.code();
        }
        return r;
    }
    // v3+: each member by its member id, or a static member by its instance id.
    for m in request.members {
        let mut mr = MemberResponse::default();
        mr.member_id = m.member_id.clone();
        mr.group_instance_id = m.group_instance_id.clone();
        let member = MemberRef {
            member_id: m.member_id.to_string(),
            group_instance_id: instance_id(m.group_instance_id.as_ref()),
        };
        if let Err(e) = service.leave_group(&group, &member).await {
            // The coordinator's error (or the group id's), not the member's: the answer's own,
            // with no member listed, as Kafka answers.
            if e.coordinator_moved() || matches!(e, GroupError::InvalidGroupId) {
                r.error_code = e.code();
                r.members.clear();
                return r;
            }
            mr.error_code = e.code();
        }
        r.members.push(mr);
    }
    r
}

pub(crate) async fn offset_commit(
    request: OffsetCommitRequest,
    service: &BrokerService,
) -> OffsetCommitResponse {
    let offsets: Vec<CommitOffset> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| CommitOffset {
                topic: t.name.0.to_string(),
                partition: u32::try_from(p.partition_index).unwrap_or(u32::MAX),
                offset: u64::try_from(p.committed_offset).ok(),
                metadata: p
                    .committed_metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                // -1 (and every version before 6): none.
                leader_epoch: Some(p.committed_leader_epoch).filter(|e| *e >= 0),
            })
        })
        .collect();
    let commit = OffsetCommit {
        group: request.group_id.0.to_string(),
        generation: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        offsets,
        group_instance_id: instance_id(request.group_instance_id.as_ref()),
    };
    let outcome = service.commit_offsets(commit).await;
    let mut r = OffsetCommitResponse::default();
    for t in &request.topics {
        let mut tr = OffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = match &outcome {
                Err(e) => e.code(),
                Ok(results) => partition_error(results, &t.name.0, p.partition_index),
            };
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

/// The error code of partition `partition` of `topic` among the coordinator's `results` (0
/// if it has none, or is not among them).
pub(super) fn partition_error(results: &[PartitionResult], topic: &str, partition: i32) -> i16 {
    results
        .iter()
        .find(|x| x.topic == topic && i64::from(x.partition) == i64::from(partition))
        .and_then(|x| x.error)
        .map_or(0, GroupError::code)
}

pub(crate) async fn offset_fetch(
    request: OffsetFetchRequest,
    version: i16,
    service: &BrokerService,
) -> OffsetFetchResponse {
    let wanted = request.topics.as_ref().map(|ts| {
        ts.iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(move |p| (t.name.0.to_string(), u32::try_from(*p).unwrap_or(u32::MAX)))
            })
            .collect::<Vec<_>>()
    });
    let mut r = OffsetFetchResponse::default();
    match service.fetch_offsets(&request.group_id.0, wanted).await {
        Ok(offsets) => {
            let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
            for c in offsets {
                let mut p = OffsetFetchResponsePartition::default();
                p.partition_index = i32::try_from(c.partition).unwrap_or(i32::MAX);
                p.committed_offset = c
                    .offset
                    .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
                p.committed_leader_epoch = c.leader_epoch.unwrap_or(-1);
                p.metadata = Some(s(&c.metadata));
                p.error_code = c.error.map_or(0, GroupError::code);
                match topics.iter_mut().find(|t| *t.name.0 == c.topic) {
                    Some(t) => t.partitions.push(p),
                    None => {
                        let mut t = OffsetFetchResponseTopic::default();
                        t.name = TopicName(s(&c.topic));
                        t.partitions.push(p);
                        topics.push(t);
                    }
                }
            }
            r.topics = topics;
        }
        Err(e) if version < 2 => r.topics = refused_fetch(&request, e.code()),
        Err(e) => r.error_code = e.code(),
    }
    r
}

/// The topics of an OffsetFetch refused before version 2, whose answer has no error of its
/// own: each partition asked for carries the error, with no offset, as Kafka answers (a
/// client would otherwise read an answer without error as "nothing committed").
fn refused_fetch(request: &OffsetFetchRequest, error_code: i16) -> Vec<OffsetFetchResponseTopic> {
    let asked = request.topics.iter().flatten();
    asked
        .map(|t| {
            let mut tr = OffsetFetchResponseTopic::default();
            tr.name = t.name.clone();
            for index in &t.partition_indexes {
                let mut p = OffsetFetchResponsePartition::default();
                p.partition_index = *index;
                p.committed_offset = -1;
                p.metadata = Some(s(""));
                p.error_code = error_code;
                tr.partitions.push(p);
            }
            tr
        })
        .collect()
}

pub(crate) async fn list_groups(service: &BrokerService) -> ListGroupsResponse {
    let mut r = ListGroupsResponse::default();
    r.groups = service
        .list_groups()
        .await
        .into_iter()
        .map(|g| {
            let mut l = ListedGroup::default();
            l.group_id = GroupId(s(&g.group));
            l.protocol_type = s(&g.protocol_type);
            l.group_state = s(&g.state);
            l.group_type = s("classic");
            l
        })
        .collect();
    r
}

pub(crate) async fn describe_groups(
    request: DescribeGroupsRequest,
    service: &BrokerService,
) -> DescribeGroupsResponse {
    let mut r = DescribeGroupsResponse::default();
    for g in request.groups {
        let mut d = DescribedGroup::default();
        d.group_id = g.clone();
        match service.describe_group(&g.0).await {
            Ok(info) => {
                if request.include_authorized_operations {
                    d.authorized_operations = service
                        .authorized_operations(crate::security::acl::ResourceType::Group, &g.0);
                }
                d.group_state = s(&info.state);
                d.protocol_type = s(&info.protocol_type);
                d.protocol_data = s(&info.protocol);
                d.members = info
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut dm = DescribedGroupMember::default();
                        dm.member_id = s(&m.member_id);
                        // Null for a dynamic member, as Kafka answers.
                        dm.group_instance_id = m.group_instance_id.as_deref().map(s);
                        dm.client_id = s(&m.client_id);
                        dm.client_host = s(&m.client_host);
                        dm.member_metadata = m.metadata;
                        dm.member_assignment = m.assignment;
                        dm
                    })
                    .collect();
            }
            Err(e) => d.error_code = e.code(),
        }
        r.groups.push(d);
    }
    r
}

/// Serves a group API's request (`None` for any other request): `client_id` and `from`, the
/// asking client's id and address, name a joining member.
pub(crate) async fn serve(
    request: RequestKind,
    version: i16,
    client_id: &str,
    from: Option<std::net::SocketAddr>,
    service: &BrokerService,
) -> Option<ResponseKind> {
    Some(match request {
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator(r, service).await)
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(join_group(r, version, client_id, from, service).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(sync_group(r, service).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(heartbeat(r, service).await),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(leave_group(r, version, service).await)
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(offset_commit(r, service).await),
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(offset_fetch(r, version, service).await)
        }
        RequestKind::ListGroups(_) => ResponseKind::ListGroups(list_groups(service).await),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups(r, service).await)
        }
        _ => return None,
    })
}
