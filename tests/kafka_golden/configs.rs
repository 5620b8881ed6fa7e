//! The config APIs: DescribeConfigs (1 to 4) of topics (each config with its value, source,
//! type and, from 4, synonyms) and of the broker (its defaults under Kafka's broker names),
//! AlterConfigs (0 to 2) and IncrementalAlterConfigs (0 to 1) of topics, with their refusals
//! (a key no topic has, a value out of range, a broker's configs, a topic that does not
//! exist, a resource type replog does not have, a key given twice, a SET without a value).

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_request as incremental;
use kafka_protocol::messages::*;

use crate::{Broker, Golden, TOPIC, s, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::DescribeConfigs, &[1, 4]),
    (ApiKey::AlterConfigs, &[0, 2]),
    (ApiKey::IncrementalAlterConfigs, &[0, 1]),
];

/// Kafka's config sources: a topic's own, a broker's static setting, the default.
const TOPIC_SOURCE: i8 = 1;
const BROKER_SOURCE: i8 = 4;
const DEFAULT_SOURCE: i8 = 5;

/// Every topic config key in the order replog lists them: its broker name, its type, and its
/// default on the fixture's broker with the default's source.
fn keys() -> Vec<(&'static str, &'static str, i8, String, i8)> {
    let log = replog::LogConfig::default();
    let d = |v: &str| (v.to_string(), DEFAULT_SOURCE);
    let b = |v: String| (v, BROKER_SOURCE);
    [
        ("cleanup.policy", "log.cleanup.policy", 7, d("delete")),
        (
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            5,
            d("86400000"),
        ),
        (
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            5,
            d("9223372036854775807"),
        ),
        (
            "max.message.bytes",
            "message.max.bytes",
            3,
            b(log.batch_bytes_max.to_string()),
        ),
        (
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            5,
            d("3600000"),
        ),
        (
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            5,
            d("9223372036854775807"),
        ),
        (
            "message.timestamp.type",
            "log.message.timestamp.type",
            2,
            d("CreateTime"),
        ),
        (
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            6,
            d("0.5"),
        ),
        (
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            5,
            d("0"),
        ),
        ("retention.bytes", "log.retention.bytes", 5, b("-1".into())),
        ("retention.ms", "log.retention.ms", 5, b("-1".into())),
        (
            "segment.bytes",
            "log.segment.bytes",
            3,
            b(log.segment_bytes.to_string()),
        ),
        ("segment.ms", "log.roll.ms", 5, d("604800000")),
    ]
    .into_iter()
    .map(|(name, broker, kind, (value, source))| (name, broker, kind, value, source))
    .collect()
}

/// replog's own defaults of the keys a broker's `LogConfig` sets (the broker's synonym's
/// level below it).
fn replog_default(name: &str) -> &'static str {
    match name {
        "max.message.bytes" => "4194304",
        "retention.bytes" | "retention.ms" => "-1",
        "segment.bytes" => "67108864",
        _ => "",
    }
}

/// A topic's configs with `set` set on it, as DescribeConfigs answers them without synonyms.
pub(crate) fn topic_configs(set: &[(&str, &str)]) -> Vec<DescribeConfigsResourceResult> {
    topic_configs_with(set, false)
}

/// [`topic_configs`], with each config's synonyms if `synonyms`.
fn topic_configs_with(set: &[(&str, &str)], synonyms: bool) -> Vec<DescribeConfigsResourceResult> {
    keys()
        .into_iter()
        .map(|(name, broker, kind, default, source)| {
            let own = set.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            let mut levels = Vec::new();
            if let Some(v) = own {
                levels.push((name, v.to_string(), TOPIC_SOURCE));
            }
            if source == BROKER_SOURCE {
                levels.push((broker, default.clone(), BROKER_SOURCE));
                levels.push((broker, replog_default(name).to_string(), DEFAULT_SOURCE));
            } else {
                levels.push((broker, default.clone(), DEFAULT_SOURCE));
            }
            let (_, value, source) = levels[0].clone();
            let mut entry = DescribeConfigsResourceResult::default()
                .with_name(s(name))
                .with_value(Some(s(&value)))
                .with_config_source(source)
                .with_config_type(kind)
                .with_documentation(None);
            if synonyms {
                entry = entry.with_synonyms(
                    levels
                        .iter()
                        .map(|(n, v, src)| {
                            DescribeConfigsSynonym::default()
                                .with_name(s(n))
                                .with_value(Some(s(v)))
                                .with_source(*src)
                        })
                        .collect(),
                );
            }
            entry
        })
        .collect()
}

