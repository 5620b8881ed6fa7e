//! [`Producer`]: records in, batches out, like a Kafka producer's accumulator.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use crate::client::{Client, PreparedBatch};
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::segment::record::Record;
use crate::types::{Offset, PartitionId};

/// Configuration of a [`Producer`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// How long a record may wait for more records to join its batch. Default 5 ms (Kafka's
    /// default since 4.0).
    pub linger: Duration,
    /// A batch is sent as soon as its records take this many bytes (encoded). Default
    /// 256 KiB (large, because at most five batches per partition are in flight); at most the
    /// client's `batch_bytes_max`.
    pub batch_bytes: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::from_millis(5),
            batch_bytes: 256 << 10,
        }
    }
}

/// Where a record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordMetadata {
    /// The partition.
    pub partition: u32,
    /// The record's offset in it.
    pub offset: Offset,
}

/// A record that waits for its topic's partition count: the record, the partition it was
/// sent to (if chosen by the sender), its encoded length, and where its ticket goes.
type Waiting = (Record, Option<u32>, usize, Waiter);

/// Hands a record that waited for its topic's partition count the ticket of the batch it
/// joined (or its refusal).
type Waiter = oneshot::Sender<Ticket>;

/// A batch's outcome, shared by its records: the base offset, or the error. `None` until the
/// batch is answered.
type BatchOutcome = Option<Result<Offset>>;

/// What a record's future waits on.
enum Ticket {
    /// Known at once (the record was refused).
    Done(Result<RecordMetadata>),
    /// Record `index` of a batch of `partition`: one channel per batch, not one per record.
    Batch {
        outcome: watch::Receiver<BatchOutcome>,
        partition: u32,
        index: u64,
    },
    /// A record that waited for its topic's partition count: its ticket comes when it is
    /// placed.
    Deferred(oneshot::Receiver<Ticket>),
}

fn stopped() -> Error {
    Error::Remote("the producer stopped before the batch was sent".into())
}

impl Ticket {
    async fn wait(self) -> Result<RecordMetadata> {
        match self {
            Ticket::Done(result) => result,
            Ticket::Deferred(rx) => match rx.await {
                Ok(ticket) => Box::pin(ticket.wait()).await,
                Err(_) => Err(stopped()),
            },
            Ticket::Batch {
                mut outcome,
                partition,
                index,
            } => match outcome.wait_for(Option::is_some).await {
                Ok(answer) => match &*answer {
                    Some(Ok(base)) => Ok(RecordMetadata {
                        partition,
                        offset: Offset(base.get() + index),
                    }),
                    Some(Err(e)) => Err(e.clone()),
                    None => Err(stopped()),
                },
                Err(_) => Err(stopped()),
            },
        }
    }
}

/// Records of one partition waiting to be sent as a batch.
#[derive(Default)]
struct Open {
    records: Vec<Record>,
    /// The batch's outcome, for its records' futures (made with the first record).
    outcome: Option<watch::Sender<BatchOutcome>>,
    bytes: usize,
    /// Counts batches of this partition, so a linger timer flushes only the batch it was
    /// started for.
    generation: u64,
}

/// What the producer keeps per topic.
struct Topic {
    /// One open batch per partition.
    open: Vec<Open>,
    /// The partition unkeyed records go to until its batch is sent.
    sticky: Option<u32>,
}

struct State {
    topics: HashMap<String, Topic>,
    /// Records of topics whose partition count is being asked for, in the order they came.
    waiting: HashMap<String, Vec<Waiting>>,
    /// Spreads the sticky choice.
    rng: u64,
}

/// What `Producer` shares with its tasks.
struct Shared {
    client: Arc<Client>,
    config: ProducerConfig,
    /// `config.batch_bytes`, capped by the client's batch limit.
    batch_bytes: usize,
    state: Mutex<State>,
    /// Tasks at work on sent records: batches being delivered, topics whose partition count
    /// is being asked for. [`Producer::flush`] waits for it to reach zero.
    working: watch::Sender<usize>,
}

