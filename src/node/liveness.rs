//! One liveness signal per broker pair: every heartbeat interval each broker tells every
//! other that it is alive (`Op::BrokerHeartbeat`, protocol version 3), and only while its own
//! disk answers: a write and sync of a small file in its data directory must have finished
//! within the session timeout, so that a broker whose disk stalled stops claiming liveness
//! and the others take over what it led (it hands over what it leads itself too: its Raft
//! heartbeats need no disk). A broker not heard from for the session timeout is
//! *silent* in this broker's view; the view is local and advisory (Raft's votes, not this
//! view, decide who leads), and it drives three things:
//!
//! - the Raft groups a silent broker led elect a new leader (`node/quiet.rs`): the first
//!   survivor's member campaigns at once, quiet or not, and the others wake, staggered by
//!   rank and a few at a time. The session outlasts openraft's leader lease (one and a half
//!   election timeouts), so that the voters grant that campaign;
//! - a quiet group's member refuses votes against a leader whose broker it still hears
//!   (`raft/quiet.rs`; heard within three quarters of the session), as its own election
//!   timer would have, had it run;
//! - a member on a broker that is down is left out of its group's quiet, and out of a quiet
//!   group's in-sync replicas (`node/quiet.rs`, `node/describe.rs`).
//!
//! Silence is judged only over time this broker was there to listen: a process that did not
//! run for a while (stopped with SIGSTOP, a paused virtual machine, starved of CPU) finds
//! every other broker unheard, and its own disk probe overdue, through no fault of theirs or
//! the disk's. When its liveness loop wakes that late, it says so once, and counts no broker
//! silent until it has listened for a whole session again; a disk probe under way gets a
//! session from then too, but no more than two from its start (a stalled disk can starve the
//! process, so that it seems to come back from pauses again and again).
//!
//! A broker that restarts says so with a new incarnation (its start time): this broker then
//! wakes the quiet groups it leads with a replica there, so that the restarted replica hears
//! its leader before its own election timer runs out, and the quiet groups the restarted
//! broker led, whose leadership ended with its process.
//!
//! Wire: request `BrokerHeartbeat { from: u64, incarnation: u64 }`, answer
//! `Result<u64, WireError>` (the answering broker's incarnation), both postcard. Served only to
//! a connection that may speak for broker `from` (`peer_gate.rs`), and refused while the
//! answering broker's own disk does not answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::transport::frame::Op;
use crate::types::NodeId;

use super::Broker;

/// The file the disk probe writes and syncs, in the data directory.
const PROBE_FILE: &str = "liveness-probe";

/// How many times per heartbeat interval a broker looks for brokers that turned silent.
const SILENCE_CHECKS: u32 = 4;

/// A heartbeat's body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct BrokerHeartbeat {
    pub(crate) from: NodeId,
    pub(crate) incarnation: u64,
}

/// What this broker knows of the others' liveness, and of its own disk.
#[derive(Debug)]
pub(super) struct Liveness {
    /// This process's incarnation: its start, in milliseconds since the Unix epoch.
    pub(super) incarnation: u64,
    /// A broker not heard from for this long is silent.
    pub(super) session: Duration,
    heard: parking_lot::Mutex<HashMap<NodeId, Heard>>,
    /// The disk probe's state.
    disk: parking_lot::Mutex<DiskProbe>,
    /// Since when this broker has been listening without a pause: its start, or its return
    /// from the last pause. Nobody is silent for less than a session from here.
    listening_since: parking_lot::Mutex<Instant>,
}

/// The write-and-sync probe of the data directory.
#[derive(Debug)]
struct DiskProbe {
    /// When a probe last succeeded (this process's start, at first).
    ok_at: Instant,
    /// When the probe under way was started, if one is.
    started: Option<Instant>,
    /// Whether the last probe that ended failed.
    failed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Heard {
    at: Instant,
    incarnation: u64,
    /// Whether this broker was counted silent (and its led groups woken) since it was last
    /// heard.
    silent: bool,
}

/// What hearing from a broker changed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum News {
    /// Nothing: it was live, and is the same process.
    Nothing,
    /// Heard for the first time, or again after it was silent.
    Back,
    /// Another process than before: it restarted.
    Restarted,
}

impl Liveness {
    pub(super) fn new(heartbeat: Duration, election_timeout: Duration) -> Liveness {
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(1);
        Liveness {
            incarnation,
            session: (heartbeat * 8).max(election_timeout * 2),
            heard: parking_lot::Mutex::default(),
            disk: parking_lot::Mutex::new(DiskProbe {
                ok_at: Instant::now(),
                started: None,
                failed: false,
            }),
            listening_since: parking_lot::Mutex::new(Instant::now()),
        }
    }

