//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), with Kafka's rules.
//!
//! # What a broker stores
//!
//! For each user and mechanism, a [`ScramCredential`]: the salt, the iteration count, and
//!
//! ```text
//! SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
//! StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
//! ServerKey      = HMAC(SaltedPassword, "Server Key")
//! ```
//!
//! with H = SHA-256 or SHA-512. Neither the password nor the salted password is kept: the
//! StoredKey verifies a client's proof without being able to make one.
//!
//! # The exchange, message by message
//!
//! ```text
//! client-first  = gs2-header client-first-bare
//! gs2-header    = ("n" / "y") "," ["a=" saslname] ","       ; "p=…" (channel binding): refused
//! client-first-bare = "n=" saslname ",r=" c-nonce *("," ext "=" value)
//! server-first  = "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
//! client-final  = "c=" base64(gs2-header) ",r=" c-nonce s-nonce *("," ext "=" value)
//!                 ",p=" base64(ClientProof)
//! server-final  = "v=" base64(ServerSignature)
//! ```
//!
//! The server checks `H(ClientProof XOR HMAC(StoredKey, AuthMessage)) == StoredKey` in
//! constant time, where `AuthMessage = client-first-bare "," server-first ","
//! client-final-without-proof`, and answers `HMAC(ServerKey, AuthMessage)` so that the client
//! knows the server holds the credential too.
//!
//! Kafka's rules, kept here: the client's final nonce must end with the agreed one (Kafka
//! checks `endsWith`, and librdkafka sends its own nonce again before it); no SASLprep (a name is its UTF-8 bytes); `,` and `=` in a name
//! travel as `=2C` and `=3D`, and any other `=` is malformed; an authorization id, if given,
//! must be the user's own name; the `tokenauth` extension (delegation tokens) is refused and
//! other extensions are ignored; credentials have 4,096 to 16,384 iterations. Unlike Kafka, an
//! unknown user is not refused at the first message: it gets a salt and an iteration count
//! made from the broker's secret and its name (the same on every attempt, as a real user's
//! are), and fails at the proof, so that no answer tells an unknown user from a wrong password.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::SaslError;

mod client;

pub(crate) use client::{ScramClient, plain_message};

/// A SCRAM mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (Kafka's mechanism type 1).
    Sha256,
    /// SCRAM-SHA-512 (Kafka's mechanism type 2).
    Sha512,
}

impl ScramMechanism {
    /// The fewest iterations a credential may have (Kafka's bound).
    pub const ITERATIONS_MIN: u32 = 4096;
    /// The most iterations a credential may have (Kafka's bound).
    pub const ITERATIONS_MAX: u32 = 16384;

    /// Both mechanisms.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha512, ScramMechanism::Sha256];

    /// The SASL name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name (exact, upper case, as Kafka's clients send it).
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's code for it in the SCRAM credential APIs: 1 for SHA-256, 2 for SHA-512.
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of a Kafka code.
    pub fn from_kafka_type(code: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL
            .into_iter()
            .find(|m| m.kafka_type() == code)
    }

    /// Bytes of the hash's output (and of each key).
    fn key_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes a key of any length: `new_from_slice` cannot fail.
        match self {
            ScramMechanism::Sha256 => Hmac::<Sha256>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
            ScramMechanism::Sha512 => Hmac::<Sha512>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.key_len()];
        // Fails only for an output length the PRF cannot give, and this one is its own.
        let _ = match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2::<Hmac<Sha256>>(password, salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2::<Hmac<Sha512>>(password, salt, iterations, &mut out)
            }
        };
        out
    }
}

/// What a broker stores to check a user's SCRAM logins with one mechanism: never the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScramCredential {
    /// The mechanism.
    pub mechanism: ScramMechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2's iteration count.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    /// The mechanism and iteration count only: the keys verify logins and stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Bytes of a salt drawn for a new credential.
const SALT_LEN: usize = 32;

impl ScramCredential {
    /// A credential for `password`, with a salt drawn from the operating system's random
    /// source.
    ///
    /// # Errors
    ///
    /// [`SaslError::Iterations`] outside
    /// [`ITERATIONS_MIN`](ScramMechanism::ITERATIONS_MIN)..=[`ITERATIONS_MAX`](ScramMechanism::ITERATIONS_MAX).
    pub fn new(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        let mut salt = vec![0u8; SALT_LEN];
        getrandom::fill(&mut salt).map_err(|_| SaslError::Malformed("no random source"))?;
        ScramCredential::with_salt(mechanism, password, &salt, iterations)
    }

