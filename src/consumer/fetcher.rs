//! A consumer's fetcher: one task per assigned partition, fetching ahead of `poll` with long
//! polls, within the consumer's buffer and one fetch in flight, and handing batches (or why
//! it stopped) to `poll`.

use super::*;
use crate::client::Unchecked;
use crate::segment::batch::Batch;

/// Fetches one partition ahead of `poll`.
pub(super) struct Fetcher {
    pub(super) client: Arc<Client>,
    pub(super) id: PartitionId,
    pub(super) generation: u64,
    pub(super) options: FetchOptions,
    pub(super) tx: mpsc::Sender<(PartitionId, u64, Event)>,
    pub(super) buffered: Arc<Semaphore>,
    /// The buffer's size: a batch larger than it takes all of it.
    pub(super) buffered_max: usize,
}

impl Fetcher {
    async fn send(&self, event: Event) -> bool {
        self.tx
            .send((self.id.clone(), self.generation, event))
            .await
            .is_ok()
    }

    /// Fetches from `next` on until the consumer is gone or the partition is. While the
    /// buffer has room for an answer's records, the next answer is asked for as soon as it
    /// comes (from where its last batch's header says it ends), so the broker reads and sends
    /// it while this side checks the answer's batches and hands their records on. A partition
    /// whose records wait for room fetches nothing more: it holds one answer beyond the
    /// buffer, as Kafka's consumer fetches no partition whose last answer is not consumed.
    pub(super) async fn run(self, mut next: Offset) {
        let topic: Arc<str> = Arc::from(self.id.topic.as_str());
        let (t, p) = (self.id.topic.as_str(), self.id.partition);
        // The fetch made ahead, and the offset it read from.
        let mut ahead: Option<(Offset, Result<Unchecked>)> = None;
        // Ends when the consumer drops its receiver or aborts this task.
        loop {
            let answer = match ahead.take() {
                Some((from, answer)) if from == next => answer,
                _ => self.client.fetch_unchecked(t, p, next, &self.options).await,
            };
            let after = answer
                .as_ref()
                .ok()
                .filter(|a| self.has_room(a.offsets()))
                .and_then(Unchecked::next_offset)
                .filter(|after| *after > next);
            let fetch_ahead = async {
                match after {
                    Some(after) => Some(
                        self.client
                            .fetch_unchecked(t, p, after, &self.options)
                            .await,
                    ),
                    None => None,
                }
            };
            let handle = self.handle(answer, &topic, &mut next);
            let (fetched_ahead, go_on) = tokio::join!(fetch_ahead, handle);
            if !go_on {
                return;
            }
            ahead = after.zip(fetched_ahead);
        }
    }

    /// Whether the buffer has room now for `records` (a batch larger than it takes all of it).
    fn has_room(&self, records: u64) -> bool {
        let want = usize::try_from(records)
            .unwrap_or(usize::MAX)
            .min(self.buffered_max);
        self.buffered.available_permits() >= want
    }

    /// Hands an answer's records on to `poll` and moves `next` past them; on an error, waits
    /// (or moves `next` up to the log start) before the next fetch. `false` once the
    /// consumer or the partition is gone.
    async fn handle(&self, answer: Result<Unchecked>, topic: &Arc<str>, next: &mut Offset) -> bool {
        // A fetch ahead is usually queued on its connection by now (`join!` polled it first);
        // this lets the connection's writer, woken into this worker's slot that others do not
        // steal, send it before the answer is checked.
        tokio::task::yield_now().await;
        let (t, p) = (self.id.topic.as_str(), self.id.partition);
        let fetched = match answer.and_then(Unchecked::check) {
            Ok(f) => f,
            // Below the log start (purged): move up to it, as Kafka's `earliest` reset.
            Err(Error::OffsetOutOfRange { start, .. }) if *next < start => {
                *next = start;
                return true;
            }
            // One broker not knowing the partition (it is behind on the catalog) is not the
            // partition gone: only the cluster's metadata says that.
            Err(e @ (Error::UnknownPartition(_) | Error::UnknownTopic(_))) => {
                let exists = self
                    .client
                    .describe(t)
                    .await
                    .is_ok_and(|d| d.iter().any(|d| d.partition.partition == p));
                if !exists {
                    self.send(Event::Failed(e)).await;
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                return true;
            }
            // A leader change, a broker down: the next fetch finds the leader again.
            Err(e) => {
                tracing::debug!(partition = %self.id, error = %e, "fetch failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return true;
            }
        };
        let marks = Event::Marks {
            high_watermark: fetched.high_watermark,
        };
        if !self.send(marks).await {
            return false;
        }
        let after = fetched
            .batches
            .iter()
            .map(Batch::next_offset)
            .fold(*next, Offset::max);
        if after == *next {
            // Without a wait at the broker, an empty answer comes back at once: pause.
            if self.options.max_wait.is_zero() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            return true;
        }
        let delivered = self.deliver(topic, &fetched.batches, *next).await;
        *next = after;
        delivered
    }

    /// Hands the records of `batches` from `next` on to `poll`, a batch at a time, each
    /// waiting for its room in the buffer; `false` once the consumer is gone.
    async fn deliver(&self, topic: &Arc<str>, batches: &[Batch], next: Offset) -> bool {
        let p = self.id.partition;
        for b in batches {
            let mut records: Vec<ConsumerRecord> = Vec::new();
            let mut iter = b.records();
            // Bounded by the batch's records.
            while let Some((offset, r)) = iter.next() {
                if offset < next {
                    continue;
                }
                records.push(ConsumerRecord {
                    topic: Arc::clone(topic),
                    partition: p,
                    offset,
                    timestamp_ms: iter.timestamp_ms(),
                    timestamp_type: iter.timestamp_type(),
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                });
            }
            if records.is_empty() {
                continue;
            }
            // Waits while `poll` has not taken what was fetched ahead.
            let want = u32::try_from(records.len().min(self.buffered_max)).unwrap_or(u32::MAX);
            let Ok(permit) = Arc::clone(&self.buffered).acquire_many_owned(want).await else {
                return false;
            };
            if !self.send(Event::Records(records, permit)).await {
                return false;
            }
        }
        true
    }
}
