//! SASL on the Kafka listener with Kafka's own clients: three `replog node` processes started
//! with `--kafka-security-protocol SASL_PLAINTEXT` and a bootstrap user; kcat (librdkafka)
//! produces through a follower and consumes through every broker with SCRAM-SHA-512,
//! SCRAM-SHA-256 and PLAIN, a wrong password and an unknown user are refused, and
//! kafka-python does the same with SCRAM-SHA-512.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::kafka::{connect, kcat, run};
use crate::support::wait_until;

const USER: &str = "alice";
const PASSWORD: &str = "wonder-land";

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
    let lines: String = users.iter().map(|(u, p)| format!("{u}:{p}\n")).collect();
    let users = dir.join("users");
    std::fs::write(&users, format!("# the first users\n{lines}")).unwrap();
    let users = users.to_str().unwrap().to_string();
    let addrs = crate::process_addrs(3);
    let kafka = crate::process_addrs(3);
    let brokers = (1..=3u64)
        .map(|id| {
            let listen = kafka[id as usize - 1].to_string();
            let mut more = vec![
                "--kafka-listen",
                &listen,
                "--kafka-security-protocol",
                "SASL_PLAINTEXT",
                "--sasl-mechanisms",
                "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
                "--sasl-plain-without-tls",
                "--bootstrap-user-file",
                &users,
            ];
            let peers: Vec<String> = (0..3).map(|i| format!("{}@{}", i + 1, kafka[i])).collect();
            for p in &peers {
                more.extend(["--kafka-peer", p]);
            }
            more.extend(extra);
            Some(crate::spawn_broker_with(id, &addrs, dir, false, &more))
        })
        .collect();
    (brokers, addrs, kafka)
}

/// kcat's settings for SASL with `mechanism`, as `user` with `password`.
fn sasl_args(mechanism: &str, user: &str, password: &str) -> Vec<String> {
    [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ]
    .into_iter()
    .flat_map(|x| ["-X".to_string(), x])
    .collect()
}

/// Runs kcat with `args` off the runtime's workers.
async fn kcat_with(args: Vec<String>, stdin: &str) -> (bool, String, String) {
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

    // The bootstrap user is written a moment after the cluster forms, and the follower
    // learns the new partition's leader a moment after its election.
    let what = format!("SCRAM-SHA-512 metadata through the follower naming leader {leader}");
    wait_until(Duration::from_secs(30), &what, async || {
        let mut args = vec!["-L", "-b", &at, "-t", "email.send"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        args.extend(sasl_args("SCRAM-SHA-512", USER, PASSWORD));
        let (ok, out, err) = kcat_with(args, "").await;
        if ok && out.contains(&format!("partition 0, leader {leader}, replicas: ")) {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    })
    .await;

    // A record through the follower with each mechanism.
    let mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"];
    for m in mechanisms {
        let mut args: Vec<String> = ["-P", "-b", &at, "-t", "email.send"]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(sasl_args(m, USER, PASSWORD));
        let (ok, _, err) = kcat_with(args, &format!("by-{m}\n")).await;
        assert!(ok, "{m}: {err}");
    }
    // Every record through every broker's address, with each mechanism in turn.
    let expected: String = mechanisms.iter().map(|m| format!("by-{m}\n")).collect();
    for (k, m) in kafka.iter().zip(mechanisms) {
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
        args.extend(sasl_args(m, USER, PASSWORD));
        let (ok, out, err) = kcat_with(args, "").await;
        assert!(ok, "{m} through {k}: {err}");
        assert_eq!(out, expected, "{m} through {k}");
    }

    // A wrong password and an unknown user: refused, with Kafka's answer.
    for (user, password) in [(USER, "wrong"), ("mallory", PASSWORD)] {
        for m in mechanisms {
            let mut args: Vec<String> = ["-L", "-b", &at, "-m", "5"]
                .into_iter()
                .map(String::from)
                .collect();
            args.extend(sasl_args(m, user, password));
            let (ok, _, err) = kcat_with(args, "").await;
            assert!(!ok, "{m} as {user}/{password} was let in");
            assert!(
                err.contains("Authentication failed"),
                "{m} as {user}: {err}"
            );
        }
    }
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

/// kafka-python with SCRAM-SHA-512: a record produced through `at` and read back.
async fn kafka_python_with_scram(at: &str) {
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
    let script = format!(
        "{}/tests/kafka_clients/kafka_python.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = |args: Vec<String>| {
        let script = script.clone();
        tokio::task::spawn_blocking(move || {
            let out = Command::new("timeout")
                .args(["120", "python3", &script])
                .args(&args)
                .env("REPLOG_SASL", format!("SCRAM-SHA-512:{USER}:{PASSWORD}"))
                .output()
                .expect("run python3");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (ok, out, err) = run(args(&["produce", at, "email.send", "by-kafka-python"]))
        .await
        .unwrap();
    assert!(ok, "{out}{err}");
    let (ok, out, err) = run(args(&["consume", at, "email.send"])).await.unwrap();
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == "by-kafka-python"), "{out}");
}
