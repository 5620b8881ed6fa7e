//! Kafka's admin and cluster APIs over the broker service: CreateTopics, DeleteTopics,
//! CreatePartitions and DescribeCluster. Codec only:
//! each request is mapped to the service's operation and each answer or error to Kafka's.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::Error;
use crate::kafka::{KafkaConfig, broker_id, code, error_code, message};
use crate::node::service::{BrokerService, NewTopic};
use crate::security::acl::{CLUSTER_RESOURCE_NAME, ResourceType};
use crate::topic_config::TopicConfigs;

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (kafka_protocol::messages::ApiKey::CreateTopics, 2, 7),
    (kafka_protocol::messages::ApiKey::DeleteTopics, 1, 6),
    (kafka_protocol::messages::ApiKey::CreatePartitions, 0, 3),
    (kafka_protocol::messages::ApiKey::DescribeCluster, 0, 2),
];

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
/// leader), with the configs given, answered once it is in the catalog (its leaders are
/// elected right after; clients retry `LEADER_NOT_AVAILABLE`), with its replicas where the
/// request places them, if it does; a config without a value is INVALID_CONFIG, as Kafka's.
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
        let configs = t.configs.iter().map(|c| match &c.value {
            Some(v) => Ok((c.name.as_str(), v.as_str())),
            None => Err(format!("{} needs a value", c.name.as_str())),
        });
        let configs = configs
            .collect::<Result<Vec<_>, String>>()
            .and_then(|pairs| TopicConfigs::from_pairs(pairs).map_err(|e| e.to_string()));
        let assignment = assignment(&t);
        let refused = match (assignment, configs) {
            (Err(refusal), _) => Err(refusal),
            (Ok(_), Err(why)) => Err((code::INVALID_CONFIG, why)),
            (Ok(assignment), Ok(configs)) => Ok((assignment, configs)),
        };
        let (assignment, configs) = match refused {
            Ok(given) => given,
            Err((c, m)) => {
                res.error_code = c;
                res.error_message = message(m);
                r.topics.push(res);
                continue;
            }
        };
        let topic = NewTopic {
            name: t.name.0.to_string(),
            partitions: count(t.num_partitions, -1),
            replication_factor: count(t.replication_factor, -1),
            configs: configs.clone(),
            assignment,
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
                    res.configs = Some(created_configs(service, &configs));
                }
                // From version 7, its id (KIP-516).
                if let Some(uuid) = service.topic_uuid(t.name.0.as_str()) {
                    res.topic_id = uuid::Uuid::from_bytes(uuid);
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

/// The replica assignment a CreateTopics topic gives (empty: none), each partition's brokers
/// in partition order; Kafka's refusals: with a partition count or replication factor too
/// (INVALID_REQUEST), partitions not numbered 0, 1, 2, … or a negative broker id
/// (INVALID_REPLICA_ASSIGNMENT).
fn assignment(t: &CreatableTopic) -> Result<Vec<Vec<crate::types::NodeId>>, (i16, String)> {
    if t.assignments.is_empty() {
        return Ok(Vec::new());
    }
    if t.num_partitions != -1 || t.replication_factor != -1 {
        return Err((
            code::INVALID_REQUEST,
            "a replica assignment goes without a partition count or replication factor".into(),
        ));
    }
    let mut given: Vec<&CreatableReplicaAssignment> = t.assignments.iter().collect();
    given.sort_by_key(|a| a.partition_index);
    let bad = |reason: String| Err((code::INVALID_REPLICA_ASSIGNMENT, reason));
    let mut out = Vec::with_capacity(given.len());
    for (i, a) in given.iter().enumerate() {
        if usize::try_from(a.partition_index).ok() != Some(i) {
            return bad("the partitions are not numbered 0, 1, 2, ...".into());
        }
        let brokers: Option<Vec<crate::types::NodeId>> = a
            .broker_ids
            .iter()
            .map(|b| u64::try_from(b.0).ok())
            .collect();
        match brokers {
            Some(brokers) => out.push(brokers),
            None => return bad(format!("partition {i} names a negative broker id")),
        }
    }
    Ok(out)
}

/// A new topic's configs as CreateTopics answers them: the ones DescribeConfigs lists.
fn created_configs(service: &BrokerService, configs: &TopicConfigs) -> Vec<CreatableTopicConfigs> {
    service
        .topic_config_preview(configs)
        .into_iter()
        .map(|c| {
            let mut created = CreatableTopicConfigs::default();
            created.name = StrBytes::from_string(c.name);
            created.value = Some(StrBytes::from_string(c.value));
            created.config_source = c.source.kafka_code();
            created
        })
        .collect()
}

/// DeleteTopics, by name or (from version 6) by id; each answered with both.
pub(crate) async fn delete_topics(
    request: DeleteTopicsRequest,
    service: &BrokerService,
) -> DeleteTopicsResponse {
    let request_deadline = deadline(request.timeout_ms);
    // Before version 6 by name; from 6 by name or by id (KIP-516).
    let mut names: Vec<(Option<TopicName>, uuid::Uuid)> = request
        .topic_names
        .into_iter()
        .map(|n| (Some(n), uuid::Uuid::nil()))
        .collect();
    names.extend(request.topics.into_iter().map(|t| (t.name, t.topic_id)));
    let mut r = DeleteTopicsResponse::default();
    for (name, id) in names {
        let mut res = DeletableTopicResult::default();
        res.name = name.clone();
        res.topic_id = id;
        let name = name.or_else(|| {
            let found = service.topic_named_by(*id.as_bytes())?;
            res.name = Some(crate::kafka::topic_name(&found));
            res.name.clone()
        });
        let Some(name) = name else {
            res.error_code = code::UNKNOWN_TOPIC_ID;
            res.error_message = message(format!("no topic has id {id}"));
            r.responses.push(res);
            continue;
        };
        if res.topic_id.is_nil()
            && let Some(uuid) = service.topic_uuid(name.0.as_str())
        {
            res.topic_id = uuid::Uuid::from_bytes(uuid);
        }
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

/// CreatePartitions: each topic grown through the service (its checks, placement and wait
/// for a metadata leader), its new partitions on the brokers the request's assignments name
/// if it has any (a broker id that is no broker's: INVALID_REPLICA_ASSIGNMENT, as the other
/// checks of an assignment).
pub(crate) async fn create_partitions(
    request: CreatePartitionsRequest,
    service: &BrokerService,
) -> CreatePartitionsResponse {
    let request_deadline = deadline(request.timeout_ms);
    let mut r = CreatePartitionsResponse::default();
    for t in request.topics {
        let mut res = CreatePartitionsTopicResult::default();
        res.name = t.name.clone();
        res.error_message = None;
        let assignment: Result<Vec<Vec<u64>>, _> = t
            .assignments
            .iter()
            .flatten()
            .map(|a| {
                a.broker_ids
                    .iter()
                    .map(|b| u64::try_from(b.0))
                    .collect::<Result<Vec<u64>, _>>()
            })
            .collect();
        let grown = match assignment {
            Err(_) => Err((
                code::INVALID_REPLICA_ASSIGNMENT,
                "a negative broker id in the assignment".to_string(),
            )),
            Ok(assignment) => {
                let request = crate::node::service::CreatePartitions {
                    name: t.name.0.to_string(),
                    count: u32::try_from(t.count).unwrap_or(0),
                    validate_only: request.validate_only,
                    assignment,
                };
                let grown = service.create_partitions(request, request_deadline).await;
                grown.map_err(|e| (topic_error(&e), e.to_string()))
            }
        };
        if let Err((c, m)) = grown {
            res.error_code = c;
            res.error_message = message(m);
        }
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
    r.cluster_authorized_operations = if request.include_cluster_authorized_operations {
        service.authorized_operations(ResourceType::Cluster, CLUSTER_RESOURCE_NAME)
    } else {
        i32::MIN
    };
    r.brokers = service
        .kafka_brokers()
        .iter()
        .map(|(id, addr)| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = broker_id(*id);
            b.host = StrBytes::from_string(addr.host().to_string());
            b.port = i32::from(addr.port());
            b.rack = service.rack(*id).map(StrBytes::from_string);
            b
        })
        .collect();
    r
}
