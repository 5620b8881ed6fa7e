//! The native wire handler: decodes a request frame, calls the broker, encodes the answer.

use std::sync::Arc;

use serde::Serialize;

use crate::catalog::METADATA_TOPIC;
use crate::error::Error;
use crate::protocol::{
    FetchRequest, MetadataRequest, ProduceRequestRef, ProduceResponse, WireBatch, WireError,
};
use crate::raft::network::Served;
use crate::transport::frame::Op;
use crate::transport::{BoxFuture, Handler, Turn};
use crate::types::{Offset, PartitionId};

use super::Broker;
use super::replicas::RebuildCause;

/// Serves peers' Raft RPCs by dispatching them to the partition's group.
pub(super) struct NodeHandler {
    pub(super) broker: Arc<Broker>,
}

fn encode_response<T: Serialize>(result: &std::result::Result<T, WireError>) -> Vec<u8> {
    postcard::to_stdvec(result).unwrap_or_else(|e| {
        let fallback: std::result::Result<(), WireError> = Err(WireError::Other(e.to_string()));
        postcard::to_stdvec(&fallback).unwrap_or_default()
    })
}

impl NodeHandler {
    /// Serves a Raft RPC: the body starts with the partition id, then the request.
    async fn raft_rpc(&self, op: Op, body: &[u8]) -> Vec<u8> {
        let found = postcard::take_from_bytes::<PartitionId>(body)
            .map_err(|e| format!("bad request: {e}"))
            .and_then(|(id, rest)| {
                let group = if id.topic == METADATA_TOPIC && id.partition == 0 {
                    Some(Arc::clone(&self.broker.meta))
                } else {
                    self.broker.groups.read().get(&id).cloned()
                };
                group
                    .map(|g| (g, rest))
                    .ok_or_else(|| format!("unknown partition {id}"))
            });
        let refuse = |e: String| {
            postcard::to_stdvec(&std::result::Result::<(), String>::Err(e)).unwrap_or_default()
        };
        let (group, rest) = match found {
            Ok(found) => found,
            Err(e) => return refuse(e),
        };
        // openraft stopped this group on a read that failed validation (replicating from a
        // damaged segment): the replica is rebuilt from the new leader.
        if let Some(damage) = group.store.take_damage() {
            self.broker
                .request_rebuild(Arc::clone(&group), RebuildCause::Damaged(damage));
        }
        if op == Op::Vote && group.store.abstains(group.sm.last_applied()) {
            return refuse(
                "this replica was rebuilt after damage and votes again once it holds what it \
                 had committed"
                    .into(),
            );
        }
        match group.raft.serve(op, rest).await {
            Served::Reply(reply) => reply,
            Served::ContradictsCommitted(index) => {
                self.broker
                    .request_rebuild(group, RebuildCause::Contradicted(index));
                refuse(format!(
                    "this replica's committed log contradicts the request at index {index}: \
                     replica rebuilding"
                ))
            }
        }
    }
}

/// Decodes a client request's body.
fn decode_request<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> std::result::Result<T, WireError> {
    postcard::from_bytes(body).map_err(|e| WireError::Other(format!("bad request: {e}")))
}

fn wire(e: Error) -> WireError {
    WireError::from_error(&e)
}

impl Handler for NodeHandler {
    fn handle(self: Arc<Self>, op: Op, body: Vec<u8>, turn: Turn) -> BoxFuture<Vec<u8>> {
        Box::pin(async move {
            let broker = &self.broker;
            // Only produce requests keep their connection's order (see `Replica::write`);
            // any other passes its turn on at once.
            let turn = matches!(op, Op::Produce).then_some(turn);
            match op {
                Op::AppendEntries | Op::Vote | Op::Snapshot | Op::TransferLeader => {
                    self.raft_rpc(op, &body).await
                }
                Op::Produce => encode_response(
                    &async {
                        // The records stay in the frame's buffer on their way to the log.
                        let frame = bytes::Bytes::from(body);
                        let req: ProduceRequestRef<'_> = postcard::from_bytes(&frame)
                            .map_err(|e| WireError::Other(format!("bad request: {e}")))?;
                        let partition = req.partition.clone();
                        let batch = req.into_request(&frame);
                        let info = broker
                            .append_encoded(&partition, batch, turn)
                            .await
                            .map_err(wire)?;
                        Ok(ProduceResponse {
                            log_index: info.log_index.get(),
                            base_offset: info.base_offset.get(),
                            record_count: info.record_count,
                        })
                    }
                    .await,
                ),
                Op::Fetch => {
                    encode_response(&decode_request(&body).and_then(|req: FetchRequest| {
                        let id = &req.partition;
                        let batches = broker
                            .read(
                                &id.topic,
                                id.partition,
                                Offset(req.offset),
                                req.max_bytes as usize,
                            )
                            .map_err(wire)?;
                        Ok(batches
                            .iter()
                            .map(WireBatch::from_batch)
                            .collect::<Vec<_>>())
                    }))
                }
                Op::Metadata => encode_response(
                    &async {
                        let req: MetadataRequest = decode_request(&body)?;
                        Ok(broker.metadata(req.topic.as_deref(), req.local_only).await)
                    }
                    .await,
                ),
                Op::CreateTopic => encode_response(
                    &async {
                        broker
                            .create_topic(decode_request(&body)?)
                            .await
                            .map_err(wire)
                    }
                    .await,
                ),
                Op::Propose => encode_response(
                    &async { broker.propose(decode_request(&body)?).await.map_err(wire) }.await,
                ),
                Op::DeleteTopic => encode_response(
                    &async {
                        broker
                            .delete_topic(decode_request(&body)?)
                            .await
                            .map_err(wire)
                    }
                    .await,
                ),
            }
        })
    }
}
