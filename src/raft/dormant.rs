//! Dormant replicas: a replica whose Raft group has been quiet here for
//! `NodeConfig::dormant_after` drops its openraft member (its core task, queues, channels and
//! statistics, most of an idle replica's memory) and keeps what replog owns: the log store,
//! the state machine with its producer table, its quiet state, and the member's last metrics,
//! which answer every question about the group while it sleeps (leader, term, members).
//!
//! A dormant replica is still parked (quiet), and is built again, through one accessor
//! ([`Replica::awake`]), by whatever needs a running member: a write, an admin change or a
//! read barrier on a leader, a Raft message from a peer, a broker's liveness (a silent leader's
//! survivors campaign, a returning broker's leader catches it up), a leadership transfer, or
//! retention with a log to purge. CockroachDB builds a range's Raft group lazily the same way.
//!
//! ## Why waking one is the replica that went dormant
//!
//! Only a parked member goes dormant, and parking already required that every live member
//! holds the leader's log, committed and applied. Nothing writes its store or state machine
//! while it sleeps, so the member built again reads the vote, log and applied state it had.
//!
//! - A follower comes back a follower, still parked (no timers): what woke it then wakes its
//!   timers as it would a parked member's (a leader's append, a campaign).
//! - A leader comes back the leader of the same term, without an election (openraft's
//!   `enable_leader_restore`), and awake: openraft's restored leader probes its followers at
//!   once, which wakes them, so it must heartbeat too. A *restarted* leader may not do this
//!   (`Replica::start`: its producer table is empty and it could append a resent batch
//!   twice); a dormant one kept its producer table and its record of proposed batches, so that
//!   reason does not hold. Raft's safety does not rest on it either: a member restored as
//!   leader of term T is the one leader term T ever had, and if the others elected a leader of
//!   a later term meanwhile, the quorum that did refuses term T's appends, so a deposed
//!   dormant leader commits nothing (its first write waits for a lease no quorum renews, as a
//!   deposed quiet leader's does).
//!
//! ## One member per store, at most
//!
//! Building and dropping are serialized per replica (`waking`), and a member is dropped only
//! after every use of it has ended (`InUse` counts them under the same lock that swaps the
//! member out), then shut down before anything may build the next one: two openraft cores
//! never run over one log store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;

use super::replica::Replica;
use super::state_machine::StateMachine;
use super::types::C;

