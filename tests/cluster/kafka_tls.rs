//! TLS on the Kafka listener with Kafka's own clients: three `replog node` processes given
//! certificates made by `replog certs dev` at test time. Over SSL, kcat produces through a
//! follower and consumes from every broker; a client that does not trust the CA and a
//! plaintext client are refused, and the broker serves on; a broker's certificate replaced
//! and reloaded on SIGHUP is the one new connections get. Over SASL_SSL, kcat authenticates
//! with SCRAM-SHA-512 and PLAIN (no `--sasl-plain-without-tls` inside TLS), wrong credentials
//! are refused, and kafka-python authenticates with SCRAM-SHA-512. The seed walkthrough runs
//! over SASL_SSL with kafka-python and confluent-kafka as an ordinary user holding exactly the
//! ACLs it needs (the leader SIGKILLed midway), and a client certificate is a user's identity
//! (`--client-auth`). And an embedded broker: its certificate swapped by `Node::reload_tls`,
//! its TLS settings refused clearly.

use std::path::Path;
use std::time::Duration;

use crate::kafka::{connect, kcat};
use crate::kafka_sasl::{
    PASSWORD, USER, each_mechanism_writes_and_every_broker_reads,
    kafka_python_produces_and_consumes, kcat_with, sasl_args_over, secure_cluster, wait_for_leader,
    wrong_credentials_are_refused,
};
use crate::support::{cli, wait_until};

/// Writes dev certificates for brokers 1 to 3, naming `localhost` and `127.0.0.1`, into
/// `dir` with `replog certs dev`.
fn dev_certs(dir: &Path) {
    let out = dir.to_str().unwrap();
    let args = ["certs", "dev", "--out", out, "--brokers", "1,2,3"];
    let (ok, _, err) = cli(
        &[&args[..], &["--hosts", "localhost,127.0.0.1"]].concat(),
        "",
    );
    assert!(ok, "{err}");
}

/// The arguments giving broker `id` its certificate and key from `certs`.
fn tls_args(certs: &Path, id: u64) -> Vec<String> {
    let file = |ext: &str| {
        certs
            .join(format!("broker-{id}.{ext}"))
            .display()
            .to_string()
    };
    vec![
        "--tls-cert".into(),
        file("pem"),
        "--tls-key".into(),
        file("key"),
    ]
}

/// Three brokers whose Kafka listeners use `protocol` (SSL or SASL_SSL), with certificates
/// made by `replog certs dev` in `dir/certs`: that directory, the brokers, their native and
/// their Kafka addresses.
fn tls_cluster(dir: &Path, protocol: &str) -> (std::path::PathBuf, Cluster) {
    let certs = dir.join("certs");
    dev_certs(&certs);
    let cluster = secure_cluster(dir, protocol, &[(USER, PASSWORD)], |id| {
        tls_args(&certs, id)
    });
    (certs, cluster)
}

/// Brokers as processes, their native addresses and their Kafka addresses.
type Cluster = (
    Vec<Option<crate::Broker>>,
    Vec<std::net::SocketAddr>,
    Vec<std::net::SocketAddr>,
);

/// kcat's settings for SSL trusting the CA certificate `ca`.
fn ssl(ca: &Path) -> Vec<String> {
    vec![
        "-X".into(),
        "security.protocol=SSL".into(),
        "-X".into(),
        format!("ssl.ca.location={}", ca.display()),
    ]
}

/// Whether kcat gets metadata through `at` with `security` settings, and its error output.
async fn metadata(at: &str, security: Vec<String>) -> (bool, String) {
    let mut args: Vec<String> = ["-L", "-b", at, "-m", "5"]
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(security);
    let (ok, _, err) = kcat_with(args, "").await;
    (ok, err)
}

