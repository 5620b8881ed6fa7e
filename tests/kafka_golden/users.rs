//! DescribeUserScramCredentials and AlterUserScramCredentials (0): credentials set from a
//! salted password and deleted, each user answered once with Kafka's errors (an unknown
//! mechanism 33, an iteration count out of range 93, a credential that is not there 91, a
//! user and mechanism named twice 92), and described with their mechanisms and iteration
//! counts.

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;

use crate::{Broker, Golden, s};

pub(crate) const GOLDEN: Golden = &[
    (ApiKey::DescribeUserScramCredentials, &[0]),
    (ApiKey::AlterUserScramCredentials, &[0]),
];

const SHA_256: i8 = 1;
const SHA_512: i8 = 2;

fn upsertion(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
    let len = if mechanism == SHA_256 { 32 } else { 64 };
    ScramCredentialUpsertion::default()
        .with_name(s(name))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(Bytes::from_static(b"salt"))
        .with_salted_password(Bytes::from(vec![7u8; len]))
}

fn result(user: &str, error: Option<(i16, &str)>) -> AlterUserScramCredentialsResult {
    let r = AlterUserScramCredentialsResult::default().with_user(s(user));
    match error {
        Some((code, message)) => r.with_error_code(code).with_error_message(Some(s(message))),
        None => r,
    }
}

fn describe_request(users: Option<&[&str]>) -> DescribeUserScramCredentialsRequest {
    let users = users.map(|us| {
        us.iter()
            .map(|u| UserName::default().with_name(s(u)))
            .collect()
    });
    DescribeUserScramCredentialsRequest::default().with_users(users)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_are_altered_and_described_with_kafkas_errors() {
    let mut broker = Broker::start().await;
    let answer = broker
        .exchange(
            ApiKey::DescribeUserScramCredentials,
            0,
            &describe_request(None),
        )
        .await;
    let none = DescribeUserScramCredentialsResponse::default();
    broker.assert_answer(ApiKey::DescribeUserScramCredentials, 0, &answer, &none);

    let request = AlterUserScramCredentialsRequest::default()
        .with_deletions(vec![
            ScramCredentialDeletion::default()
                .with_name(s("dave"))
                .with_mechanism(SHA_256),
        ])
        .with_upsertions(vec![
            upsertion("alice", SHA_512, 4096),
            upsertion("alice", SHA_256, 8192),
            upsertion("bob", 9, 4096),
            upsertion("carol", SHA_512, 100),
            upsertion("erin", SHA_256, 4096),
            upsertion("erin", SHA_256, 4096),
        ]);
    let answer = broker
        .exchange(ApiKey::AlterUserScramCredentials, 0, &request)
        .await;
    let expected = AlterUserScramCredentialsResponse::default().with_results(vec![
        result("dave", Some((91, "no such user credential"))),
        result("alice", None),
        result("bob", Some((33, "not a SCRAM mechanism"))),
        result(
            "carol",
            Some((93, "100 iterations: a credential needs 4096 to 16384")),
        ),
        result(
            "erin",
            Some((92, "a user and mechanism named more than once")),
        ),
    ]);
    broker.assert_answer(ApiKey::AlterUserScramCredentials, 0, &answer, &expected);

    let request = describe_request(Some(&["alice", "nobody"]));
    let answer = broker
        .exchange(ApiKey::DescribeUserScramCredentials, 0, &request)
        .await;
    let info = |mechanism, iterations| {
        CredentialInfo::default()
            .with_mechanism(mechanism)
            .with_iterations(iterations)
    };
    let expected = DescribeUserScramCredentialsResponse::default().with_results(vec![
        DescribeUserScramCredentialsResult::default()
            .with_user(s("alice"))
            .with_credential_infos(vec![info(SHA_256, 8192), info(SHA_512, 4096)]),
        DescribeUserScramCredentialsResult::default()
            .with_user(s("nobody"))
            .with_error_code(91)
            .with_error_message(Some(s("no such user credential"))),
    ]);
    broker.assert_answer(ApiKey::DescribeUserScramCredentials, 0, &answer, &expected);

    // Deleted, alice's SHA-256 credential is gone and the other stays.
    let request = AlterUserScramCredentialsRequest::default().with_deletions(vec![
        ScramCredentialDeletion::default()
            .with_name(s("alice"))
            .with_mechanism(SHA_256),
    ]);
    let answer = broker
        .exchange(ApiKey::AlterUserScramCredentials, 0, &request)
        .await;
    let expected =
        AlterUserScramCredentialsResponse::default().with_results(vec![result("alice", None)]);
    broker.assert_answer(ApiKey::AlterUserScramCredentials, 0, &answer, &expected);
    let answer = broker
        .exchange(
            ApiKey::DescribeUserScramCredentials,
            0,
            &describe_request(Some(&[])),
        )
        .await;
    let expected = DescribeUserScramCredentialsResponse::default().with_results(vec![
        DescribeUserScramCredentialsResult::default()
            .with_user(s("alice"))
            .with_credential_infos(vec![info(SHA_512, 4096)]),
    ]);
    broker.assert_answer(ApiKey::DescribeUserScramCredentials, 0, &answer, &expected);
    broker.shutdown().await;
}
