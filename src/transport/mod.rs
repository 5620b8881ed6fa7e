//! TCP transport between nodes: a listener that serves framed requests, and outbound
//! connections that multiplex requests by id.
//!
//! Each node keeps two connections to each peer: one for bulk traffic (log replication,
//! snapshots) and one for control traffic (votes, heartbeats), so that a heartbeat never waits
//! behind a large append. Every partition's traffic shares them. A connection that fails is
//! dropped; the next request reconnects. Nothing here knows about Raft.

pub(crate) mod body;
pub(crate) mod frame;
pub(crate) mod turns;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use frame::{FrameError, Kind, Op, OutFrame, read_frame};
pub(crate) use turns::{Turn, Turns};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Serves requests: turns an op and a request body into a response body.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Serves one request. `turn` is the request's place among the requests of its
    /// connection: a handler that must keep their order waits for it, and drops it once the
    /// order is fixed (requests are served on tasks of their own, which may start in any
    /// order). A handler about to build a large answer reserves its bytes in `answers` first.
    fn handle(
        self: Arc<Self>,
        op: Op,
        body: Vec<u8>,
        turn: Turn,
        answers: AnswerBudget,
    ) -> BoxFuture<Answer>;
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
    pub(crate) body: Vec<u8>,
    pub(crate) held: Option<Reservation>,
}

impl From<Vec<u8>> for Answer {
    fn from(body: Vec<u8>) -> Answer {
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
}

/// The server's shares of frame-body memory: one for clients' frames, one for Raft frames.
struct Budgets {
    clients: tokio::sync::Semaphore,
    peers: tokio::sync::Semaphore,
    answers: Arc<tokio::sync::Semaphore>,
}

/// The connections accepted into the room kept for peers that have not sent their first
/// request yet, oldest first, each with the means to close it. A connection leaves by
/// dropping its receiver (its first request came, or it closed).
#[derive(Default)]
struct Probation {
    waiting: VecDeque<oneshot::Sender<()>>,
}

impl Probation {
    /// Puts a new connection on probation; returns what closes it.
    fn admit(&mut self) -> oneshot::Receiver<()> {
        self.waiting.retain(|w| !w.is_closed());
        let (tx, rx) = oneshot::channel();
        self.waiting.push_back(tx);
        rx
    }

    /// Closes the oldest connection still on probation, to make room for a new one. A peer
    /// sends its first request at once, so it is out of probation long before it is the
    /// oldest; a client holding the peers' room without a word is the one that goes. Returns
    /// whether there was one.
    fn evict_oldest(&mut self) -> bool {
        while let Some(oldest) = self.waiting.pop_front() {
            if oldest.send(()).is_ok() {
                return true;
            }
        }
        false
    }
}

/// Accepts connections on `listener` until `shutdown` turns true, within `limits`.
pub(crate) fn spawn_server(
    listener: TcpListener,
    handler: Arc<dyn Handler>,
    limits: ServerLimits,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let open = Arc::new(AtomicU64::new(0));
        let budgets = Arc::new(Budgets {
            clients: tokio::sync::Semaphore::new(limits.buffered_bytes_max),
            peers: tokio::sync::Semaphore::new(limits.peer_buffered_bytes_max),
            answers: Arc::new(tokio::sync::Semaphore::new(limits.answer_bytes_max)),
        });
        let clients_max = limits
            .connections_max
            .saturating_sub(limits.peer_connections_reserved);
        let mut probation = Probation::default();
        let mut refused_logged: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, from)) => {
                        let now_open = open.load(Ordering::Acquire);
                        if now_open >= limits.connections_max as u64 && !probation.evict_oldest() {
                            // At most one line a second, however many are refused.
                            if refused_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                                tracing::warn!(%from, max = limits.connections_max, "connection refused: too many open");
                                refused_logged = Some(tokio::time::Instant::now());
                            }
                            drop(stream);
                            continue;
                        }
                        let _ = stream.set_nodelay(true);
                        open.fetch_add(1, Ordering::AcqRel);
                        // In the room kept for peers: on probation until its first request.
                        let peers_only = (now_open >= clients_max as u64).then(|| probation.admit());
                        let conn = serve_conn(
                            stream,
                            Arc::clone(&handler),
                            limits,
                            Arc::clone(&budgets),
                            peers_only,
                            shutdown.clone(),
                        );
                        let open = Arc::clone(&open);
                        tokio::spawn(async move {
                            conn.await;
                            open.fetch_sub(1, Ordering::AcqRel);
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }
    })
}

