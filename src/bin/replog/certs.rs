//! `replog certs dev`: a local CA, a certificate and key per broker, and a client certificate,
//! for a dev cluster's TLS (the library's `DevCertificates`); `replog certs revoke`: that CA's
//! revocation list.

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
    /// Writes a revocation list of the CA in a directory `replog certs dev` wrote (crl.pem,
    /// signed with its ca.key) revoking the certificates named, replacing any list there:
    /// brokers given it with --tls-crl refuse those certificates from the next handshake
    /// after a SIGHUP.
    Revoke(RevokeArgs),
}

/// The arguments of `replog certs revoke`.
#[derive(Debug, clap::Args)]
struct RevokeArgs {
    /// The directory `replog certs dev` wrote.
    #[arg(long)]
    dir: PathBuf,
    /// The brokers whose certificates are revoked, comma-separated.
    #[arg(long, value_delimiter = ',')]
    brokers: Vec<u64>,
    /// Revokes the client certificate too.
    #[arg(long)]
    client: bool,
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
    let args = match args.command {
        CertsCommand::Dev(args) => args,
        CertsCommand::Revoke(args) => {
            let list =
                replog::DevCertificates::revocation_list_in(&args.dir, &args.brokers, args.client)?;
            let path = args.dir.join("crl.pem");
            std::fs::write(&path, list).map_err(|source| CliError::Io {
                path: path.clone(),
                source,
            })?;
            println!("{}", path.display());
            return Ok(());
        }
    };
    let certs = replog::DevCertificates::generate(&args.brokers, &args.hosts)?;
    let written = certs.write_to(&args.out)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
