//! The calling side of the transport: one multiplexed connection per peer address, made on
//! first use and remade after a failure, and the set of a broker's peers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use super::body::Body;
use super::frame::{Kind, Op, OutFrame, read_frame};
use super::spawn_writer;
use super::{ReadHalf, WriteHalf};
use crate::Address;
use crate::tls::TlsDialer;

/// How a connection dials TLS: with this dialer, expecting a certificate that names this
/// (`broker-<id>` for a peer broker, the address dialed for a client).
#[derive(Clone, Debug)]
pub(crate) struct Dial {
    pub(crate) dialer: TlsDialer,
    pub(crate) name: rustls_pki_types::ServerName<'static>,
    /// The login a client makes right after the handshake, where brokers ask for one.
    pub(crate) login: Option<Arc<crate::SaslLogin>>,
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
    /// The request was not sent: the connection's window of requests awaiting answers stayed
    /// full for the whole timeout (see [`Peer::windowed`]).
    #[error("not sent: every slot of the connection's window stayed taken")]
    Busy,
    /// The request was not sent: the broker refused the login the connection opens with
    /// (the reason as it told it), or did not prove it knows the user (SCRAM).
    #[error("authentication failed: {0}")]
    LoginRefused(String),
    /// The request was not sent: its operation is of a later protocol version than its
    /// connection speaks (the broker would close the connection on it, failing every request
    /// in flight there). A caller that chose the operation by an earlier connection's version
    /// asks again as the older version has it.
    #[error("not sent: {op} needs protocol version {needs}, the connection speaks {speaks}")]
    TooNew {
        op: &'static str,
        needs: u16,
        speaks: u16,
    },
}

/// Outbound connection to one peer address, made on first use and remade after a failure.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Where the peer is (a name is resolved at each connection); a registration in the
    /// metadata log can move it.
    addr: parking_lot::Mutex<Address>,
    frame_bytes_max: u32,
    shutdown: watch::Receiver<bool>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// TLS, if the peer serves it.
    tls: Option<Dial>,
    /// The newest protocol version to offer in a connection's Hello (see `hello.rs`); at 1,
    /// none is said.
    protocol_version: u16,
    /// How many requests of a connection may await their answers at once, if bounded.
    window: Option<usize>,
}

type Pending = Arc<parking_lot::Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>;

#[derive(Debug)]
struct Conn {
    /// The address it connects to: a connection to a peer's old address is not reused.
    addr: Address,
    tx: mpsc::Sender<(OutFrame, ())>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    /// The protocol version it speaks, chosen by its Hello.
    version: u16,
    /// Slots for requests awaiting answers (the peer's window), if bounded.
    window: Option<Arc<tokio::sync::Semaphore>>,
}

impl Peer {
    pub(crate) fn new(
        addr: Address,
        frame_bytes_max: u32,
        shutdown: watch::Receiver<bool>,
        tls: Option<Dial>,
    ) -> Self {
        Peer {
            addr: parking_lot::Mutex::new(addr),
            frame_bytes_max,
            shutdown,
            conn: tokio::sync::Mutex::new(None),
            tls,
            protocol_version: crate::PROTOCOL_VERSION,
            window: None,
        }
    }

    /// The same peer, with at most `requests` requests of a connection awaiting answers at
    /// once: a client's, matching the broker's `requests_in_flight_max`. A broker serves that
    /// many requests of one client connection at a time and reads the rest only as answers
    /// drain, so more would wait in its socket while their timeouts ran, and end as
    /// "timed out after sending", their outcome unknown, though never read. Past the window a
    /// request waits in the client, unsent, its timeout not yet started; one that finds no
    /// slot within the timeout fails as [`CallError::Busy`], known not to have been sent.
    pub(crate) fn windowed(mut self, requests: usize) -> Self {
        self.window = Some(requests.max(1));
        self
    }

    /// The same peer, offering protocol versions up to `version` (a broker pinned lower).
    pub(crate) fn speaking(mut self, version: u16) -> Self {
        self.protocol_version = version;
        self
    }

