//! The security targets, measured in one run against a broker in this process (clients run
//! in a child process, this program run again, so that the broker's CPU time and memory are
//! its own):
//!
//! 1. SCRAM logins: 32 clients at once, each connecting to a `SASL_PLAINTEXT` Kafka listener,
//!    logging in with SCRAM-SHA-512 (SaslHandshake and two SaslAuthenticate) and closing, for
//!    5 s: logins/s, and logins per second of the broker's own CPU time (a core's worth).
//!    The clients derive the salted password once (as a client that logs in again would keep
//!    it): what is measured is the broker's side.
//! 2. A reconnect storm: 4,096 clients connecting at once to an `SSL` Kafka listener, each a
//!    TLS handshake (ECDSA P-256, TLS 1.3) and one ApiVersions: the time until every one is
//!    answered.
//! 3. Memory per TLS connection: the broker's resident memory with those 4,096 connections
//!    open and idle, less its resident memory before they came, per connection.
//!
//! 4. TLS against plaintext on the native door: two three-broker clusters in this process,
//!    one whose brokers serve TLS with their CA (clients over TLS, replication over mutual TLS)
//!    and one plaintext; in three rounds on each in turn, a `Producer` writing 1 KiB records
//!    (acks: the leader's commit, so every record is replicated first) and a `Consumer`
//!    reading them back, five times over (the clients on a runtime of their own): records/s,
//!    CPU a record and cores busy, and the TLS/plaintext ratios of the rounds together
//!    (targets: produce, replication included, ≥ 0.85×; fetch ≥ 0.80×). Then the fetch's
//!    ceiling on this machine: plaintext's CPU a record plus the floor's encryption and
//!    decryption of a record, at the cores plaintext kept busy and at both.
//!
//!    Then the stream under the fetch on its own: 256 MiB in 4 MiB answers one way on
//!    loopback through replog's TLS stream and through TCP, MB/s and CPU a KiB (`-- stream`
//!    alone).
//!
//!    Under them, the floor: 256 MiB sealed and opened in 16 KiB records in memory, as the
//!    connections do past the handshake (one core, no socket), with AES-128-GCM (the suite the
//!    brokers choose, and replog's clients offer first) and with AES-256-GCM (rustls' and
//!    OpenSSL's first choice; `-- floor` alone).
//!
//! Run: `cargo run --release --example security_targets` (about a minute). Parts named after
//! `--` run alone: `cargo run --release --example security_targets -- 4`. With `own-cores`
//! among them (`-- 4 own-cores`), the brokers run on one CPU and the clients (the child
//! processes, part 4's runtime) on another, as clients on other machines would.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use replog::{KafkaSecurityProtocol, Node, NodeConfig, ScramCredential, ScramMechanism};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/process.rs"]
mod process;
use process::{client_command, cpu_seconds, pin_client_thread, split_cores, status_kib};

const USER: &str = "bench";
const PASSWORD: &str = "bench-secret";
const LOGIN_CLIENTS: usize = 32;
const LOGIN_SECONDS: u64 = 5;
const STORM: usize = 4096;
/// Set in the child run: which part it plays, against which address.
const CHILD: &str = "REPLOG_SECURITY_TARGETS_CHILD";

/// Raises this process's soft descriptor limit to its hard one (children inherit it).
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

/// A request frame: Kafka's length, header and body.
fn frame(api: ApiKey, version: i16, correlation: i32, body: &impl Encodable) -> Vec<u8> {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str("security-targets"));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, api.request_header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("body");
    let len = i32::try_from(buf.len() - 4).expect("small");
    // Kafka's framing is big-endian: `BufMut` writes it.
    (&mut buf[..4]).put_i32(len);
    buf.to_vec()
}

