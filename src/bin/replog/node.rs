//! `replog node`: its arguments (and the parsers for `--peer` and `--topic`), running a
//! broker until Ctrl-C or SIGTERM, then shutting it down.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use replog::{Address, Durability, Node, NodeConfig};

use crate::error::CliError;

/// The arguments of `replog node`.
#[derive(Debug, clap::Args)]
pub(crate) struct NodeArgs {
    /// A TOML file of this command's settings, each named as its flag (`election-timeout-ms
    /// = 500`; lists as arrays: `peer = ["2@127.0.0.1:9093"]`); a flag given on the command
    /// line wins over the file's setting of it.
    #[arg(long = "config", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// Print the effective settings (the file's, the flags', the defaults) as a config file
    /// holds them, and exit.
    #[arg(long)]
    print_config: bool,
    /// This broker's id.
    #[arg(long)]
    id: u64,
    /// Address to listen on, HOST:PORT, e.g. 127.0.0.1:9092 or broker-1.example:9092. A host
    /// name is resolved to listen, and is what this broker gives the others and clients
    /// (unless --advertised says otherwise): they resolve it at each connection, so the broker
    /// may come back at another IP under the same name.
    #[arg(long)]
    listen: Address,
    /// Where other brokers and clients reach this broker, HOST:PORT (default: --listen), e.g.
    /// when it listens on 0.0.0.0.
    #[arg(long)]
    advertised: Option<Address>,
    /// Another broker, as ID@HOST:PORT (a host name is resolved at each connection); repeat
    /// for each.
    #[arg(long = "peer", value_parser = parse_peer)]
    peers: Vec<(u64, Address)>,
    /// Data directory.
    #[arg(long)]
    data: PathBuf,
    /// A configured topic and its partition count, as NAME:PARTITIONS, replicated on every
    /// broker; repeat for each. Every broker must be given the same list. Other topics are
    /// created with `replog topics --create`.
    #[arg(long = "topic", value_parser = parse_topic)]
    topics: Vec<(String, u32)>,
    /// When a write counts as done.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync)]
    durability: DurabilityArg,
    /// Raft election timeout.
    #[arg(long, default_value_t = 1000)]
    election_timeout_ms: u64,
    /// Join a running cluster whose founding brokers are the `--peer`s; this broker's id
    /// is new. Topics created from then on are spread over it too.
    #[arg(long)]
    join: bool,
    /// Serve the broker's metrics in Prometheus' text format on this address
    /// (`GET /metrics`).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve Kafka's clients (kcat, librdkafka, kafka-python) on this address too, HOST:PORT
    /// (a host name is what Kafka's clients are given, unless --kafka-advertised says
    /// otherwise).
    #[arg(long)]
    kafka_listen: Option<Address>,
    /// The rack (or zone) this broker runs in: each partition's replicas are spread over as
    /// many racks as there are (Kafka's broker.rack).
    #[arg(long)]
    rack: Option<String>,
    /// The Kafka address clients are given for this broker (default: --kafka-listen).
    #[arg(long, requires = "kafka_listen")]
    kafka_advertised: Option<Address>,
    /// Another broker's advertised Kafka address, ID@HOST:PORT (repeat per broker). Optional:
    /// each broker registers its own in the metadata log, which wins; this fills in for a
    /// broker that has not.
    #[arg(long = "kafka-peer", value_parser = parse_peer, requires = "kafka_listen")]
    kafka_peers: Vec<(u64, Address)>,
    /// What the Kafka listener asks of its clients: nothing (PLAINTEXT), TLS (SSL), SASL
    /// authentication first (SASL_PLAINTEXT), or both (SASL_SSL). Default: SSL with
    /// --tls-cert, PLAINTEXT without.
    #[arg(long, value_enum, requires = "kafka_listen")]
    kafka_security_protocol: Option<SecurityArg>,
    /// The broker's TLS certificate chain (PEM), for the Kafka listener's TLS, and with
    /// --tls-ca for the native listener's and its peers'. Read again on SIGHUP, with the key:
    /// new connections get the new certificate.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Revocation lists of the --tls-ca CA (PEM, X509 CRL): clients and peer brokers whose
    /// certificates they revoke are refused in the handshake. Read again on SIGHUP, with the
    /// certificate: the next handshake checks the new lists.
    #[arg(long, requires = "tls_cert")]
    tls_crl: Option<PathBuf>,
    /// The SASL mechanisms offered, comma-separated: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN.
    #[arg(long, value_delimiter = ',', value_parser = parse_mechanism,
          default_value = "SCRAM-SHA-512,SCRAM-SHA-256")]
    sasl_mechanisms: Vec<replog::SaslMechanism>,
    /// Offer PLAIN without TLS: passwords cross the network in the clear.
    #[arg(long)]
    sasl_plain_without_tls: bool,
    /// Native clients log in with SASL (--sasl-mechanisms; the users Kafka clients log in
    /// as) before anything else; peer brokers are known by their certificates. Needs
    /// --tls-cert, --tls-key and --tls-ca.
    #[arg(long)]
    native_sasl: bool,
    /// Ask clients for certificates signed by --tls-ca (Kafka's ssl.client.auth): none,
    /// requested or required. A client's certificate is its identity, User:<CN>, where it
    /// does not log in with SASL.
    #[arg(long, value_parser = parse_client_auth, default_value = "none")]
    client_auth: replog::ClientAuth,
    /// How a client certificate's subject names its principal (Kafka's
    /// ssl.principal.mapping.rules): comma-separated RULE:pattern/replacement/[L|U] and
    /// DEFAULT (the whole subject), the first that applies wins; a certificate none applies
    /// to is refused. Without it: the subject's CN. Needs --client-auth.
    #[arg(long, value_parser = parse_principal_rules)]
    ssl_principal_mapping_rules: Option<replog::PrincipalMappingRules>,
    /// How long a Kafka client's SASL session lasts, in milliseconds (Kafka's
    /// connections.max.reauth.ms, KIP-368): clients re-authenticate on their connections
    /// before then, or are disconnected. 0 (the default): sessions last as long as their
    /// connections.
    #[arg(long, default_value_t = 0)]
    sasl_reauth_ms: u64,
    /// A file of the users the cluster starts with, one `NAME:PASSWORD[:MECHANISM]` per line
    /// (blank lines and lines starting with `#` are skipped), each given SCRAM-SHA-256 and
    /// SCRAM-SHA-512 credentials unless a mechanism is named. Read at every start; written to
    /// the metadata log only while the cluster has no user at all. A file (or the
    /// REPLOG_BOOTSTRAP_USER environment variable, in the same form), so that no password is
    /// on the command line.
    #[arg(long)]
    bootstrap_user_file: Option<PathBuf>,
    /// Enforce Kafka's ACLs on every client request (both listeners): with no ACL on a
    /// resource, only super users may use it. Clients that do not authenticate are
    /// `User:ANONYMOUS`.
    #[arg(long)]
    authorization: bool,
    /// A principal allowed everything, ACLs or not (`User:admin`); repeatable.
    #[arg(
        long = "super-user",
        value_name = "PRINCIPAL",
        requires = "authorization"
    )]
    super_users: Vec<String>,
    /// Allow every request on a resource that no ACL names (Kafka's
    /// `allow.everyone.if.no.acl.found`).
    #[arg(long, requires = "authorization")]
    allow_everyone_if_no_acl: bool,
    /// This broker's default for a topic config, KEY=VALUE, for topics that do not set it
    /// (repeatable): cleanup.policy, segment.ms, the message.timestamp.* keys and the
    /// compaction settings.
    #[arg(long = "default-topic-config", value_name = "KEY=VALUE")]
    default_topic_configs: Vec<String>,
    /// Never create a topic because a Kafka client's Metadata request names it (Kafka's
    /// `auto.create.topics.enable=false`).
    #[arg(long)]
    no_auto_create_topics: bool,
    /// Partitions of a topic created without a count (Kafka's `num.partitions`).
    #[arg(long, default_value_t = 1)]
    num_partitions: u32,
    /// Replicas of a topic created without a replication factor, or the broker count if
    /// smaller (Kafka's `default.replication.factor`).
    #[arg(long, default_value_t = 3)]
    default_replication_factor: u32,
    #[command(flatten)]
    tuning: crate::tuning::TuningArgs,
}

