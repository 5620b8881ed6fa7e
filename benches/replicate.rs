//! Replication cost: appends to a three-node cluster in one process, next to the
//! same appends on a local `PartitionLog`, measured in the same run so that every replicated
//! figure can be stated as a ratio of a local one.
//!
//! Run: `cargo bench --bench replicate`; then `python3 benches/report.py` prints records/s.
//!
//! - `replicate/{size}/batch100/inflight{1,64}/{fsync,replicated}`: a fresh three-node cluster
//!   on 127.0.0.1 per case (durability is a node setting), one topic with one partition;
//!   one iteration is one committed batch of 100 records. With in-flight 64, 64 appends are
//!   kept outstanding on the leader (a sliding window of spawned tasks).
//! - `local/{size}/batch100/{fsync,nosync}`: `PartitionLog::append` of the same batch, with
//!   `flush` after each (compare with `fsync`) or without (compare with `replicated`).
//!
//! - `produce/100B/{node_append_batch100_inflight64,producer_all_outstanding}/{replicated,fsync}`:
//!   a cluster whose topic has three partitions, as in `kafka_targets`, taking 100 B records
//!   either as batches of 100 through `Node::append` on partition 0's leader (64 in flight),
//!   or one record at a time through `Producer` (batching by size and linger, over the three
//!   partitions) and `Client` over loopback, every record of an iteration sent before the
//!   first is awaited (about 26 MB). The ratio is the client's cost. One iteration is
//!   [`PRODUCE_RECORDS`] records either way (throughput, not the latency of a burst): the
//!   `fsync` figure of `Producer` is what `cargo run --release --example kafka_targets`
//!   reports as `Producer` in part 1 (100 B).
//!
//! With `REPLOG_BENCH_LOUD=1` in the environment the brokers' partitions never go quiet, as
//! before quiet partitions existed; runs with and without it, in turn, tell what quiet costs
//! the hot path.
//!
//! For every replicated case the latency of each append during the measurement phase (the
//! criterion samples, not the warm-up) is recorded, and its p50/p99 are printed after the
//! case, prefixed `latency`. A case excluded by a criterion filter neither runs nor prints.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use replog::{
    Client, ClientConfig, Durability, LocalCluster, LogConfig, Node, PartitionLog, Producer,
    ProducerConfig, Record,
};
use support::{group, timed_local_appends};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

mod support;

const TOPIC: &str = "bench";
const SIZES: [(usize, &str); 2] = [(100, "100B"), (1024, "1KiB")];
const BATCH: usize = 100;
const IN_FLIGHT: [usize; 2] = [1, 64];
const SAMPLE_SIZE: usize = 10;
const LEADER_WAIT: Duration = Duration::from_secs(10);
/// Set (to anything) in the environment, the brokers' partitions never go quiet
/// (`quiesce_after: None`): to measure what quiet partitions cost the hot path, run the bench
/// with and without it.
const LOUD: &str = "REPLOG_BENCH_LOUD";
/// Records one iteration of the produce bench sends, all of them outstanding at once for
/// `Producer`: a whole number of batches of 100, about as many as `kafka_targets` sends in
/// part 1 (262,144, all outstanding). With an iteration of one batch of 100, criterion sized
/// samples by wall time, which includes an untimed `sync(2)` per sample: on a disk where that
/// takes seconds each sample held one iteration, and the case measured the latency of a
/// burst of 100 records, not throughput. (With 10,000 sends outstanding, about four 256 KiB
/// batches, the producer was bound by its own window: each batch waited for the one before
/// it to fill.)
const PRODUCE_RECORDS: u64 = 262_100;
/// Partitions of the produce bench's topic, as in `kafka_targets`: `Producer` spreads its
/// records over them (the `Node::append` case writes to partition 0 only).
const PRODUCE_PARTITIONS: u32 = 3;
/// Retention of the produce bench's partitions.
const PRODUCE_RETENTION_BYTES: u64 = 256 << 20;

fn records(value_len: usize, n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record::new(vec![(i % 251) as u8; value_len]))
        .collect()
}

fn log_config() -> LogConfig {
    let mut log = LogConfig::default();
    log.segment_bytes = 64 << 20;
    log
}

