//! Kafka's admin and cluster APIs over the broker service: CreateTopics, DeleteTopics,
//! DescribeConfigs (topics and brokers) and DescribeCluster. Codec only:
//! each request is mapped to the service's operation and each answer or error to Kafka's.

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::Error;
use crate::kafka::{KafkaConfig, broker_id, code, error_code, message};
use crate::node::service::{BrokerService, NewTopic};
use crate::security::acl::{AclOperation, ResourceType};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (kafka_protocol::messages::ApiKey::CreateTopics, 2, 7),
    (kafka_protocol::messages::ApiKey::DeleteTopics, 1, 6),
    (kafka_protocol::messages::ApiKey::DescribeConfigs, 1, 4),
    (kafka_protocol::messages::ApiKey::DescribeCluster, 0, 2),
];

/// Kafka's resource types in DescribeConfigs.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// Kafka's config source: a broker's static configuration (replog has no dynamic configs).
const SOURCE_STATIC_BROKER: i8 = 4;
/// Kafka's config types.
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;
/// DescribeCluster's endpoint types: brokers (1) are served; controllers (2) are Kafka's
/// KRaft quorum, which replog does not have.
const ENDPOINT_BROKERS: i8 = 1;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 119;

/// When a topic change must be answered: the request's `timeout_ms` from now, at most 30 s.
fn deadline(timeout_ms: i32) -> tokio::time::Instant {
    let ms = u64::try_from(timeout_ms).unwrap_or(0).min(30_000);
    tokio::time::Instant::now() + std::time::Duration::from_millis(ms)
}

/// Kafka's code for a topic change refused: with no metadata leader to reach (one being
/// elected, or gone), `NOT_CONTROLLER`, which admin clients retry after refreshing their
/// metadata, as against a Kafka cluster whose controller moved.
fn topic_error(e: &Error) -> i16 {
    match e {
        Error::NotLeader { .. } | Error::TryAgain { .. } | Error::NoBrokerReachable { .. } => {
            code::NOT_CONTROLLER
        }
        Error::TopicExists(_) => code::TOPIC_ALREADY_EXISTS,
        Error::InvalidPartitionCount { .. } => code::INVALID_PARTITIONS,
        Error::InvalidReplicationFactor { .. } => code::INVALID_REPLICATION_FACTOR,
        other => error_code(other),
    }
}

/// A Kafka count as the service takes it: −1 is the broker's default; any other negative is
/// out of range (0 is refused by the service).
fn count<T: TryInto<u32> + PartialEq>(kafka: T, default: T) -> Option<u32> {
    (kafka != default).then(|| kafka.try_into().unwrap_or(0))
}

/// CreateTopics: each topic through the service (its defaults, checks and wait for a metadata
/// leader), answered once it is in the catalog (its leaders are elected right after; clients
/// retry `LEADER_NOT_AVAILABLE`). Manual replica assignments and per-topic configs are
/// refused here: the service's request has no room for them (replog places replicas itself
/// and has no per-topic settings).
pub(crate) async fn create_topics(
    request: CreateTopicsRequest,
    version: i16,
    service: &BrokerService,
) -> CreateTopicsResponse {
    let request_deadline = deadline(request.timeout_ms);
    let mut r = CreateTopicsResponse::default();
    for t in request.topics {
        let mut res = CreatableTopicResult::default();
        res.name = t.name.clone();
        res.num_partitions = -1;
        res.replication_factor = -1;
        let refused = if !t.assignments.is_empty() {
            Some((
                code::INVALID_REPLICA_ASSIGNMENT,
                "replog assigns replicas itself",
            ))
        } else if !t.configs.is_empty() {
            Some((code::INVALID_CONFIG, "replog has no per-topic configs"))
        } else {
            None
        };
        if let Some((c, m)) = refused {
            res.error_code = c;
            res.error_message = message(m);
            r.topics.push(res);
            continue;
        }
        let topic = NewTopic {
            name: t.name.0.to_string(),
            partitions: count(t.num_partitions, -1),
            replication_factor: count(t.replication_factor, -1),
        };
        let created = service
            .create_new_topic(topic, request.validate_only, request_deadline)
            .await;
        match created {
            Ok((partitions, factor)) => {
                res.num_partitions = i32::try_from(partitions).unwrap_or(i32::MAX);
                res.replication_factor = i16::try_from(factor).unwrap_or(i16::MAX);
                // From version 5 Kafka answers the new topic's settings too (KIP-525).
                if version >= 5 {
                    res.configs = Some(created_configs(service));
                }
            }
            Err(e) => {
                res.error_code = topic_error(&e);
                res.error_message = message(e.to_string());
            }
        }
        r.topics.push(res);
    }
    r
}

/// A new topic's settings as CreateTopics answers them: the ones DescribeConfigs lists.
fn created_configs(service: &BrokerService) -> Vec<CreatableTopicConfigs> {
    topic_configs(service)
        .into_iter()
        .map(|c| {
            let mut created = CreatableTopicConfigs::default();
            created.name = c.name;
            created.value = c.value;
            created.read_only = c.read_only;
            created.config_source = c.config_source;
            created.is_sensitive = c.is_sensitive;
            created
        })
        .collect()
}

