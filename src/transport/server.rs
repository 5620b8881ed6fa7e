//! The serving side of the native door: reading request frames of connections admitted by
//! `accept.rs` within the memory budgets and deadlines (`server/read.rs`), serving each on a
//! task of its own, and writing answers within the answer budget.

mod read;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::accept::{Accepted, Admission, spawn_accept};
use super::body::Body;
use super::frame::{self, FrameError, Kind, Op, OutFrame};
use super::turns::{Turn, Turns};
use super::{BoxFuture, spawn_writer};
use read::{Closed, is_raft, log_closed, read_request};

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
    /// A connection's caller, as it was accepted (and logged in), before its first request.
    fn new(
        from: SocketAddr,
        certificate: Option<crate::tls::ClientCertificate>,
        user: Option<String>,
    ) -> Caller {
        Caller {
            from,
            certificate,
            user,
            refusal_logged: std::sync::atomic::AtomicBool::new(false),
            confirmed_broker: std::sync::atomic::AtomicU64::new(crate::node::NO_BROKER),
            certificate_user: std::sync::OnceLock::new(),
            version: std::sync::atomic::AtomicU16::new(crate::version::PROTOCOL_VERSION_MIN),
        }
    }

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

/// Reads requests from one connection, serves each on its own task, writes responses back in
/// whatever order they finish. A malformed frame, a frame not finished in time, or a
/// connection idle for too long closes the connection.
///
/// A connection accepted into the room kept for peers (`probation`: what evicts it) is closed
/// unless its first request comes within `limits.first_frame_timeout`, before it is evicted
/// for a newer one, and is a peer's, from a connection that may be a peer's (`may_be_peer`:
/// over TLS, one that presented a certificate).
async fn serve_conn(
    mut accepted: Accepted,
    may_be_peer: bool,
    handler: Arc<dyn Handler>,
    limits: ServerLimits,
    budgets: Arc<Budgets>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(user) = log_in(&mut accepted, handler.as_ref(), &mut shutdown).await else {
        return;
    };
    let Accepted {
        mut rd,
        wr,
        from,
        mut admitted,
        certificate,
        ..
    } = accepted;
    let probation = &mut admitted.probation;
    let caller = Arc::new(Caller::new(from, certificate, user));
    let from = Some(from);
    // Answers go out in the order they finish; each holds its request's in-flight slot until
    // it is written.
    let (tx, mut writer) = spawn_writer::<Held, _>(wr, Some(limits.frame_timeout));
    let requests = Requests {
        handler,
        caller,
        tx,
        answers: AnswerBudget::new(
            limits.connection_answer_bytes_max,
            Arc::clone(&budgets.answers),
        ),
        in_flight: Arc::new(tokio::sync::Semaphore::new(limits.in_flight_max)),
        turns: Turns::new(),
        may_be_peer,
    };
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
        let frame = match next {
            Ok(frame) => frame,
            Err(why) => {
                log_closed(from, why);
                break;
            }
        };
        if !requests.serve(frame, &limits, &mut shutdown).await {
            break;
        }
    }
    drop(requests);
    writer.abort();
}

/// Puts a new connection through the login its door asks of it, if any: the user it logged in
/// as (`None` inside where no login is asked), or `None` if it is to be closed.
async fn log_in(
    accepted: &mut Accepted,
    handler: &dyn Handler,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Option<String>> {
    let from = accepted.from;
    let Some(login) = handler.login(from, accepted.certificate.as_ref()) else {
        return Some(None);
    };
    // A client that logs in is no peer: it leaves the peers' room first.
    if accepted.admitted.probation.take().is_some() {
        log_closed(Some(from), Closed::NotPeer);
        return None;
    }
    let halves = (&mut accepted.rd, &mut accepted.wr);
    let exchange = super::login::serve_login(halves, login, from, accepted.authenticate_by);
    let logged_in = tokio::select! {
        _ = shutdown.changed() => None,
        user = exchange => user,
    };
    logged_in.map(Some)
}

/// What an answer holds until it is written: its request's in-flight slot (none for Raft
/// traffic) and the answer bytes reserved for it.
type Held = (
    Option<tokio::sync::OwnedSemaphorePermit>,
    Option<Reservation>,
);

/// A request frame as read: its header, its body, and the body's share of the budget it was
/// read within.
type Request = (frame::FrameHead, Vec<u8>, tokio::sync::OwnedSemaphorePermit);

/// What one connection's requests are served with.
struct Requests {
    handler: Arc<dyn Handler>,
    caller: Arc<Caller>,
    /// The answers' way to the connection's writer.
    tx: mpsc::Sender<(OutFrame, Held)>,
    answers: AnswerBudget,
    /// The connection's in-flight slots (`ServerLimits::in_flight_max`).
    in_flight: Arc<tokio::sync::Semaphore>,
    turns: Arc<Turns>,
    may_be_peer: bool,
}

impl Requests {
    /// Serves one request frame: a Hello is answered here, any other request on a task of its
    /// own once it has an in-flight slot. `false` once the connection is to be closed.
    async fn serve(
        &self,
        (head, body, share): Request,
        limits: &ServerLimits,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let from = Some(self.caller.from);
        if head.kind != Kind::Request {
            tracing::warn!(
                ?from,
                "a response arrived on a server connection; closing it"
            );
            return false;
        }
        match greet(&head, &body, &self.caller, limits.protocol_version) {
            Greeting::NotHello => {}
            Greeting::Answered(frame) => {
                drop(share);
                return self.tx.send((frame, (None, None))).await.is_ok();
            }
            Greeting::Close(why) => {
                if let Some(frame) = why.answer {
                    let _ = self.tx.send((frame, (None, None))).await;
                }
                log_closed(from, why.closed);
                return false;
            }
        }
        // A client with `in_flight_max` answers unwritten is not read from until one drains
        // (Raft traffic from a connection that may be a peer's is not held back).
        let slot = if is_raft(head.op) && self.may_be_peer {
            None
        } else {
            let acquired = tokio::select! {
                _ = shutdown.changed() => return false,
                p = Arc::clone(&self.in_flight).acquire_owned() => p,
            };
            match acquired {
                Ok(slot) => Some(slot),
                Err(_) => return false,
            }
        };
        self.spawn((head, body, share), slot);
        true
    }

    /// Serves a request on a task of its own, as the connection's next turn, and sends its
    /// answer to the writer with what it holds.
    fn spawn(&self, (head, body, share): Request, slot: Option<tokio::sync::OwnedSemaphorePermit>) {
        let (handler, tx, answers) = (
            Arc::clone(&self.handler),
            self.tx.clone(),
            self.answers.clone(),
        );
        let caller = Arc::clone(&self.caller);
        let turn = self.turns.issue();
        tokio::spawn(async move {
            let answer = handler.handle(head.op, body, turn, answers, caller).await;
            // The request's body counted against the budget until it was served (a produce's
            // records live until they are replicated).
            drop(share);
            let frame = OutFrame::new(Kind::Response, head.op, head.request_id, answer.body);
            let _ = tx.send((frame, (slot, answer.held))).await;
        });
    }
}

#[cfg(test)]
mod tests;
