use super::*;

use rustls::client::danger::ServerCertVerifier;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn hosts() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

/// A client trusting only the CA of `certs`.
fn connector(certs: &DevCertificates) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(certs.ca_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A loopback listener whose connections go through `server`'s handshake and are then
/// answered `hello`; its address.
async fn serve(server: TlsServer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // Ends with the test's runtime.
        while let Ok((stream, from)) = listener.accept().await {
            let server = server.clone();
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                if let Some((mut tls, _)) = server.accept(stream, from, deadline).await {
                    let _ = tls.write_all(b"hello").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Whether a client trusting `certs`' CA gets `hello` from `addr` over TLS as `localhost`.
async fn trusted(addr: SocketAddr, certs: &DevCertificates) -> bool {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let Ok(mut tls) = connector(certs).connect(name, tcp).await else {
        return false;
    };
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.is_ok() && got == b"hello"
}

#[tokio::test]
async fn a_new_connection_gets_the_certificate_loaded_last() {
    let dir = tempfile::tempdir().unwrap();
    let old = DevCertificates::generate(&[1], &hosts()).unwrap();
    let new = DevCertificates::generate(&[1], &hosts()).unwrap();
    old.write_to(dir.path()).unwrap();
    let config = DevCertificates::broker_config(dir.path(), 1);
    let server = TlsServer::new(&config).unwrap();
    let addr = serve(server.clone()).await;
    assert!(trusted(addr, &old).await);
    assert!(!trusted(addr, &new).await, "another CA's client trusts it");

    // New files are served only once reloaded.
    new.write_to(dir.path()).unwrap();
    assert!(trusted(addr, &old).await);
    server.reload().unwrap();
    assert!(trusted(addr, &new).await);
    assert!(!trusted(addr, &old).await);

    // Files that do not load leave the certificate as it was.
    std::fs::write(&config.cert_chain, "not a certificate").unwrap();
    assert!(matches!(server.reload(), Err(TlsError::File { .. })));
    assert!(trusted(addr, &new).await);
}

#[test]
fn files_that_cannot_be_served_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = DevCertificates::generate(&[1, 2], &hosts()).unwrap();
    certs.write_to(dir.path()).unwrap();
    let one = DevCertificates::broker_config(dir.path(), 1);
    let two = DevCertificates::broker_config(dir.path(), 2);
    TlsServer::new(&one).unwrap();
    // Broker 1's certificate with broker 2's key.
    let mismatched = TlsConfig::new(&one.cert_chain, &two.private_key);
    match TlsServer::new(&mismatched) {
        Err(TlsError::Key { path, .. }) => assert_eq!(path, two.private_key),
        other => panic!("a key of another certificate: {other:?}"),
    }
    let missing = TlsConfig::new(dir.path().join("nope.pem"), &one.private_key);
    match TlsServer::new(&missing) {
        Err(TlsError::File { path, .. }) => assert_eq!(path, missing.cert_chain),
        other => panic!("a missing file: {other:?}"),
    }
    // A key where the certificate should be, and a certificate where the key should be.
    let swapped = TlsConfig::new(&one.private_key, &one.cert_chain);
    match TlsServer::new(&swapped) {
        Err(TlsError::File { path, reason }) => {
            assert_eq!(path, one.private_key);
            assert!(reason.contains("no CERTIFICATE"), "{reason}");
        }
        other => panic!("a key as the certificate: {other:?}"),
    }
    let no_key = TlsConfig::new(&one.cert_chain, &one.cert_chain);
    assert!(matches!(
        TlsServer::new(&no_key),
        Err(TlsError::File { .. })
    ));
}

#[tokio::test]
async fn a_plaintext_client_and_a_silent_one_are_refused_by_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    DevCertificates::generate(&[1], &hosts())
        .unwrap()
        .write_to(dir.path())
        .unwrap();
    let server = TlsServer::new(&DevCertificates::broker_config(dir.path(), 1)).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A Kafka ApiVersions request, as a plaintext client starts.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(&[0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 1, 0xff, 0xff])
        .await
        .unwrap();
    let (stream, from) = listener.accept().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let started = std::time::Instant::now();
    assert!(server.accept(stream, from, deadline).await.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused at once"
    );
    // The connection is closed: what the client reads ends (after an alert, if any).
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection stays open");

    // A client that says nothing is closed at the deadline.
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (stream, from) = listener.accept().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
    assert!(server.accept(stream, from, deadline).await.is_none());
}

#[test]
fn dev_certificates_name_each_broker_and_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec!["localhost".to_string(), "10.0.0.7".to_string()];
    let certs = DevCertificates::generate(&[1, 7], &hosts).unwrap();
    let written = certs.write_to(dir.path()).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "ca.pem",
            "ca.key",
            "broker-1.pem",
            "broker-1.key",
            "broker-7.pem",
            "broker-7.key",
            "client.pem",
            "client.key"
        ]
    );
    // Broker 7's certificate verifies for its hosts and `broker-7`, not for `broker-1`.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(certs.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    let cert = CertificateDer::from_pem_file(dir.path().join("broker-7.pem")).unwrap();
    let now = rustls_pki_types::UnixTime::now();
    for (name, ok) in [
        ("localhost", true),
        ("10.0.0.7", true),
        ("broker-7", true),
        ("broker-1", false),
    ] {
        let name = rustls_pki_types::ServerName::try_from(name).unwrap();
        let verified = verifier.verify_server_cert(&cert, &[], &name, &[], now);
        assert_eq!(verified.is_ok(), ok, "{name:?}: {verified:?}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "a key readable by others");
    }
    assert!(matches!(
        DevCertificates::generate(&[1], &["not a host name!".to_string()]),
        Err(crate::Error::Tls(TlsError::Setup(_)))
    ));
}

