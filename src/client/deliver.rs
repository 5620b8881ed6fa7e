//! The produce path: numbering a batch for its partition ([`PreparedBatch`], [`ProducerSlot`]),
//! sending it in turn, and delivering it to the partition's leader through redirects, elections
//! and unknown outcomes ([`Delivery`], [`RouteStep`]).

use crate::Address;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use super::routing::{Redirect, redirect};
use super::sequencer::{Attempt, Sequencer};
use super::{Client, elapsed_ms, jitter, new_producer_id};
use crate::error::{Error, Result};
use crate::protocol::{ProduceRequest, ProduceResponse, WireError};
use crate::raft::types::AppendRequest;
use crate::segment::format::PayloadFormat;
use crate::segment::record::{Record, encode_records};
use crate::transport::frame::Op;
use crate::transport::{CallError, Turn, Turns};
use crate::types::{LeaderHint, Offset, PartitionId, ProducerSeq};

/// Where a batch landed, and how the client got it there.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The partition written.
    pub partition: PartitionId,
    /// The offset of the batch's first record.
    pub base_offset: Offset,
    /// The number of records.
    pub record_count: u32,
    /// Every broker the request went to, in order, and what it answered.
    pub route: Vec<RouteStep>,
}

/// One attempt of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteStep {
    /// The broker's address.
    pub addr: Address,
    /// What happened: `"ok"`, `"not leader; leader is 1 at 127.0.0.1:9092 (term 3)"`, `"unreachable"`...
    pub outcome: String,
}

/// A batch encoded and numbered, waiting to be sent.
pub(crate) struct PreparedBatch {
    turn: Turn,
    request: ProduceRequest,
    slot: Arc<ProducerSlot>,
    started: Instant,
    deadline: Instant,
}

/// The idempotent producer's state for one partition.
#[derive(Debug)]
pub(super) struct ProducerSlot {
    sequencer: Mutex<Sequencer>,
    in_flight: tokio::sync::Semaphore,
    /// Batches take an in-flight slot, and are queued on their connection, in the order they
    /// were numbered: otherwise the five in flight could all wait for an earlier batch that
    /// has no slot, or reach the leader out of order.
    turns: Arc<Turns>,
}

impl Client {
    fn producer_slot(&self, id: &PartitionId) -> Arc<ProducerSlot> {
        let permits = self.config.in_flight_per_partition.clamp(1, 5) as usize;
        Arc::clone(self.producers.lock().entry(id.clone()).or_insert_with(|| {
            Arc::new(ProducerSlot {
                sequencer: Mutex::new(Sequencer::new(new_producer_id())),
                in_flight: tokio::sync::Semaphore::new(permits),
                turns: Turns::new(),
            })
        }))
    }

    /// Sends `records` as one batch to a partition's leader and returns where they landed.
    /// The batch goes in Kafka's record format, each record stamped with this client's clock
    /// (its CreateTime, which Kafka consumers and ListOffsets by time see), so that both of
    /// the brokers' doors serve it as it is stored (`FORMAT.md` §6.4).
    ///
    /// # Errors
    ///
    /// - [`Error::Indeterminate`] if the batch was sent but its outcome is still unknown when
    ///   the delivery deadline passes (or at once, if the client is not idempotent).
    /// - [`Error::Timeout`] if no leader accepted it before the delivery deadline (it was never
    ///   applied).
    /// - [`Error::TopicAuthorizationFailed`] where the brokers enforce ACLs and the client's
    ///   user may not write the topic (or not know it).
    /// - [`Error::UnknownTopic`], [`Error::UnknownPartition`], [`Error::RecordTooLarge`], [`Error::BatchTooLarge`] (over
    ///   this client's limits or those of a broker it has metadata from, refused before
    ///   anything is sent; or refused by the broker for its own: never resent),
    ///   [`Error::EmptyBatch`].
    pub async fn send(&self, topic: &str, partition: u32, records: &[Record]) -> Result<Delivery> {
        let batch = self.prepare(topic, partition, records)?;
        self.send_prepared(batch).await
    }

