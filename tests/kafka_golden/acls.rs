//! DescribeAcls, CreateAcls and DeleteAcls (1 to 3): `SECURITY_DISABLED` where the broker
//! enforces no ACLs; where it does, bindings created (an invalid one refused on its own),
//! described grouped by resource, deleted by filter; and an ACL change that applies to the
//! next request of a connection already open.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;

use replog::acl::AuthorizerPolicy;

use crate::produce::{kafka_batch, produce_request};
use crate::{Broker, Golden, TOPIC, s, topic, versions};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::DescribeAcls, &[1, 3]),
    (ApiKey::CreateAcls, &[1, 3]),
    (ApiKey::DeleteAcls, &[1, 3]),
];

const TOPIC_TYPE: i8 = 2;
const ANY: i8 = 1;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const WRITE: i8 = 4;
const READ: i8 = 3;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

fn creation(
    name: &str,
    pattern: i8,
    principal: &str,
    operation: i8,
    permission: i8,
) -> AclCreation {
    AclCreation::default()
        .with_resource_type(TOPIC_TYPE)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

/// A filter that selects every binding (Kafka's clients send null strings for "any"; the
/// crate's defaults are empty strings).
fn describe_all() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

fn delete_filter(principal: &str) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_name_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(Some(s(principal)))
        .with_operation(ANY)
        .with_permission_type(ANY)
}

fn description(principal: &str, operation: i8, permission: i8) -> AclDescription {
    AclDescription::default()
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

const DISABLED: &str = "authorization is not enabled on this broker";

/// Without `NodeConfig::authorization`, each ACL API answers SECURITY_DISABLED: as a whole
/// for DescribeAcls, per creation and per filter for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_answer_security_disabled_without_authorization() {
    let mut broker = Broker::start().await;
    for &v in versions(GOLDEN, ApiKey::DescribeAcls) {
        let answer = broker
            .exchange(ApiKey::DescribeAcls, v, &describe_all())
            .await;
        let expected = DescribeAclsResponse::default()
            .with_error_code(54)
            .with_error_message(Some(s(DISABLED)));
        broker.assert_answer(ApiKey::DescribeAcls, v, &answer, &expected);
    }
    for &v in versions(GOLDEN, ApiKey::CreateAcls) {
        let request = CreateAclsRequest::default()
            .with_creations(vec![creation(TOPIC, LITERAL, "User:bob", WRITE, ALLOW)]);
        let answer = broker.exchange(ApiKey::CreateAcls, v, &request).await;
        let expected = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default()
                .with_error_code(54)
                .with_error_message(Some(s(DISABLED))),
        ]);
        broker.assert_answer(ApiKey::CreateAcls, v, &answer, &expected);
    }
    for &v in versions(GOLDEN, ApiKey::DeleteAcls) {
        let request = DeleteAclsRequest::default().with_filters(vec![delete_filter("User:bob")]);
        let answer = broker.exchange(ApiKey::DeleteAcls, v, &request).await;
        let expected = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default()
                .with_error_code(54)
                .with_error_message(Some(s(DISABLED))),
        ]);
        broker.assert_answer(ApiKey::DeleteAcls, v, &answer, &expected);
    }
    broker.shutdown().await;
}

