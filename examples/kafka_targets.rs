//! The Kafka listener's targets, each measured in one run and reported as a ratio
//! to a floor measured in the same run (these machines are shared and noisy). Three brokers in
//! this process (`Fsync`), each with a Kafka listener; Kafka's own client is `kcat`.
//!
//! 1. `kcat -P -l` of a file of 100 B lines and of 1 KiB lines through a follower's address
//!    (librdkafka's batching), in records/s, as a ratio of a `Producer` sending the same
//!    records in process, on a runtime of its own as another process would (each side warmed
//!    up with a tenth of the records, then four rounds, the sides in turn), and of `replog
//!    produce` piped the same file through the same follower (the process from its start, for
//!    both CLIs); beside it, what is kcat's and not the broker's: its own CPU a round (a
//!    process on the brokers' cores) and its rate net of a one-line run's time (its start-up,
//!    metadata, connections, one commit and exit); the CPU per record of each side (the
//!    brokers' and the `Producer`'s threads', told apart, then the brokers' while kcat writes,
//!    and kcat's); and the ratio of the brokers' CPU a record through the two doors, which is
//!    the doors' ratio where each client has cores of its own;
//! 2. `kcat -C -e` reading a committed partition of 1 KiB records from the beginning, in
//!    records/s, as a ratio of a `Consumer` reading it: a partition written by `Producer` and
//!    one written by kcat (both Kafka batches, served as stored: FORMAT.md §6.4); and,
//!    to tell the broker from kcat, the same Kafka fetches by a Rust client that decodes every
//!    record (CRC-32C included), on one connection as the `Consumer` reads and fetching ahead
//!    as it does (the next fetch in flight while the last answer decodes), both warmed up by
//!    one untimed read and then timed over six rounds, in turn; and the same fetches read
//!    for their batch headers alone (what the broker's Kafka door costs, without the Rust
//!    decoder's). The readers run on a runtime of their own, as another process would, so
//!    that the brokers' CPU a record under each is told from the reader's: both doors send
//!    these batches as stored, and the ratio of the brokers' CPU a record through the two is
//!    the doors' ratio, whatever each reader's decoding costs;
//! 3. a Kafka client that connects to a follower, asks for metadata, connects to the leader
//!    and produces one record (acks=all): the time to its ack, p50 and p99;
//! 4. a kafka-python consumer assigned six partitions while one record every 100 ms goes to
//!    one partition at a time: the time from send to poll, p50 and p99 per partition (needs
//!    `python3` with kafka-python);
//! 5. TLS against plaintext: two three-broker clusters side by side, one whose Kafka listeners
//!    serve SSL (certificates from `DevCertificates`) and one PLAINTEXT; in three rounds,
//!    `kcat -P -l` of 1 KiB lines through a follower (acks=all) and the Rust Kafka fetch loop
//!    of part 2 reading them back from the leader, on each cluster in turn; records/s and the
//!    TLS/plaintext ratio of the rounds together; and, as the floor those ratios stand on,
//!    256 MiB streamed one way through TLS (rustls, as the brokers run it) and through plain
//!    TCP on loopback.
//!
//! Run: `cargo build --release && cargo run --release --example kafka_targets` (about two
//! minutes; needs `kcat` on the PATH, and for part 1's `replog produce` the `replog` binary
//! beside the example's directory, which `cargo build --release` puts there). Parts named
//! after `--` run alone: `cargo run --release --example kafka_targets -- 2 4`. With
//! `own-cores` among them (`-- 1 2 own-cores`), parts 1 and 2 run the brokers on one CPU and
//! their clients (the `Producer`'s and the readers' runtimes, kcat, `replog produce`) on
//! another, as clients on other machines would: their ratios then compare what each door lets
//! the brokers' core do, not what each client takes from the brokers' cores. The other parts
//! run their clients in the brokers' runtime, so there they would share the brokers' one CPU.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use replog::{
    Client, ClientConfig, Consumer, ConsumerConfig, LocalCluster, NodeId, Record, StartAt,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/process.rs"]
mod process;
use process::{
    children_cpu_seconds, client_command, cpu_seconds, pin_client_thread, split_cores,
    threads_cpu_seconds,
};

/// Rounds of part 1: the two sides compared take turns, each round in the other order.
const ROUNDS: usize = 4;
/// Rounds of part 2, whose reads take a few tenths of a second each.
const FETCH_ROUNDS: usize = 6;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// What one side of a comparison took over its rounds: the time its runs counted, and the CPU
/// seconds meanwhile of the brokers (this process's less the client's threads') and of the
/// client's threads (named as their runtime's `thread_name` set them).
#[derive(Default)]
struct Spent {
    time: Duration,
    brokers: f64,
    client: f64,
}

/// [`Spent`] per record: records/s, and µs of CPU a record of the brokers and of the client.
struct PerRecord {
    rate: f64,
    brokers: f64,
    client: f64,
}

impl Spent {
    /// Runs `run` (which returns the time it counts) and adds what it took, the threads whose
    /// name starts with `client` counted as the client's.
    async fn add(
        &mut self,
        client: &str,
        run: impl std::future::Future<Output = replog::Result<Duration>>,
    ) -> replog::Result<()> {
        let (cpu, own) = (cpu_seconds(), threads_cpu_seconds(client));
        let took = run.await?;
        let client = threads_cpu_seconds(client) - own;
        self.time += took;
        self.client += client;
        self.brokers += cpu_seconds() - cpu - client;
        Ok(())
    }

