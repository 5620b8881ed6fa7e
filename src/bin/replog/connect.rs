//! Reaching a cluster: `Target` (the `--bootstrap-server`, `--topic` and `--partition` that
//! `produce` and `consume` share), resolving a bootstrap list, and connecting a `Client`
//! (over TLS with `--tls-ca`).

use std::net::SocketAddr;

use replog::{Client, ClientConfig};

use crate::error::CliError;

/// Where `produce` and `consume` go: brokers to bootstrap from, a topic and a partition.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// Brokers to bootstrap from, comma-separated HOST:PORT.
    #[arg(long)]
    pub(crate) bootstrap_server: String,
    /// The topic.
    #[arg(long)]
    pub(crate) topic: String,
    /// One partition only. Without it, `produce` sends keyed records to Kafka's partition
    /// for their key and the others to a sticky partition, and `consume` reads every
    /// partition.
    #[arg(long)]
    pub(crate) partition: Option<u32>,
}

/// Resolves `host:port,host:port` to every address of every host.
pub(crate) async fn bootstrap(list: &str) -> Result<Vec<SocketAddr>, CliError> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let addrs = tokio::net::lookup_host(part)
            .await
            .map_err(|source| CliError::Resolve {
                server: part.to_string(),
                source,
            })?;
        // IPv4 first: brokers usually listen on 127.0.0.1, and localhost may resolve to ::1.
        let mut addrs: Vec<SocketAddr> = addrs.collect();
        addrs.sort_by_key(|a| a.is_ipv6());
        out.extend(addrs);
    }
    if out.is_empty() {
        return Err(CliError::Usage("no bootstrap server given"));
    }
    Ok(out)
}

/// `--tls-ca`, set once by `main` from the command line: the CA that signed the brokers'
/// certificates.
pub(crate) static TLS_CA: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// A client bootstrapped from `addrs` (over TLS, trusting `--tls-ca`, if given).
pub(crate) async fn client(addrs: &[SocketAddr]) -> Result<Client, CliError> {
    let mut config = ClientConfig::default();
    config.tls_ca = TLS_CA.get().cloned();
    Ok(Client::connect(addrs, config).await?)
}

/// A client bootstrapped from the comma-separated `list`.
pub(crate) async fn connect(list: &str) -> Result<Client, CliError> {
    client(&bootstrap(list).await?).await
}