/// Three nodes in one process ([`LocalCluster`]), each with its own data directory under one
/// tempdir.
struct Cluster {
    cluster: LocalCluster,
    /// Partition 0's leader as last seen; another broker once a write is refused.
    leader: parking_lot::Mutex<Arc<Node>>,
    /// Every broker, to find a new leader among.
    nodes: Vec<Arc<Node>>,
    /// Writes a leader refused because it no longer led (see [`append_on_leader`]).
    leader_changes: std::sync::atomic::AtomicU64,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three brokers with one topic of `partitions`; with `retention_bytes`, each
    /// applies it twice a second.
    async fn start(
        durability: Durability,
        retention_bytes: Option<u64>,
        partitions: u32,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = LocalCluster::start(3, dir.path(), |c| {
            c.topics = vec![(TOPIC.into(), partitions)];
            c.heartbeat_interval = Duration::from_millis(100);
            c.election_timeout = Duration::from_millis(1000);
            c.durability = durability;
            c.log = log_config();
            c.log.retention_bytes = retention_bytes;
            if retention_bytes.is_some() {
                c.retention_check_interval = Duration::from_millis(500);
            }
            if std::env::var_os(LOUD).is_some() {
                c.quiesce_after = None;
            }
        })
        .await
        .expect("LocalCluster::start");
        let leaders = cluster
            .wait_for_leaders(TOPIC, partitions, LEADER_WAIT)
            .await
            .expect("a leader");
        let leader = cluster.shared(leaders[0]).expect("the leader runs");
        let nodes = (1..=3).filter_map(|id| cluster.shared(id)).collect();
        Cluster {
            cluster,
            leader: parking_lot::Mutex::new(leader),
            nodes,
            leader_changes: Default::default(),
            _dir: dir,
        }
    }

