//! Kafka's Produce (versions 3 to 11) over the broker service's produce.
//!
//! A request's partitions are written at once, and each partition's batch is queued for its
//! partition in the order the connection's requests came: a batch never overtakes one of an
//! earlier request to the same partition (an idempotent producer's pipelined batches depend on
//! it), yet a request of many partitions waits for their commits together, not one after the
//! other.

use std::collections::BTreeMap;

use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::fetch::partition;
use crate::error::Error;
use crate::kafka::{broker_id, code, current_leader, error_code};
use crate::node::service::{BrokerService, OffsetSpec, Produce, ProduceBatch};
use crate::segment::format::PayloadFormat;
use crate::segment::kafka as kafka_batch;
use crate::transport::{Turn, Turns};
use crate::types::{NodeId, ProducerSeq};

/// The versions served.
pub(crate) const APIS: &[super::Served] = &[(kafka_protocol::messages::ApiKey::Produce, 3, 11)];

/// Serves a Produce request whose place among its connection's requests is `turn` (`None`:
/// no order to keep).
pub(crate) async fn produce(
    request: ProduceRequest,
    version: i16,
    service: &BrokerService,
    turn: Option<Turn>,
) -> ProduceResponse {
    if let Some(turn) = &turn {
        turn.wait().await;
    }
    // The request's partitions pass their places in this order, and the connection's next
    // request waits until all have.
    let order = Turns::new();
    let writes: Vec<_> = request
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter().map(move |p| (&t.name, p)))
        .map(|(name, p)| write(name, p, version, service, order.issue()))
        .collect();
    let count = writes.len() as u64;
    let release = async {
        order.passed(count).await;
        drop(turn);
    };
    let (written, ()) =
        futures_util::future::join(futures_util::future::join_all(writes), release).await;
    let mut r = ProduceResponse::default();
    let mut endpoints = BTreeMap::new();
    let mut written = written.into_iter();
    for topic in &request.topic_data {
        let mut t = TopicProduceResponse::default();
        t.name = topic.name.clone();
        for (pr, leader) in written.by_ref().take(topic.partition_data.len()) {
            endpoints.extend(leader);
            t.partition_responses.push(pr);
        }
        r.responses.push(t);
    }
    r.node_endpoints = endpoints.into_iter().map(endpoint).collect();
    r
}

/// A partition's answer, and its leader's Kafka address when the refusal names one.
type Written = (PartitionProduceResponse, Option<(NodeId, crate::Address)>);

/// Writes one partition's batch; `turn` is its place among the connection's batches.
async fn write(
    topic: &TopicName,
    p: &PartitionProduceData,
    version: i16,
    service: &BrokerService,
    turn: Turn,
) -> Written {
    let mut pr = PartitionProduceResponse::default();
    pr.index = p.index;
    pr.base_offset = -1;
    pr.log_append_time_ms = -1;
    // The batch is kept as sent (FORMAT.md §4.2); its header is read here, and the write path
    // checks it whole (CRC-32C, records) before it is proposed.
    let records = p.records.clone().unwrap_or_default();
    let info = match kafka_batch::header(&records) {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "a kafka batch refused");
            pr.error_code = code::CORRUPT_MESSAGE;
            return (pr, None);
        }
    };
    // An idempotent producer's numbers (id ≥ 1: replog's 0 is "none") go through the
    // partition's producer table as a replog producer's do: a resend is answered with the
    // offsets it got the first time.
    let idempotent = info.producer_id > 0 && info.base_sequence >= 0;
    let number = |n: i64| if idempotent { n } else { 0 };
    let produce_partition = partition(topic, p.index);
    let produce = Produce {
        partition: produce_partition.clone(),
        batch: ProduceBatch {
            records,
            format: PayloadFormat::Kafka,
            record_count: info.record_count,
            producer: ProducerSeq {
                producer_id: u64::try_from(number(info.producer_id)).unwrap_or(0),
                epoch: u16::try_from(number(info.producer_epoch.into())).unwrap_or(0),
                base_sequence: u32::try_from(number(info.base_sequence.into())).unwrap_or(0),
            },
        },
        turn: Some(turn),
    };
    match service.produce(produce).await {
        Ok(info) => {
            pr.base_offset = i64::try_from(info.base_offset.get()).unwrap_or(i64::MAX);
            // On a LogAppendTime topic the records' timestamp is the leader's stamp: the
            // producer's RecordMetadata takes it from here (−1: the records' own, CreateTime).
            if info.timestamp_ms > 0 && service.log_append_time(&produce_partition) {
                pr.log_append_time_ms = i64::try_from(info.timestamp_ms).unwrap_or(-1);
            }
            // Kafka answers the partition's log start with a batch taken (an idempotent
            // producer compares it with what it sent to tell retention from lost state).
            let start = service.list_offset(&produce_partition, OffsetSpec::Earliest, None);
            if let Ok(Some(start)) = start {
                pr.log_start_offset = i64::try_from(start.offset.get()).unwrap_or(-1);
            }
            (pr, None)
        }
        Err(e) => {
            pr.error_code = error_code(&e);
            let leader = if version >= 10 {
                leader_hint(&e, service, &mut pr).await
            } else {
                None
            };
            (pr, leader)
        }
    }
}

/// KIP-951's fields for a refused produce (Produce v10+): the leader and its term in the
/// partition's answer; the leader's Kafka address, for the answer's endpoints.
async fn leader_hint(
    e: &Error,
    service: &BrokerService,
    pr: &mut PartitionProduceResponse,
) -> Option<(NodeId, crate::Address)> {
    let (node, term, addr) = current_leader(e, service).await?;
    let mut l = LeaderIdAndEpoch::default();
    l.leader_id = broker_id(node);
    l.leader_epoch = i32::try_from(term).unwrap_or(i32::MAX);
    pr.current_leader = l;
    Some((node, addr))
}

fn endpoint((id, addr): (NodeId, crate::Address)) -> NodeEndpoint {
    let mut n = NodeEndpoint::default();
    n.node_id = broker_id(id);
    n.host = StrBytes::from_string(addr.host().to_string());
    n.port = i32::from(addr.port());
    n
}