    /// How late the liveness loop may wake before this process counts as having been away:
    /// a quarter of the session (two heartbeats or more).
    pub(super) fn pause_bound(&self) -> Duration {
        self.session / 4
    }

    /// This process was not running for a while (its liveness loop woke later than
    /// [`pause_bound`](Self::pause_bound)): what it did not hear in that time from the other
    /// brokers says nothing about them, and a disk probe that did not end in that time says
    /// little about the disk. Silence is judged again from now; see
    /// [`disk_answers`](Self::disk_answers) for the probe.
    pub(super) fn resumed(&self) {
        *self.listening_since.lock() = Instant::now();
    }

    /// Whether broker `id` was heard from within the session timeout.
    pub(super) fn is_live(&self, id: NodeId) -> bool {
        self.heard
            .lock()
            .get(&id)
            .is_some_and(|h| h.at.elapsed() < self.session)
    }

    /// Whether broker `id` was heard from within three quarters of the session timeout: a
    /// quiet member refuses votes against a leader on a broker it hears. Shorter than the
    /// session, since a survivor campaigns as soon as that broker is silent in its view, and
    /// the other survivors heard it last at about the same time: they must not still count it
    /// live then. Still six heartbeats or more.
    pub(super) fn hears(&self, id: NodeId) -> bool {
        let window = self.session - self.session / 4;
        self.heard
            .lock()
            .get(&id)
            .is_some_and(|h| h.at.elapsed() < window)
    }

    /// Records that broker `id`, process `incarnation`, is alive now.
    pub(super) fn heard_from(&self, id: NodeId, incarnation: u64) -> News {
        let mut heard = self.heard.lock();
        let now = Instant::now();
        let news = match heard.get(&id) {
            None => News::Back,
            Some(h) if h.incarnation != incarnation => News::Restarted,
            Some(h) if h.silent || h.at.elapsed() >= self.session => News::Back,
            Some(_) => News::Nothing,
        };
        heard.insert(
            id,
            Heard {
                at: now,
                incarnation,
                silent: false,
            },
        );
        news
    }

    /// The brokers that turned silent since the last call (each reported once per silence).
    pub(super) fn newly_silent(&self) -> Vec<NodeId> {
        let listening_since = *self.listening_since.lock();
        let mut heard = self.heard.lock();
        heard
            .iter_mut()
            .filter(|(_, h)| !h.silent && h.at.max(listening_since).elapsed() >= self.session)
            .map(|(id, h)| {
                h.silent = true;
                *id
            })
            .collect()
    }

    /// Whether this broker's disk answers: no probe has been under way for a session, and the
    /// probes have not been failing for one.
    ///
    /// A probe's session counts from this process's return if it was away since the probe
    /// began (a stopped process's probe ends the moment it runs again), but a probe under way
    /// for two sessions is stalled whatever the pauses: a disk that stalls can starve the
    /// process's threads too (writers held back by the kernel's dirty-page throttling), so that
    /// the liveness loop wakes late, again and again, while the disk is what is wrong.
    pub(super) fn disk_answers(&self) -> bool {
        let listening_since = *self.listening_since.lock();
        let disk = self.disk.lock();
        let stalled = disk.started.is_some_and(|started| {
            started.max(listening_since).elapsed() >= self.session
                || started.elapsed() >= self.session * 2
        });
        let failing = disk.failed && disk.ok_at.elapsed() >= self.session;
        !(stalled || failing)
    }
}

impl Broker {
    /// Every heartbeat interval until shutdown: probes the disk and tells every other broker
    /// that speaks protocol version 3 that this one is alive (while the disk answers). Four
    /// times as often, acts on the brokers that turned silent, so that their groups elect
    /// within a quarter of a heartbeat of the session's end.
    pub(super) async fn run_liveness(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(self.config.heartbeat_interval / SILENCE_CHECKS);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut was_answering = true;
        // Ends at shutdown.
        for n in 0u64.. {
            tokio::select! {
                _ = shutdown.changed() => break,
                at = tick.tick() => {
                    // `at` is when the tick was due.
                    let late = tokio::time::Instant::now().saturating_duration_since(at);
                    if late > self.liveness.pause_bound() {
                        tracing::warn!(
                            ?late,
                            "this process did not run for a while (stopped, or starved of CPU): \
                             no broker counts as silent before a whole session of listening"
                        );
                        self.liveness.resumed();
                    }
                }
            }
            if n.is_multiple_of(u64::from(SILENCE_CHECKS)) {
                self.probe_disk();
                let answering = self.liveness.disk_answers();
                if answering != was_answering {
                    was_answering = answering;
                    if answering {
                        tracing::info!(
                            "the data directory answers again: telling the other brokers this one is alive"
                        );
                    } else {
                        tracing::error!(
                            within = ?self.liveness.session,
                            "the data directory did not finish a write and sync: no longer telling the other brokers this one is alive"
                        );
                        self.hand_off_while_disk_stalls();
                    }
                }
                if answering {
                    self.send_heartbeats();
                }
            }
            for id in self.liveness.newly_silent() {
                self.broker_turned_silent(id);
            }
        }
    }

