//! The client's side of a SCRAM exchange (RFC 5802), as native clients log in to brokers:
//!
//! ```text
//! client-first  = "n,," "n=" saslname ",r=" c-nonce
//! server-first  = "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
//! client-final  = "c=biws,r=" c-nonce s-nonce ",p=" base64(ClientKey XOR ClientSignature)
//! server-final  = "v=" base64(ServerSignature)            ; or "e=" error
//! ```
//!
//! The client checks what the server sends too: its nonce must extend the client's, its
//! iteration count must be one a credential may have (a server cannot make the client spend
//! more), and its final signature must prove it knows the user's ServerKey.

use super::{BASE64, ScramMechanism, check_iterations, escape_name, server_nonce};
use crate::security::SaslError;
use base64::Engine;
use subtle::ConstantTimeEq;

/// One SCRAM login's client side: [`new`](Self::new) (the first message), then
/// [`respond`](Self::respond) to the server's first, then [`verify`](Self::verify) its final.
pub(crate) struct ScramClient {
    mechanism: ScramMechanism,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// The signature the server's final message must carry, once known.
    server_signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A login of `user` with `password`, and its first message.
    pub(crate) fn new(mechanism: ScramMechanism, user: &str, password: &str) -> (Self, Vec<u8>) {
        let nonce = server_nonce();
        let client_first_bare = format!("n={},r={nonce}", escape_name(user));
        let first = format!("n,,{client_first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            password: password.to_string(),
            nonce,
            client_first_bare,
            server_signature: None,
        };
        (client, first)
    }

    /// The final message, answering the server's first.
    ///
    /// # Errors
    ///
    /// [`SaslError::Malformed`] for a message out of the grammar, [`SaslError::NonceMismatch`]
    /// for a nonce that does not extend the client's, [`SaslError::Iterations`] for a count a
    /// credential may not have; [`SaslError::IllegalState`] if called twice.
    pub(crate) fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslError> {
        if self.server_signature.is_some() {
            return Err(SaslError::IllegalState);
        }
        let text = std::str::from_utf8(server_first).map_err(|_| SaslError::Malformed("UTF-8"))?;
        let mut attrs = text.split(',');
        let (Some(nonce), Some(salt), Some(iterations)) = (
            attrs.next().and_then(|a| a.strip_prefix("r=")),
            attrs.next().and_then(|a| a.strip_prefix("s=")),
            attrs.next().and_then(|a| a.strip_prefix("i=")),
        ) else {
            return Err(SaslError::Malformed("server-first needs r=, s= and i="));
        };
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
            return Err(SaslError::NonceMismatch);
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| SaslError::Malformed("salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| SaslError::Malformed("iteration count"))?;
        check_iterations(iterations)?;
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        self.server_signature = Some(m.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server's final message.
    ///
    /// # Errors
    ///
    /// [`SaslError::Failed`] for a server's error (`e=`) or a signature that is not the
    /// server's; [`SaslError::Malformed`]; [`SaslError::IllegalState`] before
    /// [`respond`](Self::respond).
    pub(crate) fn verify(&self, server_final: &[u8]) -> Result<(), SaslError> {
        let Some(expected) = &self.server_signature else {
            return Err(SaslError::IllegalState);
        };
        let text = std::str::from_utf8(server_final).map_err(|_| SaslError::Malformed("UTF-8"))?;
        let signature = text
            .strip_prefix("v=")
            .ok_or(SaslError::Failed)
            .and_then(|v| {
                BASE64
                    .decode(v)
                    .map_err(|_| SaslError::Malformed("signature"))
            })?;
        if bool::from(signature.ct_eq(expected)) {
            Ok(())
        } else {
            Err(SaslError::Failed)
        }
    }
}

/// A PLAIN login's one message: no authorization id, the user, the password.
pub(crate) fn plain_message(user: &str, password: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(2 + user.len() + password.len());
    message.push(0);
    message.extend_from_slice(user.as_bytes());
    message.push(0);
    message.extend_from_slice(password.as_bytes());
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{FakeCredentials, ScramCredential, ScramServer};

    fn login(
        mechanism: ScramMechanism,
        stored: &ScramCredential,
        password: &str,
    ) -> Result<String, SaslError> {
        let (mut client, first) = ScramClient::new(mechanism, "al,i=ce", password);
        let mut server = ScramServer::new(mechanism);
        let fake = FakeCredentials::from_secret([3; 32]);
        let server_first =
            server.first(&first, &server_nonce(), |_| Some(stored.clone()), &fake)?;
        let last = client.respond(&server_first)?;
        let (user, server_final) = server.finish(&last)?;
        client.verify(&server_final)?;
        Ok(user)
    }

    #[test]
    fn the_client_logs_in_to_the_server_and_checks_it() {
        for m in ScramMechanism::ALL {
            let stored = ScramCredential::new(m, "pw", 4096).unwrap();
            assert_eq!(login(m, &stored, "pw").unwrap(), "al,i=ce");
            assert!(matches!(login(m, &stored, "other"), Err(SaslError::Failed)));
        }
    }

    #[test]
    fn a_server_that_does_not_know_the_password_or_extend_the_nonce_is_refused() {
        let m = ScramMechanism::Sha256;
        let (mut client, _) = ScramClient::new(m, "u", "pw");
        let nonce = client.nonce.clone();
        let salt = BASE64.encode(b"salt");
        assert!(matches!(
            client.respond(format!("r=other{nonce},s={salt},i=4096").as_bytes()),
            Err(SaslError::NonceMismatch)
        ));
        assert!(matches!(
            client.respond(format!("r={nonce}x,s={salt},i=100000000").as_bytes()),
            Err(SaslError::Iterations { .. })
        ));
        assert!(client.respond(b"garbage").is_err());
        client
            .respond(format!("r={nonce}x,s={salt},i=4096").as_bytes())
            .unwrap();
        assert!(matches!(client.verify(b"v=AAAA"), Err(SaslError::Failed)));
        assert!(matches!(
            client.verify(b"e=other-error"),
            Err(SaslError::Failed)
        ));
    }
}
