//! SASL PLAIN (RFC 4616), checked against the user's stored SCRAM credential.
//!
//! One message from the client, no answer but success:
//!
//! ```text
//! message = [authzid] NUL authcid NUL password      ; UTF-8, at most 255 bytes each
//! ```
//!
//! As Kafka requires, the authorization id is empty or the user's own name. The password is
//! checked by deriving the user's StoredKey from it with the credential's salt and iterations
//! (no password is stored), with any mechanism the user has a credential for.

use super::SaslError;
use super::scram::ScramCredential;

/// Longest authorization id, user name or password accepted, in bytes (RFC 4616's limit).
const FIELD_BYTES_MAX: usize = 255;

/// Checks a PLAIN message: the user's name if the password is right. `lookup` gives the
/// user's stored credentials. An unknown user costs one derivation too, so that the time
/// taken does not tell it from a wrong password.
///
/// # Errors
///
/// [`SaslError::Malformed`], [`SaslError::AuthorizationId`], [`SaslError::Failed`].
pub(crate) fn authenticate_plain(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Vec<ScramCredential>,
    fake: &super::FakeCredentials,
) -> Result<String, SaslError> {
    let mut fields = message.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(SaslError::Malformed("PLAIN needs three fields"));
    };
    let (authzid, user, password) = (text(authzid)?, text(user)?, text(password)?);
    if user.is_empty() {
        return Err(SaslError::Malformed("empty user name"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(SaslError::AuthorizationId);
    }
    let credentials = lookup(user);
    let Some(credential) = credentials.first() else {
        let decoy = fake.for_user(super::ScramMechanism::Sha256, user);
        let _ = decoy.verifies_password(password);
        return Err(SaslError::Failed);
    };
    if credential.verifies_password(password) {
        Ok(user.to_string())
    } else {
        Err(SaslError::Failed)
    }
}

/// A field as text: UTF-8, at most [`FIELD_BYTES_MAX`] bytes.
fn text(field: &[u8]) -> Result<&str, SaslError> {
    if field.len() > FIELD_BYTES_MAX {
        return Err(SaslError::Malformed("PLAIN field too long"));
    }
    std::str::from_utf8(field).map_err(|_| SaslError::Malformed("UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::ScramMechanism;

    fn users(user: &str) -> Vec<ScramCredential> {
        if user == "alice" {
            vec![
                ScramCredential::with_salt(ScramMechanism::Sha512, "secret", b"salt", 4096)
                    .unwrap(),
            ]
        } else {
            Vec::new()
        }
    }

    #[test]
    fn plain_checks_the_password_against_the_stored_credential() {
        let fake = crate::security::FakeCredentials::from_secret([3; 32]);
        let auth = |m: &[u8]| authenticate_plain(m, users, &fake);
        assert_eq!(auth(b"\0alice\0secret").unwrap(), "alice");
        assert_eq!(auth(b"alice\0alice\0secret").unwrap(), "alice");
        assert_eq!(auth(b"\0alice\0wrong"), Err(SaslError::Failed));
        assert_eq!(auth(b"\0bob\0secret"), Err(SaslError::Failed));
        assert_eq!(auth(b"bob\0alice\0secret"), Err(SaslError::AuthorizationId));
        for bad in [
            &b""[..],
            b"\0alice",
            b"\0alice\0secret\0x",
            b"\0\0secret",
            b"\0\xff\0x",
        ] {
            assert!(matches!(auth(bad), Err(SaslError::Malformed(_))), "{bad:?}");
        }
        let long = [&b"\0alice\0"[..], &[b'x'; 256]].concat();
        assert!(matches!(auth(&long), Err(SaslError::Malformed(_))));
    }
}
