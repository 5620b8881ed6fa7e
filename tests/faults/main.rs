//! Seeded fault schedules: in-process clusters over loopback TCP, concurrent idempotent
//! producers going through the `Client`, and at random: brokers stopped and restarted (the
//! leader of a partition on purpose, half the time), brokers isolated, links cut one way,
//! messages lost and delayed, and the network healed. Never more brokers impaired at once than
//! a quorum tolerates. Each schedule ends by healing everything, waiting for the replicas to
//! converge, and checking the history against every replica.
//!
//! Every schedule prints its seed; `FAULT_SEED=<seed> cargo test --all-features --test faults
//! replay -- --nocapture` replays one. `FAULT_SCHEDULES` sets how many schedules CI runs per
//! test (default 25, in each of two tests); the ignored `soak` test runs `FAULT_SOAK` (default 1000).
//! `FAULT_BIG_SCHEDULES` (default 2) and `FAULT_BIG_MIB` (default 64) size the schedules at real
//! record and batch sizes.
//! `FAULT_CPU_HOG=<threads>` runs the schedules beside spinning threads (timing bugs show on a
//! loaded machine). A schedule that fails writes its fault timeline, every operation and every
//! replica's records to the file its panic names.
//!
//! This file holds what the modules share (clusters, producers, the fault timeline);
//! `schedules.rs`, `real_sizes.rs`, `disks.rs`, `deposed.rs`, `load.rs` and `processes.rs` hold
//! the tests. Ports, broker processes and waits come from the fixture all test binaries share,
//! `tests/support`.

mod deposed;
mod disks;
mod history;
mod load;
mod processes;
mod real_sizes;
mod schedules;
#[path = "../support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use history::{Op, Outcome, Replica};
use replog::{
    Client, ClientConfig, Durability, Env, Error, FaultInjector, FaultPoint, LocalCluster,
    LogConfig, NetFaults, Node, Offset, Producer, ProducerConfig, Record,
};
use support::{Broker, CpuHog, process_addrs, wait_until};

tokio::task_local! {
    /// Set by a schedule while it holds its producers back (a quiet period, long enough for
    /// partitions to go quiet): a producer waits before its next send while it is set.
    static HELD: Arc<std::sync::atomic::AtomicBool>;
}

