//! Kafka's config APIs over the broker service: DescribeConfigs (topics and brokers),
//! AlterConfigs and IncrementalAlterConfigs (topics). Codec only: each resource is mapped to
//! the service's operation, and each answer or error to Kafka's.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::Error;
use crate::kafka::{KafkaConfig, code, error_code, message};
use crate::node::service::{AlterConfigs, BrokerService};
use crate::security::acl::AclOperation;
use crate::topic_config::{ConfigChange, ConfigEntry, ConfigSource};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (kafka_protocol::messages::ApiKey::DescribeConfigs, 1, 4),
    (kafka_protocol::messages::ApiKey::AlterConfigs, 0, 2),
    (
        kafka_protocol::messages::ApiKey::IncrementalAlterConfigs,
        0,
        1,
    ),
];

/// Kafka's resource types in the config APIs.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// How long a config change may take (the requests carry no timeout).
const CHANGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Kafka's code for a config change or description refused.
fn config_error(e: &Error) -> i16 {
    match e {
        Error::NotLeader { .. } | Error::TryAgain { .. } | Error::NoBrokerReachable { .. } => {
            code::NOT_CONTROLLER
        }
        other => error_code(other),
    }
}

/// One config as DescribeConfigs answers it: with its synonyms if asked for, and what it
/// does if asked for (from version 3, the crate leaves both out before their versions).
fn described(
    entry: &ConfigEntry,
    synonyms: bool,
    documentation: bool,
    read_only: bool,
) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default();
    c.name = s(&entry.name);
    c.value = Some(s(&entry.value));
    c.read_only = read_only;
    c.config_source = entry.source.kafka_code();
    c.config_type = entry.kafka_type();
    c.documentation = documentation.then(|| s(entry.documentation()));
    if synonyms {
        c.synonyms = entry
            .synonyms
            .iter()
            .map(|(name, value, source)| {
                let mut syn = DescribeConfigsSynonym::default();
                syn.name = s(name);
                syn.value = Some(s(value));
                syn.source = source.kafka_code();
                syn
            })
            .collect();
    }
    c
}

/// A broker's settings as Kafka names them (`log.retention.ms`, …): its defaults for topics,
/// read-only (set by its flags or `NodeConfig`).
fn broker_entries(service: &BrokerService) -> Vec<ConfigEntry> {
    service
        .topic_config_preview(&crate::TopicConfigs::default())
        .into_iter()
        .filter_map(|e| {
            // The broker's own level: its synonym after the topic's (there is none here).
            let (name, value, source) = e.synonyms.first()?.clone();
            Some(ConfigEntry {
                name: name.clone(),
                value: value.clone(),
                source,
                synonyms: e
                    .synonyms
                    .iter()
                    .filter(|(_, _, s)| *s != ConfigSource::Topic)
                    .cloned()
                    .collect(),
            })
        })
        .collect()
}

/// DescribeConfigs of topics (each config with its source, synonyms and documentation as
/// asked) and of the answering broker (its defaults, read-only); other resource types are
/// Kafka's INVALID_REQUEST.
pub(crate) fn describe_configs(
    request: DescribeConfigsRequest,
    service: &BrokerService,
    config: &KafkaConfig,
) -> DescribeConfigsResponse {
    let mut r = DescribeConfigsResponse::default();
    let (synonyms, documentation) = (request.include_synonyms, request.include_documentation);
    for resource in request.resources {
        let mut res = DescribeConfigsResult::default();
        res.resource_type = resource.resource_type;
        res.resource_name = resource.resource_name.clone();
        let name = resource.resource_name.as_str();
        let entries = match resource.resource_type {
            RESOURCE_TOPIC => service
                .describe_topic_configs(name)
                .map(|e| (e, false))
                .map_err(|e| (config_error(&e), e.to_string())),
            RESOURCE_BROKER if !service.may_on_cluster(AclOperation::DescribeConfigs) => Err((
                code::CLUSTER_AUTHORIZATION_FAILED,
                "not authorized".to_string(),
            )),
            RESOURCE_BROKER if name.is_empty() || name.parse::<u64>().ok() == Some(config.me) => {
                Ok((broker_entries(service), true))
            }
            RESOURCE_BROKER => Err((
                code::INVALID_REQUEST,
                format!("no such broker here: {name}"),
            )),
            _ => Err((
                code::INVALID_REQUEST,
                "replog describes topics and brokers only".to_string(),
            )),
        };
        match entries {
            Ok((entries, read_only)) => {
                let wanted = resource.configuration_keys;
                res.configs = entries
                    .iter()
                    .filter(|e| {
                        wanted
                            .as_ref()
                            .is_none_or(|keys| keys.iter().any(|k| k.as_str() == e.name))
                    })
                    .map(|e| described(e, synonyms, documentation, read_only))
                    .collect();
            }
            Err((code, reason)) => {
                res.error_code = code;
                res.error_message = message(reason);
            }
        }
        r.results.push(res);
    }
    r
}

