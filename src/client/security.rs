//! ACLs and users, managed through any broker (the native door's `Acls` and `Users`
//! requests): what `replog acls` and `replog users` run. The client's user needs DESCRIBE on
//! the cluster to list them and ALTER to change them, where the brokers enforce ACLs.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Client;
use crate::catalog::{AclFilterRecord, AclRecord};
use crate::error::{Error, Result};
use crate::node::service::CredentialChange;
use crate::protocol::{AclsRequest, DescribedUsers, UsersRequest, WireError};
use crate::security::ScramMechanism;
use crate::security::acl::{AclBinding, AclBindingFilter};
use crate::transport::frame::Op;

/// A user's SCRAM credentials as a broker describes them: each mechanism with its iteration
/// count (never a key).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UserCredentials {
    /// The user's name.
    pub user: String,
    /// Its mechanisms and their iteration counts.
    pub mechanisms: Vec<(ScramMechanism, u32)>,
}

/// A broker's refusal as the client's error.
fn refusal(e: WireError) -> Error {
    match e {
        WireError::Other(reason) => Error::InvalidAcl(reason),
        other => other.into_error(&crate::types::PartitionId::new("", 0), 0),
    }
}

impl Client {
    /// Sends `request` to the brokers in turn until one answers it.
    pub(super) async fn ask_any<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        op: Op,
        request: &Req,
    ) -> Result<Resp> {
        let mut tried = Vec::new();
        for addr in self.candidates() {
            match self.call::<_, Resp>(&addr, op, request).await {
                Ok(Ok(answer)) => return Ok(answer),
                // A broker that cannot answer now (one that left the cluster): the next.
                Ok(Err(e @ (WireError::TryAgain(_) | WireError::NotLeader { .. }))) => {
                    tried.push(format!("{addr} ({e:?})"));
                }
                Ok(Err(e)) => return Err(refusal(e)),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }

    /// The ACL bindings `filter` selects.
    ///
    /// # Errors
    ///
    /// [`Error::SecurityDisabled`] where the brokers enforce no ACLs;
    /// [`Error::ClusterAuthorizationFailed`]; [`Error::InvalidAcl`];
    /// [`Error::NoBrokerReachable`].
    pub async fn describe_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let request = AclsRequest::Describe(AclFilterRecord::from(filter));
        let found: Vec<AclRecord> = self.ask_any(Op::Acls, &request).await?;
        found
            .iter()
            .map(|r| r.binding().map_err(Error::InvalidAcl))
            .collect()
    }

    /// Adds `bindings` (those present already stay as they are), answered once the broker
    /// asked applied them.
    ///
    /// # Errors
    ///
    /// As [`describe_acls`](Self::describe_acls); the first binding refused (the others
    /// are created).
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Result<()> {
        let request = AclsRequest::Create(bindings.iter().map(AclRecord::from).collect());
        let answers: Vec<std::result::Result<(), WireError>> =
            self.ask_any(Op::Acls, &request).await?;
        answers
            .into_iter()
            .find_map(|a| a.err())
            .map_or(Ok(()), |e| Err(refusal(e)))
    }

    /// Removes the bindings `filter` selects; returns them.
    ///
    /// # Errors
    ///
    /// As [`describe_acls`](Self::describe_acls).
    pub async fn delete_acls(&self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let request = AclsRequest::Delete(vec![AclFilterRecord::from(filter)]);
        let removed: Vec<Vec<AclRecord>> = self.ask_any(Op::Acls, &request).await?;
        removed
            .iter()
            .flatten()
            .map(|r| r.binding().map_err(Error::InvalidAcl))
            .collect()
    }

    /// Every user with a SCRAM credential.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`]; [`Error::NoBrokerReachable`].
    pub async fn describe_users(&self) -> Result<Vec<UserCredentials>> {
        let request = UsersRequest::Describe(None);
        let users: DescribedUsers = self.ask_any(Op::Users, &request).await?;
        Ok(users
            .into_iter()
            .filter_map(|(user, described)| {
                let mechanisms = described
                    .ok()?
                    .into_iter()
                    .filter_map(|(m, i)| Some((ScramMechanism::from_kafka_type(m)?, i)))
                    .collect();
                Some(UserCredentials { user, mechanisms })
            })
            .collect())
    }

    /// Gives `user` a SCRAM credential for `password` with `mechanism` and `iterations`
    /// (creating the user, or replacing its credential for the mechanism). The password is
    /// salted here: only the salted password travels, and the brokers keep only its keys.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`]; [`Error::InvalidConfig`] for an iteration
    /// count or a name the brokers refuse (the reason names it);
    /// [`Error::NoBrokerReachable`].
    pub async fn set_user_password(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<()> {
        let (min, max) = (
            ScramMechanism::ITERATIONS_MIN,
            ScramMechanism::ITERATIONS_MAX,
        );
        if !(min..=max).contains(&iterations) {
            return Err(Error::InvalidConfig {
                field: "iterations",
                reason: format!("{iterations}: a credential takes {min} to {max}"),
            });
        }
        let mut salt = vec![0u8; 32];
        getrandom::fill(&mut salt).map_err(|e| Error::InvalidConfig {
            field: "password",
            reason: format!("no random source for a salt: {e}"),
        })?;
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        let change = CredentialChange::Upsert {
            mechanism: mechanism.kafka_type(),
            // At most ITERATIONS_MAX, checked above: an i32.
            iterations: i32::try_from(iterations).unwrap_or(i32::MAX),
            salt: salt.into(),
            salted_password: salted.into(),
        };
        self.alter_user(user, vec![change]).await
    }

    /// Removes `user`'s credential for `mechanism`, or every credential it has for `None`
    /// (the user can no longer log in).
    ///
    /// # Errors
    ///
    /// [`Error::ClusterAuthorizationFailed`]; [`Error::InvalidConfig`] if the user has no
    /// such credential; [`Error::NoBrokerReachable`].
    pub async fn delete_user(&self, user: &str, mechanism: Option<ScramMechanism>) -> Result<()> {
        let mechanisms: Vec<ScramMechanism> = match mechanism {
            Some(m) => vec![m],
            None => self
                .describe_users()
                .await?
                .into_iter()
                .find(|u| u.user == user)
                .map(|u| u.mechanisms.into_iter().map(|(m, _)| m).collect())
                .unwrap_or_default(),
        };
        if mechanisms.is_empty() {
            return Err(Error::InvalidConfig {
                field: "user",
                reason: format!("no user {user:?}"),
            });
        }
        let changes = mechanisms
            .into_iter()
            .map(|m| CredentialChange::Delete {
                mechanism: m.kafka_type(),
            })
            .collect();
        self.alter_user(user, changes).await
    }

    async fn alter_user(&self, user: &str, changes: Vec<CredentialChange>) -> Result<()> {
        let request =
            UsersRequest::Alter(changes.into_iter().map(|c| (user.to_string(), c)).collect());
        let answers: Vec<(String, std::result::Result<(), String>)> =
            self.ask_any(Op::Users, &request).await?;
        match answers.into_iter().find_map(|(_, r)| r.err()) {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidConfig {
                field: "user",
                reason,
            }),
        }
    }
}