/// `--kafka-security-protocol`, as Kafka names them.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum SecurityArg {
    #[value(name = "PLAINTEXT")]
    Plaintext,
    #[value(name = "SSL")]
    Ssl,
    #[value(name = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[value(name = "SASL_SSL")]
    SaslSsl,
}

impl From<SecurityArg> for replog::KafkaSecurityProtocol {
    fn from(p: SecurityArg) -> replog::KafkaSecurityProtocol {
        use replog::KafkaSecurityProtocol as P;
        match p {
            SecurityArg::Plaintext => P::Plaintext,
            SecurityArg::Ssl => P::Ssl,
            SecurityArg::SaslPlaintext => P::SaslPlaintext,
            SecurityArg::SaslSsl => P::SaslSsl,
        }
    }
}

/// Parses `--client-auth`.
fn parse_client_auth(name: &str) -> Result<replog::ClientAuth, String> {
    replog::ClientAuth::from_name(name)
        .ok_or_else(|| format!("{name:?}: none, requested or required"))
}

/// Parses `--ssl-principal-mapping-rules`.
fn parse_principal_rules(text: &str) -> Result<replog::PrincipalMappingRules, String> {
    replog::PrincipalMappingRules::parse(text).map_err(|e| match e {
        replog::Error::InvalidConfig { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// Parses one of `--sasl-mechanisms`.
fn parse_mechanism(s: &str) -> Result<replog::SaslMechanism, String> {
    replog::SaslMechanism::from_name(s.trim()).ok_or_else(|| {
        format!("unknown SASL mechanism {s:?} (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN)")
    })
}

/// Iterations of the bootstrap users' credentials (twice Kafka's least).
const BOOTSTRAP_ITERATIONS: u32 = 8192;

/// Reads `--bootstrap-user-file`: each user with a credential per SCRAM mechanism.
fn read_bootstrap_users(
    path: &std::path::Path,
) -> Result<Vec<(String, replog::ScramCredential)>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut users = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: &str| CliError::BadFile {
            path: path.to_path_buf(),
            line: i + 1,
            reason: reason.to_string(),
        };
        users.extend(bootstrap_user(line).map_err(|reason| bad(&reason))?);
    }
    Ok(users)
}

/// The environment variable naming a first user (`NAME:PASSWORD[:MECHANISM]`), read when the
/// broker starts and written while the cluster has no user, as the bootstrap user file's.
const BOOTSTRAP_USER_ENV: &str = "REPLOG_BOOTSTRAP_USER";

/// The credentials of `NAME:PASSWORD[:MECHANISM]`: for the mechanism named (SCRAM-SHA-256 or
/// SCRAM-SHA-512), or for both. A password may hold `:`; a last field that names a SCRAM
/// mechanism is taken as the mechanism.
fn bootstrap_user(spec: &str) -> Result<Vec<(String, replog::ScramCredential)>, String> {
    let (rest, mechanisms) = match spec.rsplit_once(':') {
        Some((rest, last)) if rest.contains(':') => match replog::ScramMechanism::from_name(last) {
            Some(m) => (rest, vec![m]),
            None => (spec, replog::ScramMechanism::ALL.to_vec()),
        },
        _ => (spec, replog::ScramMechanism::ALL.to_vec()),
    };
    let (name, password) = rest
        .split_once(':')
        .filter(|(n, p)| !n.is_empty() && !p.is_empty())
        .ok_or("expected NAME:PASSWORD[:MECHANISM], name and password not empty")?;
    mechanisms
        .into_iter()
        .map(|m| {
            replog::ScramCredential::new(m, password, BOOTSTRAP_ITERATIONS)
                .map(|c| (name.to_string(), c))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// `--durability`: [`Durability`] on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum DurabilityArg {
    Fsync,
    Replicated,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Durability {
        match d {
            DurabilityArg::Fsync => Durability::Fsync,
            DurabilityArg::Replicated => Durability::Replicated,
        }
    }
}

/// Parses `--peer ID@HOST:PORT`.
fn parse_peer(s: &str) -> Result<(u64, Address), String> {
    let (id, addr) = s.split_once('@').ok_or("expected ID@HOST:PORT")?;
    let id = id.parse().map_err(|_| format!("bad broker id {id:?}"))?;
    let addr = addr.parse().map_err(|e: replog::Error| e.to_string())?;
    Ok((id, addr))
}

/// Where to bind `addr`: its IP address, or the first address its name resolves to (IPv4
/// first); and the address to advertise for it when none is given: a name itself, an IP
/// address none (the bound address is advertised).
fn bind_address(addr: &Address) -> Result<(SocketAddr, Option<Address>), CliError> {
    if let Some(ip) = addr.ip() {
        return Ok((ip, None));
    }
    let resolve = |addr: &Address| {
        use std::net::ToSocketAddrs;
        let mut all: Vec<SocketAddr> = (addr.host(), addr.port()).to_socket_addrs()?.collect();
        all.sort_by_key(SocketAddr::is_ipv6);
        all.into_iter()
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))
    };
    let ip = resolve(addr).map_err(|source| CliError::Resolve {
        server: addr.to_string(),
        source,
    })?;
    Ok((ip, Some(addr.clone())))
}

/// Parses `--topic NAME:PARTITIONS` (`NAME` alone means one partition).
fn parse_topic(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s.split_once(':').unwrap_or((s, "1"));
    let n = n
        .parse()
        .map_err(|_| format!("bad partition count {n:?}"))?;
    if name.is_empty() || n == 0 {
        return Err("expected NAME:PARTITIONS with at least one partition".into());
    }
    Ok((name.to_string(), n))
}

impl NodeArgs {
    /// The broker's configuration.
    fn config(self) -> Result<NodeConfig, CliError> {
        let (listen, named) = bind_address(&self.listen)?;
        let mut config = NodeConfig::new(self.id, listen, Default::default(), self.data);
        config.peers = self.peers.into_iter().collect();
        config.advertised = self.advertised.or(named);
        config.topics = self.topics;
        config.topic_defaults = crate::configs::parse_pairs(&self.default_topic_configs)?;
        config.auto_create_topics = !self.no_auto_create_topics;
        config.num_partitions = self.num_partitions;
        config.default_replication_factor = self.default_replication_factor;
        config.join = self.join;
        config.election_timeout = Duration::from_millis(self.election_timeout_ms);
        config.heartbeat_interval = (config.election_timeout / 4).max(Duration::from_millis(20));
        self.tuning.apply(&mut config);
        config.durability = self.durability.into();
        let kafka = self.kafka_listen.as_ref().map(bind_address).transpose()?;
        config.kafka_listen = kafka.as_ref().map(|(at, _)| *at);
        config.kafka_advertised = self
            .kafka_advertised
            .or_else(|| kafka.and_then(|(_, named)| named));
        config.rack = self.rack;
        config.kafka_peers = self.kafka_peers.into_iter().collect();
        if let (Some(cert), Some(key)) = (self.tls_cert, self.tls_key) {
            let mut tls = replog::TlsConfig::new(cert, key);
            tls.ca_cert = crate::connect::TLS_CA.get().cloned();
            if self.tls_crl.is_some() && tls.ca_cert.is_none() {
                return Err(CliError::Usage("--tls-crl needs --tls-ca, the CA it is of"));
            }
            tls.crl = self.tls_crl;
            config.tls = Some(tls);
        } else if crate::connect::TLS_CA.get().is_some() {
            return Err(CliError::Usage("--tls-ca needs --tls-cert and --tls-key"));
        }
        let default = if config.tls.is_some() {
            SecurityArg::Ssl
        } else {
            SecurityArg::Plaintext
        };
        config.kafka_security_protocol = self.kafka_security_protocol.unwrap_or(default).into();
        config.sasl_mechanisms = self.sasl_mechanisms;
        config.sasl_plain_without_tls = self.sasl_plain_without_tls;
        config.native_sasl = self.native_sasl;
        config.client_auth = self.client_auth;
        config.ssl_principal_mapping_rules = self.ssl_principal_mapping_rules;
        config.sasl_session_lifetime = (self.sasl_reauth_ms > 0)
            .then(|| std::time::Duration::from_millis(self.sasl_reauth_ms));
        if let Some(path) = &self.bootstrap_user_file {
            config.bootstrap_users = read_bootstrap_users(path)?;
        }
        if let Ok(spec) = std::env::var(BOOTSTRAP_USER_ENV) {
            let users = bootstrap_user(&spec).map_err(|reason| CliError::BadEnv {
                name: BOOTSTRAP_USER_ENV,
                reason,
            })?;
            config.bootstrap_users.extend(users);
        }
        if self.authorization {
            config.authorization = Some(replog::acl::AuthorizerPolicy {
                super_users: self.super_users,
                allow_everyone_if_no_acl: self.allow_everyone_if_no_acl,
            });
        }
        Ok(config)
    }
}

/// Runs the broker until Ctrl-C or SIGTERM, then shuts it down.
pub(crate) async fn run(args: NodeArgs) -> Result<(), CliError> {
    let id = args.id;
    raise_open_files_limit();
    if let Some(addr) = args.metrics_listen {
        let local = crate::metrics::serve(addr).await?;
        eprintln!("replog: metrics on http://{local}/metrics");
    }
    let config = args.config()?;
    warn_if_plaintext(&config);
    let tls = config.tls.is_some();
    let node = Node::start(config).await?;
    eprintln!("replog: broker {id} listening on {}", node.addr());
    // Says once when every partition it hosts has a leader, or, every minute, what it still
    // waits for (a quorum that has not started yet).
    let ready = async {
        // Ends when ready; a broker that never gets its quorum keeps saying so.
        loop {
            match node.wait_ready(std::time::Duration::from_secs(60)).await {
                Ok(partitions) => {
                    tracing::info!(
                        partitions,
                        "broker ready: every hosted partition has a leader"
                    );
                    std::future::pending::<()>().await;
                }
                Err(e) => tracing::warn!(error = %e, "broker not ready yet"),
            }
        }
    };
    tokio::select! {
        () = wait_for_signal() => {}
        () = ready => {}
        () = reload_on_hangup(&node, tls) => {}
    }
    node.shutdown().await?;
    Ok(())
}

/// Says once, at start, what of the broker's traffic crosses the network in the clear and
/// unauthenticated. (The library says nothing: `replog demo` and `LocalCluster` run on
/// loopback, and an embedder knows its network.)
fn warn_if_plaintext(config: &NodeConfig) {
    let native_tls = config.tls.as_ref().is_some_and(|t| t.ca_cert.is_some());
    let kafka = config.kafka_listen.map(|_| config.kafka_security_protocol);
    let message = match kafka {
        _ if native_tls && kafka.is_none_or(|p| p.tls()) => {
            "every listener serves TLS, but the native one authenticates no one (clients and \
             peers alike): keep it on a trusted network"
        }
        Some(_) if native_tls => {
            "the Kafka listener serves plaintext (--kafka-security-protocol SSL or SASL_SSL \
             encrypts it), and the native one authenticates no one: keep the broker on a \
             trusted network"
        }
        Some(p) if p.tls() => {
            "the native listener serves peers and native clients in plaintext, without \
             authentication, and anyone who reaches it can send what brokers send (--tls-ca \
             encrypts it and has brokers prove who they are): keep it on a trusted network"
        }
        Some(p) if p.sasl() => {
            "no TLS: every listener's traffic is plaintext, and only Kafka clients \
             authenticate; keep the broker on a trusted network, or encrypt it (--tls-cert, \
             --tls-key, --tls-ca, --kafka-security-protocol SASL_SSL)"
        }
        _ => {
            "no TLS and no authentication: every listener's traffic is plaintext and anyone \
             who reaches it is served; keep the broker on a trusted network, or encrypt it \
             (--tls-cert, --tls-key, --tls-ca)"
        }
    };
    tracing::warn!("{message}");
    if config.authorization.is_some() && !native_tls {
        tracing::warn!(
            "ACLs are enforced, but without --tls-ca the native port takes what only brokers \
             send (metadata proposals, ACL and user changes among them) from anyone who \
             reaches it: keep that port on a trusted network"
        );
    }
}

/// Reads the TLS certificate and key again on each SIGHUP (on Unix, when the broker has TLS;
/// otherwise never returns). A file that does not load leaves the certificate as it was.
async fn reload_on_hangup(node: &Node, tls: bool) {
    #[cfg(unix)]
    if tls {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut hangup) = signal(SignalKind::hangup()) {
            // Ends with the process.
            while hangup.recv().await.is_some() {
                match node.reload_tls() {
                    Ok(()) => tracing::info!("TLS certificate reloaded"),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "TLS certificate not reloaded; the one loaded before is still served"
                    ),
                }
            }
        }
    }
    let _ = (node, tls);
    std::future::pending::<()>().await;
}

