//! Users' SCRAM credentials as clients manage them (Kafka's DescribeUserScramCredentials and
//! AlterUserScramCredentials, KIP-554): DESCRIBE on the cluster to list them, ALTER to change
//! them. A credential arrives as a salted password (the client ran PBKDF2) and is kept as its
//! two keys; changes are metadata commands, as the bootstrap users' are.

use bytes::Bytes;

use crate::error::Error;
use crate::security::acl::AclOperation;
use crate::security::{ScramCredential, ScramMechanism};

use super::BrokerService;

/// One change to a user's credentials (also the native door's, in `UsersRequest`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum CredentialChange {
    /// Removes the user's credential for the mechanism (Kafka's code).
    Delete { mechanism: i8 },
    /// Sets the user's credential for the mechanism.
    Upsert {
        mechanism: i8,
        iterations: i32,
        salt: Bytes,
        salted_password: Bytes,
    },
}

impl CredentialChange {
    fn mechanism(&self) -> i8 {
        match self {
            CredentialChange::Delete { mechanism } | CredentialChange::Upsert { mechanism, .. } => {
                *mechanism
            }
        }
    }
}

/// Why a user's credentials were not described or changed, as Kafka tells them apart.
#[derive(Clone, Debug)]
pub(crate) enum UserError {
    /// The session may not (CLUSTER_AUTHORIZATION_FAILED).
    NotAuthorized,
    /// A user named twice, or a user and mechanism changed twice (DUPLICATE_RESOURCE).
    Duplicate,
    /// No such user, or no credential of that mechanism (RESOURCE_NOT_FOUND).
    NotFound,
    /// A mechanism code that is not SCRAM-SHA-256 or -512 (UNSUPPORTED_SASL_MECHANISM).
    UnsupportedMechanism,
    /// An empty user name, an iteration count out of range, a malformed salted password
    /// (UNACCEPTABLE_CREDENTIAL).
    Unacceptable(String),
    /// The metadata log did not take the change.
    Failed(Error),
}

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserError::NotAuthorized => f.write_str("not authorized"),
            UserError::Duplicate => f.write_str("a user and mechanism named more than once"),
            UserError::NotFound => f.write_str("no such user credential"),
            UserError::UnsupportedMechanism => f.write_str("not a SCRAM mechanism"),
            UserError::Unacceptable(why) => f.write_str(why),
            UserError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// A user's credentials as described: each mechanism with its iteration count.
pub(crate) type Described = Result<Vec<(ScramMechanism, u32)>, UserError>;

impl BrokerService {
    /// The credentials of `users` (every user with one, for `None` or none named), each
    /// user once, in the order named.
    pub(crate) fn describe_scram_credentials(
        &self,
        users: Option<Vec<String>>,
    ) -> Result<Vec<(String, Described)>, UserError> {
        if !self.may_on_cluster(AclOperation::Describe) {
            return Err(UserError::NotAuthorized);
        }
        let catalog = self.broker.catalog.read();
        let all: Vec<(String, Described)> = catalog
            .users()
            .map(|(name, infos)| (name.clone(), Ok(infos)))
            .collect();
        let Some(users) = users.filter(|u| !u.is_empty()) else {
            return Ok(all);
        };
        let mut out: Vec<(String, Described)> = Vec::new();
        for user in &users {
            if out.iter().any(|(u, _)| u == user) {
                continue;
            }
            let described = if users.iter().filter(|u| *u == user).count() > 1 {
                Err(UserError::Duplicate)
            } else {
                all.iter()
                    .find(|(u, _)| u == user)
                    .map(|(_, d)| d.clone())
                    .unwrap_or(Err(UserError::NotFound))
            };
            out.push((user.clone(), described));
        }
        Ok(out)
    }

    /// Applies `changes`, each through the metadata log; one answer per user, in the order
    /// users are first named. A user whose changes name a mechanism twice has none applied.
    pub(crate) async fn alter_scram_credentials(
        &self,
        changes: Vec<(String, CredentialChange)>,
    ) -> Vec<(String, Result<(), UserError>)> {
        let mut users: Vec<String> = Vec::new();
        for (user, _) in &changes {
            if !users.contains(user) {
                users.push(user.clone());
            }
        }
        if !self.may_on_cluster(AclOperation::Alter) {
            return users
                .into_iter()
                .map(|u| (u, Err(UserError::NotAuthorized)))
                .collect();
        }
        let mut out = Vec::with_capacity(users.len());
        for user in users {
            let mine: Vec<&CredentialChange> = changes
                .iter()
                .filter(|(u, _)| *u == user)
                .map(|(_, c)| c)
                .collect();
            let result = self.alter_user(&user, &mine).await;
            out.push((user, result));
        }
        out
    }

    async fn alter_user(&self, user: &str, changes: &[&CredentialChange]) -> Result<(), UserError> {
        for (i, c) in changes.iter().enumerate() {
            if changes[..i].iter().any(|o| o.mechanism() == c.mechanism()) {
                return Err(UserError::Duplicate);
            }
        }
        if user.is_empty() || user.len() > crate::catalog::USER_NAME_BYTES_MAX {
            return Err(UserError::Unacceptable(format!(
                "a user name has 1 to {} bytes",
                crate::catalog::USER_NAME_BYTES_MAX
            )));
        }
        // Every change is checked before any is proposed.
        let mut commands = Vec::with_capacity(changes.len());
        for change in changes {
            let mechanism = ScramMechanism::from_kafka_type(change.mechanism())
                .ok_or(UserError::UnsupportedMechanism)?;
            commands.push(match change {
                CredentialChange::Delete { .. } => {
                    if self.scram_credential(user, mechanism).is_none() {
                        return Err(UserError::NotFound);
                    }
                    crate::catalog::MetaCommand::DeleteScramCredential {
                        user: user.to_owned(),
                        mechanism: mechanism.kafka_type() as u8,
                    }
                }
                CredentialChange::Upsert {
                    iterations,
                    salt,
                    salted_password,
                    ..
                } => {
                    let iterations = u32::try_from(*iterations).unwrap_or(0);
                    ScramCredential::from_salted_password(
                        mechanism,
                        salted_password,
                        salt,
                        iterations,
                    )
                    .map_err(|e| UserError::Unacceptable(e.to_string()))?
                    .put_command(user)
                }
            });
        }
        let expected: Vec<(ScramMechanism, bool)> = commands
            .iter()
            .filter_map(|c| match c {
                crate::catalog::MetaCommand::PutScramCredential { mechanism, .. } => {
                    ScramMechanism::from_kafka_type(*mechanism as i8).map(|m| (m, true))
                }
                crate::catalog::MetaCommand::DeleteScramCredential { mechanism, .. } => {
                    ScramMechanism::from_kafka_type(*mechanism as i8).map(|m| (m, false))
                }
                _ => None,
            })
            .collect();
        for command in commands {
            self.commit_command(command)
                .await
                .map_err(UserError::Failed)?;
        }
        // A client that reads back what it changed, through this broker, finds it.
        self.broker
            .until_catalog(|c| {
                expected
                    .iter()
                    .all(|(m, present)| c.scram_credential(user, *m).is_some() == *present)
            })
            .await;
        Ok(())
    }
}
