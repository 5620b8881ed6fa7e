//! [`Client::fetch`]: reading committed batches from a partition's leader or a named replica.

use std::net::SocketAddr;

use super::Client;
use crate::error::{Error, Result};
use crate::protocol::{FetchRequest, WireBatch, WireError};
use crate::segment::record::{Batch, Limits};
use crate::transport::frame::Op;
use crate::types::{Offset, PartitionId};

impl Client {
    /// Reads committed batches of a partition from `offset` on, from its leader (or, with
    /// `replica`, from that broker), at most `max_bytes` of them (at least one batch, if any),
    /// and never more than fits this client's `frame_bytes_max` or the broker's.
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`], [`Error::UnknownPartition`], [`Error::NoBrokerReachable`].
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: u32,
        replica: Option<SocketAddr>,
    ) -> Result<Vec<Batch>> {
        let id = PartitionId::new(topic, partition);
        // The answer must fit this client's frames (the broker keeps it within its own).
        let fits = self
            .config
            .frame_bytes_max
            .saturating_sub(crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX);
        let request = FetchRequest {
            partition: id.clone(),
            offset: offset.get(),
            max_bytes: max_bytes.min(fits),
        };
        let limits = Limits {
            record_bytes_max: self.config.record_bytes_max,
            batch_bytes_max: self.config.batch_bytes_max,
        };
        let mut targets: Vec<SocketAddr> = replica.into_iter().collect();
        let named = !targets.is_empty();
        if targets.is_empty() {
            if self.leader_addr(&id).is_none() {
                let _ = self.refresh(Some(topic)).await;
            }
            targets.extend(self.leader_addr(&id));
            targets.extend(self.candidates());
        }
        let mut tried = Vec::new();
        for addr in targets {
            match self
                .call::<_, Vec<WireBatch>>(addr, Op::Fetch, &request)
                .await
            {
                Ok(Ok(batches)) => {
                    return batches.into_iter().map(|b| b.into_batch(&limits)).collect();
                }
                // This broker hosts no replica of the partition: try the next.
                Ok(Err(WireError::NotLeader { .. })) if !named => {
                    tried.push(format!("{addr} (no replica)"));
                }
                Ok(Err(e)) => return Err(e.into_error(&id, offset.get())),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }
}
