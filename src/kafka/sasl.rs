//! SASL authentication on a Kafka connection, before anything else is served, as Kafka's
//! `SaslServerAuthenticator` does it:
//!
//! 1. ApiVersions, any number of times (clients ask which SASL framing the broker speaks);
//! 2. SaslHandshake naming a mechanism: one the listener offers is answered with no error
//!    and the list; another is answered `UNSUPPORTED_SASL_MECHANISM` (33) with the list, and
//!    the connection is closed;
//! 3. the mechanism's messages: SCRAM's two (answered with the server's first message, then
//!    its final one), PLAIN's one. After SaslHandshake v1 each comes in a SaslAuthenticate;
//!    a wrong password, an unknown user or a malformed message is answered
//!    `SASL_AUTHENTICATION_FAILED` (58), with one message whatever the cause, and the
//!    connection is closed. After SaslHandshake v0 they come as raw tokens (a big-endian
//!    `i32` length and the bytes, each way), and a failure closes the connection unanswered.
//!
//! Any other request before the handshake closes the connection unanswered, as Kafka does;
//! one between the mechanism's messages is answered `ILLEGAL_SASL_STATE` first where its
//! answer has a place for it (Produce, Metadata, Fetch), as Kafka answers it.
//!
//! A failed login is answered (or, for raw tokens, closed) only after a delay that grows with
//! the recent failures from the client's address (`security/throttle.rs`).
//!
//! Where sessions are limited (`NodeConfig::sasl_session_lifetime`, KIP-368), the last
//! SaslAuthenticate answer (v1 and later) carries the session's lifetime, and the client
//! re-authenticates later on the same connection with the same exchange
//! ([`Reauthentication`], driven by `conn.rs` in the connection's request order).
//! The requests of this phase are read one at a time, at most
//! [`SASL_FRAME_BYTES_MAX`] each (Kafka's `sasl.server.max.receive.size`), and the whole
//! exchange must end by the connection's pre-authentication deadline (10 s after it was
//! admitted, its TLS handshake included on a SASL_SSL listener). Then the connection is
//! served as any other, as the user it authenticated (`User:<name>`).

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Decoded, Held, KafkaConfig, api_versions, code, decode_request, encode};
pub(crate) use crate::node::service::SaslSettings;
use crate::node::service::{BrokerService, LoginStep};
use crate::security::{SaslError, SaslMechanism, ScramServer};

/// Largest request read before authentication ends (Kafka's default
/// `sasl.server.max.receive.size`).
pub(crate) const SASL_FRAME_BYTES_MAX: u32 = 512 << 10;

/// Most requests one authentication reads (ApiVersions, the handshake, the mechanism's
/// messages: a handful).
const SASL_REQUESTS_MAX: usize = 16;

/// Where an exchange stands.
enum Stage {
    /// Before the handshake.
    Handshake,
    /// The mechanism is chosen; its next message is awaited in a SaslAuthenticate.
    Authenticate(SaslMechanism, Option<ScramServer>),
    /// The mechanism is chosen by a SaslHandshake v0: its messages follow as raw tokens.
    Raw(SaslMechanism),
}

/// Why an authentication ended without a user, for the broker's log.
struct Refused {
    why: String,
    /// A client's failure (wrong credentials, an unknown mechanism), as opposed to a request
    /// out of turn, a malformed frame or a deadline.
    failed_login: bool,
}

impl Refused {
    fn closed(why: impl Into<String>) -> Refused {
        Refused {
            why: why.into(),
            failed_login: false,
        }
    }
}

/// Writes `bytes` and flushes them (a TLS connection holds what it encrypted until then).
async fn send<W: AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8]) -> Result<(), Refused> {
    let sent = async {
        wr.write_all(bytes).await?;
        wr.flush().await
    };
    sent.await.map_err(|e| Refused::closed(e.to_string()))
}

/// A connection's authenticated session: its user, the mechanism it logged in with, and when
/// the session ends if the broker limits it (KIP-368: a client told the session's lifetime
/// re-authenticates on the connection before then, or the connection is closed at its next
/// request).
pub(super) struct Login {
    pub(super) user: String,
    pub(super) mechanism: SaslMechanism,
    pub(super) expires: Option<tokio::time::Instant>,
}

