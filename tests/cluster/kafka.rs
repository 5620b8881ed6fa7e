//! The Kafka listener ("4 of 4", first part): the seed walkthrough with Kafka's own `kcat`
//! against three `replog node` processes, compressed batches, one log behind two doors, and
//! hostile bytes on the Kafka port. `.ci/run` installs `kcat` (Debian's package); without it
//! these tests fail in CI and are skipped elsewhere.

// Kafka's wire is big-endian; the crate's own formats are little-endian, which the lint guards.
#![allow(clippy::big_endian_bytes)]

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use replog::{Client, ClientConfig};

/// `kcat`, if installed: required in CI, skipped (with a line saying so) elsewhere.
fn kcat() -> Option<&'static str> {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "kcat is not installed (.ci/run installs it)"
        );
        eprintln!("kcat is not installed: skipped");
        return None;
    }
    Some("kcat")
}

/// Runs kcat with `args`, feeding `stdin`; (success, stdout, stderr). Bounded by `-m`/`-e`
/// in the arguments and by coreutils' `timeout` (30 s); the output is read as it comes.
fn run(kcat: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new("timeout")
        .arg("30")
        .arg(kcat)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kcat");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_string();
    // Written on a thread of its own, so that neither side waits for the other's pipe.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Three `replog node` processes with Kafka listeners; the native and Kafka addresses.
fn cluster(
    dir: &std::path::Path,
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    let addrs = crate::process_addrs(3);
    let kafka = crate::process_addrs(3);
    let peers: Vec<String> = (0..3)
        .flat_map(|i| {
            [
                "--kafka-peer".to_string(),
                format!("{}@{}", i + 1, kafka[i]),
            ]
        })
        .collect();
    let brokers = (1..=3u64)
        .map(|id| {
            let mut more = vec![
                "--kafka-listen".to_string(),
                kafka[id as usize - 1].to_string(),
            ];
            more.extend(peers.iter().cloned());
            let more: Vec<&str> = more.iter().map(String::as_str).collect();
            Some(crate::spawn_broker_with(id, &addrs, dir, false, &more))
        })
        .collect();
    (brokers, addrs, kafka)
}

async fn connect(addrs: &[SocketAddr]) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(addrs, ClientConfig::default()).await {
            Ok(c) => return c,
            Err(e) => assert!(Instant::now() < deadline, "brokers did not start: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The seed walkthrough with kcat: describe (Leader / Replicas / Isr), produce through a
/// follower's Kafka address, consume from the beginning through each of the three, SIGKILL
/// the leader, produce again through the same address, consume both; then every compression
/// codec, and the native door reading what Kafka wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_walkthrough_runs_with_kcat_through_a_follower() {
    let Some(kcat) = kcat() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("email.send", 1, 3).await.unwrap();
    let leader = client.describe("email.send").await.unwrap()[0]
        .leader
        .unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = kafka[follower as usize - 1].to_string();
    let kcat_async = move |args: Vec<String>, stdin: String| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(kcat, &args, &stdin)
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Every record of the topic from the beginning, through `addr`.
    let read_all = |addr: String| async move {
        let (ok, out, err) = kcat_async(
            args(&[
                "-C",
                "-b",
                &addr,
                "-t",
                "email.send",
                "-o",
                "beginning",
                "-e",
                "-q",
            ]),
            String::new(),
        )
        .await
        .unwrap();
        assert!(ok, "{err}");
        out
    };

    // A follower learns the new partition's leader a moment after the leader is elected
    // (until then its Metadata says LEADER_NOT_AVAILABLE, and clients ask again).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) =
            kcat_async(args(&["-L", "-b", &at, "-t", "email.send"]), String::new())
                .await
                .unwrap();
        assert!(ok, "{err}");
        assert!(out.contains("3 brokers"), "{out}");
        if out.contains(&format!("partition 0, leader {leader}, replicas: ")) {
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (ok, _, err) = kcat_async(
        args(&["-P", "-b", &at, "-t", "email.send"]),
        "follower-message-1\n".into(),
    )
    .await
    .unwrap();
    assert!(ok, "{err}");
    for k in &kafka {
        let out = read_all(k.to_string()).await;
        assert_eq!(out, "follower-message-1\n", "through {k}");
    }

    // SIGKILL the leader; the same follower address takes the next write.
    drop(brokers[leader as usize - 1].take());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) = kcat_async(
            args(&[
                "-P",
                "-b",
                &at,
                "-t",
                "email.send",
                "-X",
                "message.timeout.ms=20000",
            ]),
            "follower-message-2\n".into(),
        )
        .await
        .unwrap();
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no write after the leader died: {err}"
        );
    }
    let survivors: Vec<&SocketAddr> = kafka
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 + 1 != leader)
        .map(|(_, k)| k)
        .collect();
    for k in &survivors {
        let out = read_all(k.to_string()).await;
        assert_eq!(
            out, "follower-message-1\nfollower-message-2\n",
            "through {k}"
        );
    }

    // Every codec kcat offers round-trips.
    let mut want: Vec<String> = vec!["follower-message-1".into(), "follower-message-2".into()];
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let lines: Vec<String> = (0..3).map(|i| format!("{codec}-{i}")).collect();
        let (ok, _, err) = kcat_async(
            args(&["-P", "-b", &at, "-t", "email.send", "-z", codec]),
            lines.iter().map(|l| format!("{l}\n")).collect(),
        )
        .await
        .unwrap();
        assert!(ok, "{codec}: {err}");
        want.extend(lines);
    }
    let out = read_all(at.clone()).await;
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    // One log, two doors: the native client reads what Kafka's wrote.
    let native = connect(&[addrs[follower as usize - 1]]).await;
    let batches = native
        .fetch("email.send", 0, replog::Offset(0), 1 << 20, None)
        .await
        .unwrap();
    let values: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            b.records()
                .map(|(_, r)| String::from_utf8_lossy(&r.value).into_owned())
        })
        .collect();
    assert_eq!(&values[..2], ["follower-message-1", "follower-message-2"]);
    drop((client, native));
    drop(brokers);
}

