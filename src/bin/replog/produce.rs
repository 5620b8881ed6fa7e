//! `replog produce`: its arguments, and sending each line of standard input as a record
//! (optionally split into key and value), printing where each landed if asked.

use std::io::BufRead;

use replog::{Delivery, Record};

use crate::connect::{Target, connect};
use crate::error::CliError;

/// The arguments of `replog produce`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProduceArgs {
    #[command(flatten)]
    target: Target,
    /// Split each line at the first occurrence of this into key and value.
    #[arg(long)]
    key_separator: Option<String>,
    /// Print the partition and offset of each record, and the route it took.
    #[arg(long)]
    print_offsets: bool,
}

/// Sends each line of standard input as one record, in its own request.
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
    let client = connect(&bootstrap_server).await?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(CliError::Stdin)?;
        let record = to_record(line, key_separator.as_deref());
        let d = client.send(&topic, partition, &[record]).await?;
        if print_offsets {
            print_delivery(&topic, partition, &d);
        }
    }
    Ok(())
}

/// The record for one line: split at the first `separator` into key and value if given and
/// present, otherwise all value.
fn to_record(line: String, separator: Option<&str>) -> Record {
    match separator.and_then(|sep| line.split_once(sep)) {
        Some((k, v)) => Record::new(v.to_string()).with_key(k.to_string()),
        None => Record::new(line),
    }
}

/// `topic/partition@offset\tvia addr (outcome) -> ...`.
fn print_delivery(topic: &str, partition: u32, d: &Delivery) {
    let route: Vec<String> = d
        .route
        .iter()
        .map(|s| format!("{} ({})", s.addr, s.outcome))
        .collect();
    println!(
        "{topic}/{partition}@{}\tvia {}",
        d.base_offset,
        route.join(" -> ")
    );
}
