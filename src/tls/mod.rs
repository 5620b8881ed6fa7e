//! TLS on a broker's listeners and between brokers (rustls, with aws-lc-rs as the crypto
//! provider).
//!
//! - [`TlsConfig`]: where the certificate chain and private key are (PEM files).
//! - [`TlsServer`]: what a listener runs handshakes with. Its certificate comes from a
//!   [`CertStore`], which hands every new handshake the certificate loaded last and loads the
//!   files again when asked ([`Node::reload_tls`](crate::Node::reload_tls); `replog node` asks
//!   on SIGHUP): connections open keep the certificate they started with, new ones get the new
//!   one, and files that do not load leave the old certificate in place.
//! - The native listener of brokers given their CA asks clients for a certificate
//!   ([`TlsServer::asking_for_certificates`]), and brokers dial their peers presenting theirs
//!   ([`TlsDialer::for_peers`]): what a connection presented ([`ClientCertificate`]) tells
//!   which broker it is, if any (`node/peer_gate.rs` decides what that lets it send).
//! - `revocation.rs`: the CA's revocation lists ([`TlsConfig::crl`]), read with the
//!   certificate and again with it, checked in every handshake where a certificate is asked for.
//! - `dev_certs.rs`: a local CA and certificates signed by it, for dev clusters and tests
//!   ([`DevCertificates`]).
//! - `stream.rs`: a connection. rustls runs its handshake (`handshake.rs`, through rustls'
//!   unbuffered API), then keeps the secrets (key updates, session tickets) while `record.rs`
//!   seals and opens the records in the connection's own buffers with no allocation a
//!   record: opened in place, and sealed from where a large piece of a write lies (small
//!   pieces copied into the record first), copies fewer each way than rustls' buffered
//!   connection makes; `stream/inbound.rs` acts on each record opened.
//!
//! A handshake runs on the connection's own task once the connection is admitted under the
//! broker's connection cap, within the connection's pre-authentication deadline
//! ([`PRE_AUTH_DEADLINE`]); one that fails or runs out of time is logged once, at info, with
//! the client's address, and closes the connection.

mod dev_certs;
mod dn;
pub(crate) mod floor;
mod handshake;
mod record;
mod revocation;
mod stream;
mod subject;

pub use dev_certs::DevCertificates;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;

/// A TLS connection, as a listener serves it and as a client or peer dials it.
pub(crate) use stream::TlsStream;

/// How long a new connection has to finish authenticating, from its admission: its TLS
/// handshake, and its SASL exchange where the listener asks for one (NATS and Kafka bound
/// this phase alike).
pub(crate) const PRE_AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// Where a broker's TLS certificate and private key are: PEM files, read when the broker starts
/// and again on [`Node::reload_tls`](crate::Node::reload_tls).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The certificate chain: the broker's certificate first, then any intermediates
    /// (`CERTIFICATE` items). Its names (SANs) are the host names and addresses clients dial:
    /// Kafka's clients check them.
    pub cert_chain: PathBuf,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1; ECDSA P-256/P-384, Ed25519 or
    /// RSA).
    pub private_key: PathBuf,
    /// The CA that signed every broker's certificate (`CERTIFICATE` items, all trusted).
    /// With it, the native listener serves TLS too, to clients and peer brokers alike, and the
    /// broker dials its peers over TLS, presenting its certificate, checking that each one's
    /// is signed by this CA and names it `broker-<id>` (a DNS name; `replog certs dev` writes
    /// it). What only brokers send (Raft, metadata proposals, forwarded admin requests) is then
    /// served only to connections presenting the certificate of the broker it comes from.
    /// `None` (the default): the native listener and peer traffic stay plaintext, and anyone
    /// who reaches the native listener may send what brokers send.
    pub ca_cert: Option<PathBuf>,
    /// Revocation lists of that CA (`X509 CRL` items, PEM; needs [`ca_cert`](Self::ca_cert)):
    /// a client or peer broker presenting a certificate they revoke is refused in the
    /// handshake, and a peer serving one is not dialed. Read with the certificate, and again
    /// with it on [`Node::reload_tls`](crate::Node::reload_tls): the next handshake checks
    /// the new lists. Of several lists of the CA in the file, the first counts (give the
    /// newest alone). A list is checked by verifying the broker's own certificate with it,
    /// where that certificate is one for TLS clients (as brokers' are for mutual TLS): a list
    /// not the CA's, or revoking the broker itself, is refused; a list past its `nextUpdate`
    /// is still used, and where this check covers it the broker warns of it at each load.
    /// `None` (the default): no certificate is taken for revoked.
    pub crl: Option<PathBuf>,
}

