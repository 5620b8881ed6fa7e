use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

const HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

fn binding(
    kind: ResourceType,
    name: &str,
    pattern: PatternType,
    principal: &str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        resource_type: kind,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission,
    }
}

fn allow(name: &str, pattern: PatternType, principal: &str, op: AclOperation) -> AclBinding {
    let allow = AclPermission::Allow;
    binding(ResourceType::Topic, name, pattern, principal, op, allow)
}

fn deny(name: &str, pattern: PatternType, principal: &str, op: AclOperation) -> AclBinding {
    let deny = AclPermission::Deny;
    binding(ResourceType::Topic, name, pattern, principal, op, deny)
}

fn acls(bindings: &[AclBinding]) -> Acls {
    let mut acls = Acls::default();
    for b in bindings {
        b.validate().unwrap();
        acls.add(b);
    }
    acls
}

fn alice() -> Requester<'static> {
    Requester {
        principal: "User:alice",
        host: Some(HOST),
    }
}

fn topic_decision(acls: &Acls, who: &Requester<'_>, op: AclOperation, topic: &str) -> bool {
    let policy = AuthorizerPolicy::default();
    acls.decide(&policy, who, op, ResourceType::Topic, topic)
}

use AclOperation::{All, AlterConfigs, Describe, DescribeConfigs, Read, Write};
use PatternType::{Literal, Prefixed};

#[test]
fn no_acl_refuses_unless_everyone_is_allowed_and_super_users_pass() {
    let none = Acls::default();
    assert!(!topic_decision(&none, &alice(), Read, "orders"));
    let open = AuthorizerPolicy {
        allow_everyone_if_no_acl: true,
        ..AuthorizerPolicy::default()
    };
    assert!(none.decide(&open, &alice(), Read, ResourceType::Topic, "orders"));
    let supers = AuthorizerPolicy {
        super_users: vec!["User:alice".into()],
        ..AuthorizerPolicy::default()
    };
    let denied = acls(&[deny("orders", Literal, "User:alice", All)]);
    assert!(denied.decide(&supers, &alice(), Read, ResourceType::Topic, "orders"));
}

#[test]
fn an_acl_for_someone_else_closes_the_resource_to_everyone_even_when_no_acl_means_open() {
    let bob_only = acls(&[allow("orders", Literal, "User:bob", Read)]);
    let open = AuthorizerPolicy {
        allow_everyone_if_no_acl: true,
        ..AuthorizerPolicy::default()
    };
    assert!(!bob_only.decide(&open, &alice(), Read, ResourceType::Topic, "orders"));
    assert!(bob_only.decide(&open, &alice(), Read, ResourceType::Topic, "payments"));
}

#[test]
fn deny_wins_over_allow_and_all_covers_every_operation() {
    let both = acls(&[
        allow("orders", Literal, "User:alice", All),
        deny("ord", Prefixed, "User:*", Write),
    ]);
    assert!(topic_decision(&both, &alice(), Read, "orders"));
    assert!(!topic_decision(&both, &alice(), Write, "orders"));
    let deny_all = acls(&[
        allow("orders", Literal, "User:alice", Read),
        deny("*", Literal, "User:alice", All),
    ]);
    assert!(!topic_decision(&deny_all, &alice(), Read, "orders"));
}

#[test]
fn read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs() {
    for op in [Read, Write, AclOperation::Delete, AclOperation::Alter] {
        let one = acls(&[allow("t", Literal, "User:alice", op)]);
        assert!(topic_decision(&one, &alice(), Describe, "t"), "{op}");
        assert!(
            !topic_decision(&one, &alice(), DescribeConfigs, "t"),
            "{op}"
        );
    }
    let configs = acls(&[allow("t", Literal, "User:alice", AlterConfigs)]);
    assert!(topic_decision(&configs, &alice(), DescribeConfigs, "t"));
    assert!(!topic_decision(&configs, &alice(), Describe, "t"));
    // A denied READ does not deny DESCRIBE.
    let mixed = acls(&[
        allow("t", Literal, "User:alice", Describe),
        deny("t", Literal, "User:alice", Read),
    ]);
    assert!(topic_decision(&mixed, &alice(), Describe, "t"));
    assert!(!topic_decision(&mixed, &alice(), Read, "t"));
}

