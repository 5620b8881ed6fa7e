//! A local certificate authority and the certificates it signs, for dev clusters and tests
//! (`replog certs dev`; the tests make theirs with the same code at test time, so no key is
//! ever checked in).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, RevocationReason,
    RevokedCertParams, SerialNumber,
};

use super::{TlsConfig, TlsError};
use crate::error::Result;
use crate::types::NodeId;

/// A certificate and its private key, both PEM.
#[derive(Clone)]
struct Pair {
    cert: String,
    key: String,
}

/// A local CA and certificates it signed: one per broker and one for a client. ECDSA P-256
/// keys (rcgen's default), certificates valid from 1975 to 4096 (rcgen's default: these are
/// for dev clusters, which are not meant to live by their certificates' dates).
///
/// The client certificate's subject is `CN=client`: where brokers take client certificates
/// as identities, its principal is `User:client`.
///
/// Each broker's certificate names the given hosts (DNS names, or IP addresses: what clients
/// dial, and check) and the DNS name `broker-<id>`, and serves for both TLS server and client
/// authentication. For dev clusters only: the CA's key is written beside the certificates.
#[derive(Clone)]
pub struct DevCertificates {
    ca: Pair,
    brokers: Vec<(NodeId, Pair)>,
    client: Pair,
}

impl std::fmt::Debug for DevCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let brokers: Vec<NodeId> = self.brokers.iter().map(|(id, _)| *id).collect();
        f.debug_struct("DevCertificates")
            .field("brokers", &brokers)
            .finish_non_exhaustive()
    }
}

/// rcgen's error, as a setup failure.
fn setup(e: rcgen::Error) -> TlsError {
    TlsError::Setup(e.to_string())
}

/// Parameters of a certificate named `common_name`, with `names` as its SANs.
fn params(common_name: &str, names: Vec<String>) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(names).map_err(setup)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    Ok(params)
}

/// A certificate for `params`, with a new key, signed by `issuer`.
fn signed(mut params: CertificateParams, issuer: &Issuer<'_, KeyPair>) -> Result<Pair, TlsError> {
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().map_err(setup)?;
    let cert = params.signed_by(&key, issuer).map_err(setup)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

impl DevCertificates {
    /// A new CA, a certificate for each of `brokers` naming `hosts` and `broker-<id>`, and a
    /// client certificate.
    ///
    /// # Errors
    ///
    /// [`Error::Tls`](crate::Error::Tls) ([`TlsError::Setup`]) if a host is neither an IP
    /// address nor a valid DNS name.
    pub fn generate(brokers: &[NodeId], hosts: &[String]) -> Result<DevCertificates> {
        DevCertificates::generate_with_expired(brokers, hosts, &[])
    }

    /// [`generate`](Self::generate), with the certificates of the brokers in `expired` valid
    /// only from 1990 to 2000.
    pub(super) fn generate_with_expired(
        brokers: &[NodeId],
        hosts: &[String],
        expired: &[NodeId],
    ) -> Result<DevCertificates> {
        if let Some(bad) = hosts
            .iter()
            .find(|h| rustls_pki_types::ServerName::try_from(h.as_str()).is_err())
        {
            let reason = format!("{bad:?} is neither an IP address nor a DNS name");
            return Err(TlsError::Setup(reason).into());
        }
        let ca = ca_params()?;
        let ca_key = KeyPair::generate().map_err(setup)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(setup)?;
        let ca_pair = Pair {
            cert: ca_cert.pem(),
            key: ca_key.serialize_pem(),
        };
        let issuer = Issuer::new(ca, ca_key);
        let mut signed_brokers = Vec::with_capacity(brokers.len());
        for id in brokers {
            let name = format!("broker-{id}");
            let mut names = hosts.to_vec();
            names.push(name.clone());
            let mut p = params(&name, names)?;
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            if expired.contains(id) {
                p.not_before = rcgen::date_time_ymd(1990, 1, 1);
                p.not_after = rcgen::date_time_ymd(2000, 1, 1);
            }
            signed_brokers.push((*id, signed(p, &issuer)?));
        }
        let mut client = params("client", Vec::new())?;
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        Ok(DevCertificates {
            ca: ca_pair,
            brokers: signed_brokers,
            client: signed(client, &issuer)?,
        })
    }

    /// The CA's certificate, PEM: what clients trust (kcat's `ssl.ca.location`).
    pub fn ca_pem(&self) -> &str {
        &self.ca.cert
    }

    /// Writes every certificate and key into `dir` (created if missing): `ca.pem`, `ca.key`,
    /// `broker-<id>.pem` and `broker-<id>.key` per broker, `client.pem` and `client.key`.
    /// Returns the files written, in that order. Keys are written readable by their owner
    /// only.
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if a file cannot be written.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut files = vec![("ca".to_string(), &self.ca)];
        files.extend(
            self.brokers
                .iter()
                .map(|(id, p)| (format!("broker-{id}"), p)),
        );
        files.push(("client".to_string(), &self.client));
        let mut written = Vec::new();
        for (name, pair) in files {
            let cert = dir.join(format!("{name}.pem"));
            std::fs::write(&cert, &pair.cert)?;
            let key = dir.join(format!("{name}.key"));
            write_private(&key, &pair.key)?;
            written.extend([cert, key]);
        }
        Ok(written)
    }

    /// A revocation list of the CA (PEM, `X509 CRL`) revoking the certificates of the brokers
    /// in `brokers`, and the client's if `client`: for [`TlsConfig::crl`].
    ///
    /// # Errors
    ///
    /// [`Error::Tls`](crate::Error::Tls) ([`TlsError::Setup`]) if a broker has no certificate
    /// here, or the list cannot be signed.
    pub fn revocation_list(&self, brokers: &[NodeId], client: bool) -> Result<String> {
        self.revocation_list_until(brokers, client, LIST_VALID_UNTIL)
    }

    /// [`revocation_list`](Self::revocation_list) of `brokers`, whose next update passed in
    /// 2001: a list the CA did not renew.
    #[cfg(test)]
    pub(crate) fn overdue_revocation_list(&self, brokers: &[NodeId]) -> Result<String> {
        self.revocation_list_until(brokers, false, (2001, 1, 1))
    }

    /// [`revocation_list`](Self::revocation_list), its next update `until`.
    fn revocation_list_until(
        &self,
        brokers: &[NodeId],
        client: bool,
        until: (i32, u8, u8),
    ) -> Result<String> {
        let mut revoked = Vec::new();
        for id in brokers {
            let Some((_, pair)) = self.brokers.iter().find(|(b, _)| b == id) else {
                return Err(TlsError::Setup(format!("no certificate of broker {id}")).into());
            };
            revoked.push(serial_of(&pair.cert, &format!("broker-{id}"))?);
        }
        if client {
            revoked.push(serial_of(&self.client.cert, "client")?);
        }
        revocation_list(&self.ca.key, revoked, until)
    }

    /// [`revocation_list`](Self::revocation_list), signed with the CA's key that
    /// [`write_to`](Self::write_to) wrote in `dir` (`replog certs revoke`).
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if `ca.key` or a certificate revoked cannot be read;
    /// [`Error::Tls`](crate::Error::Tls) if they hold no key or certificate, or the list
    /// cannot be signed.
    pub fn revocation_list_in(dir: &Path, brokers: &[NodeId], client: bool) -> Result<String> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        let mut revoked = Vec::new();
        for id in brokers {
            let name = format!("broker-{id}.pem");
            revoked.push(serial_of(&read(&name)?, &name)?);
        }
        if client {
            revoked.push(serial_of(&read("client.pem")?, "client.pem")?);
        }
        revocation_list(&read("ca.key")?, revoked, LIST_VALID_UNTIL)
    }

    /// Broker `id`'s certificate and key as [`write_to`](Self::write_to) names them in `dir`.
    pub fn broker_config(dir: &Path, id: NodeId) -> TlsConfig {
        TlsConfig::new(
            dir.join(format!("broker-{id}.pem")),
            dir.join(format!("broker-{id}.key")),
        )
    }
}

