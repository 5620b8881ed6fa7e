//! `replog acls`: Kafka's ACLs as `kafka-acls` adds, removes and lists them, with its flags:
//! `--add` / `--remove` with `--allow-principal` / `--deny-principal` (repeatable),
//! `--operation` (repeatable), one resource (`--topic`, `--group`, `--cluster`,
//! `--transactional-id`) and `--resource-pattern-type`; `--list`, optionally narrowed to a
//! resource and a `--principal`. One binding per line on standard output.

use replog::acl::{
    AclBinding, AclBindingFilter, AclOperation, AclPermission, CLUSTER_RESOURCE_NAME,
    PatternFilter, PatternType, ResourceType,
};

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog acls`, spelled as `kafka-acls`'.
#[derive(Debug, clap::Args)]
pub(crate) struct AclsArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// Add the bindings the other flags name.
    #[arg(long, conflicts_with_all = ["remove", "list"])]
    add: bool,
    /// Remove the bindings the other flags name (every operation and principal of the
    /// resource where none is named).
    #[arg(long, conflicts_with = "list")]
    remove: bool,
    /// List bindings (of the named resource and principal, or all).
    #[arg(long)]
    list: bool,
    /// A principal allowed (`User:alice`, `User:*`); repeatable.
    #[arg(long)]
    allow_principal: Vec<String>,
    /// A principal denied; repeatable.
    #[arg(long)]
    deny_principal: Vec<String>,
    /// With --list: only bindings of this principal.
    #[arg(long)]
    principal: Option<String>,
    /// The host the allowed principals are allowed from (default any: `*`).
    #[arg(long, default_value = "*")]
    allow_host: String,
    /// The host the denied principals are denied from (default any: `*`).
    #[arg(long, default_value = "*")]
    deny_host: String,
    /// An operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, All); repeatable.
    #[arg(long, value_parser = parse_operation)]
    operation: Vec<AclOperation>,
    /// The topic (`*` for every topic).
    #[arg(long, conflicts_with_all = ["group", "cluster", "transactional_id"])]
    topic: Option<String>,
    /// The consumer group.
    #[arg(long, conflicts_with_all = ["cluster", "transactional_id"])]
    group: Option<String>,
    /// The cluster.
    #[arg(long, conflicts_with = "transactional_id")]
    cluster: bool,
    /// The transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
    /// How the resource name matches: LITERAL or PREFIXED (--add; default LITERAL), or ANY
    /// or MATCH too (--list, --remove; default LITERAL for a named resource).
    #[arg(long, value_parser = parse_pattern)]
    resource_pattern_type: Option<PatternFilter>,
}

fn parse_operation(name: &str) -> Result<AclOperation, String> {
    AclOperation::from_name(&snake(name)).ok_or_else(|| format!("unknown operation {name:?}"))
}

fn parse_pattern(name: &str) -> Result<PatternFilter, String> {
    match name.to_ascii_uppercase().as_str() {
        "ANY" => Ok(PatternFilter::Any),
        "MATCH" => Ok(PatternFilter::Match),
        other => PatternType::from_name(other)
            .map(PatternFilter::Exactly)
            .ok_or_else(|| format!("unknown pattern type {name:?}")),
    }
}

/// `ClusterAction` → `CLUSTER_ACTION`, as Kafka's tools spell operations either way.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 && !name.contains(['_', '-']) {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl AclsArgs {
    /// The resource named, if any.
    fn resource(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone()))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone()))
        } else if self.cluster {
            Some((ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()))
        } else {
            self.transactional_id
                .clone()
                .map(|id| (ResourceType::TransactionalId, id))
        }
    }

    /// Every (principal, host, permission) the flags name.
    fn principals(&self) -> Vec<(String, String, AclPermission)> {
        let allow = self
            .allow_principal
            .iter()
            .map(|p| (p.clone(), self.allow_host.clone(), AclPermission::Allow));
        let deny = self
            .deny_principal
            .iter()
            .map(|p| (p.clone(), self.deny_host.clone(), AclPermission::Deny));
        allow.chain(deny).collect()
    }
}

fn print(bindings: &[AclBinding]) {
    for b in bindings {
        println!(
            "{} {} {}: {} {} {} from {}",
            b.resource_type,
            b.pattern_type,
            b.resource_name,
            b.permission,
            b.principal,
            b.operation,
            b.host
        );
    }
}

/// Runs `replog acls`.
pub(crate) async fn run(args: AclsArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    let resource = args.resource();
    if args.add {
        let Some((resource_type, resource_name)) = resource else {
            return Err(CliError::Usage(
                "--add needs a resource: --topic, --group, --cluster or --transactional-id",
            ));
        };
        let pattern_type = match args.resource_pattern_type {
            None => PatternType::Literal,
            Some(PatternFilter::Exactly(p)) => p,
            Some(_) => return Err(CliError::Usage("--add takes LITERAL or PREFIXED")),
        };
        if args.operation.is_empty() || args.principals().is_empty() {
            return Err(CliError::Usage(
                "--add needs --operation and --allow-principal or --deny-principal",
            ));
        }
        let mut bindings = Vec::new();
        for (principal, host, permission) in args.principals() {
            for &operation in &args.operation {
                bindings.push(AclBinding {
                    resource_type,
                    resource_name: resource_name.clone(),
                    pattern_type,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation,
                    permission,
                });
            }
        }
        client.create_acls(&bindings).await?;
        println!("Added {} ACL binding(s):", bindings.len());
        print(&bindings);
        return Ok(());
    }
    let mut base = AclBindingFilter::any();
    if let Some((resource_type, name)) = &resource {
        base.resource_type = Some(*resource_type);
        base.resource_name = Some(name.clone());
        base.pattern = PatternFilter::Exactly(PatternType::Literal);
    }
    if let Some(pattern) = args.resource_pattern_type {
        base.pattern = pattern;
    }
    if args.list {
        base.principal = args.principal.clone();
        let mut found = client.describe_acls(&base).await?;
        found.sort();
        print(&found);
        return Ok(());
    }
    if !args.remove {
        return Err(CliError::Usage("one of --add, --remove or --list"));
    }
    if resource.is_none() {
        return Err(CliError::Usage(
            "--remove needs a resource: --topic, --group, --cluster or --transactional-id",
        ));
    }
    // One filter per principal and operation named; the resource's every binding otherwise.
    let principals: Vec<Option<(String, String, AclPermission)>> = if args.principals().is_empty() {
        vec![None]
    } else {
        args.principals().into_iter().map(Some).collect()
    };
    let operations: Vec<Option<AclOperation>> = if args.operation.is_empty() {
        vec![None]
    } else {
        args.operation.iter().copied().map(Some).collect()
    };
    let mut removed = Vec::new();
    for who in &principals {
        for operation in &operations {
            let mut filter = base.clone();
            if let Some((principal, host, permission)) = who {
                filter.principal = Some(principal.clone());
                filter.host = Some(host.clone());
                filter.permission = Some(*permission);
            }
            filter.operation = *operation;
            removed.extend(client.delete_acls(&filter).await?);
        }
    }
    println!("Removed {} ACL binding(s):", removed.len());
    print(&removed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_and_patterns_are_read_as_kafka_acls_spells_them() {
        for (name, op) in [
            ("Write", AclOperation::Write),
            ("ClusterAction", AclOperation::ClusterAction),
            ("IDEMPOTENT_WRITE", AclOperation::IdempotentWrite),
            ("describe-configs", AclOperation::DescribeConfigs),
        ] {
            assert_eq!(parse_operation(name), Ok(op), "{name}");
        }
        assert!(parse_operation("Fly").is_err());
        assert_eq!(
            parse_pattern("prefixed"),
            Ok(PatternFilter::Exactly(PatternType::Prefixed))
        );
        assert_eq!(parse_pattern("MATCH"), Ok(PatternFilter::Match));
    }
}