    /// Over `records` in all.
    fn per(&self, records: u64) -> PerRecord {
        let records = records as f64;
        PerRecord {
            rate: records / self.time.as_secs_f64(),
            brokers: self.brokers * 1e6 / records,
            client: self.client * 1e6 / records,
        }
    }
}

/// Three brokers with Kafka listeners; the Kafka address of each.
async fn cluster(
    dir: &std::path::Path,
    topics: Vec<(String, u32)>,
) -> replog::Result<(LocalCluster, BTreeMap<NodeId, SocketAddr>)> {
    cluster_with(dir, topics, None).await
}

/// [`cluster`]; with `certs` (a directory `DevCertificates::write_to` wrote), the Kafka
/// listeners serve SSL with the brokers' certificates there.
async fn cluster_with(
    dir: &std::path::Path,
    topics: Vec<(String, u32)>,
    certs: Option<std::path::PathBuf>,
) -> replog::Result<(LocalCluster, BTreeMap<NodeId, SocketAddr>)> {
    let kafka: BTreeMap<NodeId, SocketAddr> = (1..=3)
        .map(|id| {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            Ok((id, l.local_addr()?))
        })
        .collect::<std::io::Result<_>>()?;
    let peers = kafka.clone();
    let cluster = LocalCluster::start(3, dir, move |c| {
        c.topics = topics.clone();
        c.kafka_listen = peers.get(&c.id).copied();
        c.kafka_peers = peers.iter().map(|(id, a)| (*id, a.into())).collect();
        if let Some(certs) = &certs {
            c.tls = Some(replog::DevCertificates::broker_config(certs, c.id));
            c.kafka_security_protocol = replog::KafkaSecurityProtocol::Ssl;
        }
    })
    .await?;
    Ok((cluster, kafka))
}

/// A broker that does not lead partition 0 of `topic`.
async fn follower(client: &Client, topic: &str) -> replog::Result<NodeId> {
    let leader = client.describe(topic).await?[0].leader.unwrap_or(1);
    Ok((1..=3).find(|id| *id != leader).unwrap_or(2))
}

/// Runs `program args` with `input` on stdin; (wall time from spawn, stdout bytes, success).
fn run_timed(
    program: &std::path::Path,
    args: &[&str],
    input: Option<&[u8]>,
) -> (Duration, usize, bool) {
    use std::io::{Read, Write};
    let t = Instant::now();
    let mut child = match client_command(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            println!("   could not run {}: {e}", program.display());
            return (Duration::ZERO, 0, false);
        }
    };
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        let _ = stdin.write_all(input);
    }
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut out);
    }
    let ok = child.wait().is_ok_and(|s| s.success());
    (t.elapsed(), out.len(), ok)
}

