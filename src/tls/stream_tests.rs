//! The stream against rustls' own buffered connection (tokio-rustls) and against itself, over
//! loopback TCP: every record format, large and small writes both ways, key updates from either
//! side, session tickets, close_notify, and records damaged on the way.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::TlsStream;
use crate::tls::DevCertificates;

/// The dev CA's certificates for broker 1, written to a directory of their own.
fn dev_certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    DevCertificates::generate(&[1], &[])
        .unwrap()
        .write_to(dir.path())
        .unwrap();
    dir
}

/// Server and client configs for broker 1 of the dev CA in `dir`, limited to `suite` and
/// `version`.
fn configs(
    dir: &std::path::Path,
    suite: rustls::SupportedCipherSuite,
    version: &'static rustls::SupportedProtocolVersion,
) -> (rustls::ServerConfig, rustls::ClientConfig) {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![suite];
    let provider = Arc::new(provider);
    let files = DevCertificates::broker_config(dir, 1);
    let chain = CertificateDer::pem_file_iter(&files.cert_chain)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&files.private_key).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    server.enable_secret_extraction = true;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_secret_extraction = true;
    (server, client)
}

fn suites() -> Vec<(
    rustls::SupportedCipherSuite,
    &'static rustls::SupportedProtocolVersion,
)> {
    use rustls::crypto::aws_lc_rs::cipher_suite as s;
    vec![
        (s::TLS13_AES_128_GCM_SHA256, &rustls::version::TLS13),
        (s::TLS13_AES_256_GCM_SHA384, &rustls::version::TLS13),
        (s::TLS13_CHACHA20_POLY1305_SHA256, &rustls::version::TLS13),
        (
            s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            &rustls::version::TLS12,
        ),
        (
            s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            &rustls::version::TLS12,
        ),
    ]
}

fn name() -> rustls_pki_types::ServerName<'static> {
    rustls_pki_types::ServerName::try_from("broker-1").unwrap()
}

/// A connected pair of sockets over loopback.
async fn sockets() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let (dialed, accepted) = tokio::join!(TcpStream::connect(at), listener.accept());
    (accepted.unwrap().0, dialed.unwrap())
}

/// TLS 1.3 with AES-128-GCM, the suite the brokers choose: server and client configs.
fn aes_128_configs(
    dir: &std::path::Path,
) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    use rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let (server, client) = configs(dir, TLS13_AES_128_GCM_SHA256, &rustls::version::TLS13);
    (Arc::new(server), Arc::new(client))
}

/// Ours serving rustls' client over `s` and `c`.
async fn ours_serving_rustls(
    (s, c): (TcpStream, TcpStream),
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
) -> (TlsStream, tokio_rustls::client::TlsStream<TcpStream>) {
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(client));
    let (ours, theirs) = tokio::join!(
        TlsStream::accept(s, Arc::clone(server)),
        connector.connect(name(), c)
    );
    (ours.unwrap(), theirs.unwrap())
}

/// `len` bytes of a pattern that shows a byte out of place.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Writes `data` in pieces of varying sizes, flushing after each.
async fn write_in_pieces<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, data: &[u8]) {
    let sizes = [1usize, 100, 16384, 16385, 70_000, 3, 1 << 20];
    let (mut at, mut i) = (0, 0);
    while at < data.len() {
        let n = sizes[i % sizes.len()].min(data.len() - at);
        w.write_all(&data[at..at + n]).await.unwrap();
        w.flush().await.unwrap();
        (at, i) = (at + n, i + 1);
    }
}

/// Sends `data` both ways at once over `a` and `b` and checks it came whole.
async fn exchange<A, B>(a: A, b: B, len: usize)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (from_a, from_b) = (pattern(len, 1), pattern(len, 2));
    let ((mut ar, mut aw), (mut br, mut bw)) = (tokio::io::split(a), tokio::io::split(b));
    let (ea, eb) = (from_a.clone(), from_b.clone());
    let a_writes = tokio::spawn(async move {
        write_in_pieces(&mut aw, &ea).await;
        aw
    });
    let b_writes = tokio::spawn(async move {
        write_in_pieces(&mut bw, &eb).await;
        bw
    });
    let a_reads = tokio::spawn(async move {
        let mut got = vec![0u8; len];
        ar.read_exact(&mut got).await.unwrap();
        (got, ar)
    });
    let mut got = vec![0u8; len];
    br.read_exact(&mut got).await.unwrap();
    assert!(got == from_a, "what the first end sent came changed");
    let (got_a, mut ar) = a_reads.await.unwrap();
    assert!(got_a == from_b, "what the second end sent came changed");
    // close_notify ends the other's reading side cleanly.
    let mut aw = a_writes.await.unwrap();
    aw.shutdown().await.unwrap();
    let mut rest = Vec::new();
    assert_eq!(br.read_to_end(&mut rest).await.unwrap(), 0);
    let mut bw = b_writes.await.unwrap();
    bw.shutdown().await.unwrap();
    assert_eq!(ar.read_to_end(&mut rest).await.unwrap(), 0);
}

