//! The state machine of a partition: what "applied" means for a log.
//!
//! Applying a batch does not copy its records anywhere (they already sit in the log); it moves
//! the high watermark, the offset below which records are committed, and records membership.
//! It also keeps the idempotent producers' last batches ([`ProducerTable`]). A snapshot is this
//! metadata only (JSON; a few hundred bytes plus about 150 per producer): the data is the log
//! itself.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine, Snapshot};
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StoredMembership};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::raft::producers::{ProducerTable, SeqBatch};
use crate::raft::storage::LogStore;
use crate::raft::types::{AppendResponse, C, LogId};

/// The replicated state of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionState {
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: StoredMembershipOf<C>,
    /// The high watermark: every record below this offset is committed.
    pub(crate) next_offset: u64,
    /// The last batches of each idempotent producer (absent in snapshots of replog 0.1).
    #[serde(default)]
    pub(crate) producers: ProducerTable,
    /// Records before this offset are deleted (Kafka's DeleteRecords), whatever segments
    /// still hold them (absent in older snapshots: 0).
    #[serde(default)]
    pub(crate) log_start: u64,
}

/// A snapshot as openraft passes it around: metadata plus our encoded [`PartitionState`].
type CurrentSnapshot = SnapshotOf<C, Vec<u8>>;

/// The state machine handed to openraft; clones share state.
#[derive(Clone, Debug)]
pub(crate) struct StateMachine {
    store: LogStore,
    state: Arc<Mutex<PartitionState>>,
    current: Arc<Mutex<Option<CurrentSnapshot>>>,
    snapshot_path: PathBuf,
    /// The high watermark, for tasks that follow what is applied.
    applied: Arc<tokio::sync::watch::Sender<u64>>,
}

impl StateMachine {
    /// Opens the state machine of `store`'s partition, starting from its last snapshot if it
    /// has one (openraft re-applies the log after it).
    pub(crate) fn open(store: LogStore) -> Result<Self> {
        let snapshot_path = store.log().dir().join("raft-snapshot");
        let (state, current) = match std::fs::read(&snapshot_path) {
            Ok(bytes) => {
                let state = decode_state(&bytes).ok_or_else(|| Error::Corrupt {
                    file: snapshot_path.clone(),
                    position: 0,
                    kind: crate::CorruptKind::BadRecord,
                })?;
                let snap = Snapshot {
                    meta: meta_of(&state),
                    snapshot: bytes,
                };
                (state, Some(snap))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (PartitionState::default(), None),
            Err(e) => return Err(e.into()),
        };
        let applied = Arc::new(tokio::sync::watch::Sender::new(state.next_offset));
        Ok(StateMachine {
            store,
            applied,
            state: Arc::new(Mutex::new(state)),
            current: Arc::new(Mutex::new(current)),
            snapshot_path,
        })
    }

    /// A copy of the current state.
    #[cfg(test)]
    pub(crate) fn state(&self) -> PartitionState {
        self.state.lock().clone()
    }

    /// The high watermark: every record below this offset is committed.
    pub(crate) fn high_watermark(&self) -> u64 {
        self.state.lock().next_offset
    }

    /// Where the records DeleteRecords left start (0 if it was never asked).
    pub(crate) fn log_start(&self) -> u64 {
        self.state.lock().log_start
    }

    /// Follows the high watermark as entries are applied.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// The id of the last applied entry.
    pub(crate) fn last_applied(&self) -> Option<LogId> {
        self.state.lock().last_applied
    }

    /// Runs `f` on the producer table and the last applied entry, as of one instant.
    pub(crate) fn with_producers<T>(
        &self,
        f: impl FnOnce(&ProducerTable, Option<LogId>) -> T,
    ) -> T {
        let state = self.state.lock();
        f(&state.producers, state.last_applied)
    }

    fn save_snapshot(&self, snap: &SnapshotOf<C, Vec<u8>>) -> io::Result<()> {
        crate::env::write_atomic(&self.snapshot_path, &snap.snapshot)
    }
}

fn encode_state(state: &PartitionState) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(state).map_err(io::Error::other)?;
    let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

fn decode_state(bytes: &[u8]) -> Option<PartitionState> {
    let (crc, body) = bytes.split_at_checked(4)?;
    if u32::from_le_bytes(crc.try_into().ok()?) != crc32fast::hash(body) {
        return None;
    }
    serde_json::from_slice(body).ok()
}

fn meta_of(state: &PartitionState) -> SnapshotMetaOf<C> {
    SnapshotMeta {
        last_log_id: state.last_applied,
        last_membership: state.membership.clone(),
    }
}

impl RaftSnapshotBuilder<C> for StateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<SnapshotOf<C, Vec<u8>>> {
        let state = self.state.lock().clone();
        let snap = Snapshot {
            meta: meta_of(&state),
            snapshot: encode_state(&state)?,
        };
        let this = self.clone();
        let saved = snap.clone();
        // A snapshot never gets ahead of the durable log: under `Replicated` the log's tail
        // may not be synced yet, and a power loss would leave a snapshot past the log's end.
        tokio::task::spawn_blocking(move || {
            this.store.log().flush().map_err(io::Error::other)?;
            this.save_snapshot(&saved)
        })
        .await
        .map_err(io::Error::other)??;
        *self.current.lock() = Some(snap.clone());
        Ok(snap)
    }
}

