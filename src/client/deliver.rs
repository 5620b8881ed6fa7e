//! The produce path: numbering a batch for its partition ([`PreparedBatch`], [`ProducerSlot`]),
//! sending it in turn, and delivering it to the partition's leader through redirects, elections
//! and unknown outcomes ([`Delivery`], [`RouteStep`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::routing::{Redirect, redirect};
use super::sequencer::{Attempt, Sequencer};
use super::{Client, elapsed_ms, jitter, new_producer_id};
use crate::error::{Error, Result};
use crate::protocol::{ProduceRequest, ProduceResponse, WireError};
use crate::raft::types::AppendRequest;
use crate::segment::record::{Record, encode_records};
use crate::transport::frame::Op;
use crate::transport::{CallError, Turn, Turns};
use crate::types::{Offset, PartitionId, ProducerSeq};

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
    pub addr: SocketAddr,
    /// What happened: `"ok"`, `"not leader; leader is 1 at 127.0.0.1:9092"`, `"unreachable"`...
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
    ///
    /// # Errors
    ///
    /// - [`Error::Indeterminate`] if the batch was sent but its outcome is still unknown when
    ///   the delivery deadline passes (or at once, if the client is not idempotent).
    /// - [`Error::Timeout`] if no leader accepted it before the delivery deadline (it was never
    ///   applied).
    /// - [`Error::UnknownPartition`], [`Error::RecordTooLarge`], [`Error::EmptyBatch`].
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
        let (payload, record_count) = encode_records(records, self.config.record_bytes_max)?;
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
            deadline: started + Duration::from_millis(self.config.delivery_timeout_ms),
        })
    }

    /// Sends a prepared batch, at most `in_flight_per_partition` at once per partition.
    pub(crate) async fn send_prepared(&self, batch: PreparedBatch) -> Result<Delivery> {
        let PreparedBatch {
            turn,
            mut request,
            slot,
            started,
            deadline,
        } = batch;
        // In turn, take a slot; the turn passes on once the batch is queued on its first
        // connection (or when it gives up).
        let permit = tokio::time::timeout_at(deadline.into(), async {
            turn.wait().await;
            slot.in_flight.acquire().await
        })
        .await;
        let mut turn = Some(turn);
        let outcome = match permit {
            Ok(Ok(_permit)) => {
                self.deliver(&mut request, &slot, started, deadline, &mut turn)
                    .await
            }
            _ => Err(Error::Timeout {
                elapsed_ms: elapsed_ms(started),
                last: "too many batches in flight to the partition".into(),
            }),
        };
        if request.batch.producer_id != 0 {
            // A failed batch may leave its sequence numbers unused: the partition moves to the
            // next epoch (see `sequencer`).
            slot.sequencer
                .lock()
                .finished(numbers_of(&request.batch), outcome.is_err());
        }
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
        let id = request.partition.clone();
        let topic = id.topic.clone();
        let idempotent = request.batch.producer_id != 0;
        let mut route = Vec::new();
        let mut hops = 0u32;
        let mut backoff = Duration::from_millis(100);
        // Between retries at the same leader (`TryAgain`).
        let mut pause = Duration::from_millis(10);
        let mut target = self.leader_addr(&id);
        let mut last = String::from("no attempt");
        // Whether an attempt may have been written (its outcome is unknown).
        let mut maybe_written = false;
        // Bounded by the delivery deadline and the redirect-hop limit.
        loop {
            if Instant::now() >= deadline {
                if maybe_written {
                    return Err(Error::Indeterminate {
                        partition: id,
                        reason: format!("delivery deadline passed; last: {last}"),
                    });
                }
                return Err(Error::Timeout {
                    elapsed_ms: elapsed_ms(started),
                    last,
                });
            }
            let addr = match target.take() {
                Some(a) => a,
                None => {
                    // No known leader: ask for metadata (any broker), with backoff.
                    if !route.is_empty() {
                        tokio::time::sleep(jitter(backoff)).await;
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                    match self.refresh_for(Some(&topic), Some(&id)).await {
                        Ok(meta) if !meta.partitions.iter().any(|p| p.partition == id) => {
                            return Err(Error::UnknownPartition(id));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            last = e.to_string();
                            route.push(RouteStep {
                                addr: self.bootstrap[0],
                                outcome: last.clone(),
                            });
                            continue;
                        }
                    }
                    match self.leader_addr(&id) {
                        Some(a) => a,
                        None => {
                            last = "no leader elected yet".into();
                            route.push(RouteStep {
                                addr: self.bootstrap[0],
                                outcome: last.clone(),
                            });
                            continue;
                        }
                    }
                }
            };
            // The first attempt passes the turn on once it is queued on its connection.
            let enqueued = turn.take().map(|turn| {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(async move {
                    let _ = rx.await;
                    drop(turn);
                });
                tx
            });
            if idempotent {
                let mut numbers = numbers_of(&request.batch);
                slot.sequencer.lock().begin_attempt(&mut numbers);
                set_numbers(&mut request.batch, numbers);
            }
            let answer = self
                .call_with::<_, ProduceResponse>(addr, Op::Produce, &*request, enqueued)
                .await;
            if idempotent {
                let attempt = match &answer {
                    // Written, or perhaps written.
                    Ok(Ok(_) | Err(WireError::Indeterminate(_) | WireError::Other(_))) => {
                        Attempt::MayHaveLanded
                    }
                    Ok(Err(_)) | Err(CallError::Unreachable(_)) => Attempt::Refused,
                    Err(_) => Attempt::MayHaveLanded,
                };
                slot.sequencer
                    .lock()
                    .end_attempt(numbers_of(&request.batch), attempt);
            }
            let outcome = match &answer {
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
            last = format!("{addr}: {outcome}");
            // A run of identical answers (waiting out `TryAgain`) is one step.
            if route
                .last()
                .is_none_or(|r: &RouteStep| r.addr != addr || r.outcome != outcome)
            {
                route.push(RouteStep { addr, outcome });
            }
            match answer {
                Ok(Ok(resp)) => {
                    return Ok(Delivery {
                        partition: id,
                        base_offset: Offset(resp.base_offset),
                        record_count: resp.record_count,
                        route,
                    });
                }
                Ok(Err(WireError::NotLeader { leader: hint })) => {
                    let cached = self.cached_hint(&id);
                    // (Locks one at a time: `absorb` takes `brokers` before `leaders`.)
                    match redirect(addr, cached, hint) {
                        Redirect::Follow(h) if hops < self.config.redirect_hops_max => {
                            hops += 1;
                            self.brokers.lock().insert(h.node_id, h.addr);
                            self.leaders.lock().insert(id.clone(), (h.node_id, h.term));
                            target = Some(h.addr);
                        }
                        Redirect::KeepCache(a) if hops < self.config.redirect_hops_max => {
                            hops += 1;
                            target = Some(a);
                        }
                        _ => {
                            self.leaders.lock().remove(&id);
                        }
                    }
                }
                Ok(Err(WireError::TryAgain(_))) => {
                    tokio::time::sleep(jitter(pause)).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                    target = Some(addr);
                }
                Ok(Err(WireError::OutOfOrderSequence { expected, got, .. })) => {
                    let numbers = numbers_of(&request.batch);
                    let (current_epoch, oldest) = {
                        let sequencer = slot.sequencer.lock();
                        (
                            sequencer.is_current_epoch(numbers),
                            sequencer.is_oldest(numbers),
                        )
                    };
                    // `got` ahead of `expected`: an earlier batch has not arrived yet, unless
                    // this is the oldest one waiting and the partition expects a new producer
                    // to start at 0 (it forgot this producer).
                    let ahead = (got.wrapping_sub(expected) as i32) > 0;
                    let forgotten = expected == 0 && oldest;
                    if maybe_written && !ahead {
                        return Err(Error::Indeterminate {
                            partition: id,
                            reason: format!(
                                "sequence {got} was sent before but the partition expects \
                                 {expected} now"
                            ),
                        });
                    }
                    if !maybe_written && (!ahead || forgotten || !current_epoch) {
                        // Never written, and its place in the sequence is gone (an earlier
                        // batch failed for good, or the partition forgot the producer): it
                        // takes new numbers in the next epoch, or fails if batches behind it
                        // may already have landed under that epoch.
                        let renumbered = slot.sequencer.lock().renumber_refused(numbers);
                        match renumbered {
                            Some(new) => set_numbers(&mut request.batch, new),
                            None => {
                                return Err(Error::OutOfOrderSequence {
                                    partition: id,
                                    producer_id: numbers.producer_id,
                                    expected,
                                    got,
                                });
                            }
                        }
                    } else {
                        tokio::time::sleep(jitter(Duration::from_millis(5))).await;
                    }
                    target = Some(addr);
                }
                Ok(Err(WireError::ProducerFenced { epoch, current, .. })) => {
                    // A later epoch of this producer has written: these numbers never will.
                    let numbers = numbers_of(&request.batch);
                    if maybe_written {
                        return Err(Error::Indeterminate {
                            partition: id,
                            reason: format!(
                                "epoch {epoch} was fenced by epoch {current} after an attempt \
                                 whose outcome is unknown"
                            ),
                        });
                    }
                    let renumbered = slot.sequencer.lock().renumber_refused(numbers);
                    match renumbered {
                        Some(new) => set_numbers(&mut request.batch, new),
                        None => {
                            return Err(Error::ProducerFenced {
                                partition: id,
                                producer_id: numbers.producer_id,
                                epoch,
                                current,
                            });
                        }
                    }
                    target = Some(addr);
                }
                Ok(Err(WireError::Indeterminate(reason))) if !idempotent => {
                    return Err(Error::Indeterminate {
                        partition: id,
                        reason,
                    });
                }
                Ok(Err(WireError::Indeterminate(_))) => {
                    maybe_written = true;
                    self.leaders.lock().remove(&id);
                }
                Ok(Err(e)) => return Err(e.into_error(&id, 0)),
                Err(CallError::Unreachable(_)) => {
                    self.leaders.lock().remove(&id);
                }
                Err(e) if !idempotent => {
                    return Err(Error::Indeterminate {
                        partition: id,
                        reason: format!("{addr}: {e}"),
                    });
                }
                Err(_) => {
                    // Sent, and no answer: resend (same sequence) to whoever leads now.
                    maybe_written = true;
                    self.leaders.lock().remove(&id);
                }
            }
        }
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