/// Sends a request and reads its answer's body (past the response header's correlation id,
/// and its tagged fields at flexible versions).
async fn call<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    api: ApiKey,
    version: i16,
    body: &impl Encodable,
) -> std::io::Result<Bytes> {
    s.write_all(&frame(api, version, 1, body)).await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = (&len[..]).get_i32();
    let mut answer = vec![0u8; usize::try_from(len).unwrap_or(0)];
    s.read_exact(&mut answer).await?;
    let mut answer = Bytes::from(answer);
    let header_version = api.response_header_version(version);
    kafka_protocol::messages::ResponseHeader::decode(&mut answer, header_version)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(answer)
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha512>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// One SCRAM-SHA-512 login on a new connection to `at`, the salted password known: whether
/// the broker accepted it and proved it knows the user's keys.
async fn login(at: SocketAddr, salted: &[u8], n: u64) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(at).await?;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512"));
    call(&mut s, ApiKey::SaslHandshake, 1, &handshake).await?;
    let bare = format!("n={USER},r=client{n}");
    let first =
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(format!("n,,{bare}")));
    let mut answer = call(&mut s, ApiKey::SaslAuthenticate, 2, &first).await?;
    let server_first = SaslAuthenticateResponse::decode(&mut answer, 2)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let server_first = String::from_utf8_lossy(&server_first.auth_bytes).into_owned();
    let nonce = server_first
        .split(',')
        .find_map(|a| a.strip_prefix("r="))
        .unwrap_or_default();
    let without_proof = format!("c=biws,r={nonce}");
    let auth = format!("{bare},{server_first},{without_proof}");
    let client_key = hmac(salted, b"Client Key");
    let stored_key = Sha512::digest(&client_key);
    let signature = hmac(&stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let last = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(format!(
        "{without_proof},p={}",
        BASE64.encode(proof)
    )));
    let mut answer = call(&mut s, ApiKey::SaslAuthenticate, 2, &last).await?;
    let server_final = SaslAuthenticateResponse::decode(&mut answer, 2)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let expected = hmac(&hmac(salted, b"Server Key"), auth.as_bytes());
    Ok(server_final.error_code == 0
        && server_final.auth_bytes == format!("v={}", BASE64.encode(expected)))
}

/// The child's part 1: logins from `LOGIN_CLIENTS` tasks for `LOGIN_SECONDS`; prints how many
/// went through and how many failed.
async fn logins(at: SocketAddr, salt: &[u8]) {
    let mut salted = vec![0u8; 64];
    pbkdf2::pbkdf2::<Hmac<Sha512>>(PASSWORD.as_bytes(), salt, 4096, &mut salted).expect("len");
    let until = Instant::now() + Duration::from_secs(LOGIN_SECONDS);
    let tasks: Vec<_> = (0..LOGIN_CLIENTS)
        .map(|t| {
            let salted = salted.clone();
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                let mut n = t as u64 * 1_000_000;
                // Bounded by the deadline.
                while Instant::now() < until {
                    n += 1;
                    match login(at, &salted, n).await {
                        Ok(true) => ok += 1,
                        _ => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (o, f) = t.await.unwrap_or((0, 0));
        ok += o;
        failed += f;
    }
    println!("logins {ok} failed {failed}");
}

/// The child's parts 2 and 3: `STORM` TLS clients at once, each a handshake and one
/// ApiVersions; prints the time until all are answered, then holds them open until its
/// standard input closes.
async fn storm(at: SocketAddr, ca: &std::path::Path) -> std::io::Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in
        rustls_pki_types::CertificateDer::pem_file_iter(ca).map_err(std::io::Error::other)?
    {
        roots
            .add(cert.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let started = Instant::now();
    let tasks: Vec<_> = (0..STORM)
        .map(|_| {
            let connector = connector.clone();
            tokio::spawn(async move {
                let tcp = TcpStream::connect(at).await?;
                let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("an IP");
                let mut tls = connector.connect(name, tcp).await?;
                call(
                    &mut tls,
                    ApiKey::ApiVersions,
                    3,
                    &ApiVersionsRequest::default(),
                )
                .await?;
                Ok::<_, std::io::Error>(tls)
            })
        })
        .collect();
    let mut open = Vec::with_capacity(STORM);
    let mut failed = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(tls)) => open.push(tls),
            _ => failed += 1,
        }
    }
    println!(
        "storm {} ms answered {} failed {failed}",
        started.elapsed().as_millis(),
        open.len()
    );
    println!("holding");
    // Held open until the parent has measured (it closes this process's standard input).
    let _ = tokio::task::spawn_blocking(|| {
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest)
    })
    .await;
    drop(open);
    Ok(())
}

/// A broker on free ports in `dir`, its Kafka listener speaking `protocol`.
async fn broker(
    dir: &std::path::Path,
    protocol: KafkaSecurityProtocol,
    certs: &std::path::Path,
) -> replog::Result<Node> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let kafka = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut config = NodeConfig::new(
        1,
        listener.local_addr()?,
        Default::default(),
        dir.join("data"),
    );
    config.kafka_listen = Some(kafka);
    config.kafka_security_protocol = protocol;
    config.connections_max = 2 * STORM;
    config.tls = Some(replog::DevCertificates::broker_config(certs, 1));
    let credential = ScramCredential::new(ScramMechanism::Sha512, PASSWORD, 4096)
        .map_err(|e| replog::Error::Tls(replog::TlsError::Setup(e.to_string())))?;
    config.bootstrap_users = vec![(USER.to_string(), credential)];
    let node = Node::start_on(config, listener).await?;
    node.wait_ready(Duration::from_secs(30)).await?;
    Ok(node)
}

