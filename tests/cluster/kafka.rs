//! The Kafka listener: the seed walkthrough with Kafka's own `kcat`
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
    cluster_with(dir, true)
}

/// [`cluster`]; with `peers`, each broker is given the others' Kafka addresses
/// (`--kafka-peer`), otherwise it learns them from the metadata log, where each registers its
/// own.
fn cluster_with(
    dir: &std::path::Path,
    peers: bool,
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    let addrs = crate::process_addrs(3);
    let kafka = crate::process_addrs(3);
    let peers: Vec<String> = (0..3)
        .filter(|_| peers)
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

/// The seed walkthrough with a Python client (`script`: kafka-python's or confluent-kafka's
/// driver): create the topic through one broker with the client's admin API, describe it
/// through another (Leader / Replicas / Isr), produce through a follower, consume from the
/// beginning through each broker, SIGKILL the leader, produce again through the same address,
/// consume both. Prints what the client printed (the README shows it).
async fn python_seed_walkthrough(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut brokers, _addrs, kafka) = cluster(dir.path());
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let at = |i: usize| kafka[i].to_string();
    let (ok, out, err) = python(script, s(&["create", &at(0), "email.send", "1", "3"])).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "created");
    let (ok, described, err) = python(script, s(&["describe", &at(1), "email.send"])).await;
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
    let (ok, out, err) = python(
        script,
        s(&["produce", &via, "email.send", "follower-message-1"]),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "0");
    for k in &kafka {
        let (ok, out, err) = python(script, s(&["consume", &k.to_string(), "email.send"])).await;
        assert!(ok, "{err}");
        assert_eq!(out, "follower-message-1\n", "through {k}");
    }
    drop(brokers[leader as usize - 1].take());
    let (ok, out, err) = python(
        script,
        s(&["produce", &via, "email.send", "follower-message-2"]),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1");
    let (ok, out, err) = python(script, s(&["consume", &via, "email.send"])).await;
    assert!(ok, "{err}");
    assert_eq!(out, "follower-message-1\nfollower-message-2\n");
    println!("{script} consume after the leader's SIGKILL:\n{out}");
    drop(brokers);
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

/// A connection to a Kafka listener (retried while the broker starts).
async fn kafka_connect(at: SocketAddr) -> tokio::net::TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::net::TcpStream::connect(at).await {
            Ok(s) => return s,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Kafka request as sent: a big-endian length, a header (correlation id 5), the body.
pub(crate) fn kafka_frame<Req: kafka_protocol::protocol::Encodable>(
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    request: &Req,
) -> bytes::BytesMut {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 5;
    header.client_id = Some(StrBytes::from_static_str("replog-test"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut framed = BytesMut::new();
    framed.put_i32(body.len() as i32);
    framed.extend_from_slice(&body);
    framed
}

/// Sends one Kafka request on `s` and reads its answer: the answer frame's length and the
/// decoded response. Kafka's framing: a big-endian length, a header, the body.
async fn kafka_call_on<
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
>(
    s: &mut tokio::net::TcpStream,
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    request: &Req,
) -> (usize, Resp) {
    use bytes::Buf;
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let framed = kafka_frame(api, version, request);
    tokio::time::timeout(Duration::from_secs(30), async {
        s.write_all(&framed).await.unwrap();
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.unwrap();
        let len = (&len[..]).get_i32() as usize;
        let mut answer = vec![0u8; len];
        s.read_exact(&mut answer).await.unwrap();
        let mut answer = bytes::Bytes::from(answer);
        let h = ResponseHeader::decode(&mut answer, api.response_header_version(version)).unwrap();
        assert_eq!(h.correlation_id, 5);
        (len, Resp::decode(&mut answer, version).unwrap())
    })
    .await
    .expect("an answer within 30 s")
}

/// [`kafka_call_on`] a new connection to `at`.
pub(crate) async fn kafka_call<
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
>(
    at: SocketAddr,
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    request: &Req,
) -> (usize, Resp) {
    let mut s = kafka_connect(at).await;
    kafka_call_on(&mut s, api, version, request).await
}

/// A Kafka Fetch's answer stays within the request's `max_bytes` (Kafka's fetch.max.bytes):
/// the first partition with records is answered whole, the others with their high watermark
/// and no records; the client asks again for those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_fetch_answer_stays_within_the_requests_max_bytes() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
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
    let request = fetch_request("wide", 4, 300 << 10);
    // A broker may not host a replica yet (a majority acknowledged the writes): it answers
    // NOT_LEADER_OR_FOLLOWER for it until it does; asked again until every partition answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (len, response) = loop {
        let (len, response): (usize, FetchResponse) =
            kafka_call(at, ApiKey::Fetch, 11, &request).await;
        let marks: Vec<(i64, i16)> = response.responses[0]
            .partitions
            .iter()
            .map(|p| (p.high_watermark, p.error_code))
            .collect();
        if marks.iter().all(|m| *m == (256, 0)) {
            break (len, response);
        }
        assert!(Instant::now() < deadline, "every mark is given: {marks:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        len < 400 << 10,
        "an answer of {len} bytes for a max_bytes of 300 KiB"
    );
    let partitions = &response.responses[0].partitions;
    let with_records = partitions
        .iter()
        .filter(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))
        .count();
    assert_eq!(with_records, 1, "one partition's records fit");
    drop(client);
    drop(brokers);
}

/// A Kafka Fetch request, answered at once, of partitions `0..partitions` of `topic` from
/// offset 0: 1 MiB per partition, `max_bytes` in all.
pub(crate) fn fetch_request(
    topic: &str,
    partitions: i32,
    max_bytes: i32,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut request = FetchRequest::default();
    request.max_wait_ms = 0;
    request.min_bytes = 1;
    request.max_bytes = max_bytes;
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    for p in 0..partitions {
        let mut fp = FetchPartition::default();
        fp.partition = p;
        fp.fetch_offset = 0;
        fp.partition_max_bytes = 1 << 20;
        t.partitions.push(fp);
    }
    request.topics.push(t);
    request
}

/// A Kafka Produce request (acks=all) of `records`, one Kafka record batch, to partition 0 of
/// `topic`.
fn produce_request(topic: &str, records: bytes::Bytes) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut data = PartitionProduceData::default();
    data.index = 0;
    data.records = Some(records);
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data.push(data);
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = 10_000;
    request.topic_data.push(t);
    request
}

/// Produces `request` (one partition, 0, of `topic`) at the partition's leader through the
/// Kafka door, asking again with the leader described anew while the answer is
/// NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE (a leadership settling), as Kafka clients do.
async fn kafka_produce_at_leader(
    client: &Client,
    kafka: &[SocketAddr],
    topic: &str,
    request: &kafka_protocol::messages::ProduceRequest,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    use kafka_protocol::messages::{ApiKey, ProduceResponse};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leader = client.describe(topic).await.unwrap()[0].leader;
        if let Some(leader) = leader {
            let (_, answer): (usize, ProduceResponse) =
                kafka_call(kafka[leader as usize - 1], ApiKey::Produce, 9, request).await;
            let p = answer.responses[0].partition_responses[0].clone();
            if p.error_code != 5 && p.error_code != 6 {
                return p;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader of {topic} took the produce"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Kafka producer's batch of `values` (CreateTime stamps, a header, a key on every other
/// record; `None` a null value), compressed with `compression`, as a Kafka client encodes it.
fn kafka_batch(
    values: &[Option<&str>],
    compression: kafka_protocol::records::Compression,
) -> bytes::Bytes {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<KafkaRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut headers = IndexMap::new();
            headers.insert(
                StrBytes::from_static_str("trace"),
                Some(bytes::Bytes::from(format!("t{i}"))),
            );
            KafkaRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder keeps records in one batch while offset − sequence is constant.
                sequence: i as i32 - 1,
                timestamp: 1_600_000_000_000 + i as i64,
                key: (i % 2 == 0).then(|| bytes::Bytes::from(format!("k{i}"))),
                value: v.map(|v| bytes::Bytes::from(v.to_string())),
                headers,
            }
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}

/// One log, two doors: a Kafka producer's batches (every codec, null values, headers,
/// CreateTime stamps) come back to a Kafka fetch byte for byte as sent, with only the base
/// offset and leader epoch set, and a valid CRC-32C; native batches written between them come
/// back to the same fetch as Kafka batches; a native fetch reads every batch as replog records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_batches_are_served_as_sent_and_both_doors_read_one_log() {
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    use kafka_protocol::records::{Compression, RecordBatchDecoder};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("doors", 1, 3).await.unwrap();
    client
        .wait_ready("doors", Duration::from_secs(20))
        .await
        .unwrap();
    let leader = client.describe("doors").await.unwrap()[0].leader.unwrap();
    let at = kafka[leader as usize - 1];
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut sent = Vec::new();
    let mut expected: Vec<(Option<String>, String)> = Vec::new();
    for (c, codec) in codecs.iter().enumerate() {
        let values = [Some("first"), None, Some("third")];
        let batch = kafka_batch(&values, *codec);
        let request = produce_request("doors", batch.clone());
        let p = kafka_produce_at_leader(&client, &kafka, "doors", &request).await;
        assert_eq!(p.error_code, 0, "{codec:?}");
        assert_eq!(p.base_offset, (c * 4) as i64, "{codec:?}");
        sent.push(batch);
        for (i, v) in values.iter().enumerate() {
            expected.push((
                (i % 2 == 0).then(|| format!("k{i}")),
                v.unwrap_or("").to_string(),
            ));
        }
        // A native batch between the Kafka ones.
        client
            .send("doors", 0, &[replog::Record::new(format!("native-{c}"))])
            .await
            .unwrap();
        expected.push((None, format!("native-{c}")));
    }

    // The Kafka door: the Kafka batches as sent, the native ones converted.
    let request = fetch_request("doors", 1, 1 << 20);
    let (_, answer): (usize, FetchResponse) = kafka_call(at, ApiKey::Fetch, 12, &request).await;
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 20);
    let mut records = partition.records.clone().unwrap();
    let mut batches = Vec::new();
    // Bounded by the answer: each turn consumes one batch.
    while records.len() >= 12 {
        let len = 12 + u32::from_be_bytes(records[8..12].try_into().unwrap()) as usize;
        batches.push(records.split_to(len));
    }
    assert_eq!(batches.len(), 10, "five Kafka batches and five native ones");
    let term = client.describe("doors").await.unwrap()[0].term;
    for (c, codec) in codecs.iter().enumerate() {
        let served = &batches[2 * c];
        assert_eq!(
            served[16..],
            sent[c][16..],
            "{codec:?}: the batch as sent after the base offset and epoch"
        );
        assert_eq!(
            i64::from_be_bytes(served[0..8].try_into().unwrap()),
            (c * 4) as i64
        );
        assert_eq!(
            i32::from_be_bytes(served[12..16].try_into().unwrap()) as u64,
            term,
            "the leader epoch is the Raft term that appended it"
        );
    }
    // Every batch decodes (CRC-32C checked by the decoder) to the records sent, in order.
    let mut got: Vec<(Option<String>, Option<String>, i64)> = Vec::new();
    let mut all = partition.records.clone().unwrap();
    for set in RecordBatchDecoder::decode_all(&mut all).unwrap() {
        for r in set.records {
            got.push((
                r.key.map(|k| String::from_utf8(k.to_vec()).unwrap()),
                r.value.map(|v| String::from_utf8(v.to_vec()).unwrap()),
                r.offset,
            ));
        }
    }
    assert_eq!(got.len(), 20);
    for (i, (key, value, offset)) in got.iter().enumerate() {
        assert_eq!(*offset, i as i64);
        assert_eq!(*key, expected[i].0);
        if i % 4 == 1 {
            assert_eq!(
                *value, None,
                "a null value stays null through the Kafka door"
            );
        } else {
            assert_eq!(value.as_deref(), Some(expected[i].1.as_str()));
        }
    }

    // The native door: every batch as replog records (a null value reads as empty).
    let mut native = Vec::new();
    let mut next = replog::Offset(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while next.get() < 20 {
        assert!(Instant::now() < deadline, "native read stalled at {next}");
        for b in client.fetch("doors", 0, next, 1 << 20, None).await.unwrap() {
            for (o, r) in b.records() {
                if o >= next {
                    native.push((
                        r.key.map(|k| String::from_utf8(k.to_vec()).unwrap()),
                        String::from_utf8(r.value.to_vec()).unwrap(),
                        r.headers.len(),
                    ));
                    next = replog::Offset(o.get() + 1);
                }
            }
        }
    }
    for (i, (key, value, headers)) in native.iter().enumerate() {
        assert_eq!((key, value), (&expected[i].0, &expected[i].1), "offset {i}");
        assert_eq!(*headers, usize::from(i % 4 != 3), "offset {i}");
    }
    drop(client);
    drop(brokers);
}

/// Kafka's admin APIs through a follower: CreateTopics (and its refusals), Metadata with the
/// same Isr from every broker, DescribeConfigs, DescribeCluster, DeleteTopics; a produce to a
/// follower refused with KIP-951's leader and endpoint; OffsetForLeaderEpoch across a leader
/// change; APIs not served answered with their own error on a connection that stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_admin_epoch_and_refusal_apis_answer_as_kafka_does() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    // No --kafka-peer: every broker learns the others' Kafka addresses from the metadata log.
    let (mut brokers, addrs, kafka) = cluster_with(dir.path(), false);
    let client = connect(&addrs).await;
    let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
    for at in &kafka {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, info): (usize, DescribeClusterResponse) = kafka_call(
                *at,
                ApiKey::DescribeCluster,
                1,
                &DescribeClusterRequest::default(),
            )
            .await;
            let mut ports: Vec<u16> = info.brokers.iter().map(|b| b.port as u16).collect();
            ports.sort();
            let mut want: Vec<u16> = kafka.iter().map(|k| k.port()).collect();
            want.sort();
            if ports == want {
                break;
            }
            assert!(Instant::now() < deadline, "{at} knows {ports:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let create = |topic: &str, partitions: i32, factor: i16| {
        let mut t = CreatableTopic::default();
        t.name = name(topic);
        t.num_partitions = partitions;
        t.replication_factor = factor;
        let mut r = CreateTopicsRequest::default();
        r.timeout_ms = 10_000;
        r.topics.push(t);
        r
    };
    // Created through broker 2 (whichever leads the metadata group).
    let (_, answer): (usize, CreateTopicsResponse) =
        kafka_call(kafka[1], ApiKey::CreateTopics, 5, &create("made", 3, 3)).await;
    assert_eq!(answer.topics[0].error_code, 0, "{:?}", answer.topics[0]);
    assert_eq!(answer.topics[0].num_partitions, 3);
    let mut with_config = create("configured", 1, 1);
    let mut c = CreatableTopicConfig::default();
    c.name = StrBytes::from_static_str("retention.ms");
    c.value = Some(StrBytes::from_static_str("1000"));
    with_config.topics[0].configs.push(c);
    let mut validate = create("checked", 2, 3);
    validate.validate_only = true;
    for (request, code, what) in [
        (create("made", 3, 3), 36, "exists"),
        (create("wide", 3, 5), 38, "factor above the brokers"),
        (create("none", 0, 1), 37, "no partitions"),
        (create("bad/name", 1, 1), 17, "bad name"),
        (with_config, 40, "per-topic configs"),
        (validate, 0, "validate only"),
    ] {
        let (_, answer): (usize, CreateTopicsResponse) =
            kafka_call(kafka[0], ApiKey::CreateTopics, 7, &request).await;
        assert_eq!(answer.topics[0].error_code, code, "{what}");
    }
    assert!(
        client.describe("checked").await.is_err(),
        "validate_only creates nothing"
    );
    client
        .wait_ready("made", Duration::from_secs(20))
        .await
        .unwrap();

    // Every broker answers Metadata with the leader and all three replicas in sync.
    let mut metadata = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name("made"));
    metadata.topics = Some(vec![t]);
    for at in &kafka {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, m): (usize, MetadataResponse) =
                kafka_call(*at, ApiKey::Metadata, 9, &metadata).await;
            let ps = &m.topics[0].partitions;
            if ps.len() == 3
                && ps
                    .iter()
                    .all(|p| p.isr_nodes.len() == 3 && p.leader_id.0 > 0)
            {
                break;
            }
            assert!(Instant::now() < deadline, "through {at}: {ps:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // DescribeConfigs of the topic, a key filter, an unknown topic.
    let mut describe = DescribeConfigsRequest::default();
    for (topic, keys) in [
        ("made", None),
        ("made", Some(vec!["retention.ms"])),
        ("gone", None),
    ] {
        let mut res = DescribeConfigsResource::default();
        res.resource_type = 2;
        res.resource_name = StrBytes::from_string(topic.to_string());
        res.configuration_keys =
            keys.map(|k| k.into_iter().map(StrBytes::from_static_str).collect());
        describe.resources.push(res);
    }
    let (_, configs): (usize, DescribeConfigsResponse) =
        kafka_call(kafka[2], ApiKey::DescribeConfigs, 4, &describe).await;
    let names: Vec<&str> = configs.results[0]
        .configs
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(names.contains(&"retention.ms") && names.contains(&"max.message.bytes"));
    assert_eq!(configs.results[1].configs.len(), 1);
    assert_eq!(configs.results[2].error_code, 3);

    let (_, cluster_info): (usize, DescribeClusterResponse) = kafka_call(
        kafka[0],
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    )
    .await;
    assert_eq!(cluster_info.error_code, 0);
    assert_eq!(cluster_info.brokers.len(), 3);

    // A produce to a follower: NOT_LEADER_OR_FOLLOWER with the leader, its term and address.
    let status = client.describe("made").await.unwrap();
    let (leader, term) = (status[0].leader.unwrap(), status[0].term);
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let produce = produce_request(
        "made",
        kafka_batch(&[Some("x")], kafka_protocol::records::Compression::None),
    );
    let (_, refused): (usize, ProduceResponse) =
        kafka_call(kafka[follower as usize - 1], ApiKey::Produce, 10, &produce).await;
    let p = &refused.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 6);
    assert_eq!(p.current_leader.leader_id.0 as u64, leader);
    assert_eq!(p.current_leader.leader_epoch as u64, term);
    let endpoint = &refused.node_endpoints[0];
    assert_eq!(endpoint.node_id.0 as u64, leader);
    assert_eq!(endpoint.port, i32::from(kafka[leader as usize - 1].port()));
    // At the leader it is written.
    let (_, written): (usize, ProduceResponse) =
        kafka_call(kafka[leader as usize - 1], ApiKey::Produce, 10, &produce).await;
    assert_eq!(written.responses[0].partition_responses[0].error_code, 0);

    // OffsetForLeaderEpoch: the current term ends at the high watermark.
    let epoch_request = |epoch: i32, current: i32| {
        let mut p = OffsetForLeaderPartition::default();
        p.partition = 0;
        p.leader_epoch = epoch;
        p.current_leader_epoch = current;
        let mut t = OffsetForLeaderTopic::default();
        t.topic = name("made");
        t.partitions.push(p);
        let mut r = OffsetForLeaderEpochRequest::default();
        r.replica_id = BrokerId(-1);
        r.topics.push(t);
        r
    };
    let epoch_of = |r: &OffsetForLeaderEpochResponse| {
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.leader_epoch, p.end_offset)
    };
    let (_, now): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        kafka[leader as usize - 1],
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, term as i32),
    )
    .await;
    assert_eq!(epoch_of(&now), (0, term as i32, 1));
    let (_, at_follower): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        kafka[follower as usize - 1],
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, -1),
    )
    .await;
    assert_eq!(epoch_of(&at_follower).0, 6, "only the leader answers");
    // The leader is killed; the new one writes in a later term; the old term ends where
    // its records did.
    drop(brokers[leader as usize - 1].take());
    let deadline = Instant::now() + Duration::from_secs(30);
    let (new_leader, new_term) = loop {
        if let Ok(s) = client.describe("made").await
            && let Some(l) = s[0].leader
            && l != leader
        {
            break (l, s[0].term);
        }
        assert!(Instant::now() < deadline, "no new leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(new_term > term);
    client
        .send("made", 0, &[replog::Record::new("later")])
        .await
        .unwrap();
    let at = kafka[new_leader as usize - 1];
    let (_, old): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, new_term as i32),
    )
    .await;
    assert_eq!(
        epoch_of(&old),
        (0, term as i32, 1),
        "term {term} ends after its record"
    );
    let (_, current): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(new_term as i32, new_term as i32),
    )
    .await;
    assert_eq!(epoch_of(&current), (0, new_term as i32, 2));
    // Kafka's answers at the edges: an epoch older than the log is answered with itself and
    // the log start; one above the current term, and the undefined epoch, are undefined.
    for (asked, want) in [
        (0, (0, 0, 0)),
        (new_term as i32 + 5, (0, -1, -1)),
        (-1, (0, -1, -1)),
    ] {
        let (_, edge): (usize, OffsetForLeaderEpochResponse) = kafka_call(
            at,
            ApiKey::OffsetForLeaderEpoch,
            3,
            &epoch_request(asked, -1),
        )
        .await;
        assert_eq!(epoch_of(&edge), want, "epoch {asked}");
    }
    let (_, fenced): (usize, OffsetForLeaderEpochResponse) = kafka_call(
        at,
        ApiKey::OffsetForLeaderEpoch,
        3,
        &epoch_request(term as i32, term as i32),
    )
    .await;
    assert_eq!(epoch_of(&fenced).0, 74, "a stale current epoch is fenced");

    // APIs not served: their own error, and the connection stays open.
    let mut s = kafka_connect(at).await;
    let mut sasl = SaslHandshakeRequest::default();
    sasl.mechanism = StrBytes::from_static_str("PLAIN");
    let (_, answer): (usize, SaslHandshakeResponse) =
        kafka_call_on(&mut s, ApiKey::SaslHandshake, 1, &sasl).await;
    assert_eq!(answer.error_code, 33);
    let (_, answer): (usize, DescribeAclsResponse) = kafka_call_on(
        &mut s,
        ApiKey::DescribeAcls,
        1,
        &DescribeAclsRequest::default(),
    )
    .await;
    assert_eq!(answer.error_code, 35);
    let (_, versions): (usize, ApiVersionsResponse) = kafka_call_on(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(versions.error_code, 0, "the same connection still answers");
    // An admin API not served whose answer names its items: each item refused.
    let mut grow = CreatePartitionsRequest::default();
    let mut topic =
        kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic::default();
    topic.name = name("made");
    topic.count = 6;
    grow.topics.push(topic);
    grow.timeout_ms = 10_000;
    let (_, answer): (usize, CreatePartitionsResponse) =
        kafka_call_on(&mut s, ApiKey::CreatePartitions, 2, &grow).await;
    assert_eq!(answer.results[0].error_code, 35);
    assert_eq!(answer.results[0].name, name("made"));
    let mut delete_groups = DeleteGroupsRequest::default();
    delete_groups.groups_names = vec![GroupId(StrBytes::from_static_str("g"))];
    let (_, answer): (usize, DeleteGroupsResponse) =
        kafka_call_on(&mut s, ApiKey::DeleteGroups, 2, &delete_groups).await;
    assert_eq!(answer.results[0].error_code, 35);
    let (_, answer): (usize, EndTxnResponse) =
        kafka_call_on(&mut s, ApiKey::EndTxn, 3, &EndTxnRequest::default()).await;
    assert_eq!(answer.error_code, 53, "transactions are refused");

    // DeleteTopics: gone from the metadata; an unknown name is UNKNOWN_TOPIC_OR_PARTITION.
    let mut delete = DeleteTopicsRequest::default();
    delete.timeout_ms = 10_000;
    delete.topic_names = vec![name("made"), name("never")];
    // NOT_CONTROLLER while the metadata group elects a leader (its leader may have been the
    // broker killed above): asked again, as admin clients do.
    let deadline = Instant::now() + Duration::from_secs(30);
    let deleted = loop {
        let (_, deleted): (usize, DeleteTopicsResponse) =
            kafka_call(at, ApiKey::DeleteTopics, 4, &delete).await;
        if deleted.responses[0].error_code != 41 {
            break deleted;
        }
        assert!(Instant::now() < deadline, "{deleted:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        deleted.responses[0].error_code, 0,
        "{:?}",
        deleted.responses[0].error_message
    );
    assert_eq!(deleted.responses[1].error_code, 3);
    assert!(client.describe("made").await.is_err());
    drop(client);
    drop(brokers);
}

/// Kafka batches the listener must refuse, each answered `CORRUPT_MESSAGE` with nothing
/// written and the partition still taking writes: a zstd batch that inflates to 64 MiB (past
/// the 1 MiB batch limit; decompression stops there), a flipped byte under the CRC-32C, two
/// batches in one produce, a transactional batch, and bytes that are no batch at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_kafka_batches_are_refused_and_nothing_is_written() {
    use kafka_protocol::records::{
        Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let dir = tempfile::tempdir().unwrap();
    let (brokers, addrs, kafka) = cluster(dir.path());
    let client = connect(&addrs).await;
    client.create_topic("guarded", 1, 3).await.unwrap();
    client
        .wait_ready("guarded", Duration::from_secs(20))
        .await
        .unwrap();
    let produce = |records: bytes::Bytes| produce_request("guarded", records);
    // 32 records of 1 MiB of zeros, zstd: a few KiB on the wire.
    let zeros: Vec<KafkaRecord> = (0..32)
        .map(|i| KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32 - 1,
            timestamp: 0,
            key: None,
            value: Some(bytes::Bytes::from(vec![0u8; 1 << 20])),
            headers: Default::default(),
        })
        .collect();
    let mut bomb = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::Zstd,
    };
    RecordBatchEncoder::encode(&mut bomb, zeros.iter(), &options).unwrap();
    assert!(bomb.len() < 64 << 10, "the bomb is small: {}", bomb.len());
    let good = kafka_batch(&[Some("fine")], Compression::None);
    let mut flipped = good.to_vec();
    *flipped.last_mut().unwrap() ^= 1;
    let mut two = good.to_vec();
    two.extend_from_slice(&good);
    let mut transactional = good.to_vec();
    transactional[22] |= 0x10;
    let crc = crc32c::crc32c(&transactional[21..]);
    transactional[17..21].copy_from_slice(&crc.to_be_bytes());
    for (bytes, code, what) in [
        (bomb.freeze(), 10, "a zstd bomb is MESSAGE_TOO_LARGE"),
        (
            bytes::Bytes::from(flipped),
            2,
            "a flipped byte is CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from(two),
            2,
            "two batches are CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from(transactional),
            2,
            "a transactional batch is CORRUPT_MESSAGE",
        ),
        (
            bytes::Bytes::from_static(b"not a batch at all"),
            2,
            "garbage is CORRUPT_MESSAGE",
        ),
    ] {
        let p = kafka_produce_at_leader(&client, &kafka, "guarded", &produce(bytes)).await;
        assert_eq!(p.error_code, code, "{what}");
    }
    assert_eq!(
        client.describe("guarded").await.unwrap()[0].high_watermark,
        replog::Offset(0),
        "nothing written"
    );
    let p = kafka_produce_at_leader(&client, &kafka, "guarded", &produce(good)).await;
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 0),
        "the partition still takes writes"
    );
    drop(client);
    drop(brokers);
}

