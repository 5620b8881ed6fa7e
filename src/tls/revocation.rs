//! Certificate revocation lists ([`TlsConfig::crl`]): certificates the CA revoked are refused
//! where a broker checks the certificates it is presented, a client's or a peer broker's.
//!
//! rustls builds a verifier with its CRLs once, and a TLS context keeps its verifier for
//! good. So that a list read again on SIGHUP applies to the next handshake, the verifiers here
//! stand in front of rustls' own and build it again when the broker's [`CertStore`] holds a
//! newer list (each load counts a generation).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, ServerName, UnixTime};

use super::{CertStore, TlsError};

/// The revocation lists loaded last; empty without [`TlsConfig::crl`].
pub(super) type Crls = Arc<[CertificateRevocationListDer<'static>]>;

/// Reads the `X509 CRL` items of the PEM file at `path`.
pub(super) fn load(path: &Path) -> Result<Crls, TlsError> {
    let file = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        reason,
    };
    let crls = CertificateRevocationListDer::pem_file_iter(path)
        .map_err(|e| file(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(e.to_string()))?;
    if crls.is_empty() {
        return Err(file("no X509 CRL in the file".into()));
    }
    Ok(crls.into())
}

/// A verifier of client certificates signed by `roots`, refusing those `crls` revoke (an end
/// entity's status only: a list need not cover the intermediates); clients may present none
/// unless `required`.
pub(super) fn client_verifier(
    roots: &Arc<rustls::RootCertStore>,
    provider: &Arc<CryptoProvider>,
    required: bool,
    crls: &Crls,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let builder = client_verifier_builder(roots, provider, crls);
    let builder = if required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder.build().map_err(|e| TlsError::Setup(e.to_string()))
}

/// rustls' verifier of client certificates signed by `roots`, with `crls` for an end
/// entity's status.
fn client_verifier_builder(
    roots: &Arc<rustls::RootCertStore>,
    provider: &Arc<CryptoProvider>,
    crls: &Crls,
) -> rustls::server::ClientCertVerifierBuilder {
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::clone(roots),
        Arc::clone(provider),
    )
    .with_crls(crls.iter().cloned())
    .only_check_end_entity_revocation()
}

/// Whether the list of `crls` that covers `end_entity` (a certificate `roots` sign) is past
/// its next update: its CA has not issued the list that replaces it. rustls, as here, still
/// takes such a list for what it says (OpenSSL refuses every certificate it covers instead).
pub(super) fn overdue(
    roots: &Arc<rustls::RootCertStore>,
    provider: &Arc<CryptoProvider>,
    crls: &Crls,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> bool {
    use rustls::CertificateError as E;
    let verifier = client_verifier_builder(roots, provider, crls)
        .enforce_revocation_expiration()
        .build();
    let Ok(verifier) = verifier else {
        return false;
    };
    matches!(
        verifier.verify_client_cert(end_entity, intermediates, UnixTime::now()),
        Err(rustls::Error::InvalidCertificate(
            E::ExpiredRevocationList | E::ExpiredRevocationListContext { .. }
        ))
    )
}

/// A verifier of server certificates signed by `roots`, refusing those `crls` revoke (an end
/// entity's status only).
pub(super) fn server_verifier(
    roots: &Arc<rustls::RootCertStore>,
    provider: &Arc<CryptoProvider>,
    crls: &Crls,
) -> Result<Arc<rustls::client::WebPkiServerVerifier>, TlsError> {
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::clone(roots),
        Arc::clone(provider),
    )
    .with_crls(crls.iter().cloned())
    .only_check_end_entity_revocation()
    .build()
    .map_err(|e| TlsError::Setup(e.to_string()))
}

/// [`server_verifier`], behind the trait.
fn peer_verifier(
    roots: &Arc<rustls::RootCertStore>,
    provider: &Arc<CryptoProvider>,
    crls: &Crls,
) -> Result<Arc<dyn ServerCertVerifier>, TlsError> {
    Ok(server_verifier(roots, provider, crls)?)
}

/// rustls' verifier, built with the lists `certs` holds, and again when it holds newer ones.
#[derive(Debug)]
struct Current<V: ?Sized> {
    certs: Arc<CertStore>,
    built: parking_lot::RwLock<(u64, Arc<V>)>,
}

impl<V: ?Sized> Current<V> {
    fn new(
        certs: &Arc<CertStore>,
        build: impl Fn(&Crls) -> Result<Arc<V>, TlsError>,
    ) -> Result<Current<V>, TlsError> {
        let (generation, crls) = certs.crls();
        Ok(Current {
            certs: Arc::clone(certs),
            built: parking_lot::RwLock::new((generation, build(&crls)?)),
        })
    }

    /// The verifier for the lists loaded last. One the lists cannot build (they loaded, so
    /// this does not happen) leaves the verifier as it was.
    fn get(&self, build: impl Fn(&Crls) -> Result<Arc<V>, TlsError>) -> Arc<V> {
        let (generation, crls) = self.certs.crls();
        {
            let built = self.built.read();
            if built.0 == generation {
                return Arc::clone(&built.1);
            }
        }
        let mut built = self.built.write();
        // A handshake that read an older load leaves a newer verifier in place.
        if built.0 < generation
            && let Ok(verifier) = build(&crls)
        {
            *built = (generation, verifier);
        }
        Arc::clone(&built.1)
    }
}

/// Client certificates checked against the CA and the revocation lists loaded last.
#[derive(Debug)]
pub(super) struct ClientVerifier {
    roots: Arc<rustls::RootCertStore>,
    provider: Arc<CryptoProvider>,
    required: bool,
    /// The CA's names, offered to clients (the CA is not reloaded).
    hints: Vec<DistinguishedName>,
    current: Current<dyn ClientCertVerifier>,
}

impl ClientVerifier {
    pub(super) fn new(
        roots: Arc<rustls::RootCertStore>,
        provider: Arc<CryptoProvider>,
        required: bool,
        certs: &Arc<CertStore>,
    ) -> Result<ClientVerifier, TlsError> {
        let current = Current::new(certs, |crls| {
            client_verifier(&roots, &provider, required, crls)
        })?;
        Ok(ClientVerifier {
            hints: roots.subjects(),
            roots,
            provider,
            required,
            current,
        })
    }

    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.current
            .get(|crls| client_verifier(&self.roots, &self.provider, self.required, crls))
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

/// Peer brokers' certificates, as a broker dials them, checked against the CA and the
/// revocation lists loaded last.
#[derive(Debug)]
pub(super) struct PeerVerifier {
    roots: Arc<rustls::RootCertStore>,
    provider: Arc<CryptoProvider>,
    current: Current<dyn ServerCertVerifier>,
}

impl PeerVerifier {
    pub(super) fn new(
        roots: Arc<rustls::RootCertStore>,
        provider: Arc<CryptoProvider>,
        certs: &Arc<CertStore>,
    ) -> Result<PeerVerifier, TlsError> {
        let current = Current::new(certs, |crls| peer_verifier(&roots, &provider, crls))?;
        Ok(PeerVerifier {
            roots,
            provider,
            current,
        })
    }

    fn verifier(&self) -> Arc<dyn ServerCertVerifier> {
        self.current
            .get(|crls| peer_verifier(&self.roots, &self.provider, crls))
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}
