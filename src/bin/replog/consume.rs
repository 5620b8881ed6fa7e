//! `replog consume`: its arguments, where each partition starts (an offset, the beginning, or
//! the high watermark), and printing the records of every partition of a topic (or of the one
//! `--partition` names), as Kafka's console consumer does, until a count or an idle timeout.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{Client, Error, FetchOptions, Offset};
use tokio::sync::mpsc;

use crate::connect::{Target, bootstrap, client};
use crate::error::CliError;

/// The arguments of `replog consume`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    target: Target,
    /// Start every partition at the first record still in its log.
    #[arg(long)]
    from_beginning: bool,
    /// Start at this offset (with `--partition`).
    #[arg(long)]
    offset: Option<u64>,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Stop after this long without new records.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// Read the bootstrap broker's own replicas instead of the leaders'.
    #[arg(long)]
    from_replica: bool,
    /// Print each record's batch timestamp first, as `CreateTime:<ms>`.
    #[arg(long)]
    print_timestamp: bool,
    /// Print each record's partition, as `Partition:<n>`.
    #[arg(long)]
    print_partition: bool,
    /// Print each record's offset, as `Offset:<n>`.
    #[arg(long)]
    print_offset: bool,
    /// Print each record's key before its value (`null` for none).
    #[arg(long)]
    print_key: bool,
}

/// What to print of each record besides its value.
#[derive(Clone, Copy)]
struct Format {
    timestamp: bool,
    partition: bool,
    offset: bool,
    key: bool,
}

/// One record on its way from a partition's reader to the printer.
struct Line {
    partition: u32,
    offset: Offset,
    timestamp_ms: u64,
    key: Option<bytes::Bytes>,
    value: bytes::Bytes,
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
        print_timestamp,
        print_partition,
        print_offset,
        print_key,
    } = args;
    if offset.is_some() && partition.is_none() {
        return Err(CliError::Usage("--offset needs --partition"));
    }
    let addrs = bootstrap(&bootstrap_server).await?;
    let client = Arc::new(client(&addrs).await?);
    let described = client
        .describe(&topic)
        .await
        .map_err(|e| CliError::about_topic(&topic, e))?;
    let starts: Vec<(u32, Offset)> = described
        .iter()
        .filter(|p| partition.is_none_or(|only| only == p.partition.partition))
        .map(|p| {
            let start = match (offset, from_beginning) {
                (Some(o), _) => Offset(o),
                (None, true) => Offset(0),
                (None, false) => p.high_watermark,
            };
            (p.partition.partition, start)
        })
        .collect();
    if starts.is_empty() {
        return Err(CliError::about_topic(
            &topic,
            Error::UnknownPartition(replog::PartitionId::new(
                topic.as_str(),
                partition.unwrap_or(0),
            )),
        ));
    }
    let replica = from_replica.then(|| addrs[0]);
    let (tx, rx) = mpsc::channel(1024);
    let readers: Vec<_> = starts
        .into_iter()
        .map(|(p, start)| {
            let reader = Reader {
                client: Arc::clone(&client),
                topic: topic.clone(),
                partition: p,
                replica,
            };
            tokio::spawn(reader.read(start, tx.clone()))
        })
        .collect();
    drop(tx);
    let format = Format {
        timestamp: print_timestamp,
        partition: print_partition,
        offset: print_offset,
        key: print_key,
    };
    let printed = print(rx, format, max_messages, Duration::from_millis(timeout_ms)).await;
    for reader in &readers {
        reader.abort();
    }
    let mut failure = None;
    for reader in readers {
        if let Ok(Err(e)) = reader.await {
            failure.get_or_insert(e);
        }
    }
    eprintln!("Processed a total of {printed} messages");
    match failure {
        Some(e) => Err(CliError::about_topic(&topic, e)),
        None => Ok(()),
    }
}

/// Prints lines as they come until `max` were printed, `idle` passed without one, or every
/// reader ended; returns how many it printed.
async fn print(
    mut rx: mpsc::Receiver<Line>,
    format: Format,
    max: Option<u64>,
    idle: Duration,
) -> u64 {
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    let mut last = Instant::now();
    // Bounded by `max` and by the idle timeout.
    while max.is_none_or(|m| printed < m) {
        let wait = idle.saturating_sub(last.elapsed());
        let Ok(Some(line)) = tokio::time::timeout(wait, rx.recv()).await else {
            break;
        };
        last = Instant::now();
        let mut out = stdout.lock();
        let _ = write_line(&mut out, &line, format);
        printed += 1;
        // Flush once nothing more is waiting, so that a pipe sees records promptly.
        if rx.is_empty() {
            let _ = out.flush();
        }
    }
    let _ = stdout.lock().flush();
    printed
}

/// One record as Kafka's console consumer prints it: the chosen fields, tab-separated, then
/// the value.
fn write_line(out: &mut impl Write, line: &Line, format: Format) -> std::io::Result<()> {
    if format.timestamp {
        write!(out, "CreateTime:{}\t", line.timestamp_ms)?;
    }
    if format.partition {
        write!(out, "Partition:{}\t", line.partition)?;
    }
    if format.offset {
        write!(out, "Offset:{}\t", line.offset)?;
    }
    if format.key {
        match &line.key {
            Some(k) => out.write_all(k)?,
            None => out.write_all(b"null")?,
        }
        out.write_all(b"\t")?;
    }
    out.write_all(&line.value)?;
    out.write_all(b"\n")
}

/// One partition being read.
struct Reader {
    client: Arc<Client>,
    topic: String,
    partition: u32,
    /// The broker whose own replica to read, or `None` for the leader's.
    replica: Option<SocketAddr>,
}

impl Reader {
    /// Sends the partition's records from `start` on to `tx`, long-polling at the end of the
    /// log, until the printer stops listening. A start below the log's (purged) start moves
    /// up to it.
    async fn read(self, start: Offset, tx: mpsc::Sender<Line>) -> Result<(), Error> {
        let mut next = start;
        let mut options = FetchOptions::default();
        options.replica = self.replica;
        options.max_wait = Duration::from_millis(500);
        // Ends when the printer drops the receiver (or is aborted).
        loop {
            let fetched = match self
                .client
                .fetch_with(&self.topic, self.partition, next, &options)
                .await
            {
                Ok(f) => f,
                Err(Error::OffsetOutOfRange { start, .. }) if next < start => {
                    next = start;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for b in &fetched.batches {
                for (offset, r) in b.records() {
                    // A batch is read whole: its records before `next` were printed already.
                    if offset < next {
                        continue;
                    }
                    let line = Line {
                        partition: self.partition,
                        offset,
                        timestamp_ms: b.timestamp_ms(),
                        key: r.key,
                        value: r.value,
                    };
                    if tx.send(line).await.is_err() {
                        return Ok(());
                    }
                }
                next = next.max(b.next_offset());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_prints_the_fields_asked_for_in_kafkas_order() {
        let line = Line {
            partition: 2,
            offset: Offset(7),
            timestamp_ms: 1234,
            key: Some(bytes::Bytes::from_static(b"user-1")),
            value: bytes::Bytes::from_static(b"hello"),
        };
        let all = Format {
            timestamp: true,
            partition: true,
            offset: true,
            key: true,
        };
        let mut out = Vec::new();
        write_line(&mut out, &line, all).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CreateTime:1234\tPartition:2\tOffset:7\tuser-1\thello\n"
        );
        let none = Format {
            timestamp: false,
            partition: false,
            offset: false,
            key: false,
        };
        let mut out = Vec::new();
        write_line(&mut out, &line, none).unwrap();
        assert_eq!(out, b"hello\n");
    }
}