impl TlsConfig {
    /// TLS with the certificate chain and key in these PEM files.
    pub fn new(cert_chain: impl Into<PathBuf>, private_key: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert_chain: cert_chain.into(),
            private_key: private_key.into(),
            ca_cert: None,
            crl: None,
        }
    }
}

/// Why a certificate or key could not be used (see [`Error::Tls`](crate::Error::Tls)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read, or holds no PEM item of the kind expected.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key is not one the crypto provider takes, or does not match the certificate.
    #[error("{}: {reason}", path.display())]
    Key {
        /// The key's file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS could not be set up with this certificate (the reason names what rustls refused).
    #[error("TLS: {0}")]
    Setup(String),
}

/// The crypto provider every TLS context of the crate uses: aws-lc-rs's (its AES-GCM runs on
/// the AVX-512 units where there are some; through rustls 1.14–1.19× ring's in two paired
/// runs, ring's AES-GCM stopping at AVX2), its cipher suites ordered with the AES-128-GCM ones
/// first (as Go's and BoringSSL's), which encrypt and decrypt 1.07–1.21× as fast as
/// AES-256-GCM on this crate's reference machine (2,392 against 1,975 MB/s and 1,897 against
/// 1,779 in two runs, one core, `cargo run --release --example security_targets -- floor`);
/// a fetch over TLS is bound by that work. Servers choose the suite by this order, not the
/// client's ([`prefer_own_order`]); the key exchange is the client's choice among X25519,
/// P-256, P-384 and the X25519 + ML-KEM-768 hybrid.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    // A stable sort: each family keeps the provider's own order within it.
    provider
        .cipher_suites
        .sort_by_key(|s| !is_aes_128_gcm(s.suite()));
    Arc::new(provider)
}

/// Whether `suite` is one of the AES-128-GCM ones (TLS 1.3's and TLS 1.2's).
fn is_aes_128_gcm(suite: rustls::CipherSuite) -> bool {
    use rustls::CipherSuite as S;
    matches!(
        suite,
        S::TLS13_AES_128_GCM_SHA256
            | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    )
}

/// `server` choosing the cipher suite by [`provider`]'s order instead of the client's (most
/// clients, OpenSSL's among them, put AES-256-GCM first).
fn prefer_own_order(mut server: rustls::ServerConfig) -> rustls::ServerConfig {
    server.ignore_client_order = true;
    // The stream protects the records itself once the handshake is done (`stream.rs`).
    server.enable_secret_extraction = true;
    server
}

/// A client's config, its records protected by the stream (`stream.rs`).
fn own_records(mut client: rustls::ClientConfig) -> Arc<rustls::ClientConfig> {
    client.enable_secret_extraction = true;
    Arc::new(client)
}