impl Login {
    /// The session of `user`, logged in by `mechanism`: limited where the listener limits
    /// sessions (SaslAuthenticate v1 and later tell the client).
    fn new(user: String, mechanism: SaslMechanism, settings: &SaslSettings) -> Login {
        // A client not told (SaslAuthenticate v0, raw tokens) is held to the lifetime too: it
        // is disconnected at its first request after it, as Kafka does.
        let expires = settings
            .session_lifetime
            .map(|lifetime| tokio::time::Instant::now() + lifetime);
        Login {
            user,
            mechanism,
            expires,
        }
    }
}

/// Runs the exchange on a new connection (its halves), until `deadline`: the session once
/// authenticated, or `None` (the connection is to be closed; the reason is logged here).
pub(super) async fn authenticate<R, W>(
    (rd, wr): (&mut R, &mut W),
    service: &BrokerService,
    config: &KafkaConfig,
    settings: &SaslSettings,
    from: SocketAddr,
    deadline: tokio::time::Instant,
) -> Option<Login>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let exchange = exchange((rd, wr), service, config, settings, from);
    let outcome = match tokio::time::timeout_at(deadline, exchange).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Refused::closed("not authenticated in time")),
    };
    match outcome {
        Ok((user, mechanism)) => {
            service.login_succeeded(from.ip());
            tracing::debug!(%from, principal = %format!("User:{user}"), "kafka client authenticated");
            Some(Login::new(user, mechanism, settings))
        }
        Err(refused) if refused.failed_login => {
            tracing::info!(%from, reason = %refused.why, "kafka client failed to authenticate");
            None
        }
        Err(refused) => {
            tracing::debug!(%from, reason = %refused.why, "kafka connection closed before authentication");
            None
        }
    }
}

/// The exchange itself. A failed login's answer (or, for raw tokens, the connection's close)
/// waits as long as the failures from the client's address say (`security/throttle.rs`).
async fn exchange<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    (rd, wr): (&mut R, &mut W),
    service: &BrokerService,
    config: &KafkaConfig,
    settings: &SaslSettings,
    from: SocketAddr,
) -> Result<(String, SaslMechanism), Refused> {
    let mut stage = Stage::Handshake;
    for _ in 0..SASL_REQUESTS_MAX {
        if let Stage::Raw(mechanism) = stage {
            let outcome = raw_tokens(rd, wr, mechanism, service, settings).await;
            if let Err(Refused {
                failed_login: true, ..
            }) = &outcome
            {
                tokio::time::sleep(service.login_failed(from.ip())).await;
            }
            return outcome.map(|user| (user, mechanism));
        }
        let Some(Request {
            api,
            correlation,
            version,
            request,
            held: _held,
        }) = next_request((rd, wr), config, &stage).await?
        else {
            continue;
        };
        let mechanism = match &stage {
            Stage::Authenticate(m, _) | Stage::Raw(m) => Some(*m),
            Stage::Handshake => None,
        };
        let (answer, outcome) = step(request, version, &mut stage, service, settings).split();
        let api = api.unwrap_or(ApiKey::ApiVersions);
        let bytes = encode(correlation, api, version, &answer)
            .map_err(|e| Refused::closed(e.to_string()))?;
        if let Some(Err(Refused {
            failed_login: true, ..
        })) = &outcome
        {
            tokio::time::sleep(service.login_failed(from.ip())).await;
        }
        send(wr, &bytes).await?;
        if let Some(outcome) = outcome {
            let mechanism = mechanism.ok_or_else(|| Refused::closed("no mechanism"))?;
            return outcome.map(|user| (user, mechanism));
        }
    }
    Err(Refused::closed("too many requests before authentication"))
}

/// A request of the exchange, decoded.
struct Request {
    /// Its API (`None` for an unknown one).
    api: Option<ApiKey>,
    correlation: i32,
    version: i16,
    request: RequestKind,
    /// Its bytes' share of the broker's request budget, held until it is answered.
    held: Held,
}

