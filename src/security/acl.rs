//! Authorization: Kafka's access control lists, and the decision they make.
//!
//! An ACL binding says: principal `P` is allowed (or denied) operation `O` from host `H` on the
//! resources a pattern matches. A pattern is a resource type and a name, taken literally (`*`
//! meaning every name of the type) or as a prefix. The decision for a request
//! follows Kafka's `StandardAuthorizer`:
//!
//! 1. A super user may do anything.
//! 2. Of the bindings whose pattern matches the resource, those naming the principal (or
//!    `User:*`) and the host (or `*`) apply. One that denies the operation (or `ALL`) wins over
//!    any that allows it.
//! 3. One that allows the operation, or `ALL`, or an operation that implies it, allows it:
//!    `READ`, `WRITE`, `DELETE` and `ALTER` imply `DESCRIBE`; `ALTER_CONFIGS` implies
//!    `DESCRIBE_CONFIGS`.
//! 4. Otherwise the request is refused, unless no binding at all matches the resource (for any
//!    principal) and the broker allows everyone where there is no ACL.
//!
//! The bindings live in the metadata log (`catalog.rs`), so every broker decides alike; the
//! policy (super users, the no-ACL default) is each broker's configuration.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The cluster's only resource name, as Kafka's (ACLs on the cluster name it).
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";

/// The principal of a connection nobody authenticated on.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Longest principal, host or resource name an ACL may hold, in bytes.
pub(crate) const ACL_FIELD_BYTES_MAX: usize = 1024;

/// Declares a fieldless enum with Kafka's numeric codes and names: `code`, `from_code`,
/// `name` (Kafka's upper-case spelling), `from_name` (any case, `_` or `-` alike) and
/// `Display`.
macro_rules! kafka_codes {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal, $text:literal;)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in code order.
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant,)+];

            /// Kafka's code for it on the wire.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            /// The value of Kafka's code, if it is one of these.
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// Kafka's name for it (`TOPIC`, `PREFIXED`, `DESCRIBE_CONFIGS`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value Kafka's name names, in any case, with `-` for `_` accepted too.
            pub fn from_name(name: &str) -> Option<$name> {
                let wanted = name.replace('-', "_");
                Self::ALL_VALUES
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(&wanted))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_codes! {
    /// A kind of resource an ACL guards (Kafka's `ResourceType`).
    ResourceType {
        /// A topic, by name.
        Topic = 2, "TOPIC";
        /// A consumer group, by id.
        Group = 3, "GROUP";
        /// The cluster itself ([`CLUSTER_RESOURCE_NAME`]).
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
    }
}

kafka_codes! {
    /// How an ACL's resource name matches names (Kafka's `PatternType`).
    PatternType {
        /// The name itself; `*` matches every name of the type.
        Literal = 3, "LITERAL";
        /// Every name that starts with it.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_codes! {
    /// What an ACL allows or denies (Kafka's `AclOperation`).
    AclOperation {
        /// Every operation.
        All = 2, "ALL";
        /// Read a topic's records; join a group, commit its offsets.
        Read = 3, "READ";
        /// Write a topic's records.
        Write = 4, "WRITE";
        /// Create topics.
        Create = 5, "CREATE";
        /// Delete a topic or a group.
        Delete = 6, "DELETE";
        /// Change: ACLs and users (on the cluster).
        Alter = 7, "ALTER";
        /// Learn that a resource exists, and its metadata.
        Describe = 8, "DESCRIBE";
        /// What brokers do to each other.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Read configurations.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Change configurations.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Take a producer id for idempotent writes.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
    }
}

kafka_codes! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    AclPermission {
        /// Refuses the operation, whatever else allows it.
        Deny = 2, "DENY";
        /// Allows the operation, unless something denies it.
        Allow = 3, "ALLOW";
    }
}

impl AclOperation {
    /// Whether an ACL allowing `self` allows `wanted`.
    fn allows(self, wanted: AclOperation) -> bool {
        use AclOperation::{All, Alter, AlterConfigs, Delete, Describe, DescribeConfigs, Read};
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | AclOperation::Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }
}

