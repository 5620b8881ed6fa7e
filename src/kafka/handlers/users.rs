//! Kafka's DescribeUserScramCredentials and AlterUserScramCredentials (version 0, KIP-554)
//! over the broker service's: users named, mechanisms by Kafka's codes, per-user answers
//! with Kafka's errors.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka::{code, error_code, message};
use crate::node::service::{BrokerService, CredentialChange, UserError};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;
const UNACCEPTABLE_CREDENTIAL: i16 = 93;

/// Kafka's code and message for a user's error.
fn user_error(e: &UserError) -> (i16, Option<StrBytes>) {
    let code = match e {
        UserError::NotAuthorized => code::CLUSTER_AUTHORIZATION_FAILED,
        UserError::Duplicate => DUPLICATE_RESOURCE,
        UserError::NotFound => RESOURCE_NOT_FOUND,
        UserError::UnsupportedMechanism => code::UNSUPPORTED_SASL_MECHANISM,
        UserError::Unacceptable(_) => UNACCEPTABLE_CREDENTIAL,
        UserError::Failed(e) => error_code(e),
    };
    (code, message(e.to_string()))
}

/// DescribeUserScramCredentials: each user asked for (every user with a credential, for a
/// null or empty list) with its mechanisms and iteration counts.
pub(crate) fn describe(
    request: DescribeUserScramCredentialsRequest,
    service: &BrokerService,
) -> DescribeUserScramCredentialsResponse {
    let users = request
        .users
        .map(|us| us.into_iter().map(|u| u.name.to_string()).collect());
    let mut r = DescribeUserScramCredentialsResponse::default();
    match service.describe_scram_credentials(users) {
        Ok(described) => {
            for (user, infos) in described {
                let mut res = DescribeUserScramCredentialsResult::default();
                res.user = StrBytes::from_string(user);
                match infos {
                    Ok(infos) => {
                        res.credential_infos = infos
                            .into_iter()
                            .map(|(m, iterations)| {
                                let mut info = CredentialInfo::default();
                                info.mechanism = m.kafka_type();
                                info.iterations = i32::try_from(iterations).unwrap_or(i32::MAX);
                                info
                            })
                            .collect();
                    }
                    Err(e) => (res.error_code, res.error_message) = user_error(&e),
                }
                r.results.push(res);
            }
        }
        Err(e) => (r.error_code, r.error_message) = user_error(&e),
    }
    r
}

/// AlterUserScramCredentials: deletions and upsertions, one answer per user.
pub(crate) async fn alter(
    request: AlterUserScramCredentialsRequest,
    service: &BrokerService,
) -> AlterUserScramCredentialsResponse {
    let deletions = request.deletions.into_iter().map(|d| {
        let change = CredentialChange::Delete {
            mechanism: d.mechanism,
        };
        (d.name.to_string(), change)
    });
    let upsertions = request.upsertions.into_iter().map(|u| {
        let change = CredentialChange::Upsert {
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt,
            salted_password: u.salted_password,
        };
        (u.name.to_string(), change)
    });
    let changes = deletions.chain(upsertions).collect();
    let mut r = AlterUserScramCredentialsResponse::default();
    for (user, result) in service.alter_scram_credentials(changes).await {
        let mut res = AlterUserScramCredentialsResult::default();
        res.user = StrBytes::from_string(user);
        if let Err(e) = result {
            (res.error_code, res.error_message) = user_error(&e);
        }
        r.results.push(res);
    }
    r
}