/// Runs this program again as the clients of part `part` against `at`; its output, and its
/// standard input (closing it ends the child's wait).
fn child(part: &str, at: SocketAddr, extra: &str) -> std::io::Result<std::process::Child> {
    client_command(&std::env::current_exe()?)
        .env(CHILD, format!("{part} {at} {extra}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
}

/// Records of 1 KiB each round of part 4 writes and reads.
const NATIVE_RECORDS: usize = 100_000;

/// Times each round of part 4 reads its records from the beginning: one read of 100 MiB
/// lasts a tenth of a second, too short to stand out of this machine's noise.
const FETCH_PASSES: usize = 5;

/// One round of part 4 on `cluster` ([`clients_round`]), its clients on a runtime of their
/// own, whose threads the OS schedules beside the brokers' as it would another process's (in
/// the brokers' runtime, a client's task and a broker's that wake each other would take turns
/// on one worker thread).
async fn native_round(
    cluster: &replog::LocalCluster,
    tls: Option<&std::path::Path>,
    topic: &str,
) -> replog::Result<(Rate, Rate)> {
    let (addrs, tls, topic) = (
        cluster.addrs(),
        tls.map(std::path::Path::to_path_buf),
        topic.to_string(),
    );
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        pin_client_thread();
        let round = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("client")
            .on_thread_start(pin_client_thread)
            .enable_all()
            .build()
            .map_err(replog::Error::from)
            .and_then(|runtime| runtime.block_on(clients_round(&addrs, tls.as_deref(), &topic)));
        let _ = tx.send(round);
    });
    rx.await
        .map_err(|e| replog::Error::from(std::io::Error::other(e)))?
}

/// A round: a `Producer` writing [`NATIVE_RECORDS`] records of 1 KiB to `topic`, then
/// [`FETCH_PASSES`] `Consumer`s reading them in turn: the rate and CPU of each side.
async fn clients_round(
    addrs: &[SocketAddr],
    tls: Option<&std::path::Path>,
    topic: &str,
) -> replog::Result<(Rate, Rate)> {
    use std::sync::Arc;
    let mut config = replog::ClientConfig::default();
    config.tls_ca = tls.map(|certs| certs.join("ca.pem"));
    let client = Arc::new(replog::Client::connect(addrs, config).await?);
    let producer = replog::Producer::new(Arc::clone(&client), replog::ProducerConfig::default());
    let value = "x".repeat(1023);
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let sent: Vec<_> = (0..NATIVE_RECORDS)
        .map(|_| producer.send(topic, replog::Record::new(value.clone())))
        .collect();
    for s in sent {
        s.await?;
    }
    let produced = Rate::of(NATIVE_RECORDS, started, cpu);
    producer.close().await;
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let mut n = 0usize;
    for _ in 0..FETCH_PASSES {
        let mut config = replog::ConsumerConfig::default();
        config.max_bytes = 4 << 20;
        let mut consumer = replog::Consumer::new(Arc::clone(&client), config);
        consumer
            .assign(topic, None, replog::StartAt::Beginning)
            .await?;
        let mut read = 0usize;
        // Bounded: each poll returns records or fails within its 5 s.
        while read < NATIVE_RECORDS {
            read += consumer.poll(Duration::from_secs(5)).await?.len();
        }
        n += read;
    }
    Ok((produced, Rate::of(n, started, cpu)))
}

/// Records moved, the time they took and the CPU this process (brokers and clients) spent.
#[derive(Clone, Copy, Default)]
struct Rate {
    records: f64,
    seconds: f64,
    cpu_seconds: f64,
}

impl Rate {
    /// `records` moved since `started`, when this process had spent `cpu` seconds of CPU.
    fn of(records: usize, started: Instant, cpu: f64) -> Rate {
        Rate {
            records: records as f64,
            seconds: started.elapsed().as_secs_f64(),
            cpu_seconds: cpu_seconds() - cpu,
        }
    }

    fn per_second(&self) -> f64 {
        self.records / self.seconds
    }