/// What a listener asking for certificates learnt of one connection: `None` if the handshake
/// failed, else whether the certificate presented names brokers 1 and 2.
async fn presented(server: &TlsServer, dialer: &TlsDialer) -> Option<(bool, bool)> {
    presented_as(server, dialer, 1).await
}

/// [`presented`], the dialer expecting the server to be broker `server_id`.
async fn presented_as(
    server: &TlsServer,
    dialer: &TlsDialer,
    server_id: crate::types::NodeId,
) -> Option<(bool, bool)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dial = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tls = dialer.connect(tcp, broker_name(server_id)).await.ok()?;
        // TLS 1.3: the server checks the client's certificate after the client's side ended;
        // a refusal arrives as the first read's error.
        let mut got = [0u8; 5];
        tls.read_exact(&mut got).await.ok()
    };
    let accept = async {
        let (stream, from) = listener.accept().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let (mut tls, certificate) = server.accept(stream, from, deadline).await?;
        let _ = tls.write_all(b"hello").await;
        let _ = tls.flush().await;
        Some(certificate.map_or((false, false), |c| (c.names_broker(1), c.names_broker(2))))
    };
    let (_, learnt) = tokio::join!(dial, accept);
    learnt
}

#[tokio::test]
async fn a_listener_asking_for_certificates_learns_which_broker_dialed_it() {
    let dir = tempfile::tempdir().unwrap();
    let certs = DevCertificates::generate_with_expired(&[1, 2, 3], &hosts(), &[3]).unwrap();
    certs.write_to(dir.path()).unwrap();
    let ca = dir.path().join("ca.pem");
    let server = TlsServer::new(&DevCertificates::broker_config(dir.path(), 1))
        .unwrap()
        .asking_for_certificates(&ca, false)
        .unwrap();
    let as_broker = |id| {
        let me = TlsServer::new(&DevCertificates::broker_config(dir.path(), id)).unwrap();
        TlsDialer::for_peers(&ca, &me).unwrap()
    };
    assert_eq!(presented(&server, &as_broker(2)).await, Some((false, true)));
    // A client's certificate of the same CA names no broker; no certificate is no broker.
    let client = TlsConfig::new(dir.path().join("client.pem"), dir.path().join("client.key"));
    let client = TlsDialer::for_peers(&ca, &TlsServer::new(&client).unwrap()).unwrap();
    assert_eq!(presented(&server, &client).await, Some((false, false)));
    let anonymous = TlsDialer::from_ca_file(&ca).unwrap();
    assert_eq!(presented(&server, &anonymous).await, Some((false, false)));

    // An expired broker certificate and one of another CA are refused in the handshake.
    assert_eq!(presented(&server, &as_broker(3)).await, None);
    let other_dir = tempfile::tempdir().unwrap();
    DevCertificates::generate(&[1, 2], &hosts())
        .unwrap()
        .write_to(other_dir.path())
        .unwrap();
    let impostor = TlsServer::new(&DevCertificates::broker_config(other_dir.path(), 2)).unwrap();
    let impostor = TlsDialer::for_peers(&ca, &impostor).unwrap();
    assert_eq!(presented(&server, &impostor).await, None);
}

