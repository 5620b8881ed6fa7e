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

/// Writes `data` at `from`, flushed, while `to` reads it: what `to` read.
async fn send<W, R>(from: &mut W, to: &mut R, data: &[u8]) -> Vec<u8>
where
    W: tokio::io::AsyncWrite + Unpin,
    R: tokio::io::AsyncRead + Unpin,
{
    let mut got = vec![0; data.len()];
    let (sent, read) = tokio::join!(
        async {
            from.write_all(data).await?;
            from.flush().await
        },
        to.read_exact(&mut got)
    );
    sent.unwrap();
    read.unwrap();
    got
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

/// A vectored write mixes pieces sealed from where they lie (4 KiB and over) with small ones
/// copied together into records, in every suite, renewing keys every few records in TLS 1.3:
/// the reader gets the bytes in order.
#[tokio::test]
async fn a_vectored_write_of_large_and_small_pieces_arrives_whole() {
    use std::io::IoSlice;
    let certs = dev_certificates();
    // More than twice the write-ahead: writes take part of it and go on from mid-piece.
    let sizes = [
        0usize, 10, 20_000, 3, 5000, 0, 100, 4095, 4096, 16_384, 1, 70_000, 7, 16_385, 0,
    ];
    let rounds = 20;
    let data = pattern(sizes.iter().sum::<usize>() * rounds, 5);
    for (suite, version) in suites() {
        let (server, client) = configs(certs.path(), suite, version);
        let (server, client) = (Arc::new(server), Arc::new(client));
        let (mut ours, mut theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
        if version == &rustls::version::TLS13 {
            ours.set_key_limit(3);
        }
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for n in sizes.iter().cycle().take(sizes.len() * rounds) {
            pieces.push(&data[at..at + n]);
            at += n;
        }
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; at];
            theirs.read_exact(&mut got).await.unwrap();
            got
        });
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut rest = &mut slices[..];
        // Bounded: each write takes bytes (or fails the test).
        while !rest.is_empty() {
            let n = ours.write_vectored(rest).await.unwrap();
            assert!(n > 0);
            IoSlice::advance_slices(&mut rest, n);
        }
        ours.flush().await.unwrap();
        assert!(
            reader.await.unwrap() == data,
            "{suite:?}: the bytes came changed"
        );
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
    // The error stays; writes end too.
    let again = ours.read(&mut got).await.unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
    assert!(ours.write_all(b"more").await.is_err());
    drop(ours);
    // The peer was told why.
    let mut theirs = writer.await.unwrap();
    let told = theirs.read(&mut got).await.unwrap_err();
    assert!(told.to_string().contains("BadRecordMac"), "{told}");
    relay.abort();
}