/// Counts one task of [`Shared::working`] for as long as it lives.
struct Working(watch::Sender<usize>);

impl Working {
    fn start(working: &watch::Sender<usize>) -> Working {
        working.send_modify(|n| *n += 1);
        Working(working.clone())
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A producer over a [`Client`]: [`send`](Producer::send) takes one record and returns where
/// it landed, while records sent close together travel as one batch per partition.
///
/// - **Partitioning.** A record with a key goes where Kafka's default partitioner puts it
///   ([`partitioner`](crate::partitioner)); a record without a key goes to the topic's
///   current sticky partition, which changes each time its batch is sent.
/// - **Batching.** A partition's batch is sent when its records reach
///   [`ProducerConfig::batch_bytes`], or [`ProducerConfig::linger`] after its first record
///   arrived, whichever comes first.
/// - **Delivery.** Each batch goes through [`Client`]: to the leader, following redirects,
///   resent with the same sequence numbers after an unknown outcome, at most five batches in
///   flight per partition, in the order they were formed. Every record of a batch gets the
///   batch's outcome.
/// - **Ending.** [`flush`](Producer::flush) sends what lingers and waits until every record
///   sent is settled; [`close`](Producer::close) does so and ends the producer.
///
/// ```
/// # use std::sync::Arc;
/// # use replog::{Client, ClientConfig, Producer, ProducerConfig, Record};
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> replog::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let cluster = replog::LocalCluster::start(1, dir.path(), |c| {
/// #     c.topics = vec![("email.send".into(), 3)];
/// # })
/// # .await?;
/// # cluster
/// #     .wait_for_leaders("email.send", 3, std::time::Duration::from_secs(10))
/// #     .await?;
/// # let addr = cluster.addrs()[0];
/// let client = Arc::new(Client::connect(&[addr], ClientConfig::default()).await?);
/// let producer = Producer::new(Arc::clone(&client), ProducerConfig::default());
/// let a = producer.send("email.send", Record::new("hi").with_key("alice")).await?;
/// let b = producer.send("email.send", Record::new("again").with_key("alice")).await?;
/// assert_eq!(a.partition, b.partition); // one key, one partition, in order
/// assert!(b.offset > a.offset);
/// let last = producer.send("email.send", Record::new("bye"));
/// producer.close().await; // every record sent is settled now
/// assert!(last.await.is_ok());
/// # drop(client);
/// # cluster.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub struct Producer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// A producer sending through `client`. Must be used inside a tokio runtime (batches are
    /// sent from spawned tasks).
    pub fn new(client: Arc<Client>, config: ProducerConfig) -> Producer {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 | 1);
        let batch_bytes = config.batch_bytes.min(client.batch_bytes_max() as usize);
        Producer {
            shared: Arc::new(Shared {
                client,
                config,
                batch_bytes,
                state: Mutex::new(State {
                    topics: HashMap::new(),
                    waiting: HashMap::new(),
                    rng: seed,
                }),
                working: watch::Sender::new(0),
            }),
        }
    }

    /// Sends one record of `topic`; the returned future says where it landed once its batch
    /// is committed.
    ///
    /// The record joins its partition's batch when `send` is called (the first records of a
    /// topic wait, in order, for its partition count), so records sent one after another keep
    /// that order within a partition even if their futures are polled in another order.
    ///
    /// # Errors
    ///
    /// What [`Client::send`] returns for the record's batch; [`Error::UnknownPartition`] for
    /// an unknown topic; [`Error::RecordTooLarge`] for this record alone.
    pub fn send(
        &self,
        topic: &str,
        record: Record,
    ) -> impl Future<Output = Result<RecordMetadata>> + Send + 'static {
        self.shared.enqueue(topic, None, record).wait()
    }

    /// [`send`](Self::send) to `partition`, whatever the record's key.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send); [`Error::UnknownPartition`] if the topic has no such
    /// partition.
    pub fn send_to(
        &self,
        topic: &str,
        partition: u32,
        record: Record,
    ) -> impl Future<Output = Result<RecordMetadata>> + Send + 'static {
        self.shared.enqueue(topic, Some(partition), record).wait()
    }