/// One ACL: who may (or may not) do what, from where, on which resources.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// The kind of resource.
    pub resource_type: ResourceType,
    /// The resource's name, or a prefix of names, or `*`.
    pub resource_name: String,
    /// How [`resource_name`](Self::resource_name) matches.
    pub pattern_type: PatternType,
    /// Whom it concerns: `User:alice`, or `User:*` for every user.
    pub principal: String,
    /// The client address it concerns (an IP address as text), or `*` for any.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allowed or denied.
    pub permission: AclPermission,
}

impl AclBinding {
    /// Checks that the binding can be stored: a principal `Type:name`, a resource name, a host
    /// `*` or an IP address, the cluster's name for a cluster ACL.
    pub fn validate(&self) -> Result<(), String> {
        check_principal(&self.principal)?;
        if self.resource_name.is_empty() {
            return Err("an ACL needs a resource name".into());
        }
        for (what, text) in [("resource name", &self.resource_name), ("host", &self.host)] {
            if text.len() > ACL_FIELD_BYTES_MAX {
                return Err(format!("the {what} is over {ACL_FIELD_BYTES_MAX} bytes"));
            }
        }
        if self.host != "*" && self.host.parse::<IpAddr>().is_err() {
            return Err(format!(
                "host {:?} is neither * nor an IP address",
                self.host
            ));
        }
        if self.resource_type == ResourceType::Cluster
            && (self.resource_name != CLUSTER_RESOURCE_NAME
                || self.pattern_type != PatternType::Literal)
        {
            return Err(format!(
                "a cluster ACL names the cluster as the literal {CLUSTER_RESOURCE_NAME:?}"
            ));
        }
        Ok(())
    }

    fn entry(&self) -> AclEntry {
        AclEntry {
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation,
            permission: self.permission,
        }
    }
}

/// Checks a principal's form: `Type:name`, both parts non-empty.
pub(crate) fn check_principal(principal: &str) -> Result<(), String> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
            if principal.len() > ACL_FIELD_BYTES_MAX {
                Err(format!(
                    "a principal is at most {ACL_FIELD_BYTES_MAX} bytes"
                ))
            } else {
                Ok(())
            }
        }
        _ => Err(format!(
            "principal {principal:?} is not of the form Type:name"
        )),
    }
}

/// How a filter matches bindings' resource patterns (Kafka's `PatternType` in a filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PatternFilter {
    /// Any pattern type; a name, if given, equal to the binding's.
    Any,
    /// The bindings that would apply to the named resource: its literal name, the literal `*`,
    /// and every prefix of it. With no name, as `Any`.
    Match,
    /// This pattern type only; a name, if given, equal to the binding's.
    Exactly(PatternType),
}

impl PatternFilter {
    /// Kafka's code: 1 ANY, 2 MATCH, 3 LITERAL, 4 PREFIXED.
    pub fn code(self) -> i8 {
        match self {
            PatternFilter::Any => 1,
            PatternFilter::Match => 2,
            PatternFilter::Exactly(p) => p.code(),
        }
    }

    /// The filter Kafka's code means.
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            1 => Some(PatternFilter::Any),
            2 => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Exactly),
        }
    }
}

/// Which bindings a describe or a delete concerns: each `None` matches anything (Kafka's
/// `ANY`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBindingFilter {
    /// The kind of resource.
    pub resource_type: Option<ResourceType>,
    /// The resource name, compared as [`pattern`](Self::pattern) says.
    pub resource_name: Option<String>,
    /// How bindings' patterns match.
    pub pattern: PatternFilter,
    /// The principal, compared exactly (`User:*` matches only bindings for `User:*`).
    pub principal: Option<String>,
    /// The host, compared exactly.
    pub host: Option<String>,
    /// The operation, compared exactly.
    pub operation: Option<AclOperation>,
    /// The permission.
    pub permission: Option<AclPermission>,
}

