//! The native door's produce and fetch: a produced batch from its request frame into the
//! broker service, and a fetch's batches from the service onto the wire, its answer's bytes
//! reserved in the connection's budget first.

use serde::Serialize;

use crate::protocol::{
    FetchRequest, FetchResponse, ProduceRequestRef, ProduceResponse, StoredBatch, WireBatch,
    WireError,
};
use crate::transport::body::Body;
use crate::transport::{Answer, AnswerBudget, Turn};
use crate::types::Offset;

use super::super::service::{BrokerService, Fetch, Fetched, Produce};
use super::{decode_request, encode_response, wire};

/// Serves a produce, keeping its connection's order with `turn`.
pub(super) async fn produce(service: &BrokerService, body: Vec<u8>, turn: Option<Turn>) -> Body {
    encode_response(
        &async {
            // The records stay in the frame's buffer on their way to the log.
            let frame = bytes::Bytes::from(body);
            let req: ProduceRequestRef<'_> = postcard::from_bytes(&frame)
                .map_err(|e| WireError::Other(format!("bad request: {e}")))?;
            let partition = req.partition.clone();
            let batch = req.into_batch(&frame);
            let produce = Produce {
                partition,
                batch,
                turn,
            };
            let info = service.produce(produce).await.map_err(wire)?;
            Ok(ProduceResponse {
                log_index: info.log_index.get(),
                base_offset: info.base_offset.get(),
                record_count: info.record_count,
            })
        }
        .await,
    )
}

/// Serves a fetch, its answer's bytes reserved in `answers` before its records are read;
/// `as_stored`: `Op::FetchAsStored`'s answer, Kafka batches as stored (`StoredBatch`).
pub(super) async fn fetch(
    service: &BrokerService,
    body: &[u8],
    answers: &AnswerBudget,
    as_stored: bool,
) -> Answer {
    let request = decode_request(body).map(|req: FetchRequest| {
        Fetch::one(
            req.partition,
            Offset(req.offset),
            req.max_bytes as usize,
            std::time::Duration::from_millis(req.max_wait_ms.into()),
            req.min_bytes as usize,
        )
    });
    // A long poll waits for records first, holding nothing; then the answer's
    // bytes are reserved before it is read from the log: a client that
    // pipelines fetches and never reads holds no more than its share.
    let mut held = None;
    if let Ok(fetch) = &request {
        service.wait_for_fetch(fetch).await;
        held = answers.reserve(service.fetch_answer_bytes(fetch)).await;
    }
    let answer = async {
        let fetch = request?;
        let fetched = service
            .fetch(&fetch)
            .pop()
            .ok_or_else(|| WireError::Other("fetch: no partition".into()))?
            .map_err(wire)?;
        Ok((fetched, service.fetch_bytes_max(&fetch)))
    };
    let body = match answer.await {
        Err(e) => encode_response::<()>(&Err(e)),
        Ok((fetched, max)) if as_stored => {
            let inflates = fetched.batches.iter().any(StoredBatch::inflates);
            answer_fetch(fetched, inflates, move |b| {
                StoredBatch::from_batches(b, max)
            })
            .await
        }
        Ok((fetched, max)) => {
            let kafka = fetched
                .batches
                .iter()
                .any(|b| b.format == crate::segment::format::PayloadFormat::Kafka);
            answer_fetch(fetched, kafka, move |b| WireBatch::from_batches(b, max)).await
        }
    };
    Answer { body, held }
}

/// A fetch's answer: `fetched`'s batches as `convert` puts them on the wire, off the
/// runtime's workers where `heavy` (decompressing a Kafka producer's batches is CPU work of up
/// to the answer's size).
async fn answer_fetch<B, F>(fetched: Fetched, heavy: bool, convert: F) -> Body
where
    B: Serialize + Send + 'static,
    F: FnOnce(&[crate::segment::batch::Batch]) -> Vec<B> + Send + 'static,
{
    let (high_watermark, log_start) = (fetched.high_watermark.get(), fetched.log_start.get());
    let batches = if heavy {
        let batches = fetched.batches;
        match tokio::task::spawn_blocking(move || convert(&batches)).await {
            Ok(converted) => converted,
            Err(e) => return encode_response::<()>(&Err(WireError::Other(format!("fetch: {e}")))),
        }
    } else {
        convert(&fetched.batches)
    };
    encode_response(&Ok(FetchResponse {
        batches,
        high_watermark,
        log_start,
    }))
}