    /// How many writes a broker refused since the last call because it no longer led.
    fn take_leader_changes(&self) -> u64 {
        self.leader_changes
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Shuts the cluster down, once no task holds it, saying first if the leadership moved
    /// during `case`.
    fn shutdown(self: Arc<Self>, rt: &Runtime, case: &str) {
        let changes = self.take_leader_changes();
        if changes > 0 {
            println!(
                "leader change during {case}: {changes} writes refused by a broker that no \
                 longer led, resent to the new leader"
            );
        }
        let Ok(this) = Arc::try_unwrap(self) else {
            panic!("a task still holds the cluster");
        };
        drop(this.leader);
        drop(this.nodes);
        rt.block_on(this.cluster.shutdown()).expect("shutdown");
    }
}

/// Appends `batch` to partition 0 on its leader. A broker that no longer leads (the
/// leadership moved during the run) is counted, and the write goes to the broker its refusal
/// names, or to whichever broker leads once the election is over: the bench reports the
/// change instead of stopping. Panics only if no broker takes the write within 30 s.
async fn append_on_leader(cluster: &Cluster, batch: &[Record]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    // Bounded by the deadline.
    loop {
        let leader = Arc::clone(&cluster.leader.lock());
        match leader.append(TOPIC, 0, batch).await {
            Ok(info) => {
                black_box(info);
                return;
            }
            Err(replog::Error::NotLeader { leader: hint, .. }) if Instant::now() < deadline => {
                cluster
                    .leader_changes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let named = hint.map(|h| h.node_id).or_else(|| {
                    cluster
                        .nodes
                        .iter()
                        .find(|n| n.status(TOPIC, 0).is_ok_and(|s| s.leader == Some(n.id())))
                        .map(|n| n.id())
                });
                match named.and_then(|id| cluster.nodes.iter().find(|n| n.id() == id)) {
                    Some(next) => *cluster.leader.lock() = Arc::clone(next),
                    // No leader yet: an election runs.
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            Err(e) => panic!("append: {e}"),
        }
    }
}

/// Appends `iters` batches to the leader with up to `in_flight` outstanding, and returns the
/// wall time until the last one is committed, plus each append's latency (spawn to commit).
async fn timed_appends(
    cluster: &Arc<Cluster>,
    batch: &Arc<Vec<Record>>,
    iters: u64,
    in_flight: usize,
) -> (Duration, Vec<Duration>) {
    let mut latencies = Vec::with_capacity(iters as usize);
    let mut tasks = JoinSet::new();
    let spawn = |tasks: &mut JoinSet<Duration>| {
        let cluster = Arc::clone(cluster);
        let batch = Arc::clone(batch);
        // From the spawn, so that time the task waits for a worker counts as latency too.
        let t = Instant::now();
        tasks.spawn(async move {
            append_on_leader(&cluster, &batch).await;
            t.elapsed()
        });
    };
    let start = Instant::now();
    let mut started = 0u64;
    while started < iters && tasks.len() < in_flight {
        spawn(&mut tasks);
        started += 1;
    }
    while let Some(done) = tasks.join_next().await {
        latencies.push(done.expect("append task"));
        if started < iters {
            spawn(&mut tasks);
            started += 1;
        }
    }
    (start.elapsed(), latencies)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn replicate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut g = c.benchmark_group("replicate");
    // A 2 s warm-up: a single stall (segment roll, writeback) in a 1 s warm-up can make
    // criterion estimate an iteration at a second and fall back to one iteration per sample.
    g.sample_size(SAMPLE_SIZE)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(BATCH as u64));
    for (durability, label) in [
        (Durability::Fsync, "fsync"),
        (Durability::Replicated, "replicated"),
    ] {
        for (value_len, size) in SIZES {
            for in_flight in IN_FLIGHT {
                let name = format!("{size}/batch{BATCH}/inflight{in_flight}/{label}");
                let batch = Arc::new(records(value_len, BATCH));
                // Started lazily, so that a case a filter excludes starts no cluster.
                let cluster: RefCell<Option<Arc<Cluster>>> = RefCell::new(None);
                // Latencies per call of the routine; the last SAMPLE_SIZE calls are the samples.
                let calls: RefCell<Vec<Vec<Duration>>> = RefCell::new(Vec::new());
                g.bench_function(&name, |b| {
                    b.iter_custom(|iters| {
                        let mut cluster = cluster.borrow_mut();
                        let cluster = cluster
                            .get_or_insert_with(|| start_cluster(&rt, durability, None, 1, &batch));
                        let (elapsed, latencies) =
                            rt.block_on(timed_appends(cluster, &batch, iters, in_flight));
                        calls.borrow_mut().push(latencies);
                        elapsed
                    });
                });
                if let Some(cluster) = cluster.into_inner() {
                    cluster.shutdown(&rt, &format!("replicate/{name}"));
                }
                let calls = calls.into_inner();
                let skip = calls.len().saturating_sub(SAMPLE_SIZE);
                let mut sorted: Vec<Duration> = calls.into_iter().skip(skip).flatten().collect();
                if !sorted.is_empty() {
                    sorted.sort_unstable();
                    println!(
                        "latency replicate/{name}: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} appends of {BATCH} records)",
                        percentile(&sorted, 50.0).as_secs_f64() * 1e6,
                        percentile(&sorted, 99.0).as_secs_f64() * 1e6,
                        sorted[sorted.len() - 1].as_secs_f64() * 1e6,
                        sorted.len(),
                    );
                }
            }
        }
    }
    g.finish();
}

/// Starts a cluster and commits a few batches, so that the leader's first entries (and the
/// followers' connections) are behind it before anything is timed.
fn start_cluster(
    rt: &Runtime,
    durability: Durability,
    retention_bytes: Option<u64>,
    partitions: u32,
    batch: &Arc<Vec<Record>>,
) -> Arc<Cluster> {
    rt.block_on(async {
        let cluster = Arc::new(Cluster::start(durability, retention_bytes, partitions).await);
        timed_appends(&cluster, batch, 20, 1).await;
        cluster
    })
}

fn local(c: &mut Criterion) {
    let mut g = group(c, "local", SAMPLE_SIZE, 3);
    g.throughput(Throughput::Elements(BATCH as u64));
    for sync in [true, false] {
        for (value_len, size) in SIZES {
            let batch = records(value_len, BATCH);
            let dir = tempfile::tempdir().expect("tempdir");
            let log = PartitionLog::open(dir.path(), log_config()).expect("open log");
            let name = format!(
                "{size}/batch{BATCH}/{}",
                if sync { "fsync" } else { "nosync" }
            );
            g.bench_function(name, |b| {
                b.iter_custom(|iters| timed_local_appends(&log, &batch, iters, sync));
            });
            log.close().expect("close log");
        }
    }
    g.finish();
}

/// Sends `iters * PRODUCE_RECORDS` records one at a time through `producer`, keeping up to
/// `outstanding` sends in flight (awaited oldest first, as an application that keeps its
/// records' futures in order would), and returns the wall time until the last is
/// acknowledged.
async fn timed_produce(
    producer: &Producer,
    value_len: usize,
    iters: u64,
    outstanding: usize,
) -> Duration {
    let total = iters * PRODUCE_RECORDS;
    let value = bytes::Bytes::from(vec![7u8; value_len]);
    let mut pending = std::collections::VecDeque::with_capacity(outstanding);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        while sent < total && pending.len() < outstanding {
            pending.push_back(producer.send(TOPIC, Record::new(value.clone())));
            sent += 1;
        }
        match pending.pop_front() {
            Some(oldest) => {
                black_box(oldest.await.expect("produce"));
            }
            None => break,
        }
    }
    start.elapsed()
}

/// Writes back every dirty page of the machine (`sync(2)`), outside the timed part of a
/// sample. Without a sync of its own `Replicated` mode leaves hundreds of MiB dirty, and the
/// kernel throttles whichever case happens to run when its writeback limit is reached: the
/// second of two cases measured the first one's writeback (runs swung by 3x).
fn settle_disk() {
    rustix::fs::sync();
}

/// Producing through `Producer` and `Client` over loopback, against `Node::append` on the
/// leader in the same cluster and run: records/s of both, so that the client's cost is a
/// ratio. One iteration is [`PRODUCE_RECORDS`] records either way, and every sample the same
/// number of iterations (flat sampling); each sample starts on a settled disk.
fn produce(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut g = group(c, "produce", SAMPLE_SIZE, 3);
    g.sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(PRODUCE_RECORDS));
    let batches_per_iter = PRODUCE_RECORDS / BATCH as u64;
    for (durability, label) in [
        (Durability::Replicated, "replicated"),
        (Durability::Fsync, "fsync"),
    ] {
        let batch = Arc::new(records(100, BATCH));
        // Each case gets a cluster of its own, started empty, whose logs retention keeps
        // under 256 MiB: sharing one let the second case run on a page cache the first had
        // filled with gigabytes (same-run ratios swung from 0.5 to 0.7).
        let start = || {
            let retention = Some(PRODUCE_RETENTION_BYTES);
            start_cluster(&rt, durability, retention, PRODUCE_PARTITIONS, &batch)
        };
        let cluster: RefCell<Option<Arc<Cluster>>> = RefCell::new(None);
        g.bench_function(
            format!("100B/node_append_batch100_inflight64/{label}"),
            |b| {
                b.iter_custom(|iters| {
                    let mut cluster = cluster.borrow_mut();
                    let cluster = cluster.get_or_insert_with(start);
                    settle_disk();
                    let batches = iters * batches_per_iter;
                    rt.block_on(timed_appends(cluster, &batch, batches, 64)).0
                });
            },
        );
        if let Some(cluster) = cluster.take() {
            cluster.shutdown(
                &rt,
                &format!("produce/100B/node_append_batch100_inflight64/{label}"),
            );
        }
        let producer: RefCell<Option<(Arc<Client>, Producer)>> = RefCell::new(None);
        g.bench_function(format!("100B/producer_all_outstanding/{label}"), |b| {
            b.iter_custom(|iters| {
                let mut cluster = cluster.borrow_mut();
                let cluster = cluster.get_or_insert_with(start);
                let mut producer = producer.borrow_mut();
                let (_, producer) = producer.get_or_insert_with(|| {
                    rt.block_on(async {
                        let client = Arc::new(
                            Client::connect(&cluster.cluster.addrs(), ClientConfig::default())
                                .await
                                .expect("connect"),
                        );
                        let producer =
                            Producer::new(Arc::clone(&client), ProducerConfig::default());
                        (client, producer)
                    })
                });
                settle_disk();
                let all = PRODUCE_RECORDS as usize;
                rt.block_on(timed_produce(producer, 100, iters, all))
            });
        });
        drop(producer);
        if let Some(cluster) = cluster.into_inner() {
            cluster.shutdown(
                &rt,
                &format!("produce/100B/producer_all_outstanding/{label}"),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, replicate, local, produce);
criterion_main!(benches);
