//! SASL on the Kafka listener with Kafka's own clients: three `replog node` processes started
//! with `--kafka-security-protocol SASL_PLAINTEXT` and a bootstrap user; kcat (librdkafka)
//! produces through a follower and consumes through every broker with SCRAM-SHA-512,
//! SCRAM-SHA-256 and PLAIN, a wrong password and an unknown user are refused, and
//! kafka-python does the same with SCRAM-SHA-512; and librdkafka re-authenticates (KIP-368)
//! on brokers whose sessions are short.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::kafka::{connect, kcat, run};
use crate::kafka_python::python_env;
use crate::support::wait_until;

pub(crate) const USER: &str = "alice";
pub(crate) const PASSWORD: &str = "wonder-land";

/// Three brokers whose Kafka listeners ask for SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN),
/// with user [`USER`] in the bootstrap user file; the native and Kafka addresses.
fn sasl_cluster(
    dir: &std::path::Path,
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    sasl_cluster_with(dir, &[(USER, PASSWORD)], &[])
}

/// Three brokers as [`sasl_cluster`]'s, with `users` in the bootstrap user file and `extra`
/// arguments for `replog node`.
pub(crate) fn sasl_cluster_with(
    dir: &std::path::Path,
    users: &[(&str, &str)],
    extra: &[&str],
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    secure_cluster(dir, "SASL_PLAINTEXT", users, |_| {
        let mut more = vec!["--sasl-plain-without-tls".to_string()];
        more.extend(extra.iter().map(|a| a.to_string()));
        more
    })
}

/// Three brokers whose Kafka listeners use `protocol`, offering SCRAM-SHA-512, SCRAM-SHA-256
/// and PLAIN where it has SASL, with `users` in the bootstrap user file, each given `more(id)`
/// arguments besides; the native and Kafka addresses.
pub(crate) fn secure_cluster(
    dir: &std::path::Path,
    protocol: &str,
    users: &[(&str, &str)],
    more: impl Fn(u64) -> Vec<String>,
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    let lines: String = users.iter().map(|(u, p)| format!("{u}:{p}\n")).collect();
    let users = dir.join("users");
    std::fs::write(&users, format!("# the first users\n{lines}")).unwrap();
    let users = users.to_str().unwrap().to_string();
    let addrs = crate::process_addrs(3);
    let kafka = crate::process_addrs(3);
    let brokers = (1..=3u64)
        .map(|id| {
            let listen = kafka[id as usize - 1].to_string();
            let mut args = vec![
                "--kafka-listen",
                &listen,
                "--kafka-security-protocol",
                protocol,
                "--sasl-mechanisms",
                "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
                "--bootstrap-user-file",
                &users,
            ];
            let peers: Vec<String> = (0..3).map(|i| format!("{}@{}", i + 1, kafka[i])).collect();
            for p in &peers {
                args.extend(["--kafka-peer", p]);
            }
            let more = more(id);
            args.extend(more.iter().map(String::as_str));
            Some(crate::spawn_broker_with(id, &addrs, dir, false, &args))
        })
        .collect();
    (brokers, addrs, kafka)
}

/// kcat's settings for SASL with `mechanism`, as `user` with `password`.
fn sasl_args(mechanism: &str, user: &str, password: &str) -> Vec<String> {
    sasl_args_over("SASL_PLAINTEXT", mechanism, user, password)
}

/// [`sasl_args`] with `protocol` (SASL_PLAINTEXT or SASL_SSL).
pub(crate) fn sasl_args_over(
    protocol: &str,
    mechanism: &str,
    user: &str,
    password: &str,
) -> Vec<String> {
    [
        format!("security.protocol={protocol}"),
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ]
    .into_iter()
    .flat_map(|x| ["-X".to_string(), x])
    .collect()
}

