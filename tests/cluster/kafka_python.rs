//! kafka-python and confluent-kafka (librdkafka) against three `replog node` processes: the seed
//! walkthrough through a follower, an idempotent producer across a SIGKILL of the leader, and two
//! group members sharing a topic. `.ci/run` installs both from PyPI; without them these tests fail
//! in CI and are skipped elsewhere.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::kafka::*;
use crate::support::wait_until;

/// Python's Kafka clients, if installed (`.ci/run` installs kafka-python and
/// confluent-kafka from PyPI): required in CI, skipped elsewhere.
pub(crate) fn python_clients() -> bool {
    python_has("python3", "kafka, confluent_kafka")
}

/// Whether `python` imports `modules`; in CI it must (`.ci/run` installs them), elsewhere a
/// test without them is skipped, saying so.
fn python_has(python: &str, modules: &str) -> bool {
    let found = Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{python} cannot import {modules} (.ci/run installs them)"
        );
        eprintln!("{python} cannot import {modules}: skipped");
    }
    found
}

/// Runs one of `tests/kafka_clients/`'s scripts (bounded by `timeout`, 180 s).
pub(crate) async fn python(script: &str, args: Vec<String>) -> (bool, String, String) {
    python_env(script, args, Vec::new()).await
}

/// The Python that has quixstreams, if there is one: `.ci/run` installs it from PyPI into
/// its own environment, `target/quixstreams` (its confluent-kafka is pinned to a version of
/// its own). Required in CI, skipped elsewhere.
pub(crate) fn quixstreams_python() -> Option<String> {
    let python = std::env::var("REPLOG_QUIXSTREAMS_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/target/quixstreams/bin/python",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let found = python_has(&python, "quixstreams");
    found.then_some(python)
}

/// [`python`] with `env` set (the scripts' security settings: `REPLOG_SASL`,
/// `REPLOG_SSL_CAFILE`; and `REPLOG_PYTHON`, the interpreter, `python3` by default).
pub(crate) async fn python_env(
    script: &str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
) -> (bool, String, String) {
    let path = format!(
        "{}/tests/kafka_clients/{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    let interpreter = env
        .iter()
        .find(|(k, _)| *k == "REPLOG_PYTHON")
        .map_or_else(|| "python3".to_string(), |(_, v)| v.clone());
    tokio::task::spawn_blocking(move || {
        let out = Command::new("timeout")
            .args(["180", &interpreter, &path])
            .args(&args)
            .envs(env)
            .stdin(Stdio::null())
            .output()
            .expect("run python3");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// The seed walkthrough with a Python client (`script`: kafka-python's or confluent-kafka's
/// driver): create the topic through one broker with the client's admin API, describe it
/// through another (Leader / Replicas / Isr), produce through a follower, consume from the
/// beginning through each broker, SIGKILL the leader, produce again through the same address,
/// consume both. Prints what the client printed (the README shows it).
async fn python_seed_walkthrough(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, _addrs, kafka) = cluster(dir.path());
    seed_walkthrough(script, &mut brokers, &kafka, Vec::new(), Vec::new()).await;
}

/// The steps of [`python_seed_walkthrough`] on brokers `brokers` (Kafka listeners `kafka`):
/// the topic created with the settings `admin` (the scripts' `REPLOG_SASL`,
/// `REPLOG_SSL_CAFILE`), every other step with `user`'s.
pub(crate) async fn seed_walkthrough(
    script: &str,
    brokers: &mut [Option<crate::Broker>],
    kafka: &[std::net::SocketAddr],
    admin: Vec<(&'static str, String)>,
    user: Vec<(&'static str, String)>,
) {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let at = |i: usize| kafka[i].to_string();
    let as_user = async |args: Vec<String>| python_env(script, args, user.clone()).await;
    let create = s(&["create", &at(0), "email.send", "1", "3"]);
    let (ok, out, err) = python_env(script, create, admin).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "created");
    let (ok, described, err) = as_user(s(&["describe", &at(1), "email.send"])).await;
    assert!(ok, "{err}");
    println!("{script} describe:\n{described}");
    let field = |name: &str| -> String {
        described
            .split(['\t', '\n'])
            .find_map(|f| f.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in {described}"))
            .to_string()
    };
    let leader: u64 = field("Leader").parse().unwrap();
    assert_eq!(field("Replicas").split(',').count(), 3, "{described}");
    assert_eq!(field("Isr").split(',').count(), 3, "{described}");
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let via = at(follower as usize - 1);
    let (ok, out, err) = as_user(s(&["produce", &via, "email.send", "follower-message-1"])).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "0");
    for k in kafka {
        let (ok, out, err) = as_user(s(&["consume", &k.to_string(), "email.send"])).await;
        assert!(ok, "{err}");
        assert_eq!(out, "follower-message-1\n", "through {k}");
    }
    drop(brokers[leader as usize - 1].take());
    let (ok, out, err) = as_user(s(&["produce", &via, "email.send", "follower-message-2"])).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1");
    let (ok, out, err) = as_user(s(&["consume", &via, "email.send"])).await;
    assert!(ok, "{err}");
    assert_eq!(out, "follower-message-1\nfollower-message-2\n");
    println!("{script} consume after the leader's SIGKILL:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_runs_the_seed_walkthrough_through_a_follower() {
    if python_clients() {
        python_seed_walkthrough("kafka_python.py").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_runs_the_seed_walkthrough_through_a_follower() {
    if python_clients() {
        python_seed_walkthrough("confluent_kafka_cli.py").await;
    }
}

/// kafka-python's idempotent producer (the default in kafka-python 3) writes 10,000 records
/// across a SIGKILL of the leader: none lost, none written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_pythons_idempotent_producer_loses_and_duplicates_nothing_across_a_leader_kill() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("idem", 1, 3).await.unwrap();
    let leader = client.describe("idem").await.unwrap()[0].leader.unwrap();
    let survivor = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = kafka[survivor as usize - 1].to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let producing = tokio::spawn(python(
        "kafka_python.py",
        s(&["produce-many", &at, "idem", "10000"]),
    ));
    // The leader dies mid-stream: once the producer's first records are committed.
    wait_until(
        Duration::from_secs(30),
        "the producer's first records",
        async || {
            let described = client.describe("idem").await.ok()?;
            (described[0].high_watermark.get() > 0).then_some(())
        },
    )
    .await;
    drop(brokers[leader as usize - 1].take());
    let (ok, out, err) = producing.await.unwrap();
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "ok");
    let (ok, out, err) = python("kafka_python.py", s(&["consume", &at, "idem"])).await;
    assert!(ok, "{err}");
    let mut seen = std::collections::BTreeMap::<u32, u32>::new();
    for line in out.lines() {
        *seen
            .entry(line.strip_prefix("r-").unwrap().parse().unwrap())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), 10_000, "lost {}", 10_000 - seen.len());
    assert!(seen.values().all(|c| *c == 1), "a record written twice");
    drop(client);
    drop(brokers);
}

/// kafka-python's `offsets_for_times` on one batch whose records' CreateTime goes back and
/// forth: each time is answered with the first record of that time or later, inside the batch
/// (not the batch's first offset), with that record's timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_pythons_offsets_for_times_finds_the_record_inside_a_batch() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("times", 1, 3).await.unwrap();
    let t0: u64 = 1_700_000_000_000;
    let args = vec![
        "times".into(),
        kafka[0].to_string(),
        "times".into(),
        t0.to_string(),
    ];
    let (ok, out, err) = python("kafka_python.py", args).await;
    assert!(ok, "{err}");
    let batches = client
        .fetch("times", 0, replog::Offset(0), 1 << 20, None)
        .await
        .unwrap();
    assert_eq!(batches.len(), 1, "the producer sent one batch");
    // Records at offsets 0 to 4 have times t0 + 0, 10, 20, 5, 30.
    let expected: Vec<String> = [
        (0, Some((0, 0))),
        (1, Some((1, 10))),
        (5, Some((1, 10))),
        (11, Some((2, 20))),
        (21, Some((4, 30))),
        (31, None),
    ]
    .iter()
    .map(|(delta, found)| match found {
        Some((offset, time)) => format!("{} {offset} {}", t0 + delta, t0 + time),
        None => format!("{} none", t0 + delta),
    })
    .collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{err}");
    drop(client);
    drop(brokers);
}

/// Two confluent-kafka consumers `subscribe()` to a 4-partition topic in one group: both get
/// partitions; one closes; the other takes every partition over from the committed offsets and
/// every record is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_group_members_share_a_topic_and_one_takes_over_from_the_other() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("shared", 4, 3).await.unwrap();
    for p in 0..4 {
        let batch: Vec<replog::Record> = (0..100)
            .map(|i| replog::Record::new(format!("{p}-{i}")))
            .collect();
        client.send("shared", p, &batch).await.unwrap();
    }
    let (ok, out, err) = python(
        "confluent_group.py",
        vec![
            kafka[0].to_string(),
            "shared".into(),
            "pair".into(),
            "400".into(),
        ],
    )
    .await;
    assert!(ok, "{err}");
    println!("{out}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["both_assigned"], true, "{report}");
    assert_eq!(report["takeover_partitions"], 4, "{report}");
    assert_eq!(report["distinct"], 400, "{report}");
    drop(client);
    drop(brokers);
}