/// A topic of one partition on three brokers; its leader and a follower.
async fn topic(addrs: &[std::net::SocketAddr]) -> (replog::Client, u64, u64) {
    let client = connect(addrs).await;
    client.create_topic("email.send", 1, 3).await.unwrap();
    let leader = client.describe("email.send").await.unwrap()[0]
        .leader
        .unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    (client, leader, follower)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_over_ssl_writes_through_a_follower_and_reads_from_every_broker() {
    if kcat().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (certs, (mut brokers, addrs, kafka)) = tls_cluster(dir.path(), "SSL");
    let (client, leader, follower) = topic(&addrs).await;
    let at = kafka[follower as usize - 1].to_string();
    let ca = certs.join("ca.pem");
    wait_for_leader(&at, leader, ssl(&ca)).await;
    // Every broker serves SSL alike (SSL has no mechanisms: one pass, named after none).
    let security = |_: &str, _: &str, _: &str| ssl(&ca);
    each_mechanism_writes_and_every_broker_reads(&at, &kafka, &["SSL"], security).await;

    // A client that trusts another CA, and a plaintext one: refused, and the broker serves on.
    let other = dir.path().join("other");
    dev_certs(&other);
    let (ok, err) = metadata(&at, ssl(&other.join("ca.pem"))).await;
    assert!(!ok, "a client trusting another CA was served");
    assert!(err.contains("certificate verify failed"), "{err}");
    let (ok, _) = metadata(&at, Vec::new()).await;
    assert!(!ok, "a plaintext client was served");
    assert!(metadata(&at, ssl(&ca)).await.0);

    // The follower gets the other CA's certificate: new connections see it once it is
    // reloaded on SIGHUP.
    for ext in ["pem", "key"] {
        let name = format!("broker-{follower}.{ext}");
        std::fs::copy(other.join(&name), certs.join(&name)).unwrap();
    }
    brokers[follower as usize - 1]
        .as_mut()
        .unwrap()
        .signal(rustix::process::Signal::HUP);
    let new_ca = ssl(&other.join("ca.pem"));
    wait_until(Duration::from_secs(20), "the new certificate", async || {
        let (ok, err) = metadata(&at, new_ca.clone()).await;
        if ok { Ok(()) } else { Err(err) }
    })
    .await;
    assert!(
        !metadata(&at, ssl(&ca)).await.0,
        "the old certificate still served"
    );
    drop(client);
    drop(brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_and_kafka_python_authenticate_over_sasl_ssl_with_scram_and_plain() {
    if kcat().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (certs, (brokers, addrs, kafka)) = tls_cluster(dir.path(), "SASL_SSL");
    let (client, leader, follower) = topic(&addrs).await;
    let at = kafka[follower as usize - 1].to_string();
    let ca = certs.join("ca.pem");
    let security = |m: &str, user: &str, password: &str| {
        let mut args = sasl_args_over("SASL_SSL", m, user, password);
        args.extend(["-X".into(), format!("ssl.ca.location={}", ca.display())]);
        args
    };
    wait_for_leader(&at, leader, security("SCRAM-SHA-512", USER, PASSWORD)).await;
    let mechanisms = ["SCRAM-SHA-512", "PLAIN"];
    each_mechanism_writes_and_every_broker_reads(&at, &kafka, &mechanisms, security).await;
    wrong_credentials_are_refused(&at, &mechanisms, security).await;
    // TLS without SASL: nothing is served.
    assert!(!metadata(&at, ssl(&ca)).await.0, "served without SASL");

    let env = vec![
        ("REPLOG_SASL", format!("SCRAM-SHA-512:{USER}:{PASSWORD}")),
        ("REPLOG_SSL_CAFILE", ca.display().to_string()),
    ];
    kafka_python_produces_and_consumes(&at, env).await;
    drop(client);
    drop(brokers);
}

/// A TLS connection to `at` trusting only `certs`' CA, as `127.0.0.1`.
async fn tls_connect(
    at: std::net::SocketAddr,
    certs: &replog::DevCertificates,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(certs.ca_pem().as_bytes()).unwrap();
    roots.add(ca).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(at).await?;
    connector.connect(at.ip().into(), tcp).await
}

/// Whether a client trusting `certs`' CA is answered ApiVersions over TLS at `at`.
async fn answered(at: std::net::SocketAddr, certs: &replog::DevCertificates) -> bool {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    let Ok(mut s) = tls_connect(at, certs).await else {
        return false;
    };
    let request = ApiVersionsRequest::default();
    let (_, answer): (_, ApiVersionsResponse) =
        crate::kafka::kafka_call_on(&mut s, ApiKey::ApiVersions, 3, &request).await;
    answer.error_code == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_brokers_certificate_is_swapped_by_reload_tls_and_bad_settings_are_named() {
    use replog::{DevCertificates, Error, KafkaSecurityProtocol, TlsError};
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let hosts = ["127.0.0.1".to_string()];
    let old = DevCertificates::generate(&[1], &hosts).unwrap();
    let new = DevCertificates::generate(&[1], &hosts).unwrap();
    old.write_to(&certs).unwrap();
    let tls = DevCertificates::broker_config(&certs, 1);
    let kafka = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let configured = tls.clone();
    let cluster = crate::local_cluster(1, dir.path(), "email.send", 1, move |c| {
        c.kafka_listen = Some(kafka);
        c.tls = Some(configured.clone());
        c.kafka_security_protocol = KafkaSecurityProtocol::Ssl;
    })
    .await;
    let node = cluster.node(1).unwrap();
    let at = node.kafka_addr().unwrap();
    assert!(answered(at, &old).await);
    assert!(!answered(at, &new).await);
    new.write_to(&certs).unwrap();
    node.reload_tls().unwrap();
    assert!(answered(at, &new).await);
    assert!(!answered(at, &old).await);
    // A file that does not load: named, and the certificate stays.
    std::fs::write(&tls.cert_chain, "junk").unwrap();
    match node.reload_tls() {
        Err(Error::Tls(TlsError::File { path, .. })) => assert_eq!(path, tls.cert_chain),
        other => panic!("a junk certificate file: {other:?}"),
    }
    assert!(answered(at, &new).await);
    cluster.shutdown().await.unwrap();

    // SSL without a certificate, missing files, and a reload without TLS: each named.
    let mut config = crate::config(1, &crate::free_addrs(1), &dir.path().join("again"));
    config.kafka_listen = Some(kafka);
    config.kafka_security_protocol = KafkaSecurityProtocol::SaslSsl;
    match crate::start_node(config.clone()).await {
        Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "kafka_security_protocol"),
        other => panic!("SASL_SSL without a certificate: {other:?}"),
    }
    config.tls = Some(replog::TlsConfig::new(
        dir.path().join("none.pem"),
        dir.path().join("none.key"),
    ));
    assert!(matches!(
        replog::Node::start(config.clone()).await,
        Err(Error::Tls(TlsError::File { .. }))
    ));
    config.tls = None;
    config.kafka_security_protocol = KafkaSecurityProtocol::Plaintext;
    let plain = replog::Node::start(config).await.unwrap();
    match plain.reload_tls() {
        Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "tls"),
        other => panic!("a reload without TLS: {other:?}"),
    }
    plain.shutdown().await.unwrap();
}

/// Brokers asking Kafka and native clients for certificates (`--client-auth required`),
/// enforcing ACLs with `User:client` (the dev client certificate's CN) a super user: the CLI
/// presenting that certificate creates a topic; kcat presenting it writes and reads it;
/// kcat without a certificate, or with another CA's, fails its handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_users_identity_on_both_doors() {
    if kcat().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    dev_certs(&certs);
    let ca = certs.join("ca.pem");
    // A revocation list that revokes nothing yet.
    let crl = revoke(&certs, &[]);
    let (mut brokers, addrs, kafka) = secure_cluster(dir.path(), "SSL", &[], |id| {
        let mut args = tls_args(&certs, id);
        args.extend(
            [
                "--tls-ca",
                ca.to_str().unwrap(),
                "--tls-crl",
                crl.to_str().unwrap(),
                "--client-auth",
                "required",
                "--authorization",
                "--super-user",
                "User:client",
            ]
            .map(String::from),
        );
        args
    });
    let file = |name: &str| certs.join(name).display().to_string();
    let properties = dir.path().join("client.properties");
    std::fs::write(
        &properties,
        format!(
            "security.protocol=SSL\nssl.ca.location={}\nssl.certificate.location={}\n\
             ssl.key.location={}\n",
            file("ca.pem"),
            file("client.pem"),
            file("client.key")
        ),
    )
    .unwrap();
    let create = [
        "topics",
        "--bootstrap-server",
        &addrs[0].to_string(),
        "--command-config",
        properties.to_str().unwrap(),
        "--create",
        "--topic",
        "email.send",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]
    .map(String::from);
    wait_until(
        Duration::from_secs(30),
        "the topic, created as User:client",
        async || {
            let args: Vec<&str> = create.iter().map(String::as_str).collect();
            let (ok, out, err) = cli(&args, "");
            if ok || err.contains("exists") {
                Ok(())
            } else {
                Err(format!("{out}{err}"))
            }
        },
    )
    .await;
    let with_cert = |ca: &Path, dir: &Path| {
        let mut args = ssl(ca);
        args.extend([
            "-X".into(),
            format!(
                "ssl.certificate.location={}",
                dir.join("client.pem").display()
            ),
            "-X".into(),
            format!("ssl.key.location={}", dir.join("client.key").display()),
        ]);
        args
    };
    let at = kafka[1].to_string();
    let produce = |security: Vec<String>| {
        let mut args: Vec<String> = ["-P", "-b", &at, "-t", "email.send", "-p", "0"]
            .map(String::from)
            .to_vec();
        args.extend(security);
        args
    };
    wait_until(
        Duration::from_secs(30),
        "kcat's record, as User:client",
        async || {
            let (ok, out, err) =
                kcat_with(produce(with_cert(&ca, &certs)), "with-a-certificate\n").await;
            if ok {
                Ok(())
            } else {
                Err(format!("{out}{err}"))
            }
        },
    )
    .await;
    let mut consume: Vec<String> = [
        "-C",
        "-b",
        &at,
        "-t",
        "email.send",
        "-o",
        "beginning",
        "-e",
        "-q",
    ]
    .map(String::from)
    .to_vec();
    consume.extend(with_cert(&ca, &certs));
    let (ok, out, err) = kcat_with(consume, "").await;
    assert!(ok && out.contains("with-a-certificate"), "{out}{err}");

    // No certificate, or another CA's: the handshake fails.
    let (ok, _) = metadata(&at, ssl(&ca)).await;
    assert!(!ok, "a client without a certificate was served");
    let other = dir.path().join("other");
    dev_certs(&other);
    let mut foreign = ssl(&ca);
    foreign.extend(with_cert(&ca, &other).into_iter().skip(4));
    let (ok, _) = metadata(&at, foreign).await;
    assert!(!ok, "a client with another CA's certificate was served");

    // The client's certificate revoked (`replog certs revoke`, then SIGHUP): its next
    // handshake fails.
    assert!(metadata(&at, with_cert(&ca, &certs)).await.0);
    revoke(&certs, &["--client"]);
    for broker in brokers.iter_mut().flatten() {
        broker.signal(rustix::process::Signal::HUP);
    }
    wait_until(
        Duration::from_secs(20),
        "the revoked certificate refused",
        async || {
            let (ok, out) = metadata(&at, with_cert(&ca, &certs)).await;
            if ok { Err(out) } else { Ok(()) }
        },
    )
    .await;
    // A certificate the list does not revoke (broker 2's, presented as a client's) is still
    // served.
    let other_identity = dir.path().join("broker-2-as-client");
    std::fs::create_dir_all(&other_identity).unwrap();
    for (from, to) in [
        ("broker-2.pem", "client.pem"),
        ("broker-2.key", "client.key"),
    ] {
        std::fs::copy(certs.join(from), other_identity.join(to)).unwrap();
    }
    let (ok, err) = metadata(&at, with_cert(&ca, &other_identity)).await;
    assert!(ok, "a certificate not revoked was refused: {err}");
    for broker in brokers.iter_mut().flatten() {
        assert!(
            broker.child.try_wait().unwrap().is_none(),
            "a broker ended on SIGHUP"
        );
    }
}

/// Writes the revocation list of the CA in `certs` with `replog certs revoke` and `more`
/// arguments; its path.
fn revoke(certs: &Path, more: &[&str]) -> std::path::PathBuf {
    let dir = certs.to_str().unwrap();
    let (ok, out, err) = cli(&[&["certs", "revoke", "--dir", dir][..], more].concat(), "");
    assert!(ok, "{err}");
    std::path::PathBuf::from(out.trim())
}

/// The seed walkthrough over SASL_SSL (SCRAM-SHA-512) with `script`'s Python client, as an
/// ordinary user, alice, who holds exactly the ACLs it needs: WRITE, READ and DESCRIBE on the
/// topics prefixed `email.`, READ on the driver's consumer groups (prefixed `replog-cli-`),
/// granted by the admin with `replog acls`; the admin (a super user) creates the topic.
/// Alice describes it through one broker, produces through a follower, consumes through every
/// broker, and after the leader's SIGKILL produces and consumes again. Alice may not create a
/// topic herself.
async fn secure_seed_walkthrough(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    dev_certs(&certs);
    let ca = certs.join("ca.pem").display().to_string();
    let users = [("admin", "admin-secret"), ("alice", "alice-secret")];
    let (mut brokers, addrs, kafka) = secure_cluster(dir.path(), "SASL_SSL", &users, |id| {
        let mut args = tls_args(&certs, id);
        args.extend(
            [
                "--tls-ca",
                &ca,
                "--native-sasl",
                "--authorization",
                "--super-user",
                "User:admin",
            ]
            .map(String::from),
        );
        args
    });
    let admin_properties = dir.path().join("admin.properties");
    std::fs::write(
        &admin_properties,
        format!(
            "security.protocol=SASL_SSL\nssl.ca.location={ca}\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.username=admin\nsasl.password=admin-secret\n"
        ),
    )
    .unwrap();
    let grants: [&[&str]; 2] = [
        &[
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "email.",
        ],
        &["--operation", "Read", "--group", "replog-cli-"],
    ];
    let at = addrs[0].to_string();
    for grant in grants {
        let mut args = vec![
            "acls",
            "--bootstrap-server",
            &at,
            "--command-config",
            admin_properties.to_str().unwrap(),
            "--add",
            "--allow-principal",
            "User:alice",
            "--resource-pattern-type",
            "prefixed",
        ];
        args.extend(grant);
        wait_until(Duration::from_secs(30), "alice's grant", async || {
            let (ok, out, err) = cli(&args, "");
            if ok {
                Ok(())
            } else {
                Err(format!("{out}{err}"))
            }
        })
        .await;
    }
    let env = |user: &str, password: &str| {
        vec![
            ("REPLOG_SASL", format!("SCRAM-SHA-512:{user}:{password}")),
            ("REPLOG_SSL_CAFILE", ca.clone()),
        ]
    };
    let create = ["create", &kafka[0].to_string(), "email.other", "1", "3"].map(String::from);
    let (ok, out, err) =
        crate::kafka_python::python_env(script, create.to_vec(), env("alice", "alice-secret"))
            .await;
    assert!(!ok, "alice created a topic: {out}");
    assert!(err.to_lowercase().contains("authoriz"), "{err}");
    crate::kafka_python::seed_walkthrough(
        script,
        &mut brokers,
        &kafka,
        env("admin", "admin-secret"),
        env("alice", "alice-secret"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_runs_the_seed_walkthrough_over_sasl_ssl_as_an_ordinary_user() {
    if crate::kafka_python::python_clients() {
        secure_seed_walkthrough("kafka_python.py").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_runs_the_seed_walkthrough_over_sasl_ssl_as_an_ordinary_user() {
    if crate::kafka_python::python_clients() {
        secure_seed_walkthrough("confluent_kafka_cli.py").await;
    }
}
