//! Fetch, for both doors: which records a fetch of one or many partitions answers with, and
//! its long poll. The doors only translate: the native door asks for one partition, a Kafka
//! client for many.
//!
//! The rules are Kafka's (`ReplicaManager.readFromLocalLog`):
//!
//! - Partitions are read in the order asked. Each gets at most its own `max_bytes`, and at
//!   most what is left of the request's `max_bytes` after the partitions before it.
//! - The first batch of the first partition that has records is answered whole, however
//!   large (a client always makes progress); that is the only batch that may go past a limit.
//!   In any later partition, a first batch larger than what is left is not answered: the
//!   partition is answered with its marks and no records, and the client asks again.
//! - A partition whose replica is not here, whose offset is outside the committed log, or
//!   whose asker names another leader epoch is answered with that error alone.
//! - The long poll waits until the partitions together hold `min_bytes` of committed records
//!   past their offsets, until one of them can only be answered with an error, or until
//!   `max_wait`: a commit on *any* of them wakes it.

use std::time::Duration;

use futures_util::future::select_all;

use super::BrokerService;
use crate::error::{Error, Result};
use crate::node::HostedReplica;
use crate::node::write::{Fetched, read_committed};
use crate::security::acl::AclOperation;
use crate::segment::batch::Batch;
use crate::segment::format::FRAME_HEADER_LEN;
use crate::types::{Offset, PartitionId};

/// The longest a fetch waits for records, whatever it asks.
const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

/// One partition of a fetch.
pub(crate) struct PartitionFetch {
    pub(crate) partition: PartitionId,
    /// The first offset wanted.
    pub(crate) offset: Offset,
    /// This partition's bytes of batches, at most (but see the module's rules).
    pub(crate) max_bytes: usize,
    /// The leader epoch the asker knows (Kafka's `current_leader_epoch`), checked against the
    /// replica's term; `None`: not checked.
    pub(crate) current_epoch: Option<u64>,
}

/// A fetch: committed batches of one or more partitions.
pub(crate) struct Fetch {
    pub(crate) partitions: Vec<PartitionFetch>,
    /// The whole answer's bytes of batches, at most (but see the module's rules).
    pub(crate) max_bytes: usize,
    /// How long to wait for `min_bytes` (capped at [`FETCH_WAIT_MAX`]).
    pub(crate) max_wait: Duration,
    /// Bytes of batches worth answering for; 0 never waits.
    pub(crate) min_bytes: usize,
}

impl Fetch {
    /// A fetch of one partition (the native door's), with no epoch check.
    pub(crate) fn one(
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
        max_wait: Duration,
        min_bytes: usize,
    ) -> Fetch {
        Fetch {
            partitions: vec![PartitionFetch {
                partition,
                offset,
                max_bytes,
                current_epoch: None,
            }],
            max_bytes,
            max_wait,
            min_bytes,
        }
    }
}

/// The bytes a batch takes in an answer's budget: its frame.
fn batch_bytes(batch: &Batch) -> usize {
    batch.payload.len() + FRAME_HEADER_LEN
}

/// Refuses an asker whose leader epoch is not the replica's term.
pub(super) fn check_epoch(replica: &HostedReplica, asked: Option<u64>) -> Result<()> {
    let Some(asked) = asked else {
        return Ok(());
    };
    let current = replica.raft.term();
    if asked == current {
        return Ok(());
    }
    Err(Error::LeaderEpochMismatch {
        partition: replica.id.clone(),
        asked,
        current,
    })
}

/// A partition's marks, without reading its records: an offset outside the log is refused as
/// a read would refuse it.
fn marks(replica: &HostedReplica, offset: Offset) -> Result<Fetched> {
    let high_watermark = replica.committed_end();
    let log_start = replica.log_start();
    if offset > high_watermark || offset < log_start {
        return Err(Error::OffsetOutOfRange {
            requested: offset,
            start: log_start,
            end: high_watermark,
        });
    }
    Ok(Fetched {
        batches: Vec::new(),
        high_watermark,
        log_start,
    })
}

impl BrokerService {
    /// Reads committed batches of every partition of `request`, in its order, by the module's
    /// rules; one answer per partition. The answer's batches add up to at most
    /// [`fetch_bytes_max`](Self::fetch_bytes_max) plus one batch.
    pub(crate) fn fetch(&self, request: &Fetch) -> Vec<Result<Fetched>> {
        let mut left = self.fetch_bytes_max(request);
        let mut first = true;
        request
            .partitions
            .iter()
            .map(|p| {
                let read = self.fetch_partition(p, left, first);
                if let Ok(fetched) = &read {
                    let bytes: usize = fetched.batches.iter().map(batch_bytes).sum();
                    left = left.saturating_sub(bytes);
                    first &= fetched.batches.is_empty();
                }
                read
            })
            .collect()
    }

