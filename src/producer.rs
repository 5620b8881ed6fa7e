//! [`Producer`]: records in, batches out, like a Kafka producer's accumulator.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::client::{Client, PreparedBatch};
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::segment::record::Record;
use crate::types::Offset;

/// Configuration of a [`Producer`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// How long a record may wait for more records to join its batch. Default 5 ms (Kafka's
    /// default since 4.0).
    pub linger_ms: u64,
    /// A batch is sent as soon as its records take this many bytes (encoded). Default
    /// 256 KiB (large, because at most five batches per partition are in flight); at most the
    /// client's `batch_bytes_max`.
    pub batch_bytes: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger_ms: 5,
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

type Waiter = oneshot::Sender<Result<RecordMetadata>>;

/// Records of one partition waiting to be sent as a batch.
#[derive(Default)]
struct Open {
    records: Vec<Record>,
    waiters: Vec<Waiter>,
    bytes: usize,
    /// Counts batches of this partition, so a linger timer flushes only the batch it was
    /// started for.
    generation: u64,
}

#[derive(Default)]
struct State {
    open: HashMap<(String, u32), Open>,
    /// The partition unkeyed records of each topic go to until its batch is sent.
    sticky: HashMap<String, u32>,
    /// Spreads the sticky choice.
    rng: u64,
}

/// A producer over a [`Client`]: [`send`](Producer::send) takes one record and returns where
/// it landed, while records sent close together travel as one batch per partition.
///
/// - **Partitioning.** A record with a key goes where Kafka's default partitioner puts it
///   ([`partitioner`](crate::partitioner)); a record without a key goes to the topic's
///   current sticky partition, which changes each time its batch is sent.
/// - **Batching.** A partition's batch is sent when its records reach
///   [`ProducerConfig::batch_bytes`], or [`ProducerConfig::linger_ms`] after its first record
///   arrived, whichever comes first.
/// - **Delivery.** Each batch goes through [`Client`]: to the leader, following redirects,
///   resent with the same sequence numbers after an unknown outcome, at most five batches in
///   flight per partition, in the order they were formed. Every record of a batch gets the
///   batch's outcome.
///
/// ```
/// # use std::collections::BTreeMap;
/// # use std::sync::Arc;
/// # use replog::{Client, ClientConfig, Node, NodeConfig, Producer, ProducerConfig, Record};
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> replog::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
/// # let mut config = NodeConfig::new(1, addr, BTreeMap::new(), dir.path());
/// # config.topics = vec![("email.send".into(), 3)];
/// # let node = Node::start(config).await?;
/// # let mut ready = false;
/// # for _ in 0..500 {
/// #     if (0..3).all(|p| node.status("email.send", p).is_ok_and(|s| s.leader == Some(1))) {
/// #         ready = true;
/// #         break;
/// #     }
/// #     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
/// # }
/// # assert!(ready);
/// let client = Arc::new(Client::connect(&[addr], ClientConfig::default()).await?);
/// let producer = Producer::new(Arc::clone(&client), ProducerConfig::default());
/// let a = producer.send("email.send", Record::new("hi").with_key("alice")).await?;
/// let b = producer.send("email.send", Record::new("again").with_key("alice")).await?;
/// assert_eq!(a.partition, b.partition); // one key, one partition, in order
/// assert!(b.offset > a.offset);
/// # drop(producer);
/// # drop(client);
/// # node.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub struct Producer {
    client: Arc<Client>,
    config: ProducerConfig,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// A producer sending through `client`. Must be created inside a tokio runtime's context
    /// when used (batches are sent from spawned tasks).
    pub fn new(client: Arc<Client>, config: ProducerConfig) -> Producer {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 | 1);
        Producer {
            client,
            config,
            state: Arc::new(Mutex::new(State {
                rng: seed,
                ..State::default()
            })),
        }
    }

    /// Sends one record of `topic` and returns where it landed, once its batch is committed.
    ///
    /// # Errors
    ///
    /// What [`Client::send`] returns for the record's batch; [`Error::UnknownPartition`] for
    /// an unknown topic; [`Error::RecordTooLarge`] for this record alone.
    pub async fn send(&self, topic: &str, record: Record) -> Result<RecordMetadata> {
        let partitions = self.client.partition_count(topic).await?;
        let len = record.encoded_len(self.client.record_bytes_max())?;
        let batch_bytes = self
            .config
            .batch_bytes
            .min(self.client.batch_bytes_max() as usize);
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock();
            let partition = match &record.key {
                Some(key) => partition_for_key(key, partitions),
                None => sticky_partition(&mut state, topic, partitions),
            };
            let key = (topic.to_string(), partition);
            // A record that does not fit the open batch closes it first.
            if state
                .open
                .get(&key)
                .is_some_and(|o| !o.records.is_empty() && o.bytes + len > batch_bytes)
            {
                self.send_open(&mut state, &key);
            }
            let open = state.open.entry(key.clone()).or_default();
            open.records.push(record);
            open.waiters.push(tx);
            open.bytes += len;
            if open.bytes >= batch_bytes {
                self.send_open(&mut state, &key);
            } else if open.records.len() == 1 {
                self.start_linger(key, open.generation);
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::Remote(
                "the producer stopped before the batch was sent".into(),
            ))
        })
    }

    /// Sends every open batch now.
    pub fn flush(&self) {
        let mut state = self.state.lock();
        let keys: Vec<(String, u32)> = state.open.keys().cloned().collect();
        for key in keys {
            self.send_open(&mut state, &key);
        }
    }

    /// After `linger_ms`, sends the batch of `key` if it is still generation `generation`.
    fn start_linger(&self, key: (String, u32), generation: u64) {
        let (state, client) = (Arc::clone(&self.state), Arc::clone(&self.client));
        let linger = Duration::from_millis(self.config.linger_ms);
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            let mut state = state.lock();
            if state
                .open
                .get(&key)
                .is_some_and(|o| o.generation == generation && !o.records.is_empty())
            {
                send_open(&client, &mut state, &key);
            }
        });
    }

    fn send_open(&self, state: &mut State, key: &(String, u32)) {
        send_open(&self.client, state, key);
    }
}