    /// The protocol version the connection to the peer speaks, connecting first if there is
    /// none.
    pub(crate) async fn version(&self, timeout: Duration) -> Result<u16, CallError> {
        Ok(self.connection(timeout).await?.version)
    }

    /// The protocol version of the live connection to the peer, if there is one now (not
    /// waiting for a connection being made).
    pub(crate) fn live_version(&self) -> Option<u16> {
        let guard = self.conn.try_lock().ok()?;
        let conn = guard.as_ref()?;
        conn.alive.load(Ordering::Acquire).then_some(conn.version)
    }

    /// Sends a request and waits up to `timeout` for its response.
    pub(crate) async fn call(
        &self,
        op: Op,
        body: Body,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.call_with(op, body, timeout, None).await
    }

    /// [`call`](Self::call), signalling `enqueued` once the request is queued on the
    /// connection: requests queued in some order are written in that order.
    pub(crate) async fn call_with(
        &self,
        op: Op,
        body: Body,
        timeout: Duration,
        enqueued: Option<oneshot::Sender<()>>,
    ) -> Result<Vec<u8>, CallError> {
        let conn = self.connection(timeout).await?;
        if op.since() > conn.version {
            return Err(CallError::TooNew {
                op: op.name(),
                needs: op.since(),
                speaks: conn.version,
            });
        }
        // Held until the answer comes or the wait for it ends.
        let _slot = match &conn.window {
            None => None,
            Some(window) => {
                match tokio::time::timeout(timeout, Arc::clone(window).acquire_owned()).await {
                    Ok(Ok(slot)) => Some(slot),
                    Ok(Err(_)) => return Err(CallError::Unreachable("connection closed".into())),
                    Err(_) => return Err(CallError::Busy),
                }
            }
        };
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
    pub(crate) fn set_addr(&self, addr: Address) {
        *self.addr.lock() = addr;
    }

    /// Where this peer's requests go.
    pub(crate) fn addr(&self) -> Address {
        self.addr.lock().clone()
    }

    async fn connection(&self, timeout: Duration) -> Result<Arc<Conn>, CallError> {
        let mut guard = self.conn.lock().await;
        let addr = self.addr();
        if let Some(conn) = guard
            .as_ref()
            .filter(|c| c.alive.load(Ordering::Acquire) && c.addr == addr)
        {
            return Ok(Arc::clone(conn));
        }
        *guard = None;
        let (mut rd, wr, version) = match tokio::time::timeout(timeout, self.dial(&addr)).await {
            Ok(Ok(dialed)) => dialed,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(CallError::Unreachable("connect timed out".into())),
        };
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
            version,
            window: self
                .window
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
        });
        *guard = Some(Arc::clone(&conn));
        Ok(conn)
    }
}

impl Peer {
    /// Connects to `addr` as [`open`](Self::open) does and says Hello: the connection's
    /// halves and the protocol version it speaks. A peer that closes the connection on the
    /// Hello (a build before versions) is connected to again and spoken to at version 1.
    async fn dial(&self, addr: &Address) -> Result<(ReadHalf, WriteHalf, u16), CallError> {
        use super::hello::{Greeted, say_hello};
        let (mut rd, mut wr) = self.open(addr).await?;
        if self.protocol_version <= crate::version::PROTOCOL_VERSION_MIN {
            return Ok((rd, wr, crate::version::PROTOCOL_VERSION_MIN));
        }
        match say_hello((&mut rd, &mut wr), self.protocol_version).await? {
            Greeted::Version(version) => Ok((rd, wr, version)),
            Greeted::Closed => {
                let (rd, wr) = self.open(addr).await?;
                Ok((rd, wr, crate::version::PROTOCOL_VERSION_MIN))
            }
        }
    }

