//! `replog configs`: a topic's configs, as Kafka's `kafka-configs --entity-type topics`
//! shows and changes them: `--describe [--all]`, `--alter --add-config K=V[,K=V]
//! --delete-config K[,K]`. A list value goes in square brackets
//! (`--add-config cleanup.policy=[compact,delete]`).

use replog::{ConfigChange, ConfigSource, TopicConfigs};

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog configs`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConfigsArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// What the configs belong to: `topics` (the only entity type replog changes at run
    /// time; brokers take theirs when they start).
    #[arg(long, value_parser = ["topics"])]
    entity_type: String,
    /// The topic.
    #[arg(long)]
    entity_name: String,
    /// Print the configs set on the topic (with --all, every config and where its value
    /// comes from).
    #[arg(long, conflicts_with = "alter")]
    describe: bool,
    /// With --describe: every config, not only those set on the topic.
    #[arg(long, requires = "describe")]
    all: bool,
    /// Change the topic's configs (all of --add-config and --delete-config, or none).
    #[arg(long)]
    alter: bool,
    /// With --alter: configs to set, K=V[,K=V] (a list value in square brackets).
    #[arg(long, requires = "alter")]
    add_config: Option<String>,
    /// With --alter: configs to remove (the topic takes the broker's default again),
    /// K[,K].
    #[arg(long, requires = "alter", value_delimiter = ',')]
    delete_config: Vec<String>,
}

/// Splits `K=V,K=[A,B],...` at the commas outside square brackets; brackets around a value
/// are dropped.
fn split_pairs(list: &str) -> Result<Vec<(String, String)>, CliError> {
    let (mut items, mut item, mut depth) = (Vec::new(), String::new(), 0u32);
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .map(|i| {
            let (k, v) = i
                .split_once('=')
                .ok_or(CliError::Usage("a config is KEY=VALUE"))?;
            let v = v.trim();
            let v = v
                .strip_prefix('[')
                .and_then(|v| v.strip_suffix(']'))
                .unwrap_or(v);
            Ok((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// `--config K=V` flags (each one pair) as topic configs, each checked.
pub(crate) fn parse_pairs(flags: &[String]) -> Result<TopicConfigs, CliError> {
    let mut pairs = Vec::new();
    for flag in flags {
        let (k, v) = flag
            .split_once('=')
            .ok_or(CliError::Usage("a config is KEY=VALUE"))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(TopicConfigs::from_pairs(pairs)?)
}

/// The changes `--add-config` and `--delete-config` ask for.
fn changes(args: &ConfigsArgs) -> Result<Vec<ConfigChange>, CliError> {
    let mut changes: Vec<ConfigChange> = match &args.add_config {
        Some(list) => split_pairs(list)?
            .into_iter()
            .map(|(key, value)| ConfigChange::Set { key, value })
            .collect(),
        None => Vec::new(),
    };
    changes.extend(args.delete_config.iter().map(|k| ConfigChange::Delete {
        key: k.trim().to_string(),
    }));
    if changes.is_empty() {
        return Err(CliError::Usage(
            "--alter needs --add-config or --delete-config",
        ));
    }
    Ok(changes)
}

/// Kafka's name for where a value comes from.
fn source_name(source: ConfigSource) -> &'static str {
    match source {
        ConfigSource::Topic => "DYNAMIC_TOPIC_CONFIG",
        ConfigSource::Broker => "STATIC_BROKER_CONFIG",
        ConfigSource::Default => "DEFAULT_CONFIG",
    }
}

/// Connects to the cluster and describes or changes the topic's configs.
pub(crate) async fn run(args: ConfigsArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    let topic = args.entity_name.clone();
    let about = |e| CliError::about_topic(&topic, e);
    if args.alter {
        let changes = changes(&args)?;
        client
            .alter_topic_configs(&topic, &changes)
            .await
            .map_err(about)?;
        println!("Completed updating config for topic {topic}.");
        return Ok(());
    }
    let entries = client.describe_topic_configs(&topic).await.map_err(about)?;
    let shown: Vec<_> = entries
        .into_iter()
        .filter(|e| args.all || e.source == ConfigSource::Topic)
        .collect();
    let which = if args.all { "All" } else { "Dynamic" };
    println!("{which} configs for topic {topic} are:");
    for e in shown {
        let synonyms: Vec<String> = e
            .synonyms
            .iter()
            .map(|(name, value, source)| format!("{}:{name}={value}", source_name(*source)))
            .collect();
        println!(
            "  {}={} sensitive=false synonyms={{{}}}",
            e.name,
            e.value,
            synonyms.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_in_brackets_stay_one_value() {
        let pairs = split_pairs("cleanup.policy=[compact,delete], retention.ms=5,").unwrap();
        assert_eq!(
            pairs,
            vec![
                ("cleanup.policy".to_string(), "compact,delete".to_string()),
                ("retention.ms".to_string(), "5".to_string()),
            ]
        );
        assert!(split_pairs("retention.ms").is_err());
        assert!(parse_pairs(&["retention.ms=soon".into()]).is_err());
        assert!(parse_pairs(&["no.such=1".into()]).is_err());
        assert_eq!(
            parse_pairs(&["segment.ms=10".into()])
                .unwrap()
                .get("segment.ms"),
            Some("10")
        );
    }
}
