//! No replica dies silently: a replica whose Raft core stopped by itself (a fatal storage
//! error: a failed sync, a full disk; a core task that panicked) is found within one election
//! timeout, logged, and brought back without restarting the broker; so is one whose files a
//! read found damaged, or whose committed entries the leader's log contradicts
//! ([`Broker::request_rebuild`]): both are rebuilt from the leader.
//!
//! How a stopped one comes back depends on why it stopped:
//!
//! - **A storage error, with other replicas to copy from: rebuilt from the leader.** After a
//!   failed `fdatasync` the kernel may have dropped the dirty pages while the page cache still
//!   shows them, and a later sync can report success for data that never reached the disk
//!   (PostgreSQL's "fsyncgate"). Reopened from its files, such a replica could acknowledge
//!   entries the disk never held. Rebuilt, it keeps only its vote, and gives no vote until it
//!   holds again what it had known committed (the same rebuild as for damaged files).
//! - **Anything else, or the only replica of its partition: reopened from its files**, which
//!   recovery validates as at any start (damage found then is rebuilt as at a start).
//!
//! A bring-back that fails (the disk still fails) is retried with a doubling pause, from 1 s
//! up to [`RETRY_PAUSE_MAX`]; meanwhile [`PartitionStatus::stopped`] says why the replica is
//! down, with the figures it had when it stopped.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::raft::replica::Stopped;
use crate::raft::types::{C, Vote};
use crate::transport::frame::Op;
use crate::types::{NodeId, PartitionId};
use openraft::raft::VoteRequest;

use super::replica_dir::replace_with_empty_replica;
use super::replicas::{open_or_rebuild_replica, open_replica, stop_replica};
use super::{Broker, HostedReplica, PartitionStatus};

/// The longest pause between two attempts to bring a stopped replica back.
pub(super) const RETRY_PAUSE_MAX: Duration = Duration::from_secs(30);

/// A replica that stops again within this long of its last stop counts as stopping again.
const FLAPPING_WINDOW: Duration = Duration::from_secs(300);

/// The pause after `failures` failed attempts (at least one): 1 s, doubling, at most
/// [`RETRY_PAUSE_MAX`].
fn retry_pause(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(RETRY_PAUSE_MAX)
}

/// A partition whose replica stopped and could not be brought back yet, or is being brought
/// back now (its status stays visible meanwhile).
#[derive(Clone)]
pub(super) struct Down {
    pub(super) topic_id: u64,
    /// Other brokers hosting a replica, when it stopped.
    others: usize,
    how: BringBack,
    /// The replica's status when it stopped, `stopped` naming the latest failure.
    pub(super) status: PartitionStatus,
    attempts: u32,
    next_attempt: Instant,
}

impl Down {
    /// A replica down from now on, to be brought back `how`.
    pub(super) fn new(
        topic_id: u64,
        others: usize,
        how: BringBack,
        status: PartitionStatus,
    ) -> Down {
        Down {
            topic_id,
            others,
            how,
            status,
            attempts: 0,
            next_attempt: Instant::now(),
        }
    }

    /// This entry while the replica is being taken down or brought back: no retry is due
    /// (whoever holds `replicas_changing` decides what follows).
    fn in_progress(&self) -> Down {
        Down {
            next_attempt: Instant::now() + Duration::from_secs(24 * 3600),
            ..self.clone()
        }
    }
}

/// How a stopped replica is brought back.
#[derive(Clone, Copy, Debug)]
pub(super) enum BringBack {
    /// Reopened from its files.
    Reopen,
    /// Rebuilt empty, keeping `vote`, voting again once it holds `below` (see the module
    /// documentation).
    Rebuild {
        vote: Option<Vote>,
        below: Option<u64>,
    },
}