/// Bytes no Kafka client sends: a length prefix of 4 GiB, a too-new ApiVersions (answered as
/// Kafka does: version 0, UNSUPPORTED_VERSION, the ranges), an unknown API; the broker closes
/// only that connection and serves the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_port_refuses_hostile_bytes_and_answers_a_newer_api_versions() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let _client = connect(&addrs).await;
    let at = kafka[0];
    // Broker 1 may still be starting.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(at).await.is_err() {
        assert!(Instant::now() < deadline, "no kafka listener at {at}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed = |mut s: tokio::net::TcpStream| async move {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed without an answer");
    };
    // A length prefix of 4 GiB.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    closed(s).await;
    // An unknown API key.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(&[0, 0, 0, 8, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1])
        .await
        .unwrap();
    closed(s).await;
    // ApiVersions v99: a v0 answer with error 35 and the served ranges.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut request = vec![0, 18, 0, 99, 0, 0, 0, 7, 0, 0];
    let mut framed = (request.len() as u32).to_be_bytes().to_vec();
    framed.append(&mut request);
    s.write_all(&framed).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body[..4], &7i32.to_be_bytes(), "the correlation id");
    assert_eq!(&body[4..6], &35i16.to_be_bytes(), "UNSUPPORTED_VERSION");
    let ranges = i32::from_be_bytes([body[6], body[7], body[8], body[9]]);
    assert!(ranges >= 5, "{ranges} ranges");
    // The broker still serves.
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let mut request = vec![0, 18, 0, 0, 0, 0, 0, 9, 0, 0];
    let mut framed = (request.len() as u32).to_be_bytes().to_vec();
    framed.append(&mut request);
    s.write_all(&framed).await.unwrap();
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    assert_eq!(&body[4..6], &0i16.to_be_bytes());
    drop(brokers);
}

