//! Logging in on the native door, before anything else is served on a connection, where the
//! broker asks for it (`NodeConfig::native_sasl`): the connection's first requests are a
//! SaslHandshake naming a mechanism, then the mechanism's messages, each in a
//! SaslAuthenticate, answered one at a time (PROTOCOL.md has the bodies). What a message
//! means is the door's ([`Login`]); this module frames them, on both sides:
//!
//! - a broker reads at most [`LOGIN_FRAME_BYTES_MAX`] per request and [`LOGIN_REQUESTS_MAX`]
//!   requests, within the connection's pre-authentication deadline; any other request, a
//!   failed login (each answered first, as an authentication failure), a malformed frame or
//!   the deadline closes the connection;
//! - a client ([`log_in`]) runs its side right after connecting (and its TLS handshake),
//!   before its connection carries anything else.

use std::net::SocketAddr;

use super::frame::{Kind, Op, OutFrame, read_frame};
use super::{CallError, ReadHalf, WriteHalf};
use crate::protocol::WireError;
use crate::security::{SaslMechanism, ScramClient, plain_message};

/// Largest request read before a connection has logged in.
pub(crate) const LOGIN_FRAME_BYTES_MAX: u32 = 64 << 10;

/// Most requests one login reads (the handshake and a mechanism's messages: three).
pub(crate) const LOGIN_REQUESTS_MAX: usize = 8;

/// A connection's login as its door runs it: one step per request.
pub(crate) trait Login: Send {
    /// Serves one request of the exchange (`op` is SaslHandshake or SaslAuthenticate): its
    /// answer's body, and the outcome once the exchange ends: the user's name, or why it
    /// failed (the answer is written, then the connection closed).
    fn step(&mut self, op: Op, body: &[u8]) -> (Vec<u8>, Option<Result<String, String>>);

    /// How long to wait before answering the step that just failed the login (failed logins
    /// are slowed); zero for a refusal that is not a failed login.
    fn refusal_delay(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// Writes one frame and flushes it.
async fn send(wr: &mut WriteHalf, frame: OutFrame) -> std::io::Result<()> {
    frame.write_to(wr).await
}

/// Runs `login` on a new connection from `from` until it ends or `deadline` passes: the user
/// it logged in as, or `None`, the connection to be closed (a failed login logged at info,
/// anything else at debug).
pub(crate) async fn serve_login(
    (rd, wr): (&mut ReadHalf, &mut WriteHalf),
    mut login: Box<dyn Login>,
    from: SocketAddr,
    deadline: tokio::time::Instant,
) -> Option<String> {
    let exchange = async {
        for _ in 0..LOGIN_REQUESTS_MAX {
            let (head, body) = match read_frame(rd, LOGIN_FRAME_BYTES_MAX).await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Err((false, "closed before logging in".to_string())),
                Err(e) => return Err((false, e.to_string())),
            };
            if head.kind != Kind::Request {
                return Err((false, "a response before logging in".to_string()));
            }
            if !matches!(head.op, Op::SaslHandshake | Op::SaslAuthenticate) {
                // A client that does not log in is told why it is not served.
                let told: Result<(), WireError> = Err(WireError::AuthenticationFailed(
                    "log in first: this broker serves native clients once they log in (SASL)"
                        .into(),
                ));
                let answer = postcard::to_stdvec(&told).unwrap_or_default();
                let frame = OutFrame::new(Kind::Response, head.op, head.request_id, answer);
                let _ = send(wr, frame).await;
                return Err((false, format!("{} before logging in", head.op.name())));
            }
            let (answer, outcome) = login.step(head.op, &body);
            if let Some(Err(_)) = &outcome {
                tokio::time::sleep(login.refusal_delay()).await;
            }
            let frame = OutFrame::new(Kind::Response, head.op, head.request_id, answer);
            send(wr, frame).await.map_err(|e| (false, e.to_string()))?;
            if let Some(outcome) = outcome {
                return outcome.map_err(|why| (true, why));
            }
        }
        Err((false, "too many requests before logging in".to_string()))
    };
    let outcome = tokio::time::timeout_at(deadline, exchange)
        .await
        .unwrap_or_else(|_| Err((false, "not logged in in time".to_string())));
    match outcome {
        Ok(user) => {
            tracing::debug!(%from, principal = %format!("User:{user}"), "native client authenticated");
            Some(user)
        }
        Err((true, why)) => {
            tracing::info!(%from, reason = %why, "native client failed to authenticate");
            None
        }
        Err((false, why)) => {
            tracing::debug!(%from, reason = %why, "connection closed before logging in");
            None
        }
    }
}

/// A login that did not get through the connection: the broker is unreachable.
fn broken(why: impl std::fmt::Display) -> CallError {
    CallError::Unreachable(format!("logging in: {why}"))
}

/// Sends one request of a client's login and reads its answer: the answer's `Ok`; the
/// broker's refusal ([`CallError::LoginRefused`]); or a connection that broke, or answered
/// what is no answer of a login ([`CallError::Unreachable`]).
async fn call<T: serde::Serialize, A: serde::de::DeserializeOwned>(
    (rd, wr): (&mut ReadHalf, &mut WriteHalf),
    op: Op,
    id: u64,
    request: &T,
) -> Result<A, CallError> {
    let body = super::body::encode(request).map_err(broken)?;
    send(wr, OutFrame::new(Kind::Request, op, id, body))
        .await
        .map_err(broken)?;
    let (head, body) = match read_frame(rd, LOGIN_FRAME_BYTES_MAX).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err(broken("the broker closed the connection")),
        Err(e) => return Err(broken(e)),
    };
    if head.kind != Kind::Response || head.op != op || head.request_id != id {
        return Err(broken("an answer out of turn"));
    }
    let answer: Result<A, WireError> =
        postcard::from_bytes(&body).map_err(|e| broken(format!("a malformed answer: {e}")))?;
    answer.map_err(|e| match e {
        WireError::AuthenticationFailed(reason) => CallError::LoginRefused(reason),
        other => broken(format!("{other:?}")),
    })
}

/// Runs a client's side of a login on a new connection: `Ok` once the broker accepted it and
/// (SCRAM) proved it knows the user's keys. A refusal, or a broker that does not prove it
/// (SCRAM), is [`CallError::LoginRefused`]; a connection that broke on the way,
/// [`CallError::Unreachable`].
pub(crate) async fn log_in(
    (rd, wr): (&mut ReadHalf, &mut WriteHalf),
    login: &crate::SaslLogin,
) -> Result<(), CallError> {
    let crate::SaslLogin {
        mechanism,
        user,
        password,
    } = login;
    let _offered: Vec<String> = call(
        (rd, wr),
        Op::SaslHandshake,
        1,
        &mechanism.name().to_string(),
    )
    .await?;
    match mechanism {
        SaslMechanism::Plain => {
            let _: Vec<u8> = call(
                (rd, wr),
                Op::SaslAuthenticate,
                2,
                &plain_message(user, password),
            )
            .await?;
            Ok(())
        }
        SaslMechanism::Scram(m) => {
            let (mut client, first) = ScramClient::new(*m, user, password);
            let server_first: Vec<u8> = call((rd, wr), Op::SaslAuthenticate, 2, &first).await?;
            let last = client
                .respond(&server_first)
                .map_err(|e| CallError::LoginRefused(format!("the broker's first message: {e}")))?;
            let server_final: Vec<u8> = call((rd, wr), Op::SaslAuthenticate, 3, &last).await?;
            client
                .verify(&server_final)
                .map_err(|e| CallError::LoginRefused(format!("the broker's proof: {e}")))
        }
    }
}
