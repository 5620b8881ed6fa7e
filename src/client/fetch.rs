//! [`Client::fetch`]: reading committed batches from a partition's leader or a named replica.

use crate::Address;
use std::time::Duration;

use super::Client;
use crate::error::{Error, Result};
use crate::protocol::{
    FetchRequest, FetchResponse, ListOffsetsRequest, OffsetAt, StoredBatch, WireBatch, WireError,
};
use crate::segment::batch::Batch;
use crate::segment::frame::Limits;
use crate::transport::CallError;
use crate::transport::frame::Op;
use crate::types::{Offset, PartitionId};

/// How [`Client::fetch_with`] reads, as a Kafka consumer's fetch settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FetchOptions {
    /// At most this many bytes of batches (at least one batch, if any). Default 1 MiB.
    pub max_bytes: u32,
    /// The longest the broker waits for `min_bytes` of committed records (Kafka's
    /// `fetch.max.wait.ms`): a fetch at the end of the log returns as soon as a commit brings
    /// them, or empty when this passes, and costs no CPU meanwhile. At most 60 s. Default 0:
    /// answer at once.
    pub max_wait: Duration,
    /// Record bytes worth answering for (Kafka's `fetch.min.bytes`). Default 1: any record.
    pub min_bytes: u32,
    /// Read from this broker instead of the partition's leader (any replica serves
    /// committed records). Default `None`.
    pub replica: Option<Address>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_bytes: 1 << 20,
            max_wait: Duration::ZERO,
            min_bytes: 1,
            replica: None,
        }
    }
}

/// What a fetch returned: committed batches, and where the partition's committed records
/// end and its log starts on the replica that answered (their difference from a position is
/// its lag).
#[derive(Debug)]
#[non_exhaustive]
pub struct Fetched {
    /// The batches, in offset order. The first may start before the offset asked for (a
    /// batch is read whole, as Kafka's fetch answers): its records before that offset are the
    /// reader's to skip.
    pub batches: Vec<Batch>,
    /// Records below this offset are committed (on the answering replica).
    pub high_watermark: Offset,
    /// The first offset still in the answering replica's log.
    pub log_start: Offset,
}