/// 1. A file of `lines` lines of `size` bytes: Producer, `replog produce`, `kcat -P -l`.
async fn produce_rates(size: usize, lines: usize) -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let topics = ["in-process", "native-cli", "kcat"];
    let (cluster, kafka) = cluster(
        dir.path(),
        topics.iter().map(|t| (t.to_string(), 3)).collect(),
    )
    .await?;
    for t in topics {
        cluster
            .wait_for_leaders(t, 3, Duration::from_secs(30))
            .await?;
    }
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    let line = "x".repeat(size - 1);
    let producer = ProducerSide::start(&cluster.addrs()).await?;
    // Untimed: a tenth of the records first, so that the figure is the producer's steady rate
    // (what the CLIs are compared to, and what `cargo bench --bench replicate -- produce/`
    // measures), not the cost of the first batches on a cluster that has just formed.
    producer.send_all(lines / 10, &line).await?;
    let file = dir.path().join("lines.txt");
    let input: String = (0..lines).map(|_| format!("{line}\n")).collect();
    std::fs::write(&file, &input)?;
    let warm_file = dir.path().join("warm.txt");
    std::fs::write(&warm_file, &input[..input.len() / 10])?;
    let via = follower(&client, "kcat").await?;
    let kcat_run = |path: std::path::PathBuf| {
        let at = kafka[&via].to_string();
        tokio::task::spawn_blocking(move || {
            let path = path.display().to_string();
            run_timed(
                std::path::Path::new("kcat"),
                &["-P", "-b", &at, "-t", "kcat", "-l", &path, "-X", "acks=all"],
                None,
            )
        })
    };
    // kcat warmed up as the Producer was: a tenth of the records first, untimed.
    kcat_run(warm_file).await.map_err(std::io::Error::other)?;
    // What each kcat round spends outside the records: the median of three runs of one line
    // (process start, metadata, connections, one commit, linger and exit).
    let one_line = dir.path().join("one.txt");
    std::fs::write(&one_line, format!("{line}\n"))?;
    let mut startups = Vec::new();
    for _ in 0..3 {
        startups.push(
            kcat_run(one_line.clone())
                .await
                .map_err(std::io::Error::other)?
                .0,
        );
    }
    startups.sort();
    let startup = startups[1];
    let children_cpu_before = children_cpu_seconds();
    // The two sides in turn, each round in the other order, timed as sums of durations, with
    // this process's CPU on each: the brokers' apart from the `Producer`'s threads' (idle
    // while kcat writes, nearly; kcat is a process of its own).
    let (mut sides, mut ok) = ([Spent::default(), Spent::default()], true);
    for round in 0..ROUNDS {
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                let run = async {
                    let t = Instant::now();
                    producer.send_all(lines, &line).await?;
                    Ok(t.elapsed())
                };
                sides[0].add(PRODUCER_THREADS, run).await?;
            } else {
                let run = async {
                    let (took, _, done) = kcat_run(file.clone())
                        .await
                        .map_err(std::io::Error::other)?;
                    ok &= done;
                    Ok(took)
                };
                sides[1].add(PRODUCER_THREADS, run).await?;
            }
        }
    }
    let kcat_cpu = (children_cpu_seconds() - children_cpu_before) / ROUNDS as f64;
    let records = (ROUNDS * lines) as u64;
    let [under_producer, under_kcat] = [&sides[0], &sides[1]].map(|side| side.per(records));
    let in_process = under_producer.rate;
    producer.close().await;
    let replog_bin = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.parent()?.join("replog")))
        .filter(|b| b.exists());
    let native = match &replog_bin {
        Some(bin) => {
            let server = cluster.addrs()[via as usize - 1].to_string();
            let bin = bin.clone();
            let input = input.clone();
            let (took, _, ok) = tokio::task::spawn_blocking(move || {
                run_timed(
                    &bin,
                    &[
                        "produce",
                        "--bootstrap-server",
                        &server,
                        "--topic",
                        "native-cli",
                    ],
                    Some(input.as_bytes()),
                )
            })
            .await
            .map_err(std::io::Error::other)?;
            ok.then(|| lines as f64 / took.as_secs_f64())
        }
        None => None,
    };
    let written: u64 = {
        let mut n = 0;
        for s in client.describe("kcat").await? {
            n += s.high_watermark.get();
        }
        n
    };
    let kcat = under_kcat.rate;
    println!(
        "1. {lines} lines of {size} B through follower {via}, {ROUNDS} rounds each side in \
         turn: Producer {in_process:.0} records/s, \
         replog produce {}, kcat -P -l {kcat:.0} records/s ({written} written, ok {ok}): \
         kcat/Producer {:.2}, kcat/replog produce {}",
        native.map_or("skipped".to_string(), |n| format!("{n:.0} records/s")),
        kcat / in_process,
        native.map_or("-".to_string(), |n| format!("{:.2}", kcat / n)),
    );
    // Not the broker's: kcat is a process of its own on the brokers' cores, started per round.
    let net = records as f64 / (sides[1].time - startup * ROUNDS as u32).as_secs_f64();
    println!(
        "   kcat's own: {kcat_cpu:.2} s CPU a round; a one-line run {:.1} ms; net of that: \
         {net:.0} records/s, kcat/Producer {:.2}",
        startup.as_secs_f64() * 1e3,
        net / in_process,
    );
    let (brokers_native, brokers_kafka) = (under_producer.brokers, under_kcat.brokers);
    println!(
        "   CPU per record: brokers {brokers_native:.2} µs and Producer {:.2} µs under the \
         Producer; brokers {brokers_kafka:.2} µs and kcat {:.2} µs under kcat",
        under_producer.client,
        kcat_cpu * 1e6 / lines as f64,
    );
    // Where each client has cores of its own, the brokers' work bounds the rate: what a
    // record costs them through each door is the doors' ratio there.
    println!(
        "   the brokers' CPU a record through the Kafka door / through the native door: {:.2} \
         (with clients off the brokers' cores, the Kafka door's rate is the inverse of this \
         times the native one's)",
        brokers_kafka / brokers_native,
    );
    drop(client);
    cluster.shutdown().await
}

/// Names the threads of the runtime part 1's `Producer` runs on.
const PRODUCER_THREADS: &str = "producer";

/// Part 1's `Producer`, with its client, on a runtime of its own (threads named
/// [`PRODUCER_THREADS`]) as another process would run it: the OS schedules its threads beside
/// the brokers', and its CPU is told from theirs.
struct ProducerSide {
    runtime: OwnRuntime,
    producer: Arc<replog::Producer>,
}

/// A runtime of its own that lets its threads go when dropped, on an error's way out too
/// (dropping a `Runtime` inside another one's task panics).
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.0 {
            Some(runtime) => runtime.spawn(task),
            None => unreachable!("the runtime is taken only when dropped"),
        }
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl OwnRuntime {
    /// Runs `task` on this runtime and waits for it.
    async fn run<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = replog::Result<T>> + Send + 'static,
    ) -> replog::Result<T> {
        self.spawn(task).await.map_err(std::io::Error::other)?
    }

    /// Two worker threads named `name`, on the clients' CPU where `own-cores` set one.
    fn start(name: &str) -> std::io::Result<OwnRuntime> {
        Ok(OwnRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(name)
                .on_thread_start(pin_client_thread)
                .enable_all()
                .build()?,
        )))
    }
}

impl ProducerSide {
    /// A `Producer` of default config connected to `addrs`.
    async fn start(addrs: &[SocketAddr]) -> replog::Result<ProducerSide> {
        let runtime = OwnRuntime::start(PRODUCER_THREADS)?;
        let addrs = addrs.to_vec();
        let producer = runtime
            .spawn(async move {
                let client = Arc::new(Client::connect(&addrs, ClientConfig::default()).await?);
                Ok::<_, replog::Error>(replog::Producer::new(
                    client,
                    replog::ProducerConfig::default(),
                ))
            })
            .await
            .map_err(std::io::Error::other)??;
        Ok(ProducerSide {
            runtime,
            producer: Arc::new(producer),
        })
    }

