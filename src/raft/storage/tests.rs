//! Unit tests of `raft/storage.rs`.

use super::*;
use crate::LogConfig;
use crate::raft::state_machine::StateMachine;

/// FORMAT.md §6.1: a membership entry is the byte `01` and the membership as openraft's
/// serde writes it in JSON. Pinned, because these bytes are in every log.
#[test]
fn the_membership_payload_is_pinned() {
    let nodes = std::collections::BTreeMap::from([
        (
            1,
            crate::raft::types::BrokerNode {
                addr: "127.0.0.1:9092".into(),
            },
        ),
        (
            2,
            crate::raft::types::BrokerNode {
                addr: "127.0.0.1:19092".into(),
            },
        ),
    ]);
    let m = openraft::Membership::<u64, crate::raft::types::BrokerNode>::new(
        vec![std::collections::BTreeSet::from([1, 2])],
        nodes,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(dir.path(), LogConfig::default()).unwrap();
    let store = LogStore::open(log, Durability::Replicated, usize::MAX).unwrap();
    let entry = Entry {
        log_id: LogId::new_term_index(1, 1),
        payload: EntryPayload::Membership(m),
    };
    store.append_one(&entry).unwrap();
    let batch = store
        .log()
        .read_entries(1, 2, usize::MAX)
        .unwrap()
        .remove(0);
    assert_eq!(
        std::str::from_utf8(&batch.payload[1..]).unwrap(),
        r#"{"configs":[[1,2]],"nodes":{"1":{"addr":"127.0.0.1:9092"},"2":{"addr":"127.0.0.1:19092"}}}"#
    );
    assert_eq!(batch.payload[0], CONTROL_MEMBERSHIP);
    assert_eq!(entry_from_batch(&batch).unwrap(), entry);
}

struct Builder;

/// Small segments, so that the suite's purges and truncations cross segment boundaries.
fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        record_bytes_max: 1024,
        batch_bytes_max: 2048,
        preallocate: crate::Preallocate::Fallocate,
        ..LogConfig::default()
    }
}

impl openraft::testing::log::StoreBuilder<C, LogStore, StateMachine, tempfile::TempDir>
    for Builder
{
    async fn build(
        &self,
    ) -> std::result::Result<(tempfile::TempDir, LogStore, StateMachine), openraft::StorageError<C>>
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = PartitionLog::open(dir.path(), small_config()).expect("open log");
        let store = LogStore::open(log, Durability::Fsync, usize::MAX).expect("open store");
        let sm = StateMachine::open(store.clone()).expect("open state machine");
        Ok((dir, store, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes_on_the_segment_log() {
    openraft::testing::log::Suite::test_all(Builder)
        .await
        .expect("suite");
}

#[test]
fn meta_round_trips_and_rejects_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft-meta");
    assert_eq!(read_meta(&path).unwrap(), RaftMeta::default());
    let meta = RaftMeta {
        vote: None,
        last_purged: Some(LogId::new_term_index(3, 9)),
        committed: Some(LogId::new_term_index(4, 12)),
        rebuilt_below: Some(13),
    };
    write_meta(&path, &meta).unwrap();
    assert_eq!(read_meta(&path).unwrap(), meta);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(read_meta(&path), Err(Error::Corrupt { .. })));
    std::fs::write(&path, [1, 2]).unwrap();
    assert!(matches!(read_meta(&path), Err(Error::Corrupt { .. })));
}

/// A network for a Raft group of one: there is nobody to reach.
pub(crate) struct NoPeers;

impl openraft::RaftNetworkV2<C> for NoPeers {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        _rpc: openraft::raft::AppendEntriesRequest<C>,
        _option: openraft::network::RPCOption,
    ) -> std::result::Result<openraft::raft::AppendEntriesResponse<C>, openraft::errors::RPCError<C>>
    {
        Err(openraft::errors::Unreachable::from_string("no peers").into())
    }

    async fn vote(
        &mut self,
        _rpc: openraft::raft::VoteRequest<C>,
        _option: openraft::network::RPCOption,
    ) -> std::result::Result<openraft::raft::VoteResponse<C>, openraft::errors::RPCError<C>> {
        Err(openraft::errors::Unreachable::from_string("no peers").into())
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: openraft::type_config::alias::SnapshotOf<C, Vec<u8>>,
        _cancel: impl std::future::Future<Output = openraft::errors::ReplicationClosed>
        + OptionalSend
        + 'static,
        _option: openraft::network::RPCOption,
    ) -> std::result::Result<openraft::raft::SnapshotResponse<C>, openraft::errors::StreamingError<C>>
    {
        Err(openraft::errors::StreamingError::Unreachable(
            openraft::errors::Unreachable::from_string("no peers"),
        ))
    }
}

