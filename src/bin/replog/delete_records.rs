//! `replog delete-records`: a partition's records before an offset deleted on every replica,
//! as Kafka's `kafka-delete-records` does (one partition named by flags instead of its JSON
//! file); prints the partition's new low watermark, as Kafka's tool does.

use replog::Offset;

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog delete-records`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeleteRecordsArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// The partition.
    #[arg(long)]
    partition: u32,
    /// Records below this offset are deleted (at most the partition's high watermark).
    #[arg(long)]
    offset: u64,
}

/// Deletes the records and prints the partition's log start after it.
pub(crate) async fn run(args: DeleteRecordsArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    let start = client
        .delete_records(&args.topic, args.partition, Offset(args.offset))
        .await
        .map_err(|e| match e {
            replog::Error::UnknownTopic(_) => CliError::UnknownTopic(args.topic.clone()),
            other => CliError::Broker(other),
        })?;
    println!("Records delete operation completed:");
    println!(
        "partition: {}-{}\tlow_watermark: {}",
        args.topic, args.partition, start
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `replog delete-records ARGS`, parsed.
    #[derive(Parser)]
    struct DeleteRecords {
        #[command(flatten)]
        args: DeleteRecordsArgs,
    }

    #[test]
    fn every_flag_is_needed_and_the_offset_is_not_negative() {
        let base = ["delete-records", "--bootstrap-server", "b:1"];
        let parse = |more: &[&str]| DeleteRecords::try_parse_from(base.iter().chain(more));
        let parsed = parse(&["--topic", "t", "--partition", "2", "--offset", "7"]).unwrap();
        assert_eq!(
            (
                parsed.args.topic.as_str(),
                parsed.args.partition,
                parsed.args.offset
            ),
            ("t", 2, 7)
        );
        for refused in [
            &["--topic", "t", "--partition", "2"][..],
            &["--topic", "t", "--offset", "7"],
            &["--partition", "2", "--offset", "7"],
            &["--topic", "t", "--partition", "2", "--offset", "-1"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
    }
}