/// Requests whose arrays claim more elements than their bytes could hold (2^31 topics in a
/// 14-byte Metadata request killed a broker: the decoder reserved room for them first, 154 GB)
/// are refused, and the broker keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_port_survives_length_claims_it_cannot_hold() {
    use bytes::BufMut;
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (brokers, _addrs, kafka) = cluster(dir.path());
    let at = kafka[0];
    // A request header: api key, version, correlation id, a null client id; `flexible` adds
    // the empty tagged fields of header v2.
    let header = |key: i16, version: i16, flexible: bool| {
        let mut h = bytes::BytesMut::new();
        h.put_i16(key);
        h.put_i16(version);
        h.put_i32(9);
        h.put_i16(-1);
        if flexible {
            h.put_u8(0);
        }
        h
    };
    let huge_varint = [0xff, 0xff, 0xff, 0xff, 0x0f];
    let mut cases: Vec<(&str, bytes::BytesMut)> = Vec::new();
    let mut metadata = header(3, 1, false);
    metadata.put_i32(i32::MAX);
    cases.push(("Metadata v1, 2^31 topics", metadata));
    let mut fetch = header(1, 11, false);
    for v in [-1, 500, 1, 1 << 20] {
        fetch.put_i32(v);
    }
    fetch.put_i8(0);
    fetch.put_i32(0);
    fetch.put_i32(-1);
    fetch.put_i32(i32::MAX);
    cases.push(("Fetch v11, 2^31 topics", fetch));
    let mut produce = header(0, 9, true);
    produce.put_u8(0); // a null transactional id
    produce.put_i16(-1);
    produce.put_i32(1000);
    produce.extend_from_slice(&huge_varint);
    cases.push(("Produce v9, 2^32 topics", produce));
    let mut create = header(19, 5, true);
    create.extend_from_slice(&huge_varint);
    cases.push(("CreateTopics v5, 2^32 topics", create));
    for (what, body) in cases {
        let mut s = kafka_connect(at).await;
        let mut framed = bytes::BytesMut::new();
        framed.put_i32(body.len() as i32);
        framed.extend_from_slice(&body);
        s.write_all(&framed).await.unwrap();
        // Refused: the connection is closed (the request cannot be parsed), promptly.
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer and no close"));
        assert!(matches!(read, Ok(0) | Err(_)), "{what}: {read:?}");
        // The broker is alive and answers the next connection.
        let (_, versions): (usize, ApiVersionsResponse) =
            kafka_call(at, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
        assert_eq!(versions.error_code, 0, "after {what}");
    }
    drop(brokers);
}
