//! The serving side of the native door: reading request frames of connections admitted by
//! `accept.rs` within the memory budgets and deadlines, serving each on a task of its own, and
//! writing answers within the answer budget.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::accept::{Accepted, Admission, ReadHalf, spawn_accept};
use super::body::Body;
use super::frame::{self, FrameError, Kind, Op, OutFrame};
use super::turns::{Turn, Turns};
use super::{BoxFuture, spawn_writer};

/// Serves requests: turns an op and a request body into a response body.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Serves one request. `turn` is the request's place among the requests of its
    /// connection: a handler that must keep their order waits for it, and drops it once the
    /// order is fixed (requests are served on tasks of their own, which may start in any
    /// order). A handler about to build a large answer reserves its bytes in `answers` first.
    /// `caller` is who sent it: the connection's address and certificate.
    fn handle(
        self: Arc<Self>,
        op: Op,
        body: Vec<u8>,
        turn: Turn,
        answers: AnswerBudget,
        caller: Arc<Caller>,
    ) -> BoxFuture<Answer>;

    /// Whether `certificate` is a peer broker's: one whose connection may keep the room kept
    /// for peers and read Raft frames from the peers' memory budget.
    fn is_peer_certificate(&self, certificate: &crate::tls::ClientCertificate) -> bool {
        let _ = certificate;
        false
    }

    /// The login a new connection from `from` must go through before its first request, if
    /// the door asks for one of a connection that presented `certificate` (see `login.rs`).
    fn login(
        &self,
        from: SocketAddr,
        certificate: Option<&crate::tls::ClientCertificate>,
    ) -> Option<Box<dyn super::Login>> {
        let _ = (from, certificate);
        None
    }
}

/// Who is at the other end of a server connection.
#[derive(Debug)]
pub(crate) struct Caller {
    /// The connection's remote address.
    pub(crate) from: SocketAddr,
    /// The certificate it presented in its TLS handshake, verified against the brokers' CA
    /// (see [`Accepted::certificate`]).
    pub(crate) certificate: Option<crate::tls::ClientCertificate>,
    /// The user it logged in as, where the door asked it to (see `login.rs`).
    pub(crate) user: Option<String>,
    /// Whether a refusal of its requests was logged already: a connection that keeps sending
    /// what is refused is logged once.
    pub(crate) refusal_logged: std::sync::atomic::AtomicBool,
    /// The known broker its certificate was found to name (`NO_BROKER` until one was):
    /// checked once, not on every request.
    pub(crate) confirmed_broker: std::sync::atomic::AtomicU64,
    /// The user its certificate stands for, once worked out (`Ok(None)` inside: none; `Err`:
    /// a certificate that may name none, why).
    pub(crate) certificate_user: std::sync::OnceLock<Result<Option<String>, String>>,
    /// The protocol version its Hello chose; 1 until it says one (see `hello.rs`).
    pub(crate) version: std::sync::atomic::AtomicU16,
}

impl Caller {
    /// Whether this is the first refusal of the connection's requests (to be logged).
    pub(crate) fn first_refusal(&self) -> bool {
        !self
            .refusal_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    }
}

/// What answers may hold in memory before they are written: a handler reserves the bytes of a
/// large answer (a fetch's) before it builds it, against its connection's share and the
/// server's whole budget, and the reservation is released once the answer is written. A
/// client that never reads its answers holds at most its connection's share, and only until
/// the write timeout closes its connection.
#[derive(Clone)]
pub(crate) struct AnswerBudget {
    connection: Arc<tokio::sync::Semaphore>,
    all: Arc<tokio::sync::Semaphore>,
    connection_max: usize,
}

/// Bytes reserved for one answer until it is written.
pub(crate) struct Reservation {
    _connection: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

impl AnswerBudget {
    fn new(connection_max: usize, all: Arc<tokio::sync::Semaphore>) -> AnswerBudget {
        AnswerBudget {
            connection: Arc::new(tokio::sync::Semaphore::new(connection_max)),
            all,
            connection_max,
        }
    }

    /// Waits until `bytes` (at most the connection's whole share) are free in the
    /// connection's share and in the server's budget, and reserves them; `None` if the
    /// server is closing.
    pub(crate) async fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let n = u32::try_from(bytes.min(self.connection_max)).unwrap_or(u32::MAX);
        let connection = Arc::clone(&self.connection)
            .acquire_many_owned(n)
            .await
            .ok()?;
        let all = Arc::clone(&self.all).acquire_many_owned(n).await.ok()?;
        Some(Reservation {
            _connection: connection,
            _all: all,
        })
    }
}

