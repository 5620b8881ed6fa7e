//! Topic configs: changed through the metadata Raft group, and applied where they take effect:
//! each hosted replica keeps its topic's settings (read on every produce), refreshed whenever
//! the catalog changes; new segments take the topic's `segment.bytes`, and an active segment
//! older than `segment.ms` rolls.

use std::collections::HashMap;

use super::metadata::MetaError;
use super::service::AlterConfigs;
use super::{Broker, HostedReplica};
use crate::catalog::{MetaCommand, Refused};
use crate::error::{Error, Result};
use crate::protocol::{AlterTopicConfigs, TopicConfigsRequest};
use crate::topic_config::{ConfigChange, ConfigEntry, TopicConfigs, TopicSettings};
use crate::transport::frame::Op;

/// How many times a config change is computed again when another change of the same topic
/// committed first.
const CONFIG_CHANGE_ATTEMPTS: usize = 5;

impl Broker {
    /// Every config of `topic` as this broker applies it, with sources and synonyms.
    pub(crate) fn describe_topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let catalog = self.catalog.read();
        let t = catalog
            .topic(topic)
            .ok_or_else(|| Error::UnknownTopic(topic.to_string()))?;
        Ok(crate::topic_config::describe(
            &t.configs,
            &self.topic_defaults,
        ))
    }

    /// [`describe_topic_configs`](Self::describe_topic_configs) of a topic of `configs`.
    pub(crate) fn topic_config_preview(&self, configs: &TopicConfigs) -> Vec<ConfigEntry> {
        crate::topic_config::describe(configs, &self.topic_defaults)
    }

    /// What this broker refuses of configs it would otherwise keep: a `max.message.bytes`
    /// above the batches its logs take.
    pub(super) fn check_topic_configs(&self, configs: &TopicConfigs) -> Result<()> {
        configs.check()?;
        let max = self.config.log.batch_bytes_max;
        if let Some(v) = configs.get("max.message.bytes")
            && v.parse::<u64>().is_ok_and(|v| v > u64::from(max))
        {
            return Err(Error::InvalidTopicConfig {
                key: "max.message.bytes".into(),
                value: Some(v.to_string()),
                reason: format!("the brokers' logs take batches of at most {max} bytes"),
            });
        }
        Ok(())
    }

    /// Changes a topic's configs through the metadata Raft group: computed here from the catalog
    /// and proposed when this broker leads it (computed again if another change of the
    /// topic committed first), otherwise forwarded once to its leader.
    pub(crate) async fn alter_topic_configs(&self, request: AlterConfigs) -> Result<()> {
        let name = request.topic.clone();
        let unknown = || Error::UnknownTopic(name.clone());
        let exists = || Error::TopicExists(name.clone());
        let mut attempt = 0;
        // Bounded by CONFIG_CHANGE_ATTEMPTS.
        loop {
            attempt += 1;
            let (version, next) = self.changed_configs(&request)?;
            if request.validate_only {
                return Ok(());
            }
            let command = MetaCommand::SetTopicConfigs {
                name: name.clone(),
                version,
                configs: next,
            };
            // The metadata leader is asked with the native wire's request.
            let wrapped = TopicConfigsRequest::Alter(AlterTopicConfigs {
                topic: request.topic.clone(),
                changes: request.changes.clone(),
                replace: request.replace,
                validate_only: request.validate_only,
                forwarded: request.forwarded,
            });
            match self
                .meta_command(command, request.forwarded, Op::TopicConfigs, &wrapped)
                .await
            {
                Err(MetaError::Refused(Refused::TopicChanged))
                    if attempt < CONFIG_CHANGE_ATTEMPTS =>
                {
                    // This broker proposed, so its catalog has the change that came first.
                    continue;
                }
                Err(e) => return Err(e.into_error(unknown, exists)),
                Ok(()) => return Ok(()),
            }
        }
    }

    /// The version of the topic's configs in the catalog, and its configs after `request`'s
    /// changes, checked.
    fn changed_configs(&self, request: &AlterConfigs) -> Result<(u64, TopicConfigs)> {
        let (version, current) = {
            let catalog = self.catalog.read();
            let t = catalog
                .topic(&request.topic)
                .ok_or_else(|| Error::UnknownTopic(request.topic.clone()))?;
            (t.config_version, t.configs.clone())
        };
        let next = if request.replace {
            if let Some(change) = request
                .changes
                .iter()
                .find(|c| !matches!(c, ConfigChange::Set { .. }))
            {
                return Err(Error::InvalidTopicConfig {
                    key: change_key(change).to_string(),
                    value: None,
                    reason: "a whole replacement of a topic's configs only sets keys".into(),
                });
            }
            TopicConfigs::default().changed(&request.changes, |_| String::new())?
        } else {
            let defaults = &self.topic_defaults;
            current.changed(&request.changes, |k| {
                crate::topic_config::effective(&current, defaults, k)
            })?
        };
        self.check_topic_configs(&next)?;
        Ok((version, next))
    }

    /// The settings of `topic`'s partitions on this broker: the catalog's configs for it over
    /// this broker's defaults.
    pub(super) fn settings_of(&self, topic: &str) -> TopicSettings {
        let catalog = self.catalog.read();
        let overrides = catalog.topic(topic).map(|t| &t.configs);
        TopicSettings::of(
            overrides.unwrap_or(&TopicConfigs::default()),
            &self.topic_defaults,
        )
    }

    /// Gives `replica` its topic's current settings (before it is reachable, and after each
    /// catalog change).
    pub(super) fn apply_topic_settings(&self, replica: &HostedReplica) {
        let settings = self.settings_of(&replica.id.topic);
        set_settings(replica, settings);
    }

    /// Gives every hosted replica its topic's current settings, each topic's computed once.
    pub(super) fn refresh_topic_settings(&self) {
        let replicas: Vec<_> = self.replicas.read().values().cloned().collect();
        let mut by_topic: HashMap<String, TopicSettings> = HashMap::new();
        for replica in replicas {
            let settings = *by_topic
                .entry(replica.id.topic.clone())
                .or_insert_with(|| self.settings_of(&replica.id.topic));
            set_settings(&replica, settings);
        }
    }

    /// Rolls the active segment of each hosted replica whose first record is older than its
    /// topic's `segment.ms` (each replica rolls its own: segments are a replica's layout,
    /// not part of what replicas agree on). A roll creates a file and seals the segment it
    /// rolled (a sync): done off the runtime's threads.
    pub(super) async fn roll_aged_segments(&self, now_ms: u64) {
        let replicas: Vec<_> = self.replicas.read().values().cloned().collect();
        let rolls = tokio::task::spawn_blocking(move || {
            for replica in replicas {
                let age = replica.settings.read().segment_ms;
                if let Err(e) = replica.store.log().roll_if_older(age, now_ms) {
                    tracing::warn!(partition = %replica.id, error = %e, "rolling an aged segment failed");
                }
            }
        });
        // Only a panic ends it otherwise, and that is reported where it happened.
        let _ = rolls.await;
    }
}

/// The key a change is about.
fn change_key(change: &ConfigChange) -> &str {
    match change {
        ConfigChange::Set { key, .. }
        | ConfigChange::Delete { key }
        | ConfigChange::Append { key, .. }
        | ConfigChange::Subtract { key, .. } => key,
    }
}

/// Stores `settings` in `replica`, and the segment capacity its topic sets (if it sets one) in
/// its log.
fn set_settings(replica: &HostedReplica, settings: TopicSettings) {
    let old = std::mem::replace(&mut *replica.settings.write(), settings);
    if old.segment_bytes != settings.segment_bytes
        && let Some(bytes) = settings.segment_bytes
    {
        replica.store.log().set_segment_bytes(bytes);
    }
}
