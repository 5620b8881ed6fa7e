//! Topic configs: the settings a topic's partitions keep, with Kafka's names and rules.
//!
//! A topic's configs are **overrides**: the keys set on the topic (when it was created, or
//! changed since), kept in the metadata log so every broker applies the same. A key not set
//! on the topic takes the broker's default ([`NodeConfig::topic_defaults`], and for the four
//! keys [`LogConfig`] owns, that field), and failing that, replog's default. Each value has
//! its *source*, as Kafka's DescribeConfigs reports it: [`ConfigSource::Topic`],
//! [`ConfigSource::Broker`] or [`ConfigSource::Default`].
//!
//! | key | values | replog's default | what it does |
//! |---|---|---|---|
//! | `cleanup.policy` | `delete`, `compact`, or both (a list) | `delete` | `delete`: retention removes old segments; `compact`: records without a key are refused (Kafka's `INVALID_RECORD`); `compact` alone: retention removes nothing |
//! | `retention.ms` | −1 (no limit) or ≥ 0 | −1 ([`LogConfig::retention_time`]) | segments whose newest record is older go |
//! | `retention.bytes` | −1 (no limit) or ≥ 0 | −1 ([`LogConfig::retention_bytes`]) | oldest segments go while the rest hold at least this |
//! | `segment.bytes` | ≥ 14 (Kafka's floor) | [`LogConfig::segment_bytes`] | capacity of each new segment file, raised to what one largest batch needs |
//! | `segment.ms` | ≥ 1 | 604800000 (7 days) | a replica rolls its active segment once its first record is this old |
//! | `max.message.bytes` | ≥ 0 | [`LogConfig::batch_bytes_max`] | largest batch a produce may write (at most the broker's `batch_bytes_max`) |
//! | `message.timestamp.after.max.ms` | ≥ 0 | 3600000 (1 hour, Kafka 4's) | a batch of producer's times (CreateTime) with a record stamped more than this after the leader's clock is refused whole (Kafka's `INVALID_TIMESTAMP`): a clock run ahead would move ListOffsets by time |
//! | `message.timestamp.before.max.ms` | ≥ 0 | 9223372036854775807 | the same for a record stamped more than this before the leader's clock |
//! | `message.timestamp.type` | `CreateTime`, `LogAppendTime` | `CreateTime` | `LogAppendTime`: the leader stamps every batch with its clock, and Kafka's consumers read that time |
//! | `delete.retention.ms` | ≥ 0 | 86400000 | how long compaction keeps a tombstone |
//! | `min.compaction.lag.ms` | ≥ 0 | 0 | records younger than this are never compacted |
//! | `max.compaction.lag.ms` | ≥ 1 | 9223372036854775807 | records older than this are compacted whatever the dirty ratio |
//! | `min.cleanable.dirty.ratio` | 0 to 1 | 0.5 | the share of a log's bytes not yet compacted that starts a compaction |
//!
//! Any other key is refused ([`Error::InvalidTopicConfig`] naming it), as Kafka refuses an
//! unknown topic config: a setting replog would not honour is never silently kept.
//!
//! [`NodeConfig::topic_defaults`]: crate::NodeConfig::topic_defaults
//! [`LogConfig`]: crate::LogConfig
//! [`LogConfig::retention_time`]: crate::LogConfig::retention_time
//! [`LogConfig::retention_bytes`]: crate::LogConfig::retention_bytes
//! [`LogConfig::segment_bytes`]: crate::LogConfig::segment_bytes
//! [`LogConfig::batch_bytes_max`]: crate::LogConfig::batch_bytes_max

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::LogConfig;
use crate::error::{Error, Result};

/// The value type of a key, as Kafka's DescribeConfigs names it (`config_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `cleanup.policy`: a list of `delete` and `compact`.
    Policy,
    /// A 64-bit count at least `min`.
    Long { min: i64 },
    /// A 32-bit count at least `min`.
    Int { min: i32 },
    /// A fraction from 0 to 1.
    Ratio,
    /// `CreateTime` or `LogAppendTime`.
    TimestampType,
}

impl Kind {
    /// Kafka's `config_type` code: STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7.
    fn kafka_type(self) -> i8 {
        match self {
            Kind::TimestampType => 2,
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Ratio => 6,
            Kind::Policy => 7,
        }
    }
}