impl openraft::network::RaftNetworkFactory<C> for NoPeers {
    type Network = NoPeers;

    async fn new_client(
        &mut self,
        _target: u64,
        _node: &crate::raft::types::BrokerNode,
    ) -> NoPeers {
        NoPeers
    }
}

/// One replica: initialize, write batches through Raft, restart from disk, write more.
async fn single_replica_round_trip(durability: Durability) {
    use crate::raft::types::BrokerNode;
    use crate::{Offset, Record};

    let dir = tempfile::tempdir().unwrap();
    let config = std::sync::Arc::new(
        openraft::Config {
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    );
    let start = |config: std::sync::Arc<openraft::Config>| {
        let path = dir.path().to_path_buf();
        async move {
            // The last instance's tasks (openraft's, the seal thread) may hold the log, and
            // its directory lock, a moment after shutdown returned.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let log = loop {
                match PartitionLog::open(&path, small_config()) {
                    Err(crate::Error::Locked { .. }) if std::time::Instant::now() < until => {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                    other => break other.unwrap(),
                }
            };
            let store = LogStore::open(log, durability, usize::MAX).unwrap();
            let sm = StateMachine::open(store.clone()).unwrap();
            let raft = openraft::Raft::new(1, config, NoPeers, store.clone(), sm.clone())
                .await
                .unwrap();
            (raft, store, sm)
        }
    };
    let batch = |text: &str| {
        let records: Vec<Record> = (0..3).map(|i| Record::new(format!("{text}-{i}"))).collect();
        let (payload, count) = crate::segment::record::encode_records(&records, 1024).unwrap();
        AppendRequest {
            format: crate::segment::format::PayloadFormat::Replog,
            compacted: false,
            records: payload,
            record_count: count,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
            timestamp_ms: 0,
        }
    };
    let deadline = Some(std::time::Duration::from_secs(10));

    let (raft, store, sm) = start(config.clone()).await;
    raft.initialize(std::collections::BTreeMap::from([(
        1,
        BrokerNode {
            addr: "127.0.0.1:1".into(),
        },
    )]))
    .await
    .unwrap();
    raft.wait(deadline)
        .current_leader(1, "elected")
        .await
        .unwrap();
    let first = raft.client_write(batch("a")).await.unwrap();
    let second = raft.client_write(batch("b")).await.unwrap();
    assert_eq!((first.data.base_offset, second.data.base_offset), (0, 3));
    assert_eq!(sm.state().next_offset, 6);
    let values: Vec<_> = store
        .log()
        .iter(Offset(0))
        .map(|r| r.unwrap().1.value)
        .collect();
    assert_eq!(values.len(), 6);
    assert_eq!(&values[4][..], b"b-1");
    raft.shutdown().await.unwrap();
    drop(raft);
    // Syncs still in flight hold the store (and its directory lock) for a moment.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.syncs_in_flight() > 0 {
        assert!(std::time::Instant::now() < until, "store still in use");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    drop((store, sm));

    // Restart from the directory: the log, the vote and the membership come back.
    let (raft, store, sm) = start(config).await;
    raft.wait(deadline)
        .current_leader(1, "re-elected")
        .await
        .unwrap();
    raft.wait(deadline)
        .applied_index(Some(second.log_id.index), "re-applied")
        .await
        .unwrap();
    assert_eq!(
        sm.state().next_offset,
        6,
        "the state machine re-applied the log"
    );
    let third = raft.client_write(batch("c")).await.unwrap();
    assert_eq!(third.data.base_offset, 6);
    assert_eq!(store.log().end_offset(), Offset(9));
    raft.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_writes_and_restarts_fsync() {
    single_replica_round_trip(Durability::Fsync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_writes_and_restarts_replicated() {
    single_replica_round_trip(Durability::Replicated).await;
}
