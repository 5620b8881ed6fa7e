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

mod history;
#[path = "../support/ports.rs"]
mod ports;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use history::{Op, Outcome, Replica};
use ports::process_addrs;
use replog::{
    Client, ClientConfig, Durability, Env, Error, FaultInjector, FaultPoint, LocalCluster,
    LogConfig, NetFaults, Node, Offset, Producer, ProducerConfig, Record,
};

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
    /// and the topic is created through the metadata group with `factor` replicas per
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
                c.heartbeat_interval_ms = 100;
                c.election_timeout_ms = 500;
                c.request_timeout_ms = 2000;
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
            config.request_timeout_ms = 10_000;
            config.delivery_timeout_ms = 30_000;
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
        // A stopped broker's directory can stay locked for a moment while its last syncs end.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.local.restart(id).await {
                Ok(()) => return,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("restart of {id} failed ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("broker {id} does not start: {e}"),
            }
        }
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
        let deadline = Instant::now() + limit;
        loop {
            let settled = (0..PARTITIONS).all(|p| {
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
            });
            if settled {
                return;
            }
            assert!(Instant::now() < deadline, "no convergence within {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
    config.request_timeout_ms = 1000;
    config.delivery_timeout_ms = 4000;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(addrs, config.clone()).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < deadline, "producer {producer}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
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
    produce_until(addrs, producer, count, seed, None, losses).await
}

/// [`produce`], stopping early at `until` if given.
async fn produce_until(
    addrs: Vec<SocketAddr>,
    producer: u32,
    count: u64,
    seed: u64,
    until: Option<Instant>,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    let mut rng = Rng::new(seed ^ u64::from(producer) << 32);
    let mut ops = Vec::new();
    let client = producer_client(&addrs, producer).await;
    for n in 0..count {
        if until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
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
    pconfig.linger_ms = 2;
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

/// Runs one schedule and checks its history; panics with the seed on a violation.
async fn schedule(
    seed: u64,
    nodes: usize,
    appends: u64,
    durability: Durability,
    created: Option<u32>,
) -> Report {
    let mut rng = Rng::new(seed);
    let mut cluster = Cluster::start_with(nodes, durability, created).await;
    let mut report = Report::default();
    let per_producer = appends.div_ceil(u64::from(PRODUCERS));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let addrs = cluster.addrs.clone();
            let losses = Arc::clone(&cluster.power_losses);
            // The last producer pipelines through `Producer`; the others send one at a time.
            if p + 1 == PRODUCERS {
                tokio::spawn(produce_pipelined(addrs, p, per_producer, seed, 16, losses))
            } else {
                tokio::spawn(produce(addrs, p, per_producer, seed, losses))
            }
        })
        .collect();
    let tolerated = (nodes - 1) / 2;
    // Faults while the producers run; bounded by the producers' own deadlines.
    let started = Instant::now();
    let mut timeline = Timeline::new(started);
    while !producers.iter().all(|p| p.is_finished()) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "seed {seed}: producers hang"
        );
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        let down = cluster.down();
        let mut impaired = down.clone();
        impaired.extend(cluster.impaired.iter().filter(|id| !down.contains(id)));
        let may_impair = impaired.len() < tolerated;
        let ids: Vec<u64> = (1..=nodes as u64).collect();
        match rng.below(8) {
            0 | 1 if may_impair => {
                let victim = if rng.below(2) == 0 {
                    let p = rng.below(u64::from(PARTITIONS)) as u32;
                    cluster.leader(p)
                } else {
                    None
                };
                report.leader_stops += usize::from(victim.is_some());
                let live: Vec<u64> = cluster
                    .live()
                    .into_iter()
                    .filter(|id| !impaired.contains(id))
                    .collect();
                let victim = victim.unwrap_or_else(|| live[rng.below(live.len() as u64) as usize]);
                // Under `Replicated`, half the stops are power losses. The other brokers
                // converge before the one that lost power returns, and it catches up before
                // the next fault: a second failure inside that window can lose a committed
                // write (the contract allows it; soak seed 1087 found it), which the checker
                // here would count as a loss. The replica that still holds such a write
                // rebuilds itself from the leader: see
                // `a_replica_holding_a_committed_write_the_cluster_lost_rebuilds_from_the_leader`.
                if durability == Durability::Replicated && rng.below(2) == 0 {
                    report.bytes_lost += cluster.lose_power(victim).await;
                    report.power_losses += 1;
                    timeline.note(format!("power loss of {victim}, heal, converge, restart"));
                    cluster.net.heal();
                    cluster.impaired.clear();
                    cluster.converge(Duration::from_secs(30)).await;
                    cluster.restart(victim).await;
                    report.restarts += 1;
                    cluster.converge(Duration::from_secs(30)).await;
                } else {
                    cluster.stop(victim).await;
                    timeline.note(format!("stop {victim}"));
                }
                report.stops += 1;
            }
            2 if may_impair => {
                // Isolate one broker, the leader of a partition half the time.
                let victim = match rng.below(2) {
                    0 => cluster.leader(rng.below(u64::from(PARTITIONS)) as u32),
                    _ => None,
                }
                .unwrap_or_else(|| ids[rng.below(ids.len() as u64) as usize]);
                let others: Vec<u64> = ids.iter().copied().filter(|i| *i != victim).collect();
                cluster.net.partition(&[victim], &others);
                timeline.note(format!("isolate {victim}"));
                cluster.impaired.push(victim);
                report.isolations += 1;
            }
            3 if may_impair => {
                // One way: `from` still hears `to`, but `to` no longer hears `from`.
                let from = ids[rng.below(ids.len() as u64) as usize];
                let to =
                    ids[(from as usize + rng.below(ids.len() as u64 - 1) as usize) % ids.len()];
                cluster.net.cut(from, to);
                timeline.note(format!("cut {from} -> {to}"));
                cluster.impaired.push(to);
                report.one_way_cuts += 1;
            }
            4 => {
                let (loss, delay) = (rng.below(200) as u32, rng.below(30));
                cluster.net.set_loss(loss);
                cluster.net.set_delay(0, delay);
                timeline.note(format!("loss {loss}/1000, delay up to {delay} ms"));
                report.lossy_periods += 1;
            }
            5 | 6 if !down.is_empty() => {
                let id = down[rng.below(down.len() as u64) as usize];
                cluster.restart(id).await;
                timeline.note(format!("restart {id}"));
                report.restarts += 1;
            }
            _ => {
                cluster.net.heal();
                cluster.impaired.clear();
                timeline.note("heal".into());
                report.heals += 1;
            }
        }
    }
    // An acknowledged send made before the last power loss may have been lost with it.
    let losses = cluster.power_losses.load(Ordering::SeqCst);
    let mut ops = Vec::new();
    for p in producers {
        ops.extend(p.await.unwrap().into_iter().map(|(mut op, sent_after)| {
            if let Outcome::Ok { offset } = op.outcome
                && sent_after < losses
            {
                op.outcome = Outcome::OkLossy { offset };
            }
            op
        }));
    }
    // Heal, converge, read everything back, check.
    cluster.net.heal();
    cluster.impaired.clear();
    for id in cluster.down() {
        cluster.restart(id).await;
        report.restarts += 1;
    }
    timeline.note("producers done; heal, restart every stopped broker, converge".into());
    cluster.converge(Duration::from_secs(30)).await;
    let replicas = cluster.read_all();
    let (violations, summary) = history::check(&ops, &replicas);
    let written = (!violations.is_empty())
        .then(|| write_history(seed, &timeline, &ops, &replicas, &violations));
    for v in violations.iter().take(3) {
        if let history::Violation::Reordered {
            producer,
            partition,
        } = v
        {
            let r = replicas.iter().find(|r| r.partition == *partition).unwrap();
            let mut last = 0;
            for (offset, payload) in &r.records {
                let s = String::from_utf8_lossy(payload);
                let Some((p, n)) = s.split_once(':') else {
                    continue;
                };
                if p.parse::<u32>().ok() != Some(*producer) {
                    continue;
                }
                let n: u64 = n.parse().unwrap();
                let op = ops.iter().find(|o| o.producer == *producer && o.n == n);
                if n < last {
                    eprintln!("  REORDER at offset {offset}: n {n} after {last}: {op:?}");
                    let prev = ops.iter().find(|o| o.producer == *producer && o.n == last);
                    eprintln!("     previous: {prev:?}");
                }
                last = last.max(n);
            }
        }
        if let history::Violation::Duplicate { producer, n } = v {
            let payload = Op::payload(*producer, *n);
            let op = ops.iter().find(|o| o.producer == *producer && o.n == *n);
            eprintln!("seed {seed}: {v:?}: sent as {op:?}");
            for r in &replicas {
                let at: Vec<u64> = r
                    .records
                    .iter()
                    .filter(|(_, p)| *p == payload)
                    .map(|(o, _)| *o)
                    .collect();
                eprintln!(
                    "  broker {} partition {}: offsets {at:?}",
                    r.node, r.partition
                );
            }
        }
    }
    assert!(
        violations.is_empty(),
        "seed {seed} ({nodes} nodes): {} violations, first: {:?}; history, faults and replicas \
         in {}",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    report.summary = summary;
    cluster.shutdown().await;
    report
}

