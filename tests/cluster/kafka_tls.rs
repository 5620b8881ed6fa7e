//! TLS on the Kafka listener with Kafka's own clients: three `replog node` processes given
//! certificates made by `replog certs dev` at test time. Over SSL, kcat produces through a
//! follower and consumes from every broker; a client that does not trust the CA and a
//! plaintext client are refused, and the broker serves on; a broker's certificate replaced
//! and reloaded on SIGHUP is the one new connections get. Over SASL_SSL, kcat authenticates
//! with SCRAM-SHA-512 and PLAIN (no `--sasl-plain-without-tls` inside TLS), wrong credentials
//! are refused, and kafka-python authenticates with SCRAM-SHA-512.

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
    let certs = dir.path().join("certs");
    dev_certs(&certs);
    let (mut brokers, addrs, kafka) = secure_cluster(dir.path(), "SSL", |id| tls_args(&certs, id));
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
    let certs = dir.path().join("certs");
    dev_certs(&certs);
    let (brokers, addrs, kafka) = secure_cluster(dir.path(), "SASL_SSL", |id| tls_args(&certs, id));
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
