//! `replog consume`: its arguments, where each partition starts (an offset, the beginning, or
//! the high watermark), and printing the records of every partition of a topic (or of the one
//! `--partition` names), as Kafka's console consumer does, until a count or an idle timeout.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{Consumer, ConsumerConfig, ConsumerRecord, Offset, StartAt};

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
    let mut config = ConsumerConfig::default();
    config.replica = from_replica.then(|| addrs[0]);
    let mut consumer = Consumer::new(client, config);
    let start = match (offset, from_beginning) {
        (Some(o), _) => StartAt::Offset(Offset(o)),
        (None, true) => StartAt::Beginning,
        (None, false) => StartAt::End,
    };
    consumer
        .assign(&topic, partition.as_ref().map(std::slice::from_ref), start)
        .await
        .map_err(|e| CliError::about_topic(&topic, e))?;
    let format = Format {
        timestamp: print_timestamp,
        partition: print_partition,
        offset: print_offset,
        key: print_key,
    };
    let idle = Duration::from_millis(timeout_ms);
    let (mut printed, mut last) = (0u64, Instant::now());
    let stdout = std::io::stdout();
    // Bounded by `max_messages` and by the idle timeout.
    while max_messages.is_none_or(|m| printed < m) {
        let wait = idle.saturating_sub(last.elapsed());
        if wait.is_zero() {
            break;
        }
        let records = consumer
            .poll(wait)
            .await
            .map_err(|e| CliError::about_topic(&topic, e))?;
        if records.is_empty() {
            continue;
        }
        last = Instant::now();
        let mut out = stdout.lock();
        for r in records
            .iter()
            .take(max_messages.map_or(usize::MAX, |m| (m - printed) as usize))
        {
            let _ = write_line(&mut out, &Line::from(r), format);
            printed += 1;
        }
        let _ = out.flush();
    }
    eprintln!("Processed a total of {printed} messages");
    Ok(())
}

/// What is printed of one record.
struct Line<'a> {
    partition: u32,
    offset: Offset,
    timestamp_ms: u64,
    key: Option<&'a [u8]>,
    value: &'a [u8],
}

impl<'a> From<&'a ConsumerRecord> for Line<'a> {
    fn from(r: &'a ConsumerRecord) -> Line<'a> {
        Line {
            partition: r.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
            key: r.key.as_deref(),
            value: &r.value,
        }
    }
}

/// One record as Kafka's console consumer prints it: the chosen fields, tab-separated, then
/// the value.
fn write_line(out: &mut impl Write, line: &Line<'_>, format: Format) -> std::io::Result<()> {
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
    out.write_all(line.value)?;
    out.write_all(b"\n")
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
            key: Some(b"user-1"),
            value: b"hello",
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