    /// Sends `n` records of `line` to the topic `in-process` and waits for every ack.
    async fn send_all(&self, n: usize, line: &str) -> replog::Result<()> {
        let (producer, line) = (Arc::clone(&self.producer), line.to_string());
        self.runtime
            .spawn(async move {
                let sent: Vec<_> = (0..n)
                    .map(|_| producer.send("in-process", Record::new(line.clone())))
                    .collect();
                for s in sent {
                    s.await?;
                }
                Ok::<_, replog::Error>(())
            })
            .await
            .map_err(std::io::Error::other)?
    }

    /// Flushes and closes the `Producer`; its runtime goes with `self`.
    async fn close(self) {
        let ProducerSide { runtime, producer } = self;
        let closed = runtime.spawn(async move {
            // The only handle once every send has been awaited.
            match Arc::try_unwrap(producer) {
                Ok(producer) => producer.close().await,
                Err(_) => eprintln!("   (the Producer is still shared: not closed)"),
            }
        });
        let _ = closed.await;
    }
}

/// Names the threads of the runtime part 2's readers run on.
const READER_THREADS: &str = "reader";

/// 2. A committed partition of `records` 1 KiB records, read by `kcat -C -e` and by a
///    `Consumer`: once written by `Producer`, once by kcat.
async fn fetch_rates(records: usize) -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let (cluster, kafka) =
        cluster(dir.path(), vec![("native".into(), 1), ("kafka".into(), 1)]).await?;
    for t in ["native", "kafka"] {
        cluster
            .wait_for_leaders(t, 1, Duration::from_secs(30))
            .await?;
    }
    let client = Arc::new(Client::connect(&cluster.addrs(), ClientConfig::default()).await?);
    // The readers' own runtime and client, as another process's: their CPU is told from the
    // brokers'.
    let readers = OwnRuntime::start(READER_THREADS)?;
    let addrs = cluster.addrs();
    let reader = readers
        .spawn(async move { Client::connect(&addrs, ClientConfig::default()).await })
        .await
        .map_err(std::io::Error::other)??;
    let reader = Arc::new(reader);
    let batch: Vec<Record> = (0..1000).map(|_| Record::new(vec![b'y'; 1023])).collect();
    for _ in 0..records / 1000 {
        client.send("native", 0, &batch).await?;
    }
    let line = "y".repeat(1023);
    let file = dir.path().join("lines.txt");
    std::fs::write(
        &file,
        (0..records / 1000 * 1000)
            .map(|_| format!("{line}\n"))
            .collect::<String>(),
    )?;
    let at = kafka[&1].to_string();
    let path = file.display().to_string();
    tokio::task::spawn_blocking(move || {
        run_timed(
            std::path::Path::new("kcat"),
            &["-P", "-b", &at, "-t", "kafka", "-p", "0", "-l", &path],
            None,
        )
    })
    .await
    .map_err(std::io::Error::other)?;
    let total = (records / 1000 * 1000) as u64;
    for topic in ["native", "kafka"] {
        let leader = client.describe(topic).await?[0].leader.unwrap_or(1);
        let at = kafka[&leader].to_string();
        let t_topic = topic.to_string();
        let (took, bytes, ok) = tokio::task::spawn_blocking(move || {
            run_timed(
                std::path::Path::new("kcat"),
                &[
                    "-C",
                    "-b",
                    &at,
                    "-t",
                    &t_topic,
                    "-p",
                    "0",
                    "-o",
                    "beginning",
                    "-e",
                    "-q",
                ],
                None,
            )
        })
        .await
        .map_err(std::io::Error::other)?;
        let kcat = total as f64 / took.as_secs_f64();
        // The Consumer and the Kafka fetch loop each read over one connection to the leader,
        // 4 MiB a fetch, on the readers' runtime; each reads the partition once untimed, then
        // they take turns.
        let (client, at) = (&reader, kafka[&leader]);
        let consume = || {
            let client = Arc::clone(client);
            async move {
                let mut config = ConsumerConfig::default();
                config.max_bytes = 4 << 20;
                let mut consumer = Consumer::new(client, config);
                consumer.assign(topic, None, StartAt::Beginning).await?;
                let t = Instant::now();
                let mut n = 0u64;
                while n < total {
                    n += consumer.poll(Duration::from_secs(5)).await?.len() as u64;
                }
                Ok::<_, replog::Error>(t.elapsed())
            }
        };
        // The same Kafka fetches without kcat: a Rust Kafka client decoding every record
        // (CRC-32C included), to tell the broker's Kafka door from kcat's own cost.
        let kafka_fetch = |decode: Decode| async move {
            let rate = raw_kafka_fetch(at, topic, total, decode).await? as f64;
            Ok::<_, replog::Error>(Duration::from_secs_f64(total as f64 / rate.max(1.0)))
        };
        let mut warm = Spent::default();
        warm.add(READER_THREADS, readers.run(consume())).await?;
        warm.add(READER_THREADS, readers.run(kafka_fetch(Decode::Records)))
            .await?;
        let (mut native, mut raw, mut door) =
            (Spent::default(), Spent::default(), Spent::default());
        for round in 0..FETCH_ROUNDS {
            if round % 2 == 0 {
                native.add(READER_THREADS, readers.run(consume())).await?;
                raw.add(READER_THREADS, readers.run(kafka_fetch(Decode::Records)))
                    .await?;
                door.add(READER_THREADS, readers.run(kafka_fetch(Decode::Headers)))
                    .await?;
            } else {
                door.add(READER_THREADS, readers.run(kafka_fetch(Decode::Headers)))
                    .await?;
                raw.add(READER_THREADS, readers.run(kafka_fetch(Decode::Records)))
                    .await?;
                native.add(READER_THREADS, readers.run(consume())).await?;
            }
        }
        let read = FETCH_ROUNDS as u64 * total;
        let (native, raw, door) = (native.per(read), raw.per(read), door.per(read));
        let writer = if topic == "native" {
            "Producer"
        } else {
            "kcat"
        };
        println!(
            "2. {total} records of 1 KiB written by {writer}: kcat -C -e {kcat:.0} records/s \
             ({} lines, ok {ok}), Consumer {:.0} records/s: ratio {:.2}; \
             a Rust Kafka fetch loop {:.0} records/s: ratio {:.2}; the loop reading batch \
             headers only {:.0} records/s ({FETCH_ROUNDS} rounds each, in turn, after one \
             untimed)",
            bytes / 1024,
            native.rate,
            kcat / native.rate,
            raw.rate,
            raw.rate / native.rate,
            door.rate,
        );
        // Both doors send these batches as stored: what a record costs the brokers through
        // each is the doors' ratio, whatever each reader's own decoding costs.
        println!(
            "   CPU a record: brokers {:.3} µs and Consumer {:.3} µs under the Consumer; \
             brokers {:.3} µs and the loop {:.3} µs under the loop ({:.3} µs and {:.3} µs \
             reading headers only); the brokers' CPU a record through the Kafka door / \
             through the native door: {:.2} (headers only {:.2})",
            native.brokers,
            native.client,
            raw.brokers,
            raw.client,
            door.brokers,
            door.client,
            raw.brokers / native.brokers,
            door.brokers / native.brokers,
        );
    }
    drop(reader);
    drop(readers);
    drop(client);
    cluster.shutdown().await
}