    /// Encodes `records` as a batch and numbers it for the partition now, so that batches of
    /// one partition keep the order they were prepared in (see [`Client::send`]).
    pub(crate) fn prepare(
        &self,
        topic: &str,
        partition: u32,
        records: &[Record],
    ) -> Result<PreparedBatch> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let (payload, format, record_count) = encode_batch(records, &self.limits())?;
        let id = PartitionId::new(topic, partition);
        let started = Instant::now();
        let slot = self.producer_slot(&id);
        let (numbers, turn) = {
            let sequencer = &mut slot.sequencer.lock();
            let numbers = if self.config.idempotent {
                sequencer.take(record_count)
            } else {
                ProducerSeq::new(0, 0)
            };
            (numbers, slot.turns.issue())
        };
        Ok(PreparedBatch {
            turn,
            request: ProduceRequest {
                partition: id,
                batch: AppendRequest {
                    format,
                    compacted: false,
                    timestamp_ms: 0,
                    records: payload,
                    record_count,
                    producer_id: numbers.producer_id,
                    producer_epoch: numbers.epoch,
                    base_sequence: numbers.base_sequence,
                },
            },
            slot,
            started,
            deadline: started + self.config.delivery_timeout,
        })
    }

    /// Sends a prepared batch, at most `in_flight_per_partition` at once per partition.
    pub(crate) async fn send_prepared(&self, batch: PreparedBatch) -> Result<Delivery> {
        let PreparedBatch {
            turn,
            request,
            slot,
            started,
            deadline,
        } = batch;
        // Settled when the send ends, or as failed if the caller drops it before.
        let mut batch = Unfinished {
            slot,
            request,
            settled: false,
        };
        // In turn, take a slot; the turn passes on once the batch is queued on its first
        // connection (or when it gives up).
        let outcome = {
            let slot = &batch.slot;
            let permit = tokio::time::timeout_at(deadline.into(), async {
                turn.wait().await;
                slot.in_flight.acquire().await
            })
            .await;
            let mut turn = Some(turn);
            match permit {
                Ok(Ok(_permit)) => {
                    self.deliver(&mut batch.request, slot, started, deadline, &mut turn)
                        .await
                }
                _ => Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last: "too many batches in flight to the partition".into(),
                }),
            }
        };
        if outcome.is_ok() {
            crate::metrics::produced(started.elapsed());
        }
        batch.settle(outcome.is_err());
        outcome
    }

    /// Sends `request` until a leader answers it or the delivery deadline passes.
    async fn deliver(
        &self,
        request: &mut ProduceRequest,
        slot: &ProducerSlot,
        started: Instant,
        deadline: Instant,
        turn: &mut Option<Turn>,
    ) -> Result<Delivery> {
        Delivering::new(self, request, slot, started, deadline, turn)
            .run()
            .await
    }
}

/// `records` encoded as a produce sends them: one uncompressed Kafka v2 batch, the form both
/// doors serve without converting it (FORMAT.md §6.4), stamped with this client's clock as
/// the records' CreateTime. In replog's own layout instead where Kafka's cannot carry them (a
/// header name that is not UTF-8) or takes more than `batch_bytes_max` where replog's does
/// not (its 61-byte header, longer length prefixes of large values): a batch within the limits
/// as replog measures them is never refused for its layout. The limits are checked as every
/// broker checks them: each record, and all of them, as replog encodes them
/// (`Record::encoded_len`), and the bytes sent.
pub(super) fn encode_batch(
    records: &[Record],
    limits: &super::BrokerLimits,
) -> Result<(Bytes, PayloadFormat, u32)> {
    let max = u64::from(limits.batch_bytes_max);
    let mut total = 0u64;
    for r in records {
        total = total.saturating_add(r.encoded_len(limits.record_bytes_max)? as u64);
    }
    if total > max {
        return Err(Error::BatchTooLarge { len: total, max });
    }
    let count = u32::try_from(records.len()).map_err(|_| Error::BatchTooLarge {
        len: total,
        max: u64::from(u32::MAX),
    })?;
    let kafka = crate::segment::kafka::encode::encode_produced(records, crate::env::now_ms());
    match kafka {
        Some(batch) if batch.len() as u64 <= max => Ok((batch, PayloadFormat::Kafka, count)),
        _ => {
            let (payload, count) = encode_records(records, limits.record_bytes_max)?;
            Ok((payload, PayloadFormat::Replog, count))
        }
    }
}

