//! Creating and deleting topics through the metadata Raft group, as admin clients of either door
//! ask: the broker's defaults for what a request leaves out, every check, and the wait for a
//! metadata leader within the request's deadline.

use std::time::Duration;

use tokio::time::Instant;

use super::BrokerService;
use super::requests::{AlterConfigs, CreatePartitions, CreateTopic, DeleteTopic};
use crate::error::{Error, Result};
use crate::security::acl::AclOperation;
use crate::topic_config::{ConfigEntry, TopicConfigs};

/// A topic to create, as an admin client asks for it.
#[derive(Clone)]
pub(crate) struct NewTopic {
    /// The topic's name.
    pub(crate) name: String,
    /// `None`: the broker's `num_partitions`.
    pub(crate) partitions: Option<u32>,
    /// `None`: the broker's `default_replication_factor`, or the broker count if smaller.
    pub(crate) replication_factor: Option<u32>,
    /// Configs set on the topic from the start.
    pub(crate) configs: TopicConfigs,
    /// Each partition's brokers, as the client placed them (then `partitions` and
    /// `replication_factor` are `None`); empty: placed by replog.
    pub(crate) assignment: Vec<Vec<crate::types::NodeId>>,
}

/// Whether a topic change failed only because no metadata leader took it (one is being
/// elected, or the one named cannot be reached): asked again until the deadline.
fn no_leader(e: &Error) -> bool {
    matches!(
        e,
        Error::NotLeader { .. } | Error::TryAgain { .. } | Error::NoBrokerReachable { .. }
    )
}

/// Runs `change` again every 100 ms while no metadata leader takes it, until `deadline`.
async fn until_leader<F, Fut>(deadline: Instant, mut change: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let pause = Duration::from_millis(100);
    // Bounded by `deadline`.
    loop {
        match change().await {
            Err(e) if no_leader(&e) && Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

impl BrokerService {
    /// Creates `topic` through the metadata Raft group (with `validate_only`, only checks that it
    /// could be), by [`create_topic`](Self::create_topic)'s rules; returns its partition count
    /// and replication factor. Asked again while no metadata leader takes it, until
    /// `deadline`.
    pub(crate) async fn create_new_topic(
        &self,
        topic: NewTopic,
        validate_only: bool,
        deadline: Instant,
    ) -> Result<(u32, u32)> {
        let brokers = u32::try_from(self.broker_count()).unwrap_or(u32::MAX);
        let placed = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let (partitions, replication_factor) = match topic.assignment.first() {
            Some(first) => (placed(topic.assignment.len()), placed(first.len())),
            None => (
                topic
                    .partitions
                    .unwrap_or(self.broker.config.num_partitions),
                topic
                    .replication_factor
                    .unwrap_or(self.broker.config.default_replication_factor.min(brokers)),
            ),
        };
        let request = CreateTopic {
            topic: NewTopic {
                partitions: Some(partitions),
                replication_factor: Some(replication_factor),
                ..topic
            },
            forwarded: false,
        };
        let shape = (partitions, replication_factor);
        self.authorize_create_topic(&request.topic.name)?;
        if validate_only {
            self.broker.plan_topic(&request.into())?;
            return Ok(shape);
        }
        until_leader(deadline, || self.create_topic(request.clone())).await?;
        Ok(shape)
    }

    /// Deletes the created topic `name` through the metadata Raft group, asked again while no
    /// metadata leader takes it, until `deadline`.
    pub(crate) async fn delete_topic_by_name(&self, name: String, deadline: Instant) -> Result<()> {
        // Authorized first: a client that may not delete it learns nothing of its existence.
        self.authorize_topic(AclOperation::Delete, &name)?;
        if self.topic_shape(&name).is_none() {
            return Err(Error::UnknownTopic(name));
        }
        let request = DeleteTopic {
            name,
            forwarded: false,
        };
        until_leader(deadline, || self.delete_topic(request.clone())).await
    }

    /// Every config a topic of `configs` would have on this broker, with its source and
    /// synonyms (a new topic's, as CreateTopics answers them).
    pub(crate) fn topic_config_preview(&self, configs: &TopicConfigs) -> Vec<ConfigEntry> {
        self.broker.topic_config_preview(configs)
    }

    /// Every config of topic `name`, with its source and synonyms (DESCRIBE_CONFIGS on the
    /// topic).
    pub(crate) fn describe_topic_configs(&self, name: &str) -> Result<Vec<ConfigEntry>> {
        self.authorize_topic(AclOperation::DescribeConfigs, name)?;
        self.broker.describe_topic_configs(name)
    }

    /// Changes a topic's configs through the metadata Raft group (ALTER_CONFIGS on the topic),
    /// asked again while no metadata leader takes it, until `deadline`; a forwarded change is
    /// the forwarding broker's, authorized there.
    pub(crate) async fn alter_topic_configs(
        &self,
        request: AlterConfigs,
        deadline: Instant,
    ) -> Result<()> {
        if !request.forwarded {
            self.authorize_topic(AclOperation::AlterConfigs, &request.topic)?;
        }
        if request.forwarded || request.validate_only {
            return self.broker.alter_topic_configs(request).await;
        }
        until_leader(deadline, || {
            self.broker.alter_topic_configs(request.clone())
        })
        .await
    }

    /// Grows a created topic to `request.count` partitions through the metadata Raft group (ALTER
    /// on the topic), on the brokers `request.assignment` names if it names any, asked again
    /// while no metadata leader takes it, until `deadline`.
    pub(crate) async fn create_partitions(
        &self,
        request: CreatePartitions,
        deadline: Instant,
    ) -> Result<()> {
        self.authorize_topic(AclOperation::Alter, &request.name)?;
        let (name, count) = (request.name.as_str(), request.count);
        let assignment = &request.assignment;
        if request.validate_only {
            return self
                .broker
                .create_partitions(name, count, true, assignment)
                .await;
        }
        until_leader(deadline, || {
            self.broker
                .create_partitions(name, count, false, assignment)
        })
        .await
    }

    /// Creates `name` with the broker's defaults if automatic creation is on and it does not
    /// exist (Kafka's auto-creation from a Metadata request): whether it exists afterwards. A
    /// name starting with `__`, one no topic can have, or a principal without CREATE leaves
    /// it unknown.
    pub(crate) async fn auto_create_topic(&self, name: &str, deadline: Instant) -> bool {
        if self.topic_shape(name).is_some() {
            return true;
        }
        if !self.broker.config.auto_create_topics
            || name.starts_with("__")
            || crate::catalog::check_topic_name(name).is_err()
        {
            return false;
        }
        let topic = NewTopic {
            name: name.to_string(),
            partitions: None,
            replication_factor: None,
            configs: TopicConfigs::default(),
            assignment: Vec::new(),
        };
        match self.create_new_topic(topic, false, deadline).await {
            Ok(_) => {
                tracing::info!(topic = name, "topic created automatically");
                true
            }
            Err(Error::TopicExists(_)) => true,
            Err(e) => {
                tracing::debug!(topic = name, error = %e, "topic not created automatically");
                false
            }
        }
    }

    /// Deletes partition `id`'s records before `before` (`None`: all it has committed) on
    /// every replica (DELETE on the topic); returns its log start after it. Served by the
    /// partition's leader.
    pub(crate) async fn delete_records(
        &self,
        id: &crate::types::PartitionId,
        before: Option<u64>,
    ) -> Result<crate::types::Offset> {
        self.authorize_topic(AclOperation::Delete, &id.topic)?;
        self.broker.delete_records(id, before).await
    }
}
