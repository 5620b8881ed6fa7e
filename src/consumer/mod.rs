//! [`Consumer`]: reading partitions as a Kafka consumer does: partitions assigned by hand or
//! by a consumer group ([`subscribe`](Consumer::subscribe)), a position in each, records by
//! [`poll`](Consumer::poll) or as a stream, seek, pause and resume, lag, and committed
//! offsets. The group membership is `group.rs`'s; the fetching ahead of `poll`,
//! `fetcher.rs`'s.

mod fetcher;
mod group;

use fetcher::Fetcher;

use crate::Address;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::client::{Client, FetchOptions};
use crate::error::{Error, Result};
use crate::group::assignor::Assignor;
use crate::segment::record::Header;
use crate::types::{Offset, PartitionId};
use group::Membership;

/// How a [`Consumer`] reads.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// The longest one fetch waits at the end of a partition (Kafka's `fetch.max.wait.ms`).
    /// Default 500 ms.
    pub max_wait: Duration,
    /// At most this many bytes of batches per fetch of one partition (Kafka's
    /// `max.partition.fetch.bytes`). Default 1 MiB.
    pub max_bytes: u32,
    /// Records fetched ahead of `poll`, over all partitions; a partition's fetching waits
    /// while they are not taken. A record keeps the answer it came in (at most `max_bytes`,
    /// or one larger batch) in memory; besides those, a partition holds at most one answer
    /// whose records wait for room, and fetches the next ahead only while the buffer has
    /// room for the last one's. Default 4096.
    pub buffered_records: usize,
    /// At most this many records per [`poll`](Consumer::poll) (Kafka's `max.poll.records`).
    /// Default 500.
    pub max_poll_records: usize,
    /// Read from this broker's own replicas instead of the leaders' (any replica serves
    /// committed records). Default `None`.
    pub replica: Option<Address>,
    /// The consumer group whose offsets this consumer commits and, with
    /// [`subscribe`](Consumer::subscribe), whose partitions it shares (Kafka's `group.id`).
    /// Default `None`.
    pub group_id: Option<String>,
    /// The client id the group's coordinator shows for this member. Default `replog`.
    pub client_id: String,
    /// A member not heard from for this long is removed from its group and its partitions
    /// go to the others (Kafka's `session.timeout.ms`). Default 10 s.
    pub session_timeout: Duration,
    /// How long a rebalance waits for the members to join again (Kafka's
    /// `max.poll.interval.ms`: a member rejoins inside [`poll`](Consumer::poll), so one that
    /// does not poll for this long during a rebalance is removed). Default 60 s.
    pub rebalance_timeout: Duration,
    /// How often a member heartbeats (Kafka's `heartbeat.interval.ms`), well within
    /// `session_timeout`. Default 3 s.
    pub heartbeat_interval: Duration,
    /// The assignors this consumer can run, preferred first; the group uses one every member
    /// has. Default range, then round-robin.
    pub assignors: Vec<Assignor>,
    /// Where a group's partition starts when the group has committed nothing for it (Kafka's
    /// `auto.offset.reset`). Default [`StartAt::End`] (Kafka's `latest`).
    pub auto_offset_reset: StartAt,
    /// Commit the positions of every assigned partition at most this often, at the start of
    /// a poll (the records the previous polls returned), and before giving partitions up in a
    /// rebalance, and at [`close`](Consumer::close) (Kafka's `enable.auto.commit` and
    /// `auto.commit.interval.ms`). `None` commits only when asked
    /// ([`commit`](Consumer::commit)). Default 5 s.
    pub auto_commit_interval: Option<Duration>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            max_wait: Duration::from_millis(500),
            max_bytes: 1 << 20,
            buffered_records: 4096,
            max_poll_records: 500,
            replica: None,
            group_id: None,
            client_id: "replog".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(3),
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            auto_offset_reset: StartAt::End,
            auto_commit_interval: Some(Duration::from_secs(5)),
        }
    }
}

/// Where a partition's reading starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The first record still in the log (Kafka's `earliest`).
    Beginning,
    /// The high watermark: only records committed from now on (Kafka's `latest`).
    End,
    /// This offset; one below the log start moves up to it.
    Offset(Offset),
    /// The first record whose timestamp is this time or later, in milliseconds since the Unix
    /// epoch (the end, if none is yet); found without scanning the log
    /// ([`Client::offset_for_timestamp`]).
    Timestamp(u64),
}

