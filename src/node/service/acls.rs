//! The cluster's ACLs as clients manage them (Kafka's DescribeAcls, CreateAcls, DeleteAcls):
//! DESCRIBE on the cluster to list them, ALTER to change them; changes are metadata commands
//! (`catalog/acls.rs`), so every broker enforces them from the next request it serves.

use crate::catalog::{AclRecord, MetaCommand};
use crate::error::{Error, Result};
use crate::security::acl::{AclBinding, AclBindingFilter, AclOperation};

use super::BrokerService;

impl BrokerService {
    /// `Ok` where the broker enforces ACLs and the session may `operation` the cluster (DESCRIBE
    /// to list ACLs, ALTER to change them): what a codec checks before it reads the request's
    /// bindings, as Kafka answers SECURITY_DISABLED and CLUSTER_AUTHORIZATION_FAILED first.
    pub(crate) fn acl_admin(&self, operation: AclOperation) -> Result<()> {
        if !self.authorizes() {
            return Err(Error::SecurityDisabled);
        }
        self.authorize_cluster(operation)
    }

    /// The bindings `filter` selects, as this broker's catalog holds them.
    pub(crate) fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        self.acl_admin(AclOperation::Describe)?;
        Ok(self.broker.catalog.read().acls().matching(filter))
    }

    /// Adds bindings: one answer per binding, in order. The valid ones are committed together
    /// in one metadata command; each invalid one is answered with why, and the others are
    /// added all the same (as Kafka answers each creation). Answered once this broker applied
    /// them too (or the request timeout passed), so that a client reads back what it added.
    pub(crate) async fn create_acls(&self, bindings: Vec<AclBinding>) -> Vec<Result<()>> {
        if let Err(e) = self.acl_admin(AclOperation::Alter) {
            return bindings.iter().map(|_| Err(e.clone())).collect();
        }
        let checked: Vec<Result<()>> = bindings
            .iter()
            .map(|b| b.validate().map_err(Error::InvalidAcl))
            .collect();
        let acls: Vec<AclRecord> = bindings
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(b, _)| AclRecord::from(b))
            .collect();
        if acls.is_empty() {
            return checked;
        }
        let committed = self.propose_acls(MetaCommand::CreateAcls { acls }).await;
        if committed.is_ok() {
            let added = bindings.iter().zip(&checked).filter(|(_, c)| c.is_ok());
            let added: Vec<&AclBinding> = added.map(|(b, _)| b).collect();
            self.broker
                .until_catalog(|c| added.iter().all(|b| c.acls().contains(b)))
                .await;
        }
        checked
            .into_iter()
            .map(|c| c.and_then(|()| committed.clone()))
            .collect()
    }

    /// Removes the bindings each filter selects: per filter, the bindings removed. The
    /// filters are resolved against this broker's catalog, and the bindings they select
    /// removed in one metadata command.
    pub(crate) async fn delete_acls(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>> {
        self.acl_admin(AclOperation::Alter)?;
        let selected: Vec<Vec<AclBinding>> = {
            let catalog = self.broker.catalog.read();
            filters.iter().map(|f| catalog.acls().matching(f)).collect()
        };
        let mut acls: Vec<AclRecord> = Vec::new();
        for b in selected.iter().flatten() {
            let record = AclRecord::from(b);
            if !acls.contains(&record) {
                acls.push(record);
            }
        }
        if !acls.is_empty() {
            self.propose_acls(MetaCommand::DeleteAcls { acls }).await?;
            let removed = selected.iter().flatten();
            self.broker
                .until_catalog(|c| removed.clone().all(|b| !c.acls().contains(b)))
                .await;
        }
        Ok(selected)
    }

    async fn propose_acls(&self, command: MetaCommand) -> Result<()> {
        self.commit_command(command).await.map_err(|e| match e {
            // The leader's catalog refused a binding this broker took for valid.
            Error::InvalidTopic { reason } => Error::InvalidAcl(reason),
            other => other,
        })
    }
}