    /// This broker's disk stopped answering: it hands over every partition it leads, as for a
    /// controlled shutdown, a few at a time. Its Raft heartbeats need no disk, so they would
    /// keep its followers from electing a leader that can write, whatever liveness says.
    fn hand_off_while_disk_stalls(self: &Arc<Self>) {
        let me = self.config.id;
        let timeout = self.config.election_timeout;
        let led: Vec<Arc<super::HostedReplica>> = self
            .replicas
            .read()
            .values()
            .filter(|r| r.raft.leader() == Some(me))
            .cloned()
            .collect();
        if led.is_empty() {
            return;
        }
        tokio::spawn(async move {
            let mut handed = 0;
            for batch in led.chunks(64) {
                let done = futures_util::future::join_all(
                    batch.iter().map(|r| r.raft.hand_off(me, timeout)),
                )
                .await;
                handed += done.iter().flatten().count();
            }
            tracing::warn!(
                partitions = handed,
                of = led.len(),
                "handed over the partitions led here while the data directory does not answer"
            );
        });
    }

    /// Starts a write-and-sync of the probe file, unless one is still running.
    fn probe_disk(&self) {
        {
            let mut disk = self.liveness.disk.lock();
            if disk.started.is_some() {
                return;
            }
            disk.started = Some(Instant::now());
        }
        let path = self.config.data_dir.join(PROBE_FILE);
        let liveness = Arc::clone(&self.liveness);
        // The logs' own faults (tests): a disk stalled for them is stalled for the probe (their
        // armed errors are for the logs alone).
        let faults = self.env.disk_faults();
        tokio::task::spawn_blocking(move || {
            let written = (|| -> std::io::Result<()> {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(true)
                    .open(&path)?;
                file.write_all(&liveness.incarnation.to_le_bytes())?;
                faults.wait_if_stalled(crate::env::FaultPoint::Sync)?;
                file.sync_data()
            })();
            let mut disk = liveness.disk.lock();
            disk.started = None;
            disk.failed = written.is_err();
            match written {
                Ok(()) => disk.ok_at = Instant::now(),
                Err(e) => {
                    tracing::debug!(error = %e, "the liveness probe of the data directory failed")
                }
            }
        });
    }

    /// One heartbeat to every other broker of the cluster that speaks version 3, each on a
    /// task of its own (a slow broker delays no other's).
    fn send_heartbeats(self: &Arc<Self>) {
        let me = self.config.id;
        let body = match crate::transport::body::encode(&BrokerHeartbeat {
            from: me,
            incarnation: self.liveness.incarnation,
        }) {
            Ok(body) => body,
            Err(_) => return,
        };
        // The configured peers too: a broker starting has not applied its metadata log yet.
        let mut brokers: std::collections::BTreeSet<NodeId> =
            self.catalog.read().brokers().into_iter().collect();
        brokers.extend(self.config.peers.keys().copied());
        for id in brokers.into_iter().filter(|id| *id != me) {
            let Some(peer) = self.peers.get(id, true) else {
                continue;
            };
            if self
                .peers
                .live_version(id)
                .is_some_and(|v| v < Op::BrokerHeartbeat.since())
            {
                continue;
            }
            let (broker, body) = (Arc::clone(self), body.clone());
            let timeout = self.liveness.session / 2;
            tokio::spawn(async move {
                let Ok(answer) = broker
                    .peers
                    .call(&peer, id, Op::BrokerHeartbeat, body, timeout)
                    .await
                else {
                    return;
                };
                if let Ok(Ok(incarnation)) =
                    postcard::from_bytes::<Result<u64, crate::protocol::WireError>>(&answer)
                {
                    broker.heard(id, incarnation);
                }
            });
        }
    }