    /// CPU per record, in µs.
    fn cpu_us(&self) -> f64 {
        self.cpu_seconds * 1e6 / self.records
    }

    /// Cores kept busy.
    fn cores(&self) -> f64 {
        self.cpu_seconds / self.seconds
    }

    fn add(self, other: Rate) -> Rate {
        Rate {
            records: self.records + other.records,
            seconds: self.seconds + other.seconds,
            cpu_seconds: self.cpu_seconds + other.cpu_seconds,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{:.0} records/s, {:.2} µs CPU a record, {:.2} cores",
            self.per_second(),
            self.cpu_us(),
            self.cores()
        )
    }
}

/// The floor under part 4's ratios: MB/s of 256 MiB sealed and opened again with `algorithm`
/// in records of 16 KiB (TLS' largest), in place, as the brokers' and clients' connections
/// do past the handshake: the cipher's work alone, on one core.
fn suite_rate(algorithm: &'static aws_lc_rs::aead::Algorithm) -> std::io::Result<f64> {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
    let key = vec![7u8; algorithm.key_len()];
    let key = || -> std::io::Result<LessSafeKey> {
        Ok(LessSafeKey::new(
            UnboundKey::new(algorithm, &key).map_err(std::io::Error::other)?,
        ))
    };
    let (sealer, opener) = (key()?, key()?);
    let nonce = |seq: u64| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&seq.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    };
    let mut record = vec![7u8; 16 << 10];
    let total = 256usize << 20;
    let started = Instant::now();
    for seq in 0..(total / record.len()) as u64 {
        sealer
            .seal_in_place_append_tag(nonce(seq), Aad::from([23u8, 3, 3]), &mut record)
            .map_err(std::io::Error::other)?;
        let opened = opener
            .open_in_place(nonce(seq), Aad::from([23u8, 3, 3]), &mut record)
            .map_err(std::io::Error::other)?
            .len();
        record.truncate(opened);
    }
    Ok(total as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// Part 4.
async fn tls_against_plaintext(
    dir: &std::path::Path,
    certs: &std::path::Path,
) -> replog::Result<()> {
    let topics: Vec<(String, u32)> = (0..3).map(|r| (format!("round-{r}"), 1)).collect();
    let start = |sub: &str, tls: bool| {
        let topics = topics.clone();
        let certs = certs.to_path_buf();
        let at = dir.join(sub);
        async move {
            replog::LocalCluster::start(3, &at, move |c| {
                c.topics = topics.clone();
                if tls {
                    let mut config = replog::DevCertificates::broker_config(&certs, c.id);
                    config.ca_cert = Some(certs.join("ca.pem"));
                    c.tls = Some(config);
                }
            })
            .await
        }
    };
    let secure = start("tls", true).await?;
    let plain = start("plain", false).await?;
    for (cluster, _) in [(&secure, 0), (&plain, 1)] {
        for (t, _) in &topics {
            cluster
                .wait_for_leaders(t, 1, Duration::from_secs(30))
                .await?;
        }
    }
    let (mut tls_sums, mut plain_sums) = ((0.0, 0.0), (0.0, 0.0));
    let (mut tls_fetch, mut plain_fetch) = (Rate::default(), Rate::default());
    let (mut tls_produce, mut plain_produce) = (Rate::default(), Rate::default());
    for (t, _) in &topics {
        let (p, f) = native_round(&secure, Some(certs), t).await?;
        let (pp, pf) = native_round(&plain, None, t).await?;
        println!(
            "   {t}: produce over TLS {}; plaintext {}\n   {t}: fetch over TLS {}; plaintext {}",
            p.describe(),
            pp.describe(),
            f.describe(),
            pf.describe()
        );
        tls_sums = (tls_sums.0 + p.per_second(), tls_sums.1 + f.per_second());
        plain_sums = (
            plain_sums.0 + pp.per_second(),
            plain_sums.1 + pf.per_second(),
        );
        (tls_produce, plain_produce) = (tls_produce.add(p), plain_produce.add(pp));
        (tls_fetch, plain_fetch) = (tls_fetch.add(f), plain_fetch.add(pf));
    }
    println!(
        "4. native door, TLS / plaintext over three rounds: produce (replication over mutual TLS \
         included) {:.2}× (target ≥ 0.85), fetch {:.2}× (target ≥ 0.80)",
        tls_sums.0 / plain_sums.0,
        tls_sums.1 / plain_sums.1
    );
    println!(
        "   CPU a record, brokers and clients together: produce {:.2} µs over TLS, {:.2} µs \
         plaintext; fetch {:.2} µs over TLS, {:.2} µs plaintext",
        tls_produce.cpu_us(),
        plain_produce.cpu_us(),
        tls_fetch.cpu_us(),
        plain_fetch.cpu_us()
    );
    secure.shutdown().await?;
    plain.shutdown().await?;
    // What TLS cannot avoid: each fetched record encrypted once and decrypted once, at the
    // floor's rate (a record of 1 KiB and its share of the batch's framing).
    let aes128 = suite_floor()?;
    let crypto_us = 1.05e3 / aes128;
    let same = plain_fetch.cpu_us() / (plain_fetch.cpu_us() + crypto_us);
    let both = same * 2.0 / plain_fetch.cores();
    println!(
        "   the fetch's ceiling on this machine, were TLS to add nothing but the floor's \
         {crypto_us:.2} µs a record of encryption and decryption: {same:.2}× plaintext at \
         plaintext's {:.2} cores busy, {both:.2}× with both cores busy",
        plain_fetch.cores()
    );
    stream_floor(certs).await
}

/// Under part 4's fetch, the stream alone: 256 MiB in 4 MiB frames one way on loopback
/// through replog's own TLS stream (as a broker's answer and a client's read cross it) and
/// through TCP, nothing else running; each three times, alternated, the sums.
async fn stream_floor(certs: &std::path::Path) -> replog::Result<()> {
    const FRAMES: usize = 64;
    const FRAME_BYTES: usize = 4 << 20;
    let (mut tls, mut tcp) = (Rate::default(), Rate::default());
    for _ in 0..3 {
        for (sum, certs) in [(&mut tls, Some(certs)), (&mut tcp, None)] {
            let (started, cpu) = (Instant::now(), cpu_seconds());
            replog::__bench::tls_stream_floor(FRAMES, FRAME_BYTES, certs).await?;
            // Counted in KiB, as the fetch counts its records of 1 KiB.
            *sum = sum.add(Rate::of(FRAMES * (FRAME_BYTES >> 10), started, cpu));
        }
    }
    println!(
        "   the stream alone, 256 MiB in 4 MiB answers on loopback, three times each: TLS \
         {:.0} MB/s, {:.2} µs CPU a KiB; TCP {:.0} MB/s, {:.2} µs CPU a KiB: {:.2}× \
         (TLS adds {:.2} µs a KiB)",
        tls.per_second() * 1.024e-3,
        tls.cpu_us(),
        tcp.per_second() * 1.024e-3,
        tcp.cpu_us(),
        tls.per_second() / tcp.per_second(),
        tls.cpu_us() - tcp.cpu_us()
    );
    Ok(())
}

/// Part 4's floor (`-- floor` alone): the AES-128-GCM figure, MB/s.
fn suite_floor() -> std::io::Result<f64> {
    use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM};
    // Each twice, alternated, the better of each taken: the first pass also pays for
    // warming up (buffers growing, pages faulted in).
    let (mut aes128, mut aes256) = (0.0f64, 0.0f64);
    for _ in 0..2 {
        aes256 = aes256.max(suite_rate(&AES_256_GCM)?);
        aes128 = aes128.max(suite_rate(&AES_128_GCM)?);
    }
    println!(
        "   the floor, one core in memory, each byte sealed and opened: AES-128-GCM (the suite \
         used) {aes128:.0} MB/s, AES-256-GCM {aes256:.0} MB/s"
    );
    Ok(aes128)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(role) = std::env::var(CHILD) {
        let mut words = role.split(' ');
        let (part, at, extra) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or("").parse::<SocketAddr>()?,
            words.next().unwrap_or(""),
        );
        match part {
            "logins" => logins(at, &BASE64.decode(extra)?).await,
            _ => storm(at, std::path::Path::new(extra)).await?,
        }
        return Ok(());
    }
    raise_descriptor_limit();
    let (modes, parts): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a == "own-cores");
    if !modes.is_empty() {
        match split_cores()? {
            Some((broker, clients)) => {
                println!("own cores: the brokers run on CPU {broker}, the clients on CPU {clients}")
            }
            None => {
                println!("own cores: needs two CPUs and taskset; clients share the brokers' CPUs")
            }
        }
    }
    let runs = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    replog::DevCertificates::generate(&[1, 2, 3], &["127.0.0.1".to_string()])?.write_to(&certs)?;
    if runs("1") {
        scram_logins(dir.path(), &certs).await?;
    }
    if runs("2") || runs("3") {
        reconnect_storm(dir.path(), &certs).await?;
    }
    if runs("4") {
        tls_against_plaintext(dir.path(), &certs).await?;
    }
    if runs("floor") && !runs("4") {
        suite_floor()?;
    }
    if runs("stream") && !runs("4") {
        stream_floor(&certs).await?;
    }
    Ok(())
}