/// A certificate the CA's revocation list revokes is refused where the broker checks what it
/// is presented: a client's or a peer broker's at its listener, a peer's as it dials. A list
/// written anew applies to the next handshake once reloaded; one that does not load leaves
/// the list as it was.
#[tokio::test]
async fn certificates_the_revocation_list_revokes_are_refused_and_a_reloaded_list_applies() {
    let dir = tempfile::tempdir().unwrap();
    let certs = DevCertificates::generate(&[1, 2, 3], &hosts()).unwrap();
    certs.write_to(dir.path()).unwrap();
    let (ca, crl) = (dir.path().join("ca.pem"), dir.path().join("crl.pem"));
    std::fs::write(&crl, certs.revocation_list(&[3], true).unwrap()).unwrap();
    let with_crl = |id| {
        let mut config = DevCertificates::broker_config(dir.path(), id);
        config.ca_cert = Some(ca.clone());
        config.crl = Some(crl.clone());
        TlsServer::new(&config).unwrap()
    };
    let broker_1 = with_crl(1);
    let server = broker_1.asking_for_certificates(&ca, false).unwrap();
    let dialer = |id| {
        let me = TlsServer::new(&DevCertificates::broker_config(dir.path(), id)).unwrap();
        TlsDialer::for_peers(&ca, &me).unwrap()
    };
    let client = TlsConfig::new(dir.path().join("client.pem"), dir.path().join("client.key"));
    let client = TlsDialer::presenting(&ca, Some(&client), None).unwrap();
    assert_eq!(presented(&server, &dialer(2)).await, Some((false, true)));
    assert_eq!(
        presented(&server, &dialer(3)).await,
        None,
        "a revoked broker"
    );
    assert_eq!(presented(&server, &client).await, None, "a revoked client");
    let anonymous = TlsDialer::from_ca_file(&ca).unwrap();
    assert_eq!(presented(&server, &anonymous).await, Some((false, false)));
    // Dialing: broker 2 with the list does not take broker 3's listener for a peer.
    let broker_3 = TlsServer::new(&DevCertificates::broker_config(dir.path(), 3))
        .unwrap()
        .asking_for_certificates(&ca, false)
        .unwrap();
    let broker_2 = TlsDialer::for_peers(&ca, &with_crl(2)).unwrap();
    assert_eq!(
        presented_as(&broker_3, &broker_2, 3).await,
        None,
        "a revoked peer"
    );
    assert_eq!(
        presented_as(&broker_3, &dialer(2), 3).await,
        Some((false, true))
    );
    // A client given the list (`ClientConfig::tls_crl`) does not dial broker 3 either.
    let careful = TlsDialer::presenting(&ca, None, Some(&crl)).unwrap();
    assert_eq!(presented_as(&broker_3, &careful, 3).await, None);
    let careless = TlsDialer::presenting(&ca, None, None).unwrap();
    assert_eq!(
        presented_as(&broker_3, &careless, 3).await,
        Some((false, false))
    );

    // A new list, reloaded: broker 2 revoked, the client and broker 3 no longer.
    std::fs::write(&crl, certs.revocation_list(&[2], false).unwrap()).unwrap();
    assert_eq!(
        presented(&server, &dialer(3)).await,
        None,
        "not reloaded yet"
    );
    broker_1.reload().unwrap();
    assert_eq!(presented(&server, &dialer(3)).await, Some((false, false)));
    assert_eq!(presented(&server, &client).await, Some((false, false)));
    assert_eq!(presented(&server, &dialer(2)).await, None);

    // A list that does not load, or that another CA signed, is refused and changes nothing.
    std::fs::write(&crl, "not a list").unwrap();
    assert!(matches!(broker_1.reload(), Err(TlsError::File { .. })));
    let other = DevCertificates::generate(&[1], &hosts()).unwrap();
    std::fs::write(&crl, other.revocation_list(&[], true).unwrap()).unwrap();
    assert!(broker_1.reload().is_err(), "another CA's list");
    std::fs::write(&crl, certs.revocation_list(&[1], false).unwrap()).unwrap();
    assert!(
        broker_1.reload().is_err(),
        "the broker's own certificate revoked"
    );
    assert_eq!(presented(&server, &dialer(2)).await, None);
    assert_eq!(presented(&server, &client).await, Some((false, false)));

    // A list without the CA it is of is a setup error.
    let mut config = DevCertificates::broker_config(dir.path(), 1);
    config.crl = Some(crl.clone());
    assert!(matches!(TlsServer::new(&config), Err(TlsError::Setup(_))));
}

