//! Reading a server connection's request frames, within the connection's deadlines and the
//! server's memory budgets, and why a connection stops being read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Budgets, ServerLimits};
use crate::transport::ReadHalf;
use crate::transport::frame::{self, FrameError, Op};

/// Why a server stopped reading a connection.
pub(super) enum Closed {
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
pub(super) async fn read_request(
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
pub(super) fn is_raft(op: Op) -> bool {
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
pub(super) fn is_peer_first(op: Op) -> bool {
    is_raft(op) || op == Op::Propose
}

/// Says why a connection was closed: a warning for what a well-behaved client never does (a
/// frame left unfinished, a malformed one), otherwise at debug level.
pub(super) fn log_closed(from: Option<SocketAddr>, why: Closed) {
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