/// Whether `meta` names partition `id`. Partition `i` is usually the `i`th named: a topic of
/// 10,000 partitions is not searched by every delivery that refreshes.
fn names_partition(meta: &crate::protocol::MetadataResponse, id: &PartitionId) -> bool {
    let named = |p: &crate::protocol::PartitionMetadata| &p.partition == id;
    meta.partitions
        .get(id.partition as usize)
        .is_some_and(named)
        || meta.partitions.iter().any(named)
}

/// The longest pause between two metadata refreshes of one delivery.
const REFRESH_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What [`Delivering::run`] does after a step.
enum Next {
    /// Send to `target` at once.
    Retry { target: Address },
    /// No leader known: ask for metadata (with backoff), then send to the leader it names.
    Refresh,
    /// Delivered, or failed for good.
    Done(Result<Delivery>),
}

/// What one attempt got: an answer, or no answer.
type Answer = std::result::Result<std::result::Result<ProduceResponse, WireError>, CallError>;

/// One batch on its way to its partition's leader: what `deliver` carries from one attempt to
/// the next.
struct Delivering<'a> {
    client: &'a Client,
    request: &'a mut ProduceRequest,
    slot: &'a ProducerSlot,
    /// The batch's turn, passed on once the first attempt is queued on its connection.
    turn: &'a mut Option<Turn>,
    id: PartitionId,
    idempotent: bool,
    started: Instant,
    deadline: Instant,
    /// Every broker asked so far, and what it answered.
    route: Vec<RouteStep>,
    /// `NotLeader` redirects followed, at most `redirect_hops_max`.
    hops: u32,
    /// Between metadata refreshes.
    backoff: Duration,
    /// Between retries at the same leader (`TryAgain`).
    pause: Duration,
    /// What the last step got, for the error at the deadline.
    last: String,
    /// Whether an attempt may have been written (its outcome is unknown).
    maybe_written: bool,
}

impl<'a> Delivering<'a> {
    fn new(
        client: &'a Client,
        request: &'a mut ProduceRequest,
        slot: &'a ProducerSlot,
        started: Instant,
        deadline: Instant,
        turn: &'a mut Option<Turn>,
    ) -> Self {
        Delivering {
            id: request.partition.clone(),
            idempotent: request.batch.producer_id != 0,
            client,
            request,
            slot,
            turn,
            started,
            deadline,
            route: Vec::new(),
            hops: 0,
            backoff: Duration::from_millis(100),
            pause: Duration::from_millis(10),
            last: String::from("no attempt"),
            maybe_written: false,
        }
    }

    /// Picks a target (the one the last answer named, else the leader metadata names), makes
    /// one attempt, and lets the handler of the answer's class say what comes next.
    async fn run(mut self) -> Result<Delivery> {
        let mut target = self.client.leader_addr(&self.id);
        let mut attempts = 0u32;
        // Bounded by the delivery deadline and the redirect-hop limit.
        loop {
            if Instant::now() >= self.deadline {
                return Err(self.expired());
            }
            let addr = match target.take() {
                Some(addr) => addr,
                None => match self.locate().await {
                    Next::Retry { target } => target,
                    Next::Refresh => continue,
                    Next::Done(result) => return result,
                },
            };
            if attempts > 0 {
                crate::metrics::produce_retry();
            }
            attempts += 1;
            let answer = self.attempt(addr.clone()).await;
            target = match self.on_answer(addr, answer).await {
                Next::Retry { target } => Some(target),
                Next::Refresh => None,
                Next::Done(result) => return result,
            };
        }
    }

