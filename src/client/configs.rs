//! Topic configs through any broker (the native door's `TopicConfigs` requests): what
//! `replog configs` runs. Where the brokers enforce ACLs, describing needs DESCRIBE_CONFIGS
//! on the topic and changing ALTER_CONFIGS.

use super::Client;
use crate::error::{Error, Result};
use crate::protocol::{AlterTopicConfigs, TopicConfigsRequest};
use crate::topic_config::{ConfigChange, ConfigEntry};
use crate::transport::frame::Op;

impl Client {
    /// Every config of `topic`: its value, where it comes from (the topic, the broker's
    /// defaults, replog's defaults) and the values it overrides.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`]; [`Error::TopicAuthorizationFailed`];
    /// [`Error::NoBrokerReachable`].
    pub async fn describe_topic_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let request = TopicConfigsRequest::Describe {
            topic: topic.to_string(),
        };
        self.ask_any(Op::TopicConfigs, &request)
            .await
            .map_err(|e| match e {
                Error::UnknownTopic(_) => Error::UnknownTopic(topic.to_string()),
                Error::TopicAuthorizationFailed(_) => {
                    Error::TopicAuthorizationFailed(topic.to_string())
                }
                other => other,
            })
    }

    /// Changes `topic`'s configs by `changes`, all or none, through the metadata Raft group
    /// (Kafka's IncrementalAlterConfigs): every replica applies them without a restart.
    ///
    /// ```no_run
    /// # async fn run(client: &replog::Client) -> replog::Result<()> {
    /// use replog::ConfigChange;
    /// client
    ///     .alter_topic_configs(
    ///         "orders",
    ///         &[ConfigChange::Set {
    ///             key: "retention.ms".into(),
    ///             value: "86400000".into(),
    ///         }],
    ///     )
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTopicConfig`] naming the first key or value refused (nothing changed);
    /// [`Error::UnknownTopic`]; [`Error::TopicAuthorizationFailed`];
    /// [`Error::NoBrokerReachable`]; [`Error::Indeterminate`] if an attempt's outcome stayed
    /// unknown.
    pub async fn alter_topic_configs(&self, topic: &str, changes: &[ConfigChange]) -> Result<()> {
        let request = TopicConfigsRequest::Alter(AlterTopicConfigs {
            topic: topic.to_string(),
            changes: changes.to_vec(),
            replace: false,
            validate_only: false,
            forwarded: false,
        });
        self.admin(Op::TopicConfigs, &request, topic).await
    }
}