/// Reads the exchange's next request and decodes it, if `stage` lets it through. `None` for
/// one answered already (an ApiVersions at a version not served, which a client asks again at
/// an older one); any other request out of turn ends the exchange.
async fn next_request<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    (rd, wr): (&mut R, &mut W),
    config: &KafkaConfig,
    stage: &Stage,
) -> Result<Option<Request>, Refused> {
    let (body, held) = super::conn::read_request(rd, config, SASL_FRAME_BYTES_MAX)
        .await
        .map_err(|e| Refused::closed(e.to_string()))?;
    let api = ApiKey::try_from((&body[..]).get_i16()).ok();
    match (api, stage) {
        (Some(ApiKey::ApiVersions | ApiKey::SaslHandshake), Stage::Handshake)
        | (Some(ApiKey::SaslAuthenticate), Stage::Authenticate(..)) => {
            match decode_request(body).map_err(Refused::closed)? {
                Decoded::Serve {
                    header,
                    version,
                    request,
                    ..
                } => Ok(Some(Request {
                    api,
                    correlation: header.correlation_id,
                    version,
                    request: *request,
                    held,
                })),
                // A version not served: its refusal. A client tries an older ApiVersions
                // next; a SASL request is the end.
                Decoded::Answered(answer) => {
                    send(wr, &answer).await?;
                    if api == Some(ApiKey::ApiVersions) {
                        return Ok(None);
                    }
                    Err(Refused::closed("a SASL version not served"))
                }
            }
        }
        // Between a mechanism's messages Kafka answers a request of another API with
        // ILLEGAL_SASL_STATE where it can, then closes; before the handshake it closes.
        (api, Stage::Authenticate(..)) => {
            if let Ok(Decoded::Serve {
                header,
                version,
                request,
                ..
            }) = decode_request(body)
                && let (Some(api), Some(answer)) = (api, illegal_state(*request))
                && let Ok(bytes) = encode(header.correlation_id, api, version, &answer)
            {
                send(wr, &bytes).await?;
            }
            Err(Refused::closed(format!("{api:?} during a SASL exchange")))
        }
        (api, _) => Err(Refused::closed(format!("{api:?} before authentication"))),
    }
}

/// One request's answer, and whether the exchange ended with it.
enum Step {
    Answer(ResponseKind),
    Done(ResponseKind, Result<String, Refused>),
}

impl Step {
    /// The answer to write, and the exchange's outcome if it ended.
    fn split(self) -> (ResponseKind, Option<Result<String, Refused>>) {
        match self {
            Step::Answer(answer) => (answer, None),
            Step::Done(answer, outcome) => (answer, Some(outcome)),
        }
    }
}

fn step(
    request: RequestKind,
    version: i16,
    stage: &mut Stage,
    service: &BrokerService,
    settings: &SaslSettings,
) -> Step {
    match request {
        RequestKind::SaslHandshake(r) => handshake(r.mechanism.as_str(), version, stage, settings),
        RequestKind::SaslAuthenticate(r) => {
            let Stage::Authenticate(mechanism, scram) = stage else {
                return Step::Done(
                    authenticate_answer(code::ILLEGAL_SASL_STATE, None, Bytes::new()),
                    Err(Refused::closed("SaslAuthenticate before SaslHandshake")),
                );
            };
            match service.login_step(*mechanism, scram, &r.auth_bytes, settings) {
                Ok(LoginStep::Continue(bytes)) => {
                    Step::Answer(authenticate_answer(code::NONE, None, bytes))
                }
                Ok(LoginStep::Done(user, bytes)) => {
                    let mut answer = SaslAuthenticateResponse::default();
                    answer.auth_bytes = bytes;
                    // The session's lifetime, where the listener limits it (KIP-368).
                    if let Some(lifetime) = settings.session_lifetime.filter(|_| version >= 1) {
                        answer.session_lifetime_ms =
                            i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX);
                    }
                    Step::Done(ResponseKind::SaslAuthenticate(answer), Ok(user))
                }
                Err(e) => {
                    let message = format!(
                        "Authentication failed during authentication due to invalid credentials \
                         with SASL mechanism {mechanism}"
                    );
                    Step::Done(
                        authenticate_answer(
                            code::SASL_AUTHENTICATION_FAILED,
                            Some(message),
                            Bytes::new(),
                        ),
                        Err(Refused {
                            why: format!("{mechanism}: {e}"),
                            failed_login: true,
                        }),
                    )
                }
            }
        }
        // Only ApiVersions is left: the caller lets no other request through.
        _ => Step::Answer(ResponseKind::ApiVersions(api_versions::api_versions())),
    }
}

