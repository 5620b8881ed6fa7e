//! `replog consume`: its arguments, where to start (an offset, the beginning, or the high
//! watermark), and printing a partition's records until a count or an idle timeout.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use replog::{Client, Error, FetchOptions, Offset};

use crate::connect::{Target, bootstrap, client};
use crate::error::CliError;

/// The arguments of `replog consume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    target: Target,
    /// Start at the first record still in the log.
    #[arg(long)]
    from_beginning: bool,
    /// Start at this offset.
    #[arg(long)]
    offset: Option<u64>,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Stop after this long without new records.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// Read the bootstrap broker's own replica instead of the leader's.
    #[arg(long)]
    from_replica: bool,
}

/// One partition being read: what [`Reader::print_records`] needs.
struct Reader<'a> {
    client: &'a Client,
    topic: &'a str,
    partition: u32,
    /// The broker whose own replica to read, or `None` for the leader's.
    replica: Option<SocketAddr>,
}

/// Prints the records, then `Processed a total of N messages` on standard error.
pub(crate) async fn run(args: ConsumeArgs) -> Result<(), CliError> {
    let ConsumeArgs {
        target:
            Target {
                bootstrap_server,
                topic,
                partition,
            },
        from_beginning,
        offset,
        max_messages,
        timeout_ms,
        from_replica,
    } = args;
    let addrs = bootstrap(&bootstrap_server).await?;
    let client = client(&addrs).await?;
    let reader = Reader {
        client: &client,
        topic: &topic,
        partition,
        replica: from_replica.then(|| addrs[0]),
    };
    let start = match (offset, from_beginning) {
        (Some(o), _) => Offset(o),
        (None, true) => Offset(0),
        (None, false) => reader.high_watermark().await?,
    };
    let timeout = Duration::from_millis(timeout_ms);
    let printed = reader.print_records(start, max_messages, timeout).await?;
    eprintln!("Processed a total of {printed} messages");
    Ok(())
}

impl Reader<'_> {
    /// The partition's high watermark, where a consumer that wants only new records starts
    /// (0 if the topic has no such partition: the fetch then says so).
    async fn high_watermark(&self) -> Result<Offset, CliError> {
        let d = self
            .client
            .describe(self.topic)
            .await
            .map_err(|e| CliError::about_topic(self.topic, e))?;
        Ok(d.iter()
            .find(|p| p.partition.partition == self.partition)
            .map_or(Offset(0), |p| p.high_watermark))
    }

    /// Prints records from `start` until `max` records or `timeout` without new ones; returns
    /// how many it printed. A start below the log's (purged) start moves up to it.
    async fn print_records(
        &self,
        start: Offset,
        max: Option<u64>,
        timeout: Duration,
    ) -> Result<u64, CliError> {
        let mut next = start;
        let mut printed = 0u64;
        let mut idle_since = Instant::now();
        let stdout = std::io::stdout();
        loop {
            if max.is_some_and(|m| printed >= m) {
                return Ok(printed);
            }
            // A long poll: the broker answers as soon as a record is committed, or empty once
            // the wait is over (at most a second, so that the idle timeout is kept).
            let mut options = FetchOptions::default();
            options.replica = self.replica;
            options.max_wait = timeout
                .saturating_sub(idle_since.elapsed())
                .min(Duration::from_secs(1));
            let batches = match self
                .client
                .fetch_with(self.topic, self.partition, next, &options)
                .await
            {
                Ok(fetched) => fetched.batches,
                Err(Error::OffsetOutOfRange { start, .. }) if next < start => {
                    next = start;
                    continue;
                }
                Err(e) => return Err(CliError::about_topic(self.topic, e)),
            };
            if batches.is_empty() {
                if idle_since.elapsed() >= timeout {
                    return Ok(printed);
                }
                continue;
            }
            idle_since = Instant::now();
            let mut out = stdout.lock();
            for b in &batches {
                for (o, r) in b.records() {
                    if o < next || max.is_some_and(|m| printed >= m) {
                        continue;
                    }
                    let _ = out.write_all(&r.value);
                    let _ = out.write_all(b"\n");
                    printed += 1;
                }
                next = next.max(b.next_offset());
            }
            let _ = out.flush();
        }
    }
}