    /// Sends every open batch now, and waits until every record sent before the call is
    /// settled (acknowledged or failed), as Kafka's `flush`. Records sent meanwhile by other
    /// tasks are waited for too: a producer that never stops sending keeps this waiting.
    pub async fn flush(&self) {
        let mut working = self.shared.working.subscribe();
        // Bounded: without concurrent sends, the second round finds nothing open.
        loop {
            let open = {
                let mut state = self.shared.state.lock();
                let keys: Vec<(String, u32)> = state
                    .topics
                    .iter()
                    .flat_map(|(name, t)| {
                        t.open
                            .iter()
                            .enumerate()
                            .filter(|(_, o)| !o.records.is_empty())
                            .map(move |(p, _)| (name.clone(), p as u32))
                    })
                    .collect();
                for (topic, partition) in &keys {
                    self.shared.send_open(&mut state, topic, *partition);
                }
                !keys.is_empty() || !state.waiting.is_empty()
            };
            if !open && *working.borrow_and_update() == 0 {
                return;
            }
            // Woken when a delivery or a metadata request ends.
            if working.changed().await.is_err() {
                return;
            }
        }
    }

    /// [`flush`](Self::flush)es, then drops the producer: every record sent is settled when
    /// this returns.
    pub async fn close(self) {
        self.flush().await;
    }
}

impl Shared {
    /// Adds `record` to its partition's open batch, sending the batch when it is full.
    ///
    /// A record of a topic whose partition count is not known yet waits, in order with every
    /// later record of that topic, until one metadata request (from a task of its own) tells
    /// it.
    fn enqueue(self: &Arc<Self>, topic: &str, partition: Option<u32>, record: Record) -> Ticket {
        let len = match record.encoded_len(self.client.record_bytes_max()) {
            Ok(len) => len,
            Err(e) => return Ticket::Done(Err(e)),
        };
        let mut state = self.state.lock();
        if state.topics.contains_key(topic) {
            return self.place(&mut state, topic, partition, record, len);
        }
        let (reply, rx) = oneshot::channel();
        match state.waiting.get_mut(topic) {
            Some(waiting) => waiting.push((record, partition, len, reply)),
            None => {
                state
                    .waiting
                    .insert(topic.to_string(), vec![(record, partition, len, reply)]);
                self.learn_topic(topic);
            }
        }
        Ticket::Deferred(rx)
    }

    /// Asks for `topic`'s partition count, then places the records waiting for it, in order
    /// (or fails them all).
    fn learn_topic(self: &Arc<Self>, topic: &str) {
        let shared = Arc::clone(self);
        let topic = topic.to_string();
        let working = Working::start(&self.working);
        tokio::spawn(async move {
            let _working = working;
            let learned = shared.client.partition_count(&topic).await;
            let mut state = shared.state.lock();
            let waiting = state.waiting.remove(&topic).unwrap_or_default();
            match learned {
                Ok(partitions) if partitions > 0 => {
                    state.topics.insert(
                        topic.clone(),
                        Topic {
                            open: (0..partitions).map(|_| Open::default()).collect(),
                            sticky: None,
                        },
                    );
                    for (record, partition, len, reply) in waiting {
                        let placed = shared.place(&mut state, &topic, partition, record, len);
                        let _ = reply.send(placed);
                    }
                }
                other => {
                    let e = other
                        .err()
                        .unwrap_or_else(|| Error::UnknownTopic(topic.to_string()));
                    for (_, _, _, reply) in waiting {
                        let _ = reply.send(Ticket::Done(Err(e.clone())));
                    }
                }
            }
        });
    }

