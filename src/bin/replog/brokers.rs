//! `replog brokers`: the cluster's brokers listed or described (addresses, state, replicas,
//! preferred and current leaderships), or one decommissioned: its replicas move to the
//! others, and once it holds none it leaves the cluster and can stop.

use crate::connect::connect;
use crate::error::CliError;

/// The arguments of `replog brokers`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("action").args(["list", "describe", "decommission"]).multiple(false))]
pub(crate) struct BrokersArgs {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    bootstrap_server: String,
    /// Print each broker's id and address (the default).
    #[arg(long)]
    list: bool,
    /// Print each broker's addresses, state (active, or draining while it is decommissioned),
    /// and the replicas it holds, is preferred for and leads.
    #[arg(long)]
    describe: bool,
    /// Decommission this broker: its replicas move to the others; it leaves the cluster once
    /// it holds none (watch with --describe), then it can stop.
    #[arg(long, value_name = "ID")]
    decommission: Option<u64>,
}

/// Connects to the cluster and carries out the action.
pub(crate) async fn run(args: BrokersArgs) -> Result<(), CliError> {
    let client = connect(&args.bootstrap_server).await?;
    if let Some(id) = args.decommission {
        client.decommission_broker(id).await?;
        println!("Decommissioning broker {id}: its replicas are moving to the other brokers.");
        return Ok(());
    }
    for broker in client.describe_brokers().await? {
        if args.describe {
            println!("{broker}");
        } else {
            println!("{}\t{}", broker.id, broker.addr.as_deref().unwrap_or("-"));
        }
    }
    Ok(())
}