/// Returns on Ctrl-C, or (on Unix) SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Largest open-file limit asked for where the hard limit is unlimited (Linux's default
/// `fs.nr_open`).
const OPEN_FILES_MAX: u64 = 1 << 20;

/// Raises this process's soft limit on open files to its hard limit, saying so: a broker holds
/// files for its partitions and a descriptor per connection, and the usual soft limit (1,024)
/// is the first thing a broker with many partitions or clients runs out of, while the hard
/// limit is often far higher. A failure is said as a warning and changes nothing.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(OPEN_FILES_MAX);
    let Some(soft) = limit.current else {
        return;
    };
    if soft >= hard {
        return;
    }
    let raised = Rlimit {
        current: Some(hard),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(
            from = soft,
            to = hard,
            "raised the open-file limit to the hard limit"
        ),
        Err(e) => tracing::warn!(limit = soft, error = %e, "could not raise the open-file limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file's tuning settings reach the broker's configuration, a flag winning.
    #[test]
    fn a_config_files_settings_reach_the_brokers_configuration() {
        use clap::{CommandFactory, FromArgMatches};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        let text = "id = 3\nlisten = \"127.0.0.1:9094\"\ndata = \"d\"\n\
                    segment-bytes = 1048576\nrequest_timeout_ms = 2500\n\
                    offsets-topic-partitions = 4\nretention-check-interval-ms = 0\n";
        std::fs::write(&file, text).unwrap();
        let args: Vec<std::ffi::OsString> = ["replog", "node", "--offsets-topic-partitions", "6"]
            .into_iter()
            .map(Into::into)
            .chain(["--config".into(), file.into_os_string()])
            .collect();
        let node = crate::Cli::command()
            .find_subcommand("node")
            .cloned()
            .unwrap();
        let (args, _) = crate::config_file::expand(args, &node).unwrap();
        let matches = crate::Cli::command().try_get_matches_from(&args).unwrap();
        let cli = crate::Cli::from_arg_matches(&matches).unwrap();
        let crate::Command::Node(args) = cli.command else {
            panic!("not node");
        };
        let config = args.config().unwrap();
        assert_eq!(config.id, 3);
        assert_eq!(config.log.segment_bytes, 1 << 20);
        assert_eq!(config.request_timeout, Duration::from_millis(2500));
        assert_eq!(config.retention_check_interval, Duration::ZERO);
        assert_eq!(config.offsets_topic_partitions, 6, "the flag wins");
    }

    #[test]
    fn a_bootstrap_user_names_its_mechanism_or_gets_both() {
        let mechanisms = |spec: &str| -> Vec<(String, replog::ScramMechanism)> {
            bootstrap_user(spec)
                .unwrap()
                .into_iter()
                .map(|(n, c)| (n, c.mechanism))
                .collect()
        };
        let both = mechanisms("admin:s3cret");
        assert_eq!(both.len(), 2);
        assert!(both.iter().all(|(n, _)| n == "admin"));
        assert_eq!(
            mechanisms("admin:s3cret:SCRAM-SHA-256"),
            vec![("admin".to_string(), replog::ScramMechanism::Sha256)]
        );
        // A password with colons keeps them; only a mechanism's name is taken off the end.
        let colons = bootstrap_user("admin:a:b:c").unwrap();
        assert_eq!(colons.len(), 2);
        let c = &colons[0].1;
        let again = replog::ScramCredential::with_salt(c.mechanism, "a:b:c", &c.salt, c.iterations)
            .unwrap();
        assert_eq!(again.stored_key, c.stored_key);
        for bad in ["admin", ":pw", "admin:", ""] {
            assert!(bootstrap_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn principal_mapping_rules_are_parsed_as_kafka_parses_them() {
        let rules = parse_principal_rules("RULE:^CN=(.*?),OU=Staff.*$/$1/L, DEFAULT").unwrap();
        assert_eq!(rules.map("CN=Bob,OU=Staff,O=Acme").as_deref(), Some("bob"));
        assert_eq!(rules.map("CN=eve,O=Acme").as_deref(), Some("CN=eve,O=Acme"));
        let refused = parse_principal_rules("RULE:^CN=(.*)$/$1/X").unwrap_err();
        assert!(refused.contains("unmatched substring `X`"), "{refused}");
    }
}
