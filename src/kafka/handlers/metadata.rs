//! Kafka's Metadata (versions 1 to 12) over the broker service's: every broker's Kafka
//! address, and each topic's partitions with their leader, leader epoch (a Raft term),
//! replicas and in-sync replicas.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::group::OFFSETS_TOPIC;
use crate::kafka::{KafkaConfig, broker_id, code, topic_name};
use crate::node::service::BrokerService;
use crate::node::service::PartitionInfo;
use crate::security::acl::{AclOperation, CLUSTER_RESOURCE_NAME, ResourceType};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::Metadata, 1, 12)];

/// How long a Metadata request waits for the topics it creates.
const AUTO_CREATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves Metadata: one gathering per request, of the one topic asked for or of all (filtered
/// to those asked for), since each gathering may ask other brokers.
pub(crate) async fn metadata(
    request: MetadataRequest,
    version: i16,
    service: &BrokerService,
    config: &KafkaConfig,
) -> MetadataResponse {
    let request_ops = AuthorizedOps {
        topics: request.include_topic_authorized_operations,
        cluster: request.include_cluster_authorized_operations,
    };
    let (names, unknown_ids) = asked_for(request.topics, service);
    // Topics asked for that do not exist are created first where the request allows it
    // (always before version 4, as Kafka's) and the broker does: answered like any new
    // topic's, LEADER_NOT_AVAILABLE until their leaders are elected.
    if (version < 4 || request.allow_auto_topic_creation)
        && let Some(names) = &names
    {
        let deadline = tokio::time::Instant::now() + AUTO_CREATE_TIMEOUT;
        for name in names {
            service.auto_create_topic(name, deadline).await;
        }
    }
    let partitions = gather(names.as_ref(), service).await;
    let mut r = MetadataResponse::default();
    r.cluster_id = Some(StrBytes::from_static_str("replog"));
    r.controller_id = broker_id(config.me);
    r.brokers = brokers(service);
    r.topics = topics(names.as_ref(), &partitions, unknown_ids, service);
    authorize(&mut r, &request_ops, service);
    r
}

/// The names of the topics asked for (`None`: every topic), and the ids asked for that name
/// no topic.
fn asked_for(
    topics: Option<Vec<MetadataRequestTopic>>,
    service: &BrokerService,
) -> (Option<BTreeSet<String>>, Vec<Uuid>) {
    // A null list asks for every topic; an empty one (from version 1) for none: only the
    // brokers. From version 10 a topic may be asked for by its id instead of its name.
    let mut unknown_ids = Vec::new();
    let names: Option<BTreeSet<String>> = topics.map(|ts| {
        ts.into_iter()
            .filter_map(|t| match t.name {
                Some(n) => Some(n.0.to_string()),
                None if t.topic_id.is_nil() => None,
                None => {
                    let found = service.topic_named_by(*t.topic_id.as_bytes());
                    if found.is_none() {
                        unknown_ids.push(t.topic_id);
                    }
                    found
                }
            })
            .collect::<BTreeSet<String>>()
    });
    (names, unknown_ids)
}

/// The partitions of the topics in `names` (`None`: of every topic), gathered once.
async fn gather(names: Option<&BTreeSet<String>>, service: &BrokerService) -> Vec<PartitionInfo> {
    let only = names.filter(|n| n.len() == 1).and_then(|n| n.first());
    let mut partitions = Vec::new();
    if names.is_none_or(|n| !n.is_empty()) {
        partitions = service
            .metadata(only.map(String::as_str), false)
            .await
            .partitions;
    }
    if let Some(names) = names {
        partitions.retain(|p| names.contains(&p.partition.topic));
    }
    partitions
}

/// Every broker with its Kafka address and rack.
fn brokers(service: &BrokerService) -> Vec<MetadataResponseBroker> {
    service
        .kafka_brokers()
        .iter()
        .map(|(id, addr)| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = broker_id(*id);
            b.host = StrBytes::from_string(addr.host().to_string());
            b.port = i32::from(addr.port());
            b.rack = service.rack(*id).map(StrBytes::from_string);
            b
        })
        .collect()
}