/// A producer of real sizes: batches of records from 1 KiB up to the brokers'
/// `record_bytes_max`, each batch up to their `batch_bytes_max`, to partitions at random, one
/// batch at a time, until `bytes` of them were acknowledged (or three minutes passed).
async fn produce_big(
    addrs: Vec<SocketAddr>,
    producer: u32,
    bytes: u64,
    seed: u64,
    log: LogConfig,
    losses: Arc<AtomicU64>,
) -> Vec<(Op, u64)> {
    // Room for a record's own encoding (lengths, timestamp delta, header count) and a batch's.
    const RECORD_OVERHEAD: usize = 64;
    let mut rng = Rng::new(seed ^ u64::from(producer) << 32);
    let mut config = ClientConfig::default();
    config.request_timeout_ms = 5000;
    config.delivery_timeout_ms = 20_000;
    config.record_bytes_max = log.record_bytes_max;
    config.batch_bytes_max = log.batch_bytes_max;
    let client = Client::connect(&addrs, config).await.unwrap();
    let record_max = log.record_bytes_max as usize - RECORD_OVERHEAD;
    let batch_max = log.batch_bytes_max as usize;
    let mut ops = Vec::new();
    let (mut n, mut acked) = (0u64, 0u64);
    // The failed sends, and the last few of them, for the message if the producer falls short.
    let (mut failures, mut last_failures) = (0u64, Vec::new());
    let started = Instant::now();
    while acked < bytes && started.elapsed() < Duration::from_secs(180) {
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let mut records = Vec::new();
        let mut size = 0;
        // Half the records as large as allowed, the others anywhere from 1 KiB up; as many as
        // the batch limit takes.
        loop {
            let len = if rng.below(2) == 0 {
                record_max
            } else {
                1024 + rng.below((record_max - 1024) as u64) as usize
            };
            if size + len + RECORD_OVERHEAD > batch_max {
                break;
            }
            records.push(Record::new(Op::payload_sized(
                producer,
                n + records.len() as u64,
                len,
            )));
            size += len + RECORD_OVERHEAD;
        }
        let sent_after = losses.load(Ordering::SeqCst);
        let asked = started.elapsed();
        let sent = client.send(TOPIC, partition, &records).await;
        match &sent {
            Ok(_) => acked += size as u64,
            Err(e) => {
                failures += 1;
                if last_failures.len() == 8 {
                    last_failures.remove(0);
                }
                last_failures.push(format!(
                    "{} ms +{} ms partition {partition}: {e}",
                    asked.as_millis(),
                    (started.elapsed() - asked).as_millis()
                ));
            }
        }
        for i in 0..records.len() as u64 {
            let offset = match &sent {
                Ok(d) => Ok(d.base_offset.get() + i),
                Err(e) => Err(e.clone()),
            };
            ops.push(sent_op(producer, n + i, partition, offset, sent_after));
        }
        n += records.len() as u64;
    }
    assert!(
        acked >= bytes,
        "producer {producer}: {acked} of {bytes} bytes acknowledged in {:?}; {failures} sends \
         failed, the last: {last_failures:#?}",
        started.elapsed()
    );
    eprintln!("producer {producer}: {acked} bytes acknowledged in {n} records");
    ops
}