    /// The delivery deadline passed.
    fn expired(self) -> Error {
        if self.maybe_written {
            return Error::Indeterminate {
                partition: self.id,
                reason: format!("delivery deadline passed; last: {}", self.last),
            };
        }
        Error::Timeout {
            elapsed_ms: elapsed_ms(self.started),
            last: self.last,
        }
    }

    /// No known leader: asks for metadata (any broker), with backoff once anything was tried.
    async fn locate(&mut self) -> Next {
        // At most half a second: a refresh costs one request per topic however many sends
        // wait on it (they share it), and a leader elected is written to sooner.
        if !self.route.is_empty() {
            tokio::time::sleep(jitter(self.backoff)).await;
            self.backoff = (self.backoff * 2).min(REFRESH_BACKOFF_MAX);
        }
        let topic = &self.id.topic;
        match self.client.refresh_for(Some(topic), Some(&self.id)).await {
            Ok(meta) if meta.partitions.is_empty() => {
                return Next::Done(Err(Error::UnknownTopic(topic.clone())));
            }
            Ok(meta) if !names_partition(&meta, &self.id) => {
                return Next::Done(Err(Error::UnknownPartition(self.id.clone())));
            }
            Ok(_) => {}
            // Final: retrying does not change what the principal may know.
            Err(e @ Error::TopicAuthorizationFailed(_)) => return Next::Done(Err(e)),
            Err(e) => return self.no_leader(e.to_string()),
        }
        match self.client.leader_addr(&self.id) {
            Some(target) => Next::Retry { target },
            None => self.no_leader("no leader elected yet".into()),
        }
    }

    /// Records a refresh that found no leader (as a step at the first bootstrap address).
    fn no_leader(&mut self, last: String) -> Next {
        self.last = last;
        self.route.push(RouteStep {
            addr: self.client.bootstrap[0].clone(),
            outcome: self.last.clone(),
        });
        Next::Refresh
    }