/// One Kafka request and its answer on `s` (plaintext or TLS).
async fn call<S: AsyncRead + AsyncWrite + Unpin, Req: Encodable, Resp: Decodable>(
    s: &mut S,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> std::io::Result<Resp> {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 1;
    header.client_id = Some(StrBytes::from_static_str("kafka-targets"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .map_err(std::io::Error::other)?;
    request
        .encode(&mut body, version)
        .map_err(std::io::Error::other)?;
    let mut framed = BytesMut::new();
    framed.put_i32(i32::try_from(body.len()).unwrap_or(i32::MAX));
    framed.extend_from_slice(&body);
    s.write_all(&framed).await?;
    s.flush().await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    // Into spare capacity, as librdkafka reads an answer: no zero-fill first.
    let want = (&len[..]).get_i32().max(0) as usize;
    let mut answer = BytesMut::with_capacity(want);
    let mut unread = (&mut *s).take(want as u64);
    while answer.len() < want {
        if unread.read_buf(&mut answer).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    let mut answer = answer.freeze();
    ResponseHeader::decode(&mut answer, api.response_header_version(version))
        .map_err(std::io::Error::other)?;
    Resp::decode(&mut answer, version).map_err(std::io::Error::other)
}

/// Reads `total` records of partition 0 of `topic` from the beginning with Kafka Fetch
/// requests (v11, 4 MiB per partition, no wait) on one connection, reading what `decode` says;
/// records/s.
async fn raw_kafka_fetch(
    at: SocketAddr,
    topic: &str,
    total: u64,
    decode: Decode,
) -> std::io::Result<u64> {
    let s = TcpStream::connect(at).await?;
    let _ = s.set_nodelay(true);
    fetch_loop(s, topic, total, decode).await
}

/// What the Rust Kafka fetch loop reads of each answer.
#[derive(Clone, Copy, Debug)]
enum Decode {
    /// Every record, CRC-32C included, as a Kafka client hands records on.
    Records,
    /// The batches' headers alone, for the offset to fetch next: what is left is the broker's
    /// cost and the transport's.
    Headers,
}

/// [`raw_kafka_fetch`] over TLS, trusting the CA `tls` trusts.
async fn raw_kafka_fetch_tls(
    at: SocketAddr,
    topic: &str,
    total: u64,
    tls: &tokio_rustls::TlsConnector,
) -> std::io::Result<u64> {
    let s = TcpStream::connect(at).await?;
    let _ = s.set_nodelay(true);
    let name = rustls_pki_types::ServerName::from(at.ip());
    // Read-buffered below rustls (which reads 4 KiB at a time), as the brokers do.
    let s = tokio::io::BufReader::with_capacity(16 << 10, s);
    let s = tls.connect(name, s).await?;
    fetch_loop(s, topic, total, Decode::Records).await
}

/// The offset after the last batch of `records` (Kafka v2 batches back to back), read from
/// the batches' headers alone, as a fetcher that hands the records on undecoded finds where
/// to fetch next; `None` if no whole batch is there.
fn next_fetch_offset(records: &[u8]) -> Option<i64> {
    let (mut at, mut next) = (0usize, None);
    // Bounded by the bytes: each step moves `at` on by a whole batch, or the loop ends.
    while let Some(header) = records.get(at..at + 27) {
        let base = (&header[0..8]).get_i64();
        let length = usize::try_from((&header[8..12]).get_i32()).ok()?;
        let last_delta = i64::from((&header[23..27]).get_i32());
        if records.len() < at + 12 + length {
            break;
        }
        next = Some(base + last_delta + 1);
        at += 12 + length;
    }
    next
}

/// The fetches of [`raw_kafka_fetch`] on `s`, timed from the first; records/s. As the
/// `Consumer` and librdkafka do, the next fetch is in flight while the last answer decodes:
/// a task of its own fetches, and finds the next offset from the batches' headers.
async fn fetch_loop<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut s: S,
    topic: &str,
    total: u64,
    decode: Decode,
) -> std::io::Result<u64> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, FetchResponse};
    use kafka_protocol::records::RecordBatchDecoder;
    let t = Instant::now();
    let (answers, mut fetched) = tokio::sync::mpsc::channel::<bytes::Bytes>(1);
    let topic = topic.to_string();
    let fetcher = tokio::spawn(async move {
        let mut next = 0i64;
        // Bounded by the partition's end: each answer moves `next` on, or the loop ends; and
        // by the decoder, which drops its end of the channel once it has `total` records.
        loop {
            let mut request = FetchRequest::default();
            request.max_wait_ms = 0;
            request.min_bytes = 1;
            request.max_bytes = 50 << 20;
            request.replica_id = kafka_protocol::messages::BrokerId(-1);
            let mut ft = FetchTopic::default();
            ft.topic = TopicName(StrBytes::from_string(topic.clone()));
            let mut fp = FetchPartition::default();
            fp.partition = 0;
            fp.fetch_offset = next;
            fp.partition_max_bytes = 4 << 20;
            ft.partitions.push(fp);
            request.topics.push(ft);
            let answer: FetchResponse = call(&mut s, ApiKey::Fetch, 11, &request).await?;
            let Some(records) = answer.responses[0].partitions[0].records.clone() else {
                break;
            };
            let Some(after) = next_fetch_offset(&records) else {
                break;
            };
            next = after;
            if answers.send(records).await.is_err() {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    });
    let mut n = 0u64;
    let mut next = 0i64;
    while n < total {
        let Some(mut records) = fetched.recv().await else {
            break;
        };
        if let Decode::Headers = decode {
            let after = next_fetch_offset(&records).unwrap_or(next);
            n += u64::try_from(after - next).unwrap_or(0);
            next = after;
            continue;
        }
        let sets = RecordBatchDecoder::decode_all(&mut records).map_err(std::io::Error::other)?;
        for set in sets {
            for r in set.records {
                if r.offset >= next {
                    n += 1;
                    std::hint::black_box(&r.value);
                    next = r.offset + 1;
                }
            }
        }
    }
    let rate = (n as f64 / t.elapsed().as_secs_f64()) as u64;
    drop(fetched);
    fetcher.await.map_err(std::io::Error::other)??;
    Ok(rate)
}

/// 3. Connect to a follower, Metadata, connect to the leader, Produce one record (acks=all).
async fn first_record_latency(n: usize) -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let (cluster, kafka) = cluster(dir.path(), vec![("first".into(), 1)]).await?;
    cluster
        .wait_for_leaders("first", 1, Duration::from_secs(30))
        .await?;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default()).await?;
    let via = kafka[&follower(&client, "first").await?];
    let mut record = KafkaRecord {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 0,
        key: None,
        value: Some(bytes::Bytes::from_static(b"one record")),
        headers: Default::default(),
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut s = TcpStream::connect(via).await?;
        let _ = s.set_nodelay(true);
        let mut metadata = MetadataRequest::default();
        let mut topic = MetadataRequestTopic::default();
        topic.name = Some(TopicName(StrBytes::from_static_str("first")));
        metadata.topics = Some(vec![topic]);
        let m: MetadataResponse = call(&mut s, ApiKey::Metadata, 9, &metadata).await?;
        let leader = m.topics[0].partitions[0].leader_id.0;
        let broker = m
            .brokers
            .iter()
            .find(|b| b.node_id.0 == leader)
            .ok_or_else(|| std::io::Error::other("no leader in the metadata"))?;
        let mut l = TcpStream::connect((broker.host.as_str(), broker.port as u16)).await?;
        let _ = l.set_nodelay(true);
        record.timestamp = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(0);
        let mut batch = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut batch, [&record], &options)
            .map_err(std::io::Error::other)?;
        let mut data = PartitionProduceData::default();
        data.index = 0;
        data.records = Some(batch.freeze());
        let mut t_data = TopicProduceData::default();
        t_data.name = TopicName(StrBytes::from_static_str("first"));
        t_data.partition_data.push(data);
        let mut produce = ProduceRequest::default();
        produce.acks = -1;
        produce.timeout_ms = 10_000;
        produce.topic_data.push(t_data);
        let answer: ProduceResponse = call(&mut l, ApiKey::Produce, 9, &produce).await?;
        let code = answer.responses[0].partition_responses[0].error_code;
        if code != 0 {
            println!("   a produce failed: error {code}");
        }
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "3. connect to a follower + Metadata + connect to the leader + Produce 1 record \
         (acks=all, Fsync), {n} times: p50 {:?}, p99 {:?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99)
    );
    drop(client);
    cluster.shutdown().await
}