/// A schedule at real sizes, on five brokers. A follower of partition 0
/// is stopped while a producer writes at least `mib` MiB in records up to `record_bytes_max`
/// (1 MiB) and batches up to `batch_bytes_max` (4 MiB), beside two small producers; among the
/// other four, at random, one more broker is stopped (a partition's leader half the time) and
/// restarted, and the network turns lossy and slow and heals. Then the follower is restarted,
/// catches up from that far behind, and the history is checked against every replica.
async fn big_schedule(seed: u64, mib: u64) {
    let mut log = LogConfig::default();
    log.segment_bytes = 16 << 20;
    let mut rng = Rng::new(seed);
    let mut cluster = Cluster::start_sized(5, Durability::Fsync, None, log.clone()).await;
    let started = Instant::now();
    let mut timeline = Timeline::new(started);
    let leader = wait_leader_of(&cluster, 0).await;
    let followers: Vec<u64> = (1..=5).filter(|id| *id != leader).collect();
    let follower = followers[rng.below(4) as usize];
    cluster.stop(follower).await;
    timeline.note(format!("stop follower {follower}"));
    let losses = Arc::clone(&cluster.power_losses);
    let small: Vec<_> = (0..2)
        .map(|p| {
            tokio::spawn(produce(
                cluster.addrs.clone(),
                p,
                100,
                seed,
                Arc::clone(&losses),
            ))
        })
        .collect();
    let big = tokio::spawn(produce_big(
        cluster.addrs.clone(),
        2,
        mib << 20,
        seed,
        log,
        Arc::clone(&losses),
    ));
    // Bounded by the producers' own deadlines.
    while !big.is_finished() {
        tokio::time::sleep(Duration::from_millis(200 + rng.below(500))).await;
        let other_down: Vec<u64> = cluster
            .down()
            .into_iter()
            .filter(|id| *id != follower)
            .collect();
        match rng.below(4) {
            0 if other_down.is_empty() => {
                let leader = cluster.leader(rng.below(u64::from(PARTITIONS)) as u32);
                let live: Vec<u64> = cluster
                    .live()
                    .into_iter()
                    .filter(|id| *id != follower)
                    .collect();
                let victim = leader
                    .filter(|_| rng.below(2) == 0)
                    .unwrap_or_else(|| live[rng.below(live.len() as u64) as usize]);
                cluster.stop(victim).await;
                timeline.note(format!("stop {victim}"));
            }
            1 if !other_down.is_empty() => {
                cluster.restart(other_down[0]).await;
                timeline.note(format!("restart {}", other_down[0]));
            }
            2 => {
                let (loss, delay) = (rng.below(100) as u32, rng.below(20));
                // Half the time the links are slow too: 16 to 64 MiB/s, so that a batch of
                // 4 MiB takes longer to reach a follower than a heartbeat's deadline.
                let mib_per_sec = [0, 16 + rng.below(49)][rng.below(2) as usize];
                cluster.net.set_loss(loss);
                cluster.net.set_delay(0, delay);
                cluster.net.set_link_rate(mib_per_sec << 20);
                timeline.note(format!(
                    "loss {loss}/1000, delay up to {delay} ms, links at {mib_per_sec} MiB/s \
                     (0: unlimited)"
                ));
            }
            _ => {
                cluster.net.heal();
                timeline.note("heal".into());
            }
        }
    }
    let mut ops = Vec::new();
    for p in small.into_iter().chain(std::iter::once(big)) {
        match p.await {
            Ok(sent) => ops.extend(sent.into_iter().map(|(op, _)| op)),
            Err(e) => panic!(
                "seed {seed} at real sizes: a producer failed ({e}); faults: {}; cluster: {}",
                timeline.lines.join("; "),
                cluster.dump()
            ),
        }
    }
    cluster.net.heal();
    for id in cluster.down() {
        cluster.restart(id).await;
    }
    timeline.note(format!(
        "heal, restart {follower} (and any other), converge"
    ));
    let behind = Instant::now();
    cluster.converge(Duration::from_secs(180)).await;
    eprintln!(
        "seed {seed}: {mib} MiB written with broker {follower} down; caught up in {:?}",
        behind.elapsed()
    );
    let replicas = cluster.read_all();
    let (violations, summary) = history::check(&ops, &replicas);
    let written = (!violations.is_empty())
        .then(|| write_history(seed, &timeline, &ops, &replicas, &violations));
    assert!(
        violations.is_empty(),
        "seed {seed} at real sizes: {} violations, first: {:?}; history in {}",
        violations.len(),
        &violations[..violations.len().min(10)],
        written.map_or("(not written)".into(), |p| p.display().to_string())
    );
    eprintln!(
        "seed {seed} at real sizes: {summary:?} in {:?}; faults: {}",
        started.elapsed(),
        timeline.lines.join("; ")
    );
    cluster.shutdown().await;
}

/// See [`big_schedule`]; `FAULT_BIG_SCHEDULES` (default 2) and `FAULT_BIG_MIB` (default 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_at_real_sizes_lose_and_duplicate_nothing() {
    let mib = env_u64("FAULT_BIG_MIB", 64);
    for seed in 1..=env_u64("FAULT_BIG_SCHEDULES", 2) {
        big_schedule(seed, mib).await;
    }
}