/// Waits while the schedule holds producers back (see [`HELD`]); at most 5 s.
async fn wait_while_held() {
    // Bounded: 500 pauses of 10 ms.
    for _ in 0..500 {
        if !HELD.try_with(|h| h.load(Ordering::SeqCst)).unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const TOPIC: &str = "faults";
const PARTITIONS: u32 = 2;
const PRODUCERS: u32 = 4;

/// xorshift64*: small, seedable, and the same everywhere.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a schedule did.
#[derive(Debug, Default)]
struct Report {
    stops: usize,
    leader_stops: usize,
    restarts: usize,
    isolations: usize,
    one_way_cuts: usize,
    lossy_periods: usize,
    /// Periods the producers were held back, and replicas found quiet, and dormant, at their
    /// ends (summed).
    quiet_periods: usize,
    quiet_replicas: usize,
    dormant_replicas: usize,
    heals: usize,
    /// Stops that were power losses (`Replicated` schedules): unsynced writes taken away.
    power_losses: usize,
    /// Bytes the power losses took away.
    bytes_lost: u64,
    summary: history::Summary,
}

struct Cluster {
    dir: tempfile::TempDir,
    addrs: Vec<SocketAddr>,
    local: LocalCluster,
    net: Arc<NetFaults>,
    /// Each broker's disk faults (shared by its partitions' logs).
    disks: Vec<Arc<FaultInjector>>,
    /// Brokers cut off (wholly or one way) by the current network faults.
    impaired: Vec<u64>,
    /// How many power losses happened so far; producers note it when they send.
    power_losses: Arc<AtomicU64>,
    /// Per partition, the brokers hosting a replica.
    replicas: Vec<Vec<u64>>,
}

impl Cluster {
    async fn start(n: usize, durability: Durability) -> Cluster {
        Cluster::start_with(n, durability, None).await
    }

    /// [`start`](Self::start); with `created: Some(factor)`, the brokers start without topics
    /// and the topic is created through the metadata Raft group with `factor` replicas per
    /// partition.
    async fn start_with(n: usize, durability: Durability, created: Option<u32>) -> Cluster {
        let mut log = LogConfig::default();
        log.segment_bytes = 256 << 10;
        log.record_bytes_max = 16 << 10;
        log.batch_bytes_max = 64 << 10;
        Cluster::start_sized(n, durability, created, log).await
    }

    /// [`start_with`](Self::start_with), the brokers' logs configured as `log`.
    async fn start_sized(
        n: usize,
        durability: Durability,
        created: Option<u32>,
        log: LogConfig,
    ) -> Cluster {
        let listeners: Vec<_> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let net = NetFaults::new();
        let disks: Vec<Arc<FaultInjector>> = (0..n).map(|_| FaultInjector::new()).collect();
        let local = LocalCluster::start_in(
            listeners,
            dir.path(),
            |c| {
                if created.is_none() {
                    c.topics = vec![(TOPIC.into(), PARTITIONS)];
                }
                c.heartbeat_interval = Duration::from_millis(100);
                c.election_timeout = Duration::from_millis(500);
                c.request_timeout = Duration::from_millis(2000);
                // Partitions go quiet between the producers' writes and while brokers are down
                // or cut off, so the schedules lose, delay and reorder quiet offers and
                // liveness heartbeats too, and wake quiet partitions on writes and on deaths.
                c.quiesce_after = Some(Duration::from_millis(150));
                // And quiet partitions drop their Raft members at once (the next half-second
                // tick): the schedules' writes, deaths, cuts and votes wake dormant ones too.
                c.dormant_after = Some(Duration::ZERO);
                c.durability = durability;
                c.log = log.clone();
            },
            |id| {
                Env::default()
                    .with_disk_faults(Arc::clone(&disks[id as usize - 1]))
                    .with_net_faults(Arc::clone(&net))
            },
        )
        .await
        .unwrap();
        let mut cluster = Cluster {
            dir,
            addrs: local.addrs(),
            local,
            net,
            disks,
            impaired: Vec::new(),
            power_losses: Arc::new(AtomicU64::new(0)),
            replicas: vec![(1..=n as u64).collect(); PARTITIONS as usize],
        };
        if let Some(factor) = created {
            // Generous timeouts: two metadata syncs per broker under a loaded machine can
            // outlast a producer's one-second request timeout, and a retry then meets the
            // topic its first attempt created (an indeterminate outcome, as it should be).
            let mut config = ClientConfig::default();
            config.request_timeout = Duration::from_millis(10_000);
            config.delivery_timeout = Duration::from_millis(30_000);
            let client = Client::connect(&cluster.addrs, config).await.unwrap();
            client
                .create_topic(TOPIC, PARTITIONS, factor)
                .await
                .unwrap();
            let described = client.describe(TOPIC).await.unwrap();
            cluster.replicas = described.into_iter().map(|d| d.replicas).collect();
        }
        cluster
    }

    /// Broker `id`, unless it is stopped.
    fn node(&self, id: u64) -> Option<&Node> {
        self.local.node(id)
    }

    fn live(&self) -> Vec<u64> {
        self.local.nodes().map(Node::id).collect()
    }

    fn down(&self) -> Vec<u64> {
        (1..=self.addrs.len() as u64)
            .filter(|id| self.node(*id).is_none())
            .collect()
    }

    async fn stop(&mut self, id: u64) {
        self.local.stop(id).await.unwrap();
    }

    /// Stops broker `id` as a power loss would: its logs lose every write not yet synced.
    /// Returns the bytes lost.
    async fn lose_power(&mut self, id: u64) -> u64 {
        if self.node(id).is_none() {
            return 0;
        }
        let disk = &self.disks[id as usize - 1];
        let loss = disk.lose_power();
        // Sends from here on were not in flight when the power went.
        self.power_losses.fetch_add(1, Ordering::SeqCst);
        // Its last flush fails: the machine is off.
        let _ = self.local.stop(id).await;
        let lost = loss.apply().unwrap();
        disk.clear();
        lost
    }

    /// Starts broker `id` again (a no-op if it runs).
    async fn restart(&mut self, id: u64) {
        // A stopped broker's directory can stay locked while its last syncs end: seconds on a
        // machine whose other tests sync too.
        let what = format!("broker {id} to start again");
        wait_until(Duration::from_secs(30), &what, async || {
            self.local.restart(id).await
        })
        .await
    }

    /// The leader of `partition` as some live broker sees it.
    fn leader(&self, partition: u32) -> Option<u64> {
        self.local
            .nodes()
            .find_map(|n| n.status(TOPIC, partition).ok()?.leader)
    }

    /// Waits until every live replica of every partition has the same high watermark, equal to
    /// its log end (nothing uncommitted left), under one leader.
    async fn converge(&self, limit: Duration) {
        wait_until(limit, "every replica to converge", async || {
            (0..PARTITIONS).all(|p| {
                // A restarted broker starts the replicas of a created topic a moment later.
                let Some(status) = self
                    .hosts(p)
                    .map(|n| n.status(TOPIC, p).ok())
                    .collect::<Option<Vec<_>>>()
                else {
                    return false;
                };
                let first = &status[0];
                first.leader.is_some()
                    && status.iter().all(|s| {
                        s.leader == first.leader
                            && s.high_watermark == first.high_watermark
                            && s.log_end == first.high_watermark
                    })
            })
        })
        .await
    }

    /// Every broker's address, and every live replica's status: for a failed schedule's report.
    fn dump(&self) -> String {
        let mut out = format!("addresses {:?}", self.addrs);
        for node in self.local.nodes() {
            for p in 0..PARTITIONS {
                out.push_str(&format!(
                    "\n  broker {} partition {p}: {:?}",
                    node.id(),
                    node.status(TOPIC, p)
                ));
            }
        }
        out
    }

    /// The live brokers hosting a replica of `partition`.
    fn hosts(&self, partition: u32) -> impl Iterator<Item = &Node> {
        let replicas = &self.replicas[partition as usize];
        self.local
            .nodes()
            .filter(move |n| replicas.contains(&n.id()))
    }

    /// Every record of every replica.
    fn read_all(&self) -> Vec<Replica> {
        let mut out = Vec::new();
        for partition in 0..PARTITIONS {
            for node in self.hosts(partition) {
                let mut records = Vec::new();
                let mut next = node.status(TOPIC, partition).unwrap().log_start;
                // Bounded: every pass moves `next` forward or ends.
                loop {
                    let batches = node.read(TOPIC, partition, next, 1 << 20).unwrap();
                    if batches.is_empty() {
                        break;
                    }
                    for b in batches {
                        for (o, r) in b.records() {
                            if o >= next {
                                records.push((o.get(), r.value.to_vec()));
                                next = Offset(o.get() + 1);
                            }
                        }
                    }
                }
                out.push(Replica {
                    node: node.id(),
                    partition,
                    records,
                });
            }
        }
        out
    }

    async fn shutdown(self) {
        self.local.shutdown().await.unwrap();
    }
}

/// A producer's client (short timeouts, so faults show), retried while the brokers start.
async fn producer_client(addrs: &[SocketAddr], producer: u32) -> Client {
    let mut config = ClientConfig::default();
    config.request_timeout = Duration::from_millis(1000);
    config.delivery_timeout = Duration::from_millis(4000);
    let what = format!("producer {producer} to connect");
    let addrs = addrs.to_vec();
    wait_until(Duration::from_secs(30), &what, async move || {
        Client::connect(&addrs, config.clone()).await
    })
    .await
}

/// What a failed send means for the history: the client reports `Timeout` only for a send
/// that was never applied; any other error leaves the outcome unknown.
fn outcome_of_error(e: &Error) -> Outcome {
    match e {
        Error::Timeout { .. } => Outcome::Fail,
        _ => Outcome::Unknown,
    }
}

/// One producer: `count` sends of one record each, one at a time, to partitions it picks at
/// random; every outcome recorded.
async fn produce(
    addrs: Vec<SocketAddr>,
    producer: u32,
    count: u64,
    seed: u64,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    produce_until(addrs, producer, count, seed, || false, losses).await
}

/// [`produce`], stopping early once `stop` says so (asked before each send).
async fn produce_until(
    addrs: Vec<SocketAddr>,
    producer: u32,
    count: u64,
    seed: u64,
    stop: impl Fn() -> bool,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    let mut rng = Rng::new(seed ^ u64::from(producer) << 32);
    let mut ops = Vec::new();
    let client = producer_client(&addrs, producer).await;
    for n in 0..count {
        if stop() {
            break;
        }
        wait_while_held().await;
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let record = Record::new(Op::payload(producer, n));
        let sent_after = losses.load(Ordering::SeqCst);
        let sent = client.send(TOPIC, partition, &[record]).await;
        let offset = sent.map(|d| d.base_offset.get());
        ops.push(sent_op(producer, n, partition, offset, sent_after));
    }
    ops
}

/// The history entry of one send (`sent_after`: the power losses before it was sent).
fn sent_op(
    producer: u32,
    n: u64,
    partition: u32,
    offset: Result<u64, Error>,
    sent_after: u64,
) -> (Op, u64) {
    let outcome = match offset {
        Ok(offset) => Outcome::Ok { offset },
        Err(e) => outcome_of_error(&e),
    };
    let op = Op {
        producer,
        n,
        partition,
        outcome,
    };
    (op, sent_after)
}

/// A pipelined producer: `count` records through [`Producer`] (batching, Kafka's key
/// partitioner), up to `window` outstanding, each record keyed so that it goes to a partition
/// chosen at random. Its records of one partition must land in the order it sent them.
async fn produce_pipelined(
    addrs: Vec<SocketAddr>,
    producer: u32,
    count: u64,
    seed: u64,
    window: usize,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    let mut rng = Rng::new(seed ^ u64::from(producer) << 32);
    let client = Arc::new(producer_client(&addrs, producer).await);
    let mut pconfig = ProducerConfig::default();
    pconfig.linger = Duration::from_millis(2);
    let sender = Producer::new(client, pconfig);
    // Keys that Kafka's partitioner sends to each partition.
    let keys: Vec<String> = (0..PARTITIONS)
        .map(|p| {
            (0u32..)
                .map(|k| format!("key-{k}"))
                .find(|k| replog::partitioner::partition_for_key(k.as_bytes(), PARTITIONS) == p)
                .unwrap()
        })
        .collect();
    let mut pending = std::collections::VecDeque::new();
    let mut ops = Vec::new();
    for n in 0..count {
        wait_while_held().await;
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let record =
            Record::new(Op::payload(producer, n)).with_key(keys[partition as usize].clone());
        let sent_after = losses.load(Ordering::SeqCst);
        pending.push_back((n, partition, sent_after, sender.send(TOPIC, record)));
        while pending.len() > window || (n + 1 == count && !pending.is_empty()) {
            let (n, partition, sent_after, sent) = pending.pop_front().unwrap();
            let offset = sent.await.map(|meta| {
                assert_eq!(meta.partition, partition);
                meta.offset.get()
            });
            ops.push(sent_op(producer, n, partition, offset, sent_after));
        }
    }
    ops
}

/// What a schedule did to the cluster, and when.
struct Timeline {
    started: Instant,
    lines: Vec<String>,
}

impl Timeline {
    fn new(started: Instant) -> Timeline {
        Timeline {
            started,
            lines: Vec::new(),
        }
    }

    fn note(&mut self, what: String) {
        let ms = self.started.elapsed().as_millis();
        self.lines.push(format!("{ms:>7} ms  {what}"));
    }
}

/// A `replog node` process of a cluster with this binary's topic configured.
fn spawn_process(id: u64, addrs: &[SocketAddr], dir: &std::path::Path) -> Broker {
    let topic = format!("{TOPIC}:{PARTITIONS}");
    Broker::spawn(id, addrs, dir, &["--topic", &topic])
}

/// Appends `records` to partition 0 on its leader (never `not`), retrying while there is none
/// (at most 20 s). Returns the leader and where the batch landed.
async fn append_on_leader(
    cluster: &Cluster,
    records: &[Record],
    not: Option<u64>,
) -> (u64, replog::AppendInfo) {
    wait_until(
        Duration::from_secs(20),
        "a leader to take the write",
        async || {
            let l = cluster.leader(0).filter(|l| Some(*l) != not)?;
            let info = cluster.node(l)?.append(TOPIC, 0, records).await.ok()?;
            Some((l, info))
        },
    )
    .await
}

/// The leader of `partition`, waiting (at most 10 s) for one.
async fn wait_leader_of(cluster: &Cluster, partition: u32) -> u64 {
    wait_until(Duration::from_secs(10), "a leader", async || {
        cluster.leader(partition)
    })
    .await
}

/// Writes everything needed to understand a failed schedule (the fault timeline, every
/// operation and its outcome, every replica's records) to a file, and returns its path.
fn write_history(
    test: &str,
    seed: u64,
    timeline: &Timeline,
    ops: &[Op],
    replicas: &[Replica],
    violations: &[history::Violation],
) -> std::path::PathBuf {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "seed {seed}\n\n# violations");
    for v in violations {
        let _ = writeln!(out, "{v:?}");
    }
    let _ = writeln!(out, "\n# faults");
    for line in &timeline.lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "\n# operations (producer, n, partition, outcome)");
    for op in ops {
        let _ = writeln!(
            out,
            "{} {} {} {:?}",
            op.producer, op.n, op.partition, op.outcome
        );
    }
    let _ = writeln!(out, "\n# replicas (broker, partition: offset=payload ...)");
    for r in replicas {
        let _ = write!(out, "broker {} partition {}:", r.node, r.partition);
        for (offset, payload) in &r.records {
            let _ = write!(out, " {offset}={}", String::from_utf8_lossy(payload));
        }
        let _ = writeln!(out);
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-histories");
    let path = dir.join(format!("{test}-seed-{seed}.txt"));
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, out)) {
        Ok(()) => path,
        Err(e) => std::path::PathBuf::from(format!("(could not write {}: {e})", path.display())),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