impl AclBindingFilter {
    /// A filter that matches every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// Whether `binding` is one this filter selects.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        self.resource_type
            .is_none_or(|t| t == binding.resource_type)
            && self.pattern_matches(binding)
            && eq(&self.principal, &binding.principal)
            && eq(&self.host, &binding.host)
            && self.operation.is_none_or(|o| o == binding.operation)
            && self.permission.is_none_or(|p| p == binding.permission)
    }

    fn pattern_matches(&self, binding: &AclBinding) -> bool {
        let name = self.resource_name.as_deref();
        match self.pattern {
            PatternFilter::Exactly(p) if p != binding.pattern_type => false,
            PatternFilter::Exactly(_) | PatternFilter::Any => {
                name.is_none_or(|n| n == binding.resource_name)
            }
            PatternFilter::Match => name.is_none_or(|n| match binding.pattern_type {
                PatternType::Literal => binding.resource_name == n || binding.resource_name == "*",
                PatternType::Prefixed => n.starts_with(binding.resource_name.as_str()),
            }),
        }
    }
}

/// Who asks, as an authorization decision needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Requester<'a> {
    /// `User:alice`.
    pub(crate) principal: &'a str,
    /// The client's address, if known (a binding for a host other than `*` never applies to
    /// a requester without one).
    pub(crate) host: Option<IpAddr>,
}

/// A broker's own policy around the ACLs: who bypasses them, and what no ACL means.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerPolicy {
    /// Principals allowed everything (Kafka's `super.users`).
    pub super_users: Vec<String>,
    /// Allow every request on a resource no ACL names (Kafka's
    /// `allow.everyone.if.no.acl.found`); by default such a resource is for super users only.
    pub allow_everyone_if_no_acl: bool,
}

/// An ACL's who, where, what and whether, stored under its resource pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct AclEntry {
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermission,
}

impl AclEntry {
    fn applies_to(&self, who: &Requester<'_>) -> bool {
        let principal = self.principal == who.principal
            || (self.principal == "User:*" && who.principal.starts_with("User:"));
        let host = self.host == "*"
            || who
                .host
                .is_some_and(|h| self.host.parse::<IpAddr>().is_ok_and(|a| a == h));
        principal && host
    }
}

/// A resource pattern: the key bindings are kept under.
type PatternKey = (ResourceType, PatternType, String);

/// The cluster's ACL bindings, indexed by resource pattern.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acls {
    by_pattern: BTreeMap<PatternKey, Vec<AclEntry>>,
    len: usize,
}

impl Acls {
    /// How many bindings there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds a binding; `false` if it was there already (nothing changes).
    pub(crate) fn add(&mut self, binding: &AclBinding) -> bool {
        let key = (
            binding.resource_type,
            binding.pattern_type,
            binding.resource_name.clone(),
        );
        let entries = self.by_pattern.entry(key).or_default();
        let entry = binding.entry();
        if entries.contains(&entry) {
            return false;
        }
        entries.push(entry);
        self.len += 1;
        true
    }

    /// The bindings `filter` selects, in a stable order.
    pub(crate) fn matching(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.all().filter(|b| filter.matches(b)).collect()
    }