/// A partition whose preferred leader wins the first election and stops before anyone hears
/// from it as leader still forms among the others. Broker 1 leads partition 0 first; its
/// replication is muted from the start, so the others grant it their votes and never get the
/// group's first entry from it. Before the fix, they had no membership of their own (only the
/// preferred leader initialized at once; the others later, and openraft refuses a replica that
/// has seen a vote), so they could neither elect a leader nor initialize: the partition stayed
/// without a leader for as long as broker 1 was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_forms_when_its_first_leader_stops_before_replicating_anything() {
    let mut cluster = Cluster::start(3, Durability::Fsync).await;
    cluster.net.mute_replication_from(1);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Bounded by the deadline.
    while cluster
        .node(1)
        .and_then(|n| n.status(TOPIC, 0).ok()?.leader)
        != Some(1)
    {
        if cluster.leader(0).is_some_and(|l| l != 1) {
            // Another broker led first: nothing to stop before it replicates.
            break;
        }
        assert!(Instant::now() < deadline, "broker 1 never led partition 0");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.stop(1).await;
    cluster.net.heal();
    let started = Instant::now();
    let leader = loop {
        let leaders: Vec<Option<u64>> = [2, 3]
            .iter()
            .map(|id| {
                cluster
                    .node(*id)
                    .and_then(|n| n.status(TOPIC, 0).ok()?.leader)
            })
            .collect();
        if let [Some(a), Some(b)] = leaders[..]
            && a == b
            && a != 1
        {
            break a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "partition 0 has no leader among brokers 2 and 3 20 s after broker 1 stopped: {}",
            cluster.dump()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "broker {leader} leads partition 0 {:?} after broker 1 stopped",
        started.elapsed()
    );
    let client = producer_client(&cluster.addrs, 0).await;
    let written = client
        .send(TOPIC, 0, &[Record::new(&b"formed"[..])])
        .await
        .unwrap();
    assert_eq!(written.base_offset.get(), 0);
    cluster.shutdown().await;
}

/// A follower behind a slow link (a slow network, or a slow disk under it) still takes
/// batches of `batch_bytes_max` and catches up from 16 MiB behind. Each AppendEntries needs
/// longer to arrive than the deadline openraft gives a heartbeat (75 ms here): every link
/// carries 16 MiB/s, so a 4 MiB batch takes 250 ms and a catch-up request of 16 MiB a second.
/// With a fixed deadline, the leader resent the same entries forever and no write was
/// acknowledged (the fault schedules at real sizes stalled so on a loaded CI machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_over_a_slow_link_carries_full_size_batches_and_catches_up() {
    let mut log = LogConfig::default();
    log.segment_bytes = 16 << 20;
    let mut cluster = Cluster::start_sized(3, Durability::Fsync, None, log.clone()).await;
    let leader = wait_leader_of(&cluster, 0).await;
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(behind).await;
    cluster.net.set_link_rate(16 << 20);
    let mut config = ClientConfig::default();
    config.record_bytes_max = log.record_bytes_max;
    config.batch_bytes_max = log.batch_bytes_max;
    let client = Client::connect(&cluster.addrs, config).await.unwrap();
    // Four records of 1000 KiB fill a batch of 4 MiB; four batches make 16 MiB.
    let mut sent = Vec::new();
    for batch in 0..4u64 {
        let records: Vec<Record> = (0..4u64)
            .map(|i| Record::new(Op::payload_sized(9, batch * 4 + i, 1000 << 10)))
            .collect();
        let started = Instant::now();
        let delivered = client.send(TOPIC, 0, &records).await;
        let delivered = delivered.unwrap_or_else(|e| {
            panic!(
                "batch {batch} over a slow link: {e} after {:?}",
                started.elapsed()
            )
        });
        eprintln!(
            "batch {batch} (4 MiB) acknowledged at offset {} in {:?}",
            delivered.base_offset.get(),
            started.elapsed()
        );
        sent.extend(records.into_iter().map(|r| r.value.to_vec()));
    }
    cluster.restart(behind).await;
    let started = Instant::now();
    cluster.converge(Duration::from_secs(60)).await;
    eprintln!(
        "broker {behind} caught up 16 MiB over the slow link in {:?}",
        started.elapsed()
    );
    cluster.net.heal();
    for replica in cluster.read_all().iter().filter(|r| r.partition == 0) {
        let values: Vec<&Vec<u8>> = replica.records.iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            sent.iter().collect::<Vec<_>>(),
            "broker {}: partition 0 holds other records than were acknowledged",
            replica.node
        );
    }
    cluster.shutdown().await;
}

