//! `replog groups`: consumer groups as Kafka's `kafka-consumer-groups` shows and changes them:
//! `--list`, `--describe --group G` (one line per partition: the committed offset, the log
//! end, the lag, and the member that reads it), `--reset-offsets` of a group with no live
//! members (a dry run unless `--execute`), `--delete` of such a group with its offsets, and
//! `--delete-offsets` of a topic's committed offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use replog::{Client, GroupInfo, Offset};

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog groups`, spelled as `kafka-consumer-groups`'.
#[derive(Debug, clap::Args)]
pub(crate) struct GroupsArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// List the groups.
    #[arg(long, conflicts_with_all = ["describe", "reset_offsets", "delete", "delete_offsets"])]
    list: bool,
    /// Describe a group's partitions: offsets, lag and members.
    #[arg(long, requires = "group", conflicts_with_all = ["reset_offsets", "delete", "delete_offsets"])]
    describe: bool,
    /// Reset a group's committed offsets (the group must have no live members).
    #[arg(long, requires = "group", conflicts_with_all = ["delete", "delete_offsets"])]
    reset_offsets: bool,
    /// Delete a group and its committed offsets (the group must have no live members).
    #[arg(long, requires = "group", conflicts_with = "delete_offsets")]
    delete: bool,
    /// Delete a group's committed offsets of --topic (of each of its partitions), unless the
    /// group's members read the topic.
    #[arg(long, requires_all = ["group", "topic"])]
    delete_offsets: bool,
    /// The group.
    #[arg(long)]
    group: Option<String>,
    /// With --reset-offsets: the topic whose partitions are reset (default: every topic the
    /// group has committed offsets for); with --delete-offsets: the topic whose offsets go.
    #[arg(long)]
    topic: Option<String>,
    /// With --reset-offsets: to each partition's first offset.
    #[arg(long, requires = "reset_offsets", conflicts_with_all = ["to_latest", "to_offset", "to_timestamp"])]
    to_earliest: bool,
    /// With --reset-offsets: to each partition's end.
    #[arg(long, requires = "reset_offsets", conflicts_with_all = ["to_offset", "to_timestamp"])]
    to_latest: bool,
    /// With --reset-offsets: to this offset (within each partition's log).
    #[arg(long, requires = "reset_offsets", conflicts_with = "to_timestamp")]
    to_offset: Option<u64>,
    /// With --reset-offsets: to the first record whose timestamp is this time or later, in
    /// milliseconds since the Unix epoch (the end where every record is older).
    #[arg(long, requires = "reset_offsets")]
    to_timestamp: Option<u64>,
    /// With --reset-offsets: apply the reset (without it, only print what it would do).
    #[arg(long, requires = "reset_offsets")]
    execute: bool,
}

/// Where a reset moves each partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResetTo {
    Earliest,
    Latest,
    Offset(u64),
    Timestamp(u64),
}

pub(crate) async fn run(args: GroupsArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    let out = std::io::stdout();
    if args.reset_offsets {
        let group = args.group.as_deref().unwrap_or_default();
        let to = match (
            args.to_earliest,
            args.to_latest,
            args.to_offset,
            args.to_timestamp,
        ) {
            (true, ..) => ResetTo::Earliest,
            (_, true, ..) => ResetTo::Latest,
            (_, _, Some(o), _) => ResetTo::Offset(o),
            (.., Some(ms)) => ResetTo::Timestamp(ms),
            _ => {
                return Err(CliError::Usage(
                    "--reset-offsets needs --to-earliest, --to-latest, --to-offset or \
                     --to-timestamp",
                ));
            }
        };
        return reset(&client, group, args.topic.as_deref(), to, args.execute).await;
    }
    if args.delete {
        let group = args.group.as_deref().unwrap_or_default();
        client.delete_group(group).await?;
        println!("Deletion of requested consumer groups ('{group}') was successful.");
        return Ok(());
    }
    if args.delete_offsets {
        let group = args.group.as_deref().unwrap_or_default();
        let topic = args.topic.as_deref().unwrap_or_default();
        return delete_offsets(&client, group, topic).await;
    }
    if args.describe {
        let group = args.group.as_deref().unwrap_or_default();
        let rows = describe(&client, group).await?;
        let mut out = out.lock();
        let _ = out.write_all(rows.as_bytes());
        return Ok(());
    }
    let mut out = out.lock();
    for g in client.list_groups().await? {
        let _ = writeln!(out, "{}", g.group);
    }
    Ok(())
}

/// The partitions a group reads or has committed, each with its log end.
async fn partitions_of(
    client: &Client,
    info: &GroupInfo,
    committed: &BTreeMap<(String, u32), Offset>,
) -> Result<BTreeMap<(String, u32), (Offset, Offset)>, CliError> {
    let mut keys: BTreeSet<(String, u32)> = committed.keys().cloned().collect();
    for m in &info.members {
        for (t, ps) in &m.assignment {
            keys.extend(ps.iter().map(|p| (t.clone(), *p)));
        }
    }
    let topics: BTreeSet<String> = keys.iter().map(|(t, _)| t.clone()).collect();
    let mut marks = BTreeMap::new();
    for topic in topics {
        let described = client
            .describe(&topic)
            .await
            .map_err(|e| CliError::about_topic(&topic, e))?;
        for d in described {
            let key = (topic.clone(), d.partition.partition);
            if keys.contains(&key) {
                marks.insert(key, (d.log_start, d.high_watermark));
            }
        }
    }
    Ok(marks)
}

/// `--describe`: Kafka's columns, one line per partition, aligned.
async fn describe(client: &Client, group: &str) -> Result<String, CliError> {
    let info = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    let marks = partitions_of(client, &info, &committed).await?;
    let mut owner: BTreeMap<(String, u32), (&str, &str, &str)> = BTreeMap::new();
    for m in &info.members {
        for (t, ps) in &m.assignment {
            for p in ps {
                owner.insert(
                    (t.clone(), *p),
                    (m.member_id.as_str(), m.host.as_str(), m.client_id.as_str()),
                );
            }
        }
    }
    let mut rows = vec![
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for ((topic, partition), (_, end)) in &marks {
        let current = committed.get(&(topic.clone(), *partition));
        let (member, host, client_id) = owner
            .get(&(topic.clone(), *partition))
            .copied()
            .unwrap_or(("-", "-", "-"));
        rows.push(vec![
            group.to_string(),
            topic.clone(),
            partition.to_string(),
            current.map_or("-".into(), |o| o.to_string()),
            end.to_string(),
            current.map_or("-".into(), |o| {
                end.get().saturating_sub(o.get()).to_string()
            }),
            member.to_string(),
            host.to_string(),
            client_id.to_string(),
        ]);
    }
    let mut text = String::new();
    if info.members.is_empty() {
        text.push_str(&format!(
            "Consumer group '{group}' has no active members.\n\n"
        ));
    }
    text.push_str(&table(&rows));
    Ok(text)
}

/// Rows as columns padded to their widest cell, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| format!("{cell:<w$}", w = widths[c]))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `--reset-offsets`: prints the new offsets (Kafka's `GROUP TOPIC PARTITION NEW-OFFSET`),
/// and with `execute` commits them.
async fn reset(
    client: &Client,
    group: &str,
    topic: Option<&str>,
    to: ResetTo,
    execute: bool,
) -> Result<(), CliError> {
    let info = client.describe_group(group).await?;
    if !info.members.is_empty() {
        return Err(CliError::Broker(replog::Error::Group {
            group: group.to_string(),
            error: replog::GroupError::NonEmptyGroup,
        }));
    }
    let committed = client.committed_offsets(group).await?;
    let mut targets: BTreeMap<(String, u32), (Offset, Offset)> = BTreeMap::new();
    match topic {
        Some(t) => {
            let described = client
                .describe(t)
                .await
                .map_err(|e| CliError::about_topic(t, e))?;
            for d in described {
                targets.insert(
                    (t.to_string(), d.partition.partition),
                    (d.log_start, d.high_watermark),
                );
            }
        }
        None => targets = partitions_of(client, &info, &committed).await?,
    }
    let mut plan = Vec::new();
    for ((t, p), (start, end)) in &targets {
        let new = match to {
            ResetTo::Earliest => *start,
            ResetTo::Latest => *end,
            // Within the log, as Kafka clamps it.
            ResetTo::Offset(o) => Offset(o.clamp(start.get(), end.get())),
            ResetTo::Timestamp(ms) => client
                .offset_for_timestamp(t, *p, ms)
                .await
                .map_err(|e| CliError::about_topic(t, e))?
                .unwrap_or(*end),
        };
        plan.push((t.clone(), *p, Some(new)));
    }
    let mut rows = vec![
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
            .map(String::from)
            .to_vec(),
    ];
    for (t, p, o) in &plan {
        rows.push(vec![
            group.to_string(),
            t.clone(),
            p.to_string(),
            o.map_or("-".into(), |o| o.to_string()),
        ]);
    }
    if execute {
        client.reset_group_offsets(group, &plan).await?;
    } else {
        eprintln!("(a dry run: add --execute to reset the offsets)");
    }
    print!("{}", table(&rows));
    Ok(())
}

/// `--delete-offsets`: deletes the group's committed offsets of every partition of `topic`,
/// and prints each partition's outcome (Kafka's `TOPIC PARTITION STATUS`).
async fn delete_offsets(client: &Client, group: &str, topic: &str) -> Result<(), CliError> {
    let partitions: Vec<(String, u32)> = client
        .describe(topic)
        .await
        .map_err(|e| CliError::about_topic(topic, e))?
        .into_iter()
        .map(|d| (topic.to_string(), d.partition.partition))
        .collect();
    let results = client.delete_group_offsets(group, &partitions).await?;
    let mut rows = vec![["TOPIC", "PARTITION", "STATUS"].map(String::from).to_vec()];
    for ((t, p), error) in &results {
        let status = error.map_or_else(|| "Successful".to_string(), |e| format!("Error: {e}"));
        rows.push(vec![t.clone(), p.to_string(), status]);
    }
    print!("{}", table(&rows));
    if results.iter().any(|(_, e)| e.is_some()) {
        return Err(CliError::Usage("some offsets could not be deleted"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            vec!["GROUP".to_string(), "LAG".into(), "HOST".into()],
            vec!["workers-1".to_string(), "12".into(), "/127.0.0.1".into()],
        ];
        assert_eq!(
            table(&rows),
            "GROUP      LAG  HOST\nworkers-1  12   /127.0.0.1\n"
        );
    }
}