    /// Connects to `addr` (a name resolved now, each of its addresses tried in turn), through
    /// a TLS handshake if the peer serves TLS, and logs in where the dial says to.
    async fn open(&self, addr: &Address) -> Result<(ReadHalf, WriteHalf), CallError> {
        let resolved = addr
            .resolve()
            .await
            .map_err(|e| CallError::Unreachable(format!("{addr}: {e}")))?;
        let mut failed = None;
        let mut connected = None;
        for ip in resolved {
            match self.connect(ip).await {
                Ok(halves) => {
                    connected = Some(halves);
                    break;
                }
                Err(e) => failed = Some(e),
            }
        }
        let (mut rd, mut wr) = connected.ok_or_else(|| {
            let why = failed.map_or_else(|| "no address".to_string(), |e| e.to_string());
            CallError::Unreachable(why)
        })?;
        if let Some(login) = self.tls.as_ref().and_then(|t| t.login.as_ref()) {
            super::login::log_in((&mut rd, &mut wr), login).await?;
        }
        Ok((rd, wr))
    }

    /// Connects to `addr`, through a TLS handshake if the peer serves TLS.
    async fn connect(&self, addr: SocketAddr) -> std::io::Result<(ReadHalf, WriteHalf)> {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        Ok(match &self.tls {
            None => {
                let (rd, wr) = stream.into_split();
                (Box::new(rd), Box::new(wr))
            }
            Some(tls) => {
                let stream = tls
                    .dialer
                    .connect(stream, tls.name.clone())
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("TLS: {e}")))?;
                let (rd, wr) = tokio::io::split(stream);
                (Box::new(rd), Box::new(wr))
            }
        })
    }
}

/// The two connections to one broker.
#[derive(Debug)]
struct Connections {
    bulk: Arc<Peer>,
    control: Arc<Peer>,
    /// Whether the broker's latest call failed to connect: logged once when it turns, once
    /// when it turns back.
    lost: AtomicBool,
}

/// Connections to the other brokers: a bulk one and a control one each, so that heartbeats and
/// votes never queue behind large appends.
#[derive(Debug)]
pub(crate) struct PeerSet {
    self_id: u64,
    frame_bytes_max: u32,
    shutdown: watch::Receiver<bool>,
    /// TLS to every peer, if the brokers serve it on their native listeners.
    tls: Option<TlsDialer>,
    /// Per broker. Grows when a broker joins.
    peers: parking_lot::RwLock<HashMap<u64, Connections>>,
    /// The newest protocol version offered to the other brokers.
    protocol_version: u16,
    #[cfg(any(test, feature = "failpoints"))]
    faults: Option<Arc<crate::env::NetFaults>>,
}

impl PeerSet {
    /// Connections (made lazily) to every broker in `peers` but `self_id`: a node never
    /// connects to itself.
    pub(crate) fn new(
        peers: &std::collections::BTreeMap<u64, Address>,
        self_id: u64,
        frame_bytes_max: u32,
        shutdown: &watch::Receiver<bool>,
        (tls, protocol_version): (Option<TlsDialer>, u16),
    ) -> Self {
        let set = PeerSet {
            self_id,
            frame_bytes_max,
            shutdown: shutdown.clone(),
            tls,
            peers: parking_lot::RwLock::default(),
            protocol_version,
            #[cfg(any(test, feature = "failpoints"))]
            faults: None,
        };
        for (id, addr) in peers {
            set.set_addr(*id, addr.clone());
        }
        set
    }