fn resource(kind: i8, name: &str, keys: Option<Vec<&str>>) -> DescribeConfigsResource {
    DescribeConfigsResource::default()
        .with_resource_type(kind)
        .with_resource_name(s(name))
        .with_configuration_keys(keys.map(|k| k.into_iter().map(s).collect()))
}

fn result(kind: i8, name: &str) -> DescribeConfigsResult {
    DescribeConfigsResult::default()
        .with_resource_type(kind)
        .with_resource_name(s(name))
}

/// DescribeConfigs of a topic (every config; from version 4 with synonyms), of this broker
/// (one key, by its broker name, read-only), and refusals: a topic that does not exist
/// (UNKNOWN_TOPIC_OR_PARTITION), a resource type replog does not describe (a broker logger:
/// INVALID_REQUEST).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_lists_a_topics_and_a_brokers_configs() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::DescribeConfigs) {
        let synonyms = v >= 4;
        let request = DescribeConfigsRequest::default()
            .with_include_synonyms(synonyms)
            .with_resources(vec![
                resource(2, TOPIC, None),
                resource(4, "1", Some(vec!["log.segment.bytes"])),
                resource(2, "no.such.topic", None),
                resource(8, "1", None),
            ]);
        let answer = broker.exchange(ApiKey::DescribeConfigs, v, &request).await;
        let segment = topic_configs_with(&[], synonyms)
            .into_iter()
            .find(|c| c.name.as_str() == "segment.bytes")
            .unwrap();
        let expected = DescribeConfigsResponse::default().with_results(vec![
            result(2, TOPIC).with_configs(topic_configs_with(&[], synonyms)),
            result(4, "1").with_configs(vec![
                segment
                    .with_name(s("log.segment.bytes"))
                    .with_read_only(true),
            ]),
            result(2, "no.such.topic")
                .with_error_code(3)
                .with_error_message(Some(s("unknown topic no.such.topic"))),
            result(8, "1")
                .with_error_code(42)
                .with_error_message(Some(s("replog describes topics and brokers only"))),
        ]);
        broker.assert_answer(ApiKey::DescribeConfigs, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// The configs of [`TOPIC`] as DescribeConfigs (version 4, no synonyms) answers them now.
async fn described(broker: &mut Broker) -> Vec<DescribeConfigsResourceResult> {
    let request = DescribeConfigsRequest::default().with_resources(vec![resource(2, TOPIC, None)]);
    let answer = broker.exchange(ApiKey::DescribeConfigs, 4, &request).await;
    let mut r: DescribeConfigsResponse = broker.decode(ApiKey::DescribeConfigs, 4, &answer);
    r.results.remove(0).configs
}

/// AlterConfigs: a topic's configs replaced by the ones given (asked twice: a key set before
/// and left out goes back to the broker's default), and refusals: a key no topic has
/// (INVALID_CONFIG, nothing changed), a broker (INVALID_REQUEST: its configs are set when it
/// starts), a topic that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_configs_replaces_a_topics_configs() {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::AlterConfigs) {
        let resource = |kind: i8, name: &str, configs: &[(&str, &str)]| {
            AlterConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            AlterableConfig::default()
                                .with_name(s(k))
                                .with_value(Some(s(v)))
                        })
                        .collect(),
                )
        };
        let response = |kind: i8, name: &str, code: i16, message: Option<&str>| {
            AlterConfigsResourceResponse::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_error_code(code)
                .with_error_message(message.map(s))
        };
        for set in [
            &[("segment.ms", "3600000")][..],
            &[
                ("retention.ms", "1000"),
                ("cleanup.policy", "compact,delete"),
            ][..],
        ] {
            let request = AlterConfigsRequest::default().with_resources(vec![
                resource(2, TOPIC, set),
                resource(2, TOPIC, &[("retention.ms", "1"), ("no.such.key", "1")]),
                resource(4, "1", &[("log.retention.ms", "1")]),
                resource(2, "no.such.topic", set),
            ]);
            let answer = broker.exchange(ApiKey::AlterConfigs, v, &request).await;
            let expected = AlterConfigsResponse::default().with_responses(vec![
                response(2, TOPIC, 0, None),
                response(
                    2,
                    TOPIC,
                    40,
                    Some("invalid topic config no.such.key=1: not a topic config replog knows"),
                ),
                response(
                    4,
                    "1",
                    42,
                    Some(
                        "a replog broker's configs are set when it starts, not changed at run \
                         time",
                    ),
                ),
                response(2, "no.such.topic", 3, Some("unknown topic no.such.topic")),
            ]);
            broker.assert_answer(ApiKey::AlterConfigs, v, &answer, &expected);
            assert_eq!(described(&mut broker).await, topic_configs(set), "v{v}");
        }
    }
    broker.shutdown().await;
}

