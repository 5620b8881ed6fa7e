//! TCP transport between nodes: a listener that serves framed requests (`server.rs`: the
//! connection and memory budgets), and outbound connections that multiplex requests by id
//! (`peer.rs`).
//!
//! Each node keeps two connections to each peer: one for bulk traffic (log replication,
//! snapshots) and one for control traffic (votes, heartbeats), so that a heartbeat never waits
//! behind a large append. Every partition's traffic shares them. A connection that fails is
//! dropped; the next request reconnects. Nothing here knows what a request means; the server
//! tells Raft traffic from clients' by its op alone.

mod accept;
pub(crate) mod body;
pub(crate) mod frame;
mod hello;
mod login;
mod peer;
mod server;
pub(crate) mod turns;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::sync::mpsc;

pub(crate) use accept::ReadHalf;
pub(crate) use accept::{Accepted, Admission, WriteHalf, spawn_accept};
use frame::OutFrame;
pub(crate) use login::Login;
pub(crate) use peer::{CallError, Dial, Peer, PeerSet};
pub(crate) use server::{
    Answer, AnswerBudget, Caller, ClientBudgets, Handler, ServerLimits, spawn_server,
};
pub(crate) use turns::{Turn, Turns};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Writes the frames sent into the returned channel to `wr`, in order, until the channel closes,
/// a write fails, or a frame is not written within `timeout` (a peer that never reads); the
/// task's end tells which connection half died.
/// Each frame comes with a value that is dropped once the frame is written (a server's
/// in-flight slot and answer bytes for the request it answers).
fn spawn_writer<T: Send + 'static, W: AsyncWrite + Send + Unpin + 'static>(
    mut wr: W,
    timeout: Option<Duration>,
) -> (mpsc::Sender<(OutFrame, T)>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<(OutFrame, T)>(1024);
    let writer = tokio::spawn(async move {
        while let Some((frame, held)) = rx.recv().await {
            let written = frame.write_to(&mut wr);
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