/// A handler's answer: its body, and the bytes reserved for it, if any.
pub(crate) struct Answer {
    pub(crate) body: Body,
    pub(crate) held: Option<Reservation>,
}

impl From<Vec<u8>> for Answer {
    fn from(body: Vec<u8>) -> Answer {
        Answer {
            body: body.into(),
            held: None,
        }
    }
}

impl From<Body> for Answer {
    fn from(body: Body) -> Answer {
        Answer { body, held: None }
    }
}

/// What a server holds its connections to (Kafka's `max.connections`,
/// `connections.max.idle.ms` and `queued.max.request.bytes`, and a cap on requests in flight
/// per connection). Going over a budget closes the offending connection, never another.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerLimits {
    /// Largest frame accepted.
    pub(crate) frame_bytes_max: u32,
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub(crate) connections_max: usize,
    /// Of those, how many only peers may take: a connection accepted into this room is
    /// closed unless its first request, within `first_frame_timeout`, is a peer's.
    pub(crate) peer_connections_reserved: usize,
    /// See `peer_connections_reserved`.
    pub(crate) first_frame_timeout: Duration,
    /// A connection that sends nothing for this long is closed.
    pub(crate) idle_timeout: Duration,
    /// A frame whose first bytes arrived must be whole within this.
    pub(crate) frame_timeout: Duration,
    /// Client requests one connection may have unanswered (answers not yet written to it):
    /// past it the server reads no further from that connection until answers drain. Peers'
    /// Raft traffic is not counted.
    pub(crate) in_flight_max: usize,
    /// Bytes of client frame bodies being read, over all connections together.
    pub(crate) buffered_bytes_max: usize,
    /// Bytes of Raft frame bodies being read, over all connections together: a pool of their
    /// own, which clients cannot drain.
    pub(crate) peer_buffered_bytes_max: usize,
    /// Bytes reserved for answers not yet written, over all connections together.
    pub(crate) answer_bytes_max: usize,
    /// ... and on one connection.
    pub(crate) connection_answer_bytes_max: usize,
    /// The newest protocol version the server speaks (see `version.rs`): a Hello is answered
    /// with at most this, and at 1 a Hello closes the connection as an unknown operation.
    pub(crate) protocol_version: u16,
}

/// The broker-wide budgets that both of its doors (this server and the Kafka listener) take
/// client memory from: bytes of request bodies being read, and bytes of answers not yet
/// written. One set per broker, so that its two listeners together hold no more than the
/// configured limits.
#[derive(Clone, Debug)]
pub(crate) struct ClientBudgets {
    /// Of `ServerLimits::buffered_bytes_max`.
    pub(crate) requests: Arc<tokio::sync::Semaphore>,
    /// Of `ServerLimits::answer_bytes_max`.
    pub(crate) answers: Arc<tokio::sync::Semaphore>,
}

impl ClientBudgets {
    /// Budgets of the sizes `limits` gives.
    pub(crate) fn new(limits: &ServerLimits) -> ClientBudgets {
        ClientBudgets {
            requests: Arc::new(tokio::sync::Semaphore::new(limits.buffered_bytes_max)),
            answers: Arc::new(tokio::sync::Semaphore::new(limits.answer_bytes_max)),
        }
    }
}

/// The server's shares of frame-body memory: one for clients' frames, one for Raft frames.
struct Budgets {
    clients: Arc<tokio::sync::Semaphore>,
    peers: Arc<tokio::sync::Semaphore>,
    answers: Arc<tokio::sync::Semaphore>,
}

/// Serves peers and native clients on `listener` until `shutdown` turns true, within
/// `limits` and the broker's `admission`, each connection through a TLS handshake with `tls`
/// if given. Clients' memory comes from `clients`, which the broker's other door shares.
pub(crate) fn spawn_server(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    limits: ServerLimits,
    clients: ClientBudgets,
    (admission, tls): (Arc<Admission>, Option<crate::tls::TlsServer>),
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let budgets = Arc::new(Budgets {
        clients: clients.requests,
        peers: Arc::new(tokio::sync::Semaphore::new(limits.peer_buffered_bytes_max)),
        answers: clients.answers,
    });
    let closing = shutdown.clone();
    // Over TLS, peer brokers present their certificates: a connection without one is a client.
    let peers_present_certificates = tls.is_some();
    spawn_accept(listener, admission, true, tls, closing, move |accepted| {
        let may_be_peer = !peers_present_certificates
            || accepted
                .certificate
                .as_ref()
                .is_some_and(|c| handler.is_peer_certificate(c));
        let conn = serve_conn(
            accepted,
            may_be_peer,
            Arc::clone(&handler),
            limits,
            Arc::clone(&budgets),
            shutdown.clone(),
        );
        Box::pin(conn)
    })
}

