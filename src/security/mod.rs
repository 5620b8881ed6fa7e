//! Authentication: who is on the other end of a connection.
//!
//! - `scram.rs`: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them:
//!   the credentials a broker stores ([`ScramCredential`]: a salt, an iteration count and two
//!   keys, never a password), and the server's side of the exchange.
//! - `plain.rs`: SASL PLAIN (RFC 4616), checked against the same stored credentials.
//!
//! - `acl.rs`: Kafka's access control lists and the authorization decision they make.
//! - `principal_mapping.rs`: Kafka's `ssl.principal.mapping.rules`, which name a client
//!   certificate's principal from its subject.
//!
//! A successful exchange names a principal, `User:<name>`, the same on both doors.

pub mod acl;
mod plain;
mod principal_mapping;
mod scram;
mod throttle;

pub(crate) use plain::authenticate_plain;
pub use principal_mapping::PrincipalMappingRules;
pub(crate) use scram::FakeCredentials;
pub(crate) use scram::{ScramClient, ScramServer, plain_message, server_nonce};
pub use scram::{ScramCredential, ScramMechanism};
pub(crate) use throttle::FailedLogins;

#[doc(hidden)]
pub use scram::fuzz_sasl_server;

/// A SASL mechanism a broker offers its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram(ScramMechanism),
    /// PLAIN: the password itself crosses the wire, so only over TLS unless explicitly allowed
    /// ([`NodeConfig::sasl_plain_without_tls`](crate::NodeConfig::sasl_plain_without_tls)).
    Plain,
}

impl SaslMechanism {
    /// The SASL name, as clients ask for it: `SCRAM-SHA-512`, `SCRAM-SHA-256`, `PLAIN`.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::Plain => "PLAIN",
        }
    }

    /// The mechanism of a SASL name.
    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        if name == "PLAIN" {
            return Some(SaslMechanism::Plain);
        }
        ScramMechanism::from_name(name).map(SaslMechanism::Scram)
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a Kafka listener asks of its clients (Kafka's `security.protocol`). TLS needs a
/// certificate ([`NodeConfig::tls`](crate::NodeConfig::tls)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KafkaSecurityProtocol {
    /// Nothing: every connection is served as is (the default, for trusted networks).
    #[default]
    Plaintext,
    /// TLS: traffic is encrypted and the broker is authenticated by its certificate; clients
    /// are not authenticated.
    Ssl,
    /// SASL authentication before any other request (ApiVersions aside), on a clear socket.
    SaslPlaintext,
    /// TLS, then SASL authentication inside it.
    SaslSsl,
}

/// Whether TLS listeners ask clients for certificates (Kafka's `ssl.client.auth`), signed by
/// the brokers' CA ([`TlsConfig::ca_cert`](crate::TlsConfig::ca_cert)). A client's
/// certificate is its identity where it does not log in with SASL: `User:<CN>`, its subject's
/// common name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientAuth {
    /// No certificate asked of Kafka clients (the default); the native listener still asks
    /// (peer brokers present theirs), and takes a client's as its identity.
    #[default]
    None,
    /// Asked for; a client may present none (and is then `User:ANONYMOUS`, or its SASL user).
    Requested,
    /// Required: a client without one fails the TLS handshake.
    Required,
}

impl ClientAuth {
    /// Kafka's name for it: `none`, `requested` or `required`.
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        }
    }

    /// The setting Kafka's name names.
    pub fn from_name(name: &str) -> Option<ClientAuth> {
        [
            ClientAuth::None,
            ClientAuth::Requested,
            ClientAuth::Required,
        ]
        .into_iter()
        .find(|c| c.name().eq_ignore_ascii_case(name))
    }
}

impl KafkaSecurityProtocol {
    /// Whether connections start with a TLS handshake (`SSL`, `SASL_SSL`).
    pub fn tls(self) -> bool {
        matches!(
            self,
            KafkaSecurityProtocol::Ssl | KafkaSecurityProtocol::SaslSsl
        )
    }

    /// Whether clients authenticate with SASL (`SASL_PLAINTEXT`, `SASL_SSL`).
    pub fn sasl(self) -> bool {
        matches!(
            self,
            KafkaSecurityProtocol::SaslPlaintext | KafkaSecurityProtocol::SaslSsl
        )
    }

    /// Kafka's name for it: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub fn name(self) -> &'static str {
        match self {
            KafkaSecurityProtocol::Plaintext => "PLAINTEXT",
            KafkaSecurityProtocol::Ssl => "SSL",
            KafkaSecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            KafkaSecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// Why an authentication failed. A client is told only that it failed (Kafka's
/// `SASL_AUTHENTICATION_FAILED`, with one message for every cause), except for an unknown
/// mechanism; the broker's log says which of these it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaslError {
    /// A message that does not follow the mechanism's grammar.
    #[error("malformed SASL message: {0}")]
    Malformed(&'static str),
    /// A mechanism the broker does not offer.
    #[error("unsupported SASL mechanism {0:?}")]
    UnsupportedMechanism(String),
    /// The client asked for channel binding, which the broker does not offer (as Kafka).
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// An authorization id other than the user's own.
    #[error("an authorization id other than the user name")]
    AuthorizationId,
    /// A delegation-token login (`tokenauth`), which the broker does not offer.
    #[error("delegation tokens are not supported")]
    TokenAuth,
    /// The client's final message does not carry the nonce the exchange agreed.
    #[error("the nonce does not match the exchange's")]
    NonceMismatch,
    /// An iteration count outside what a credential may have.
    #[error("{iterations} iterations: a credential needs {min} to {max}")]
    Iterations {
        /// The count given.
        iterations: u32,
        /// The fewest allowed.
        min: u32,
        /// The most allowed.
        max: u32,
    },
    /// Wrong credentials: an unknown user or a wrong password, told apart only here.
    #[error("invalid credentials")]
    Failed,
    /// A message out of turn (the exchange is over, or has not started).
    #[error("a SASL message out of turn")]
    IllegalState,
}

/// Who is on the other end of a connection, as authorization sees them: the principal its
/// authentication named (`User:ANONYMOUS` where none ran) and the address it comes from.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) principal: std::sync::Arc<str>,
    pub(crate) host: Option<std::net::IpAddr>,
}

impl Session {
    /// A connection nobody authenticated on.
    pub(crate) fn anonymous(host: Option<std::net::IpAddr>) -> Session {
        static PRINCIPAL: std::sync::LazyLock<std::sync::Arc<str>> =
            std::sync::LazyLock::new(|| std::sync::Arc::from(acl::ANONYMOUS));
        Session {
            principal: std::sync::Arc::clone(&PRINCIPAL),
            host,
        }
    }

    /// A connection on which `user` authenticated.
    pub(crate) fn user(user: &str, host: Option<std::net::IpAddr>) -> Session {
        Session {
            principal: std::sync::Arc::from(format!("User:{user}")),
            host,
        }
    }

    /// The session as an authorization decision takes it.
    pub(crate) fn requester(&self) -> acl::Requester<'_> {
        acl::Requester {
            principal: &self.principal,
            host: self.host,
        }
    }
}