/// A SaslHandshake: the mechanism, if the listener offers it. After version 0 the
/// mechanism's messages come as raw tokens, after version 1 in SaslAuthenticate requests.
fn handshake(asked: &str, version: i16, stage: &mut Stage, settings: &SaslSettings) -> Step {
    let mut r = SaslHandshakeResponse::default();
    r.mechanisms = settings
        .mechanisms
        .iter()
        .map(|m| StrBytes::from_static_str(m.name()))
        .collect();
    match settings.offered(asked) {
        Some(m) => {
            *stage = if version == 0 {
                Stage::Raw(m)
            } else {
                Stage::Authenticate(m, None)
            };
            Step::Answer(ResponseKind::SaslHandshake(r))
        }
        None => {
            r.error_code = code::UNSUPPORTED_SASL_MECHANISM;
            let refused = Refused {
                why: SaslError::UnsupportedMechanism(asked.to_string()).to_string(),
                failed_login: true,
            };
            Step::Done(ResponseKind::SaslHandshake(r), Err(refused))
        }
    }
}

/// The mechanism's messages as raw tokens (after a SaslHandshake v0), each a big-endian `i32`
/// length and its bytes, each way. A failure closes the connection without an answer, as
/// Kafka does on this path.
async fn raw_tokens<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    rd: &mut R,
    wr: &mut W,
    mechanism: SaslMechanism,
    service: &BrokerService,
    settings: &SaslSettings,
) -> Result<String, Refused> {
    let mut scram = None;
    // SCRAM takes two tokens, PLAIN one.
    for _ in 0..2 {
        let mut len = [0u8; 4];
        rd.read_exact(&mut len)
            .await
            .map_err(|e| Refused::closed(e.to_string()))?;
        // Kafka's framing is big-endian: `Buf` reads it.
        let len = (&len[..]).get_i32();
        if len < 0 || len as u32 > SASL_FRAME_BYTES_MAX {
            return Err(Refused::closed(format!("a SASL token of {len} bytes")));
        }
        let mut token = vec![0u8; len as usize];
        rd.read_exact(&mut token)
            .await
            .map_err(|e| Refused::closed(e.to_string()))?;
        let (answer, user) = match service.login_step(mechanism, &mut scram, &token, settings) {
            Ok(LoginStep::Continue(answer)) => (answer, None),
            Ok(LoginStep::Done(user, answer)) => (answer, Some(user)),
            Err(e) => {
                return Err(Refused {
                    why: format!("{mechanism}: {e}"),
                    failed_login: true,
                });
            }
        };
        let mut framed = bytes::BytesMut::with_capacity(4 + answer.len());
        framed.put_u32(u32::try_from(answer.len()).unwrap_or(u32::MAX));
        framed.put_slice(&answer);
        send(wr, &framed).await?;
        if let Some(user) = user {
            return Ok(user);
        }
    }
    Err(Refused::closed("too many SASL tokens"))
}

fn authenticate_answer(error_code: i16, message: Option<String>, bytes: Bytes) -> ResponseKind {
    let mut r = SaslAuthenticateResponse::default();
    r.error_code = error_code;
    // Kafka's answers leave the message at its default (empty) unless there is one to give.
    if let Some(message) = message {
        r.error_message = Some(StrBytes::from_string(message));
    }
    r.auth_bytes = bytes;
    ResponseKind::SaslAuthenticate(r)
}