/// Why a server stopped reading a connection.
enum Closed {
    /// The peer closed it, or a read failed.
    Gone,
    /// Nothing arrived within the idle timeout.
    Idle,
    /// A frame was begun and not finished in time.
    Slow,
    /// A frame broke the format.
    Malformed(FrameError),
    /// On probation in the room kept for peers, silent, it gave way to a newer connection.
    Evicted,
    /// On probation in the room kept for peers, its first request was not a peer's.
    NotPeer,
    /// Its Hello named no protocol version the server speaks.
    Unversioned,
    /// It said Hello to a server pinned to protocol version 1, which closes the connection as
    /// a build before versions does: its caller connects again without one.
    LaterVersion,
}

/// Reads the next request frame of a server connection within `limits`: waits up to `idle`
/// for its first byte, then up to the frame timeout for the rest, holding a share of the
/// server's buffered-bytes budget (the peers' for Raft frames) for its body from before it is
/// read until the request is served.
///
/// A connection on probation in the room kept for peers (`probation`: what evicts it) can be
/// evicted only while it has sent nothing; its first header decides: a peer's op from a
/// connection that may be a peer's (`may_be_peer`) ends the probation before the body is read,
/// any other closes the connection.
async fn read_request(
    rd: &mut ReadHalf,
    (limits, idle): (&ServerLimits, Duration),
    budgets: &Budgets,
    probation: &mut Option<oneshot::Receiver<()>>,
    may_be_peer: bool,
) -> Result<(frame::FrameHead, Vec<u8>, tokio::sync::OwnedSemaphorePermit), Closed> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; frame::FRAME_HEADER_LEN];
    let read = tokio::time::timeout(idle, rd.read(&mut head));
    let first = match probation.as_mut() {
        Some(evict) => tokio::select! {
            _ = evict => return Err(Closed::Evicted),
            first = read => first,
        },
        None => read.await,
    };
    let first = match first {
        Err(_) => return Err(Closed::Idle),
        Ok(Err(_) | Ok(0)) => return Err(Closed::Gone),
        Ok(Ok(n)) => n,
    };
    let rest = async {
        if let Some(rest) = head.get_mut(first..) {
            rd.read_exact(rest).await.map_err(|_| Closed::Gone)?;
        }
        let head = frame::decode_head(&head, limits.frame_bytes_max).map_err(Closed::Malformed)?;
        // A Hello leaves the probation to the request after it.
        if head.op != Op::Hello
            && probation.take().is_some()
            && !(may_be_peer && is_peer_first(head.op))
        {
            return Err(Closed::NotPeer);
        }
        let len = head.body_len as usize;
        let (budget, budget_max) = if is_raft(head.op) && may_be_peer {
            (&budgets.peers, limits.peer_buffered_bytes_max)
        } else {
            (&budgets.clients, limits.buffered_bytes_max)
        };
        if len > budget_max {
            return Err(Closed::Malformed(FrameError::TooLarge {
                len: u64::from(head.body_len),
                max: budget_max as u64,
            }));
        }
        let permits = u32::try_from(len).unwrap_or(u32::MAX);
        let share = Arc::clone(budget)
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Closed::Gone)?;
        let body = frame::read_body(rd, len).await.map_err(|_| Closed::Gone)?;
        Ok((head, body, share))
    };
    match tokio::time::timeout(limits.frame_timeout, rest).await {
        Err(_) => Err(Closed::Slow),
        Ok(result) => result,
    }
}

/// Whether `op` is a peer broker's Raft traffic (never held back by the in-flight cap, read
/// within the peers' own memory budget).
fn is_raft(op: Op) -> bool {
    matches!(
        op,
        Op::Vote
            | Op::PreVote
            | Op::AppendEntries
            | Op::Snapshot
            | Op::TransferLeader
            | Op::BrokerHeartbeat
            | Op::Quiesce
    )
}

/// Whether `op` opens a peer broker's connection: its Raft traffic, or a metadata proposal (a
/// broker registering itself sends one first).
fn is_peer_first(op: Op) -> bool {
    is_raft(op) || op == Op::Propose
}