impl RaftStateMachine<C> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembershipOf<C>)> {
        let state = self.state.lock();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<C>>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let response = {
                let mut state = self.state.lock();
                state.last_applied = Some(entry.log_id);
                match &entry.payload {
                    EntryPayload::Normal(req) if req.record_count == 0 => {
                        if let Some(offset) = crate::raft::storage::log_start_of(req) {
                            // Never past what is committed, never back.
                            let offset = offset.min(state.next_offset);
                            state.log_start = state.log_start.max(offset);
                        }
                        AppendResponse {
                            base_offset: state.log_start,
                            record_count: 0,
                            timestamp_ms: req.timestamp_ms,
                        }
                    }
                    EntryPayload::Normal(req) => {
                        let base_offset = state.next_offset;
                        state.next_offset += u64::from(req.record_count);
                        if req.producer_id != 0 {
                            state.producers.record(
                                req.producer_id,
                                SeqBatch {
                                    epoch: req.producer_epoch,
                                    base_sequence: req.base_sequence,
                                    record_count: req.record_count,
                                    base_offset,
                                    log_index: entry.log_id.index,
                                },
                            );
                        }
                        AppendResponse {
                            base_offset,
                            record_count: req.record_count,
                            timestamp_ms: req.timestamp_ms,
                        }
                    }
                    EntryPayload::Membership(m) => {
                        state.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        AppendResponse::default()
                    }
                    EntryPayload::Blank => AppendResponse::default(),
                }
            };
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        self.applied.send_replace(self.high_watermark());
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<C>,
        snapshot: Vec<u8>,
    ) -> io::Result<()> {
        let state = decode_state(&snapshot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad snapshot data"))?;
        if state.last_applied != meta.last_log_id {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "snapshot meta mismatch",
            ));
        }
        let snap = Snapshot {
            meta: meta.clone(),
            snapshot,
        };
        let this = self.clone();
        let next_offset = state.next_offset;
        let last = meta.last_log_id.map(|l| l.index);
        tokio::task::spawn_blocking(move || -> io::Result<()> {
            this.save_snapshot(&snap)?;
            // A replica whose log ends before the snapshot continues after it, with the
            // offsets the snapshot says come next.
            let log = this.store.log();
            if let Some(last) = last
                && log.next_log_index().get() <= last
            {
                log.reset(last + 1, next_offset).map_err(io::Error::other)?;
            }
            *this.current.lock() = Some(snap);
            Ok(())
        })
        .await
        .map_err(io::Error::other)??;
        *self.state.lock() = state;
        self.applied.send_replace(next_offset);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<SnapshotOf<C, Vec<u8>>>> {
        Ok(self.current.lock().clone())
    }
}