/// kcat's balanced consumer (librdkafka's group protocol: FindCoordinator, JoinGroup with
/// MEMBER_ID_REQUIRED, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch, LeaveGroup) against the
/// replog coordinator: it reads a 4-partition topic in full and commits; the native client sees
/// its commits; a second run resumes after them and reads only what came since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcats_group_consumer_shares_the_coordinator_with_native_clients() {
    let Some(kcat) = kcat() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("t4", 4, 3).await.unwrap();
    let at = kafka[1].to_string();
    let kcat_async = move |args: Vec<String>, stdin: String| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run(kcat, &args, &stdin)
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let lines: String = (0..80).map(|i| format!("key-{i}:value-{i}\n")).collect();
    let (ok, _, err) = kcat_async(args(&["-P", "-b", &at, "-t", "t4", "-K:"]), lines)
        .await
        .unwrap();
    assert!(ok, "{err}");
    // The first run starts from the beginning (nothing is committed); the second from the
    // group's committed offsets (kcat's `-o` in -G mode would seek past them).
    let group = |a: &str, from_beginning: bool| {
        let mut v = args(&["-b", a, "-G", "kgroup", "-e", "-q"]);
        if from_beginning {
            v.extend(args(&["-o", "beginning"]));
        }
        v.push("t4".into());
        v
    };
    let (ok, out, err) = kcat_async(group(&at, true), String::new()).await.unwrap();
    assert!(ok, "{err}");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..80).map(|i| format!("value-{i}")).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every record of every partition, once");
    let committed = client.committed_offsets("kgroup").await.unwrap();
    let ends: Vec<(u32, u64)> = client
        .describe("t4")
        .await
        .unwrap()
        .iter()
        .map(|d| (d.partition.partition, d.high_watermark.get()))
        .collect();
    for (p, end) in &ends {
        assert_eq!(
            committed.get(&("t4".to_string(), *p)).map(|o| o.get()),
            Some(*end),
            "kcat committed partition {p} to its end"
        );
    }
    // Two more records; the next run, through another broker, reads only them.
    let (ok, _, err) = kcat_async(
        args(&["-P", "-b", &at, "-t", "t4"]),
        "late-1\nlate-2\n".into(),
    )
    .await
    .unwrap();
    assert!(ok, "{err}");
    let (ok, out, err) = kcat_async(group(&kafka[2].to_string(), false), String::new())
        .await
        .unwrap();
    assert!(ok, "{err}");
    let mut late: Vec<&str> = out.lines().collect();
    late.sort_unstable();
    assert_eq!(late, ["late-1", "late-2"]);
    drop(client);
    drop(brokers);
}

/// An idempotent Kafka producer (librdkafka's `enable.idempotence`: InitProducerId, then
/// sequence-numbered batches) writes 10,000 records while the partition's leader is SIGKILLed
/// part way: every record is in the log exactly once (its resends after the election were
/// answered from the producer table, not written again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_kafka_producer_loses_and_duplicates_nothing_across_a_leader_kill() {
    let Some(kcat) = kcat() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("idem", 1, 3).await.unwrap();
    let leader = client.describe("idem").await.unwrap()[0].leader.unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = kafka[follower as usize - 1].to_string();
    let mut producer = Command::new(kcat)
        .args([
            "-P",
            "-b",
            &at,
            "-t",
            "idem",
            "-X",
            "enable.idempotence=true",
            "-X",
            "linger.ms=5",
            "-X",
            "message.timeout.ms=60000",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kcat");
    let mut stdin = producer.stdin.take().unwrap();
    // Lines in ten rounds; the leader dies after the third.
    for round in 0..10u32 {
        let lines: String = (0..1000)
            .map(|i| format!("r-{}\n", round * 1000 + i))
            .collect();
        stdin.write_all(lines.as_bytes()).unwrap();
        stdin.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if round == 2 {
            drop(brokers[leader as usize - 1].take());
        }
    }
    drop(stdin);
    let out = tokio::task::spawn_blocking(move || producer.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, consumed, err) = tokio::task::spawn_blocking(move || {
        run(
            kcat,
            &["-C", "-b", &at, "-t", "idem", "-o", "beginning", "-e", "-q"],
            "",
        )
    })
    .await
    .unwrap();
    assert!(ok, "{err}");
    let mut seen = std::collections::BTreeMap::<u32, u32>::new();
    for line in consumed.lines() {
        let n: u32 = line.strip_prefix("r-").unwrap().parse().unwrap();
        *seen.entry(n).or_default() += 1;
    }
    let lost: Vec<u32> = (0..10_000).filter(|n| !seen.contains_key(n)).collect();
    let twice: Vec<(&u32, &u32)> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(
        lost.is_empty(),
        "lost {} records, first {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        twice.is_empty(),
        "written twice: {:?}",
        &twice[..twice.len().min(5)]
    );
    drop(client);
    drop(brokers);
}

/// Python's Kafka clients, if installed (`.ci/run` installs kafka-python and
/// confluent-kafka from PyPI): required in CI, skipped elsewhere.
fn python_clients() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import kafka, confluent_kafka"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "kafka-python and confluent-kafka are not installed (.ci/run installs them)"
        );
        eprintln!("kafka-python or confluent-kafka is not installed: skipped");
    }
    found
}