/// Reads the certificate chain and key `config` names, and checks that they go together.
fn load(config: &TlsConfig, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
    let file = |path: &Path, reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let chain = &config.cert_chain;
    let certs = CertificateDer::pem_file_iter(chain)
        .map_err(|e| file(chain, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(chain, e.to_string()))?;
    if certs.is_empty() {
        return Err(file(chain, "no CERTIFICATE in the file".into()));
    }
    let key_path = &config.private_key;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| file(key_path, e.to_string()))?;
    let key = CertifiedKey::from_der(certs, key, provider).map_err(|e| TlsError::Key {
        path: key_path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Arc::new(key))
}

/// The certificate a listener presents: the one loaded last, swapped for a new one by
/// [`reload`](Self::reload).
#[derive(Debug)]
pub(crate) struct CertStore {
    config: TlsConfig,
    provider: Arc<CryptoProvider>,
    current: parking_lot::RwLock<Arc<CertifiedKey>>,
    /// The revocation lists loaded last, and how many loads came before (see
    /// `revocation.rs`).
    crls: parking_lot::RwLock<(u64, revocation::Crls)>,
}

impl CertStore {
    /// Loads the certificate and key `config` names, and its revocation lists.
    fn open(config: &TlsConfig, provider: Arc<CryptoProvider>) -> Result<CertStore, TlsError> {
        let current = load(config, &provider)?;
        let crls = load_crls(config, &provider, &current)?;
        Ok(CertStore {
            config: config.clone(),
            provider,
            current: parking_lot::RwLock::new(current),
            crls: parking_lot::RwLock::new((0, crls)),
        })
    }

    /// Loads the files again; new handshakes present and check what they hold from now on.
    /// Files that do not load leave the certificate and the lists as they were.
    fn reload(&self) -> Result<(), TlsError> {
        let loaded = load(&self.config, &self.provider)?;
        let crls = load_crls(&self.config, &self.provider, &loaded)?;
        *self.current.write() = loaded;
        let mut current = self.crls.write();
        *current = (current.0 + 1, crls);
        Ok(())
    }

    /// The revocation lists loaded last, with their load's number.
    fn crls(&self) -> (u64, revocation::Crls) {
        let crls = self.crls.read();
        (crls.0, Arc::clone(&crls.1))
    }
}

/// The revocation lists `config` names (none without [`TlsConfig::crl`]), checked against
/// the CA by checking `own`, the broker's certificate, which the CA signed: a list whose
/// signature is not the CA's, or that is of another CA (every certificate's status would be
/// unknown, and so refused: clients and peers alike), or that revokes the broker's own
/// certificate, is refused. (A certificate not for TLS clients cannot be checked so; its lists
/// are taken as they parse.)
fn load_crls(
    config: &TlsConfig,
    provider: &Arc<CryptoProvider>,
    own: &CertifiedKey,
) -> Result<revocation::Crls, TlsError> {
    use rustls::CertificateError;
    let Some(path) = &config.crl else {
        return Ok(Arc::new([]));
    };
    let Some(ca) = &config.ca_cert else {
        return Err(TlsError::Setup(
            "a certificate revocation list needs the CA it is of (ca_cert)".into(),
        ));
    };
    let crls = revocation::load(path)?;
    let file = |reason: String| TlsError::File {
        path: path.clone(),
        reason,
    };
    let roots = roots(ca)?;
    let verifier = revocation::client_verifier(&roots, provider, true, &crls)
        .map_err(|e| file(e.to_string()))?;
    let Some((end_entity, intermediates)) = own.cert.split_first() else {
        return Ok(crls);
    };
    let now = rustls_pki_types::UnixTime::now();
    match verifier.verify_client_cert(end_entity, intermediates, now) {
        Err(rustls::Error::InvalidCertRevocationList(e)) => Err(file(format!(
            "a revocation list not signed by the CA in {}: {e:?}",
            ca.display()
        ))),
        Err(rustls::Error::InvalidCertificate(CertificateError::UnknownRevocationStatus)) => Err(
            file(format!("no revocation list of the CA in {}", ca.display())),
        ),
        Err(rustls::Error::InvalidCertificate(CertificateError::Revoked)) => Err(file(
            "the list revokes this broker's own certificate".into(),
        )),
        _ => {
            if revocation::overdue(&roots, provider, &crls, end_entity, intermediates) {
                tracing::warn!(
                    file = %path.display(),
                    "the certificate revocation list is past its next update (its CA has not \
                     renewed it); it still applies: replace it with the CA's current list"
                );
            }
            Ok(crls)
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read()))
    }
}

/// A broker dialing its peers presents its own certificate, the one its listeners present.
impl rustls::client::ResolvesClientCert for CertStore {
    fn resolve(
        &self,
        _root_hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read()))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The certificates in the PEM file `ca`, as roots of trust.