/// One record, where it is, and its timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerRecord {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: Offset,
    /// Its timestamp, in milliseconds since the Unix epoch: the time its producer gave it
    /// (CreateTime: a `Producer`'s or a Kafka producer's clock), or its batch's append time
    /// where the topic stamps records with it (`message.timestamp.type=LogAppendTime`) or the
    /// batch holds records appended in process ([`RecordIter::timestamp_ms`]).
    ///
    /// [`RecordIter::timestamp_ms`]: crate::RecordIter::timestamp_ms
    pub timestamp_ms: u64,
    /// Whose clock `timestamp_ms` is.
    pub timestamp_type: crate::TimestampType,
    /// Its key, if any.
    pub key: Option<Bytes>,
    /// Its value.
    pub value: Bytes,
    /// Its headers, in order.
    pub headers: Vec<Header>,
}

/// Events queued between the fetchers and `poll` (records are bounded by
/// `buffered_records`, not by this).
const EVENTS_QUEUED: usize = 256;

/// The rest of a batch of records a poll stopped in: its partition and fetcher generation,
/// the records, their share of the buffer.
type Held = (
    PartitionId,
    u64,
    std::vec::IntoIter<ConsumerRecord>,
    OwnedSemaphorePermit,
);

/// What a partition's fetcher tells the consumer.
enum Event {
    /// One fetched batch's records from the fetch position on, holding their share of
    /// `buffered_records` until `poll` has returned them all.
    Records(Vec<ConsumerRecord>, OwnedSemaphorePermit),
    /// The partition's high watermark and log start, as the last fetch answered.
    Marks { high_watermark: Offset },
    /// The fetcher stopped: the partition is gone.
    Failed(Error),
}

/// One assigned partition.
struct Assigned {
    /// The offset of the next record `poll` returns.
    position: Offset,
    high_watermark: Option<Offset>,
    /// Its fetcher's number, unique in the consumer: events of an earlier fetcher (before a
    /// seek, a pause, or a rebalance that took the partition away and gave it back) are
    /// dropped.
    generation: u64,
    fetcher: Option<tokio::task::JoinHandle<()>>,
}

/// A consumer of assigned partitions: each is fetched ahead on a task of its own (its next
/// fetch in flight while the last answer is checked and handed on), long-polling at the end
/// of its log and following leader changes (the [`Client`] routes each fetch), and
/// [`poll`](Self::poll) returns what was fetched, in each partition's order.
/// Positions move as records are returned; [`seek`](Self::seek) moves one anywhere.
///
/// Delivery: every committed record from a partition's start position on is returned once, in
/// order, while the consumer runs. A consumer given partitions by hand starts where it is told
/// to; one that [`subscribe`](Self::subscribe)s shares its group's partitions and starts at
/// the group's committed offsets (at least once: see there).
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use replog::{Client, ClientConfig, Consumer, ConsumerConfig, Record, StartAt};
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> replog::Result<()> {
/// # let dir = tempfile::tempdir()?;
/// # let cluster = replog::LocalCluster::start(1, dir.path(), |c| {
/// #     c.topics = vec![("email.send".into(), 2)];
/// # })
/// # .await?;
/// # cluster.wait_for_leaders("email.send", 2, Duration::from_secs(10)).await?;
/// let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
/// client.send("email.send", 1, &[Record::new("hello")]).await?;
/// let mut consumer = Consumer::new(Arc::clone(&client), ConsumerConfig::default());
/// consumer.assign("email.send", None, StartAt::Beginning).await?; // every partition
/// let records = consumer.poll(Duration::from_secs(5)).await?;
/// assert_eq!(records[0].value, "hello");
/// assert_eq!(consumer.lag("email.send", 1), Some(0));
/// # drop(consumer);
/// # drop(client);
/// # cluster.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub struct Consumer {
    client: Arc<Client>,
    config: ConsumerConfig,
    tx: mpsc::Sender<(PartitionId, u64, Event)>,
    rx: mpsc::Receiver<(PartitionId, u64, Event)>,
    /// Records fetched ahead and not yet returned, over all partitions: at most
    /// `buffered_records` (a batch larger than that takes them all, alone).
    buffered: Arc<Semaphore>,
    /// What is left of the batch a poll stopped in (at `max_poll_records`).
    held: Option<Held>,
    partitions: HashMap<PartitionId, Assigned>,
    /// A partition's failure that came while a poll held records: reported by the next.
    failed: Option<Error>,
    /// The group membership, once subscribed.
    group: Option<Membership>,
    /// When auto-commit commits next.
    next_auto_commit: Option<tokio::time::Instant>,
    /// Fetchers started so far: each gets the next number.
    fetchers: u64,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config)
            .field("partitions", &self.partitions.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        for a in self.partitions.values_mut() {
            if let Some(f) = a.fetcher.take() {
                f.abort();
            }
        }
    }
}

