//! SASL logins, the same on both doors: what a listener offers ([`SaslSettings`]), and one
//! step of a login against the users of the metadata log ([`BrokerService::login_step`]).
//! Each door frames the messages its own way (Kafka's SaslHandshake and SaslAuthenticate in
//! `kafka/sasl.rs`, the native door's ops of the same names in `node/login.rs`).

use bytes::Bytes;

use super::BrokerService;
use crate::security::{
    FakeCredentials, SaslError, SaslMechanism, ScramServer, authenticate_plain, server_nonce,
};

/// What a listener's SASL authentication offers.
#[derive(Clone)]
pub(crate) struct SaslSettings {
    pub(crate) mechanisms: Vec<SaslMechanism>,
    /// What an unknown user is answered with (SCRAM), so that it looks like a known one.
    pub(crate) fake: FakeCredentials,
    /// How long a Kafka client's session lasts before it must re-authenticate (KIP-368).
    pub(crate) session_lifetime: Option<std::time::Duration>,
}

impl SaslSettings {
    /// The mechanisms of `config`, with fake credentials drawn now.
    pub(crate) fn new(config: &crate::NodeConfig) -> SaslSettings {
        SaslSettings {
            mechanisms: config.sasl_mechanisms.clone(),
            fake: FakeCredentials::random(),
            session_lifetime: config.sasl_session_lifetime,
        }
    }

    /// The mechanism named `asked`, if it is offered.
    pub(crate) fn offered(&self, asked: &str) -> Option<SaslMechanism> {
        SaslMechanism::from_name(asked).filter(|m| self.mechanisms.contains(m))
    }
}

/// Where a login stands after one of the client's messages.
pub(crate) enum LoginStep {
    /// The server's message, and another of the client's awaited.
    Continue(Bytes),
    /// Authenticated as this user; the server's last message.
    Done(String, Bytes),
}

impl BrokerService {
    /// Records a failed login from `from`: how long to wait before answering it (see
    /// `security/throttle.rs`).
    pub(crate) fn login_failed(&self, from: std::net::IpAddr) -> std::time::Duration {
        self.broker.failed_logins.failed(from)
    }

    /// Records a login from `from` that succeeded.
    pub(crate) fn login_succeeded(&self, from: std::net::IpAddr) {
        self.broker.failed_logins.succeeded(from);
    }

    /// Takes the client's next message of a login with `mechanism` (`scram`: the exchange so
    /// far, for SCRAM's two messages).
    ///
    /// # Errors
    ///
    /// The mechanism's: wrong credentials, a malformed message, a message out of turn.
    pub(crate) fn login_step(
        &self,
        mechanism: SaslMechanism,
        scram: &mut Option<ScramServer>,
        message: &[u8],
        settings: &SaslSettings,
    ) -> Result<LoginStep, SaslError> {
        match (mechanism, scram.as_mut()) {
            (SaslMechanism::Plain, _) => {
                let user =
                    authenticate_plain(message, |u| self.scram_credentials(u), &settings.fake)?;
                Ok(LoginStep::Done(user, Bytes::new()))
            }
            (SaslMechanism::Scram(m), None) => {
                let mut server = ScramServer::new(m);
                let first = server.first(
                    message,
                    &server_nonce(),
                    |u| self.scram_credential(u, m),
                    &settings.fake,
                )?;
                *scram = Some(server);
                Ok(LoginStep::Continue(first.into()))
            }
            (SaslMechanism::Scram(_), Some(server)) => {
                let (user, last) = server.finish(message)?;
                Ok(LoginStep::Done(user, last.into()))
            }
        }
    }
}