fn roots(ca: &Path) -> Result<Arc<rustls::RootCertStore>, TlsError> {
    let file = |reason: String| TlsError::File {
        path: ca.to_path_buf(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file(e.to_string()))? {
        let cert = cert.map_err(|e| file(e.to_string()))?;
        roots.add(cert).map_err(|e| file(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(file("no CERTIFICATE in the file".into()));
    }
    Ok(Arc::new(roots))
}

/// The certificate a connection's client presented in its handshake, which the listener
/// verified: signed by the brokers' CA, within its dates, for TLS client authentication.
#[derive(Clone, Debug)]
pub(crate) struct ClientCertificate {
    der: CertificateDer<'static>,
    /// The brokers it names (`broker-<id>`, DNS names of its subjectAltName).
    brokers: Vec<crate::types::NodeId>,
}

impl ClientCertificate {
    /// The certificate `der`, with the brokers it names read once.
    fn new(der: CertificateDer<'static>) -> ClientCertificate {
        let brokers = subject::dns_names(&der)
            .iter()
            .filter_map(|name| named_broker(name))
            .collect();
        ClientCertificate { der, brokers }
    }

    /// The user a client certificate stands for (`User:<name>`): the name the first of
    /// `rules` that applies to its subject gives, or without rules its subject's common name
    /// (`None` if it has none). `Err`: no rule applies (why, for the client and the log).
    pub(crate) fn user(
        &self,
        rules: Option<&crate::PrincipalMappingRules>,
    ) -> Result<Option<String>, String> {
        let Some(rules) = rules else {
            return Ok(subject::common_name(&self.der));
        };
        let subject = dn::distinguished_name(&self.der)
            .ok_or_else(|| "the client certificate's subject cannot be read".to_string())?;
        match rules.map(&subject) {
            Some(name) => Ok(Some(name)),
            None => Err(format!(
                "no principal mapping rule applies to the client certificate's subject \
                 {subject:?}"
            )),
        }
    }

    /// Whether it is broker `id`'s: whether it names `broker-<id>` (a DNS name).
    pub(crate) fn names_broker(&self, id: crate::types::NodeId) -> bool {
        self.brokers.contains(&id)
    }

    /// Whether it is some broker's: whether it names `broker-<id>` for some id, whether or
    /// not the cluster has that broker yet (a joining broker's).
    pub(crate) fn names_a_broker(&self) -> bool {
        !self.brokers.is_empty()
    }
}

/// The broker a DNS name names: `id` for `broker-<id>` (as [`broker_name`] writes it; DNS
/// names are compared without case).
fn named_broker(name: &str) -> Option<crate::types::NodeId> {
    const PREFIX: &str = "broker-";
    let head = name.get(..PREFIX.len())?;
    let digits = name.get(PREFIX.len()..)?;
    if !head.eq_ignore_ascii_case(PREFIX) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: crate::types::NodeId = digits.parse().ok()?;
    // One spelling per broker: no leading zeros.
    (id.to_string() == digits).then_some(id)
}

/// What a listener runs its TLS handshakes with.
#[derive(Clone)]
pub(crate) struct TlsServer {
    config: Arc<rustls::ServerConfig>,
    certs: Arc<CertStore>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("config", &self.certs.config)
            .finish()
    }
}

impl TlsServer {
    /// A server presenting the certificate `config` names (TLS 1.2 and 1.3, rustls' safe
    /// defaults; no client certificate asked for).
    pub(crate) fn new(config: &TlsConfig) -> Result<TlsServer, TlsError> {
        let provider = provider();
        let certs = Arc::new(CertStore::open(config, Arc::clone(&provider))?);
        let resolver: Arc<dyn ResolvesServerCert> = Arc::clone(&certs) as _;
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        Ok(TlsServer {
            config: Arc::new(prefer_own_order(server)),
            certs,
        })
    }

    /// The same server (the same certificate, reloaded together) asking every client for a
    /// certificate signed by the CA in `ca`: a client may present none unless `required`, but
    /// one that presents another is refused in the handshake. What it presented is the
    /// connection's [`ClientCertificate`]: peer brokers present theirs.
    pub(crate) fn asking_for_certificates(
        &self,
        ca: &Path,
        required: bool,
    ) -> Result<TlsServer, TlsError> {
        let provider = provider();
        let verifier = Arc::new(revocation::ClientVerifier::new(
            roots(ca)?,
            Arc::clone(&provider),
            required,
            &self.certs,
        )?);
        let resolver: Arc<dyn ResolvesServerCert> = Arc::clone(&self.certs) as _;
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(resolver);
        Ok(TlsServer {
            config: Arc::new(prefer_own_order(server)),
            certs: Arc::clone(&self.certs),
        })
    }

    /// Loads the certificate files again (see [`CertStore::reload`]).
    pub(crate) fn reload(&self) -> Result<(), TlsError> {
        self.certs.reload()
    }

    /// Runs the server's side of a handshake on `stream`, from `from`, until `deadline`, and
    /// returns the connection with the certificate its client presented, if it was asked for
    /// one and did. `None` (logged once, at info): the handshake failed (a plaintext client, a
    /// client that does not trust the certificate, a client certificate the CA did not sign)
    /// or did not end in time; the connection is to be closed.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
        from: SocketAddr,
        deadline: tokio::time::Instant,
    ) -> Option<(TlsStream, Option<ClientCertificate>)> {
        let accepting = stream::TlsStream::accept(stream, Arc::clone(&self.config));
        match tokio::time::timeout_at(deadline, accepting).await {
            Ok(Ok(stream)) => {
                let presented = stream.peer_certificates();
                let certificate = presented
                    .and_then(|chain| chain.first())
                    .map(|cert| ClientCertificate::new(cert.clone().into_owned()));
                Some((stream, certificate))
            }
            Ok(Err(e)) => {
                tracing::info!(%from, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::info!(%from, "TLS handshake not finished in time");
                None
            }
        }
    }
}

/// What outbound connections (a client's, a broker's to its peers) dial TLS with: the CA
/// roots a server's certificate must chain to.
#[derive(Clone)]
pub(crate) struct TlsDialer {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for TlsDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsDialer").finish_non_exhaustive()
    }
}

impl TlsDialer {
    /// A dialer trusting every certificate in the PEM file `ca` (and nothing else),
    /// presenting no certificate of its own.
    #[cfg(test)]
    pub(crate) fn from_ca_file(ca: &Path) -> Result<TlsDialer, TlsError> {
        TlsDialer::presenting(ca, None, None)
    }

    /// A client's dialer trusting the CA in `ca`, presenting the certificate and key
    /// `identity` names, if any (a client certificate: the client's identity where brokers
    /// take one), and refusing brokers whose certificates the revocation lists in `crl`
    /// revoke, if given.
    pub(crate) fn presenting(
        ca: &Path,
        identity: Option<&TlsConfig>,
        crl: Option<&Path>,
    ) -> Result<TlsDialer, TlsError> {
        let provider = provider();
        let crls = crl
            .map(revocation::load)
            .transpose()?
            .unwrap_or_else(|| Arc::new([]));
        let verifier = revocation::server_verifier(&roots(ca)?, &provider, &crls)?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_webpki_verifier(verifier);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let certs = Arc::new(CertStore::open(identity, provider)?);
                builder.with_client_cert_resolver(certs)
            }
        };
        Ok(TlsDialer {
            config: own_records(config),
        })
    }

    /// A broker's dialer to its peers: trusting the brokers' CA in `ca`, and presenting the
    /// certificate `server` presents (reloaded with it), by which the peers know it.
    pub(crate) fn for_peers(ca: &Path, server: &TlsServer) -> Result<TlsDialer, TlsError> {
        let resolver: Arc<dyn rustls::client::ResolvesClientCert> = Arc::clone(&server.certs) as _;
        let provider = provider();
        let verifier =
            revocation::PeerVerifier::new(roots(ca)?, Arc::clone(&provider), &server.certs)?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            // rustls' own verifier, in front of which this one keeps the lists current.
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_cert_resolver(resolver);
        Ok(TlsDialer {
            config: own_records(config),
        })
    }

    /// Runs the client's side of a handshake on `stream`, expecting a certificate that names
    /// `name`.
    pub(crate) async fn connect(
        &self,
        stream: TcpStream,
        name: rustls_pki_types::ServerName<'static>,
    ) -> std::io::Result<TlsStream> {
        stream::TlsStream::connect(stream, Arc::clone(&self.config), name).await
    }
}

/// The name broker `id`'s certificate carries for its peers: `broker-<id>`.
pub(crate) fn broker_name(id: crate::types::NodeId) -> rustls_pki_types::ServerName<'static> {
    let name = format!("broker-{id}");
    // Letters, digits and a hyphen: a DNS name whatever the id.
    rustls_pki_types::ServerName::try_from(name).expect("broker-<digits> is a DNS name")
}

#[cfg(test)]
mod tests;