impl Broker {
    /// Every election timeout until shutdown: brings back the replicas that stopped since, and
    /// the ones whose earlier bring-back failed once their pause is over.
    pub(super) async fn supervise(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let period = self.config.election_timeout;
        let mut metadata_reported = false;
        // Per partition: how many times in a row its replica stopped, and when it last did. A
        // replica that stops again soon after it was brought back (its disk still fails)
        // waits out the pause of a failed attempt before the next one.
        let mut stops: HashMap<PartitionId, (u32, Instant)> = HashMap::new();
        // Ends at shutdown.
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(period) => {}
            }
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            if let Some(why) = self.meta.raft.stopped()
                && !std::mem::replace(&mut metadata_reported, true)
            {
                tracing::error!(
                    reason = %why,
                    "the metadata replica stopped: this broker follows no catalog change until \
                     it is restarted"
                );
            }
            // Weak handles: a replica waiting here for the lock must not keep a stopped replica
            // alive (its files stay locked until every handle is gone).
            let stopped: Vec<(Weak<HostedReplica>, PartitionId, Stopped)> = self
                .replicas
                .read()
                .values()
                .filter(|g| !g.rebuilding.load(Ordering::Acquire))
                .filter_map(|g| Some((Arc::downgrade(g), g.id.clone(), g.raft.stopped()?)))
                .collect();
            for (replica, id, why) in stopped {
                let now = Instant::now();
                let entry = stops.entry(id).or_insert((0, now));
                if now.duration_since(entry.1) > FLAPPING_WINDOW {
                    entry.0 = 0;
                }
                let before = entry.0;
                *entry = (before + 1, now);
                self.replica_stopped(replica, why, before).await;
            }
            let due: Vec<PartitionId> = self
                .down
                .lock()
                .iter()
                .filter(|(_, d)| d.next_attempt <= Instant::now())
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                self.retry_down(id).await;
            }
        }
    }

    /// Takes a stopped replica out of service and brings it back: at once if it had not
    /// stopped within [`FLAPPING_WINDOW`], else after the pause of as many failed attempts as
    /// it stopped `before`.
    async fn replica_stopped(&self, replica: Weak<HostedReplica>, why: Stopped, before: u32) {
        let _changing = self.replicas_changing.lock().await;
        let Some(replica) = self.still_hosted(&replica) else {
            return;
        };
        let storage = matches!(why, Stopped::Storage(_));
        let (id, mut down) = self
            .take_down(replica, why.to_string(), |replica, others| {
                if storage && others > 0 {
                    BringBack::Rebuild {
                        vote: replica.store.vote(),
                        below: replica.store.rebuild_mark(),
                    }
                } else {
                    BringBack::Reopen
                }
            })
            .await;
        tracing::warn!(partition = %id, reason = %why, how = ?down.how, "bringing a stopped replica back");
        if before > 0 {
            down.attempts = before;
            down.next_attempt = Instant::now() + retry_pause(before);
            tracing::warn!(partition = %id, stops = before + 1, "the replica stopped again soon after it was brought back; waiting before the next attempt");
            self.down.lock().insert(id, down);
            return;
        }
        self.bring_back(id, down).await;
    }

    /// Has `replica` rebuilt from its leader ([`rebuild_replica`](Self::rebuild_replica)), once;
    /// the metadata replica is fenced instead (it refuses its leader from then on; the
    /// catalog cannot be rebuilt under a running broker). Needs a tokio runtime; outside one
    /// the replica is rebuilt when it is next found damaged inside one, or at the next start.
    pub(super) fn request_rebuild(
        self: &Arc<Self>,
        replica: Arc<HostedReplica>,
        cause: RebuildCause,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if replica.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        if Arc::ptr_eq(&replica, &self.meta) {
            tracing::error!(
                cause = ?cause,
                "the metadata replica's log is damaged or contradicts its leader: it is fenced \
                 until an operator restores it"
            );
            return;
        }
        runtime.spawn(Arc::clone(self).rebuild_replica(Arc::downgrade(&replica), cause));
    }

    /// The replica `replica` names, if the broker still hosts that very one and is not
    /// closing. Called with `replicas_changing` held.
    fn still_hosted(&self, replica: &Weak<HostedReplica>) -> Option<Arc<HostedReplica>> {
        let replica = replica.upgrade()?;
        let current = self.replicas.read().get(&replica.id).cloned()?;
        (!self.closing.load(Ordering::Acquire) && Arc::ptr_eq(&current, &replica))
            .then_some(replica)
    }

    /// Rebuilds a replica from its leader: one whose committed entries the leader's log
    /// contradicts (the cluster lost entries it had committed, which `Replicated` durability
    /// allows: Raft cannot undo a committed entry), or one whose files a read found damaged.
    /// The replica starts over, empty but for its vote (it must never vote twice in a term),
    /// and copies the leader's log; a damaged one also gives no vote until it has applied
    /// what it had known committed. Its old directory is discarded.
    ///
    /// A no-op if the replica was stopped or replaced meanwhile, or the broker is closing.
    async fn rebuild_replica(self: Arc<Self>, old: Weak<HostedReplica>, cause: RebuildCause) {
        let _changing = self.replicas_changing.lock().await;
        let Some(old) = self.still_hosted(&old) else {
            return;
        };
        let id = old.id.clone();
        // A damaged replica may have lost entries it acknowledged: it gives no vote until it
        // holds again what it had known committed. One whose entries the cluster lost has
        // nothing the others could miss.
        let below = match &cause {
            RebuildCause::Contradicted(index) => {
                tracing::error!(
                    partition = %id,
                    index,
                    "the leader's log contradicts an entry this replica holds as committed: \
                     the cluster lost committed entries (possible under Replicated durability \
                     after power losses); rebuilding this replica from the leader"
                );
                None
            }
            RebuildCause::Damaged(e) => {
                tracing::error!(
                    partition = %id,
                    error = %e,
                    "this replica's files are damaged; rebuilding it from the leader"
                );
                old.store.rebuild_mark()
            }
        };
        // The leader it followed, in the term it knew: the rebuilt replica, empty (a learner
        // until the leader's appends bring its membership back), sends nothing, so a quiet
        // leader would never hear of it.
        let followed = old.raft.parked_under().or_else(|| old.raft.leader());
        let term = old.raft.term();
        let why = format!("rebuilding from the leader: {cause}");
        let (id, down) = self
            .take_down(old, why, |old, _| BringBack::Rebuild {
                vote: old.store.vote(),
                below,
            })
            .await;
        let topic_id = down.topic_id;
        self.bring_back(id.clone(), down).await;
        let back = self.replicas.read().contains_key(&id);
        if let Some(leader) = followed.filter(|l| back && *l != self.config.id) {
            self.wake_leader_of(&id, topic_id, leader, term).await;
        }
    }

    /// Wakes broker `leader`'s replica of partition `id` (of topic `topic_id`) if its group is
    /// quiet: a pre-vote from this broker in `term` with no log, which a parked leader refuses
    /// and wakes on (`peer_rpc.rs`), and an awake one refuses as the stale request it is.
    /// Best effort: a leader gone or unreachable is replaced by an election, whose winner's
    /// appends reach the replica as well.
    async fn wake_leader_of(&self, id: &PartitionId, topic_id: u64, leader: NodeId, term: u64) {
        let Some(peer) = self.peers.get(leader, true) else {
            return;
        };
        let rpc = VoteRequest::<C>::new(Vote::new(term, self.config.id), None);
        let Ok(body) = crate::transport::body::encode(&(id, topic_id, &rpc)) else {
            return;
        };
        let timeout = self.config.request_timeout;
        if let Err(e) = self
            .peers
            .call(&peer, leader, Op::PreVote, body, timeout)
            .await
        {
            tracing::debug!(partition = %id, leader, error = %e, "could not wake the leader of a rebuilt replica");
        }
    }

    /// Takes `replica` out of service: its status as it stops (naming `why`), out of the map,
    /// its Raft member stopped and every other handle let go. Returns it as down, to be
    /// brought back as `how` says (given the stopped replica and how many others host it).
    /// Called with `replicas_changing` held.
    async fn take_down(
        &self,
        replica: Arc<HostedReplica>,
        why: String,
        how: impl FnOnce(&HostedReplica, usize) -> BringBack,
    ) -> (PartitionId, Down) {
        let mut status = self.status_of(&replica);
        status.stopped = Some(why);
        let others = self.other_members(&replica);
        // Reported down from before it leaves the map until it is back in it, so a status
        // query never finds the partition missing in between.
        let mut down = Down::new(replica.topic_id, others, BringBack::Reopen, status);
        self.down
            .lock()
            .insert(replica.id.clone(), down.in_progress());
        self.replicas.write().remove(&replica.id);
        // Only `replica` holds it now.
        stop_replica(&replica, 1).await;
        // A quiet group this broker led: its followers are parked under a broker that stays
        // live, and would wait for this replica for ever.
        self.withdraw_quiet(&replica).await;
        down.how = how(&replica, others);
        (replica.id.clone(), down)
    }

    /// How many other brokers are members of `replica`'s Raft group.
    pub(super) fn other_members(&self, replica: &HostedReplica) -> usize {
        let me = self.config.id;
        replica
            .raft
            .member_ids()
            .iter()
            .filter(|m| **m != me)
            .count()
    }

    /// Tries again to bring back a replica that is down, unless it was started meanwhile or
    /// its topic is gone.
    async fn retry_down(&self, id: PartitionId) {
        let _changing = self.replicas_changing.lock().await;
        let Some(down) = ({
            let mut all = self.down.lock();
            let due = all
                .get(&id)
                .is_some_and(|d| d.next_attempt <= Instant::now());
            if due { all.remove(&id) } else { None }
        }) else {
            return;
        };
        let hosted = self.replicas.read().contains_key(&id);
        let wanted = self
            .catalog
            .read()
            .topic(&id.topic)
            .is_some_and(|t| t.id == down.topic_id);
        if self.closing.load(Ordering::Acquire) || hosted || !wanted {
            return;
        }
        self.bring_back(id, down).await;
    }

    /// One attempt to bring `id` back; on failure it stays down until its next attempt.
    /// Called with `replicas_changing` held.
    pub(super) async fn bring_back(&self, id: PartitionId, mut down: Down) {
        down.attempts += 1;
        self.down.lock().insert(id.clone(), down.in_progress());
        match self.reopen(&id, down.topic_id, down.others, down.how).await {
            Ok(replica) => {
                self.apply_topic_settings(&replica);
                self.replicas.write().insert(id.clone(), replica);
                self.down.lock().remove(&id);
                tracing::info!(partition = %id, attempts = down.attempts, how = ?down.how, "stopped replica brought back");
            }
            Err(e) => {
                let pause = retry_pause(down.attempts);
                tracing::error!(
                    partition = %id,
                    error = %e,
                    attempts = down.attempts,
                    retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "could not bring a stopped replica back"
                );
                down.status.stopped = Some(format!(
                    "{}; bringing it back failed {} times, last: {e}",
                    down.status.stopped.as_deref().unwrap_or("stopped"),
                    down.attempts
                ));
                down.next_attempt = Instant::now() + pause;
                self.down.lock().insert(id, down);
            }
        }
    }

    async fn reopen(
        &self,
        id: &PartitionId,
        topic_id: u64,
        others: usize,
        how: BringBack,
    ) -> Result<Arc<HostedReplica>> {
        let spec = self.replica_spec(id, topic_id);
        match how {
            BringBack::Reopen => open_or_rebuild_replica(others, spec).await,
            BringBack::Rebuild { vote, below } => {
                let target = spec.dir.clone();
                tokio::task::spawn_blocking(move || {
                    replace_with_empty_replica(&target, topic_id, vote, below)
                })
                .await
                .map_err(|e| Error::from(std::io::Error::other(e)))??;
                open_replica(spec).await
            }
        }
    }
}

/// Why a replica is rebuilt from its leader.
#[derive(Debug)]
pub(super) enum RebuildCause {
    /// The leader's log contradicts the entry at this index, which the replica holds as
    /// committed.
    Contradicted(u64),
    /// A read found this damage in the replica's files.
    Damaged(Error),
}

impl std::fmt::Display for RebuildCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebuildCause::Contradicted(index) => {
                write!(
                    f,
                    "the leader's log contradicts its committed entry {index}"
                )
            }
            RebuildCause::Damaged(e) => write!(f, "its files are damaged: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_from_one_second_up_to_the_cap() {
        let pauses: Vec<u64> = (1..=8).map(|n| retry_pause(n).as_secs()).collect();
        assert_eq!(pauses, vec![1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_pause(0), Duration::from_secs(1));
        assert_eq!(retry_pause(u32::MAX), RETRY_PAUSE_MAX);
    }
}