    /// Sends the batch to `addr` once (its numbers marked as being sent meanwhile), and
    /// records the answer.
    async fn attempt(&mut self, addr: Address) -> Answer {
        // The first attempt passes the turn on once it is queued on its connection.
        let enqueued = self.turn.take().map(|turn| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(async move {
                let _ = rx.await;
                drop(turn);
            });
            tx
        });
        if self.idempotent {
            let mut numbers = numbers_of(&self.request.batch);
            self.slot.sequencer.lock().begin_attempt(&mut numbers);
            set_numbers(&mut self.request.batch, numbers);
        }
        let answer = self
            .client
            .call_with::<_, ProduceResponse>(&addr, Op::Produce, &*self.request, enqueued)
            .await;
        if self.idempotent {
            let attempt = match &answer {
                // Written, or perhaps written.
                Ok(Ok(_) | Err(WireError::Indeterminate(_) | WireError::Other(_))) => {
                    Attempt::MayHaveLanded
                }
                Ok(Err(_)) | Err(CallError::Unreachable(_) | CallError::Busy) => Attempt::Refused,
                Err(_) => Attempt::MayHaveLanded,
            };
            self.slot
                .sequencer
                .lock()
                .end_attempt(numbers_of(&self.request.batch), attempt);
        }
        self.record(addr, &answer);
        answer
    }

    /// Notes what `addr` answered, as the last outcome and as a step of the route.
    fn record(&mut self, addr: Address, answer: &Answer) {
        let outcome = match answer {
            Ok(Ok(_)) => "ok".to_string(),
            Ok(Err(WireError::NotLeader { leader: Some(h) })) => format!(
                "not leader; leader is {} at {} (term {})",
                h.node_id, h.addr, h.term
            ),
            Ok(Err(WireError::NotLeader { leader: None })) => {
                "not leader; election in progress".into()
            }
            Ok(Err(e)) => format!("{e:?}"),
            Err(e) => e.to_string(),
        };
        self.last = format!("{addr}: {outcome}");
        // A run of identical answers (waiting out `TryAgain`) is one step.
        if self
            .route
            .last()
            .is_none_or(|r: &RouteStep| r.addr != addr || r.outcome != outcome)
        {
            self.route.push(RouteStep { addr, outcome });
        }
    }

    /// Hands what `addr` answered to the handler of its class.
    async fn on_answer(&mut self, addr: Address, answer: Answer) -> Next {
        match answer {
            Ok(Ok(resp)) => self.on_written(resp),
            Ok(Err(WireError::NotLeader { leader })) => self.on_not_leader(addr, leader),
            Ok(Err(WireError::TryAgain(_))) => self.on_try_again(addr).await,
            Ok(Err(WireError::OutOfOrderSequence { expected, got, .. })) => {
                self.on_out_of_order(addr, expected, got).await
            }
            Ok(Err(WireError::ProducerFenced { epoch, current, .. })) => {
                self.on_fenced(addr, epoch, current)
            }
            Ok(Err(WireError::Indeterminate(reason))) => self.on_unknown_outcome(reason),
            Ok(Err(e)) => Next::Done(Err(e.into_error(&self.id, 0))),
            Err(CallError::Unreachable(_)) => self.on_unreachable(),
            // Never sent: the connection's window stayed full. Its wait was the pause.
            Err(CallError::Busy) => Next::Retry { target: addr },
            Err(e) => self.on_unknown_outcome(format!("{addr}: {e}")),
        }
    }

    /// Written: where, and the way there.
    fn on_written(&mut self, resp: ProduceResponse) -> Next {
        Next::Done(Ok(Delivery {
            partition: self.id.clone(),
            base_offset: Offset(resp.base_offset),
            record_count: resp.record_count,
            route: std::mem::take(&mut self.route),
        }))
    }

    /// Refused by a broker that does not lead: to the leader the hint or the cache names
    /// ([`redirect`]), a bounded number of hops; else refresh, forgetting the cached leader.
    fn on_not_leader(&mut self, addr: Address, hint: Option<LeaderHint>) -> Next {
        let cached = self.client.cached_hint(&self.id);
        let hops_left = self.hops < self.client.config.redirect_hops_max;
        match redirect(&addr, cached, hint) {
            Redirect::Follow(h) if hops_left => {
                self.hops += 1;
                let target = h.addr.clone();
                self.client.learn_leader(&self.id, h);
                Next::Retry { target }
            }
            Redirect::KeepCache(a) if hops_left => {
                self.hops += 1;
                Next::Retry { target: a }
            }
            _ => {
                self.client.forget_leader(&self.id);
                Next::Refresh
            }
        }
    }

    /// The leader cannot take it yet: the same leader again after a pause, doubling up to
    /// 250 ms.
    async fn on_try_again(&mut self, addr: Address) -> Next {
        tokio::time::sleep(jitter(self.pause)).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(250));
        Next::Retry { target: addr }
    }

    /// The partition expects sequence `expected` of this producer, not `got`.
    async fn on_out_of_order(&mut self, addr: Address, expected: u32, got: u32) -> Next {
        let numbers = numbers_of(&self.request.batch);
        let (current_epoch, oldest) = {
            let sequencer = self.slot.sequencer.lock();
            (
                sequencer.is_current_epoch(numbers),
                sequencer.is_oldest(numbers),
            )
        };
        // `got` ahead of `expected`: an earlier batch has not arrived yet, unless this is the
        // oldest one waiting and the partition expects a new producer to start at 0 (it forgot
        // this producer).
        let ahead = (got.wrapping_sub(expected) as i32) > 0;
        let forgotten = expected == 0 && oldest;
        if self.maybe_written && !ahead {
            return Next::Done(Err(Error::Indeterminate {
                partition: self.id.clone(),
                reason: format!(
                    "sequence {got} was sent before but the partition expects {expected} now"
                ),
            }));
        }
        if !self.maybe_written && (!ahead || forgotten || !current_epoch) {
            // Never written, and its place in the sequence is gone (an earlier batch failed
            // for good, or the partition forgot the producer): it takes new numbers in the
            // next epoch, or fails if batches behind it may already have landed under that
            // epoch.
            if !self.renumber(numbers) {
                return Next::Done(Err(Error::OutOfOrderSequence {
                    partition: self.id.clone(),
                    producer_id: numbers.producer_id,
                    expected,
                    got,
                }));
            }
        } else {
            tokio::time::sleep(jitter(Duration::from_millis(5))).await;
        }
        Next::Retry { target: addr }
    }

    /// A later epoch of this producer has written: these numbers never will.
    fn on_fenced(&mut self, addr: Address, epoch: u16, current: u16) -> Next {
        let numbers = numbers_of(&self.request.batch);
        if self.maybe_written {
            return Next::Done(Err(Error::Indeterminate {
                partition: self.id.clone(),
                reason: format!(
                    "epoch {epoch} was fenced by epoch {current} after an attempt whose \
                     outcome is unknown"
                ),
            }));
        }
        if !self.renumber(numbers) {
            return Next::Done(Err(Error::ProducerFenced {
                partition: self.id.clone(),
                producer_id: numbers.producer_id,
                epoch,
                current,
            }));
        }
        Next::Retry { target: addr }
    }

    /// Gives a refused batch that was never written new numbers in the next epoch; `false` if
    /// it cannot have any (batches behind it may already have landed under that epoch).
    fn renumber(&mut self, numbers: ProducerSeq) -> bool {
        let renumbered = self.slot.sequencer.lock().renumber_refused(numbers);
        match renumbered {
            Some(new) => {
                set_numbers(&mut self.request.batch, new);
                true
            }
            None => false,
        }
    }

    /// The outcome is unknown (sent and no answer, or a leader that lost its leadership after
    /// appending): resend, with the same numbers, to whoever leads now. Without idempotence a
    /// resend could write the batch twice: fail with `reason`.
    fn on_unknown_outcome(&mut self, reason: String) -> Next {
        if !self.idempotent {
            return Next::Done(Err(Error::Indeterminate {
                partition: self.id.clone(),
                reason,
            }));
        }
        self.maybe_written = true;
        self.client.forget_leader(&self.id);
        Next::Refresh
    }

    /// Never sent (no connection could be made): to whoever leads now.
    fn on_unreachable(&mut self) -> Next {
        self.client.forget_leader(&self.id);
        Next::Refresh
    }
}

