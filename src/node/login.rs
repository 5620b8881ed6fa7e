//! The native door's login (`NodeConfig::native_sasl`): SaslHandshake and SaslAuthenticate
//! requests as `transport/login.rs` frames them, served by the same login steps as the Kafka
//! door's ([`BrokerService::login_step`]), so a user logs in alike on both doors and is the
//! same principal (`User:<name>`) on each.
//!
//! Bodies (postcard, PROTOCOL.md): SaslHandshake's request is the mechanism's name, its
//! answer `Result<Vec<String>, WireError>` (the mechanisms offered); SaslAuthenticate's
//! request is the mechanism's message (bytes), its answer `Result<Vec<u8>, WireError>` (the
//! broker's message). A refusal is `WireError::AuthenticationFailed`, with one reason whatever
//! was wrong with the credentials, and the connection is closed after it.

use serde::Serialize;

use crate::protocol::WireError;
use crate::security::{SaslMechanism, ScramServer};
use crate::transport::Login;
use crate::transport::frame::Op;

use super::service::{BrokerService, LoginStep, SaslSettings};

/// One connection's login.
pub(super) struct NativeLogin {
    service: BrokerService,
    settings: SaslSettings,
    mechanism: Option<SaslMechanism>,
    scram: Option<ScramServer>,
}

impl NativeLogin {
    pub(super) fn new(service: BrokerService, settings: SaslSettings) -> NativeLogin {
        NativeLogin {
            service,
            settings,
            mechanism: None,
            scram: None,
        }
    }
}

/// An answer's body.
fn answer<T: Serialize>(result: &Result<T, WireError>) -> Vec<u8> {
    postcard::to_stdvec(result).unwrap_or_default()
}

/// A refusal that ends the login: what the client is told, and why, for the log.
fn refuse(told: String, why: String) -> (Vec<u8>, Option<Result<String, String>>) {
    let told: Result<(), WireError> = Err(WireError::AuthenticationFailed(told));
    (answer(&told), Some(Err(why)))
}

impl Login for NativeLogin {
    fn step(&mut self, op: Op, body: &[u8]) -> (Vec<u8>, Option<Result<String, String>>) {
        match (op, self.mechanism) {
            (Op::SaslHandshake, None) => {
                let asked: String = postcard::from_bytes(body).unwrap_or_default();
                let offered: Vec<String> = self
                    .settings
                    .mechanisms
                    .iter()
                    .map(|m| m.name().to_string())
                    .collect();
                match self.settings.offered(&asked) {
                    Some(m) => {
                        self.mechanism = Some(m);
                        (answer(&Ok(offered)), None)
                    }
                    None => {
                        let told = format!(
                            "SASL mechanism {asked:?} is not offered; the broker offers {}",
                            offered.join(", ")
                        );
                        refuse(told.clone(), told)
                    }
                }
            }
            (Op::SaslAuthenticate, Some(m)) => {
                let Ok(message) = postcard::from_bytes::<Vec<u8>>(body) else {
                    let told = "a malformed SaslAuthenticate".to_string();
                    return refuse(told.clone(), told);
                };
                match self
                    .service
                    .login_step(m, &mut self.scram, &message, &self.settings)
                {
                    Ok(LoginStep::Continue(bytes)) => (answer(&Ok(bytes.to_vec())), None),
                    Ok(LoginStep::Done(user, bytes)) => {
                        (answer(&Ok(bytes.to_vec())), Some(Ok(user)))
                    }
                    Err(e) => refuse(
                        format!("invalid credentials with SASL mechanism {m}"),
                        format!("{m}: {e}"),
                    ),
                }
            }
            (op, _) => {
                let told = format!("{} out of turn", op.name());
                refuse(told.clone(), told)
            }
        }
    }
}
