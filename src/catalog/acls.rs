//! ACL bindings as the metadata log holds them ([`MetaCommand::CreateAcls`] and
//! [`MetaCommand::DeleteAcls`]), and their effect on the catalog's [`Acls`].
//!
//! A binding is stored with Kafka's numeric codes (FORMAT.md §6.2), so the log's bytes do not
//! depend on the order of a Rust enum's variants.

use serde::{Deserialize, Serialize};

use super::{Catalog, MetaCommand, Refused};
use crate::security::acl::{
    AclBinding, AclBindingFilter, AclOperation, AclPermission, Acls, PatternFilter, PatternType,
    ResourceType,
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

/// An ACL filter with Kafka's codes (1 is ANY for the resource type, the operation and the
/// permission; the pattern type's codes are [`PatternFilter`]'s), as Kafka's DescribeAcls and
/// DeleteAcls carry it and the native door's ACL requests too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AclFilterRecord {
    pub(crate) resource_type: i8,
    pub(crate) resource_name: Option<String>,
    pub(crate) pattern_type: i8,
    pub(crate) principal: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) operation: i8,
    pub(crate) permission: i8,
}

/// Kafka's code for "any" in a filter's resource type, operation and permission.
const ANY: i8 = 1;

/// A filter's code: `None` for ANY, `Some` for a value, or why it is neither.
fn any_or<T>(code: i8, what: &str, parse: fn(i8) -> Option<T>) -> Result<Option<T>, String> {
    if code == ANY {
        return Ok(None);
    }
    parse(code)
        .map(Some)
        .ok_or_else(|| format!("unknown {what} code {code}"))
}

impl AclFilterRecord {
    /// The filter it carries, or why its codes are not one.
    pub(crate) fn filter(&self) -> Result<AclBindingFilter, String> {
        Ok(AclBindingFilter {
            resource_type: any_or(self.resource_type, "resource type", ResourceType::from_code)?,
            resource_name: self.resource_name.clone(),
            pattern: PatternFilter::from_code(self.pattern_type)
                .ok_or_else(|| format!("unknown pattern type code {}", self.pattern_type))?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: any_or(self.operation, "operation", AclOperation::from_code)?,
            permission: any_or(self.permission, "permission", AclPermission::from_code)?,
        })
    }
}

impl From<&AclBindingFilter> for AclFilterRecord {
    fn from(f: &AclBindingFilter) -> AclFilterRecord {
        AclFilterRecord {
            resource_type: f.resource_type.map_or(ANY, ResourceType::code),
            resource_name: f.resource_name.clone(),
            pattern_type: f.pattern.code(),
            principal: f.principal.clone(),
            host: f.host.clone(),
            operation: f.operation.map_or(ANY, AclOperation::code),
            permission: f.permission.map_or(ANY, AclPermission::code),
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