/// Numbers the open batch of `key` now (under the state lock, so batches of a partition are
/// numbered in the order they were formed) and sends it from a task of its own.
fn send_open(client: &Arc<Client>, state: &mut State, key: &(String, u32)) {
    let Some(open) = state.open.get_mut(key) else {
        return;
    };
    if open.records.is_empty() {
        return;
    }
    open.generation += 1;
    open.bytes = 0;
    let records = std::mem::take(&mut open.records);
    let waiters = std::mem::take(&mut open.waiters);
    // Kafka's sticky partitioner moves on once the sticky partition's batch is sent.
    if state.sticky.get(&key.0) == Some(&key.1) {
        state.sticky.remove(&key.0);
    }
    let partition = key.1;
    let prepared: Result<PreparedBatch> = client.prepare(&key.0, partition, &records);
    let client = Arc::clone(client);
    tokio::spawn(async move {
        let outcome = match prepared {
            Ok(batch) => client.send_prepared(batch).await,
            Err(e) => Err(e),
        };
        for (i, waiter) in (0u64..).zip(waiters) {
            let result = match &outcome {
                Ok(d) => Ok(RecordMetadata {
                    partition,
                    offset: Offset(d.base_offset.get() + i),
                }),
                Err(e) => Err(e.clone()),
            };
            let _ = waiter.send(result);
        }
    });
}

fn sticky_partition(state: &mut State, topic: &str, partitions: u32) -> u32 {
    if let Some(p) = state.sticky.get(topic).filter(|p| **p < partitions) {
        return *p;
    }
    state.rng ^= state.rng << 13;
    state.rng ^= state.rng >> 7;
    state.rng ^= state.rng << 17;
    let p = (state.rng % u64::from(partitions.max(1))) as u32;
    state.sticky.insert(topic.to_string(), p);
    p
}