#[tokio::test]
async fn the_stream_talks_with_rustls_and_itself_in_every_suite() {
    let certs = dev_certificates();
    for (suite, version) in suites() {
        let (server, client) = configs(certs.path(), suite, version);
        let (server, client) = (Arc::new(server), Arc::new(client));
        let (ours, theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
        exchange(ours, theirs, 3 << 20).await;
        // rustls' server, ours dialing.
        let (s, c) = sockets().await;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&server));
        let (theirs, ours) = tokio::join!(
            acceptor.accept(s),
            TlsStream::connect(c, Arc::clone(&client), name())
        );
        exchange(ours.unwrap(), theirs.unwrap(), 3 << 20).await;
        // Ours on both ends.
        let (s, c) = sockets().await;
        let (a, b) = tokio::join!(
            TlsStream::accept(s, Arc::clone(&server)),
            TlsStream::connect(c, Arc::clone(&client), name())
        );
        exchange(a.unwrap(), b.unwrap(), 3 << 20).await;
    }
}

#[tokio::test]
async fn keys_renewed_by_either_side_keep_the_bytes_flowing() {
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    // Ours renews its sending keys every 3 records; rustls' client follows.
    let (mut ours, theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    ours.set_key_limit(3);
    exchange(ours, theirs, 1 << 20).await;
    // rustls' side asks for new keys both ways, between writes; ours follows and answers.
    let (mut ours, mut theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    for round in 0..5u8 {
        theirs.get_mut().1.refresh_traffic_keys().unwrap();
        let sent = pattern(40_000, round);
        theirs.write_all(&sent).await.unwrap();
        theirs.flush().await.unwrap();
        let mut got = vec![0u8; sent.len()];
        ours.read_exact(&mut got).await.unwrap();
        assert!(got == sent);
        ours.write_all(&sent).await.unwrap();
        ours.flush().await.unwrap();
        theirs.read_exact(&mut got).await.unwrap();
        assert!(got == sent);
    }
}

#[tokio::test]
async fn a_damaged_record_ends_the_connection_with_an_error() {
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    // rustls' client, through a relay that flips one byte of the first 64 KiB it relays after
    // the handshake's, towards ours.
    let (s, relay_in) = sockets().await;
    let (relay_out, c) = sockets().await;
    let relay = tokio::spawn(async move {
        let (mut from, mut to) = (relay_out, relay_in);
        let (mut buf, mut back) = (vec![0u8; 1 << 16], vec![0u8; 4096]);
        let mut seen = 0usize;
        // Bounded: ends when either side closes.
        loop {
            tokio::select! {
                n = from.read(&mut buf) => {
                    let n = n.unwrap_or(0);
                    if n == 0 { break; }
                    if seen < 5000 && seen + n >= 5000 { buf[5000 - seen] ^= 1; }
                    seen += n;
                    if to.write_all(&buf[..n]).await.is_err() { break; }
                }
                n = to.read(&mut back) => {
                    let n = n.unwrap_or(0);
                    if n == 0 { break; }
                    if from.write_all(&back[..n]).await.is_err() { break; }
                }
            }
        }
    });
    let (mut ours, mut theirs) = ours_serving_rustls((s, c), &server, &client).await;
    let writer = tokio::spawn(async move {
        let _ = theirs.write_all(&pattern(1 << 16, 0)).await;
        let _ = theirs.flush().await;
        theirs
    });
    let mut got = vec![0u8; 1 << 16];
    let err = ours.read_exact(&mut got).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    drop(ours);
    drop(writer.await);
    relay.abort();
}
