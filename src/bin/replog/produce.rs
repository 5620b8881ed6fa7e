//! `replog produce`: its arguments, and sending each line of standard input as a record
//! (optionally split into key and value) through a [`Producer`], as Kafka's console producer
//! does: batched, keyed lines to Kafka's partition for their key, unkeyed lines to a sticky
//! partition, or every line to `--partition`. At the end it says how many records were
//! acknowledged, and which lines failed.

use std::collections::VecDeque;
use std::future::Future;
use std::io::BufRead;
use std::pin::Pin;
use std::sync::Arc;

use replog::{Producer, ProducerConfig, Record, RecordMetadata};

use crate::connect::{Target, connect};
use crate::error::CliError;

/// Records sent and not yet acknowledged at most: bounds memory for any input size (about
/// 100 MiB of 1 KiB lines) while keeping the producer's batches full.
const OUTSTANDING_MAX: usize = 100_000;

/// The arguments of `replog produce`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProduceArgs {
    #[command(flatten)]
    target: Target,
    /// Split each line at the first occurrence of this into key and value.
    #[arg(long)]
    key_separator: Option<String>,
    /// Print the partition and offset of each record, in input order, then each partition's
    /// leader (the broker the writes went to, whichever one bootstrapped the client).
    #[arg(long)]
    print_offsets: bool,
}

type Sent = Pin<Box<dyn Future<Output = replog::Result<RecordMetadata>> + Send>>;

/// Sends every line of standard input as one record, batched.
pub(crate) async fn run(args: ProduceArgs) -> Result<(), CliError> {
    let ProduceArgs {
        target:
            Target {
                bootstrap_server,
                topic,
                partition,
            },
        key_separator,
        print_offsets,
    } = args;
    let client = Arc::new(connect(&bootstrap_server).await?);
    let producer = Producer::new(Arc::clone(&client), ProducerConfig::default());
    let mut tally = Tally::default();
    let mut outstanding: VecDeque<(u64, Sent)> = VecDeque::new();
    let stdin = std::io::stdin();
    for (line_no, line) in (1u64..).zip(stdin.lock().lines()) {
        let line = line.map_err(CliError::Stdin)?;
        let record = to_record(line, key_separator.as_deref());
        let sent: Sent = match partition {
            Some(p) => Box::pin(producer.send_to(&topic, p, record)),
            None => Box::pin(producer.send(&topic, record)),
        };
        outstanding.push_back((line_no, sent));
        tally.lines = line_no;
        if outstanding.len() >= OUTSTANDING_MAX
            && let Some((n, oldest)) = outstanding.pop_front()
        {
            tally.settle(&topic, n, oldest.await, print_offsets);
        }
    }
    producer.flush().await;
    while let Some((n, sent)) = outstanding.pop_front() {
        tally.settle(&topic, n, sent.await, print_offsets);
    }
    if print_offsets && let Ok(partitions) = client.describe(&topic).await {
        for p in partitions
            .iter()
            .filter(|p| tally.partitions.contains(&p.partition.partition))
        {
            let leader = p.leader.map_or("none".to_string(), |l| l.to_string());
            let addr = client
                .broker_addr(p.leader.unwrap_or_default())
                .map_or(String::new(), |a| format!(" at {a}"));
            println!("{topic}/{}	leader {leader}{addr}", p.partition.partition);
        }
    }
    eprintln!("{} records acknowledged", tally.acknowledged);
    match tally.first_failure {
        None => Ok(()),
        Some((first_line, first)) => Err(CliError::NotAcknowledged {
            failed: tally.failed,
            lines: tally.lines,
            first_line,
            first,
        }),
    }
}

/// What became of the lines sent so far.
#[derive(Default)]
struct Tally {
    lines: u64,
    acknowledged: u64,
    failed: u64,
    first_failure: Option<(u64, replog::Error)>,
    /// Partitions written, for the leaders `--print-offsets` names.
    partitions: std::collections::BTreeSet<u32>,
}

impl Tally {
    fn settle(
        &mut self,
        topic: &str,
        line: u64,
        outcome: replog::Result<RecordMetadata>,
        print: bool,
    ) {
        match outcome {
            Ok(meta) => {
                self.acknowledged += 1;
                self.partitions.insert(meta.partition);
                if print {
                    println!("{topic}/{}@{}", meta.partition, meta.offset);
                }
            }
            Err(e) => {
                eprintln!("line {line}: not acknowledged: {e}");
                self.failed += 1;
                self.first_failure.get_or_insert((line, e));
            }
        }
    }
}

/// The record for one line: split at the first `separator` into key and value if given and
/// present, otherwise all value.
fn to_record(line: String, separator: Option<&str>) -> Record {
    match separator.and_then(|sep| line.split_once(sep)) {
        Some((k, v)) => Record::new(v.to_string()).with_key(k.to_string()),
        None => Record::new(line),
    }
}