#[test]
fn literal_wildcard_and_prefixed_patterns_match_as_kafka_matches_them() {
    let a = acls(&[
        allow("pay", Prefixed, "User:alice", Read),
        allow("*", Literal, "User:alice", Describe),
    ]);
    assert!(topic_decision(&a, &alice(), Read, "payments"));
    assert!(topic_decision(&a, &alice(), Read, "pay"));
    assert!(!topic_decision(&a, &alice(), Read, "pa"));
    assert!(!topic_decision(&a, &alice(), Read, "orders"));
    assert!(topic_decision(&a, &alice(), Describe, "orders"));
    // A prefixed `*` is a name that starts with `*`, not a wildcard.
    let star = acls(&[allow("*", Prefixed, "User:alice", Read)]);
    assert!(!topic_decision(&star, &alice(), Read, "orders"));
    assert!(topic_decision(&star, &alice(), Read, "*x"));
    // Resource types are apart.
    let group = acls(&[binding(
        ResourceType::Group,
        "orders",
        Literal,
        "User:alice",
        Read,
        AclPermission::Allow,
    )]);
    assert!(!topic_decision(&group, &alice(), Read, "orders"));
}

#[test]
fn principals_and_hosts_match_exactly_or_by_wildcard() {
    let mut from_elsewhere = allow("t", Literal, "User:*", Read);
    from_elsewhere.host = "10.0.0.5".into();
    let a = acls(&[from_elsewhere.clone()]);
    assert!(!topic_decision(&a, &alice(), Read, "t"));
    let remote = Requester {
        principal: "User:bob",
        host: Some("10.0.0.5".parse().unwrap()),
    };
    assert!(topic_decision(&a, &remote, Read, "t"));
    let no_host = Requester {
        principal: "User:bob",
        host: None,
    };
    assert!(!topic_decision(&a, &no_host, Read, "t"));
    // `User:*` does not cover another principal type.
    let broker = Requester {
        principal: "Broker:1",
        host: Some(HOST),
    };
    let any_user = acls(&[allow("t", Literal, "User:*", Read)]);
    assert!(!topic_decision(&any_user, &broker, Read, "t"));
    assert!(topic_decision(&any_user, &alice(), Read, "t"));
}

