//! The native door's ACL and user requests (`Op::Acls`, `Op::Users`): decoded, served by the
//! broker service's ACL and credential operations (the ones Kafka's DescribeAcls, CreateAcls,
//! DeleteAcls, DescribeUserScramCredentials and AlterUserScramCredentials are served by), and
//! encoded. What each may do is the service's to decide: DESCRIBE or ALTER on the cluster.

use crate::catalog::AclRecord;
use crate::error::Error;
use crate::protocol::{AclsRequest, DescribedUsers, UsersRequest, WireError};
use crate::security::acl::{AclBinding, AclOperation};

use super::handler::encode_response;
use super::service::{BrokerService, UserError};
use crate::transport::body::Body;

fn wire(e: &Error) -> WireError {
    WireError::from_error(e)
}

fn records(bindings: &[AclBinding]) -> Vec<AclRecord> {
    bindings.iter().map(AclRecord::from).collect()
}

/// Serves an `Op::Acls` request's body.
pub(super) async fn acls(service: &BrokerService, body: &[u8]) -> Body {
    let request: AclsRequest = match postcard::from_bytes(body) {
        Ok(r) => r,
        Err(e) => {
            return encode_response::<()>(&Err(WireError::Other(format!("bad request: {e}"))));
        }
    };
    match request {
        AclsRequest::Describe(filter) => encode_response(
            &service
                .acl_admin(AclOperation::Describe)
                .and_then(|()| filter.filter().map_err(Error::InvalidAcl))
                .and_then(|f| service.describe_acls(&f))
                .map(|b| records(&b))
                .map_err(|e| wire(&e)),
        ),
        AclsRequest::Create(wanted) => {
            if let Err(e) = service.acl_admin(AclOperation::Alter) {
                return encode_response::<()>(&Err(wire(&e)));
            }
            // Each binding checked alone: a bad one is refused, the others created.
            let checked: Vec<Result<AclBinding, String>> =
                wanted.iter().map(AclRecord::binding).collect();
            let valid: Vec<AclBinding> = checked.iter().filter_map(|c| c.clone().ok()).collect();
            let mut created = service.create_acls(valid).await.into_iter();
            let answers: Vec<Result<(), WireError>> = checked
                .into_iter()
                .map(|c| match c {
                    Err(reason) => Err(wire(&Error::InvalidAcl(reason))),
                    Ok(_) => created
                        .next()
                        .unwrap_or(Err(Error::InvalidAcl("no answer".into())))
                        .map_err(|e| wire(&e)),
                })
                .collect();
            encode_response(&Ok(answers))
        }
        AclsRequest::Delete(filters) => {
            let filters: Result<Vec<_>, Error> = filters
                .iter()
                .map(|f| f.filter().map_err(Error::InvalidAcl))
                .collect();
            let removed = match filters {
                Ok(filters) => service.delete_acls(&filters).await,
                Err(e) => Err(e),
            };
            encode_response(
                &removed
                    .map(|per_filter| per_filter.iter().map(|b| records(b)).collect::<Vec<_>>())
                    .map_err(|e| wire(&e)),
            )
        }
    }
}

/// Serves an `Op::Users` request's body.
pub(super) async fn users(service: &BrokerService, body: &[u8]) -> Body {
    let request: UsersRequest = match postcard::from_bytes(body) {
        Ok(r) => r,
        Err(e) => {
            return encode_response::<()>(&Err(WireError::Other(format!("bad request: {e}"))));
        }
    };
    match request {
        UsersRequest::Describe(names) => match service.describe_scram_credentials(names) {
            Err(UserError::NotAuthorized) => {
                encode_response::<()>(&Err(WireError::ClusterAuthorizationFailed))
            }
            Err(e) => encode_response::<()>(&Err(WireError::Other(e.to_string()))),
            Ok(users) => {
                let users: DescribedUsers = users
                    .into_iter()
                    .map(|(name, described)| {
                        let described = described
                            .map(|c| c.into_iter().map(|(m, i)| (m.kafka_type(), i)).collect())
                            .map_err(|e| e.to_string());
                        (name, described)
                    })
                    .collect();
                encode_response(&Ok(users))
            }
        },
        UsersRequest::Alter(changes) => {
            let answers = service.alter_scram_credentials(changes).await;
            if answers
                .iter()
                .any(|(_, r)| matches!(r, Err(UserError::NotAuthorized)))
            {
                return encode_response::<()>(&Err(WireError::ClusterAuthorizationFailed));
            }
            let answers: Vec<(String, Result<(), String>)> = answers
                .into_iter()
                .map(|(user, r)| (user, r.map_err(|e| e.to_string())))
                .collect();
            encode_response(&Ok(answers))
        }
    }
}