/// Part 1.
async fn scram_logins(
    dir: &std::path::Path,
    certs: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let node = broker(
        &dir.join("sasl"),
        KafkaSecurityProtocol::SaslPlaintext,
        certs,
    )
    .await?;
    let at = node.kafka_addr().ok_or("no Kafka listener")?;
    // The user's salt, as the broker answers it (the same at every login), once the bootstrap
    // user is in the metadata log (until then an unknown user's salt is answered, and the
    // login fails): asked again until a login with it goes through.
    let deadline = Instant::now() + Duration::from_secs(30);
    let salt = loop {
        let salt = salt_of(at).await?;
        let mut salted = vec![0u8; 64];
        pbkdf2::pbkdf2::<Hmac<Sha512>>(
            PASSWORD.as_bytes(),
            &BASE64.decode(&salt)?,
            4096,
            &mut salted,
        )?;
        if login(at, &salted, 0).await.unwrap_or(false) {
            break salt;
        }
        if Instant::now() >= deadline {
            return Err("the bench user never logged in".into());
        }
        // The pause between two polls of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let cpu = cpu_seconds();
    let started = Instant::now();
    let out = child("logins", at, &salt)?.wait_with_output()?;
    let (cpu, wall) = (cpu_seconds() - cpu, started.elapsed().as_secs_f64());
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |key: &str| -> f64 {
        text.split_whitespace()
            .skip_while(|w| *w != key)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let (ok, failed) = (count("logins"), count("failed"));
    println!(
        "1. SCRAM-SHA-512 logins, {LOGIN_CLIENTS} clients for {LOGIN_SECONDS} s: {ok:.0} ({failed:.0} failed), \
         {:.0}/s; the broker's CPU {cpu:.2} s: {:.0} logins per CPU-second (target ≥ 5,000)",
        ok / wall,
        ok / cpu.max(0.01)
    );
    node.shutdown().await?;
    Ok(())
}

/// The salt the broker answers for the bench user, base64 as it comes.
async fn salt_of(at: SocketAddr) -> Result<String, Box<dyn std::error::Error>> {
    let mut s = TcpStream::connect(at).await?;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512"));
    call(&mut s, ApiKey::SaslHandshake, 1, &handshake).await?;
    let first = SaslAuthenticateRequest::default()
        .with_auth_bytes(Bytes::from(format!("n,,n={USER},r=salt")));
    let mut answer = call(&mut s, ApiKey::SaslAuthenticate, 2, &first).await?;
    let r = SaslAuthenticateResponse::decode(&mut answer, 2)?;
    let text = String::from_utf8_lossy(&r.auth_bytes).into_owned();
    Ok(text
        .split(',')
        .find_map(|a| a.strip_prefix("s="))
        .unwrap_or_default()
        .to_string())
}

/// Parts 2 and 3: a reconnect storm over TLS, and the memory its connections hold.
async fn reconnect_storm(
    dir: &std::path::Path,
    certs: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let node = broker(&dir.join("ssl"), KafkaSecurityProtocol::Ssl, certs).await?;
    let at = node.kafka_addr().ok_or("no Kafka listener")?;
    let before = status_kib("VmRSS");
    let mut clients = child("storm", at, &certs.join("ca.pem").display().to_string())?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        clients.stdout.take().ok_or("no child output")?,
    ));
    let mut report = Vec::new();
    // Bounded by the child's two lines (or its end).
    for line in lines.by_ref() {
        let line = line?;
        if line == "holding" {
            break;
        }
        report.push(line);
    }
    let held = status_kib("VmRSS");
    println!(
        "2. {STORM} TLS clients at once (handshake and ApiVersions): {} (target ≤ 5 s)",
        report.join("; ")
    );
    println!(
        "3. the broker's resident memory: {before} KiB before, {held} KiB with them open: {:.1} KiB per TLS connection (target ≤ 32 KiB)",
        held.saturating_sub(before) as f64 / STORM as f64
    );
    drop(clients.stdin.take());
    let _ = clients.wait();
    node.shutdown().await?;
    Ok(())
}