    /// A credential for `password` with a given salt.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new); [`SaslError::Malformed`] for an empty salt.
    pub fn with_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        check_iterations(iterations)?;
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        ScramCredential::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// A credential from a salted password (what Kafka's `AlterUserScramCredentials` carries:
    /// the client runs PBKDF2, the broker keeps only the keys).
    ///
    /// # Errors
    ///
    /// [`SaslError::Iterations`] as [`new`](Self::new); [`SaslError::Malformed`] for an empty
    /// salt or a salted password that is not the mechanism's hash length.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, SaslError> {
        check_iterations(iterations)?;
        if salt.is_empty() {
            return Err(SaslError::Malformed("empty salt"));
        }
        if salted_password.len() != mechanism.key_len() {
            return Err(SaslError::Malformed("salted password of the wrong length"));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        })
    }

    /// A credential from its stored parts (a metadata record's), checked as
    /// [`from_salted_password`](Self::from_salted_password) checks them.
    pub(crate) fn from_keys(
        mechanism: ScramMechanism,
        salt: Vec<u8>,
        iterations: u32,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
    ) -> Result<ScramCredential, SaslError> {
        check_iterations(iterations)?;
        if salt.is_empty() {
            return Err(SaslError::Malformed("empty salt"));
        }
        let n = mechanism.key_len();
        if stored_key.len() != n || server_key.len() != n {
            return Err(SaslError::Malformed("keys of the wrong length"));
        }
        Ok(ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key,
            server_key,
        })
    }

    /// The metadata command that gives user `user` this credential.
    pub(crate) fn put_command(&self, user: &str) -> crate::catalog::MetaCommand {
        crate::catalog::MetaCommand::PutScramCredential {
            user: user.to_string(),
            mechanism: self.mechanism.kafka_type() as u8,
            salt: self.salt.clone(),
            iterations: self.iterations,
            stored_key: self.stored_key.clone(),
            server_key: self.server_key.clone(),
        }
    }

    /// Whether `password` is this credential's (PLAIN logins), in constant time once derived.
    pub(crate) fn verifies_password(&self, password: &str) -> bool {
        let m = self.mechanism;
        let salted = m.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let stored = m.hash(&m.hmac(&salted, b"Client Key"));
        bool::from(stored.ct_eq(&self.stored_key))
    }
}

fn check_iterations(iterations: u32) -> Result<(), SaslError> {
    let (min, max) = (
        ScramMechanism::ITERATIONS_MIN,
        ScramMechanism::ITERATIONS_MAX,
    );
    if !(min..=max).contains(&iterations) {
        return Err(SaslError::Iterations {
            iterations,
            min,
            max,
        });
    }
    Ok(())
}