/// The answer's topics: those of `partitions` and those asked for in `names` (found or not),
/// each with its id, then the ids asked for that name no topic.
fn topics(
    names: Option<&BTreeSet<String>>,
    partitions: &[PartitionInfo],
    unknown_ids: Vec<Uuid>,
    service: &BrokerService,
) -> Vec<MetadataResponseTopic> {
    let mut topics: BTreeMap<String, Vec<MetadataResponsePartition>> = BTreeMap::new();
    // A topic asked for and not found is answered with its error.
    for name in names.into_iter().flatten() {
        topics.entry(name.clone()).or_default();
    }
    for p in partitions {
        // replog's own topics are not Kafka's clients' business; the offsets topic is, as
        // Kafka's.
        if p.partition.topic.starts_with("__") && p.partition.topic != OFFSETS_TOPIC {
            continue;
        }
        topics
            .entry(p.partition.topic.clone())
            .or_default()
            .push(partition(p));
    }
    let mut topics: Vec<MetadataResponseTopic> = topics.into_iter().map(topic).collect();
    // Each topic found with its id (KIP-516: a topic deleted and created again has another).
    for t in topics.iter_mut().filter(|t| t.error_code == 0) {
        let name = t.name.as_ref().map_or("", |n| n.0.as_str());
        if let Some(uuid) = service.topic_uuid(name) {
            t.topic_id = Uuid::from_bytes(uuid);
        }
    }
    topics.extend(unknown_ids.into_iter().map(|id| {
        let mut t = MetadataResponseTopic::default();
        t.name = None;
        t.topic_id = id;
        t.error_code = code::UNKNOWN_TOPIC_ID;
        t
    }));
    topics
}

/// The authorized operations the request asked for, and the refusal of each topic asked for
/// that the client may not describe.
fn authorize(r: &mut MetadataResponse, request_ops: &AuthorizedOps, service: &BrokerService) {
    if request_ops.topics {
        for t in r.topics.iter_mut().filter(|t| t.error_code == 0) {
            let name = t.name.as_ref().map_or("", |n| n.0.as_str());
            t.topic_authorized_operations =
                service.authorized_operations(ResourceType::Topic, name);
        }
    }
    if request_ops.cluster {
        r.cluster_authorized_operations =
            service.authorized_operations(ResourceType::Cluster, CLUSTER_RESOURCE_NAME);
    }
    // A topic asked for that the client may not describe is refused whether it exists or not.
    for t in r.topics.iter_mut().filter(|t| t.partitions.is_empty()) {
        let name = t.name.as_ref().map_or("", |n| n.0.as_str());
        if !service.may(AclOperation::Describe, ResourceType::Topic, name) {
            t.error_code = code::TOPIC_AUTHORIZATION_FAILED;
        }
    }
}

/// Which authorized operations (KIP-430) a request asked for.
struct AuthorizedOps {
    topics: bool,
    cluster: bool,
}

/// One partition as Kafka's Metadata names it: a partition without a leader is
/// LEADER_NOT_AVAILABLE, which clients ask again for; its in-sync replicas are the leader's
/// view, or the leader alone when the answering replica has none.
fn partition(p: &PartitionInfo) -> MetadataResponsePartition {
    let mut mp = MetadataResponsePartition::default();
    mp.partition_index = i32::try_from(p.partition.partition).unwrap_or(i32::MAX);
    match p.leader {
        Some(l) => mp.leader_id = broker_id(l),
        None => {
            mp.leader_id = BrokerId(-1);
            mp.error_code = code::LEADER_NOT_AVAILABLE;
        }
    }
    mp.leader_epoch = i32::try_from(p.term).unwrap_or(i32::MAX);
    mp.replica_nodes = p.replicas.iter().map(|r| broker_id(*r)).collect();
    let isr = if p.isr.is_empty() {
        p.leader.into_iter().collect::<Vec<_>>()
    } else {
        p.isr.clone()
    };
    mp.isr_nodes = isr.into_iter().map(broker_id).collect();
    mp
}

/// One topic: its partitions in order, or, with none, why (a name no topic can have is
/// INVALID_TOPIC_EXCEPTION; a valid one that no topic has, UNKNOWN_TOPIC_OR_PARTITION).
fn topic(
    (name, mut partitions): (String, Vec<MetadataResponsePartition>),
) -> MetadataResponseTopic {
    partitions.sort_by_key(|p| p.partition_index);
    let mut t = MetadataResponseTopic::default();
    t.is_internal = name == OFFSETS_TOPIC;
    if partitions.is_empty() {
        t.error_code = match crate::catalog::check_topic_name(&name) {
            Ok(()) => code::UNKNOWN_TOPIC_OR_PARTITION,
            Err(_) => code::INVALID_TOPIC_EXCEPTION,
        };
    }
    t.name = Some(topic_name(&name));
    t.partitions = partitions;
    t
}