impl Client {
    /// Reads committed batches of a partition from `offset` on, from its leader (or, with
    /// `replica`, from that broker), at most `max_bytes` of them (at least one batch, if any),
    /// and never more than fits this client's `frame_bytes_max` or the broker's. The first
    /// batch may start before `offset` (see [`Fetched::batches`]). Answers at once: see
    /// [`fetch_with`](Self::fetch_with) to wait for records, and for the high watermark.
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`], [`Error::UnknownPartition`], [`Error::NoBrokerReachable`].
    pub async fn fetch(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: u32,
        replica: Option<Address>,
    ) -> Result<Vec<Batch>> {
        let options = FetchOptions {
            max_bytes,
            replica,
            ..FetchOptions::default()
        };
        Ok(self
            .fetch_with(topic, partition, offset, &options)
            .await?
            .batches)
    }

    /// [`fetch`](Self::fetch) as `options` say: a long poll that waits for records (at most
    /// `options.max_wait`), answered with the partition's high watermark and log start.
    ///
    /// # Errors
    ///
    /// As [`fetch`](Self::fetch).
    pub async fn fetch_with(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        options: &FetchOptions,
    ) -> Result<Fetched> {
        self.fetch_unchecked(topic, partition, offset, options)
            .await?
            .check()
    }

    /// [`fetch_with`](Self::fetch_with), the batches not yet checked: a consumer asks for
    /// the next answer (from [`Unchecked::next_offset`]) before it checks this one.
    pub(crate) async fn fetch_unchecked(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        options: &FetchOptions,
    ) -> Result<Unchecked> {
        let id = PartitionId::new(topic, partition);
        // The answer must fit this client's frames (the broker keeps it within its own).
        let fits = self
            .config
            .frame_bytes_max
            .saturating_sub(crate::transport::frame::REQUEST_OVERHEAD_BYTES_MAX);
        let max_wait = options.max_wait.min(Duration::from_secs(60));
        let request = FetchRequest {
            partition: id.clone(),
            offset: offset.get(),
            max_bytes: options.max_bytes.min(fits),
            max_wait_ms: u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX),
            min_bytes: options.min_bytes,
        };
        let mut targets: Vec<Address> = options.replica.iter().cloned().collect();
        let named = !targets.is_empty();
        if targets.is_empty() {
            if self.leader_addr(&id).is_none() {
                let _ = self.refresh(Some(topic)).await;
            }
            targets.extend(self.leader_addr(&id));
            targets.extend(self.candidates());
        }
        // The broker may hold the request for `max_wait` before it answers.
        let timeout = self.timeout() + max_wait;
        let mut tried = Vec::new();
        for addr in targets {
            match self.fetch_from(&addr, &request, timeout).await {
                Ok(Ok(answer)) => {
                    return Ok(Unchecked {
                        answer,
                        limits: Limits {
                            record_bytes_max: self.config.record_bytes_max,
                            batch_bytes_max: self.config.batch_bytes_max,
                        },
                    });
                }
                // This broker hosts no replica of the partition: try the next.
                Ok(Err(WireError::NotLeader { .. })) if !named => {
                    tried.push(format!("{addr} (no replica)"));
                }
                Ok(Err(e)) => return Err(e.into_error(&id, offset.get())),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }

    /// One fetch from `addr`: `Op::FetchAsStored` where the connection speaks protocol
    /// version 4 (Kafka batches come as stored, decoded here), `Op::Fetch` otherwise (an
    /// older broker converts them).
    async fn fetch_from(
        &self,
        addr: &Address,
        request: &FetchRequest,
        timeout: Duration,
    ) -> std::result::Result<std::result::Result<Answer, WireError>, CallError> {
        let version = self.peer(addr).version(self.timeout()).await?;
        if version >= Op::FetchAsStored.since() {
            let answer = self
                .call_timeout::<_, FetchResponse<StoredBatch>>(
                    addr,
                    Op::FetchAsStored,
                    request,
                    timeout,
                )
                .await;
            match answer {
                // Connected again meanwhile, to a broker of an older version.
                Err(CallError::TooNew { .. }) => {}
                answer => return Ok(answer?.map(Answer::Stored)),
            }
        }
        let answer = self
            .call_timeout::<_, FetchResponse>(addr, Op::Fetch, request, timeout)
            .await?;
        Ok(answer.map(Answer::Converted))
    }

    /// The offset of the first committed record of a partition whose timestamp is
    /// `timestamp_ms` or later (ms since the Unix epoch; a producer's records have the time
    /// their producer gave them, a Kafka producer's or this client's clock when it made their
    /// batch; records appended in process, with [`Node::append`](crate::Node::append), their
    /// batch's append time), asked of its leader; `None` if none is yet (Kafka's ListOffsets by
    /// timestamp). The broker finds it without scanning the log (see
    /// [`PartitionLog::offset_for_timestamp`](crate::PartitionLog::offset_for_timestamp)).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPartition`], [`Error::NoBrokerReachable`].
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: u64,
    ) -> Result<Option<Offset>> {
        let id = PartitionId::new(topic, partition);
        let request = ListOffsetsRequest {
            partition: id.clone(),
            at: OffsetAt::Timestamp(timestamp_ms),
        };
        if self.leader_addr(&id).is_none() {
            let _ = self.refresh(Some(topic)).await;
        }
        let mut targets: Vec<Address> = self.leader_addr(&id).into_iter().collect();
        targets.extend(self.candidates());
        let mut tried = Vec::new();
        for addr in targets {
            match self
                .call::<_, Option<u64>>(&addr, Op::ListOffsets, &request)
                .await
            {
                Ok(Ok(found)) => return Ok(found.map(Offset)),
                Ok(Err(WireError::NotLeader { .. })) => tried.push(format!("{addr} (no replica)")),
                Ok(Err(e)) => return Err(e.into_error(&id, 0)),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        Err(Error::NoBrokerReachable {
            tried: tried.join(", "),
        })
    }
}

/// A fetch's answer as the broker sent it.
#[derive(Debug)]
enum Answer {
    /// `Op::FetchAsStored`'s: Kafka batches as stored.
    Stored(FetchResponse<StoredBatch>),
    /// `Op::Fetch`'s: every batch as replog records.
    Converted(FetchResponse),
}

/// A fetch's answer whose batches are not yet checked: they came from the network.
#[derive(Debug)]
pub(crate) struct Unchecked {
    answer: Answer,
    limits: Limits,
}

impl Unchecked {
    /// The batches' frame fields, as they came.
    fn headers(&self) -> Box<dyn DoubleEndedIterator<Item = &WireBatch> + '_> {
        match &self.answer {
            Answer::Stored(a) => Box::new(a.batches.iter().map(|b| &b.batch)),
            Answer::Converted(a) => Box::new(a.batches.iter()),
        }
    }

    /// The offset after the last batch, as its header says; `None` without batches.
    pub(crate) fn next_offset(&self) -> Option<Offset> {
        let last = self.headers().next_back()?;
        Some(Offset(
            last.base_offset
                .saturating_add(u64::from(last.record_count)),
        ))
    }

    /// The offsets the batches span, as their headers say (their records, unless compaction
    /// removed some).
    pub(crate) fn offsets(&self) -> u64 {
        self.headers().map(|b| u64::from(b.record_count)).sum()
    }

    /// The batches, each checked as it came from the network: `Err` for one that does not
    /// hold together.
    pub(crate) fn check(self) -> Result<Fetched> {
        fn fetched<B>(
            answer: FetchResponse<B>,
            into_batch: impl Fn(B) -> Result<Batch>,
        ) -> Result<Fetched> {
            Ok(Fetched {
                batches: answer
                    .batches
                    .into_iter()
                    .map(into_batch)
                    .collect::<Result<Vec<_>>>()?,
                high_watermark: Offset(answer.high_watermark),
                log_start: Offset(answer.log_start),
            })
        }
        let limits = &self.limits;
        match self.answer {
            Answer::Stored(a) => fetched(a, |b| b.into_batch(limits)),
            Answer::Converted(a) => fetched(a, |b| b.into_batch(limits)),
        }
    }
}