impl Consumer {
    /// A consumer with no partitions yet.
    pub fn new(client: Arc<Client>, config: ConsumerConfig) -> Consumer {
        let (tx, rx) = mpsc::channel(EVENTS_QUEUED);
        let buffered = Arc::new(Semaphore::new(
            config.buffered_records.clamp(1, Semaphore::MAX_PERMITS),
        ));
        Consumer {
            client,
            config,
            tx,
            rx,
            buffered,
            held: None,
            partitions: HashMap::new(),
            failed: None,
            group: None,
            next_auto_commit: None,
            fetchers: 0,
        }
    }

    /// Subscribes to `topics` as a member of the consumer group
    /// [`ConsumerConfig::group_id`]: the next [`poll`](Self::poll) joins the group, and the
    /// group's leader assigns every partition of the subscribed topics to exactly one
    /// member. Each partition starts at the group's committed offset (or
    /// `auto_offset_reset`). When members come and go, the group rebalances inside a poll:
    /// this consumer commits what it has returned (with auto-commit), gives its partitions
    /// up, and takes up its new ones.
    ///
    /// # Delivery
    ///
    /// At least once, when records are committed after they are processed: a partition's
    /// committed offset is the position after the last record its owner processed, so a new
    /// owner (after a rebalance, a crash, a restart) starts there. Records returned after the
    /// last commit are returned again to the next owner. Within one generation, a partition
    /// has one owner, and a member of an older generation can no longer commit (its commits
    /// fail with [`GroupError::IllegalGeneration`](crate::GroupError::IllegalGeneration) or
    /// [`UnknownMemberId`](crate::GroupError::UnknownMemberId)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use replog::{Client, ClientConfig, Consumer, ConsumerConfig, Record, StartAt};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> replog::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let cluster = replog::LocalCluster::start(1, dir.path(), |c| {
    /// #     c.topics = vec![("email.send".into(), 2)];
    /// # })
    /// # .await?;
    /// # cluster.wait_for_leaders("email.send", 2, Duration::from_secs(10)).await?;
    /// let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    /// client.send("email.send", 0, &[Record::new("hello")]).await?;
    /// let mut config = ConsumerConfig::default();
    /// config.group_id = Some("mailers".into());
    /// config.auto_offset_reset = StartAt::Beginning; // where nothing is committed yet
    /// config.auto_commit_interval = None; // commit after processing
    /// let mut consumer = Consumer::new(Arc::clone(&client), config);
    /// consumer.subscribe(&["email.send"])?;
    /// let records = consumer.poll(Duration::from_secs(10)).await?; // joins, then fetches
    /// assert_eq!(records[0].value, "hello");
    /// assert_eq!(consumer.assignment().len(), 2); // the only member: every partition
    /// consumer.commit().await?;
    /// consumer.close().await?; // leaves the group: its partitions go to the others at once
    /// let committed = client.committed_offsets("mailers").await?;
    /// assert_eq!(committed[&("email.send".to_string(), 0)].get(), 1);
    /// # drop(client);
    /// # cluster.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] without a `group_id`, with no topics, or when partitions
    /// were assigned by hand.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        let Some(group) = self.config.group_id.clone() else {
            return Err(Error::InvalidConfig {
                field: "group_id",
                reason: "subscribing needs a consumer group".into(),
            });
        };
        if topics.is_empty() {
            return Err(Error::InvalidConfig {
                field: "topics",
                reason: "subscribe to at least one topic".into(),
            });
        }
        if self.group.is_none() && !self.partitions.is_empty() {
            return Err(Error::InvalidConfig {
                field: "topics",
                reason: "partitions were assigned by hand: subscribe or assign, not both".into(),
            });
        }
        let mut topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        topics.sort();
        topics.dedup();
        match &mut self.group {
            Some(m) => {
                m.topics = topics;
                let _ = m.rejoin.send(true);
            }
            None => self.group = Some(Membership::new(group, topics)),
        }
        Ok(())
    }

    /// The generation of the group this consumer's partitions belong to (`None` before it
    /// joined, or without a group).
    pub fn generation(&self) -> Option<i32> {
        self.group.as_ref()?.generation
    }

    /// The partitions this consumer reads, sorted.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = self
            .partitions
            .keys()
            .map(|id| (id.topic.clone(), id.partition))
            .collect();
        out.sort();
        out
    }

    /// Commits the position of every partition this consumer reads (the offset after the
    /// last record [`poll`](Self::poll) returned) to its group: call it after processing
    /// what the polls returned.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] without a `group_id`; [`Error::Group`] if the group fenced
    /// this member (it rebalanced: the next poll rejoins) or, for partitions assigned by hand,
    /// if the group has members ([`GroupError::UnknownMemberId`](crate::GroupError));
    /// [`Error::Timeout`] if no coordinator answered.
    pub async fn commit(&mut self) -> Result<()> {
        let ids: Vec<PartitionId> = self.partitions.keys().cloned().collect();
        let offsets = self.positions_of(&ids);
        self.commit_positions(offsets).await
    }

    /// Commits these offsets (each the offset of the next record to read) to the group.
    ///
    /// # Errors
    ///
    /// As [`commit`](Self::commit).
    pub async fn commit_offsets(&mut self, offsets: &[(&str, u32, Offset)]) -> Result<()> {
        let offsets = offsets
            .iter()
            .map(|(t, p, o)| (PartitionId::new(*t, *p), *o))
            .collect();
        self.commit_positions(offsets).await
    }

    async fn commit_positions(&mut self, offsets: Vec<(PartitionId, Offset)>) -> Result<()> {
        let Some(group) = self.config.group_id.clone() else {
            return Err(Error::InvalidConfig {
                field: "group_id",
                reason: "committing needs a consumer group".into(),
            });
        };
        let manual;
        let m = match &self.group {
            Some(m) => m,
            None => {
                manual = Membership::new(group, Vec::new());
                &manual
            }
        };
        self.commit_as(m, offsets).await
    }

    /// The group's committed offset for a partition (`None`: nothing committed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] without a `group_id`; [`Error::Timeout`] if no coordinator
    /// answered.
    pub async fn committed(&self, topic: &str, partition: u32) -> Result<Option<Offset>> {
        let Some(group) = &self.config.group_id else {
            return Err(Error::InvalidConfig {
                field: "group_id",
                reason: "committed offsets belong to a consumer group".into(),
            });
        };
        let found = self
            .client
            .fetch_group_offsets(group, Some(vec![(topic.to_string(), partition)]))
            .await?;
        Ok(found.first().and_then(|c| c.offset).map(Offset))
    }

    /// Leaves the consumer: with auto-commit, commits the positions first; a group member
    /// then leaves its group, so that its partitions go to the others at once (a consumer
    /// dropped without `close` is removed when its session times out).
    ///
    /// # Errors
    ///
    /// What the commit or the leave returned; the consumer stops either way.
    pub async fn close(mut self) -> Result<()> {
        let mut outcome = Ok(());
        if self.config.auto_commit_interval.is_some() && self.config.group_id.is_some() {
            let joined = self.group.as_ref().is_none_or(|m| m.generation.is_some());
            if joined && !self.partitions.is_empty() {
                outcome = self.commit().await;
            }
        }
        if let Some(mut m) = self.group.take() {
            m.stop_heartbeat();
            if !m.member_id.is_empty() {
                let left = self.client.leave_group(&m.group, &m.member_id).await;
                outcome = outcome.and(left);
            }
        }
        outcome
    }

    /// Assigns `partitions` of `topic` (all of them with `None`), each starting at `start`.
    /// A partition assigned already moves to `start`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::UnknownPartition`] for a partition past the topic's; what
    /// [`Client::describe`] returns.
    pub async fn assign(
        &mut self,
        topic: &str,
        partitions: Option<&[u32]>,
        start: StartAt,
    ) -> Result<()> {
        if self.group.is_some() {
            return Err(Error::InvalidConfig {
                field: "topics",
                reason: "subscribed to a group: its partitions are assigned by the group".into(),
            });
        }
        self.assign_at(topic, partitions, start).await
    }

    async fn assign_at(
        &mut self,
        topic: &str,
        partitions: Option<&[u32]>,
        start: StartAt,
    ) -> Result<()> {
        let described = self.client.describe(topic).await?;
        let chosen: Vec<u32> = match partitions {
            None => described.iter().map(|d| d.partition.partition).collect(),
            Some(ps) => ps.to_vec(),
        };
        for p in chosen {
            let d = described
                .iter()
                .find(|d| d.partition.partition == p)
                .ok_or_else(|| Error::UnknownPartition(PartitionId::new(topic, p)))?;
            let position = match start {
                StartAt::Beginning => d.log_start,
                StartAt::End => d.high_watermark,
                StartAt::Offset(o) => o,
                StartAt::Timestamp(ms) => self
                    .client
                    .offset_for_timestamp(topic, p, ms)
                    .await?
                    .unwrap_or(d.high_watermark),
            };
            self.start(PartitionId::new(topic, p), position);
        }
        Ok(())
    }

    /// Moves a partition's position to `start` (records fetched ahead from the old one are
    /// dropped).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPartition`] if the partition is not assigned; what
    /// [`Client::describe`] returns.
    pub async fn seek(&mut self, topic: &str, partition: u32, start: StartAt) -> Result<()> {
        let id = PartitionId::new(topic, partition);
        if !self.partitions.contains_key(&id) {
            return Err(Error::UnknownPartition(id));
        }
        self.assign_at(topic, Some(&[partition]), start).await
    }

    /// The offset of the next record [`poll`](Self::poll) returns from a partition, if it is
    /// assigned.
    pub fn position(&self, topic: &str, partition: u32) -> Option<Offset> {
        Some(self.assigned(topic, partition)?.position)
    }

    /// How many committed records of a partition are past its position, as of the last fetch
    /// (Kafka's consumer lag); `None` before the first answer.
    pub fn lag(&self, topic: &str, partition: u32) -> Option<u64> {
        let a = self.assigned(topic, partition)?;
        Some(a.high_watermark?.get().saturating_sub(a.position.get()))
    }

    /// Stops fetching a partition; its position stays.
    pub fn pause(&mut self, topic: &str, partition: u32) {
        self.fetchers += 1;
        if let Some(a) = self.partitions.get_mut(&PartitionId::new(topic, partition)) {
            a.generation = self.fetchers;
            if let Some(f) = a.fetcher.take() {
                f.abort();
            }
        }
    }

    /// Fetches a paused partition again, from its position.
    pub fn resume(&mut self, topic: &str, partition: u32) {
        let id = PartitionId::new(topic, partition);
        if let Some(position) = self
            .partitions
            .get(&id)
            .filter(|a| a.fetcher.is_none())
            .map(|a| a.position)
        {
            self.start(id, position);
        }
    }

    /// Waits up to `timeout` for records, then returns every record fetched ahead (at most
    /// `max_poll_records`), each partition's in offset order; empty if none came.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`] or [`Error::UnknownPartition`] if an assigned partition is gone
    /// (its topic deleted); it is
    /// no longer fetched.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if self.group.is_some() {
            self.maybe_auto_commit().await;
            // A member told to rejoin returns nothing more of its old partitions.
            if self.group.as_ref().is_some_and(Membership::needs_rejoin) {
                self.rejoin().await?;
            }
        }
        let mut out = Vec::new();
        let max = self.config.max_poll_records.max(1);
        // Bounded by the deadline and by `max_poll_records`.
        while out.len() < max {
            if let Some((id, generation, mut records, permit)) = self.held.take() {
                // Dropped with its permit if its partition was reassigned or sought since.
                if let Some(a) = self
                    .partitions
                    .get_mut(&id)
                    .filter(|a| a.generation == generation)
                {
                    for r in records.by_ref() {
                        // A batch is fetched whole: records before the position were returned.
                        if r.offset >= a.position {
                            a.position = Offset(r.offset.get() + 1);
                            out.push(r);
                            if out.len() >= max {
                                break;
                            }
                        }
                    }
                    if records.len() > 0 {
                        self.held = Some((id, generation, records, permit));
                    }
                }
                continue;
            }
            let next = if out.is_empty() {
                match self.next_event(deadline).await? {
                    Some(event) => event,
                    None => break,
                }
            } else {
                match self.rx.try_recv() {
                    Ok(event) => event,
                    Err(_) => break,
                }
            };
            let (id, generation, event) = next;
            let Some(a) = self
                .partitions
                .get_mut(&id)
                .filter(|a| a.generation == generation)
            else {
                continue;
            };
            match event {
                Event::Records(records, permit) => {
                    self.held = Some((id, generation, records.into_iter(), permit));
                }
                Event::Marks { high_watermark } => {
                    a.high_watermark = Some(high_watermark);
                    crate::metrics::consumer_lag(
                        &id,
                        high_watermark.get().saturating_sub(a.position.get()),
                    );
                }
                Event::Failed(e) => {
                    a.fetcher = None;
                    // The records taken already are returned first: their positions moved.
                    if out.is_empty() {
                        return Err(e);
                    }
                    self.failed = Some(e);
                    break;
                }
            }
        }
        report_consumed(&out);
        Ok(out)
    }

    /// Waits until `deadline` for the next event of a fetcher, rejoining the group first (and
    /// whenever it rebalances while waiting).
    async fn next_event(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Result<Option<(PartitionId, u64, Event)>> {
        // Bounded by the deadline (each rejoin by the rebalance timeout).
        loop {
            let mut rejoin = match &self.group {
                Some(m) if m.needs_rejoin() => {
                    self.rejoin().await?;
                    continue;
                }
                Some(m) => Some(m.rejoin_rx.clone()),
                None => None,
            };
            let rebalance = async {
                match &mut rejoin {
                    Some(rx) => {
                        let _ = rx.wait_for(|r| *r).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = tokio::time::timeout_at(deadline, self.rx.recv()) => {
                    return Ok(event.ok().flatten());
                }
                () = rebalance => {}
            }
        }
    }

    /// The records, one by one, as [`poll`](Self::poll) returns them, for as long as the
    /// stream is read.
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<ConsumerRecord>> {
        let state = (self, std::collections::VecDeque::new());
        futures_util::stream::unfold(state, |(mut consumer, mut ready)| async move {
            // Bounded per item by the polls' own timeouts; ends only when dropped.
            loop {
                if let Some(r) = ready.pop_front() {
                    return Some((Ok(r), (consumer, ready)));
                }
                match consumer.poll(consumer.config.max_wait).await {
                    Ok(records) => ready.extend(records),
                    Err(e) => return Some((Err(e), (consumer, ready))),
                }
            }
        })
    }

    fn assigned(&self, topic: &str, partition: u32) -> Option<&Assigned> {
        self.partitions.get(&PartitionId::new(topic, partition))
    }

    /// (Re)starts fetching `id` from `position`.
    fn start(&mut self, id: PartitionId, position: Offset) {
        let a = self.partitions.entry(id.clone()).or_insert(Assigned {
            position,
            high_watermark: None,
            generation: 0,
            fetcher: None,
        });
        if let Some(f) = a.fetcher.take() {
            f.abort();
        }
        self.fetchers += 1;
        a.generation = self.fetchers;
        a.position = position;
        let fetcher = Fetcher {
            client: Arc::clone(&self.client),
            id,
            generation: a.generation,
            options: FetchOptions {
                max_wait: self.config.max_wait,
                max_bytes: self.config.max_bytes,
                replica: self.config.replica.clone(),
                ..FetchOptions::default()
            },
            tx: self.tx.clone(),
            buffered: Arc::clone(&self.buffered),
            buffered_max: self
                .config
                .buffered_records
                .clamp(1, Semaphore::MAX_PERMITS),
        };
        a.fetcher = Some(tokio::spawn(fetcher.run(position)));
    }
}

/// Counts the records a poll returns, per topic (they come in runs of one topic).
fn report_consumed(records: &[ConsumerRecord]) {
    let mut run: Option<(&str, u64)> = None;
    for r in records {
        match &mut run {
            Some((topic, n)) if *topic == &*r.topic => *n += 1,
            _ => {
                if let Some((topic, n)) = run {
                    crate::metrics::consumed(topic, n);
                }
                run = Some((&r.topic, 1));
            }
        }
    }
    if let Some((topic, n)) = run {
        crate::metrics::consumed(topic, n);
    }
}