/// Why a resource of a config change is refused before it reaches the service: a broker's
/// configs are static (its flags or `NodeConfig`), other resource types are not replog's.
fn not_a_topic(resource_type: i8) -> Option<(i16, &'static str)> {
    match resource_type {
        RESOURCE_TOPIC => None,
        RESOURCE_BROKER => Some((
            code::INVALID_REQUEST,
            "a replog broker's configs are set when it starts, not changed at run time",
        )),
        _ => Some((code::INVALID_REQUEST, "replog changes topic configs only")),
    }
}

/// One resource's change: refused if it is not a topic ([`not_a_topic`]) or its changes
/// could not be read (INVALID_REQUEST), otherwise made through the service; `0` or Kafka's
/// code, and the message.
async fn alter_topic(
    service: &BrokerService,
    resource_type: i8,
    topic: &str,
    changes: Result<Vec<ConfigChange>, String>,
    replace: bool,
    validate_only: bool,
) -> (i16, Option<StrBytes>) {
    if let Some((code, why)) = not_a_topic(resource_type) {
        return (code, message(why));
    }
    let changes = match changes {
        Ok(changes) => changes,
        Err(why) => return (code::INVALID_REQUEST, message(why)),
    };
    let request = AlterConfigs {
        topic: topic.to_string(),
        changes,
        replace,
        validate_only,
        forwarded: false,
    };
    let deadline = tokio::time::Instant::now() + CHANGE_TIMEOUT;
    match service.alter_topic_configs(request, deadline).await {
        Ok(()) => (0, None),
        Err(e) => (config_error(&e), message(e.to_string())),
    }
}

/// AlterConfigs: each topic's configs replaced by the ones given (a key left out takes the
/// broker's default again).
pub(crate) async fn alter_configs(
    request: AlterConfigsRequest,
    service: &BrokerService,
) -> AlterConfigsResponse {
    let mut r = AlterConfigsResponse::default();
    for resource in request.resources {
        let mut res =
            kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default(
            );
        res.resource_type = resource.resource_type;
        res.resource_name = resource.resource_name.clone();
        let changes = resource
            .configs
            .iter()
            .filter_map(|c| {
                Some(ConfigChange::Set {
                    key: c.name.to_string(),
                    value: c.value.as_ref()?.to_string(),
                })
            })
            .collect();
        let (kind, name) = (resource.resource_type, resource.resource_name.as_str());
        (res.error_code, res.error_message) = alter_topic(
            service,
            kind,
            name,
            Ok(changes),
            true,
            request.validate_only,
        )
        .await;
        r.responses.push(res);
    }
    r
}

/// IncrementalAlterConfigs: each topic's configs changed by the operations given (SET 0,
/// DELETE 1, APPEND 2, SUBTRACT 3), all or none; a key given twice, an unknown operation or a
/// SET without a value is Kafka's INVALID_REQUEST.
pub(crate) async fn incremental_alter_configs(
    request: IncrementalAlterConfigsRequest,
    service: &BrokerService,
) -> IncrementalAlterConfigsResponse {
    let mut r = IncrementalAlterConfigsResponse::default();
    for resource in request.resources {
        let mut res = kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        res.resource_type = resource.resource_type;
        res.resource_name = resource.resource_name.clone();
        let changes: Result<Vec<ConfigChange>, String> = {
            let mut seen = std::collections::BTreeSet::new();
            resource
                .configs
                .iter()
                .map(|c| {
                    let key = c.name.to_string();
                    if !seen.insert(key.clone()) {
                        return Err(format!("{key} is given more than once"));
                    }
                    let value = c.value.as_ref().map(|v| v.to_string());
                    let needs =
                        |value: Option<String>| value.ok_or_else(|| format!("{key} needs a value"));
                    Ok(match c.config_operation {
                        0 => ConfigChange::Set {
                            value: needs(value)?,
                            key,
                        },
                        1 => ConfigChange::Delete { key },
                        2 => ConfigChange::Append {
                            value: needs(value)?,
                            key,
                        },
                        3 => ConfigChange::Subtract {
                            value: needs(value)?,
                            key,
                        },
                        op => return Err(format!("{op} is not a config operation")),
                    })
                })
                .collect()
        };
        let (kind, name) = (resource.resource_type, resource.resource_name.as_str());
        (res.error_code, res.error_message) =
            alter_topic(service, kind, name, changes, false, request.validate_only).await;
        r.responses.push(res);
    }
    r
}