/// One topic config key.
struct Key {
    name: &'static str,
    /// Kafka's broker-wide setting of the same default (DescribeConfigs' synonym).
    broker_name: &'static str,
    kind: Kind,
    /// replog's own default, when neither the topic nor the broker sets the key.
    default: &'static str,
    /// What it does, for DescribeConfigs' documentation.
    doc: &'static str,
}

/// Every topic config key, in the order DescribeConfigs lists them.
const KEYS: &[Key] = &[
    Key {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        kind: Kind::Policy,
        default: "delete",
        doc: "delete: old segments are removed by retention; compact: the latest record of each key is kept",
    },
    Key {
        name: "delete.retention.ms",
        broker_name: "log.cleaner.delete.retention.ms",
        kind: Kind::Long { min: 0 },
        default: "86400000",
        doc: "how long a compacted topic keeps a tombstone",
    },
    Key {
        name: "max.compaction.lag.ms",
        broker_name: "log.cleaner.max.compaction.lag.ms",
        kind: Kind::Long { min: 1 },
        default: "9223372036854775807",
        doc: "records older than this are compacted whatever the dirty ratio",
    },
    Key {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        kind: Kind::Int { min: 0 },
        default: "4194304",
        doc: "the largest record batch a producer may write",
    },
    Key {
        name: "message.timestamp.after.max.ms",
        broker_name: "log.message.timestamp.after.max.ms",
        kind: Kind::Long { min: 0 },
        default: "3600000",
        doc: "a CreateTime record stamped this far past the leader's clock is refused",
    },
    Key {
        name: "message.timestamp.before.max.ms",
        broker_name: "log.message.timestamp.before.max.ms",
        kind: Kind::Long { min: 0 },
        default: "9223372036854775807",
        doc: "a CreateTime record stamped this far before the leader's clock is refused",
    },
    Key {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
        kind: Kind::TimestampType,
        default: "CreateTime",
        doc: "CreateTime: the producer's timestamps; LogAppendTime: the leader's clock when it appends",
    },
    Key {
        name: "min.cleanable.dirty.ratio",
        broker_name: "log.cleaner.min.cleanable.ratio",
        kind: Kind::Ratio,
        default: "0.5",
        doc: "the share of a log not yet compacted that starts a compaction",
    },
    Key {
        name: "min.compaction.lag.ms",
        broker_name: "log.cleaner.min.compaction.lag.ms",
        kind: Kind::Long { min: 0 },
        default: "0",
        doc: "records younger than this are never compacted",
    },
    Key {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        kind: Kind::Long { min: -1 },
        default: "-1",
        doc: "the oldest segments are removed while the rest hold at least this many bytes (-1: no limit)",
    },
    Key {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        kind: Kind::Long { min: -1 },
        default: "-1",
        doc: "segments whose newest record is older than this are removed (-1: no limit)",
    },
    Key {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        kind: Kind::Int { min: 14 },
        default: "67108864",
        doc: "the capacity of each new segment file",
    },
    Key {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        kind: Kind::Long { min: 1 },
        default: "604800000",
        doc: "the active segment rolls once its first record is this old",
    },
];

/// The keys [`LogConfig`] owns: a broker sets their defaults there, not in
/// [`TopicConfigs`].
const LOG_CONFIG_KEYS: &[&str] = &[
    "max.message.bytes",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
];

fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

fn invalid(key: &str, value: Option<&str>, reason: impl Into<String>) -> Error {
    Error::InvalidTopicConfig {
        key: key.to_string(),
        value: value.map(str::to_string),
        reason: reason.into(),
    }
}

