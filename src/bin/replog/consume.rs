//! `replog consume`: its arguments, where each partition starts (an offset, the beginning, or
//! the high watermark), and printing the records of every partition of a topic (or of the one
//! `--partition` names), as Kafka's console consumer does, until a count or an idle timeout;
//! with `--group`, as a member of a consumer group that commits what it printed.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use replog::{Consumer, ConsumerConfig, ConsumerRecord, Offset, StartAt};

use crate::connect::{Target, bootstrap, client};
use crate::error::CliError;

/// How long `--group` waits to be given partitions before it gives up.
const JOIN_WAIT_MAX: Duration = Duration::from_secs(60);

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
    /// Print each record's timestamp first, as `CreateTime:<ms>` (its producer's) or
    /// `LogAppendTime:<ms>` (its leader's), as Kafka's console consumer does.
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
    /// Read as a member of this consumer group: the group shares the topic's partitions
    /// among its members, each starts at the group's committed offset (or, where none is,
    /// at the beginning with --from-beginning, otherwise at the end), and what is printed
    /// is committed.
    #[arg(long, conflicts_with_all = ["offset", "partition", "from_replica"])]
    group: Option<String>,
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
        group,
    } = args;
    if offset.is_some() && partition.is_none() {
        return Err(CliError::Usage("--offset needs --partition"));
    }
    let addrs = bootstrap(&bootstrap_server).await?;
    let client = Arc::new(client(&addrs).await?);
    let mut config = ConsumerConfig::default();
    config.replica = from_replica.then(|| addrs[0].clone());
    let start = match (offset, from_beginning) {
        (Some(o), _) => StartAt::Offset(Offset(o)),
        (None, true) => StartAt::Beginning,
        (None, false) => StartAt::End,
    };
    let grouped = group.is_some();
    if let Some(g) = group {
        // Commits are made here, after printing, for exactly what was printed.
        config.group_id = Some(g);
        config.auto_commit_interval = None;
        config.auto_offset_reset = start;
        config.client_id = "replog-console-consumer".into();
    }
    if grouped {
        // The topic must exist: a group would otherwise wait for it, assigned nothing.
        client
            .partition_count(&topic)
            .await
            .map_err(|e| CliError::about_topic(&topic, e))?;
    }
    let mut consumer = Consumer::new(client, config);
    if grouped {
        consumer.subscribe(&[topic.as_str()])?;
    } else {
        consumer
            .assign(&topic, partition.as_ref().map(std::slice::from_ref), start)
            .await
            .map_err(|e| CliError::about_topic(&topic, e))?;
    }
    let format = Format {
        timestamp: print_timestamp,
        partition: print_partition,
        offset: print_offset,
        key: print_key,
    };
    let idle = Duration::from_millis(timeout_ms);
    let (mut printed, mut last, started) = (0u64, Instant::now(), Instant::now());
    let mut joined = false;
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
        // The idle clock starts once the group has given this member its partitions (the
        // first join may wait for the offsets topic to be created and elected).
        if grouped && !joined {
            if consumer.generation().is_some() {
                joined = true;
            } else if started.elapsed() > JOIN_WAIT_MAX {
                return Err(CliError::Usage("could not join the group within 60 s"));
            }
            last = Instant::now();
        }
        if records.is_empty() {
            continue;
        }
        last = Instant::now();
        let mut next: BTreeMap<u32, Offset> = BTreeMap::new();
        {
            let mut out = stdout.lock();
            for r in records
                .iter()
                .take(max_messages.map_or(usize::MAX, |m| (m - printed) as usize))
            {
                let _ = write_line(&mut out, &Line::from(r), format);
                next.insert(r.partition, Offset(r.offset.get() + 1));
                printed += 1;
            }
            let _ = out.flush();
        }
        if grouped {
            // At least once: what was printed is committed, and nothing past it.
            let offsets: Vec<(&str, u32, Offset)> =
                next.iter().map(|(p, o)| (topic.as_str(), *p, *o)).collect();
            if let Err(e) = consumer.commit_offsets(&offsets).await {
                tracing::warn!(error = %e, "commit failed; the group rebalanced");
            }
        }
    }
    eprintln!("Processed a total of {printed} messages");
    consumer.close().await?;
    Ok(())
}

/// What is printed of one record.
struct Line<'a> {
    partition: u32,
    offset: Offset,
    timestamp_ms: u64,
    timestamp_type: replog::TimestampType,
    key: Option<&'a [u8]>,
    value: &'a [u8],
}

impl<'a> From<&'a ConsumerRecord> for Line<'a> {
    fn from(r: &'a ConsumerRecord) -> Line<'a> {
        Line {
            partition: r.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
            timestamp_type: r.timestamp_type,
            key: r.key.as_deref(),
            value: &r.value,
        }
    }
}

/// One record as Kafka's console consumer prints it: the chosen fields, tab-separated, then
/// the value.
fn write_line(out: &mut impl Write, line: &Line<'_>, format: Format) -> std::io::Result<()> {
    if format.timestamp {
        let kind = match line.timestamp_type {
            replog::TimestampType::CreateTime => "CreateTime",
            replog::TimestampType::LogAppendTime => "LogAppendTime",
        };
        write!(out, "{kind}:{}\t", line.timestamp_ms)?;
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
            timestamp_type: replog::TimestampType::CreateTime,
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
        let stamped = Line {
            timestamp_type: replog::TimestampType::LogAppendTime,
            ..line
        };
        let mut out = Vec::new();
        write_line(&mut out, &stamped, all).unwrap();
        assert!(
            String::from_utf8(out)
                .unwrap()
                .starts_with("LogAppendTime:1234\t")
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