/// DeleteTopics, by name (topic ids are Kafka's UUIDs, which replog's topics do not have).
pub(crate) async fn delete_topics(
    request: DeleteTopicsRequest,
    service: &BrokerService,
) -> DeleteTopicsResponse {
    let request_deadline = deadline(request.timeout_ms);
    let mut names: Vec<Option<TopicName>> = request.topic_names.into_iter().map(Some).collect();
    names.extend(request.topics.into_iter().map(|t| t.name));
    let mut r = DeleteTopicsResponse::default();
    for name in names {
        let mut res = DeletableTopicResult::default();
        res.name = name.clone();
        let Some(name) = name else {
            res.error_code = code::UNKNOWN_TOPIC_ID;
            res.error_message = message("replog deletes topics by name");
            r.responses.push(res);
            continue;
        };
        let deleted = service
            .delete_topic_by_name(name.0.to_string(), request_deadline)
            .await;
        if let Err(e) = deleted {
            res.error_code = topic_error(&e);
            res.error_message = message(e.to_string());
        }
        r.responses.push(res);
    }
    r
}

/// One read-only config entry.
fn entry(name: &str, value: String, config_type: i8) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default();
    c.name = StrBytes::from_string(name.to_string());
    c.value = Some(StrBytes::from_string(value));
    c.read_only = true;
    c.config_source = SOURCE_STATIC_BROKER;
    c.config_type = config_type;
    // Kafka writes a setting's documentation only when asked for it (and replog has none).
    c.documentation = None;
    c
}

/// The settings a topic's partitions have, as Kafka's topic configs name them (every topic
/// has the broker's: replog has no per-topic settings).
fn topic_configs(service: &BrokerService) -> Vec<DescribeConfigsResourceResult> {
    let log = service.log_config();
    let or_unlimited = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
    vec![
        entry("cleanup.policy", "delete".into(), TYPE_LIST),
        entry("compression.type", "producer".into(), TYPE_STRING),
        entry(
            "max.message.bytes",
            log.batch_bytes_max.to_string(),
            TYPE_INT,
        ),
        entry("message.timestamp.type", "CreateTime".into(), TYPE_STRING),
        entry(
            "retention.bytes",
            or_unlimited(log.retention_bytes).to_string(),
            TYPE_LONG,
        ),
        entry(
            "retention.ms",
            or_unlimited(log.retention_time.map(|t| t.as_millis() as u64)).to_string(),
            TYPE_LONG,
        ),
        entry("segment.bytes", log.segment_bytes.to_string(), TYPE_INT),
    ]
}

/// DescribeConfigs of topics and of brokers (the same log settings), read-only; other
/// resource types are Kafka's INVALID_REQUEST.
pub(crate) fn describe_configs(
    request: DescribeConfigsRequest,
    service: &BrokerService,
    config: &KafkaConfig,
) -> DescribeConfigsResponse {
    let mut r = DescribeConfigsResponse::default();
    for resource in request.resources {
        let mut res = DescribeConfigsResult::default();
        res.resource_type = resource.resource_type;
        res.resource_name = resource.resource_name.clone();
        let name = resource.resource_name.as_str();
        let denied = match resource.resource_type {
            RESOURCE_TOPIC => {
                (!service.may(AclOperation::DescribeConfigs, ResourceType::Topic, name))
                    .then_some(code::TOPIC_AUTHORIZATION_FAILED)
            }
            RESOURCE_BROKER => (!service.may_on_cluster(AclOperation::DescribeConfigs))
                .then_some(code::CLUSTER_AUTHORIZATION_FAILED),
            _ => None,
        };
        if let Some(denied) = denied {
            res.error_code = denied;
            res.error_message = message("not authorized");
            r.results.push(res);
            continue;
        }
        let known = match resource.resource_type {
            RESOURCE_TOPIC => service.topic_shape(name).is_some(),
            RESOURCE_BROKER => name.is_empty() || name.parse::<u64>().ok() == Some(config.me),
            _ => {
                res.error_code = code::INVALID_REQUEST;
                res.error_message = message("replog describes topics and brokers only");
                r.results.push(res);
                continue;
            }
        };
        if !known {
            res.error_code = if resource.resource_type == RESOURCE_TOPIC {
                code::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                code::INVALID_REQUEST
            };
            res.error_message = message(format!("no such resource: {name}"));
            r.results.push(res);
            continue;
        }
        let wanted = resource.configuration_keys;
        res.configs = topic_configs(service)
            .into_iter()
            .filter(|c| wanted.as_ref().is_none_or(|keys| keys.contains(&c.name)))
            .collect();
        r.results.push(res);
    }
    r
}

/// DescribeCluster: every broker with its Kafka address; the answering broker stands in as
/// the controller, as in Metadata.
pub(crate) fn describe_cluster(
    request: &DescribeClusterRequest,
    service: &BrokerService,
    config: &KafkaConfig,
) -> DescribeClusterResponse {
    let mut r = DescribeClusterResponse::default();
    r.endpoint_type = request.endpoint_type;
    if request.endpoint_type != ENDPOINT_BROKERS {
        r.error_code = UNSUPPORTED_ENDPOINT_TYPE;
        r.error_message = message("replog describes its brokers only");
        return r;
    }
    r.cluster_id = StrBytes::from_static_str("replog");
    r.controller_id = broker_id(config.me);
    r.cluster_authorized_operations = i32::MIN;
    r.brokers = service
        .kafka_brokers()
        .iter()
        .map(|(id, addr)| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = broker_id(*id);
            b.host = StrBytes::from_string(addr.ip().to_string());
            b.port = i32::from(addr.port());
            b
        })
        .collect();
    r
}