/// `value` as `key` keeps it (numbers without signs or zeros in front, a list without
/// repeats), or why `key` cannot take it.
fn canonical(key: &Key, value: &str) -> Result<String> {
    let bad = |reason: String| Err(invalid(key.name, Some(value), reason));
    let v = value.trim();
    match key.kind {
        Kind::Policy => {
            let mut items: Vec<&str> = Vec::new();
            for item in v.split(',').map(str::trim) {
                if item != "delete" && item != "compact" {
                    return bad("each item must be delete or compact".into());
                }
                if !items.contains(&item) {
                    items.push(item);
                }
            }
            Ok(items.join(","))
        }
        Kind::Long { min } => match v.parse::<i64>() {
            Ok(n) if n >= min => Ok(n.to_string()),
            Ok(_) => bad(format!("must be at least {min}")),
            Err(_) => bad("must be a whole number".into()),
        },
        Kind::Int { min } => match v.parse::<i32>() {
            Ok(n) if n >= min => Ok(n.to_string()),
            Ok(_) => bad(format!("must be at least {min}")),
            Err(_) => bad(format!("must be a whole number from {min} to {}", i32::MAX)),
        },
        Kind::Ratio => match v.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r.to_string()),
            _ => bad("must be a number from 0 to 1".into()),
        },
        Kind::TimestampType => match v {
            "CreateTime" | "LogAppendTime" => Ok(v.to_string()),
            _ => bad("must be CreateTime or LogAppendTime".into()),
        },
    }
}

/// Topic config overrides: keys known to replog, each with a valid value. The map a topic
/// keeps in the metadata log, and the broker-wide defaults in
/// [`NodeConfig::topic_defaults`](crate::NodeConfig::topic_defaults).
///
/// ```
/// use replog::TopicConfigs;
///
/// let mut configs = TopicConfigs::default();
/// configs.set("cleanup.policy", "compact")?;
/// configs.set("retention.ms", "+0086400000")?;
/// assert_eq!(configs.get("retention.ms"), Some("86400000"));
/// assert!(configs.set("retention.ms", "soon").is_err());
/// assert!(configs.set("no.such.key", "1").is_err());
/// # Ok::<(), replog::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigs(BTreeMap<String, String>);

impl TopicConfigs {
    /// Sets `key` to `value` (kept in its canonical form).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicConfig`] if `key` is not a topic config replog knows or `value`
    /// is out of its range.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let k = self::key(key)
            .ok_or_else(|| invalid(key, Some(value), "not a topic config replog knows"))?;
        self.0.insert(k.name.to_string(), canonical(k, value)?);
        Ok(())
    }

    /// Removes `key` (the topic takes the broker's default again).
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key)
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Every key set, with its value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The configs `pairs` set, each checked.
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set), for the first pair refused.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut configs = TopicConfigs::default();
        for (k, v) in pairs {
            configs.set(k.as_ref(), v.as_ref())?;
        }
        Ok(configs)
    }

    /// Checks each key and value again (a map read from the metadata log, or given as
    /// broker defaults): the first refused, if any.
    pub(crate) fn check(&self) -> Result<()> {
        self.iter().try_for_each(|(k, v)| {
            let key = self::key(k).ok_or_else(|| invalid(k, Some(v), "not a topic config"))?;
            canonical(key, v).map(|_| ())
        })
    }

    /// Checks these as a broker's defaults: valid, and none of the keys [`LogConfig`] owns.
    pub(crate) fn check_as_defaults(&self) -> Result<()> {
        self.check()?;
        match self.iter().find(|(k, _)| LOG_CONFIG_KEYS.contains(k)) {
            Some((k, v)) => Err(invalid(
                k,
                Some(v),
                "a broker's default for it is its LogConfig setting (retention_time, \
                 retention_bytes, segment_bytes, batch_bytes_max)",
            )),
            None => Ok(()),
        }
    }

    /// These overrides after `changes`, each checked. [`ConfigChange::Append`] and
    /// [`ConfigChange::Subtract`] apply to list values only (`cleanup.policy`), starting from
    /// the value `effective` gives for a key the topic does not set.
    pub(crate) fn changed(
        &self,
        changes: &[ConfigChange],
        effective: impl Fn(&str) -> String,
    ) -> Result<TopicConfigs> {
        let mut next = self.clone();
        for change in changes {
            match change {
                ConfigChange::Set { key, value } => next.set(key, value)?,
                ConfigChange::Delete { key } => {
                    if self::key(key).is_none() {
                        return Err(invalid(key, None, "not a topic config replog knows"));
                    }
                    next.remove(key);
                }
                ConfigChange::Append { key, value } | ConfigChange::Subtract { key, value } => {
                    let k = self::key(key)
                        .ok_or_else(|| invalid(key, Some(value), "not a topic config"))?;
                    if k.kind != Kind::Policy {
                        return Err(invalid(
                            key,
                            Some(value),
                            "APPEND and SUBTRACT apply to list configs only",
                        ));
                    }
                    let current = next.get(key).map_or_else(|| effective(key), str::to_string);
                    let mut items: Vec<String> = current
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                    let given = value.split(',').map(str::trim).filter(|s| !s.is_empty());
                    if matches!(change, ConfigChange::Append { .. }) {
                        items.extend(given.map(str::to_string));
                    } else {
                        let given: Vec<&str> = given.collect();
                        items.retain(|i| !given.contains(&i.as_str()));
                    }
                    if items.is_empty() {
                        return Err(invalid(key, Some(value), "the list would be empty"));
                    }
                    next.set(key, &items.join(","))?;
                }
            }
        }
        Ok(next)
    }
}