#[tokio::test]
async fn a_revocation_list_past_its_next_update_still_applies_and_is_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let certs = DevCertificates::generate(&[1, 2, 3], &hosts()).unwrap();
    certs.write_to(dir.path()).unwrap();
    let (ca, crl) = (dir.path().join("ca.pem"), dir.path().join("crl.pem"));
    let provider = provider();
    let roots = roots(&ca).unwrap();
    let own = TlsServer::new(&DevCertificates::broker_config(dir.path(), 1))
        .unwrap()
        .certs
        .current
        .read()
        .clone();
    let overdue = |list: String| {
        std::fs::write(&crl, list).unwrap();
        let crls = revocation::load(&crl).unwrap();
        revocation::overdue(&roots, &provider, &crls, &own.cert[0], &own.cert[1..])
    };
    assert!(overdue(certs.overdue_revocation_list(&[3]).unwrap()));
    assert!(!overdue(certs.revocation_list(&[3], false).unwrap()));
    // Loaded from the overdue list, a broker still refuses what it revokes (rustls' way; a
    // warning says the CA has not renewed it).
    std::fs::write(&crl, certs.overdue_revocation_list(&[3]).unwrap()).unwrap();
    let mut config = DevCertificates::broker_config(dir.path(), 1);
    config.ca_cert = Some(ca.clone());
    config.crl = Some(crl.clone());
    let server = TlsServer::new(&config)
        .unwrap()
        .asking_for_certificates(&ca, false)
        .unwrap();
    let dialer = |id| {
        let me = TlsServer::new(&DevCertificates::broker_config(dir.path(), id)).unwrap();
        TlsDialer::for_peers(&ca, &me).unwrap()
    };
    assert_eq!(presented(&server, &dialer(3)).await, None, "revoked");
    assert_eq!(presented(&server, &dialer(2)).await, Some((false, true)));
}

#[test]
fn a_dns_name_names_a_broker_only_as_broker_name_writes_it() {
    assert_eq!(named_broker("broker-4"), Some(4));
    assert_eq!(named_broker("Broker-12"), Some(12));
    let id = u64::MAX;
    assert_eq!(named_broker(&broker_name(id).to_str()), Some(id));
    for name in [
        "broker-",
        "broker-04",
        "broker-+4",
        "broker-4a",
        "broker-4.",
        "xbroker-4",
        "broker4",
        "brokér-4",
        "broker-18446744073709551616",
        "",
        "b",
    ] {
        assert_eq!(named_broker(name), None, "{name}");
    }
}

/// The server picks AES-128-GCM, the faster suite, also for a client that puts AES-256-GCM
/// first (as OpenSSL's clients do), and takes what a client offers if it offers no AES-128.
#[tokio::test]
async fn the_server_chooses_aes_128_gcm_by_its_own_order() {
    use rustls::CipherSuite as S;
    use rustls::crypto::aws_lc_rs::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    let dir = tempfile::tempdir().unwrap();
    let certs = DevCertificates::generate(&[1], &hosts()).unwrap();
    certs.write_to(dir.path()).unwrap();
    let server = TlsServer::new(&DevCertificates::broker_config(dir.path(), 1)).unwrap();
    let addr = serve(server).await;
    let negotiated = async |suites: Vec<rustls::SupportedCipherSuite>| {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(certs.ca_pem().as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites = suites;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tls = connector.connect(name, tcp).await.unwrap();
        tls.get_ref().1.negotiated_cipher_suite().map(|s| s.suite())
    };
    let aes_256_first = vec![TLS13_AES_256_GCM_SHA384, TLS13_AES_128_GCM_SHA256];
    assert_eq!(
        negotiated(aes_256_first).await,
        Some(S::TLS13_AES_128_GCM_SHA256)
    );
    let no_aes_128 = vec![TLS13_CHACHA20_POLY1305_SHA256, TLS13_AES_256_GCM_SHA384];
    assert_eq!(
        negotiated(no_aes_128).await,
        Some(S::TLS13_AES_256_GCM_SHA384)
    );
    // The crate's own provider offers AES-128-GCM first.
    assert_eq!(
        provider().cipher_suites.first().map(|s| s.suite()),
        Some(S::TLS13_AES_128_GCM_SHA256)
    );
}
