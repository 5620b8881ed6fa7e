//! The broker's gauges (see `crate::metrics` for the list): every second, each hosted
//! replica's offsets and role, each follower's lag on the partitions this broker leads, and
//! the groups it coordinates. A quiet replica's gauges do not change until it wakes, so each
//! is set every [`QUIET_REPORT_ROUNDS`] seconds only (a tenth of them each second): ten
//! thousand quiet replicas cost a broker little CPU while idle, and each gauge is still set
//! well within the minute after which the exporter drops a gauge not set.

use std::sync::Arc;
use std::time::Duration;

use crate::group::OFFSETS_TOPIC;
use crate::types::{Offset, PartitionId};

use super::{Broker, HostedReplica};

/// How often the gauges are set.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A quiet replica's gauges are set once in this many rounds.
const QUIET_REPORT_ROUNDS: usize = 10;

impl Broker {
    /// Sets the gauges every [`REPORT_EVERY`] until shutdown.
    pub(super) async fn report_metrics(
        self: Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(REPORT_EVERY);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Ends at shutdown.
        for round in 0usize.. {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            let replicas: Vec<Arc<HostedReplica>> =
                self.replicas.read().values().cloned().collect();
            for replica in &replicas {
                let turn =
                    (replica.id.partition as usize + round).is_multiple_of(QUIET_REPORT_ROUNDS);
                if turn || !replica.raft.is_parked() {
                    self.report_replica(replica);
                }
            }
            self.report_groups();
        }
    }

    fn report_replica(&self, replica: &HostedReplica) {
        let state = replica.raft.state();
        let log = replica.store.log();
        let leads = state.leader == Some(self.config.id);
        crate::metrics::replica(
            &replica.id,
            log.end_offset().get(),
            replica.sm.high_watermark().min(log.end_offset().get()),
            log.start_offset().get(),
            leads,
        );
        let (Some(members), true) = (state.members, leads) else {
            return;
        };
        let last = state.last_log_index.unwrap_or(0);
        for (id, m) in members {
            if id == self.config.id {
                continue;
            }
            let matched = m.matched.unwrap_or(0);
            let entries = super::describe::entries_behind(last, m.matched);
            let bytes = if entries == 0 {
                0
            } else {
                log.bytes_after(matched)
            };
            crate::metrics::follower_lag(&replica.id, id, entries, bytes, m.ack_age);
        }
    }

    /// Each coordinated group's size and generation, and its lag on the partitions this
    /// broker hosts.
    fn report_groups(&self) {
        for shard in self.coordinator.shards() {
            let groups = shard.groups.lock();
            for (name, g) in groups.iter() {
                if name.is_empty() {
                    continue;
                }
                crate::metrics::group(name, g.members.len(), g.generation);
                for ((topic, partition), committed) in &g.offsets {
                    if topic == OFFSETS_TOPIC {
                        continue;
                    }
                    let id = PartitionId::new(topic.clone(), *partition);
                    let Some(replica) = self.replicas.read().get(&id).cloned() else {
                        continue;
                    };
                    let hw = Offset(replica.sm.high_watermark());
                    crate::metrics::group_lag(name, &id, hw.get().saturating_sub(committed.offset));
                }
            }
        }
    }
}