/// Writes the frames sent into the returned channel to `wr`, in order, until the channel closes,
/// a write fails, or a frame is not written within `timeout` (a peer that never reads); the
/// task's end tells which connection half died.
/// Each frame comes with a value that is dropped once the frame is written (a server's
/// in-flight slot and answer bytes for the request it answers).
fn spawn_writer<T: Send + 'static>(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    timeout: Option<Duration>,
) -> (mpsc::Sender<(OutFrame, T)>, tokio::task::JoinHandle<()>) {
    use bytes::Buf;
    let (tx, mut rx) = mpsc::channel::<(OutFrame, T)>(1024);
    let writer = tokio::spawn(async move {
        while let Some((frame, held)) = rx.recv().await {
            // Header and body in one vectored write where the socket takes it.
            let mut bytes = (&frame.head[..]).chain(&frame.body[..]);
            let written = wr.write_all_buf(&mut bytes);
            let written = match timeout {
                Some(limit) => tokio::time::timeout(limit, written)
                    .await
                    .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
                None => written.await,
            };
            if written.is_err() {
                break;
            }
            drop(held);
        }
    });
    (tx, writer)
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
}

/// Reads the next request frame of a server connection within `limits`: waits up to `idle`
/// for its first byte, then up to the frame timeout for the rest, holding a share of the
/// server's buffered-bytes budget (the peers' for Raft frames) for its body while the body is
/// read.
async fn read_request(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    limits: &ServerLimits,
    idle: Duration,
    budgets: &Budgets,
) -> Result<(frame::FrameHead, Vec<u8>), Closed> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; frame::FRAME_HEADER_LEN];
    let first = match tokio::time::timeout(idle, rd.read(&mut head)).await {
        Err(_) => return Err(Closed::Idle),
        Ok(Err(_) | Ok(0)) => return Err(Closed::Gone),
        Ok(Ok(n)) => n,
    };
    let rest = async {
        if let Some(rest) = head.get_mut(first..) {
            rd.read_exact(rest).await.map_err(|_| Closed::Gone)?;
        }
        let head = frame::decode_head(&head, limits.frame_bytes_max).map_err(Closed::Malformed)?;
        let len = head.body_len as usize;
        let (budget, budget_max) = if is_raft(head.op) {
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
        let _share = budget
            .acquire_many(permits)
            .await
            .map_err(|_| Closed::Gone)?;
        let mut body = vec![0u8; len];
        rd.read_exact(&mut body).await.map_err(|_| Closed::Gone)?;
        Ok((head, body))
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
        Op::Vote | Op::AppendEntries | Op::Snapshot | Op::TransferLeader
    )
}

/// Whether `op` opens a peer broker's connection: its Raft traffic, or a metadata proposal (a
/// broker registering itself sends one first).
fn is_peer_first(op: Op) -> bool {
    is_raft(op) || op == Op::Propose
}