/// A server nonce: 18 random bytes as 36 hex digits (printable, no comma), the client's nonce
/// extended by it.
pub(crate) fn server_nonce() -> String {
    let mut bytes = [0u8; 18];
    // Without a random source the exchange still works; its nonces are only guessable.
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The credentials an unknown user is answered with: made from a secret of the broker's and
/// the user's name, so that the same name gets the same salt every time (as a real user's
/// stays), and no answer but the last tells it from a known user with a wrong password.
#[derive(Clone)]
pub(crate) struct FakeCredentials {
    secret: [u8; 32],
}

impl FakeCredentials {
    /// Fake credentials from a secret drawn now (from the operating system's random source).
    pub(crate) fn random() -> FakeCredentials {
        let mut secret = [0u8; 32];
        // Without a random source the fake salts are still per name, only guessable.
        let _ = getrandom::fill(&mut secret);
        FakeCredentials { secret }
    }

    /// Fake credentials from a broker's secret (drawn when it starts: they change when it
    /// restarts, which a client cannot tell from a password change).
    pub(crate) fn from_secret(secret: [u8; 32]) -> FakeCredentials {
        FakeCredentials { secret }
    }

    pub(super) fn for_user(&self, mechanism: ScramMechanism, user: &str) -> ScramCredential {
        let derive = |label: &str| {
            let mut data = Vec::with_capacity(label.len() + user.len() + 16);
            data.extend_from_slice(label.as_bytes());
            data.extend_from_slice(mechanism.name().as_bytes());
            data.push(0);
            data.extend_from_slice(user.as_bytes());
            mechanism.hmac(&self.secret, &data)
        };
        let mut salt = derive("salt");
        salt.truncate(SALT_LEN);
        ScramCredential {
            mechanism,
            salt,
            iterations: ScramMechanism::ITERATIONS_MIN,
            stored_key: derive("stored"),
            server_key: derive("server"),
        }
    }
}

/// The server's side of one SCRAM exchange: [`first`](Self::first), then
/// [`finish`](Self::finish).
pub(crate) struct ScramServer {
    mechanism: ScramMechanism,
    state: ServerState,
}

enum ServerState {
    First,
    Final(Box<Agreed>),
    Done,
}

/// What the first two messages settled.
struct Agreed {
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramServer {
    pub(crate) fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            state: ServerState::First,
        }
    }

    /// Reads the client's first message and answers the server's: the nonce extended by
    /// `server_nonce` (printable ASCII, no comma: the caller draws it), the user's salt and
    /// iteration count (an unknown user's from `fake`). `lookup` finds a user's credential
    /// for this mechanism.
    ///
    /// # Errors
    ///
    /// [`SaslError::Malformed`], [`SaslError::ChannelBinding`], [`SaslError::AuthorizationId`],
    /// [`SaslError::TokenAuth`]; [`SaslError::IllegalState`] if called twice.
    pub(crate) fn first(
        &mut self,
        message: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        fake: &FakeCredentials,
    ) -> Result<Vec<u8>, SaslError> {
        if !matches!(self.state, ServerState::First) {
            return Err(SaslError::IllegalState);
        }
        self.state = ServerState::Done;
        let message = std::str::from_utf8(message).map_err(|_| SaslError::Malformed("UTF-8"))?;
        let first = parse_client_first(message)?;
        let credential = lookup(&first.user)
            .filter(|c| c.mechanism == self.mechanism)
            .unwrap_or_else(|| fake.for_user(self.mechanism, &first.user));
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let answer = server_first.clone().into_bytes();
        self.state = ServerState::Final(Box::new(Agreed {
            user: first.user,
            credential,
            gs2_header: first.gs2_header,
            client_first_bare: first.bare,
            server_first,
            nonce,
        }));
        Ok(answer)
    }

    /// Reads the client's final message: the user's name and the server's final message if
    /// its proof holds.
    ///
    /// # Errors
    ///
    /// [`SaslError::Failed`] for a wrong proof (or an unknown user); [`SaslError::Malformed`],
    /// [`SaslError::NonceMismatch`], [`SaslError::ChannelBinding`];
    /// [`SaslError::IllegalState`] unless [`first`](Self::first) succeeded just before.
    pub(crate) fn finish(&mut self, message: &[u8]) -> Result<(String, Vec<u8>), SaslError> {
        let ServerState::Final(agreed) = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(SaslError::IllegalState);
        };
        let message = std::str::from_utf8(message).map_err(|_| SaslError::Malformed("UTF-8"))?;
        let last = parse_client_final(message)?;
        if last.channel_binding != BASE64.encode(agreed.gs2_header.as_bytes()) {
            return Err(SaslError::ChannelBinding);
        }
        // Kafka's rule, `endsWith`: librdkafka (at least to 2.0) sends its own nonce again
        // before the whole agreed one. What was sent is in the proof's AuthMessage either way.
        if !last.nonce.ends_with(&agreed.nonce) {
            return Err(SaslError::NonceMismatch);
        }
        let m = self.mechanism;
        let c = &agreed.credential;
        let auth_message = format!(
            "{},{},{}",
            agreed.client_first_bare, agreed.server_first, last.without_proof
        );
        let signature = m.hmac(&c.stored_key, auth_message.as_bytes());
        if last.proof.len() != signature.len() {
            return Err(SaslError::Failed);
        }
        let client_key: Vec<u8> = last
            .proof
            .iter()
            .zip(&signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !bool::from(m.hash(&client_key).ct_eq(&c.stored_key)) {
            return Err(SaslError::Failed);
        }
        let server_signature = m.hmac(&c.server_key, auth_message.as_bytes());
        let answer = format!("v={}", BASE64.encode(server_signature)).into_bytes();
        Ok((agreed.user, answer))
    }
}