/// What a request's protocol version means for its connection.
enum Greeting {
    /// Not a Hello, and of a version the connection speaks: served as usual.
    NotHello,
    /// A Hello answered: the connection speaks the version chosen from now on.
    Answered(OutFrame),
    /// Closed: an operation of a later version than the connection's (as an unknown operation
    /// always closed one), or a Hello whose versions do not meet the server's (answered first).
    Close(Refusal),
}

struct Refusal {
    answer: Option<OutFrame>,
    closed: Closed,
}

/// Checks a request's operation against its connection's protocol version, and answers a Hello
/// (see `hello.rs`) from a server that speaks up to `max`.
fn greet(head: &frame::FrameHead, body: &[u8], caller: &Caller, max: u16) -> Greeting {
    use std::sync::atomic::Ordering;
    let unknown = || {
        Greeting::Close(Refusal {
            answer: None,
            closed: Closed::Malformed(FrameError::UnknownOp(head.op as u8)),
        })
    };
    if head.op != Op::Hello {
        return if head.op.since() > caller.version.load(Ordering::Acquire) {
            unknown()
        } else {
            Greeting::NotHello
        };
    }
    if head.op.since() > max {
        // What a build before versions does with a Hello; the caller speaks version 1 next.
        return Greeting::Close(Refusal {
            answer: None,
            closed: Closed::LaterVersion,
        });
    }
    let (answer, chosen) = super::hello::answer_hello(body, max);
    let frame = OutFrame::new(Kind::Response, Op::Hello, head.request_id, answer);
    match chosen {
        Some(version) => {
            caller.version.store(version, Ordering::Release);
            Greeting::Answered(frame)
        }
        None => Greeting::Close(Refusal {
            answer: Some(frame),
            closed: Closed::Unversioned,
        }),
    }
}

/// Says why a connection was closed: a warning for what a well-behaved client never does (a
/// frame left unfinished, a malformed one), otherwise at debug level.
fn log_closed(from: Option<SocketAddr>, why: Closed) {
    match why {
        Closed::Gone => {}
        Closed::Idle => tracing::debug!(?from, "idle connection closed"),
        Closed::Slow => {
            tracing::warn!(?from, "connection closed: a frame was not finished in time");
        }
        Closed::Malformed(e) => {
            tracing::warn!(?from, error = %e, "malformed frame; closing the connection");
        }
        Closed::Evicted => tracing::debug!(
            ?from,
            "connection closed: a newer one took its place in the room kept for peers"
        ),
        Closed::NotPeer => tracing::debug!(
            ?from,
            "connection closed: the room left is kept for peer brokers"
        ),
        Closed::LaterVersion => tracing::debug!(
            ?from,
            "connection closed: a Hello to a broker pinned to protocol version 1"
        ),
        Closed::Unversioned => tracing::warn!(
            ?from,
            "connection closed: it speaks no protocol version this broker speaks"
        ),
    }
}