/// Part 4: a kafka-python consumer assigned the six partitions of a topic, each partition in
/// turn written one record every 100 ms (`per_partition` records each): the time from the send
/// to the consumer's poll, p50 and p99 per partition. A Fetch's long poll must wake for
/// whichever of its partitions gets a record, not wait out `fetch.max.wait.ms` (500 ms).
async fn consumer_latency(per_partition: usize) -> replog::Result<()> {
    use std::io::BufRead;
    const PARTITIONS: u32 = 6;
    let dir = tempfile::tempdir()?;
    let (cluster, kafka) = cluster(dir.path(), vec![("latency".into(), PARTITIONS)]).await?;
    cluster
        .wait_for_leaders("latency", PARTITIONS, Duration::from_secs(30))
        .await?;
    let client = Client::connect(&cluster.addrs(), ClientConfig::default()).await?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kafka_clients/consumer_latency.py"
    );
    let total = per_partition * PARTITIONS as usize;
    let mut child = Command::new("python3")
        .args([script, &kafka[&1].to_string(), "latency"])
        .args([PARTITIONS.to_string(), total.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    if lines.next().transpose()?.as_deref() != Some("ready") {
        println!("4. kafka-python consumer: did not start (pip install kafka-python)");
        let _ = child.wait();
        return cluster.shutdown().await;
    }
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    for p in 0..PARTITIONS {
        for _ in 0..per_partition {
            let sent = format!("{:.3}", now_ms());
            client.send("latency", p, &[Record::new(sent)]).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let report = tokio::task::spawn_blocking(move || {
        let report = lines.next().transpose();
        let _ = child.wait();
        report
    })
    .await
    .map_err(std::io::Error::other)??
    .unwrap_or_default();
    let latencies: BTreeMap<String, Vec<f64>> = serde_json::from_str(&report)
        .map_err(|e| std::io::Error::other(format!("consumer report {report:?}: {e}")))?;
    println!("4. kafka-python consumer of 6 partitions, one record per 100 ms to one partition:");
    for (p, mut ms) in latencies {
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| {
            ms.get(((ms.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        println!(
            "   partition {p}: {} records, produce->consume p50 {:.1} ms, p99 {:.1} ms",
            ms.len(),
            at(0.5).unwrap_or(f64::NAN),
            at(0.99).unwrap_or(f64::NAN)
        );
    }
    drop(client);
    cluster.shutdown().await
}

/// A TLS client trusting the CA certificate in `ca` (PEM).
fn tls_connector(ca: &std::path::Path) -> std::io::Result<tokio_rustls::TlsConnector> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls_pki_types::CertificateDer::from_pem_file(ca).map_err(std::io::Error::other)?;
    roots.add(ca).map_err(std::io::Error::other)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// One round of part 5 on one cluster: `lines` (a file of 1 KiB lines) written by `kcat -P -l`
/// through a follower into a new topic, then read back by the Rust fetch loop from the
/// leader; (produce records/s, fetch records/s).
async fn tls_round(
    cluster: &LocalCluster,
    kafka: &BTreeMap<NodeId, SocketAddr>,
    topic: &str,
    lines: (&std::path::Path, u64),
    tls: Option<(&std::path::Path, &tokio_rustls::TlsConnector)>,
) -> replog::Result<(f64, f64)> {
    let client = Client::connect(&cluster.addrs(), ClientConfig::default()).await?;
    client.create_topic(topic, 1, 3).await?;
    cluster
        .wait_for_leaders(topic, 1, Duration::from_secs(30))
        .await?;
    let via = follower(&client, topic).await?;
    let mut args: Vec<String> = ["-P", "-b", &kafka[&via].to_string(), "-t", topic, "-p", "0"]
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(["-l".into(), lines.0.display().to_string()]);
    args.extend(["-X".into(), "acks=all".into()]);
    if let Some((ca, _)) = tls {
        args.extend(["-X".into(), "security.protocol=SSL".into()]);
        args.extend(["-X".into(), format!("ssl.ca.location={}", ca.display())]);
    }
    let (took, _, ok) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_timed(std::path::Path::new("kcat"), &args, None)
    })
    .await
    .map_err(std::io::Error::other)?;
    let written = client.describe(topic).await?[0].high_watermark.get();
    if !ok || written != lines.1 {
        println!("   kcat wrote {written} of {} records (ok {ok})", lines.1);
    }
    let produced = written as f64 / took.as_secs_f64();
    let leader = client.describe(topic).await?[0].leader.unwrap_or(1);
    let fetched = match tls {
        Some((_, connector)) => {
            raw_kafka_fetch_tls(kafka[&leader], topic, written, connector).await?
        }
        None => raw_kafka_fetch(kafka[&leader], topic, written, Decode::Records).await?,
    };
    Ok((produced, fetched as f64))
}

/// MB/s of `total` bytes written in 4 MiB pieces by one end of a loopback connection and read
/// by the other, through TLS if `tls` gives a server and a client (the server's end read-
/// buffered, as the brokers' are), else through plain TCP.
async fn stream_rate(
    total: usize,
    tls: Option<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)>,
) -> std::io::Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    let acceptor = tls.as_ref().map(|(a, _)| a.clone());
    let piece = vec![7u8; 4 << 20];
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut s: Box<dyn AsyncWrite + Send + Unpin> = match acceptor {
            Some(a) => Box::new(
                a.accept(tokio::io::BufReader::with_capacity(16 << 10, s))
                    .await?,
            ),
            None => Box::new(s),
        };
        for _ in 0..total / piece.len() {
            s.write_all(&piece).await?;
            s.flush().await?;
        }
        std::io::Result::Ok(())
    });
    let s = TcpStream::connect(at).await?;
    let t = Instant::now();
    let mut s: Box<dyn AsyncRead + Send + Unpin> = match &tls {
        Some((_, c)) => Box::new(
            c.connect(
                at.ip().into(),
                tokio::io::BufReader::with_capacity(16 << 10, s),
            )
            .await?,
        ),
        None => Box::new(s),
    };
    let mut buf = vec![0u8; 4 << 20];
    for _ in 0..total / buf.len() {
        s.read_exact(&mut buf).await?;
    }
    server.await.map_err(std::io::Error::other)??;
    Ok(total as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// A TLS server with broker 1's certificate in `certs` (as `DevCertificates` wrote it).
fn tls_acceptor(certs: &std::path::Path) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    let chain = rustls_pki_types::CertificateDer::pem_file_iter(certs.join("broker-1.pem"))
        .map_err(std::io::Error::other)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(certs.join("broker-1.key"))
        .map_err(std::io::Error::other)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(std::io::Error::other)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// 5. TLS against plaintext through the Kafka door, `rounds` times `records` 1 KiB records.
async fn tls_against_plaintext(records: u64, rounds: usize) -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    replog::DevCertificates::generate(&[1, 2, 3], &["127.0.0.1".to_string()])?.write_to(&certs)?;
    let ca = certs.join("ca.pem");
    let connector = tls_connector(&ca)?;
    let file = dir.path().join("lines.txt");
    let line = "z".repeat(1023);
    std::fs::write(
        &file,
        (0..records)
            .map(|_| format!("{line}\n"))
            .collect::<String>(),
    )?;
    let (plain, plain_kafka) = cluster(&dir.path().join("plain"), Vec::new()).await?;
    let (tls, tls_kafka) =
        cluster_with(&dir.path().join("tls"), Vec::new(), Some(certs.clone())).await?;
    let (mut sums_plain, mut sums_tls) = ((0.0, 0.0), (0.0, 0.0));
    for round in 0..rounds {
        let topic = format!("round-{round}");
        let lines = (file.as_path(), records);
        let p = tls_round(&plain, &plain_kafka, &topic, lines, None).await?;
        let t = tls_round(&tls, &tls_kafka, &topic, lines, Some((&ca, &connector))).await?;
        println!(
            "5. round {round}: produce plaintext {:.0}, TLS {:.0} records/s; fetch plaintext \
             {:.0}, TLS {:.0} records/s",
            p.0, t.0, p.1, t.1
        );
        // Rates averaged as times: records over the rounds' summed durations.
        sums_plain = (sums_plain.0 + 1.0 / p.0, sums_plain.1 + 1.0 / p.1);
        sums_tls = (sums_tls.0 + 1.0 / t.0, sums_tls.1 + 1.0 / t.1);
    }
    println!(
        "5. {rounds} rounds of {records} records of 1 KiB, 3 brokers: TLS/plaintext produce \
         (kcat -P -l, acks=all, through a follower) {:.2}, fetch (Rust Kafka fetch loop from \
         the leader) {:.2}",
        sums_plain.0 / sums_tls.0,
        sums_plain.1 / sums_tls.1
    );
    plain.shutdown().await?;
    tls.shutdown().await?;
    let total = 256 << 20;
    let plain = stream_rate(total, None).await?;
    let tls = stream_rate(total, Some((tls_acceptor(&certs)?, connector))).await?;
    println!(
        "5. the floor: 256 MiB one way on loopback, TCP {plain:.0} MB/s, TLS {tls:.0} MB/s: \
         ratio {:.2}",
        tls / plain
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> replog::Result<()> {
    // The parts named on the command line (`-- 2 4`), or all of them.
    let (modes, asked): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a == "own-cores");
    let part = |n: &str| asked.is_empty() || asked.iter().any(|a| a == n);
    if !modes.is_empty() {
        match split_cores()? {
            Some((brokers, clients)) => println!(
                "own cores: the brokers run on CPU {brokers}, the clients of parts 1 and 2 on CPU {clients}"
            ),
            None => {
                println!("own cores: needs two CPUs and taskset; clients share the brokers' CPUs")
            }
        }
    }
    let kcat = Command::new("kcat").arg("-V").output().is_ok();
    if !kcat {
        println!("kcat is not installed (apt-get install kcat); parts 1 and 2 skipped");
    }
    if kcat && part("1") {
        produce_rates(100, 262_144).await?;
        produce_rates(1024, 65_536).await?;
    }
    if kcat && part("2") {
        fetch_rates(262_144).await?;
    }
    if part("3") {
        first_record_latency(500).await?;
    }
    if part("4") {
        consumer_latency(50).await?;
    }
    if kcat && part("5") {
        tls_against_plaintext(131_072, 3).await?;
    }
    Ok(())
}