    /// Serves a peer's heartbeat (`body`): records it, and answers with this broker's
    /// incarnation, unless this broker's disk does not answer.
    pub(super) fn serve_heartbeat(
        self: &Arc<Self>,
        heartbeat: BrokerHeartbeat,
    ) -> Result<u64, crate::protocol::WireError> {
        if !self.liveness.disk_answers() {
            return Err(crate::protocol::WireError::Other(
                "this broker's data directory does not answer".into(),
            ));
        }
        self.heard(heartbeat.from, heartbeat.incarnation);
        Ok(self.liveness.incarnation)
    }

    /// Records that broker `id` is alive, and acts on what that changes.
    fn heard(self: &Arc<Self>, id: NodeId, incarnation: u64) {
        match self.liveness.heard_from(id, incarnation) {
            News::Nothing => {}
            News::Back => self.broker_back(id),
            News::Restarted => {
                tracing::info!(broker = id, "peer broker restarted");
                self.broker_turned_silent(id);
                self.broker_back(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_is_back_once_silent_once_and_restarted_when_its_incarnation_changes() {
        let liveness = Liveness::new(Duration::from_millis(5), Duration::from_millis(10));
        assert_eq!(liveness.session, Duration::from_millis(40));
        assert!(!liveness.is_live(2), "never heard");
        assert_eq!(liveness.heard_from(2, 7), News::Back);
        assert_eq!(liveness.heard_from(2, 7), News::Nothing);
        assert!(liveness.is_live(2));
        assert!(liveness.newly_silent().is_empty());
        let deadline = Instant::now() + Duration::from_secs(10);
        // Bounded by the deadline: the session timeout is 40 ms.
        while liveness.is_live(2) {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(liveness.newly_silent(), vec![2]);
        assert!(
            liveness.newly_silent().is_empty(),
            "reported once per silence"
        );
        assert_eq!(liveness.heard_from(2, 7), News::Back);
        assert_eq!(liveness.heard_from(2, 8), News::Restarted);
        assert_eq!(liveness.heard_from(2, 8), News::Nothing);
    }

    /// Back from a pause, a broker counts nobody silent, and a disk probe under way not
    /// stalled, until it has listened for a whole session: what it missed while away says
    /// nothing about them.
    #[test]
    fn a_process_back_from_a_pause_judges_silence_only_over_time_it_listened() {
        let liveness = Liveness::new(Duration::from_millis(5), Duration::from_millis(10));
        assert_eq!(liveness.heard_from(2, 7), News::Back);
        liveness.disk.lock().started = Some(Instant::now());
        let deadline = Instant::now() + Duration::from_secs(10);
        // Bounded by the deadline: the session timeout is 40 ms. Nobody polls meanwhile, as
        // nobody does in a stopped process.
        while liveness.is_live(2) || liveness.disk_answers() {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        liveness.resumed();
        assert!(
            liveness.newly_silent().is_empty(),
            "not silent: unheard while away"
        );
        assert!(
            liveness.disk_answers(),
            "not stalled: its probe had no time to run"
        );
        // Bounded by the deadline.
        let silent = loop {
            let silent = liveness.newly_silent();
            if !silent.is_empty() || Instant::now() >= deadline {
                break silent;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            silent,
            vec![2],
            "silent once a whole session passed unheard"
        );
    }

    /// A probe that never ends is a stalled disk within two sessions, however often the
    /// process seems to come back from a pause (a stalled disk can starve its threads), and
    /// a probe that fails is a failing disk once no probe succeeded for a session.
    #[test]
    fn a_stalled_or_failing_disk_is_found_whatever_the_pauses() {
        let liveness = Liveness::new(Duration::from_millis(5), Duration::from_millis(10));
        let started = Instant::now();
        liveness.disk.lock().started = Some(started);
        let deadline = started + Duration::from_secs(10);
        // Bounded by the deadline: two sessions are 80 ms.
        while liveness.disk_answers() {
            assert!(Instant::now() < deadline);
            liveness.resumed();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            started.elapsed() >= liveness.session * 2,
            "not before two sessions"
        );
        // The probe ends in failure: failing from then on, the last success being old.
        {
            let mut disk = liveness.disk.lock();
            disk.started = None;
            disk.failed = true;
        }
        assert!(!liveness.disk_answers(), "failing");
        // A success ends it.
        {
            let mut disk = liveness.disk.lock();
            disk.failed = false;
            disk.ok_at = Instant::now();
        }
        assert!(liveness.disk_answers());
    }
}
