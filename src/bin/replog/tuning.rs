//! `replog node`'s flags for the settings most brokers leave at their defaults: limits,
//! timeouts, the offsets topic's and the groups' settings, and each partition log's. Each
//! is named as its `NodeConfig` or `LogConfig` field (a duration in milliseconds, `-ms`);
//! without it the field keeps its default. A `--config` file sets them as any other flag.

use std::time::Duration;

use replog::NodeConfig;

/// Flags that override `NodeConfig`'s and `LogConfig`'s defaults.
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Tuning (NodeConfig and LogConfig; defaults in their docs)")]
pub(crate) struct TuningArgs {
    /// Raft heartbeat interval (default: a quarter of --election-timeout-ms, at least 20).
    #[arg(long)]
    heartbeat_interval_ms: Option<u64>,
    /// How long a write may wait for its commit before it fails as indeterminate.
    #[arg(long)]
    request_timeout_ms: Option<u64>,
    /// Largest network frame accepted.
    #[arg(long)]
    frame_bytes_max: Option<u32>,
    /// Connections open at once, peers' and clients' together.
    #[arg(long)]
    connections_max: Option<usize>,
    /// Of --connections-max, how many only peer brokers may take.
    #[arg(long)]
    peer_connections_reserved: Option<usize>,
    /// A connection silent this long is closed.
    #[arg(long)]
    connections_max_idle_ms: Option<u64>,
    /// A frame begun must be whole within this.
    #[arg(long)]
    frame_read_timeout_ms: Option<u64>,
    /// Client requests one connection may have unanswered.
    #[arg(long)]
    requests_in_flight_max: Option<usize>,
    /// Bytes of request bodies being read, over all connections.
    #[arg(long)]
    buffered_request_bytes_max: Option<usize>,
    /// Bytes of answers not yet written, over all connections.
    #[arg(long)]
    buffered_response_bytes_max: Option<usize>,
    /// How often retention and compaction run (0: never by themselves).
    #[arg(long)]
    retention_check_interval_ms: Option<u64>,
    /// Bytes per second compaction reads at most (0: no limit).
    #[arg(long)]
    compaction_bytes_per_second: Option<u64>,
    /// Partitions of __consumer_offsets, when it is created.
    #[arg(long)]
    offsets_topic_partitions: Option<u32>,
    /// Replicas of each __consumer_offsets partition, when it is created.
    #[arg(long)]
    offsets_topic_replication_factor: Option<u32>,
    /// Segment size of __consumer_offsets' partitions.
    #[arg(long)]
    offsets_segment_bytes: Option<u64>,
    /// Shortest session timeout a group member may ask for.
    #[arg(long)]
    group_session_timeout_min_ms: Option<u64>,
    /// Longest session timeout a group member may ask for.
    #[arg(long)]
    group_session_timeout_max_ms: Option<u64>,
    /// How long a group's first rebalance waits for more members.
    #[arg(long)]
    group_initial_rebalance_delay_ms: Option<u64>,
    /// Members one group may have.
    #[arg(long)]
    group_members_max: Option<usize>,
    /// A partition log's segment size (a topic's segment.bytes wins for it).
    #[arg(long)]
    segment_bytes: Option<u64>,
    /// Bytes of frames between two index entries.
    #[arg(long)]
    index_interval_bytes: Option<u32>,
    /// Largest encoded record.
    #[arg(long)]
    record_bytes_max: Option<u32>,
    /// Largest encoded batch.
    #[arg(long)]
    batch_bytes_max: Option<u32>,
    /// Bytes of disk given to the active segment at a time.
    #[arg(long)]
    preallocate_step_bytes: Option<u64>,
    /// Deleted segment files kept to become later segments.
    #[arg(long)]
    recycle_segments: Option<usize>,
    /// Leave leadership where failovers put it (no hand-back to preferred replicas).
    #[arg(long)]
    no_auto_leader_rebalance: bool,
    /// Move replicas by themselves until every broker holds as many as the others, give or
    /// take one (a broker that joins takes its share).
    #[arg(long)]
    replica_balance: bool,
    /// The share of a broker's preferred partitions, in percent, others may lead before they
    /// are handed back.
    #[arg(long)]
    leader_imbalance_percentage: Option<u32>,
    /// How often a broker checks the partitions it leads for ones to hand back.
    #[arg(long)]
    leader_imbalance_check_interval_ms: Option<u64>,
    /// The newest protocol version to speak: during a rolling upgrade, the version the old
    /// build speaks, until every broker runs the new one (the newest by default).
    #[arg(long)]
    protocol_version: Option<u16>,
    /// How long a partition goes unwritten before its Raft group goes quiet (no heartbeats,
    /// no timers) until the next write (2000 by default); 0: never.
    #[arg(long)]
    quiesce_after_ms: Option<u64>,
    /// How long a partition stays quiet before its Raft member is dropped here, to be built
    /// again by the next write or Raft message (60000 by default); 0: never.
    #[arg(long)]
    dormant_after_ms: Option<u64>,
}

