//! A consumer's fetcher: one task per assigned partition, fetching ahead of `poll` with long
//! polls, within the consumer's buffer, and handing batches (or why it stopped) to `poll`.

use super::*;

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

    /// Fetches from `next` on until the consumer is gone or the partition is.
    pub(super) async fn run(self, mut next: Offset) {
        let topic: Arc<str> = Arc::from(self.id.topic.as_str());
        let (t, p) = (self.id.topic.as_str(), self.id.partition);
        // Ends when the consumer drops its receiver or aborts this task.
        loop {
            let fetched = match self.client.fetch_with(t, p, next, &self.options).await {
                Ok(f) => f,
                // Below the log start (purged): move up to it, as Kafka's `earliest` reset.
                Err(Error::OffsetOutOfRange { start, .. }) if next < start => {
                    next = start;
                    continue;
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
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                // A leader change, a broker down: the next fetch finds the leader again.
                Err(e) => {
                    tracing::debug!(partition = %self.id, error = %e, "fetch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let marks = Event::Marks {
                high_watermark: fetched.high_watermark,
            };
            if !self.send(marks).await {
                return;
            }
            // Without a wait at the broker, an empty answer comes back at once: pause.
            if fetched.batches.is_empty() && self.options.max_wait.is_zero() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for b in &fetched.batches {
                let mut records: Vec<ConsumerRecord> = Vec::new();
                let mut iter = b.records();
                // Bounded by the batch's records.
                while let Some((offset, r)) = iter.next() {
                    if offset < next {
                        continue;
                    }
                    records.push(ConsumerRecord {
                        topic: Arc::clone(&topic),
                        partition: p,
                        offset,
                        timestamp_ms: iter.timestamp_ms(),
                        timestamp_type: iter.timestamp_type(),
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                    });
                }
                next = next.max(b.next_offset());
                if records.is_empty() {
                    continue;
                }
                // Waits while `poll` has not taken what was fetched ahead.
                let want = u32::try_from(records.len().min(self.buffered_max)).unwrap_or(u32::MAX);
                let Ok(permit) = Arc::clone(&self.buffered).acquire_many_owned(want).await else {
                    return;
                };
                if !self.send(Event::Records(records, permit)).await {
                    return;
                }
            }
        }
    }
}
