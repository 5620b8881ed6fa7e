//! A Kafka client's connection. Requests are read as they come (Kafka's clients pipeline up to
//! `max.in.flight.requests.per.connection` of them), each is served on a task of its own, and
//! the answers are written in the order the requests came, as Kafka's protocol requires. The
//! broker's limits hold as on its native door, from the same budgets: the connection cap
//! (`transport::Admission`), the idle and frame deadlines, the bytes of requests being read and
//! of answers not yet written, and `in_flight_max` unwritten answers per connection (past it,
//! nothing more is read from the connection until answers drain).
//!
//! Framing (Kafka's, big-endian): a request or an answer is an `i32` length, then that many
//! bytes: the header and the body. A length below 8 (no room for a header) or above the
//! broker's `frame_bytes_max` closes the connection before anything is read or reserved.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::frame::Frame;
use super::sasl::{Login, Reauthentication};
use super::{Held, KafkaConfig, answer, take};
use crate::node::service::BrokerService;
use crate::security::Session;
use crate::transport::{Accepted, Turn, Turns, WriteHalf};

/// A request's answer as its task leaves it: the framed bytes and the budget they hold, `None`
/// for a request answered with nothing (a produce with acks 0), or an error that closes the
/// connection.
type Answered = std::io::Result<Option<(Frame, Held)>>;

/// Serves one connection until the client closes it, a request breaks the protocol, a
/// deadline passes, or the broker shuts down.
pub(super) async fn serve(
    mut accepted: Accepted,
    service: BrokerService,
    config: Arc<KafkaConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some((session, mut login)) = open_session(&mut accepted, &service, &config).await else {
        return;
    };
    let Accepted {
        mut rd,
        wr,
        from,
        admitted: _admitted,
        ..
    } = accepted;
    let service = service.with_session(session);
    let (queue, answers) = mpsc::channel(config.limits.in_flight_max.max(1));
    let mut writer = tokio::spawn(write_in_order(wr, answers, config.limits.frame_timeout));
    let turns = Turns::new();
    let mut reauthentication: Option<Reauthentication> = None;
    // Whether the last answer queued must be written before the connection closes.
    let mut flush = false;
    // Bounded by the connection: each turn reads one request or ends it.
    let why = loop {
        let request = tokio::select! {
            r = read_request(&mut rd, &config, config.limits.frame_bytes_max) => r,
            _ = shutdown.changed() => break "the broker is shutting down".to_string(),
            _ = &mut writer => break "an answer was refused or not read in time".to_string(),
        };
        let (body, request_held) = match request {
            Ok(request) => request,
            Err(e) => break e.to_string(),
        };
        let session = (&mut login, &mut reauthentication);
        let body = match session_turn(body, session, &service, &config, from, &queue).await {
            SessionTurn::Serve(body) => body,
            SessionTurn::Answered => continue,
            SessionTurn::Close {
                why,
                flush: written,
            } => {
                flush = written;
                break why;
            }
        };
        let task = spawn_answer(body, request_held, &service, &config, from, turns.issue());
        // Waits while `in_flight_max` answers are unwritten.
        let sent = tokio::select! {
            sent = queue.send(task) => sent.is_ok(),
            _ = shutdown.changed() => false,
        };
        if !sent {
            break "closed".to_string();
        }
    };
    tracing::debug!(%from, why, "kafka connection closed");
    drop(queue);
    if flush {
        // The refusal is written before the connection closes.
        let _ = tokio::time::timeout(config.limits.frame_timeout, &mut writer).await;
    }
    writer.abort();
}

/// Who the connection serves: the user it logged in as on a SASL listener (with its login,
/// whose session may end), the user its client certificate names, or an anonymous client.
/// `None` when the connection is to be closed (the reason is logged).
async fn open_session(
    accepted: &mut Accepted,
    service: &BrokerService,
    config: &KafkaConfig,
) -> Option<(Session, Option<Login>)> {
    let from = accepted.from;
    let certificate = accepted.certificate.take();
    match &config.sasl {
        // A SASL listener serves a connection only once it has authenticated.
        Some(settings) => {
            let halves = (&mut accepted.rd, &mut accepted.wr);
            let deadline = accepted.authenticate_by;
            let user = super::sasl::authenticate(halves, service, config, settings, from, deadline);
            let logged_in = user.await?;
            let session = Session::user(&logged_in.user, Some(from.ip()));
            Some((session, Some(logged_in)))
        }
        // A client certificate (where the listener asks for one) is the client's identity;
        // one that names none is refused, as Kafka refuses it.
        None => match certificate.map(|c| c.user(config.principal_rules.as_ref())) {
            Some(Ok(Some(user))) => Some((Session::user(&user, Some(from.ip())), None)),
            Some(Err(why)) => {
                tracing::info!(%from, reason = %why, "kafka client refused");
                None
            }
            _ => Some((Session::anonymous(Some(from.ip())), None)),
        },
    }
}

/// What a request does to a session that ends.
enum SessionTurn {
    /// The request is served as any other.
    Serve(Bytes),
    /// The request was a step of a re-authentication, its answer queued.
    Answered,
    /// The connection closes, for `why`; if `flush`, once the last answer queued is written.
    Close { why: String, flush: bool },
}

