//! The Kafka listener with Kafka's own `kcat` against three `replog node` processes: the seed
//! walkthrough through a follower, a `kcat -G` group beside native members, an idempotent
//! producer across a SIGKILL of the leader; and the helpers every Kafka test shares (process
//! clusters, a Kafka request sent and its answer decoded, batches as a Kafka client encodes
//! them). `.ci/run` installs `kcat` (Debian's package); without it these tests fail in CI and
//! are skipped elsewhere.

// Kafka's wire is big-endian; the crate's own formats are little-endian, which the lint guards.
#![allow(clippy::big_endian_bytes)]

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use replog::{Client, ClientConfig};

use crate::support::wait_until;

/// `kcat`, if installed: required in CI, skipped (with a line saying so) elsewhere.
pub(crate) fn kcat() -> Option<&'static str> {
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
pub(crate) fn run(kcat: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
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
pub(crate) fn cluster(
    dir: &std::path::Path,
) -> (Vec<Option<crate::Broker>>, Vec<SocketAddr>, Vec<SocketAddr>) {
    cluster_with(dir, true)
}

/// [`cluster`]; with `peers`, each broker is given the others' Kafka addresses
/// (`--kafka-peer`), otherwise it learns them from the metadata log, where each registers its
/// own.
pub(crate) fn cluster_with(
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

pub(crate) async fn connect(addrs: &[SocketAddr]) -> Client {
    crate::support::connect(addrs, ClientConfig::default(), Duration::from_secs(30)).await
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
    let what = format!("the follower to name leader {leader}");
    wait_until(Duration::from_secs(30), &what, async || {
        let (ok, out, err) =
            kcat_async(args(&["-L", "-b", &at, "-t", "email.send"]), String::new())
                .await
                .unwrap();
        assert!(ok, "{err}");
        assert!(out.contains("3 brokers"), "{out}");
        if out.contains(&format!("partition 0, leader {leader}, replicas: ")) {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await;

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
    wait_until(
        Duration::from_secs(30),
        "a write after the leader died",
        async || {
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
            if ok { Ok(()) } else { Err(err) }
        },
    )
    .await;
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
        // Pacing the producer's rounds (the leader dies mid-stream): not a wait.
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

/// A connection to a Kafka listener (retried while the broker starts).
pub(crate) async fn kafka_connect(at: SocketAddr) -> tokio::net::TcpStream {
    let what = format!("a Kafka listener at {at}");
    // `move`: the wait runs in spawned tasks too, whose futures must stay `Send`.
    wait_until(Duration::from_secs(30), &what, async move || {
        tokio::net::TcpStream::connect(at).await
    })
    .await
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
pub(crate) async fn kafka_call_on<
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
>(
    s: &mut S,
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
        // A TLS stream sends what it holds once flushed.
        s.flush().await.unwrap();
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
pub(crate) fn produce_request(
    topic: &str,
    records: bytes::Bytes,
) -> kafka_protocol::messages::ProduceRequest {
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
pub(crate) async fn kafka_produce_at_leader(
    client: &Client,
    kafka: &[SocketAddr],
    topic: &str,
    request: &kafka_protocol::messages::ProduceRequest,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    use kafka_protocol::messages::{ApiKey, ProduceResponse};
    let what = format!("a leader of {topic} to take the produce");
    wait_until(Duration::from_secs(30), &what, async || {
        let leader = client.describe(topic).await.unwrap()[0].leader?;
        let (_, answer): (usize, ProduceResponse) =
            kafka_call(kafka[leader as usize - 1], ApiKey::Produce, 9, request).await;
        let p = answer.responses[0].partition_responses[0].clone();
        (p.error_code != 5 && p.error_code != 6).then_some(p)
    })
    .await
}

/// A Kafka producer's batch of `values` (CreateTime stamps, a header, a key on every other
/// record; `None` a null value), compressed with `compression`, as a Kafka client encodes it.
pub(crate) fn kafka_batch(
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