/// A client-first message, read.
struct ClientFirst {
    gs2_header: String,
    bare: String,
    user: String,
    nonce: String,
}

fn parse_client_first(message: &str) -> Result<ClientFirst, SaslError> {
    // gs2-header: a flag, an optional authorization id, then the bare message.
    let (flag, rest) = message
        .split_once(',')
        .ok_or(SaslError::Malformed("no GS2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(SaslError::ChannelBinding),
        _ => return Err(SaslError::Malformed("GS2 channel-binding flag")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(SaslError::Malformed("no GS2 header"))?;
    let authzid = match authzid {
        "" => None,
        a => Some(unescape_name(
            a.strip_prefix("a=")
                .ok_or(SaslError::Malformed("GS2 authorization id"))?,
        )?),
    };
    let mut attrs = bare.split(',');
    let user = unescape_name(
        attrs
            .next()
            .and_then(|a| a.strip_prefix("n="))
            .ok_or(SaslError::Malformed("no user name"))?,
    )?;
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| is_nonce(n))
        .ok_or(SaslError::Malformed("no client nonce"))?;
    for ext in attrs {
        let (key, value) = ext
            .split_once('=')
            .ok_or(SaslError::Malformed("extension"))?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(SaslError::Malformed("extension name"));
        }
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            return Err(SaslError::TokenAuth);
        }
    }
    if authzid.as_ref().is_some_and(|a| *a != user) {
        return Err(SaslError::AuthorizationId);
    }
    Ok(ClientFirst {
        gs2_header: format!("{flag},{authzid_raw},", authzid_raw = rest_prefix(rest)),
        bare: bare.to_string(),
        user,
        nonce: nonce.to_string(),
    })
}

/// The authorization-id part of a GS2 header as sent (empty, or `a=…`).
fn rest_prefix(rest: &str) -> &str {
    rest.split_once(',').map_or("", |(a, _)| a)
}

/// A client-final message, read.
struct ClientFinal<'a> {
    channel_binding: &'a str,
    nonce: &'a str,
    without_proof: &'a str,
    proof: Vec<u8>,
}

fn parse_client_final(message: &str) -> Result<ClientFinal<'_>, SaslError> {
    let (without_proof, proof) = message
        .rsplit_once(",p=")
        .ok_or(SaslError::Malformed("no proof"))?;
    let proof = BASE64
        .decode(proof)
        .map_err(|_| SaslError::Malformed("proof is not base64"))?;
    let mut attrs = without_proof.split(',');
    let channel_binding = attrs
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or(SaslError::Malformed("no channel binding"))?;
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(SaslError::Malformed("no nonce"))?;
    for ext in attrs {
        if !ext.contains('=') {
            return Err(SaslError::Malformed("extension"));
        }
    }
    Ok(ClientFinal {
        channel_binding,
        nonce,
        without_proof,
        proof,
    })
}

/// A nonce: printable ASCII without a comma.
fn is_nonce(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// A `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=`, and a NUL, are malformed.
fn unescape_name(name: &str) -> Result<String, SaslError> {
    if name.is_empty() || name.contains('\0') {
        return Err(SaslError::Malformed("user name"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let escape = rest.get(i..i + 3);
        match escape {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(SaslError::Malformed("user name escape")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A `saslname` as a client sends it.
pub(crate) fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// Runs a SCRAM server exchange over arbitrary bytes (two messages, split at the first 0xFF),
/// and a PLAIN check of the same bytes, for the fuzz target: any `Err` is fine, a panic is a
/// bug. Not part of the API.
#[doc(hidden)]
pub fn fuzz_sasl_server(data: &[u8]) -> bool {
    let (first, last) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let known = ScramCredential::with_salt(
        ScramMechanism::Sha256,
        "pencil",
        b"salt",
        ScramMechanism::ITERATIONS_MIN,
    )
    .ok();
    let fake = FakeCredentials::from_secret([7; 32]);
    let plain = super::authenticate_plain(data, |_| known.iter().cloned().collect(), &fake);
    let mut server = ScramServer::new(ScramMechanism::Sha256);
    let scram = server
        .first(
            first,
            "servernonce",
            |u| known.filter(|_| u == "user"),
            &fake,
        )
        .is_ok()
        && server.finish(last).is_ok();
    scram || plain.is_ok()
}

#[cfg(test)]
mod tests;