/// Threads that keep the CPU busy until dropped.
struct CpuHog {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start(threads: usize) -> CpuHog {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    // Bounded by the flag, which `drop` sets.
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        CpuHog { stop, threads }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
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

/// Writes everything needed to understand a failed schedule (the fault timeline, every
/// operation and its outcome, every replica's records) to a file, and returns its path.
fn write_history(
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
    let path = dir.join(format!("seed-{seed}.txt"));
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

/// Runs `count` schedules from `first_seed` on; every third one on five brokers, every fourth
/// with `Durability::Replicated`.
async fn run_schedules(first_seed: u64, count: u64) {
    let mut total = Report::default();
    let started = Instant::now();
    // `FAULT_CPU_HOG=<threads>` runs the schedules beside that many spinning threads: D0 (a
    // pipelined producer's records reordered) showed only on a loaded machine.
    let _hog = CpuHog::start(env_u64("FAULT_CPU_HOG", 0) as usize);
    for seed in first_seed..first_seed + count {
        let nodes = if seed % 3 == 2 { 5 } else { 3 };
        let t = Instant::now();
        // Every fourth schedule acknowledges on a quorum's page cache (`Replicated`). Its
        // contract allows losing acknowledged writes only when a quorum loses power at once;
        // brokers stopped or crashed here keep the page cache, so the check is the same: nothing
        // acknowledged may be lost.
        let durability = if seed % 4 == 3 {
            Durability::Replicated
        } else {
            Durability::Fsync
        };
        // Every other schedule creates its topic through the metadata group, with three
        // replicas per partition (on five brokers, each partition on three of them).
        let created = (seed % 2 == 0).then_some(3);
        let r = schedule(seed, nodes, 500, durability, created).await;
        eprintln!(
            "seed {seed}: {nodes} nodes, {durability:?}, topic created: {created:?}, {r:?} in {:?}",
            t.elapsed()
        );
        total.stops += r.stops;
        total.leader_stops += r.leader_stops;
        total.restarts += r.restarts;
        total.isolations += r.isolations;
        total.one_way_cuts += r.one_way_cuts;
        total.lossy_periods += r.lossy_periods;
        total.heals += r.heals;
        total.power_losses += r.power_losses;
        total.bytes_lost += r.bytes_lost;
        total.summary.lost_as_allowed += r.summary.lost_as_allowed;
        total.summary.acknowledged += r.summary.acknowledged;
        total.summary.failed += r.summary.failed;
        total.summary.unknown += r.summary.unknown;
        total.summary.unknown_applied += r.summary.unknown_applied;
        total.summary.records_read += r.summary.records_read;
    }
    eprintln!("{count} schedules in {:?}: {total:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_lose_and_duplicate_nothing_a() {
    run_schedules(1, env_u64("FAULT_SCHEDULES", 25)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_schedules_lose_and_duplicate_nothing_b() {
    run_schedules(1_000_001, env_u64("FAULT_SCHEDULES", 25)).await;
}

/// Regression (fault schedules, `Replicated`): a follower back from a power loss has a shorter
/// log than it acknowledged. openraft treats that as a bug unless `allow_log_reversion` is on
/// (its leader asserted and stopped replicating); with it on, the leader resends what the
/// follower lost, and nothing acknowledged is lost, since the leader and the other follower
/// still hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_back_from_a_power_loss_is_brought_up_to_date() {
    let mut cluster = Cluster::start(3, Durability::Replicated).await;
    let losses = Arc::clone(&cluster.power_losses);
    let ops = produce(cluster.addrs.clone(), 0, 100, 1, Arc::clone(&losses)).await;
    // A broker that leads neither partition: each partition keeps a leader holding
    // everything acknowledged.
    let leaders = [
        wait_leader_of(&cluster, 0).await,
        wait_leader_of(&cluster, 1).await,
    ];
    let follower = (1..=3).find(|id| !leaders.contains(id)).unwrap();
    let lost = cluster.lose_power(follower).await;
    assert!(lost > 0, "the follower had unsynced writes");
    cluster.restart(follower).await;
    let mut ops: Vec<Op> = ops.into_iter().map(|(op, _)| op).collect();
    ops.extend(
        produce(cluster.addrs.clone(), 1, 100, 2, losses)
            .await
            .into_iter()
            .map(|(op, _)| op),
    );
    cluster.converge(Duration::from_secs(30)).await;
    let (violations, summary) = history::check(&ops, &cluster.read_all());
    assert_eq!(violations, vec![], "{summary:?}");
    assert_eq!(summary.acknowledged, 200);
    cluster.shutdown().await;
}

/// Under `Replicated` the cluster can lose a committed write (DESIGN §3): here the leader and
/// the one follower that acknowledged a batch are both gone before the third broker has it,
/// the leader by a power loss, the follower by a clean stop (so it keeps the batch). The
/// other two elect a leader that writes over the batch's place in the log. The follower comes
/// back holding, as committed, entries the new leader's log contradicts: Raft cannot truncate
/// them (openraft asserted; found by soak seed 1087). The follower must notice, say so, rebuild
/// its replica from the leader and end byte for byte equal to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_holding_a_committed_write_the_cluster_lost_rebuilds_from_the_leader() {
    let mut cluster = Cluster::start(3, Durability::Replicated).await;
    fn node(c: &Cluster, id: u64) -> &Node {
        c.node(id).unwrap()
    }
    let (leader, _) = append_on_leader(&cluster, &[Record::new(Op::payload(0, 0))], None).await;
    cluster.converge(Duration::from_secs(10)).await;
    let (keeper, behind) = {
        let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
        (others[0], others[1])
    };
    // The batch reaches the leader and `keeper` only.
    cluster.net.partition(&[behind], &[leader, keeper]);
    let lost = vec![
        Record::new(Op::payload(0, 1)),
        Record::new(Op::payload(0, 2)),
    ];
    let acked = node(&cluster, leader)
        .append(TOPIC, 0, &lost)
        .await
        .unwrap();
    let end = acked.last_offset().get() + 1;
    // `keeper` knows the batch is committed before it stops.
    let deadline = Instant::now() + Duration::from_secs(10);
    while node(&cluster, keeper)
        .status(TOPIC, 0)
        .unwrap()
        .high_watermark
        .get()
        < end
    {
        assert!(
            Instant::now() < deadline,
            "the follower never learned the commit"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.stop(keeper).await;
    assert!(
        cluster.lose_power(leader).await > 0,
        "the leader had unsynced writes"
    );
    cluster.net.heal();
    cluster.restart(leader).await;
    // The two without the batch elect a leader and take a write over its place.
    let record = [Record::new(Op::payload(1, 0))];
    let (_, after) = append_on_leader(&cluster, &record, Some(keeper)).await;
    assert!(
        after.base_offset.get() < end,
        "the new leader wrote over the lost batch's offsets"
    );
    cluster.restart(keeper).await;
    cluster.converge(Duration::from_secs(30)).await;
    let replicas = cluster.read_all();
    for partition in 0..PARTITIONS {
        let copies: Vec<&Replica> = replicas
            .iter()
            .filter(|r| r.partition == partition)
            .collect();
        assert_eq!(copies.len(), 3);
        for copy in &copies[1..] {
            assert_eq!(
                copy.records, copies[0].records,
                "partition {partition}: broker {} differs from broker {}",
                copy.node, copies[0].node
            );
        }
    }
    let p0 = replicas.iter().find(|r| r.partition == 0).unwrap();
    assert!(
        p0.records.iter().any(|(_, v)| *v == Op::payload(1, 0)),
        "the new leader's write is everywhere"
    );
    cluster.shutdown().await;
}

/// Appends `records` to partition 0 on its leader (never `not`), retrying while there is none
/// (at most 20 s). Returns the leader and where the batch landed.
async fn append_on_leader(
    cluster: &Cluster,
    records: &[Record],
    not: Option<u64>,
) -> (u64, replog::AppendInfo) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = cluster.leader(0).filter(|l| Some(*l) != not)
            && let Some(node) = cluster.node(l)
            && let Ok(info) = node.append(TOPIC, 0, records).await
        {
            return (l, info);
        }
        assert!(Instant::now() < deadline, "no leader took the write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader of `partition`, waiting (at most 10 s) for one.
async fn wait_leader_of(cluster: &Cluster, partition: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = cluster.leader(partition) {
            return l;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An I/O error on sync (EIO, and the kernel may have dropped the pages): the leader's log
/// latches read-only, its group stops, and another broker leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fails_to_sync_stops_leading_writes_go_on_elsewhere_and_it_comes_back()
{
    a_leader_whose_disk_fails(FaultPoint::Sync, std::io::ErrorKind::Other).await;
}

/// A full disk (ENOSPC on the leader's next write): as a failed sync, the leader stops
/// leading with nothing written, and writes go on elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_is_full_stops_leading_writes_go_on_elsewhere_and_it_comes_back() {
    a_leader_whose_disk_fails(FaultPoint::Write, std::io::ErrorKind::StorageFull).await;
}

/// Every operation at `point` on the leader's disk fails with `kind` from some moment on: the
/// write in flight is not acknowledged, the others elect a leader and take writes, the failed
/// broker reports its stopped replica and, once its disk is healthy again, brings it back by
/// itself (no restart) and catches up; nothing acknowledged is lost.
async fn a_leader_whose_disk_fails(point: FaultPoint, kind: std::io::ErrorKind) {
    let cluster = Cluster::start(3, Durability::Fsync).await;
    let wait_leader = async |cluster: &Cluster, not: Option<u64>| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let leaders: Vec<Option<u64>> = cluster
                .local
                .nodes()
                .filter(|n| Some(n.id()) != not)
                .map(|n| n.status(TOPIC, 0).unwrap().leader)
                .collect();
            if let Some(Some(l)) = leaders.first()
                && Some(*l) != not
                && leaders.iter().all(|x| *x == Some(*l))
            {
                return *l;
            }
            assert!(Instant::now() < deadline, "no leader: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let leader = wait_leader(&cluster, None).await;
    let node = cluster.node(leader).unwrap();
    node.append(TOPIC, 0, &[Record::new(Op::payload(0, 0))])
        .await
        .unwrap();

    // Every such operation on the leader's disk fails from now on: the write is not
    // acknowledged (its outcome is unknown, or it was refused outright).
    cluster.disks[leader as usize - 1].fail_always(point, kind);
    let refused = node
        .append(TOPIC, 0, &[Record::new(Op::payload(0, 1))])
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::Indeterminate { .. } | Error::NotLeader { .. })
        ),
        "a write the disk failed is not acknowledged: {refused:?}"
    );

    // The others elect a leader among themselves and take writes.
    let next = wait_leader(&cluster, Some(leader)).await;
    assert_ne!(next, leader);
    let addrs: Vec<SocketAddr> = cluster.addrs.clone();
    let client = Client::connect(&addrs, ClientConfig::default())
        .await
        .unwrap();
    let d = client
        .send(TOPIC, 0, &[Record::new(Op::payload(0, 2))])
        .await
        .unwrap();

    // The failed broker notices that its replica's Raft member stopped and says why in the
    // replica's status (it keeps trying to bring it back, and the disk keeps failing).
    wait_reported_stopped(&cluster, leader).await;
    // Once the disk is healthy again the broker brings the replica back by itself (no
    // restart), rebuilt from the new leader, and it catches up.
    cluster.disks[leader as usize - 1].clear();
    cluster.converge(Duration::from_secs(60)).await;
    let status = cluster.node(leader).unwrap().status(TOPIC, 0).unwrap();
    assert_eq!(status.stopped, None);
    assert_eq!(status.leader, Some(next));
    let ops = [
        Op {
            producer: 0,
            n: 0,
            partition: 0,
            outcome: Outcome::Ok { offset: 0 },
        },
        Op {
            producer: 0,
            n: 1,
            partition: 0,
            outcome: Outcome::Unknown,
        },
        Op {
            producer: 0,
            n: 2,
            partition: 0,
            outcome: Outcome::Ok {
                offset: d.base_offset.get(),
            },
        },
    ];
    let (violations, _) = history::check(&ops, &cluster.read_all());
    assert_eq!(violations, vec![]);
    drop(client);
    cluster.shutdown().await;
}

/// No replica dies silently: a follower's disk fails every sync, so the
/// Raft members of its replicas stop. The broker finds them within an election timeout, says
/// why in their status, keeps trying to bring them back (pausing longer after each failure),
/// and once the disk is healthy brings them back by itself, rebuilt from the leader; they
/// catch up with what the other two took meanwhile. Before, they stayed stopped until the
/// broker was restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_disk_fails_comes_back_by_itself_and_catches_up() {
    let cluster = Cluster::start(3, Durability::Fsync).await;
    let (leader, _) = append_on_leader(&cluster, &[Record::new(Op::payload(0, 0))], None).await;
    cluster.converge(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.disks[follower as usize - 1].fail_always(FaultPoint::Sync, std::io::ErrorKind::Other);
    let client = Client::connect(&cluster.addrs, ClientConfig::default())
        .await
        .unwrap();
    let mut offsets = vec![0];
    for n in 1..=40u64 {
        let d = client
            .send(TOPIC, 0, &[Record::new(Op::payload(0, n))])
            .await
            .unwrap();
        offsets.push(d.base_offset.get());
    }
    wait_reported_stopped(&cluster, follower).await;
    cluster.disks[follower as usize - 1].clear();
    cluster.converge(Duration::from_secs(60)).await;
    assert_eq!(node_status_stopped(&cluster, follower), None);
    let ops: Vec<Op> = (0u64..)
        .zip(&offsets)
        .map(|(n, offset)| Op {
            producer: 0,
            n,
            partition: 0,
            outcome: Outcome::Ok { offset: *offset },
        })
        .collect();
    let replicas = cluster.read_all();
    let copies: Vec<&Replica> = replicas.iter().filter(|r| r.partition == 0).collect();
    assert_eq!(copies.len(), 3, "every broker hosts its replica again");
    let (violations, _) = history::check(&ops, &replicas);
    assert_eq!(violations, vec![]);
    for copy in &copies[1..] {
        assert_eq!(copy.records, copies[0].records, "broker {}", copy.node);
    }
    drop(client);
    cluster.shutdown().await;
}

/// Why broker `id`'s replica of partition 0 is down, if it is.
fn node_status_stopped(cluster: &Cluster, id: u64) -> Option<String> {
    cluster.node(id).unwrap().status(TOPIC, 0).unwrap().stopped
}

/// Waits (at most 10 s) until broker `id` reports its replica of partition 0 stopped by a
/// storage error.
async fn wait_reported_stopped(cluster: &Cluster, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        if let Some(why) = node_status_stopped(cluster, id) {
            break why;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped replica is never reported"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(why.contains("storage error"), "{why}");
}

/// Writes 480 records of 1 KiB to partition 0 through a client (enough to seal several
/// 256 KiB segments) and waits until every replica has them. Returns the client.
async fn fill_sealed_segments(cluster: &Cluster) -> Client {
    let client = Client::connect(&cluster.addrs, ClientConfig::default())
        .await
        .unwrap();
    for i in 0..120u64 {
        let batch: Vec<Record> = (0..4)
            .map(|j| Record::new(format!("{i}-{j}-{}", "x".repeat(1000))))
            .collect();
        client.send(TOPIC, 0, &batch).await.unwrap();
    }
    cluster.converge(Duration::from_secs(20)).await;
    client
}

/// Every replica of partition 0 holds the 480 records of [`fill_sealed_segments`], byte for
/// byte the same.
fn assert_partition_0_holds_the_same_480_records_everywhere(cluster: &Cluster) {
    let replicas = cluster.read_all();
    let copies: Vec<&Replica> = replicas.iter().filter(|r| r.partition == 0).collect();
    assert_eq!(copies.len(), 3);
    assert_eq!(copies[0].records.len(), 480);
    for copy in &copies[1..] {
        assert_eq!(copy.records, copies[0].records, "broker {}", copy.node);
    }
}

/// A bit flipped in a follower's sealed segment (while it was down) is caught by the CRC when
/// it restarts: the broker starts anyway, and that replica is rebuilt empty and copies the
/// leader's log, so the bad bytes are never served. Until it holds again what it had
/// committed it gives no vote (it must not help elect a leader lacking entries it had
/// acknowledged): with the leader gone and the rebuilt replica cut off from it, the third
/// broker cannot be elected. Once the leader is back, everything converges byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flip_in_a_followers_sealed_segment_is_repaired_from_the_leader() {
    let mut cluster = Cluster::start(3, Durability::Fsync).await;
    let client = fill_sealed_segments(&cluster).await;
    let leader = cluster.leader(0).unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let third = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    cluster.stop(follower).await;

    // Flip one bit in the middle of the follower's first segment (sealed: others follow it).
    let part_dir = cluster
        .dir
        .path()
        .join(follower.to_string())
        .join(format!("{TOPIC}-0"));
    let mut segments: Vec<_> = std::fs::read_dir(&part_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    assert!(segments.len() >= 2, "sealed segments exist: {segments:?}");
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    let at = 128 << 10;
    bytes[at] ^= 0x10;
    std::fs::write(&segments[0], &bytes).unwrap();

    // It restarts cut off from the leader, then the leader goes: the rebuilt replica holds
    // nothing yet and refuses its vote, so the third broker cannot lead partition 0.
    cluster.net.partition(&[follower], &[leader]);
    cluster.restart(follower).await;
    let damaged: Vec<u8> = std::fs::read(&segments[0]).unwrap_or_default();
    assert_ne!(
        damaged, bytes,
        "the damaged segment is gone from the replica"
    );
    cluster.stop(leader).await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let status = cluster.node(third).unwrap().status(TOPIC, 0).unwrap();
        assert!(
            status.leader.is_none() || status.leader == Some(leader),
            "elected {:?} with the vote of a replica that had lost its log",
            status.leader
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The leader returns: the rebuilt replica copies the log and everything converges.
    cluster.net.heal();
    cluster.restart(leader).await;
    cluster.converge(Duration::from_secs(30)).await;
    assert_partition_0_holds_the_same_480_records_everywhere(&cluster);
    client
        .send(TOPIC, 0, &[Record::new("after the flip")])
        .await
        .unwrap();
    drop(client);
    cluster.shutdown().await;
}

/// A bit flipped in a follower's sealed segment while it runs is caught by the CRC on the
/// next read of it: the reader gets `Error::Corrupt`, never the bad bytes, and the replica
/// rebuilds itself from the leader; reads from it then succeed and match the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flip_found_while_running_is_repaired_from_the_leader() {
    use std::os::unix::fs::FileExt;
    let cluster = Cluster::start(3, Durability::Fsync).await;
    let client = fill_sealed_segments(&cluster).await;
    let leader = cluster.leader(0).unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let node = cluster.node(follower).unwrap();
    let first = cluster
        .dir
        .path()
        .join(follower.to_string())
        .join(format!("{TOPIC}-0"))
        .join(format!("{:020}.log", 0));
    // Through the page cache the mapping shares, as a failing disk or a stray write would.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(&first)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, 128 << 10).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], 128 << 10).unwrap();
    drop(file);
    match node.read(TOPIC, 0, Offset(0), 1 << 20) {
        Err(Error::Corrupt { .. }) => {}
        other => panic!("a damaged segment was read: {:?}", other.map(|b| b.len())),
    }
    // Rebuilt and caught up: reads from offset 0 succeed again, byte for byte the leader's.
    // (Until the rebuild starts the replica still answers with the damage; while it runs the
    // broker hosts no replica of the partition.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while !node
        .read(TOPIC, 0, Offset(0), 1 << 20)
        .is_ok_and(|b| !b.is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "the damaged replica was never rebuilt"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.converge(Duration::from_secs(30)).await;
    assert_partition_0_holds_the_same_480_records_everywhere(&cluster);
    drop(client);
    cluster.shutdown().await;
}

/// A `replog node` process; SIGKILLed when dropped.
struct Process {
    child: std::process::Child,
    stopped: bool,
}

impl Process {
    fn spawn(id: u64, addrs: &[SocketAddr], dir: &std::path::Path) -> Process {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_replog"));
        cmd.args(["node", "--id", &id.to_string()])
            .args(["--listen", &addrs[id as usize - 1].to_string()]);
        for (i, a) in (1u64..).zip(addrs) {
            if i != id {
                cmd.args(["--peer", &format!("{i}@{a}")]);
            }
        }
        cmd.args(["--topic", &format!("{TOPIC}:{PARTITIONS}")])
            .args(["--election-timeout-ms", "500"])
            .arg("--data")
            .arg(dir.join(format!("proc-{id}")))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        Process {
            child: cmd.spawn().expect("spawn replog node"),
            stopped: false,
        }
    }

    fn signal(&mut self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).expect("signal the broker");
        self.stopped = signal == rustix::process::Signal::STOP;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.stopped {
            self.signal(rustix::process::Signal::CONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every committed record of `partition` on the broker at `addr`.
async fn read_replica(
    client: &Client,
    addr: SocketAddr,
    partition: u32,
) -> replog::Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut next = Offset(0);
    // Bounded: each pass moves `next` forward or ends.
    loop {
        let batches = client
            .fetch(TOPIC, partition, next, 1 << 20, Some(addr))
            .await?;
        if batches.is_empty() {
            return Ok(out);
        }
        for b in &batches {
            for (o, r) in b.records() {
                if o >= next {
                    out.push((o.get(), r.value.to_vec()));
                    next = Offset(o.get() + 1);
                }
            }
        }
    }
}

/// Three broker processes SIGKILLed (then restarted from their directories) and
/// SIGSTOPped/SIGCONTed at random under four producers for `FAULT_PROCESS_SECS` seconds
/// (default 60), then converged and checked. Never more than one broker down or paused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_processes_killed_and_paused_at_random_lose_and_duplicate_nothing() {
    use rustix::process::Signal;
    let seed = env_u64("FAULT_SEED", 7);
    let secs = env_u64("FAULT_PROCESS_SECS", 60);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let addrs = process_addrs(3);
    let mut brokers: Vec<Option<Process>> = (1..=3)
        .map(|id| Some(Process::spawn(id, &addrs, dir.path())))
        .collect();
    let end = Instant::now() + Duration::from_secs(secs);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let losses = Arc::new(AtomicU64::new(0));
            tokio::spawn(produce_until(
                addrs.clone(),
                p,
                u64::MAX,
                seed,
                Some(end),
                losses,
            ))
        })
        .collect();
    let (mut kills, mut pauses) = (0, 0);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(1200))).await;
        let impaired =
            (1..=3u64).find(|id| brokers[*id as usize - 1].as_ref().is_none_or(|b| b.stopped));
        match impaired {
            // Heal the one broker that is down or paused.
            Some(id) => match brokers[id as usize - 1].as_mut() {
                Some(paused) => paused.signal(Signal::CONT),
                None => brokers[id as usize - 1] = Some(Process::spawn(id, &addrs, dir.path())),
            },
            None => {
                let id = 1 + rng.below(3);
                if rng.below(2) == 0 {
                    drop(brokers[id as usize - 1].take());
                    kills += 1;
                } else if let Some(b) = brokers[id as usize - 1].as_mut() {
                    b.signal(Signal::STOP);
                    pauses += 1;
                }
            }
        }
    }
    for id in 1..=3u64 {
        match brokers[id as usize - 1].as_mut() {
            Some(b) if b.stopped => b.signal(Signal::CONT),
            Some(_) => {}
            None => brokers[id as usize - 1] = Some(Process::spawn(id, &addrs, dir.path())),
        }
    }
    let mut ops = Vec::new();
    for p in producers {
        ops.extend(p.await.unwrap().into_iter().map(|(op, _)| op));
    }

    // Converge: every replica holds as many committed records as the leader's high watermark.
    let client = Client::connect(&addrs, ClientConfig::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let replicas = loop {
        let mut replicas = Vec::new();
        let mut settled = true;
        for partition in 0..PARTITIONS {
            let hw = match client.describe(TOPIC).await {
                Ok(d) if d[partition as usize].leader.is_some() => {
                    d[partition as usize].high_watermark.get()
                }
                _ => {
                    settled = false;
                    continue;
                }
            };
            for (node, addr) in (1u64..).zip(&addrs) {
                match read_replica(&client, *addr, partition).await {
                    Ok(records) => {
                        settled &= records.len() as u64 == hw;
                        replicas.push(Replica {
                            node,
                            partition,
                            records,
                        });
                    }
                    Err(_) => settled = false,
                }
            }
        }
        if settled {
            break replicas;
        }
        assert!(Instant::now() < deadline, "no convergence after the chaos");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (violations, summary) = history::check(&ops, &replicas);
    eprintln!("processes: {secs} s, seed {seed}, {kills} SIGKILLs, {pauses} SIGSTOPs, {summary:?}");
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations, first: {:?}",
        violations.len(),
        &violations[..violations.len().min(10)]
    );
    assert!(summary.acknowledged > 0, "some writes were acknowledged");
}

/// Replays one schedule: `FAULT_SEED=<seed>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay() {
    if let Ok(seed) = std::env::var("FAULT_SEED") {
        run_schedules(seed.parse().expect("FAULT_SEED is a number"), 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: thousands of schedules"]
async fn soak() {
    run_schedules(
        env_u64("FAULT_SOAK_SEED", 5_000_000),
        env_u64("FAULT_SOAK", 1000),
    )
    .await;
}