    /// [`fetch`](Self::fetch) answered with every partition's marks and no records (a fetch
    /// whose answer could not be given memory): the same errors, the same marks.
    pub(crate) fn fetch_marks(&self, request: &Fetch) -> Vec<Result<Fetched>> {
        let partitions = request.partitions.iter();
        partitions
            .map(|p| self.fetch_partition(p, 0, false))
            .collect()
    }

    /// One partition of a fetch with `left` bytes of the answer left; `first`: no partition
    /// before it had records, so its first batch is answered whole.
    fn fetch_partition(&self, p: &PartitionFetch, left: usize, first: bool) -> Result<Fetched> {
        self.authorize_topic(AclOperation::Read, &p.partition.topic)?;
        let replica = self.broker.replica(&p.partition)?;
        check_epoch(&replica, p.current_epoch)?;
        let max = p.max_bytes.min(left);
        if max == 0 && !first {
            return marks(&replica, p.offset);
        }
        let mut fetched = self.broker.read_replica(&replica, p.offset, max.max(1))?;
        let too_large = fetched
            .batches
            .first()
            .is_some_and(|b| batch_bytes(b) > max);
        if !first && too_large {
            fetched.batches.clear();
        }
        Ok(fetched)
    }

    /// The long poll: returns once the fetch's partitions hold `min_bytes` of committed
    /// batches from their offsets on, once one of them can only be answered with an error
    /// (an unknown partition, an offset out of range, another epoch), once `max_wait` passed,
    /// or when the broker shuts down. Waiting costs no CPU: it sleeps on the replicas' high
    /// watermarks, which each commit that moves one wakes, and holds no reference to a
    /// replica (a replica stopping ends the wait).
    pub(crate) async fn wait_for_fetch(&self, request: &Fetch) {
        if request.min_bytes == 0 || request.max_wait.is_zero() || request.partitions.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + request.max_wait.min(FETCH_WAIT_MAX);
        let mut stopping = self.broker.stopping.clone();
        if *stopping.borrow_and_update() {
            return;
        }
        let mut commits = Vec::with_capacity(request.partitions.len());
        for p in &request.partitions {
            if self
                .authorize_topic(AclOperation::Read, &p.partition.topic)
                .is_err()
            {
                return;
            }
            match self.broker.replica(&p.partition) {
                Ok(replica) => commits.push(replica.sm.subscribe()),
                Err(_) => return,
            }
        }
        // No more than one answer's worth is waited for (a client's `min_bytes` of 4 GiB would
        // otherwise be read again at each commit).
        let min_bytes = request.min_bytes.min(self.fetch_bytes_max(request)).max(1);
        // Bounded by the deadline.
        loop {
            if self.fetch_ready(request, min_bytes) {
                return;
            }
            let changed = select_all(commits.iter_mut().map(|c| Box::pin(c.changed())));
            tokio::select! {
                (changed, _, _) = changed => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
                // The broker is shutting down: answer now with what there is.
                _ = stopping.changed() => return,
            }
        }
    }

    /// Whether the fetch should be answered now: its partitions hold `min_bytes` of committed
    /// batches past their offsets, or one of them can only be answered with an error.
    fn fetch_ready(&self, request: &Fetch, min_bytes: usize) -> bool {
        let mut bytes = 0usize;
        for p in &request.partitions {
            let Ok(replica) = self.broker.replica(&p.partition) else {
                return true;
            };
            if check_epoch(&replica, p.current_epoch).is_err() {
                return true;
            }
            let high_watermark = replica.committed_end();
            if p.offset > high_watermark {
                return true;
            }
            if p.offset == high_watermark {
                continue;
            }
            if min_bytes == 1 {
                // Any committed record past the offset is enough: nothing to read.
                return true;
            }
            // Enough frames to hold what is still missing, and the batch that crosses it.
            let missing = min_bytes.saturating_sub(bytes);
            let look_ahead =
                missing.saturating_add(self.broker.config.log.batch_bytes_max as usize);
            match read_committed(&replica, p.offset, look_ahead) {
                Ok(batches) => {
                    bytes = bytes.saturating_add(batches.iter().map(batch_bytes).sum());
                    if bytes >= min_bytes {
                        return true;
                    }
                }
                Err(_) => return true,
            }
        }
        false
    }

    /// The most bytes of batches a fetch answer carries besides its one whole first batch:
    /// what it asked for, within the frame limit.
    pub(crate) fn fetch_bytes_max(&self, request: &Fetch) -> usize {
        request
            .max_bytes
            .min(self.broker.config.payload_bytes_max())
    }

    /// The memory a fetch answer may take, for an answer budget: its batches (what it may
    /// read, and the one batch that may go past it) and the frame's overhead.
    pub(crate) fn fetch_answer_bytes(&self, request: &Fetch) -> usize {
        let asked: usize = request
            .partitions
            .iter()
            .map(|p| p.max_bytes)
            .fold(0, usize::saturating_add);
        let one_batch = self.broker.config.log.batch_bytes_max as usize + FRAME_HEADER_LEN;
        self.fetch_bytes_max(request)
            .min(asked)
            .saturating_add(one_batch)
            .saturating_add(crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX as usize)
    }
}
