//! `replog topics`: its flags, which name one [`Action`] (create, delete, grow, reassign,
//! elect leaders, list or describe), and carrying that action out against the cluster.

use replog::{Client, Election, PartitionId};

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog topics`, as Kafka's `kafka-topics` spells them: the action is a
/// flag. [`TopicsArgs::action`] turns the flags into an [`Action`].
///
/// The flags that cannot go together are declared with `conflicts_with_all`, not with an
/// `ArgGroup` of all five, because two combinations have always been accepted: no action
/// at all (`--list`), and `--describe --list` (`--list` wins).
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("sized").args(["create", "alter"]).multiple(false))]
#[command(group = clap::ArgGroup::new("one_partition").args(["reassign", "elect_leaders"]).multiple(false))]
pub(crate) struct TopicsArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// Print partition, leader, replicas and in-sync replicas.
    #[arg(long)]
    describe: bool,
    /// List topic names.
    #[arg(long)]
    list: bool,
    /// Create the topic named by --topic.
    #[arg(long, conflicts_with_all = ["describe", "list", "delete"], requires = "topic")]
    create: bool,
    /// Delete the topic named by --topic (not a topic configured on the brokers).
    #[arg(long, conflicts_with_all = ["describe", "list"], requires = "topic")]
    delete: bool,
    /// The topic (default: every topic).
    #[arg(long)]
    topic: Option<String>,
    /// Grow the topic named by --topic to --partitions partitions (never fewer).
    #[arg(long, conflicts_with_all = ["describe", "list", "delete", "create"], requires_all = ["topic", "partitions"])]
    alter: bool,
    /// Partitions, with --create (default 1) or --alter.
    #[arg(long, requires = "sized")]
    partitions: Option<u32>,
    /// With --alter: the brokers of each partition, as kafka-topics spells them: partitions
    /// separated by commas, a partition's brokers by colons, the preferred leader first
    /// (`1:2,2:3`). Either every partition the topic will have (those it has are left as
    /// they are, as kafka-topics does) or only the new ones.
    #[arg(long, value_name = "B:B,B:B", value_parser = parse_replica_assignment, requires = "alter")]
    replica_assignment: Option<ReplicaAssignment>,
    /// Replicas of each partition (at most the number of brokers), with --create.
    #[arg(long, default_value_t = 1, requires = "create")]
    replication_factor: u32,
    /// A topic config KEY=VALUE set from the start, with --create (repeatable; Kafka's
    /// topic config names, e.g. cleanup.policy=compact, retention.ms=86400000).
    #[arg(long = "config", value_name = "KEY=VALUE", requires = "create")]
    configs: Vec<String>,
    /// Move partition --partition of the topic named by --topic to the brokers
    /// --replicas (Kafka's partition reassignment).
    #[arg(long, conflicts_with_all = ["describe", "list", "delete", "create"], requires_all = ["topic", "replicas"])]
    reassign: bool,
    /// The partition to move, with --reassign (default 0), or to elect a leader for, with
    /// --elect-leaders (default: every partition of --topic).
    #[arg(long, requires = "one_partition")]
    partition: Option<u32>,
    /// Where to move it, with --reassign: broker ids, comma-separated, the preferred
    /// leader first.
    #[arg(long, value_delimiter = ',', requires = "reassign")]
    replicas: Vec<u64>,
    /// Hand leadership to each partition's preferred replica (the first of its replicas),
    /// as kafka-leader-election --election-type PREFERRED: of --topic (and --partition) if
    /// given, else of every partition.
    #[arg(long, conflicts_with_all = ["describe", "list", "delete", "create", "alter"])]
    elect_leaders: bool,
}

/// What `replog topics` does: exactly one of these.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// `--create`: a new topic.
    Create {
        topic: String,
        partitions: u32,
        replication_factor: u32,
        configs: Vec<String>,
    },
    /// `--alter --partitions N`: a topic grown to `N` partitions, on the brokers
    /// `--replica-assignment` names if given (empty: placed by replog).
    Grow {
        topic: String,
        partitions: u32,
        assignment: Vec<Vec<u64>>,
    },
    /// `--delete`: a topic created at run time.
    Delete { topic: String },
    /// `--reassign`: move one partition to other brokers.
    Reassign {
        topic: String,
        partition: u32,
        replicas: Vec<u64>,
    },
    /// `--elect-leaders`: leadership to the preferred replicas of one partition, one topic's,
    /// or every partition (`topic` none).
    ElectLeaders {
        topic: Option<String>,
        partition: Option<u32>,
    },
    /// `--list`, or no action: topic names and partition counts, of `topic` only if given.
    List { topic: Option<String> },
    /// `--describe` (without `--list`): a line per partition, of `topic` or of every topic.
    Describe { topic: Option<String> },
}

impl TopicsArgs {
    /// The action the flags name. clap has already refused the combinations that conflict,
    /// and `--create`, `--delete` and `--reassign` without `--topic`.
    fn action(self) -> Action {
        let TopicsArgs {
            bootstrap_server: _,
            describe,
            list,
            create,
            delete,
            topic,
            alter,
            partitions,
            replica_assignment,
            replication_factor,
            configs,
            reassign,
            partition,
            replicas,
            elect_leaders,
        } = self;
        match topic {
            topic if elect_leaders => Action::ElectLeaders { topic, partition },
            Some(topic) if reassign => Action::Reassign {
                topic,
                partition: partition.unwrap_or(0),
                replicas,
            },
            Some(topic) if alter => Action::Grow {
                topic,
                partitions: partitions.unwrap_or(1),
                assignment: replica_assignment.map(|a| a.0).unwrap_or_default(),
            },
            Some(topic) if create => Action::Create {
                topic,
                partitions: partitions.unwrap_or(1),
                replication_factor,
                configs,
            },
            Some(topic) if delete => Action::Delete { topic },
            topic if list || !describe => Action::List { topic },
            topic => Action::Describe { topic },
        }
    }
}

/// Connects to the cluster and carries out the action.
pub(crate) async fn run(args: TopicsArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    match args.action() {
        Action::Create {
            topic,
            partitions,
            replication_factor,
            configs,
        } => {
            let configs = crate::configs::parse_pairs(&configs)?;
            client
                .create_topic_with_configs(&topic, partitions, replication_factor, &configs)
                .await?;
            println!("Created topic {topic}.");
        }
        Action::Grow {
            topic,
            partitions,
            mut assignment,
        } => {
            // kafka-topics' list names every partition: the ones the topic has are dropped.
            if assignment.len() == partitions as usize {
                let current = client
                    .partition_count(&topic)
                    .await
                    .map_err(|e| CliError::about_topic(&topic, e))?;
                assignment.drain(..(current as usize).min(assignment.len()));
            }
            client
                .create_partitions_assigned(&topic, partitions, &assignment)
                .await
                .map_err(|e| CliError::about_topic(&topic, e))?;
            println!("Topic {topic} has {partitions} partitions.");
        }
        Action::Delete { topic } => {
            client
                .delete_topic(&topic)
                .await
                .map_err(|e| CliError::about_topic(&topic, e))?;
            println!("Deleted topic {topic}.");
        }
        Action::Reassign {
            topic,
            partition,
            replicas,
        } => {
            client
                .reassign_partition(&topic, partition, &replicas)
                .await
                .map_err(|e| CliError::about_topic(&topic, e))?;
            let list: Vec<String> = replicas.iter().map(u64::to_string).collect();
            println!("Moving {topic}-{partition} to {}.", list.join(","));
        }
        Action::ElectLeaders { topic, partition } => {
            elect_leaders(&client, topic, partition).await?;
        }
        Action::List { topic } => {
            for (name, n) in client.list_topics().await? {
                if topic.as_deref().is_none_or(|t| t == name) {
                    println!("{name}\t({n} partitions)");
                }
            }
        }
        Action::Describe { topic } => describe(&client, topic).await?,
    }
    Ok(())
}

/// Hands leadership to the preferred replicas of `partition` of `topic`, of every partition
/// of `topic`, or of every partition, and says what happened to each, as
/// kafka-leader-election does; an error if any partition's election failed.
async fn elect_leaders(
    client: &Client,
    topic: Option<String>,
    partition: Option<u32>,
) -> Result<(), CliError> {
    let asked: Option<Vec<PartitionId>> = match (&topic, partition) {
        (None, _) => None,
        (Some(topic), Some(p)) => Some(vec![PartitionId::new(topic.as_str(), p)]),
        (Some(topic), None) => {
            let count = client
                .partition_count(topic)
                .await
                .map_err(|e| CliError::about_topic(topic, e))?;
            Some(
                (0..count)
                    .map(|p| PartitionId::new(topic.as_str(), p))
                    .collect(),
            )
        }
    };
    let outcomes = client.elect_leaders(asked.as_deref()).await?;
    let (mut elected, mut not_needed, mut failed) = (Vec::new(), Vec::new(), 0);
    for (id, outcome) in &outcomes {
        match outcome {
            Election::Elected => elected.push(id.to_string()),
            Election::NotNeeded => not_needed.push(id.to_string()),
            Election::PreferredUnavailable(why) | Election::TryAgain(why) => {
                failed += 1;
                println!("Could not elect the preferred leader of {id}: {why}");
            }
            Election::UnknownPartition => {
                failed += 1;
                println!("Could not elect the preferred leader of {id}: no such partition");
            }
            other => {
                failed += 1;
                println!("Could not elect the preferred leader of {id}: {other:?}");
            }
        }
    }
    if !elected.is_empty() {
        println!("Preferred leaders elected for {}.", elected.join(", "));
    }
    if !not_needed.is_empty() {
        println!("Preferred leaders lead already: {}.", not_needed.join(", "));
    }
    if failed > 0 {
        return Err(CliError::ElectionsFailed {
            failed,
            asked: outcomes.len(),
        });
    }
    Ok(())
}

/// kafka-topics' `--replica-assignment`: each partition's brokers, the preferred leader
/// first (one value to clap, not a list of them).
#[derive(Clone, Debug)]
struct ReplicaAssignment(Vec<Vec<u64>>);

/// Parses kafka-topics' `--replica-assignment`: `1:2,2:3` is partition 0 on brokers 1 and
/// 2, partition 1 on brokers 2 and 3.
fn parse_replica_assignment(s: &str) -> Result<ReplicaAssignment, String> {
    let partitions: Result<Vec<Vec<u64>>, String> = s
        .split(',')
        .map(|partition| {
            partition
                .split(':')
                .map(|b| {
                    b.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{b:?} is not a broker id (in {s:?})"))
                })
                .collect()
        })
        .collect();
    partitions.map(ReplicaAssignment)
}

/// Prints a line per partition of `topic`, or of every topic.
async fn describe(client: &Client, topic: Option<String>) -> Result<(), CliError> {
    let topics: Vec<String> = match topic {
        Some(t) => vec![t],
        None => client
            .list_topics()
            .await?
            .into_iter()
            .map(|(t, _)| t)
            .collect(),
    };
    for t in topics {
        for p in client
            .describe(&t)
            .await
            .map_err(|e| CliError::about_topic(&t, e))?
        {
            println!("{p}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `replog topics ARGS`, parsed.
    #[derive(Parser)]
    struct Topics {
        #[command(flatten)]
        args: TopicsArgs,
    }

    fn action(args: &[&str]) -> Action {
        let argv = ["topics", "--bootstrap-server", "b:1"].iter().chain(args);
        Topics::parse_from(argv).args.action()
    }

    fn refused(args: &[&str]) -> bool {
        let argv = ["topics", "--bootstrap-server", "b:1"].iter().chain(args);
        Topics::try_parse_from(argv).is_err()
    }

    #[test]
    fn each_flag_names_its_action() {
        let t = || "t".to_string();
        assert_eq!(action(&[]), Action::List { topic: None });
        assert_eq!(action(&["--list"]), Action::List { topic: None });
        assert_eq!(action(&["--topic", "t"]), Action::List { topic: Some(t()) });
        assert_eq!(
            action(&["--describe", "--list"]),
            Action::List { topic: None }
        );
        assert_eq!(action(&["--describe"]), Action::Describe { topic: None });
        assert_eq!(
            action(&["--elect-leaders"]),
            Action::ElectLeaders {
                topic: None,
                partition: None
            }
        );
        assert_eq!(
            action(&["--elect-leaders", "--topic", "t", "--partition", "2"]),
            Action::ElectLeaders {
                topic: Some(t()),
                partition: Some(2)
            }
        );
        assert_eq!(
            action(&["--describe", "--topic", "t"]),
            Action::Describe { topic: Some(t()) }
        );
        assert_eq!(
            action(&["--create", "--topic", "t", "--partitions", "3"]),
            Action::Create {
                topic: t(),
                partitions: 3,
                replication_factor: 1,
                configs: vec![]
            }
        );
        assert_eq!(
            action(&[
                "--create",
                "--topic",
                "t",
                "--config",
                "cleanup.policy=compact",
                "--config",
                "retention.ms=1"
            ]),
            Action::Create {
                topic: t(),
                partitions: 1,
                replication_factor: 1,
                configs: vec!["cleanup.policy=compact".into(), "retention.ms=1".into()]
            }
        );
        assert!(refused(&["--describe", "--config", "retention.ms=1"]));
        assert_eq!(
            action(&["--alter", "--topic", "t", "--partitions", "6"]),
            Action::Grow {
                topic: t(),
                partitions: 6,
                assignment: vec![]
            }
        );
        assert_eq!(
            action(&[
                "--alter",
                "--topic",
                "t",
                "--partitions",
                "3",
                "--replica-assignment",
                "1:2,2:3,3:1"
            ]),
            Action::Grow {
                topic: t(),
                partitions: 3,
                assignment: vec![vec![1, 2], vec![2, 3], vec![3, 1]]
            }
        );

        assert!(refused(&["--alter", "--topic", "t"]));
        assert!(refused(&[
            "--alter",
            "--create",
            "--topic",
            "t",
            "--partitions",
            "2"
        ]));
        assert_eq!(
            action(&["--delete", "--topic", "t"]),
            Action::Delete { topic: t() }
        );
        assert_eq!(
            action(&[
                "--reassign",
                "--topic",
                "t",
                "--partition",
                "2",
                "--replicas",
                "3,1"
            ]),
            Action::Reassign {
                topic: t(),
                partition: 2,
                replicas: vec![3, 1]
            }
        );
    }

    #[test]
    fn conflicting_or_incomplete_flags_are_refused() {
        for args in [
            &["--create"][..],
            &["--delete"],
            &["--reassign", "--topic", "t"],
            &["--create", "--delete", "--topic", "t"],
            &["--create", "--describe", "--topic", "t"],
            &["--delete", "--list", "--topic", "t"],
            &["--reassign", "--create", "--topic", "t", "--replicas", "1"],
            &["--partitions", "3", "--topic", "t"],
            &["--replicas", "1", "--topic", "t"],
            &[
                "--alter",
                "--topic",
                "t",
                "--partitions",
                "3",
                "--replica-assignment",
                "1:x",
            ],
            &["--create", "--topic", "t", "--replica-assignment", "1:2"],
            &["--elect-leaders", "--describe"],
            &[
                "--elect-leaders",
                "--reassign",
                "--topic",
                "t",
                "--replicas",
                "1",
            ],
            &["--partition", "1", "--topic", "t"],
        ] {
            assert!(refused(args), "{args:?}");
        }
    }
}