/// Runs one of `tests/kafka_clients/`'s scripts (bounded by `timeout`, 120 s).
async fn python(script: &str, args: Vec<String>) -> (bool, String, String) {
    let path = format!(
        "{}/tests/kafka_clients/{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    tokio::task::spawn_blocking(move || {
        let out = Command::new("timeout")
            .args(["120", "python3", &path])
            .args(&args)
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

/// The seed walkthrough with kafka-python: produce through a follower, consume from the
/// beginning through each broker, SIGKILL the leader, produce again, consume both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_runs_the_seed_walkthrough_through_a_follower() {
    if !python_clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("email.send", 1, 3).await.unwrap();
    let leader = client.describe("email.send").await.unwrap()[0]
        .leader
        .unwrap();
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let at = kafka[follower as usize - 1].to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let (ok, out, err) = python(
        "kafka_python.py",
        s(&["produce", &at, "email.send", "follower-message-1"]),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "0");
    for k in &kafka {
        let (ok, out, err) = python(
            "kafka_python.py",
            s(&["consume", &k.to_string(), "email.send"]),
        )
        .await;
        assert!(ok, "{err}");
        assert_eq!(out, "follower-message-1\n", "through {k}");
    }
    drop(brokers[leader as usize - 1].take());
    let (ok, out, err) = python(
        "kafka_python.py",
        s(&["produce", &at, "email.send", "follower-message-2"]),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1");
    let (ok, out, err) = python("kafka_python.py", s(&["consume", &at, "email.send"])).await;
    assert!(ok, "{err}");
    assert_eq!(out, "follower-message-1\nfollower-message-2\n");

    drop(client);
    drop(brokers);
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
    tokio::time::sleep(Duration::from_millis(400)).await;
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

/// A Kafka Fetch's answer stays within the request's `max_bytes` (Kafka's fetch.max.bytes):
/// the first partition with records is answered whole, the others with their high watermark
/// and no records; the client asks again for those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_fetch_answer_stays_within_the_requests_max_bytes() {
    use bytes::{Buf, BufMut, BytesMut};
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{
        ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("wide", 4, 3).await.unwrap();
    for p in 0..4 {
        let batch: Vec<replog::Record> = (0..256)
            .map(|_| replog::Record::new(vec![7u8; 1024]))
            .collect();
        client.send("wide", p, &batch).await.unwrap();
    }
    let leader = client.describe("wide").await.unwrap()[0].leader.unwrap();
    // Every partition's leader answers for its own; ask the leader of partition 0 for all
    // four (those it does not lead it answers from its replica: committed records either way).
    let at = kafka[leader as usize - 1];
    let version = 11;
    let mut request = FetchRequest::default();
    request.max_wait_ms = 0;
    request.min_bytes = 1;
    request.max_bytes = 300 << 10;
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    let mut topic = FetchTopic::default();
    topic.topic = TopicName(StrBytes::from_static_str("wide"));
    for p in 0..4 {
        let mut fp = FetchPartition::default();
        fp.partition = p;
        fp.fetch_offset = 0;
        fp.partition_max_bytes = 1 << 20;
        topic.partitions.push(fp);
    }
    request.topics.push(topic);
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = 5;
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ApiKey::Fetch.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut framed = BytesMut::new();
    framed.put_i32(body.len() as i32);
    framed.extend_from_slice(&body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match tokio::net::TcpStream::connect(at).await {
            Ok(s) => break s,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    s.write_all(&framed).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let len = (&len[..]).get_i32() as usize;
    assert!(
        len < 400 << 10,
        "an answer of {len} bytes for a max_bytes of 300 KiB"
    );
    let mut answer = vec![0u8; len];
    s.read_exact(&mut answer).await.unwrap();
    let mut answer = bytes::Bytes::from(answer);
    let h = ResponseHeader::decode(&mut answer, ApiKey::Fetch.response_header_version(version))
        .unwrap();
    assert_eq!(h.correlation_id, 5);
    let response = FetchResponse::decode(&mut answer, version).unwrap();
    let partitions = &response.responses[0].partitions;
    let with_records = partitions
        .iter()
        .filter(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))
        .count();
    assert_eq!(with_records, 1, "one partition's records fit");
    assert!(
        partitions.iter().all(|p| p.high_watermark == 256),
        "every mark is given"
    );
    drop(client);
    drop(brokers);
}