#[test]
fn bindings_are_validated() {
    let good = allow("t", Literal, "User:alice", Read);
    assert!(good.validate().is_ok());
    for bad in [
        AclBinding {
            principal: "alice".into(),
            ..good.clone()
        },
        AclBinding {
            principal: "User:".into(),
            ..good.clone()
        },
        AclBinding {
            resource_name: String::new(),
            ..good.clone()
        },
        AclBinding {
            host: "example.com".into(),
            ..good.clone()
        },
        AclBinding {
            resource_type: ResourceType::Cluster,
            resource_name: "other".into(),
            ..good.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    let cluster = AclBinding {
        resource_type: ResourceType::Cluster,
        resource_name: CLUSTER_RESOURCE_NAME.into(),
        ..good
    };
    assert!(cluster.validate().is_ok());
}

#[test]
fn filters_select_and_remove_bindings_and_adding_twice_changes_nothing() {
    let lit = allow("orders", Literal, "User:alice", Read);
    let pre = allow("ord", Prefixed, "User:bob", Write);
    let star = allow("*", Literal, "User:carol", Describe);
    let mut a = acls(&[lit.clone(), pre.clone(), star.clone()]);
    assert!(!a.add(&lit));
    assert_eq!(a.len(), 3);
    let matching = AclBindingFilter {
        resource_name: Some("orders".into()),
        pattern: PatternFilter::Match,
        ..AclBindingFilter::any()
    };
    assert_eq!(a.matching(&matching).len(), 3);
    let exact = AclBindingFilter {
        resource_name: Some("orders".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.matching(&exact), vec![lit.clone()]);
    let prefixed = AclBindingFilter {
        pattern: PatternFilter::Exactly(Prefixed),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.remove_matching(&prefixed), vec![pre]);
    assert_eq!(a.len(), 2);
    let bobs = AclBindingFilter {
        principal: Some("User:alice".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(a.remove_matching(&bobs), vec![lit]);
    assert_eq!(a.matching(&AclBindingFilter::any()), vec![star]);
}

#[test]
fn codes_and_names_round_trip() {
    for op in AclOperation::ALL_VALUES {
        assert_eq!(AclOperation::from_code(op.code()), Some(*op));
        assert_eq!(AclOperation::from_name(op.name()), Some(*op));
    }
    assert_eq!(
        AclOperation::from_name("describe-configs"),
        Some(DescribeConfigs)
    );
    assert_eq!(ResourceType::from_code(1), None);
    assert_eq!(PatternFilter::from_code(2), Some(PatternFilter::Match));
    assert_eq!(
        PatternFilter::from_code(4),
        Some(PatternFilter::Exactly(Prefixed))
    );
    assert_eq!(PatternFilter::from_code(0), None);
}

/// The rules as the module's doc states them, over a plain list of bindings.
fn model(bindings: &[AclBinding], who: &Requester<'_>, op: AclOperation, topic: &str) -> bool {
    let on_resource: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| {
            b.resource_type == ResourceType::Topic
                && match b.pattern_type {
                    Literal => b.resource_name == topic || b.resource_name == "*",
                    Prefixed => topic.starts_with(&b.resource_name),
                }
        })
        .collect();
    let applies: Vec<&&AclBinding> = on_resource
        .iter()
        .filter(|b| {
            (b.principal == who.principal || b.principal == "User:*")
                && (b.host == "*" || Some(b.host.parse().unwrap()) == who.host)
        })
        .collect();
    let denies = applies
        .iter()
        .any(|b| b.permission == AclPermission::Deny && (b.operation == op || b.operation == All));
    let implied = |have: AclOperation| {
        have == All
            || have == op
            || (op == Describe
                && [Read, Write, AclOperation::Delete, AclOperation::Alter].contains(&have))
            || (op == DescribeConfigs && have == AlterConfigs)
    };
    let allows = applies
        .iter()
        .any(|b| b.permission == AclPermission::Allow && implied(b.operation));
    !denies && allows
}

fn arb_binding() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(vec!["a", "ab", "abc", "b", "*"]),
        prop::bool::ANY,
        prop::sample::select(vec!["User:alice", "User:bob", "User:*"]),
        prop::sample::select(vec!["*", "127.0.0.1", "10.0.0.1"]),
        prop::sample::select(AclOperation::ALL_VALUES.to_vec()),
        prop::bool::ANY,
    )
        .prop_map(
            |(name, prefixed, principal, host, op, allowed)| AclBinding {
                resource_type: ResourceType::Topic,
                resource_name: name.into(),
                pattern_type: if prefixed { Prefixed } else { Literal },
                principal: principal.into(),
                host: host.into(),
                operation: op,
                permission: if allowed {
                    AclPermission::Allow
                } else {
                    AclPermission::Deny
                },
            },
        )
}

proptest! {
    #[test]
    fn decisions_agree_with_the_rules_over_a_plain_list(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        removed in prop::collection::vec(arb_binding(), 0..3),
        topic in prop::sample::select(vec!["a", "ab", "abc", "b", "x"]),
        op in prop::sample::select(AclOperation::ALL_VALUES.to_vec()),
        principal in prop::sample::select(vec!["User:alice", "User:bob"]),
    ) {
        let mut indexed = acls(&bindings);
        let mut plain: Vec<AclBinding> = Vec::new();
        for b in bindings {
            if !plain.contains(&b) {
                plain.push(b);
            }
        }
        // Removing bindings by exact filters keeps index and list alike.
        for r in &removed {
            let filter = AclBindingFilter {
                resource_type: Some(r.resource_type),
                resource_name: Some(r.resource_name.clone()),
                pattern: PatternFilter::Exactly(r.pattern_type),
                principal: Some(r.principal.clone()),
                host: None,
                operation: Some(r.operation),
                permission: None,
            };
            indexed.remove_matching(&filter);
            plain.retain(|b| !filter.matches(b));
        }
        prop_assert_eq!(indexed.len(), plain.len());
        let who = Requester { principal, host: Some(HOST) };
        prop_assert_eq!(
            topic_decision(&indexed, &who, op, topic),
            model(&plain, &who, op, topic)
        );
    }
}
