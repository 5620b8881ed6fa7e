//! Retention: each hosted partition's leader purges what its limits no longer keep.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

use super::{Broker, HostedReplica};

impl Broker {
    pub(crate) async fn enforce_retention(&self) -> Result<()> {
        let groups: Vec<Arc<HostedReplica>> = self.groups.read().values().cloned().collect();
        for group in groups {
            // The groups' committed offsets are kept whatever their age (Kafka compacts this
            // topic instead; replog does not compact yet).
            if group.id.topic == crate::group::OFFSETS_TOPIC {
                continue;
            }
            let Some(keep_from) = group.store.log().retention_point(crate::env::now_ms()) else {
                continue;
            };
            let upto = keep_from.saturating_sub(1);
            let applied = group.sm.last_applied().map(|l| l.index);
            if applied.is_none_or(|a| a < upto) {
                continue; // not applied here yet: purge later
            }
            let timeout = Duration::from_millis(self.config.request_timeout_ms);
            if let Err(reason) = group.raft.purge_through(upto, timeout).await {
                return Err(Error::Indeterminate {
                    partition: group.id.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}
