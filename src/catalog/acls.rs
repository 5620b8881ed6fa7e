//! ACL bindings as the metadata log holds them ([`MetaCommand::CreateAcls`] and
//! [`MetaCommand::DeleteAcls`]), and their effect on the catalog's [`Acls`].
//!
//! A binding is stored with Kafka's numeric codes (FORMAT.md §6.2), so the log's bytes do not
//! depend on the order of a Rust enum's variants.

use serde::{Deserialize, Serialize};

use super::{Catalog, MetaCommand, Refused};
use crate::security::acl::{
    AclBinding, AclOperation, AclPermission, Acls, PatternType, ResourceType,
};

/// One ACL binding in a metadata command: Kafka's codes and the binding's strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AclRecord {
    pub(crate) resource_type: i8,
    pub(crate) resource_name: String,
    pub(crate) pattern_type: i8,
    pub(crate) principal: String,
    pub(crate) host: String,
    pub(crate) operation: i8,
    pub(crate) permission: i8,
}

impl From<&AclBinding> for AclRecord {
    fn from(b: &AclBinding) -> AclRecord {
        AclRecord {
            resource_type: b.resource_type.code(),
            resource_name: b.resource_name.clone(),
            pattern_type: b.pattern_type.code(),
            principal: b.principal.clone(),
            host: b.host.clone(),
            operation: b.operation.code(),
            permission: b.permission.code(),
        }
    }
}

impl AclRecord {
    /// The binding it stores, checked as a new binding is ([`AclBinding::validate`]).
    pub(crate) fn binding(&self) -> Result<AclBinding, String> {
        let code = |what: &str, code: i8| format!("unknown {what} code {code}");
        let binding = AclBinding {
            resource_type: ResourceType::from_code(self.resource_type)
                .ok_or_else(|| code("resource type", self.resource_type))?,
            resource_name: self.resource_name.clone(),
            pattern_type: PatternType::from_code(self.pattern_type)
                .ok_or_else(|| code("pattern type", self.pattern_type))?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: AclOperation::from_code(self.operation)
                .ok_or_else(|| code("operation", self.operation))?,
            permission: AclPermission::from_code(self.permission)
                .ok_or_else(|| code("permission", self.permission))?,
        };
        binding.validate()?;
        Ok(binding)
    }
}

/// The bindings of a command, each checked; refused whole if one is not a binding.
fn bindings(records: &[AclRecord]) -> Result<Vec<AclBinding>, Refused> {
    records
        .iter()
        .map(|r| r.binding().map_err(Refused::Invalid))
        .collect()
}

impl Catalog {
    /// The cluster's ACL bindings.
    pub(crate) fn acls(&self) -> &Acls {
        &self.acls
    }

    /// Applies an ACL command: adds or removes each of its bindings (a binding added twice,
    /// or removed when absent, changes nothing), or refuses the whole command if one of its
    /// records is not a valid binding.
    pub(super) fn apply_acls(&mut self, command: &MetaCommand) -> Result<(), Refused> {
        match command {
            MetaCommand::CreateAcls { acls } => {
                for b in bindings(acls)? {
                    self.acls.add(&b);
                }
                Ok(())
            }
            MetaCommand::DeleteAcls { acls } => {
                for b in bindings(acls)? {
                    self.acls.remove(&b);
                }
                Ok(())
            }
            _ => Err(Refused::Invalid("not an ACL command".into())),
        }
    }
}
