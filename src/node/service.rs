//! The broker service: what a client can ask of a broker, as typed requests and answers, with
//! no wire encoding in sight. Every door to the broker is a thin codec over it: the native one
//! (`handler.rs`) today, a Kafka-protocol listener next. The meaning of each request (which
//! replica answers, what is refused and why, what counts as written) lives behind this type,
//! never in a codec.

use std::sync::Arc;

use crate::error::Result;
use crate::log::AppendInfo;
use crate::protocol::{CreateTopicRequest, DeleteTopicRequest, MetadataResponse, ProposeRequest};
use crate::raft::types::AppendRequest;
use crate::segment::record::Batch;
use crate::transport::Turn;
use crate::types::{Offset, PartitionId};

use super::Broker;

/// A produce: one encoded batch for one partition.
pub(crate) struct Produce {
    pub(crate) partition: PartitionId,
    /// The records as the producer encoded them, with its idempotence numbers.
    pub(crate) batch: AppendRequest,
    /// The request's place among its connection's requests, if the codec keeps one: batches of
    /// one producer are checked in that order.
    pub(crate) turn: Option<Turn>,
}

/// A fetch: committed batches of one partition from `offset` on.
pub(crate) struct Fetch {
    pub(crate) partition: PartitionId,
    pub(crate) offset: Offset,
    pub(crate) max_bytes: usize,
}

/// The broker's operations for clients.
#[derive(Clone)]
pub(crate) struct BrokerService {
    broker: Arc<Broker>,
}

impl BrokerService {
    pub(super) fn new(broker: Arc<Broker>) -> BrokerService {
        BrokerService { broker }
    }

    /// Appends a batch on the partition's leader: [`crate::Node::append`]'s rules.
    pub(crate) async fn produce(&self, request: Produce) -> Result<AppendInfo> {
        self.broker
            .append_encoded(&request.partition, request.batch, request.turn)
            .await
    }

    /// Reads committed batches from this broker's replica: [`crate::Node::read`]'s rules, with
    /// the answer kept within this broker's frame limit whatever the asker allowed (a batch is
    /// never larger than a frame: `NodeConfig::validate`).
    pub(crate) fn fetch(&self, request: &Fetch) -> Result<Vec<Batch>> {
        let id = &request.partition;
        let max_bytes = self.fetch_bytes_max(request);
        self.broker
            .read(&id.topic, id.partition, request.offset, max_bytes)
    }

    /// The most bytes of frames a fetch answer carries: what it asked for, within the frame
    /// limit (a single batch larger than that is still sent, alone: see `PartitionLog::read`).
    fn fetch_bytes_max(&self, request: &Fetch) -> usize {
        request
            .max_bytes
            .min(self.broker.config.payload_bytes_max())
    }

    /// The memory a fetch answer may take, for the server's answer budget: its frames and the
    /// frame's overhead.
    /// An answer holds at least one batch, however small the fetch's `max_bytes`.
    pub(crate) fn fetch_answer_bytes(&self, request: &Fetch) -> usize {
        let one_batch = self.broker.config.log.batch_bytes_max as usize;
        self.fetch_bytes_max(request).max(one_batch)
            + crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX as usize
    }

    /// Brokers, topics and every partition's current leader (`local_only`: only the partitions
    /// hosted here, as brokers ask each other).
    pub(crate) async fn metadata(&self, topic: Option<&str>, local_only: bool) -> MetadataResponse {
        self.broker.metadata(topic, local_only).await
    }

    /// Creates a topic through the metadata group.
    pub(crate) async fn create_topic(&self, request: CreateTopicRequest) -> Result<()> {
        self.broker.create_topic(request).await
    }

    /// Deletes a created topic through the metadata group.
    pub(crate) async fn delete_topic(&self, request: DeleteTopicRequest) -> Result<()> {
        self.broker.delete_topic(request).await
    }

    /// Commits a metadata command (a registration, a reassignment).
    pub(crate) async fn propose(&self, request: ProposeRequest) -> Result<()> {
        self.broker.propose(request).await
    }
}
