//! The metrics replog reports, through the [`metrics`] crate's facade: the embedding
//! application installs the recorder it wants (Prometheus, StatsD, ...); without one, every
//! call here costs a few atomic loads and records nothing. `replog node --metrics-listen`
//! installs `metrics-exporter-prometheus` and serves the text format.
//!
//! Every name, its kind, its labels and what it measures is listed here, once; the code that
//! reports each calls the function below that names it.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `replog_partition_log_end_offset` | gauge | topic, partition | offset after the last record in this broker's replica (committed or not) |
//! | `replog_partition_high_watermark` | gauge | topic, partition | offset below which records are committed, on this replica |
//! | `replog_partition_log_start_offset` | gauge | topic, partition | first offset still in this replica's log |
//! | `replog_partition_leader` | gauge | topic, partition | 1 on the partition's leader, 0 elsewhere |
//! | `replog_follower_lag_entries` | gauge | topic, partition, follower | on the leader: Raft entries the follower is behind |
//! | `replog_follower_lag_bytes` | gauge | topic, partition, follower | on the leader: bytes of log the follower is behind |
//! | `replog_follower_last_ack_seconds` | gauge | topic, partition, follower | on the leader: time since the follower last acknowledged it |
//! | `replog_requests_total` | counter | op | requests served, by operation (`produce`, `fetch`, `group`, `append_entries`...) |
//! | `replog_request_duration_seconds` | histogram | op | time to serve one request (a long poll's wait included) |
//! | `replog_kafka_requests_total` | counter | api | requests the Kafka listener served, by Kafka's name of the API (`Produce`, `Fetch`, `Metadata`...; `unknown` for a key Kafka does not define) |
//! | `replog_kafka_request_duration_seconds` | histogram | api | time to serve one Kafka request (a long poll's wait included), before its answer is written |
//! | `replog_group_members` | gauge | group | members of a group this broker coordinates |
//! | `replog_group_generation` | gauge | group | its generation |
//! | `replog_group_lag` | gauge | group, topic, partition | high watermark minus the committed offset, where this broker hosts the partition |
//! | `replog_client_produce_retries_total` | counter | | a batch sent again (a redirect, an election, an unknown outcome) |
//! | `replog_client_produce_seconds` | histogram | | from a batch's first attempt to its acknowledgement |
//! | `replog_producer_in_flight_batches` | gauge | | batches a `Producer` has sent and not yet settled |
//! | `replog_consumer_lag` | gauge | topic, partition | a `Consumer`'s committed records past its position, as of the last fetch |
//! | `replog_consumer_records_total` | counter | topic | records a `Consumer` returned |
//! | `replog_failed_logins_total` | counter | | SASL logins refused, on either door (wrong credentials, a mechanism not offered) |

use std::time::Duration;

use crate::types::PartitionId;

fn partition_labels(id: &PartitionId) -> [(&'static str, String); 2] {
    [
        ("topic", id.topic.clone()),
        ("partition", id.partition.to_string()),
    ]
}

/// One replica's offsets and role.
pub(crate) fn replica(
    id: &PartitionId,
    log_end: u64,
    high_watermark: u64,
    log_start: u64,
    leads: bool,
) {
    let labels = partition_labels(id);
    metrics::gauge!("replog_partition_log_end_offset", &labels).set(log_end as f64);
    metrics::gauge!("replog_partition_high_watermark", &labels).set(high_watermark as f64);
    metrics::gauge!("replog_partition_log_start_offset", &labels).set(log_start as f64);
    metrics::gauge!("replog_partition_leader", &labels).set(if leads { 1.0 } else { 0.0 });
}

/// How far one follower is behind its leader.
pub(crate) fn follower_lag(
    id: &PartitionId,
    follower: u64,
    entries: u64,
    bytes: u64,
    last_ack: Option<Duration>,
) {
    let [topic, partition] = partition_labels(id);
    let labels = [topic, partition, ("follower", follower.to_string())];
    metrics::gauge!("replog_follower_lag_entries", &labels).set(entries as f64);
    metrics::gauge!("replog_follower_lag_bytes", &labels).set(bytes as f64);
    let age = last_ack.map_or(f64::INFINITY, |d| d.as_secs_f64());
    metrics::gauge!("replog_follower_last_ack_seconds", &labels).set(age);
}

/// One request served.
pub(crate) fn request(op: &'static str, took: Duration) {
    metrics::counter!("replog_requests_total", "op" => op).increment(1);
    metrics::histogram!("replog_request_duration_seconds", "op" => op).record(took.as_secs_f64());
}

/// One request served by the Kafka listener; `api` is Kafka's name of its API.
pub(crate) fn kafka_request(api: String, took: Duration) {
    metrics::counter!("replog_kafka_requests_total", "api" => api.clone()).increment(1);
    metrics::histogram!("replog_kafka_request_duration_seconds", "api" => api)
        .record(took.as_secs_f64());
}

/// A group this broker coordinates.
pub(crate) fn group(group: &str, members: usize, generation: i32) {
    let labels = [("group", group.to_string())];
    metrics::gauge!("replog_group_members", &labels).set(members as f64);
    metrics::gauge!("replog_group_generation", &labels).set(f64::from(generation));
}

/// A group's lag on one partition.
pub(crate) fn group_lag(group: &str, id: &PartitionId, lag: u64) {
    let [topic, partition] = partition_labels(id);
    let labels = [("group", group.to_string()), topic, partition];
    metrics::gauge!("replog_group_lag", &labels).set(lag as f64);
}

/// A produce batch sent again.
pub(crate) fn produce_retry() {
    metrics::counter!("replog_client_produce_retries_total").increment(1);
}

/// A produce batch acknowledged `took` after its first attempt.
pub(crate) fn produced(took: Duration) {
    metrics::histogram!("replog_client_produce_seconds").record(took.as_secs_f64());
}

/// A `Producer`'s batches in flight went up (`+1`) or down (`-1`).
pub(crate) fn producer_in_flight(delta: f64) {
    metrics::gauge!("replog_producer_in_flight_batches").increment(delta);
}

/// A consumer's lag on one partition.
pub(crate) fn consumer_lag(id: &PartitionId, lag: u64) {
    metrics::gauge!("replog_consumer_lag", &partition_labels(id)).set(lag as f64);
}

/// Records a consumer returned from a topic.
pub(crate) fn consumed(topic: &str, records: u64) {
    metrics::counter!("replog_consumer_records_total", "topic" => topic.to_string())
        .increment(records);
}

/// A SASL login refused.
pub(crate) fn failed_login() {
    metrics::counter!("replog_failed_logins_total").increment(1);
}
