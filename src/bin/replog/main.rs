//! The `replog` command line, shaped like Kafka's tools: run a broker, describe topics,
//! produce, consume, inspect segment files, make dev TLS certificates, and `demo`, which plays the whole tutorial on an
//! embedded three-broker cluster.
//!
//! This file owns the command line's shape ([`Cli`], [`Command`]), the dispatch to each
//! subcommand's module, and the exit codes: 0 on success, 1 after an error (printed once,
//! here, as `replog: error: ...`) or when `check` finds damage, 2 for a bad command line
//! (clap's). Each subcommand's arguments and work live in its own module.

mod acls;
mod brokers;
mod certs;
mod check;
mod config_file;
mod configs;
mod connect;
mod consume;
mod delete_records;
mod demo;
mod error;
mod groups;
mod metrics;
mod node;
mod produce;
mod topics;
mod tuning;
mod users;

use std::process::ExitCode;

/// jemalloc returns the memory a dormant partition's dropped Raft member freed (glibc's malloc
/// keeps most of it), so a broker's resident memory follows its awake partitions.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// The command line.
#[derive(Parser)]
#[command(
    name = "replog",
    version,
    about = "A Raft-replicated, mmap-backed partition log"
)]
struct Cli {
    /// The CA (PEM) that signed the brokers' certificates. Client commands dial the brokers'
    /// native listeners over TLS, trusting it; `node` (with --tls-cert and --tls-key) serves
    /// TLS on its native listener and dials its peers over TLS, trusting it.
    #[arg(long, global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// Client commands: a properties file with Kafka's names for how to reach the brokers:
    /// `security.protocol` (SSL or SASL_SSL), `ssl.ca.location`, `ssl.certificate.location`
    /// and `ssl.key.location` (a client certificate), `ssl.crl.location` (the CA's revocation
    /// lists: a broker whose certificate they revoke is not dialed), `sasl.mechanism`,
    /// `sasl.username`, `sasl.password` (for brokers run with --native-sasl).
    #[arg(long, global = true)]
    command_config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
enum Command {
    /// Runs a broker until interrupted (Ctrl-C or SIGTERM).
    Node(Box<node::NodeArgs>),
    /// Creates, deletes, describes or lists topics.
    Topics(topics::TopicsArgs),
    /// Lists or describes the cluster's brokers, or decommissions one.
    Brokers(brokers::BrokersArgs),
    /// Sends each line of standard input as a record.
    Produce(produce::ProduceArgs),
    /// Prints the records of a topic's partitions (as a member of a group with --group).
    Consume(consume::ConsumeArgs),
    /// Lists and describes consumer groups, and resets their offsets.
    Groups(groups::GroupsArgs),
    /// Deletes a partition's records before an offset on every replica, as
    /// kafka-delete-records does.
    DeleteRecords(delete_records::DeleteRecordsArgs),
    /// Plays the tutorial on an embedded three-broker cluster (ports 9092, 19092, 29092, or
    /// free ports when those are taken), in a temporary directory.
    Demo,
    /// Adds, removes or lists ACL bindings, with kafka-acls' flags.
    Acls(acls::AclsArgs),
    /// Describes or changes a topic's configs, with kafka-configs' flags.
    Configs(configs::ConfigsArgs),
    /// Creates, deletes or lists SCRAM users.
    Users(users::UsersArgs),
    /// Makes TLS certificates: `certs dev` writes a local CA and certificates for a dev
    /// cluster.
    Certs(certs::CertsArgs),
    /// Checks every segment file in a partition directory without changing anything, and
    /// prints what each holds and where (and why) its valid data ends.
    Check(check::CheckArgs),
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let node = Cli::command().find_subcommand("node").cloned();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (args, origins) = match node.as_ref() {
        Some(node) => match config_file::expand(args, node) {
            Ok(expanded) => expanded,
            Err(e) => {
                eprintln!("replog: error: {e}");
                return ExitCode::from(2);
            }
        },
        None => (args, config_file::Origins::default()),
    };
    let matches = match Cli::command().try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(e) => {
            // A bad value from the config file: say where it was.
            if let Some(clap::error::ContextValue::String(arg)) =
                e.get(clap::error::ContextKind::InvalidArg)
            {
                let long = arg.trim_start_matches('-');
                let long = long.split([' ', '=']).next().unwrap_or(long);
                if let Some(at) = origins.of(long) {
                    eprintln!("replog: error: in {at}:");
                }
            }
            e.exit()
        }
    };
    if let (Some(node), Some(("node", m))) = (node.as_ref(), matches.subcommand())
        && m.get_flag("print_config")
    {
        print!("{}", config_file::print_config(node, m));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(ca) = &cli.tls_ca {
        let _ = connect::TLS_CA.set(ca.clone());
    }
    if let Some(file) = &cli.command_config {
        let _ = connect::COMMAND_CONFIG.set(file.clone());
    }
    install_logging(matches!(cli.command, Command::Node(_)));
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("replog: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (for example `RUST_LOG=debug`, or
/// `RUST_LOG=replog=debug,openraft=info`). Without it a broker logs at `info` (elections won and
/// lost, replicas started, rebuilt or removed, peers lost and back, damage found; nothing per
/// request) and the other subcommands log warnings only, so that their output stays the tool's
/// own. openraft's own lines are off unless asked for: replog says what they would (a peer
/// lost, a replica's Raft member stopped and why) once per event, where openraft repeats a line
/// per failed heartbeat and per request to a stopping replica.
fn install_logging(broker: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if broker {
        "info,openraft=off"
    } else {
        "warn,openraft=off"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Runs the subcommand on a tokio runtime.
fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    let done = |r: Result<(), CliError>| r.map(|()| ExitCode::SUCCESS);
    runtime.block_on(async {
        match cli.command {
            Command::Node(args) => done(node::run(*args).await),
            Command::Topics(args) => done(topics::run(args).await),
            Command::Brokers(args) => done(brokers::run(args).await),
            Command::Produce(args) => done(produce::run(args).await),
            Command::Consume(args) => done(consume::run(args).await),
            Command::Groups(args) => done(groups::run(args).await),
            Command::DeleteRecords(args) => done(delete_records::run(args).await),
            Command::Acls(args) => done(acls::run(args).await),
            Command::Users(args) => done(users::run(args).await),
            Command::Configs(args) => done(configs::run(args).await),
            Command::Demo => done(demo::run().await),
            Command::Certs(args) => done(certs::run(args)),
            Command::Check(args) => check::run(&args),
        }
    })
}
