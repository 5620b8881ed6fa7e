//! The coordinators' timers: sessions that end, rebalances that complete by their deadline,
//! groups that rebalance because a topic they consume grew, emptied groups written, and
//! shards of partitions this broker no longer leads dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{GroupCoordinator, Host};
use crate::group::coordinator::Shard;
use crate::group::state::Snapshot;

/// How often the coordinators' timers run (session expiry, rebalance deadlines).
const TICK: Duration = Duration::from_millis(100);

impl GroupCoordinator {
    /// The coordinators' timers, until shutdown: every [`TICK`], each shard's groups move
    /// time on (sessions end, rebalances complete), emptied groups are written, groups with
    /// nothing left are forgotten, and shards of partitions this broker no longer leads are
    /// dropped (their waiting requests are answered `NotCoordinator`).
    pub(crate) async fn run_timers<H: Host>(
        self: Arc<Self>,
        host: Arc<H>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(TICK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut counts = host.partition_counts();
        // Ends at shutdown.
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            // Topics that grew since the last tick: the groups that consume them rebalance.
            let now_counts = host.partition_counts();
            let grew: Vec<&String> = now_counts
                .iter()
                .filter(|(t, n)| counts.get(*t).is_some_and(|before| before < n))
                .map(|(t, _)| t)
                .collect();
            for shard in self.shards.all() {
                if !self.still_leads(host.as_ref(), &shard) {
                    self.shards.drop_shard(&shard);
                    continue;
                }
                let emptied = self.tick_shard(&shard, &grew);
                if emptied.is_empty() {
                    continue;
                }
                let (me, host) = (Arc::clone(&self), Arc::clone(&host));
                tokio::spawn(async move { me.write_emptied(host.as_ref(), &shard, emptied).await });
            }
            counts = now_counts;
        }
    }

    /// Moves time on for each of the shard's groups (the topics in `grew` have new
    /// partitions), and forgets the groups with nothing left. Returns the groups this emptied,
    /// with their snapshots, to be written.
    fn tick_shard(&self, shard: &Shard, grew: &[&String]) -> Vec<(String, Snapshot)> {
        let limits = &self.limits;
        let now = Instant::now();
        let mut groups = shard.groups.lock();
        let mut out = Vec::new();
        for (name, g) in groups.iter_mut() {
            for topic in grew {
                if g.topic_grew(topic, limits, now) {
                    tracing::info!(group = %name, %topic,
                        "group rebalancing: a topic it consumes has new partitions");
                }
            }
            let ticked = g.tick(limits, now);
            for member in ticked.expired {
                tracing::info!(group = %name, %member, "group member's session expired");
            }
            out.extend(ticked.emptied.map(|s| (name.clone(), s)));
        }
        groups.retain(|_, g| !g.is_forgettable());
        out
    }

    /// Writes the snapshots of groups the timers emptied, if this broker still leads the
    /// shard's partition in its term.
    async fn write_emptied<H: Host>(
        &self,
        host: &H,
        shard: &Shard,
        emptied: Vec<(String, Snapshot)>,
    ) {
        let Some((replica, _term)) = host.leading(shard.partition) else {
            return;
        };
        let _writer = shard.writer.lock().await;
        if self.may_write(host, shard).is_err() {
            return;
        }
        for (name, snapshot) in emptied {
            if let Err(e) = self
                .write_snapshot(host, &replica, shard, &name, &snapshot)
                .await
            {
                tracing::debug!(group = %name, error = ?e, "writing an emptied group failed");
            }
        }
    }
}