/// A super user (here the anonymous principal, on a listener without SASL) creates two
/// bindings and is refused a third with a malformed principal; DescribeAcls lists them by
/// resource; DeleteAcls removes one principal's, answering each binding removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_created_described_and_deleted() {
    let mut broker = Broker::start_configured(1, |c| {
        c.authorization = Some(AuthorizerPolicy {
            super_users: vec!["User:ANONYMOUS".into()],
            allow_everyone_if_no_acl: false,
        });
    })
    .await;
    let create = versions(GOLDEN, ApiKey::CreateAcls);
    let describe = versions(GOLDEN, ApiKey::DescribeAcls);
    let delete = versions(GOLDEN, ApiKey::DeleteAcls);
    for ((&cv, &dv), &xv) in create.iter().zip(describe).zip(delete) {
        let request = CreateAclsRequest::default().with_creations(vec![
            creation(TOPIC, LITERAL, "User:bob", WRITE, ALLOW),
            creation("gol", PREFIXED, "User:carol", READ, DENY),
            creation(TOPIC, LITERAL, "bob", WRITE, ALLOW),
        ]);
        let answer = broker.exchange(ApiKey::CreateAcls, cv, &request).await;
        let expected = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default(),
            AclCreationResult::default(),
            AclCreationResult::default()
                .with_error_code(42)
                .with_error_message(Some(s(
                    "invalid ACL: principal \"bob\" is not of the form Type:name",
                ))),
        ]);
        broker.assert_answer(ApiKey::CreateAcls, cv, &answer, &expected);

        let answer = broker
            .exchange(ApiKey::DescribeAcls, dv, &describe_all())
            .await;
        let expected = DescribeAclsResponse::default().with_resources(vec![
            DescribeAclsResource::default()
                .with_resource_type(TOPIC_TYPE)
                .with_resource_name(s(TOPIC))
                .with_pattern_type(LITERAL)
                .with_acls(vec![description("User:bob", WRITE, ALLOW)]),
            DescribeAclsResource::default()
                .with_resource_type(TOPIC_TYPE)
                .with_resource_name(s("gol"))
                .with_pattern_type(PREFIXED)
                .with_acls(vec![description("User:carol", READ, DENY)]),
        ]);
        broker.assert_answer(ApiKey::DescribeAcls, dv, &answer, &expected);

        let request = DeleteAclsRequest::default()
            .with_filters(vec![delete_filter("User:bob"), delete_filter("User:carol")]);
        let answer = broker.exchange(ApiKey::DeleteAcls, xv, &request).await;
        let matching = |name: &str, pattern, principal: &str, operation, permission| {
            DeleteAclsMatchingAcl::default()
                .with_resource_type(TOPIC_TYPE)
                .with_resource_name(s(name))
                .with_pattern_type(pattern)
                .with_principal(s(principal))
                .with_host(s("*"))
                .with_operation(operation)
                .with_permission_type(permission)
        };
        let expected = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default()
                .with_matching_acls(vec![matching(TOPIC, LITERAL, "User:bob", WRITE, ALLOW)]),
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching(
                "gol",
                PREFIXED,
                "User:carol",
                READ,
                DENY,
            )]),
        ]);
        broker.assert_answer(ApiKey::DeleteAcls, xv, &answer, &expected);
        let answer = broker
            .exchange(ApiKey::DescribeAcls, dv, &describe_all())
            .await;
        broker.assert_answer(
            ApiKey::DescribeAcls,
            dv,
            &answer,
            &DescribeAclsResponse::default(),
        );
    }
    broker.shutdown().await;
}

/// The error code of a produce of one batch to partition 0 of [`TOPIC`].
async fn produce_error(broker: &mut Broker) -> i16 {
    let request = produce_request(&[(TOPIC, 0)], &kafka_batch());
    let answer = broker.exchange(ApiKey::Produce, 9, &request).await;
    let r: ProduceResponse = broker.decode(ApiKey::Produce, 9, &answer);
    r.responses[0].partition_responses[0].error_code
}

/// With everyone allowed where no ACL is, an anonymous connection produces to the topic; it
/// then adds an ACL for another principal on the topic, and its next produce and metadata
/// request on the same connection are refused with TOPIC_AUTHORIZATION_FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_change_applies_to_the_next_request_of_an_open_connection() {
    let mut broker = Broker::start_configured(1, |c| {
        c.authorization = Some(AuthorizerPolicy {
            super_users: Vec::new(),
            allow_everyone_if_no_acl: true,
        });
    })
    .await;
    assert_eq!(produce_error(&mut broker).await, 0);
    let request = CreateAclsRequest::default()
        .with_creations(vec![creation(TOPIC, LITERAL, "User:bob", WRITE, ALLOW)]);
    let answer = broker.exchange(ApiKey::CreateAcls, 3, &request).await;
    let created: CreateAclsResponse = broker.decode(ApiKey::CreateAcls, 3, &answer);
    assert_eq!(created.results[0].error_code, 0);
    assert_eq!(produce_error(&mut broker).await, 29);
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic(TOPIC))),
    ]));
    let answer = broker.exchange(ApiKey::Metadata, 12, &request).await;
    let r: MetadataResponse = broker.decode(ApiKey::Metadata, 12, &answer);
    assert_eq!(r.topics[0].error_code, 29);
    assert!(r.topics[0].partitions.is_empty());
    broker.shutdown().await;
}