/// The dev CA's parameters: its name and what it may sign (the same for every dev CA; its key
/// tells them apart).
fn ca_params() -> Result<CertificateParams, TlsError> {
    let mut ca = params("replog dev CA", Vec::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(ca)
}

/// The serial number of the certificate `pem` (named `name` for an error).
fn serial_of(pem: &str, name: &str) -> Result<SerialNumber, TlsError> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .ok()
        .and_then(|der| super::subject::serial_number(&der).map(SerialNumber::from_slice))
        .ok_or_else(|| TlsError::Setup(format!("{name} holds no certificate")))
}

/// The next update a dev CA's revocation list names (year, month, day): none is planned.
const LIST_VALID_UNTIL: (i32, u8, u8) = (4096, 1, 1);

/// A revocation list signed by the dev CA whose key is `ca_key` (PEM), revoking the
/// certificates of these serial numbers, whose next update is `until` (year, month, day).
fn revocation_list(
    ca_key: &str,
    serials: Vec<SerialNumber>,
    until: (i32, u8, u8),
) -> Result<String> {
    let revoked = |serial_number: SerialNumber| RevokedCertParams {
        serial_number,
        revocation_time: rcgen::date_time_ymd(2000, 1, 1),
        reason_code: Some(RevocationReason::KeyCompromise),
        invalidity_date: None,
    };
    let revoked_certs: Vec<RevokedCertParams> = serials.into_iter().map(revoked).collect();
    let list = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2000, 1, 1),
        next_update: rcgen::date_time_ymd(until.0, until.1, until.2),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    let key = KeyPair::from_pem(ca_key).map_err(setup)?;
    let issuer = Issuer::new(ca_params()?, key);
    Ok(list
        .signed_by(&issuer)
        .map_err(setup)?
        .pem()
        .map_err(setup)?)
}

/// Writes a private key, readable by its owner only (where the platform has modes).
fn write_private(path: &Path, pem: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(pem.as_bytes())
}