/// Reads requests from one connection, serves each on its own task, writes responses back in
/// whatever order they finish. A malformed frame, a frame not finished in time, or a
/// connection idle for too long closes the connection.
///
/// A connection accepted into the room kept for peers (`probation`: what evicts it) is closed
/// unless its first request comes within `limits.first_frame_timeout`, before it is evicted
/// for a newer one, and is a peer's, from a connection that may be a peer's (`may_be_peer`:
/// over TLS, one that presented a certificate).
async fn serve_conn(
    accepted: Accepted,
    may_be_peer: bool,
    handler: Arc<dyn Handler>,
    limits: ServerLimits,
    budgets: Arc<Budgets>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Accepted {
        mut rd,
        mut wr,
        from,
        mut admitted,
        certificate,
        authenticate_by,
    } = accepted;
    let probation = &mut admitted.probation;
    let mut user = None;
    if let Some(login) = handler.login(from, certificate.as_ref()) {
        // A client that logs in is no peer: it leaves the peers' room first.
        if probation.take().is_some() {
            log_closed(Some(from), Closed::NotPeer);
            return;
        }
        let exchange = super::login::serve_login((&mut rd, &mut wr), login, from, authenticate_by);
        let logged_in = tokio::select! {
            _ = shutdown.changed() => None,
            user = exchange => user,
        };
        match logged_in {
            Some(name) => user = Some(name),
            None => return,
        }
    }
    let caller = Arc::new(Caller {
        from,
        certificate,
        user,
        refusal_logged: std::sync::atomic::AtomicBool::new(false),
        confirmed_broker: std::sync::atomic::AtomicU64::new(crate::node::NO_BROKER),
        certificate_user: std::sync::OnceLock::new(),
        version: std::sync::atomic::AtomicU16::new(crate::version::PROTOCOL_VERSION_MIN),
    });
    let from = Some(from);
    // Answers go out in the order they finish; each holds its request's in-flight slot until
    // it is written.
    type Held = (
        Option<tokio::sync::OwnedSemaphorePermit>,
        Option<Reservation>,
    );
    let (tx, mut writer) = spawn_writer::<Held, _>(wr, Some(limits.frame_timeout));
    let answers = AnswerBudget::new(
        limits.connection_answer_bytes_max,
        Arc::clone(&budgets.answers),
    );
    let in_flight = Arc::new(tokio::sync::Semaphore::new(limits.in_flight_max));
    let turns = Turns::new();
    loop {
        let idle = if probation.is_some() {
            limits.first_frame_timeout.min(limits.idle_timeout)
        } else {
            limits.idle_timeout
        };
        let next = tokio::select! {
            _ = shutdown.changed() => break,
            _ = &mut writer => {
                tracing::debug!(?from, "connection closed: its answers are not read");
                break;
            }
            f = read_request(&mut rd, (&limits, idle), &budgets, probation, may_be_peer) => f,
        };
        let (head, body, share) = match next {
            Ok(frame) => frame,
            Err(why) => {
                log_closed(from, why);
                break;
            }
        };
        if head.kind != Kind::Request {
            tracing::warn!(
                ?from,
                "a response arrived on a server connection; closing it"
            );
            break;
        }
        match greet(&head, &body, &caller, limits.protocol_version) {
            Greeting::NotHello => {}
            Greeting::Answered(frame) => {
                drop(share);
                if tx.send((frame, (None, None))).await.is_err() {
                    break;
                }
                continue;
            }
            Greeting::Close(why) => {
                if let Some(frame) = why.answer {
                    let _ = tx.send((frame, (None, None))).await;
                }
                log_closed(from, why.closed);
                break;
            }
        }
        // A client with `in_flight_max` answers unwritten is not read from until one drains
        // (Raft traffic from a connection that may be a peer's is not held back).
        let slot = if is_raft(head.op) && may_be_peer {
            None
        } else {
            let acquired = tokio::select! {
                _ = shutdown.changed() => break,
                p = Arc::clone(&in_flight).acquire_owned() => p,
            };
            match acquired {
                Ok(slot) => Some(slot),
                Err(_) => break,
            }
        };
        let (handler, tx, answers) = (Arc::clone(&handler), tx.clone(), answers.clone());
        let caller = Arc::clone(&caller);
        let turn = turns.issue();
        tokio::spawn(async move {
            let answer = handler.handle(head.op, body, turn, answers, caller).await;
            // The request's body counted against the budget until it was served (a produce's
            // records live until they are replicated).
            drop(share);
            let frame = OutFrame::new(Kind::Response, head.op, head.request_id, answer.body);
            let _ = tx.send((frame, (slot, answer.held))).await;
        });
    }
    drop(tx);
    writer.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_wait_for_their_connections_share_and_the_servers_budget() {
        let all = Arc::new(tokio::sync::Semaphore::new(3 << 20));
        let one = AnswerBudget::new(2 << 20, Arc::clone(&all));
        let other = AnswerBudget::new(2 << 20, Arc::clone(&all));
        let soon = Duration::from_millis(50);
        let a = one.reserve(1 << 20).await.unwrap();
        let b = one.reserve(1 << 20).await.unwrap();
        // The connection's share is spent: its next answer waits, another connection's not.
        assert!(tokio::time::timeout(soon, one.reserve(1)).await.is_err());
        let c = other.reserve(1 << 20).await.unwrap();
        // The server's budget is spent too.
        assert!(tokio::time::timeout(soon, other.reserve(1)).await.is_err());
        // A written answer gives its bytes back.
        drop(a);
        let d = tokio::time::timeout(soon, one.reserve(1 << 20))
            .await
            .unwrap();
        // An answer larger than the share takes the whole share, not forever.
        drop((b, c, d));
        assert!(
            tokio::time::timeout(soon, one.reserve(64 << 20))
                .await
                .unwrap()
                .is_some()
        );
    }
}
