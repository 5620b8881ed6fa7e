//! Reaching a cluster: `Target` (the `--bootstrap-server`, `--topic` and `--partition` that
//! `produce` and `consume` share), resolving a bootstrap list, and connecting a `Client`
//! (over TLS with `--tls-ca`).

use replog::{Address, Client, ClientConfig};

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

/// Parses `host:port,host:port`, checking that each name resolves now (a name is resolved
/// again at each connection the client makes).
pub(crate) async fn bootstrap(list: &str) -> Result<Vec<Address>, CliError> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let addr: Address = part.parse().map_err(CliError::Broker)?;
        addr.resolve().await.map_err(|source| CliError::Resolve {
            server: part.to_string(),
            source,
        })?;
        out.push(addr);
    }
    if out.is_empty() {
        return Err(CliError::Usage("no bootstrap server given"));
    }
    Ok(out)
}

/// `--tls-ca`, set once by `main` from the command line: the CA that signed the brokers'
/// certificates.
pub(crate) static TLS_CA: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// `--command-config`, set once by `main` from the command line.
pub(crate) static COMMAND_CONFIG: std::sync::OnceLock<std::path::PathBuf> =
    std::sync::OnceLock::new();

/// A client bootstrapped from `addrs` (over TLS, trusting `--tls-ca`, if given), set up as
/// `--command-config` says.
pub(crate) async fn client(addrs: &[Address]) -> Result<Client, CliError> {
    let mut config = ClientConfig::default();
    if let Some(path) = COMMAND_CONFIG.get() {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            path: path.clone(),
            source,
        })?;
        apply_properties(&mut config, &text).map_err(|(line, reason)| CliError::BadFile {
            path: path.clone(),
            line,
            reason,
        })?;
    }
    if let Some(ca) = TLS_CA.get() {
        config.tls_ca = Some(ca.clone());
    }
    let user = config.sasl.as_ref().map(|login| login.user.clone());
    Client::connect(addrs, config).await.map_err(|e| match e {
        replog::Error::AuthenticationFailed(reason) => CliError::Login { user, reason },
        other => CliError::Broker(other),
    })
}

/// Sets `config` from a properties file's `text` (Kafka's client names; `#` and `!` start
/// comments): where a line is wrong, its number (from 1) and why.
fn apply_properties(config: &mut ClientConfig, text: &str) -> Result<(), (usize, String)> {
    let (mut mechanism, mut user, mut password, mut protocol) = (None, None, None, None);
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        last = n;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once('=').or_else(|| line.split_once(':')) else {
            return Err((n, "expected KEY=VALUE".into()));
        };
        let (key, value) = (key.trim(), value.trim().to_string());
        match key {
            "security.protocol" => protocol = Some((n, value)),
            "ssl.ca.location" => config.tls_ca = Some(value.into()),
            "ssl.certificate.location" => config.tls_cert = Some(value.into()),
            "ssl.key.location" => config.tls_key = Some(value.into()),
            "ssl.crl.location" => config.tls_crl = Some(value.into()),
            "sasl.mechanism" | "sasl.mechanisms" => {
                let m = replog::SaslMechanism::from_name(&value)
                    .ok_or_else(|| (n, format!("unknown SASL mechanism {value:?}")))?;
                mechanism = Some(m);
            }
            "sasl.username" => user = Some(value),
            "sasl.password" => password = Some(value),
            other => {
                return Err((
                    n,
                    format!("{other:?} is not a setting replog's client takes"),
                ));
            }
        }
    }
    match protocol {
        None => {}
        Some((_, p)) if p.eq_ignore_ascii_case("SSL") => mechanism = None,
        Some((_, p)) if p.eq_ignore_ascii_case("SASL_SSL") && mechanism.is_none() => {
            mechanism = Some(replog::SaslMechanism::Scram(replog::ScramMechanism::Sha512));
        }
        Some((_, p)) if p.eq_ignore_ascii_case("SASL_SSL") => {}
        Some((n, p)) => {
            return Err((
                n,
                format!("security.protocol {p:?}: the native door takes SSL or SASL_SSL"),
            ));
        }
    }
    match (mechanism, user, password) {
        (None, None, None) => {}
        (Some(m), Some(u), Some(p)) => config.sasl = Some(replog::SaslLogin::new(m, u, p)),
        _ => {
            return Err((
                last,
                "a SASL login needs sasl.mechanism (or security.protocol=SASL_SSL), \
                 sasl.username and sasl.password"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// A client bootstrapped from the comma-separated `list`.
pub(crate) async fn connect(list: &str) -> Result<Client, CliError> {
    client(&bootstrap(list).await?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_properties_file_sets_tls_and_the_login() {
        let mut config = ClientConfig::default();
        let text = "# dev cluster\nsecurity.protocol=SASL_SSL\nssl.ca.location=certs/ca.pem\n\
                    ssl.crl.location=certs/crl.pem\n\
                    sasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\nsasl.password=pw\n";
        apply_properties(&mut config, text).unwrap();
        assert_eq!(config.tls_ca, Some("certs/ca.pem".into()));
        assert_eq!(config.tls_crl, Some("certs/crl.pem".into()));
        let login = config.sasl.unwrap();
        assert_eq!(
            (login.user.as_str(), login.password.as_str()),
            ("alice", "pw")
        );
        let bad = "sasl.username=alice\nbootstrap.servers=x\n";
        let err = apply_properties(&mut ClientConfig::default(), bad).unwrap_err();
        assert_eq!(err.0, 2);
        assert!(apply_properties(&mut ClientConfig::default(), "sasl.username=a\n").is_err());
        let plaintext = "security.protocol=PLAINTEXT\n";
        assert!(apply_properties(&mut ClientConfig::default(), plaintext).is_err());
    }
}