impl TuningArgs {
    /// Sets in `config` what the flags say.
    pub(crate) fn apply(&self, config: &mut NodeConfig) {
        let ms = Duration::from_millis;
        fn set<T: Copy>(field: &mut T, value: Option<T>) {
            if let Some(v) = value {
                *field = v;
            }
        }
        set(
            &mut config.heartbeat_interval,
            self.heartbeat_interval_ms.map(ms),
        );
        set(&mut config.request_timeout, self.request_timeout_ms.map(ms));
        set(&mut config.frame_bytes_max, self.frame_bytes_max);
        set(&mut config.connections_max, self.connections_max);
        set(
            &mut config.peer_connections_reserved,
            self.peer_connections_reserved,
        );
        set(
            &mut config.connections_max_idle,
            self.connections_max_idle_ms.map(ms),
        );
        set(
            &mut config.frame_read_timeout,
            self.frame_read_timeout_ms.map(ms),
        );
        set(
            &mut config.requests_in_flight_max,
            self.requests_in_flight_max,
        );
        set(
            &mut config.buffered_request_bytes_max,
            self.buffered_request_bytes_max,
        );
        set(
            &mut config.buffered_response_bytes_max,
            self.buffered_response_bytes_max,
        );
        set(
            &mut config.retention_check_interval,
            self.retention_check_interval_ms.map(ms),
        );
        set(
            &mut config.compaction_bytes_per_second,
            self.compaction_bytes_per_second,
        );
        set(
            &mut config.offsets_topic_partitions,
            self.offsets_topic_partitions,
        );
        set(
            &mut config.offsets_topic_replication_factor,
            self.offsets_topic_replication_factor,
        );
        set(
            &mut config.offsets_segment_bytes,
            self.offsets_segment_bytes,
        );
        set(
            &mut config.group_session_timeout_min,
            self.group_session_timeout_min_ms.map(ms),
        );
        set(
            &mut config.group_session_timeout_max,
            self.group_session_timeout_max_ms.map(ms),
        );
        set(
            &mut config.group_initial_rebalance_delay,
            self.group_initial_rebalance_delay_ms.map(ms),
        );
        set(&mut config.group_members_max, self.group_members_max);
        config.auto_leader_rebalance &= !self.no_auto_leader_rebalance;
        config.replica_balance |= self.replica_balance;
        set(
            &mut config.leader_imbalance_percentage,
            self.leader_imbalance_percentage,
        );
        set(
            &mut config.leader_imbalance_check_interval,
            self.leader_imbalance_check_interval_ms.map(ms),
        );
        set(&mut config.protocol_version, self.protocol_version);
        if let Some(after) = self.quiesce_after_ms {
            config.quiesce_after = (after > 0).then(|| ms(after));
        }
        if let Some(after) = self.dormant_after_ms {
            config.dormant_after = (after > 0).then(|| ms(after));
        }
        let log = &mut config.log;
        set(&mut log.segment_bytes, self.segment_bytes);
        set(&mut log.index_interval_bytes, self.index_interval_bytes);
        set(&mut log.record_bytes_max, self.record_bytes_max);
        set(&mut log.batch_bytes_max, self.batch_bytes_max);
        set(&mut log.preallocate_step_bytes, self.preallocate_step_bytes);
        set(&mut log.recycle_segments, self.recycle_segments);
    }
}