/// One change to a topic's configs (Kafka's IncrementalAlterConfigs operations).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigChange {
    /// Set `key` on the topic.
    Set {
        /// The key.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Remove the topic's `key`: it takes the broker's default again.
    Delete {
        /// The key.
        key: String,
    },
    /// Add the items of `value` to the list `key` (those it has already stay once).
    Append {
        /// The key (a list config).
        key: String,
        /// Comma-separated items.
        value: String,
    },
    /// Remove the items of `value` from the list `key`.
    Subtract {
        /// The key (a list config).
        key: String,
        /// Comma-separated items.
        value: String,
    },
}

/// Where a config's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigSource {
    /// Set on the topic.
    Topic,
    /// The broker's default ([`NodeConfig::topic_defaults`](crate::NodeConfig::topic_defaults)
    /// or its [`LogConfig`](crate::LogConfig)).
    Broker,
    /// replog's default.
    Default,
}

impl ConfigSource {
    /// Kafka's `config_source` code: DYNAMIC_TOPIC_CONFIG 1, STATIC_BROKER_CONFIG 4,
    /// DEFAULT_CONFIG 5.
    pub(crate) fn kafka_code(self) -> i8 {
        match self {
            ConfigSource::Topic => 1,
            ConfigSource::Broker => 4,
            ConfigSource::Default => 5,
        }
    }
}

/// A config as a topic has it: its value, where it comes from, and the values it overrides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigEntry {
    /// The key.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// The values in effect at each level, most specific first (the topic's, the broker's,
    /// replog's default), each with its name at that level (a broker's is Kafka's broker
    /// setting, such as `log.retention.ms`).
    pub synonyms: Vec<(String, String, ConfigSource)>,
}

impl ConfigEntry {
    /// The key of this entry, named as a topic's or as a broker's setting.
    fn key(&self) -> Option<&'static Key> {
        KEYS.iter()
            .find(|k| k.name == self.name || k.broker_name == self.name)
    }

    /// Kafka's `config_type` of the key (STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7).
    pub(crate) fn kafka_type(&self) -> i8 {
        self.key().map_or(2, |k| k.kind.kafka_type())
    }

    /// What the key does.
    pub(crate) fn documentation(&self) -> &'static str {
        self.key().map_or("", |k| k.doc)
    }
}

/// A broker's defaults for every key: its [`TopicConfigs`] defaults, and the four keys its
/// [`LogConfig`] owns.
pub(crate) fn broker_defaults(log: &LogConfig, defaults: &TopicConfigs) -> TopicConfigs {
    let mut d = defaults.clone();
    let ms = |t: Duration| u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
    let unlimited = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
    let owned = [
        (
            "max.message.bytes",
            log.batch_bytes_max.min(i32::MAX as u32).to_string(),
        ),
        (
            "retention.bytes",
            unlimited(log.retention_bytes).to_string(),
        ),
        (
            "retention.ms",
            unlimited(log.retention_time.map(ms)).to_string(),
        ),
        (
            "segment.bytes",
            log.segment_bytes.min(i32::MAX as u64).to_string(),
        ),
    ];
    for (k, v) in owned {
        d.0.insert(k.to_string(), v);
    }
    d
}

/// Every key's value for a topic of `overrides` on a broker of `defaults`
/// ([`broker_defaults`]), with its source and synonyms.
pub(crate) fn describe(overrides: &TopicConfigs, defaults: &TopicConfigs) -> Vec<ConfigEntry> {
    KEYS.iter()
        .map(|k| {
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(k.name) {
                synonyms.push((k.name.to_string(), v.to_string(), ConfigSource::Topic));
            }
            if let Some(v) = defaults.get(k.name) {
                synonyms.push((
                    k.broker_name.to_string(),
                    v.to_string(),
                    ConfigSource::Broker,
                ));
            }
            synonyms.push((
                k.broker_name.to_string(),
                k.default.to_string(),
                ConfigSource::Default,
            ));
            let (_, value, source) = synonyms[0].clone();
            ConfigEntry {
                name: k.name.to_string(),
                value,
                source,
                synonyms,
            }
        })
        .collect()
}