/// Waits, at most `limit`, until `member`'s metrics show the state it restored at start: its
/// membership, and the leadership it restored if `leading` (or that it lost it already).
async fn restored(member: &Member, leading: bool, limit: Duration) {
    let mut metrics = member.metrics();
    let me = metrics.borrow_watched().id;
    let _ = tokio::time::timeout(limit, async {
        // Bounded by the timeout around it.
        loop {
            {
                let m = metrics.borrow_watched();
                let members = m.membership_config.membership().nodes().next().is_some();
                let other = m.current_leader.is_some_and(|l| l != me);
                let led = m.state == openraft::ServerState::Leader || other;
                if members && (!leading || led) {
                    return;
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
}

/// The openraft member of a running replica.
pub(crate) type Member = openraft::Raft<C, StateMachine>;

/// A replica's openraft member, or what stays of it while the replica is dormant.
pub(super) enum Life {
    /// Running.
    Awake(Member),
    /// Dropped: its metrics as it went (a few hundred bytes, against the member's 140 KiB).
    Dormant(Box<openraft::RaftMetrics<C>>),
}

/// One use of a replica's running member. While any is held the member is not dropped.
pub(crate) struct InUse<'a> {
    member: Member,
    users: &'a std::sync::atomic::AtomicUsize,
}

impl std::ops::Deref for InUse<'_> {
    type Target = Member;

    fn deref(&self) -> &Member {
        &self.member
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Replica {
    /// The running member, if the replica is awake; `None` while it is dormant.
    pub(crate) fn awake_now(&self) -> Option<InUse<'_>> {
        let life = self.life.read();
        match &*life {
            Life::Awake(member) => {
                // Counted under the read lock: `go_dormant` checks the count under the write
                // lock, so a use either is counted before it looks or sees it dormant.
                self.users.fetch_add(1, Ordering::AcqRel);
                Some(InUse {
                    member: member.clone(),
                    users: &self.users,
                })
            }
            Life::Dormant(_) => None,
        }
    }

    /// Whether this replica is dormant now.
    pub(crate) fn is_dormant(&self) -> bool {
        matches!(&*self.life.read(), Life::Dormant(_))
    }

    /// The running member, built again first if the replica is dormant (a leader comes back
    /// the leader of its term, and awake; a follower comes back parked). Fails only once the
    /// replica was shut down, or if openraft cannot start over its store.
    pub(crate) async fn awake(&self) -> Result<InUse<'_>, String> {
        if let Some(member) = self.awake_now() {
            return Ok(member);
        }
        let _one = self.waking.lock().await;
        if let Some(member) = self.awake_now() {
            return Ok(member);
        }
        if self.shut.load(Ordering::Acquire) {
            return Err("the partition's replica was shut down".into());
        }
        if let Some(why) = self.stopped() {
            return Err(format!("the partition's Raft member stopped: {why}"));
        }
        let leading = self.read_metrics(|m| super::replica::leads(m, m.id));
        let member = match self.build(true, leading).await {
            Ok(member) => member,
            Err(e) => {
                // As a member whose core stopped: it leads nothing from now on (metadata sends
                // no client to it), and supervision opens it again from its files.
                let why = format!("building the Raft member again after dormancy: {e}");
                tracing::error!(partition = %self.recipe.partition, reason = %why, "the replica's raft member stopped");
                if let Life::Dormant(metrics) = &mut *self.life.write() {
                    metrics.running_state = Err(openraft::errors::Fatal::Stopped);
                }
                self.set_stopped(super::replica::Stopped::NotBuilt(e.to_string()));
                return Err(format!(
                    "the partition's Raft member did not start again: {why}"
                ));
            }
        };
        // It comes back as it went, parked: no timers until something wakes them.
        let config = member.runtime_config();
        config.tick(false);
        config.heartbeat(false);
        config.elect(self.elections.load(Ordering::Acquire));
        // Its metrics say what it restored once its core has started: until then they are a
        // blank member's (no leader, term 0, no members), and neither a write's wait for the
        // lease nor a survivor's rank among the voters may read those.
        restored(&member, leading, self.lease_wait).await;
        *self.life.write() = Life::Awake(member.clone());
        tracing::debug!(partition = %self.recipe.partition, broker = self.recipe.id, leading, "dormant replica woken");
        if leading {
            // Its followers hear it at once (openraft probes them when it restores a leader),
            // and wake: so must it, or their timers would run out under a silent leader. Its
            // writes wait for the lease a quorum renews (`Replica::wake_to_write`).
            self.quiet.wake_leader(self.recipe.id, &member);
        }
        self.awake_now()
            .ok_or_else(|| "the partition's replica went dormant again at once".into())
    }

    /// Drops this replica's running member if it has been parked for `after` and nothing uses
    /// it. Returns whether it went dormant.
    pub(crate) async fn go_dormant(&self, after: Duration) -> bool {
        let Ok(_one) = self.waking.try_lock() else {
            return false;
        };
        // The quiet state's lock first, then `life`: the order parking takes them in.
        let member = self.quiet.while_parked_for(after, || {
            let mut life = self.life.write();
            let Life::Awake(member) = &*life else {
                return None;
            };
            if self.users.load(Ordering::Acquire) != 0 || self.stopped().is_some() {
                return None;
            }
            let metrics = member.metrics().borrow_watched().clone();
            let member = member.clone();
            *life = Life::Dormant(Box::new(metrics));
            Some(member)
        });
        let Some(member) = member else {
            return false;
        };
        // Still under `waking`: nothing builds a member over the store before this one ended.
        if let Err(e) = member.shutdown().await {
            tracing::warn!(partition = %self.recipe.partition, error = %e, "raft shutdown failed");
        }
        true
    }

    /// Stops the Raft group member for good: a dormant replica is not built again after this.
    pub(crate) async fn shutdown(&self) {
        let _one = self.waking.lock().await;
        self.shut.store(true, Ordering::Release);
        let member = {
            let mut life = self.life.write();
            match &mut *life {
                Life::Awake(member) => Some(member.clone()),
                Life::Dormant(metrics) => {
                    // As a stopped member's metrics read: it leads nothing.
                    metrics.running_state = Err(openraft::errors::Fatal::Stopped);
                    metrics.state = openraft::ServerState::Shutdown;
                    None
                }
            }
        };
        if let Some(member) = member
            && let Err(e) = member.shutdown().await
        {
            tracing::warn!(error = %e, "raft shutdown failed");
        }
    }

    /// Reads the Raft group's metrics in place, the running member's or, while dormant, those
    /// it went dormant with: a clone would copy their maps for the few fields a caller wants,
    /// per replica. `read` must take no lock (openraft's core waits to publish metrics while
    /// the borrow lasts).
    pub(super) fn read_metrics<T>(&self, read: impl FnOnce(&openraft::RaftMetrics<C>) -> T) -> T {
        let member = {
            let life = self.life.read();
            match &*life {
                Life::Awake(member) => member.metrics(),
                Life::Dormant(metrics) => return read(metrics),
            }
        };
        let m = member.borrow_watched();
        read(&m)
    }
}