    /// Sends later requests for broker `id` to `addr`: a broker that came back elsewhere, or
    /// one that joined (its connections are made here). Never this broker itself.
    pub(crate) fn set_addr(&self, id: u64, addr: Address) {
        if id == self.self_id {
            return;
        }
        let make = || Arc::new(self.peer(id, addr.clone()));
        match self.peers.write().entry(id) {
            std::collections::hash_map::Entry::Occupied(c) => {
                c.get().bulk.set_addr(addr.clone());
                c.get().control.set_addr(addr);
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Connections {
                    bulk: make(),
                    control: make(),
                    lost: AtomicBool::new(false),
                });
            }
        }
    }

    /// Whether broker `id` could not be connected to at the last try (and has not answered
    /// since).
    pub(crate) fn is_lost(&self, id: u64) -> bool {
        self.peers
            .read()
            .get(&id)
            .is_some_and(|c| c.lost.load(Ordering::Acquire))
    }

    /// Lets `faults` decide the fate of every message between this broker and the others.
    #[cfg(any(test, feature = "failpoints"))]
    pub(crate) fn with_faults(mut self, faults: Option<Arc<crate::env::NetFaults>>) -> Self {
        self.faults = faults;
        self
    }

    /// Calls broker `to` over `peer`, subject to injected network faults (with the
    /// `failpoints` feature): a lost request or response looks like a timeout. A broker that
    /// cannot be connected to is logged once (a warning), and once when it answers again.
    pub(crate) async fn call(
        &self,
        peer: &Peer,
        to: u64,
        op: Op,
        body: Body,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let result = self.call_faulty(peer, to, op, body, timeout).await;
        if !*self.shutdown.borrow()
            && let Some(c) = self.peers.read().get(&to)
        {
            match &result {
                Err(CallError::Unreachable(why)) if !c.lost.swap(true, Ordering::AcqRel) => {
                    tracing::warn!(broker = to, error = %why, "lost contact with a peer broker");
                }
                Ok(_) if c.lost.swap(false, Ordering::AcqRel) => {
                    tracing::info!(broker = to, "peer broker reachable again");
                }
                _ => {}
            }
        }
        result
    }

    /// [`call`](Self::call) without the log.
    async fn call_faulty(
        &self,
        peer: &Peer,
        to: u64,
        op: Op,
        body: Body,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(faults) = &self.faults {
            use crate::env::Verdict;
            let muted = op == Op::AppendEntries && faults.replication_muted(self.self_id);
            // A slow link: the request's bytes take their time to arrive, within its deadline.
            let transit = faults.transit(body.len());
            match faults.verdict(self.self_id, to) {
                Verdict::Deliver(delay) if !muted && transit < timeout => {
                    tokio::time::sleep(delay).await;
                }
                // Never delivered: lost, muted, or too slow to arrive within its deadline.
                _ => {
                    tokio::time::sleep(timeout).await;
                    return Err(CallError::Timeout);
                }
            }
            let started = tokio::time::Instant::now();
            tokio::time::sleep(transit).await;
            let response = peer.call(op, body, timeout - transit).await?;
            if faults.verdict(to, self.self_id) == Verdict::Lose {
                tokio::time::sleep(timeout.saturating_sub(started.elapsed())).await;
                return Err(CallError::Timeout);
            }
            return Ok(response);
        }
        let _ = (self.self_id, to);
        peer.call(op, body, timeout).await
    }

    /// A connection to broker `id` at `addr` (over TLS, checking its certificate names
    /// `broker-<id>`, if the brokers serve TLS).
    fn peer(&self, id: u64, addr: Address) -> Peer {
        let tls = self.tls.as_ref().map(|dialer| Dial {
            dialer: dialer.clone(),
            name: crate::tls::broker_name(id),
            login: None,
        });
        Peer::new(addr, self.frame_bytes_max, self.shutdown.clone(), tls)
            .speaking(self.protocol_version)
    }

    /// The protocol version broker `id`'s live connections speak, if one is up now.
    pub(crate) fn live_version(&self, id: u64) -> Option<u16> {
        let peers = self.peers.read();
        let c = peers.get(&id)?;
        c.control.live_version().or_else(|| c.bulk.live_version())
    }

    /// Calls whoever listens at `addr` once, over a connection of its own (not any broker's):
    /// to ask a broker that claims a new address (broker `id`) whether it is there.
    pub(crate) async fn probe(
        &self,
        id: u64,
        addr: Address,
        op: Op,
        body: Body,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.peer(id, addr).call(op, body, timeout).await
    }

    /// Where broker `id`'s traffic goes now, if it is known.
    pub(crate) fn addr_of(&self, id: u64) -> Option<Address> {
        let peers = self.peers.read();
        Some(peers.get(&id)?.bulk.addr())
    }

    /// The connection to broker `id`, for bulk or control traffic.
    pub(crate) fn get(&self, id: u64, control: bool) -> Option<Arc<Peer>> {
        let peers = self.peers.read();
        let c = peers.get(&id)?;
        Some(Arc::clone(if control { &c.control } else { &c.bulk }))
    }
}

#[cfg(test)]
mod tests;