/// The value of `key` in effect for a topic of `overrides` on a broker of `defaults`.
pub(crate) fn effective(overrides: &TopicConfigs, defaults: &TopicConfigs, key: &str) -> String {
    overrides
        .get(key)
        .or_else(|| defaults.get(key))
        .or_else(|| self::key(key).map(|k| k.default))
        .unwrap_or_default()
        .to_string()
}

/// What a replica does with its topic's configs, read once per change (cheap to copy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TopicSettings {
    /// `cleanup.policy` has `delete`: retention removes old segments.
    pub(crate) delete: bool,
    /// `cleanup.policy` has `compact`: keyless records are refused.
    pub(crate) compact: bool,
    pub(crate) retention_ms: Option<u64>,
    pub(crate) retention_bytes: Option<u64>,
    /// The topic's own `segment.bytes`, if it sets one (otherwise a log keeps the capacity
    /// it was opened with).
    pub(crate) segment_bytes: Option<u64>,
    pub(crate) segment_ms: u64,
    pub(crate) max_message_bytes: u32,
    /// `message.timestamp.type` is `LogAppendTime`.
    pub(crate) log_append_time: bool,
    /// `message.timestamp.before.max.ms`.
    pub(crate) timestamp_before_max_ms: u64,
    /// `message.timestamp.after.max.ms`.
    pub(crate) timestamp_after_max_ms: u64,
    pub(crate) delete_retention_ms: u64,
    pub(crate) min_compaction_lag_ms: u64,
    pub(crate) max_compaction_lag_ms: u64,
    pub(crate) min_cleanable_dirty_ratio: f64,
}

impl TopicSettings {
    /// Settings that hold nothing back (the metadata Raft group's, and a replica's before it
    /// learns its topic's).
    pub(crate) fn unconstrained() -> TopicSettings {
        TopicSettings {
            delete: true,
            compact: false,
            retention_ms: None,
            retention_bytes: None,
            segment_bytes: None,
            segment_ms: u64::MAX,
            max_message_bytes: u32::MAX,
            log_append_time: false,
            timestamp_before_max_ms: u64::MAX,
            timestamp_after_max_ms: u64::MAX,
            delete_retention_ms: 0,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: u64::MAX,
            min_cleanable_dirty_ratio: 0.5,
        }
    }