/// Reads requests from one connection, serves each on its own task, writes responses back in
/// whatever order they finish. A malformed frame, a frame not finished in time, or a
/// connection idle for too long closes the connection.
///
/// A connection accepted into the room kept for peers (`probation`: what evicts it) is closed
/// unless its first request comes within `limits.first_frame_timeout`, before it is evicted
/// for a newer one, and is a peer's.
async fn serve_conn(
    stream: TcpStream,
    handler: Arc<dyn Handler>,
    limits: ServerLimits,
    budgets: Arc<Budgets>,
    mut probation: Option<oneshot::Receiver<()>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let from = stream.peer_addr().ok();
    let (mut rd, wr) = stream.into_split();
    // Answers go out in the order they finish; each holds its request's in-flight slot until
    // it is written.
    type Held = (
        Option<tokio::sync::OwnedSemaphorePermit>,
        Option<Reservation>,
    );
    let (tx, mut writer) = spawn_writer::<Held>(wr, Some(limits.frame_timeout));
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
        let evicted = async {
            match probation.as_mut() {
                Some(evict) => {
                    let _ = evict.await;
                }
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            _ = shutdown.changed() => break,
            _ = &mut writer => {
                tracing::debug!(?from, "connection closed: its answers are not read");
                break;
            }
            () = evicted => {
                tracing::debug!(?from, "connection closed: a newer one took its place in the room kept for peers");
                break;
            }
            f = read_request(&mut rd, &limits, idle, &budgets) => f,
        };
        let (head, body) = match next {
            Ok(frame) => frame,
            Err(Closed::Gone) => break,
            Err(Closed::Idle) => {
                tracing::debug!(?from, "idle connection closed");
                break;
            }
            Err(Closed::Slow) => {
                tracing::warn!(?from, "connection closed: a frame was not finished in time");
                break;
            }
            Err(Closed::Malformed(e)) => {
                tracing::warn!(?from, error = %e, "malformed frame; closing the connection");
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
        if probation.take().is_some() && !is_peer_first(head.op) {
            tracing::debug!(
                ?from,
                "connection closed: the room left is kept for peer brokers"
            );
            break;
        }
        // A client with `in_flight_max` answers unwritten is not read from until one drains.
        let slot = if is_raft(head.op) {
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
        let turn = turns.issue();
        tokio::spawn(async move {
            let answer = handler.handle(head.op, body, turn, answers).await;
            let frame = OutFrame::new(Kind::Response, head.op, head.request_id, answer.body);
            let _ = tx.send((frame, (slot, answer.held))).await;
        });
    }
    drop(tx);
    writer.abort();
}

/// Why a call did not return a response.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// The request was not sent: no connection could be made.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The request was sent, but no response came in time. It may still take effect.
    #[error("timed out after sending")]
    Timeout,
    /// The connection died after the request was sent. It may still take effect.
    #[error("connection lost after sending")]
    Closed,
}

/// Outbound connection to one peer address, made on first use and remade after a failure.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Where the peer is; a registration in the metadata log can move it.
    addr: parking_lot::Mutex<SocketAddr>,
    frame_bytes_max: u32,
    shutdown: watch::Receiver<bool>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

type Pending = Arc<parking_lot::Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>;

#[derive(Debug)]
struct Conn {
    /// The address it connects to: a connection to a peer's old address is not reused.
    addr: SocketAddr,
    tx: mpsc::Sender<(OutFrame, ())>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
}

impl Peer {
    pub(crate) fn new(
        addr: SocketAddr,
        frame_bytes_max: u32,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Peer {
            addr: parking_lot::Mutex::new(addr),
            frame_bytes_max,
            shutdown,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Sends a request and waits up to `timeout` for its response.
    pub(crate) async fn call(
        &self,
        op: Op,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.call_with(op, body, timeout, None).await
    }

    /// [`call`](Self::call), signalling `enqueued` once the request is queued on the
    /// connection: requests queued in some order are written in that order.
    pub(crate) async fn call_with(
        &self,
        op: Op,
        body: Vec<u8>,
        timeout: Duration,
        enqueued: Option<oneshot::Sender<()>>,
    ) -> Result<Vec<u8>, CallError> {
        let conn = self.connection(timeout).await?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (otx, orx) = oneshot::channel();
        conn.pending.lock().insert(id, otx);
        if conn
            .tx
            .send((OutFrame::new(Kind::Request, op, id, body), ()))
            .await
            .is_err()
        {
            conn.pending.lock().remove(&id);
            conn.alive.store(false, Ordering::Release);
            return Err(CallError::Unreachable("connection closed".into()));
        }
        if let Some(enqueued) = enqueued {
            let _ = enqueued.send(());
        }
        match tokio::time::timeout(timeout, orx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(CallError::Closed),
            Err(_) => {
                conn.pending.lock().remove(&id);
                Err(CallError::Timeout)
            }
        }
    }

    /// Sends later requests to `addr`; requests already sent finish on the old connection.
    pub(crate) fn set_addr(&self, addr: SocketAddr) {
        *self.addr.lock() = addr;
    }

    async fn connection(&self, timeout: Duration) -> Result<Arc<Conn>, CallError> {
        let mut guard = self.conn.lock().await;
        let addr = *self.addr.lock();
        if let Some(conn) = guard
            .as_ref()
            .filter(|c| c.alive.load(Ordering::Acquire) && c.addr == addr)
        {
            return Ok(Arc::clone(conn));
        }
        *guard = None;
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(CallError::Unreachable(e.to_string())),
            Err(_) => return Err(CallError::Unreachable("connect timed out".into())),
        };
        let _ = stream.set_nodelay(true);
        let (mut rd, wr) = stream.into_split();
        let (tx, writer) = spawn_writer(wr, None);
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        {
            let alive = Arc::clone(&alive);
            tokio::spawn(async move {
                let _ = writer.await;
                alive.store(false, Ordering::Release);
            });
        }
        {
            let (alive, pending) = (Arc::clone(&alive), Arc::clone(&pending));
            let (max, mut shutdown) = (self.frame_bytes_max, self.shutdown.clone());
            tokio::spawn(async move {
                loop {
                    let next = tokio::select! {
                        _ = shutdown.changed() => break,
                        f = read_frame(&mut rd, max) => f,
                    };
                    match next {
                        Ok(Some((head, body))) if head.kind == Kind::Response => {
                            if let Some(waiter) = pending.lock().remove(&head.request_id) {
                                let _ = waiter.send(body);
                            }
                        }
                        _ => break,
                    }
                }
                alive.store(false, Ordering::Release);
                // Waiters see their sender dropped: the outcome of their request is unknown.
                pending.lock().clear();
            });
        }
        let conn = Arc::new(Conn {
            addr,
            tx,
            pending,
            next_id: AtomicU64::new(1),
            alive,
        });
        *guard = Some(Arc::clone(&conn));
        Ok(conn)
    }
}

/// The two connections to one broker.
#[derive(Debug)]
struct Connections {
    bulk: Arc<Peer>,
    control: Arc<Peer>,
}

/// Connections to the other brokers: a bulk one and a control one each, so that heartbeats and
/// votes never queue behind large appends.
#[derive(Debug)]
pub(crate) struct PeerSet {
    self_id: u64,
    frame_bytes_max: u32,
    shutdown: watch::Receiver<bool>,
    /// Per broker. Grows when a broker joins.
    peers: parking_lot::RwLock<HashMap<u64, Connections>>,
    #[cfg(any(test, feature = "failpoints"))]
    faults: Option<Arc<crate::env::NetFaults>>,
}

impl PeerSet {
    /// Connections (made lazily) to every broker in `peers` but `self_id`: a node never
    /// connects to itself.
    pub(crate) fn new(
        peers: &std::collections::BTreeMap<u64, SocketAddr>,
        self_id: u64,
        frame_bytes_max: u32,
        shutdown: &watch::Receiver<bool>,
    ) -> Self {
        let set = PeerSet {
            self_id,
            frame_bytes_max,
            shutdown: shutdown.clone(),
            peers: parking_lot::RwLock::default(),
            #[cfg(any(test, feature = "failpoints"))]
            faults: None,
        };
        for (id, addr) in peers {
            set.set_addr(*id, *addr);
        }
        set
    }

    /// Sends later requests for broker `id` to `addr`: a broker that came back elsewhere, or
    /// one that joined (its connections are made here). Never this broker itself.
    pub(crate) fn set_addr(&self, id: u64, addr: SocketAddr) {
        if id == self.self_id {
            return;
        }
        let make = || Arc::new(Peer::new(addr, self.frame_bytes_max, self.shutdown.clone()));
        match self.peers.write().entry(id) {
            std::collections::hash_map::Entry::Occupied(c) => {
                c.get().bulk.set_addr(addr);
                c.get().control.set_addr(addr);
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Connections {
                    bulk: make(),
                    control: make(),
                });
            }
        }
    }

    /// Lets `faults` decide the fate of every message between this broker and the others.
    #[cfg(any(test, feature = "failpoints"))]
    pub(crate) fn with_faults(mut self, faults: Option<Arc<crate::env::NetFaults>>) -> Self {
        self.faults = faults;
        self
    }

    /// Calls broker `to` over `peer`, subject to injected network faults (with the
    /// `failpoints` feature): a lost request or response looks like a timeout.
    pub(crate) async fn call(
        &self,
        peer: &Peer,
        to: u64,
        op: Op,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(faults) = &self.faults {
            use crate::env::Verdict;
            match faults.verdict(self.self_id, to) {
                Verdict::Lose => {
                    tokio::time::sleep(timeout).await;
                    return Err(CallError::Timeout);
                }
                Verdict::Deliver(delay) => tokio::time::sleep(delay).await,
            }
            let started = tokio::time::Instant::now();
            let response = peer.call(op, body, timeout).await?;
            if faults.verdict(to, self.self_id) == Verdict::Lose {
                tokio::time::sleep(timeout.saturating_sub(started.elapsed())).await;
                return Err(CallError::Timeout);
            }
            return Ok(response);
        }
        let _ = (self.self_id, to);
        peer.call(op, body, timeout).await
    }

    /// Calls whoever listens at `addr` once, over a connection of its own (not any broker's):
    /// to ask a broker that claims a new address whether it is there.
    pub(crate) async fn probe(
        &self,
        addr: SocketAddr,
        op: Op,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        Peer::new(addr, self.frame_bytes_max, self.shutdown.clone())
            .call(op, body, timeout)
            .await
    }

    /// Where broker `id`'s traffic goes now, if it is known.
    pub(crate) fn addr_of(&self, id: u64) -> Option<SocketAddr> {
        let peers = self.peers.read();
        Some(*peers.get(&id)?.bulk.addr.lock())
    }

    /// The connection to broker `id`, for bulk or control traffic.
    pub(crate) fn get(&self, id: u64, control: bool) -> Option<Arc<Peer>> {
        let peers = self.peers.read();
        let c = peers.get(&id)?;
        Some(Arc::clone(if control { &c.control } else { &c.bulk }))
    }
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