    /// Adds a record of a known topic to its partition's open batch, sending the batch when
    /// it is full; the ticket says where the record landed.
    fn place(
        self: &Arc<Self>,
        state: &mut State,
        topic: &str,
        chosen: Option<u32>,
        record: Record,
        len: usize,
    ) -> Ticket {
        let Some(t) = state.topics.get_mut(topic) else {
            return Ticket::Done(Err(Error::UnknownTopic(topic.to_string())));
        };
        let partitions = t.open.len() as u32;
        let partition = match (chosen, &record.key) {
            (Some(p), _) if p >= partitions => {
                return Ticket::Done(Err(Error::UnknownPartition(PartitionId::new(topic, p))));
            }
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => *t.sticky.get_or_insert_with(|| {
                state.rng ^= state.rng << 13;
                state.rng ^= state.rng >> 7;
                state.rng ^= state.rng << 17;
                (state.rng % u64::from(partitions.max(1))) as u32
            }),
        };
        // A record that does not fit the open batch closes it first.
        if t.open
            .get(partition as usize)
            .is_some_and(|o| !o.records.is_empty() && o.bytes + len > self.batch_bytes)
        {
            self.send_open(state, topic, partition);
        }
        let Some(open) = state
            .topics
            .get_mut(topic)
            .and_then(|t| t.open.get_mut(partition as usize))
        else {
            return Ticket::Done(Err(Error::UnknownPartition(PartitionId::new(
                topic, partition,
            ))));
        };
        let index = open.records.len() as u64;
        open.records.push(record);
        let outcome = open
            .outcome
            .get_or_insert_with(|| watch::Sender::new(None))
            .subscribe();
        open.bytes += len;
        let generation = open.generation;
        if open.bytes >= self.batch_bytes {
            self.send_open(state, topic, partition);
        } else if open.records.len() == 1 {
            self.start_linger(topic, partition, generation);
        }
        Ticket::Batch {
            outcome,
            partition,
            index,
        }
    }

    /// After `linger`, sends the batch of `partition` if it is still generation
    /// `generation`.
    fn start_linger(self: &Arc<Self>, topic: &str, partition: u32, generation: u64) {
        let shared = Arc::clone(self);
        let topic = topic.to_string();
        let linger = self.config.linger;
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            let mut state = shared.state.lock();
            let current = state
                .topics
                .get(&topic)
                .and_then(|t| t.open.get(partition as usize))
                .is_some_and(|o| o.generation == generation);
            if current {
                shared.send_open(&mut state, &topic, partition);
            }
        });
    }

    /// Numbers the open batch of `partition` now (under the state lock, so batches of a
    /// partition are numbered in the order they were formed) and sends it from a task of its
    /// own.
    fn send_open(&self, state: &mut State, topic: &str, partition: u32) {
        let Some(t) = state.topics.get_mut(topic) else {
            return;
        };
        // Kafka's sticky partitioner moves on once the sticky partition's batch is sent.
        if t.sticky == Some(partition) {
            t.sticky = None;
        }
        let Some(open) = t.open.get_mut(partition as usize) else {
            return;
        };
        if open.records.is_empty() {
            return;
        }
        open.generation += 1;
        open.bytes = 0;
        let records = std::mem::take(&mut open.records);
        let outcome_tx = open.outcome.take();
        let prepared: Result<PreparedBatch> = self.client.prepare(topic, partition, &records);
        let client = Arc::clone(&self.client);
        let working = Working::start(&self.working);
        tokio::spawn(async move {
            let _working = working;
            crate::metrics::producer_in_flight(1.0);
            let outcome = match prepared {
                Ok(batch) => client.send_prepared(batch).await.map(|d| d.base_offset),
                Err(e) => Err(e),
            };
            crate::metrics::producer_in_flight(-1.0);
            if let Some(tx) = outcome_tx {
                tx.send_replace(Some(outcome));
            }
        });
    }
}
