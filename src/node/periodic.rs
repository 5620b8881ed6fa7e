//! The broker's periodic work, each on a task of its own until shutdown: retention and
//! compaction every `retention_check_interval`, leadership handed back to preferred replicas
//! every `leader_imbalance_check_interval`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Broker, Node};

impl Node {
    /// Hands leadership back to preferred replicas every `leader_imbalance_check_interval`
    /// until shutdown, if `auto_leader_rebalance` is on.
    pub(super) fn spawn_leader_balance(
        &self,
        shutdown: watch::Receiver<bool>,
    ) -> Option<JoinHandle<()>> {
        let config = &self.broker.config;
        if !config.auto_leader_rebalance {
            return None;
        }
        let period = config.leader_imbalance_check_interval;
        self.every(period, shutdown, |broker| async move {
            broker.rebalance_leaders().await;
        })
    }

    /// Applies retention every `retention_check_interval` until shutdown.
    pub(super) fn spawn_retention(
        &self,
        shutdown: watch::Receiver<bool>,
    ) -> Option<JoinHandle<()>> {
        let period = self.broker.config.retention_check_interval;
        self.every(period, shutdown, |broker| async move {
            if let Err(e) = broker.enforce_retention().await {
                tracing::warn!(error = %e, "retention postponed");
            }
        })
    }

    /// Runs `task` every `period` (never for a zero period), the first time after one period,
    /// until shutdown: the task that does, if any.
    fn every<F, Fut>(
        &self,
        period: Duration,
        mut shutdown: watch::Receiver<bool>,
        task: F,
    ) -> Option<JoinHandle<()>>
    where
        F: Fn(Arc<Broker>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        if period.is_zero() {
            return None;
        }
        let broker = Arc::clone(&self.broker);
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            // Ends at shutdown.
            loop {
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = tick.tick() => task(Arc::clone(&broker)).await,
                }
            }
        }))
    }
}