/// One step of an incremental change: the changes sent, the answer, and the topic's configs
/// after it.
type Step = (
    Vec<incremental::AlterableConfig>,
    kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse,
    Vec<(&'static str, &'static str)>,
);

/// IncrementalAlterConfigs: SET, APPEND to a list from its default, SUBTRACT, DELETE, each
/// applied to what the topic has; refusals: an APPEND to a key that is not a list and a value
/// out of range (INVALID_CONFIG, nothing of the resource changed), a key given twice and a SET
/// without a value (INVALID_REQUEST).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_alter_configs_changes_what_a_topic_has() {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::IncrementalAlterConfigs) {
        let change = |key: &str, op: i8, value: Option<&str>| {
            incremental::AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(op)
                .with_value(value.map(s))
        };
        let on_topic = |changes: Vec<incremental::AlterableConfig>| {
            incremental::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(TOPIC))
                .with_configs(changes)
        };
        let ok = || {
            AlterConfigsResourceResponse::default()
                .with_resource_type(2)
                .with_resource_name(s(TOPIC))
                .with_error_message(None)
        };
        let refused = |code: i16, message: &str| {
            ok().with_error_code(code)
                .with_error_message(Some(s(message)))
        };
        let steps: Vec<Step> = vec![
            (
                vec![
                    change("retention.ms", 0, Some("5000")),
                    change("cleanup.policy", 2, Some("compact")),
                ],
                ok(),
                vec![
                    ("cleanup.policy", "delete,compact"),
                    ("retention.ms", "5000"),
                ],
            ),
            (
                vec![
                    change("cleanup.policy", 3, Some("delete")),
                    change("retention.ms", 1, None),
                ],
                ok(),
                vec![("cleanup.policy", "compact")],
            ),
            (
                vec![
                    change("segment.ms", 0, Some("1")),
                    change("retention.ms", 2, Some("1")),
                ],
                refused(
                    40,
                    "invalid topic config retention.ms=1: APPEND and SUBTRACT apply to list \
                     configs only",
                ),
                vec![("cleanup.policy", "compact")],
            ),
            (
                vec![change("min.cleanable.dirty.ratio", 0, Some("2"))],
                refused(
                    40,
                    "invalid topic config min.cleanable.dirty.ratio=2: must be a number from 0 \
                     to 1",
                ),
                vec![("cleanup.policy", "compact")],
            ),
            (
                vec![
                    change("segment.ms", 0, Some("1")),
                    change("segment.ms", 1, None),
                ],
                refused(42, "segment.ms is given more than once"),
                vec![("cleanup.policy", "compact")],
            ),
            (
                vec![change("segment.ms", 0, None)],
                refused(42, "segment.ms needs a value"),
                vec![("cleanup.policy", "compact")],
            ),
            (vec![change("cleanup.policy", 1, None)], ok(), vec![]),
        ];
        for (changes, answer_of, after) in steps {
            let request =
                IncrementalAlterConfigsRequest::default().with_resources(vec![on_topic(changes)]);
            let answer = broker
                .exchange(ApiKey::IncrementalAlterConfigs, v, &request)
                .await;
            let expected =
                IncrementalAlterConfigsResponse::default().with_responses(vec![answer_of]);
            broker.assert_answer(ApiKey::IncrementalAlterConfigs, v, &answer, &expected);
            assert_eq!(described(&mut broker).await, topic_configs(&after), "v{v}");
        }
    }
    broker.shutdown().await;
}
