//! Authentication: who is on the other end of a connection.
//!
//! - `scram.rs`: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them:
//!   the credentials a broker stores ([`ScramCredential`]: a salt, an iteration count and two
//!   keys, never a password), and the server's side of the exchange.
//! - `plain.rs`: SASL PLAIN (RFC 4616), checked against the same stored credentials.
//!
//! A successful exchange names a principal, `User:<name>`, the same on both doors.

mod plain;
mod scram;

pub(crate) use plain::authenticate_plain;
pub(crate) use scram::FakeCredentials;
pub use scram::{ScramCredential, ScramMechanism};

#[doc(hidden)]
pub use scram::fuzz_sasl_server;

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