/// The answer to a request of another API between a mechanism's messages, as Kafka gives it:
/// `ILLEGAL_SASL_STATE` on every partition of a Produce or topic of a Metadata, at the top of
/// a Fetch. `None` for the other APIs: the connection is closed unanswered.
fn illegal_state(request: RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{FetchResponse, MetadataResponse, ProduceResponse};
    let illegal = code::ILLEGAL_SASL_STATE;
    match request {
        RequestKind::Produce(r) => {
            let mut answer = ProduceResponse::default();
            for topic in r.topic_data {
                let mut t = TopicProduceResponse::default();
                t.name = topic.name;
                for p in topic.partition_data {
                    let mut pr = PartitionProduceResponse::default();
                    pr.index = p.index;
                    pr.error_code = illegal;
                    t.partition_responses.push(pr);
                }
                answer.responses.push(t);
            }
            Some(ResponseKind::Produce(answer))
        }
        RequestKind::Metadata(r) => {
            let mut answer = MetadataResponse::default();
            for topic in r.topics.unwrap_or_default() {
                let mut t = MetadataResponseTopic::default();
                t.name = topic.name;
                t.error_code = illegal;
                answer.topics.push(t);
            }
            Some(ResponseKind::Metadata(answer))
        }
        RequestKind::Fetch(_) => {
            let mut answer = FetchResponse::default();
            answer.error_code = illegal;
            Some(ResponseKind::Fetch(answer))
        }
        _ => None,
    }
}

/// A re-authentication on an authenticated connection (KIP-368): a SaslHandshake naming the
/// session's mechanism, then its messages in SaslAuthenticate requests, as at the start; it
/// must log in the same user. Served one request at a time, in the connection's order.
pub(super) struct Reauthentication {
    stage: Stage,
    /// How long the refusal that just ended it waits (failed logins are slowed).
    pub(super) delay: std::time::Duration,
}

/// What one request of a re-authentication leaves: the framed answer, and the new session
/// once it ends, or why it failed (the connection is then closed after the answer).
pub(super) type ReauthStep = (Option<Bytes>, Option<Result<Login, String>>);

impl Reauthentication {
    pub(super) fn new() -> Reauthentication {
        Reauthentication {
            stage: Stage::Handshake,
            delay: std::time::Duration::ZERO,
        }
    }

    /// Serves `body`, a SaslHandshake or SaslAuthenticate of the re-authentication of
    /// `session`'s connection.
    pub(super) fn step(
        &mut self,
        body: Bytes,
        (session, from): (&Login, Option<std::net::IpAddr>),
        service: &BrokerService,
        settings: &SaslSettings,
    ) -> ReauthStep {
        let Ok(Decoded::Serve {
            header,
            version,
            request,
            ..
        }) = decode_request(body)
        else {
            return (
                None,
                Some(Err("a malformed re-authentication request".into())),
            );
        };
        let api = match &*request {
            RequestKind::SaslHandshake(_) => ApiKey::SaslHandshake,
            _ => ApiKey::SaslAuthenticate,
        };
        let same_mechanism = match &*request {
            RequestKind::SaslHandshake(r) => {
                version >= 1 && settings.offered(r.mechanism.as_str()) == Some(session.mechanism)
            }
            _ => true,
        };
        let (mut answer, outcome) = if same_mechanism {
            step(*request, version, &mut self.stage, service, settings).split()
        } else {
            // Raw tokens cannot follow mid-connection, and the mechanism may not change.
            let mut r = SaslHandshakeResponse::default();
            r.error_code = code::ILLEGAL_SASL_STATE;
            let refused = Refused::closed("a re-authentication with another mechanism");
            (ResponseKind::SaslHandshake(r), Some(Err(refused)))
        };
        let outcome = match outcome {
            None => None,
            Some(Ok(user)) if user == session.user => {
                Some(Ok(Login::new(user, session.mechanism, settings)))
            }
            // Refused as wrong credentials are (the answer tells no more), and counted.
            Some(Ok(user)) => {
                let message = format!(
                    "Authentication failed during authentication due to invalid credentials \
                     with SASL mechanism {}",
                    session.mechanism
                );
                answer = authenticate_answer(
                    code::SASL_AUTHENTICATION_FAILED,
                    Some(message),
                    Bytes::new(),
                );
                Some(Err(format!(
                    "re-authenticated as {user}, not {}",
                    session.user
                )))
            }
            Some(Err(refused)) => Some(Err(refused.why)),
        };
        if let (Some(Err(_)), Some(from)) = (&outcome, from) {
            self.delay = service.login_failed(from);
        }
        let framed = encode(header.correlation_id, api, version, &answer).ok();
        (framed, outcome)
    }
}