/// A batch while its send runs. If the caller drops the send before it ends (a timeout
/// around it, a `select!`), wherever it waits (for its turn, for an in-flight slot, for an
/// answer), the batch counts as failed, as one that gave up would. Its numbers would
/// otherwise stay unanswered for good, and every later batch of the partition would wait
/// behind them or be refused as out of order.
struct Unfinished {
    slot: Arc<ProducerSlot>,
    /// The request, whose numbers are the batch's current ones (renumbering changes them).
    request: ProduceRequest,
    settled: bool,
}

impl Unfinished {
    /// Tells the sequencer the batch ended, once: a failed batch may leave its numbers
    /// unused, and the partition moves to the next epoch (see `sequencer`).
    fn settle(&mut self, failed: bool) {
        if std::mem::replace(&mut self.settled, true) || self.request.batch.producer_id == 0 {
            return;
        }
        self.slot
            .sequencer
            .lock()
            .finished(numbers_of(&self.request.batch), failed);
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.settle(true);
    }
}

/// The numbers an idempotent batch carries.
fn numbers_of(batch: &AppendRequest) -> ProducerSeq {
    ProducerSeq {
        producer_id: batch.producer_id,
        epoch: batch.producer_epoch,
        base_sequence: batch.base_sequence,
    }
}

fn set_numbers(batch: &mut AppendRequest, numbers: ProducerSeq) {
    batch.producer_id = numbers.producer_id;
    batch.producer_epoch = numbers.epoch;
    batch.base_sequence = numbers.base_sequence;
}