/// Where sessions end: serves `body` as a step of the connection's re-authentication (its
/// answer queued in `queue`) if it is one, and otherwise lets it through unless a
/// re-authentication is under way or the session has expired.
async fn session_turn(
    body: Bytes,
    (login, reauthentication): (&mut Option<Login>, &mut Option<Reauthentication>),
    service: &BrokerService,
    config: &KafkaConfig,
    from: SocketAddr,
    queue: &mpsc::Sender<JoinHandle<Answered>>,
) -> SessionTurn {
    let close = |why: &str, flush| SessionTurn::Close {
        why: why.to_string(),
        flush,
    };
    // A session that ends (KIP-368): re-authenticated in the connection's order, or over.
    let (Some(session), Some(settings)) = (login.as_mut(), config.sasl.as_ref()) else {
        return SessionTurn::Serve(body);
    };
    if settings.session_lifetime.is_none() {
        return SessionTurn::Serve(body);
    }
    let api = ApiKey::try_from((&body[..]).get_i16()).ok();
    let sasl = matches!(api, Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate));
    if sasl && (reauthentication.is_some() || api == Some(ApiKey::SaslHandshake)) {
        let exchange = reauthentication.get_or_insert_with(Reauthentication::new);
        let (answer, outcome) = exchange.step(body, (session, Some(from.ip())), service, settings);
        let Some(answer) = answer else {
            return close("a re-authentication request not answerable", true);
        };
        if let Some(Err(_)) = &outcome {
            tokio::time::sleep(exchange.delay).await;
        }
        let ready = tokio::spawn(async move { Ok(Some((answer.into(), None))) });
        if queue.send(ready).await.is_err() {
            return close("closed", false);
        }
        return match outcome {
            None => SessionTurn::Answered,
            Some(Ok(renewed)) => {
                *session = renewed;
                *reauthentication = None;
                SessionTurn::Answered
            }
            Some(Err(why)) => {
                tracing::info!(%from, reason = %why, "kafka client failed to re-authenticate");
                SessionTurn::Close { why, flush: true }
            }
        };
    }
    if reauthentication.is_some() {
        return close("a request in the middle of a re-authentication", true);
    }
    if session
        .expires
        .is_some_and(|end| tokio::time::Instant::now() >= end)
    {
        return close("its session expired without re-authentication", false);
    }
    SessionTurn::Serve(body)
}

/// Serves `body` on a task of its own, as the `turn` it was issued, and records how long it
/// took.
fn spawn_answer(
    body: Bytes,
    request_held: Held,
    service: &BrokerService,
    config: &Arc<KafkaConfig>,
    from: SocketAddr,
    turn: Turn,
) -> JoinHandle<Answered> {
    let (service, config) = (service.clone(), Arc::clone(config));
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let api = ApiKey::try_from((&body[..]).get_i16())
            .map_or_else(|_| "unknown".to_string(), |k| format!("{k:?}"));
        let answered = answer(body, &service, &config, Some(from), turn).await;
        crate::metrics::kafka_request(api, started.elapsed());
        // The body counted against the request budget until it was served (a produce's
        // records are read from it).
        drop(request_held);
        answered
    })
}

/// Reads the next request within the connection's deadlines: its length within `idle`, then
/// its bytes within the frame timeout, taken from the broker's request budget before they are
/// read. A request over `cap` bytes closes the connection unread.
pub(super) async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut R,
    config: &KafkaConfig,
    cap: u32,
) -> std::io::Result<(Bytes, Held)> {
    let mut len = [0u8; 4];
    tokio::time::timeout(config.limits.idle_timeout, rd.read_exact(&mut len))
        .await
        .map_err(|_| std::io::Error::other("idle"))??;
    let len = (&len[..]).get_i32();
    if len < 8 || len as u64 > u64::from(cap) {
        return Err(std::io::Error::other(format!("a request of {len} bytes")));
    }
    let read_body = async {
        let held = take(&config.budgets.requests, len as usize).await;
        let body = crate::transport::frame::read_body(rd, len as usize).await?;
        Ok((Bytes::from(body), held))
    };
    tokio::time::timeout(config.limits.frame_timeout, read_body)
        .await
        .map_err(|_| std::io::Error::other("request not sent in time"))?
}

/// Writes each answer once its task is done, in the order the tasks were queued, each within
/// `timeout`; ends at the first request that closes the connection or answer not written in
/// time, aborting the requests still queued.
async fn write_in_order(
    mut wr: WriteHalf,
    mut answers: mpsc::Receiver<JoinHandle<Answered>>,
    timeout: std::time::Duration,
) {
    while let Some(task) = answers.recv().await {
        let (mut frame, held) = match task.await {
            Ok(Ok(Some(answer))) => answer,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "kafka request refused; closing the connection");
                break;
            }
            Err(_) => break,
        };
        // Vectored: a fetch's batches go out from where they lie. A TLS connection sends what
        // it encrypted once flushed; a plaintext one has sent it already.
        let write = async {
            wr.write_all_buf(&mut frame).await?;
            wr.flush().await
        };
        let written = tokio::time::timeout(timeout, write).await;
        if !matches!(written, Ok(Ok(()))) {
            break;
        }
        drop(held);
    }
    answers.close();
    while let Ok(task) = answers.try_recv() {
        task.abort();
    }
}