    /// Removes the bindings `filter` selects, and returns them.
    #[cfg(test)]
    pub(crate) fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let removed = self.matching(filter);
        for b in &removed {
            self.remove(b);
        }
        removed
    }

    /// Whether the binding is held.
    pub(crate) fn contains(&self, binding: &AclBinding) -> bool {
        let key = (
            binding.resource_type,
            binding.pattern_type,
            binding.resource_name.clone(),
        );
        self.by_pattern
            .get(&key)
            .is_some_and(|entries| entries.contains(&binding.entry()))
    }

    /// Removes a binding; `false` if it was not there.
    pub(crate) fn remove(&mut self, binding: &AclBinding) -> bool {
        let key = (
            binding.resource_type,
            binding.pattern_type,
            binding.resource_name.clone(),
        );
        let Some(entries) = self.by_pattern.get_mut(&key) else {
            return false;
        };
        let entry = binding.entry();
        let before = entries.len();
        entries.retain(|e| *e != entry);
        let removed = entries.len() < before;
        if entries.is_empty() {
            self.by_pattern.remove(&key);
        }
        if removed {
            self.len -= 1;
        }
        removed
    }

    fn all(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.by_pattern
            .iter()
            .flat_map(|((kind, pattern, name), entries)| {
                entries.iter().map(move |e| AclBinding {
                    resource_type: *kind,
                    resource_name: name.clone(),
                    pattern_type: *pattern,
                    principal: e.principal.clone(),
                    host: e.host.clone(),
                    operation: e.operation,
                    permission: e.permission,
                })
            })
    }

    /// The entries of every pattern that matches resource `name` of type `kind`: its literal
    /// name, the literal `*`, and each of its prefixes.
    fn applicable<'a>(
        &'a self,
        kind: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclEntry> + 'a {
        let literal = [name, "*"]
            .into_iter()
            .take(if name == "*" { 1 } else { 2 })
            .filter_map(move |n| {
                self.by_pattern
                    .get(&(kind, PatternType::Literal, n.to_owned()))
            });
        let prefixed = (1..=name.len())
            .filter(move |&i| name.is_char_boundary(i))
            .filter_map(move |i| {
                self.by_pattern
                    .get(&(kind, PatternType::Prefixed, name[..i].to_owned()))
            });
        literal.chain(prefixed).flatten()
    }

    /// Whether `who` may do `operation` on resource `name` of type `kind`: the module's rules.
    pub(crate) fn decide(
        &self,
        policy: &AuthorizerPolicy,
        who: &Requester<'_>,
        operation: AclOperation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if policy.super_users.iter().any(|s| s == who.principal) {
            return true;
        }
        let mut any = false;
        let mut allowed = false;
        for entry in self.applicable(kind, name) {
            any = true;
            if !entry.applies_to(who) {
                continue;
            }
            match entry.permission {
                AclPermission::Deny
                    if entry.operation == operation || entry.operation == AclOperation::All =>
                {
                    return false;
                }
                AclPermission::Deny => {}
                AclPermission::Allow => allowed |= entry.operation.allows(operation),
            }
        }
        allowed || (!any && policy.allow_everyone_if_no_acl)
    }
}

impl Acls {
    /// Whether `who` may do `operation` on some resource of type `kind` (Kafka's
    /// `authorizeByResourceType`, as InitProducerId asks it of topics): a binding of the type
    /// allows it by any pattern, and no literal `*` binding denies it; or no binding of the
    /// type exists and the policy allows everyone where there is no ACL.
    pub(crate) fn may_on_some(
        &self,
        policy: &AuthorizerPolicy,
        who: &Requester<'_>,
        operation: AclOperation,
        kind: ResourceType,
    ) -> bool {
        if policy.super_users.iter().any(|s| s == who.principal) {
            return true;
        }
        let of_kind = self
            .by_pattern
            .range((kind, PatternType::Literal, String::new())..)
            .take_while(|((k, _, _), _)| *k == kind);
        let mut any = false;
        let mut allowed = false;
        for ((_, pattern, name), entries) in of_kind {
            for entry in entries.iter().filter(|e| e.applies_to(who)) {
                any = true;
                let everything = *pattern == PatternType::Literal && name == "*";
                match entry.permission {
                    AclPermission::Deny
                        if everything
                            && (entry.operation == operation
                                || entry.operation == AclOperation::All) =>
                    {
                        return false;
                    }
                    AclPermission::Deny => {}
                    AclPermission::Allow => allowed |= entry.operation.allows(operation),
                }
            }
            any |= !entries.is_empty();
        }
        allowed || (!any && policy.allow_everyone_if_no_acl)
    }
}

#[cfg(test)]
mod tests;
