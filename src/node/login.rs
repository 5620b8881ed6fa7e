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
    /// The client's address, by which failed logins are counted.
    from: std::net::IpAddr,
    mechanism: Option<SaslMechanism>,
    scram: Option<ScramServer>,
    /// How long the refusal of a failed login waits.
    delay: std::time::Duration,
}

impl NativeLogin {
    pub(super) fn new(
        service: BrokerService,
        settings: SaslSettings,
        from: std::net::IpAddr,
    ) -> NativeLogin {
        NativeLogin {
            service,
            settings,
            from,
            mechanism: None,
            scram: None,
            delay: std::time::Duration::ZERO,
        }
    }

    /// A failed login: refused after a delay.
    fn failed(&mut self, told: String, why: String) -> (Vec<u8>, Option<Result<String, String>>) {
        self.delay = self.service.login_failed(self.from);
        refuse(told, why)
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
    fn refusal_delay(&self) -> std::time::Duration {
        self.delay
    }

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
                        self.failed(told.clone(), told)
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
                        self.service.login_succeeded(self.from);
                        (answer(&Ok(bytes.to_vec())), Some(Ok(user)))
                    }
                    Err(e) => self.failed(
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