/// Reads that fill the buffer double it up to its most, once a read, whether the records they
/// brought were all opened or one was left part read; an empty buffer starts at its least;
/// letting go takes a grown, empty buffer and keeps a small one.
#[tokio::test]
async fn reads_that_fill_the_read_buffer_grow_it_and_letting_go_keeps_a_small_one() {
    use super::{HEADER_LEN, MAX_RECORD, READ_BUFFER_IDLE, READ_BUFFER_MAX, READ_BUFFER_MIN};
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let (mut ours, _theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    ours.read.buf = Vec::new();
    ours.make_room(HEADER_LEN);
    assert_eq!(ours.read.buf.len(), READ_BUFFER_MIN);
    for left in [0, 100] {
        ours.read.buf = vec![0; MAX_RECORD];
        let mut sizes = Vec::new();
        // Bounded: ten reads played, each filling the buffer; `left` bytes of a record stay
        // unopened at its end. Each is made room for twice, as after a poll that found the
        // socket dry: the buffer doubles once a read.
        for _ in 0..10 {
            let read = &mut ours.read;
            (read.head, read.tail, read.filled) = (read.buf.len() - left, read.buf.len(), true);
            let need = if left == 0 { HEADER_LEN } else { MAX_RECORD };
            ours.make_room(need);
            let once = ours.read.buf.len();
            ours.make_room(need);
            assert_eq!(ours.read.buf.len(), once);
            sizes.push(once);
        }
        assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
        assert_eq!(sizes.last(), Some(&READ_BUFFER_MAX), "{sizes:?}");
    }
    let read = &mut ours.read;
    (read.head, read.tail) = (read.buf.len() - 1, read.buf.len());
    read.let_go_if_idle();
    assert_eq!(read.buf.len(), READ_BUFFER_MAX, "a record's start is kept");
    read.head = read.tail;
    read.let_go_if_idle();
    assert!(read.buf.is_empty());
    (read.buf, read.head, read.tail) = (vec![0; READ_BUFFER_IDLE], 0, 0);
    read.let_go_if_idle();
    assert_eq!(read.buf.len(), READ_BUFFER_IDLE);
}

/// Polls `ours` for a read once with `cx`: whether it found its socket dry.
fn dry(ours: &mut TlsStream, cx: &mut std::task::Context<'_>) -> bool {
    let mut byte = [0u8; 1];
    let mut into = tokio::io::ReadBuf::new(&mut byte);
    tokio::io::AsyncRead::poll_read(std::pin::Pin::new(ours), cx, &mut into).is_pending()
}

/// Whether `ours` holds a read buffer and a write buffer grown past what a quiet connection
/// keeps.
fn grown(ours: &TlsStream) -> (bool, bool) {
    (ours.read.grown(), ours.write.grown())
}

/// When the timer set for the grown buffers runs out.
fn deadline(ours: &TlsStream) -> tokio::time::Instant {
    assert!(ours.quiet.armed);
    ours.quiet.timer.as_ref().unwrap().deadline()
}

/// Buffers grown for a stream are kept where its socket runs dry; large reads or a large write
/// move the timer on and small messages do not; once it runs out, it wakes the waiting
/// read, which lets the buffers go.
#[tokio::test]
async fn grown_buffers_are_kept_while_a_stream_flows_and_let_go_once_it_is_quiet() {
    use super::BUFFERS_LINGER;
    use std::task::Poll;
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let (mut ours, mut theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    let (request, answer) = (pattern(8 << 20, 5), pattern(4 << 20, 7));
    assert!(send(&mut theirs, &mut ours, &request).await == request);
    assert!(send(&mut ours, &mut theirs, &answer).await == answer);
    assert_eq!(grown(&ours), (true, true));
    assert!(std::future::poll_fn(|cx| Poll::Ready(dry(&mut ours, cx))).await);
    assert_eq!(grown(&ours), (true, true), "kept where the socket is dry");
    let set = deadline(&ours);
    // A small message each way: the timer stays where it was.
    assert!(send(&mut theirs, &mut ours, b"ping").await == b"ping");
    assert!(send(&mut ours, &mut theirs, b"pong").await == b"pong");
    assert!(std::future::poll_fn(|cx| Poll::Ready(dry(&mut ours, cx))).await);
    assert_eq!(
        deadline(&ours),
        set,
        "small messages do not hold the buffers"
    );
    // Large reads (2 MiB streamed over loopback, read up to 256 KiB at once): moved on.
    let large = pattern(2 << 20, 9);
    assert!(send(&mut theirs, &mut ours, &large).await == large);
    assert!(std::future::poll_fn(|cx| Poll::Ready(dry(&mut ours, cx))).await);
    let moved = deadline(&ours);
    assert!(moved > set, "a large read holds the buffers");
    // A large write: moved on again.
    assert!(send(&mut ours, &mut theirs, &answer).await == answer);
    assert!(std::future::poll_fn(|cx| Poll::Ready(dry(&mut ours, cx))).await);
    assert!(deadline(&ours) > moved, "a large write holds the buffers");
    // Waits, with a deadline, for the timer to wake the read and the buffers to go.
    let let_go = std::future::poll_fn(|cx| {
        assert!(dry(&mut ours, cx), "nothing was sent");
        if grown(&ours) == (false, false) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let waited = tokio::time::timeout(BUFFERS_LINGER * 5, let_go).await;
    assert!(waited.is_ok(), "let go once quiet");
    assert!(!ours.quiet.armed);
}

/// A write that grows the write buffer while no timer is set wakes the reader that found the
/// socket dry, which sets one.
#[tokio::test]
async fn a_write_that_grows_the_buffer_wakes_the_dry_reader_to_set_the_timer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    struct Woken(AtomicBool);
    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let (mut ours, mut theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&woken));
    assert!(dry(&mut ours, &mut Context::from_waker(&waker)));
    assert_eq!(grown(&ours), (false, false));
    assert!(!ours.quiet.armed);
    let answer = pattern(4 << 20, 7);
    assert!(send(&mut ours, &mut theirs, &answer).await == answer);
    assert_eq!(grown(&ours), (false, true));
    assert!(woken.0.load(Ordering::SeqCst), "the reader is woken");
    assert!(std::future::poll_fn(|cx| Poll::Ready(dry(&mut ours, cx))).await);
    assert!(ours.quiet.armed, "and sets the timer");
}

#[tokio::test]
async fn a_socket_taking_less_than_it_is_given_holds_the_writer_to_its_write_ahead() {
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let data = pattern(4 << 20, 3);
    // One piece, and pieces of 5,000 bytes (each sealed where it lies, in a record of its
    // own) behind headers of 50 (each a short record): a record for every 2.5 KiB.
    let whole = [std::io::IoSlice::new(&data)];
    let mut mixed = Vec::new();
    for chunk in data.chunks(5050) {
        let (header, batch) = chunk.split_at(chunk.len().min(50));
        mixed.extend([std::io::IoSlice::new(header), std::io::IoSlice::new(batch)]);
    }
    for (pieces, left) in [(&whole[..], 1), (&mixed[..], 1), (&whole[..], 10_000)] {
        let (mut ours, _theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
        let (mut most, mut memory) = (0, 0);
        // Bounded: 64 rounds, each sealing what the write-ahead lets in, after which the
        // socket (played here) takes all but the last `left` bytes: the buffer never empties
        // at once.
        for _ in 0..64 {
            let taken = ours.seal_from(pieces, data.len()).unwrap();
            assert!(taken > 0);
            ours.write.sent = ours.write.buf.len() - left;
            most = most.max(ours.write.buf.len());
            memory = memory.max(ours.write.buf.memory());
        }
        // Not yet taken by the socket at most `WRITE_AHEAD`, as much taken, and a record.
        let bound = 2 * super::WRITE_AHEAD + super::MAX_RECORD;
        assert!(most <= bound, "held {most} bytes");
        // Memory reserved for what may come, never grown by doubling past that.
        assert!(
            memory <= bound + super::MAX_RECORD,
            "held {memory} bytes of memory"
        );
    }
}

#[tokio::test]
async fn data_and_close_notify_right_behind_the_clients_finished_are_read() {
    use std::io::{Read, Write};
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let (s, c) = sockets().await;
    let mut tcp = c.into_std().unwrap();
    tcp.set_nonblocking(false).unwrap();
    // A client that holds its Finished back and sends it, its data and its close_notify in one
    // write.
    let client_side = std::thread::spawn(move || {
        let mut conn = rustls::ClientConnection::new(client, name()).unwrap();
        // Bounded: each turn reads the server's flight further, within the test's life.
        while conn.is_handshaking() {
            while conn.wants_write() {
                conn.write_tls(&mut tcp).unwrap();
            }
            conn.read_tls(&mut tcp).unwrap();
            conn.process_new_packets().unwrap();
        }
        conn.writer().write_all(b"hello").unwrap();
        conn.send_close_notify();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        tcp.write_all(&out).unwrap();
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest);
    });
    let mut ours = TlsStream::accept(s, server).await.unwrap();
    let mut got = Vec::new();
    ours.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hello");
    ours.shutdown().await.unwrap();
    drop(ours);
    client_side.join().unwrap();
}

#[tokio::test]
async fn small_reads_get_every_byte_and_a_socket_ending_between_records_ends_the_stream() {
    let certs = dev_certificates();
    let (server, client) = aes_128_configs(certs.path());
    let (mut ours, mut theirs) = ours_serving_rustls(sockets().await, &server, &client).await;
    let sent = pattern(100_000, 5);
    theirs.write_all(&sent).await.unwrap();
    theirs.flush().await.unwrap();
    // The socket's sending side ends without close_notify, between two records (its socket
    // stays open: closed with the server's session tickets unread, it would be reset).
    let socket = theirs.into_inner().0.into_std().unwrap();
    socket.shutdown(std::net::Shutdown::Write).unwrap();
    let (mut got, mut piece) = (Vec::new(), [0u8; 777]);
    // Bounded: each read returns bytes of the 100,000 sent, or the end.
    loop {
        let n = ours.read(&mut piece).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&piece[..n]);
    }
    assert!(got == sent);
    drop(socket);
}