    /// The settings of a topic of `overrides` on a broker of `defaults` ([`broker_defaults`]).
    pub(crate) fn of(overrides: &TopicConfigs, defaults: &TopicConfigs) -> TopicSettings {
        let get = |k: &str| effective(overrides, defaults, k);
        let long = |k: &str| get(k).parse::<i64>().unwrap_or(-1);
        let limit = |k: &str| u64::try_from(long(k)).ok();
        let policy = get("cleanup.policy");
        TopicSettings {
            delete: policy.split(',').any(|p| p == "delete"),
            compact: policy.split(',').any(|p| p == "compact"),
            retention_ms: limit("retention.ms"),
            retention_bytes: limit("retention.bytes"),
            segment_bytes: overrides
                .get("segment.bytes")
                .and_then(|v| v.parse::<u64>().ok()),
            segment_ms: limit("segment.ms").unwrap_or(u64::MAX),
            max_message_bytes: u32::try_from(long("max.message.bytes")).unwrap_or(u32::MAX),
            log_append_time: get("message.timestamp.type") == "LogAppendTime",
            timestamp_before_max_ms: limit("message.timestamp.before.max.ms").unwrap_or(u64::MAX),
            timestamp_after_max_ms: limit("message.timestamp.after.max.ms").unwrap_or(u64::MAX),
            delete_retention_ms: limit("delete.retention.ms").unwrap_or(0),
            min_compaction_lag_ms: limit("min.compaction.lag.ms").unwrap_or(0),
            max_compaction_lag_ms: limit("max.compaction.lag.ms").unwrap_or(u64::MAX),
            min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio").parse().unwrap_or(0.5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> TopicConfigs {
        TopicConfigs::from_pairs(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn values_are_kept_canonical_and_bad_ones_name_their_key() {
        let c = configs(&[
            ("cleanup.policy", " compact , delete,compact"),
            ("retention.ms", "+007"),
            ("min.cleanable.dirty.ratio", "0.25"),
        ]);
        assert_eq!(c.get("cleanup.policy"), Some("compact,delete"));
        assert_eq!(c.get("retention.ms"), Some("7"));
        for (k, v) in [
            ("cleanup.policy", "compact,shred"),
            ("cleanup.policy", ""),
            ("retention.ms", "-2"),
            ("retention.ms", "1h"),
            ("segment.bytes", "13"),
            ("segment.bytes", "4294967296"),
            ("segment.ms", "0"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "NaN"),
            ("message.timestamp.type", "logappendtime"),
            ("unclean.leader.election.enable", "true"),
        ] {
            match TopicConfigs::default().set(k, v) {
                Err(Error::InvalidTopicConfig { key, value, .. }) => {
                    assert_eq!((key.as_str(), value.as_deref()), (k, Some(v)));
                }
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }

    #[test]
    fn list_changes_start_from_the_effective_value() {
        let c = TopicConfigs::default();
        let appended = c
            .changed(
                &[ConfigChange::Append {
                    key: "cleanup.policy".into(),
                    value: "compact".into(),
                }],
                |_| "delete".into(),
            )
            .unwrap();
        assert_eq!(appended.get("cleanup.policy"), Some("delete,compact"));
        let subtracted = appended
            .changed(
                &[ConfigChange::Subtract {
                    key: "cleanup.policy".into(),
                    value: "delete".into(),
                }],
                |_| unreachable!("the topic sets it"),
            )
            .unwrap();
        assert_eq!(subtracted.get("cleanup.policy"), Some("compact"));
        let emptied = subtracted.changed(
            &[ConfigChange::Subtract {
                key: "cleanup.policy".into(),
                value: "compact".into(),
            }],
            |_| unreachable!(),
        );
        assert!(matches!(emptied, Err(Error::InvalidTopicConfig { .. })));
        let not_a_list = c.changed(
            &[ConfigChange::Append {
                key: "retention.ms".into(),
                value: "1".into(),
            }],
            |_| "-1".into(),
        );
        assert!(matches!(not_a_list, Err(Error::InvalidTopicConfig { .. })));
        let deleted = appended
            .changed(
                &[ConfigChange::Delete {
                    key: "cleanup.policy".into(),
                }],
                |_| unreachable!(),
            )
            .unwrap();
        assert!(deleted.is_empty());
    }

    #[test]
    fn describe_reports_each_value_with_its_source_and_synonyms() {
        let log = LogConfig {
            retention_time: Some(Duration::from_secs(60)),
            ..LogConfig::default()
        };
        let defaults = broker_defaults(&log, &configs(&[("cleanup.policy", "compact")]));
        let topic = configs(&[("retention.ms", "1000")]);
        let entries = describe(&topic, &defaults);
        assert_eq!(entries.len(), KEYS.len());
        let get = |n: &str| entries.iter().find(|e| e.name == n).unwrap().clone();
        let retention = get("retention.ms");
        assert_eq!(
            (retention.value.as_str(), retention.source),
            ("1000", ConfigSource::Topic)
        );
        assert_eq!(retention.synonyms[1].0, "log.retention.ms");
        assert_eq!(retention.synonyms[1].1, "60000");
        assert_eq!(get("cleanup.policy").source, ConfigSource::Broker);
        assert_eq!(get("segment.ms").source, ConfigSource::Default);
        let s = TopicSettings::of(&topic, &defaults);
        assert!(s.compact && !s.delete);
        assert_eq!(s.retention_ms, Some(1000));
        assert_eq!(s.retention_bytes, None);
        assert_eq!(s.max_message_bytes, log.batch_bytes_max);
    }

    #[test]
    fn a_brokers_defaults_leave_its_log_config_keys_to_it() {
        assert!(
            configs(&[("cleanup.policy", "compact")])
                .check_as_defaults()
                .is_ok()
        );
        assert!(
            configs(&[("retention.ms", "5")])
                .check_as_defaults()
                .is_err()
        );
    }
}
