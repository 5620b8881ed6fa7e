//! `replog certs dev`: a local CA, a certificate and key per broker, and a client certificate,
//! for a dev cluster's TLS (the library's `DevCertificates`).

use std::path::PathBuf;

use crate::error::CliError;

/// The arguments of `replog certs`.
#[derive(Debug, clap::Args)]
pub(crate) struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

/// What `replog certs` makes.
#[derive(Debug, clap::Subcommand)]
enum CertsCommand {
    /// Writes a local CA (ca.pem, ca.key), a certificate and key per broker
    /// (broker-ID.pem, broker-ID.key) and a client certificate (client.pem, client.key)
    /// into a directory. For dev clusters: the CA's key lies beside the certificates.
    Dev(DevArgs),
}

/// The arguments of `replog certs dev`.
#[derive(Debug, clap::Args)]
struct DevArgs {
    /// The directory to write into (created if missing; files there of the same names are
    /// replaced).
    #[arg(long)]
    out: PathBuf,
    /// The brokers' ids, comma-separated: one certificate each, naming the hosts and
    /// `broker-ID`.
    #[arg(long, value_delimiter = ',', required = true)]
    brokers: Vec<u64>,
    /// The host names and IP addresses clients dial the brokers at, comma-separated (clients
    /// check them against the certificate).
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    hosts: Vec<String>,
}

/// Runs `replog certs`.
pub(crate) fn run(args: CertsArgs) -> Result<(), CliError> {
    let CertsCommand::Dev(args) = args.command;
    let certs = replog::DevCertificates::generate(&args.brokers, &args.hosts)?;
    let written = certs.write_to(&args.out)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