/// Waits until kcat's metadata through `at`, with the settings `security` (`-X` pairs), names
/// `leader` as email.send/0's leader: the bootstrap user is written a moment after the cluster
/// forms, and a follower learns a new partition's leader a moment after its election.
pub(crate) async fn wait_for_leader(at: &str, leader: u64, security: Vec<String>) {
    let what = format!("metadata through {at} naming leader {leader}");
    wait_until(Duration::from_secs(30), &what, async || {
        let mut args: Vec<String> = ["-L", "-b", at, "-t", "email.send"]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(security.iter().cloned());
        let (ok, out, err) = kcat_with(args, "").await;
        if ok && out.contains(&format!("partition 0, leader {leader}, replicas: ")) {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    })
    .await;
}

/// Runs kcat with `args` off the runtime's workers.
pub(crate) async fn kcat_with(args: Vec<String>, stdin: &str) -> (bool, String, String) {
    let Some(kcat) = kcat() else {
        return (false, String::new(), "no kcat".into());
    };
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(kcat, &args, &stdin)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_authenticate_with_scram_and_plain_and_wrong_credentials_are_refused() {
    if kcat().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = sasl_cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("email.send", 1, 3).await.unwrap();
    let leader = client.describe("email.send").await.unwrap()[0]
        .leader
        .unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = kafka[follower as usize - 1].to_string();

    wait_for_leader(&at, leader, sasl_args("SCRAM-SHA-512", USER, PASSWORD)).await;

    let mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"];
    let security = |m: &str, user: &str, password: &str| sasl_args(m, user, password);
    each_mechanism_writes_and_every_broker_reads(&at, &kafka, &mechanisms, security).await;
    wrong_credentials_are_refused(&at, &mechanisms, security).await;
    // Without SASL: nothing is served.
    let (ok, _, _) = kcat_with(
        ["-L", "-b", &at, "-m", "5"]
            .into_iter()
            .map(String::from)
            .collect(),
        "",
    )
    .await;
    assert!(!ok, "metadata without authentication");

    kafka_python_with_scram(&at).await;
    drop(client);
    drop(brokers);
}

/// Writes a record `by-<mechanism>` through `at` with each of `mechanisms`, then reads every
/// record back through each broker's address in `kafka`, with each mechanism in turn, as
/// [`USER`]; `security(mechanism, user, password)` gives kcat's settings.
pub(crate) async fn each_mechanism_writes_and_every_broker_reads(
    at: &str,
    kafka: &[SocketAddr],
    mechanisms: &[&str],
    security: impl Fn(&str, &str, &str) -> Vec<String>,
) {
    for m in mechanisms {
        let mut args: Vec<String> = ["-P", "-b", at, "-t", "email.send"]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(security(m, USER, PASSWORD));
        let (ok, _, err) = kcat_with(args, &format!("by-{m}\n")).await;
        assert!(ok, "{m}: {err}");
    }
    let expected: String = mechanisms.iter().map(|m| format!("by-{m}\n")).collect();
    for (k, m) in kafka.iter().zip(mechanisms.iter().cycle()) {
        let k = k.to_string();
        let mut args: Vec<String> = [
            "-C",
            "-b",
            &k,
            "-t",
            "email.send",
            "-o",
            "beginning",
            "-e",
            "-q",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        args.extend(security(m, USER, PASSWORD));
        let (ok, out, err) = kcat_with(args, "").await;
        assert!(ok, "{m} through {k}: {err}");
        assert_eq!(out, expected, "{m} through {k}");
    }
}

/// A wrong password and an unknown user, with each of `mechanisms` through `at`: refused,
/// with Kafka's answer.
pub(crate) async fn wrong_credentials_are_refused(
    at: &str,
    mechanisms: &[&str],
    security: impl Fn(&str, &str, &str) -> Vec<String>,
) {
    for (user, password) in [(USER, "wrong"), ("mallory", PASSWORD)] {
        for m in mechanisms {
            let mut args: Vec<String> = ["-L", "-b", at, "-m", "5"]
                .into_iter()
                .map(String::from)
                .collect();
            args.extend(security(m, user, password));
            let (ok, _, err) = kcat_with(args, "").await;
            assert!(!ok, "{m} as {user}/{password} was let in");
            assert!(
                err.contains("Authentication failed"),
                "{m} as {user}: {err}"
            );
        }
    }
}

/// kafka-python with SCRAM-SHA-512: a record produced through `at` and read back.
async fn kafka_python_with_scram(at: &str) {
    let sasl = format!("SCRAM-SHA-512:{USER}:{PASSWORD}");
    kafka_python_produces_and_consumes(at, vec![("REPLOG_SASL", sasl)]).await;
}

/// kafka-python with the security settings `env` (see `tests/kafka_clients/kafka_python.py`):
/// a record produced through `at` and read back.
pub(crate) async fn kafka_python_produces_and_consumes(at: &str, env: Vec<(&'static str, String)>) {
    let found = Command::new("python3")
        .args(["-c", "import kafka"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "kafka-python is not installed (.ci/run installs it)"
        );
        eprintln!("kafka-python is not installed: skipped");
        return;
    }
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let script = "kafka_python.py";
    let produce = args(&["produce", at, "email.send", "by-kafka-python"]);
    let (ok, out, err) = python_env(script, produce, env.clone()).await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) = python_env(script, args(&["consume", at, "email.send"]), env).await;
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == "by-kafka-python"), "{out}");
}

/// Re-authentication (KIP-368) with librdkafka: brokers whose SASL sessions last 1.5 s
/// (`--sasl-reauth-ms`); a confluent-kafka producer writes a record every 100 ms for six
/// seconds over the same connections, re-authenticating before each session ends, with no
/// error and nothing lost, and a consumer reads every record back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_re_authenticates_before_its_sessions_end_and_loses_nothing() {
    if !crate::kafka_python::python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = sasl_cluster_with(
        dir.path(),
        &[(USER, PASSWORD)],
        &["--sasl-reauth-ms", "1500"],
    );
    let client = connect(&addrs).await;
    client.create_topic("reauth.topic", 1, 3).await.unwrap();
    let at = kafka[0].to_string();
    let args = vec![at, USER.into(), PASSWORD.into(), "6".into()];
    // The bootstrap user is written a moment after the cluster forms.
    let (out, err) = wait_until(Duration::from_secs(60), "the script to run", async || {
        let (ok, out, err) = python_env("reauth.py", args.clone(), Vec::new()).await;
        if ok {
            Ok((out, err))
        } else {
            Err(format!("{out}{err}"))
        }
    })
    .await;
    println!("{out}");
    let r: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let sent = r["sent"].as_u64().unwrap();
    assert!(sent >= 40, "{r}");
    assert_eq!(r["delivered"], sent, "{r}");
    assert_eq!(r["failed"], serde_json::json!([]), "{r}");
    assert_eq!(r["errors"], serde_json::json!([]), "{r}");
    assert_eq!(r["read"], sent, "{r}");
    // Six seconds of 1.5 s sessions: a connection re-authenticates three times at least.
    assert!(r["reauths"].as_u64().unwrap() >= 3, "{r}");
    drop(client);
    drop(brokers);
}
