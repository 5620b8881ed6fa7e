//! Authorization of client requests, once per request, the same for both doors: a service
//! bound to a connection's [`Session`] decides each operation against the catalog's ACLs with
//! the broker's policy ([`NodeConfig::authorization`](crate::NodeConfig::authorization)), as
//! `security/acl.rs` describes. Kafka's table of which API needs what is followed: produce
//! WRITE, fetch READ, metadata and offsets DESCRIBE on a topic; group requests READ or
//! DESCRIBE on the group; CREATE on the cluster or the topic; ACL changes ALTER on the cluster.

use crate::error::{Error, Result};
use crate::group::GroupError;
use crate::security::Session;
use crate::security::acl::{AclOperation, CLUSTER_RESOURCE_NAME, ResourceType};

use super::{BrokerService, GroupResult};

impl BrokerService {
    /// The same service, for requests made on behalf of `session`.
    pub(crate) fn with_session(&self, session: Session) -> BrokerService {
        BrokerService {
            broker: std::sync::Arc::clone(&self.broker),
            session,
        }
    }

    /// Whether requests are authorized at all (Kafka's ACL APIs answer SECURITY_DISABLED
    /// where they are not).
    pub(crate) fn authorizes(&self) -> bool {
        self.broker.config.authorization.is_some()
    }

    /// Whether the session may do `operation` on resource `name` of type `kind`.
    pub(crate) fn may(&self, operation: AclOperation, kind: ResourceType, name: &str) -> bool {
        let Some(policy) = &self.broker.config.authorization else {
            return true;
        };
        let who = self.session.requester();
        let allowed = self
            .broker
            .catalog
            .read()
            .acls()
            .decide(policy, &who, operation, kind, name);
        if !allowed {
            tracing::debug!(
                principal = %self.session.principal,
                host = ?self.session.host,
                %operation,
                %kind,
                name,
                "request denied"
            );
        }
        allowed
    }

    /// `Ok` if the session may do `operation` on topic `topic`, else
    /// [`Error::TopicAuthorizationFailed`].
    pub(crate) fn authorize_topic(&self, operation: AclOperation, topic: &str) -> Result<()> {
        if self.may(operation, ResourceType::Topic, topic) {
            Ok(())
        } else {
            Err(Error::TopicAuthorizationFailed(topic.to_owned()))
        }
    }

    /// `Ok` if the session may do `operation` on group `group`.
    pub(crate) fn authorize_group(&self, operation: AclOperation, group: &str) -> GroupResult<()> {
        if self.may(operation, ResourceType::Group, group) {
            Ok(())
        } else {
            Err(GroupError::AuthorizationFailed)
        }
    }

    /// Whether the session may do `operation` to the cluster.
    pub(crate) fn may_on_cluster(&self, operation: AclOperation) -> bool {
        self.may(operation, ResourceType::Cluster, CLUSTER_RESOURCE_NAME)
    }

    /// `Ok` if the session may do `operation` to the cluster, else
    /// [`Error::ClusterAuthorizationFailed`].
    pub(crate) fn authorize_cluster(&self, operation: AclOperation) -> Result<()> {
        if self.may_on_cluster(operation) {
            Ok(())
        } else {
            Err(Error::ClusterAuthorizationFailed)
        }
    }

    /// Creating topic `name`: CREATE on the cluster, or on the topic.
    pub(crate) fn authorize_create_topic(&self, name: &str) -> Result<()> {
        if self.may_on_cluster(AclOperation::Create) {
            return Ok(());
        }
        self.authorize_topic(AclOperation::Create, name)
    }

    /// Taking a producer id for idempotent writes: IDEMPOTENT_WRITE on the cluster, or, since
    /// Kafka 3.0, WRITE on some topic (an ACL that allows the session to write a topic, by
    /// any pattern, unless a literal `*` denies it).
    pub(crate) fn authorize_idempotent_write(&self) -> Result<()> {
        let Some(policy) = &self.broker.config.authorization else {
            return Ok(());
        };
        if self.may_on_cluster(AclOperation::IdempotentWrite) {
            return Ok(());
        }
        let who = self.session.requester();
        let catalog = self.broker.catalog.read();
        if catalog
            .acls()
            .may_on_some(policy, &who, AclOperation::Write, ResourceType::Topic)
        {
            Ok(())
        } else {
            Err(Error::ClusterAuthorizationFailed)
        }
    }
}
