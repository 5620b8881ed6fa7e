//! Accepting connections, for both of a broker's doors: one connection cap over all its
//! listeners ([`Admission`], with room kept for peer brokers), then, on the connection's own
//! task, the TLS handshake where the listener serves TLS, within the connection's
//! pre-authentication deadline, and the connection handed to its door as two halves
//! ([`Accepted`]), the same whether it is plaintext or TLS.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

use super::BoxFuture;
use super::server::ServerLimits;
use crate::tls::{ClientCertificate, PRE_AUTH_DEADLINE, TlsServer};

/// A connection's reading half, plaintext or TLS.
pub(crate) type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;

/// A connection's writing half, plaintext or TLS. A TLS half holds what it encrypted until
/// it is flushed: whoever writes an answer flushes it.
pub(crate) type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// An admitted connection, ready for its door.
pub(crate) struct Accepted {
    pub(crate) rd: ReadHalf,
    pub(crate) wr: WriteHalf,
    /// The client's address.
    pub(crate) from: SocketAddr,
    /// Its place under the connection cap, given back when it is dropped.
    pub(crate) admitted: Admitted,
    /// When the connection must be done authenticating ([`PRE_AUTH_DEADLINE`] after it was
    /// admitted): its TLS handshake, done by now, and its SASL exchange, if its door asks for
    /// one.
    pub(crate) authenticate_by: tokio::time::Instant,
    /// The certificate the client presented in its TLS handshake, where the listener asked
    /// for one (the native listener of brokers given their CA: peer brokers present theirs).
    pub(crate) certificate: Option<ClientCertificate>,
}

/// A plaintext connection's halves (tokio's owned halves: no lock between them).
fn plain(stream: TcpStream) -> (ReadHalf, WriteHalf) {
    let (rd, wr) = stream.into_split();
    (Box::new(rd), Box::new(wr))
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

/// The connections a broker has open on all its listeners (the native one and the Kafka one),
/// within one cap, `ServerLimits::connections_max`, of which `peer_connections_reserved` only
/// peer brokers may take.
pub(crate) struct Admission {
    limits: ServerLimits,
    open: AtomicU64,
    /// Connections accepted into the room kept for peers, until their first request.
    probation: parking_lot::Mutex<Probation>,
    /// When a refusal was last logged (at most one line a second).
    refused_logged: parking_lot::Mutex<Option<tokio::time::Instant>>,
}

/// An admitted connection's place under the cap, given back when it is dropped.
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    /// In the room kept for peers: what closes it before its first request (see
    /// [`Probation`]).
    pub(crate) probation: Option<oneshot::Receiver<()>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    pub(crate) fn new(limits: ServerLimits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            open: AtomicU64::new(0),
            probation: parking_lot::Mutex::default(),
            refused_logged: parking_lot::Mutex::new(None),
        })
    }

    /// Admits a connection from `from`, or refuses it (`None`, logged at most once a
    /// second). A connection that may be a peer's (`peer`: it came to the native listener)
    /// may take the room kept for peers, on probation, or the place of the oldest connection
    /// on probation there; any other only the clients' room.
    pub(crate) fn admit(self: &Arc<Self>, from: SocketAddr, peer: bool) -> Option<Admitted> {
        let max = self.limits.connections_max as u64;
        let clients_max = max.saturating_sub(self.limits.peer_connections_reserved as u64);
        let mut probation = self.probation.lock();
        let now_open = self.open.load(Ordering::Acquire);
        let room = if peer {
            now_open < max || probation.evict_oldest()
        } else {
            now_open < clients_max
        };
        if !room {
            drop(probation);
            let mut logged = self.refused_logged.lock();
            if logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                tracing::warn!(%from, max, "connection refused: too many open");
                *logged = Some(tokio::time::Instant::now());
            }
            return None;
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        Some(Admitted {
            admission: Arc::clone(self),
            probation: (peer && now_open >= clients_max).then(|| probation.admit()),
        })
    }
}

/// Accepts connections on `listener` until `shutdown` turns true, each admitted by
/// `admission` (`peer`: connections here may be peer brokers'), put through a TLS handshake
/// with `tls` if given, and served by `serve`. A failed accept is logged and tried again
/// after a moment.
pub(crate) fn spawn_accept<F>(
    listener: TcpListener,
    admission: Arc<Admission>,
    peer: bool,
    tls: Option<TlsServer>,
    mut shutdown: watch::Receiver<bool>,
    serve: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(Accepted) -> BoxFuture<()> + Send + Sync + 'static,
{
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        // Ends at shutdown.
        loop {
            let accepted = tokio::select! {
                _ = shutdown.changed() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, from)) => {
                    let Some(admitted) = admission.admit(from, peer) else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (serve, tls) = (Arc::clone(&serve), tls.clone());
                    tokio::spawn(async move {
                        let authenticate_by = tokio::time::Instant::now() + PRE_AUTH_DEADLINE;
                        let ((rd, wr), certificate) = match tls {
                            None => (plain(stream), None),
                            Some(tls) => match tls.accept(stream, from, authenticate_by).await {
                                Some((stream, certificate)) => {
                                    let (rd, wr) = tokio::io::split(stream);
                                    let halves =
                                        (Box::new(rd) as ReadHalf, Box::new(wr) as WriteHalf);
                                    (halves, certificate)
                                }
                                None => return,
                            },
                        };
                        let accepted = Accepted {
                            rd,
                            wr,
                            from,
                            admitted,
                            authenticate_by,
                            certificate,
                        };
                        serve(accepted).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    })
}
