//! Brokers over real loopback TCP, in this process or as `replog node` processes: the shared
//! helpers (clusters, ports held until a broker takes them, waits with deadlines) and one
//! module per subject.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use replog::{Error, LogConfig, Node, NodeConfig, Offset, ProducerSeq, Record};

mod attack;
mod consumer;
mod groups;
mod hostile;
mod idempotence;
mod kafka;
mod kafka_answers;
mod kafka_groups;
mod kafka_python;
mod kafka_wire;
mod long_poll;
mod metrics;
#[path = "../support/ports.rs"]
mod ports;
mod processes;
mod replication;
mod topics;
use ports::process_addrs;

const TOPIC: &str = "email.send";
const PARTITIONS: u32 = 3;
const ELECTION_TIMEOUT_MS: u64 = 1000;

/// `n` brokers in this process (a `LocalCluster`) with `topic` configured with `partitions`,
/// fast heartbeats, `configure` applied last; returns once every partition has a settled
/// leader.
async fn local_cluster(
    n: usize,
    dir: &Path,
    topic: &str,
    partitions: u32,
    configure: impl Fn(&mut NodeConfig),
) -> replog::LocalCluster {
    let cluster = replog::LocalCluster::start(n, dir, |c| {
        c.topics = vec![(topic.into(), partitions)];
        c.heartbeat_interval = Duration::from_millis(100);
        c.election_timeout = Duration::from_millis(ELECTION_TIMEOUT_MS);
        configure(c);
    })
    .await
    .unwrap();
    cluster
        .wait_for_leaders(topic, partitions, Duration::from_secs(20))
        .await
        .unwrap();
    cluster
}

/// Listeners bound by [`free_addrs`] and not yet handed to a broker.
static HELD: std::sync::Mutex<BTreeMap<SocketAddr, std::net::TcpListener>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Free loopback ports, each bound now and kept bound until [`start_node`] hands its listener
/// to the broker that listens there (never released and bound again, which a test running
/// beside this one could take in between).
fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut held = HELD.lock().unwrap();
    (0..n)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            held.insert(addr, l);
            addr
        })
        .collect()
}

/// Starts a broker: on the listener [`free_addrs`] holds for its address if there is one,
/// else (a restart) on its address.
async fn start_node(config: NodeConfig) -> replog::Result<Node> {
    let held = HELD.lock().unwrap().remove(&config.listen);
    match held {
        Some(listener) => Node::start_on(config, listener).await,
        None => Node::start(config).await,
    }
}

fn config(id: u64, addrs: &[SocketAddr], dir: &Path) -> NodeConfig {
    let peers: BTreeMap<u64, SocketAddr> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (i as u64 + 1, *a))
        .filter(|(pid, _)| *pid != id)
        .collect();
    let mut c = NodeConfig::new(
        id,
        addrs[id as usize - 1],
        peers,
        dir.join(format!("node-{id}")),
    );
    c.topics = vec![(TOPIC.to_string(), PARTITIONS)];
    c.heartbeat_interval = Duration::from_millis(100);
    c.election_timeout = Duration::from_millis(ELECTION_TIMEOUT_MS);
    let mut log = LogConfig::default();
    log.segment_bytes = 1 << 20;
    log.record_bytes_max = 64 << 10;
    log.batch_bytes_max = 256 << 10;
    c.log = log;
    c
}

/// A broker of a cluster whose topic has a single partition.
fn single_partition(id: u64, addrs: &[SocketAddr], dir: &Path) -> NodeConfig {
    let mut c = config(id, addrs, dir);
    c.topics = vec![(TOPIC.to_string(), 1)];
    c
}

/// Waits until every live replica of partition 0 has committed `expected`, then checks that it
/// holds exactly those values from offset 0 on: each batch once.
async fn assert_every_replica_holds(nodes: &[Option<Node>], expected: &[&str]) {
    let want: Vec<(u64, Vec<u8>)> = (0u64..)
        .zip(expected)
        .map(|(o, v)| (o, v.as_bytes().to_vec()))
        .collect();
    for node in nodes.iter().flatten() {
        wait_for(Duration::from_secs(10), "every replica to commit", || {
            let hw = node.status(TOPIC, 0).unwrap().high_watermark;
            (hw == Offset(want.len() as u64)).then_some(())
        })
        .await;
        assert_eq!(
            values(node, 0),
            want,
            "replica {} holds each batch once",
            node.id()
        );
    }
}

/// Stops every broker still running.
async fn shutdown_all(nodes: Vec<Option<Node>>) {
    for node in nodes.into_iter().flatten() {
        node.shutdown().await.unwrap();
    }
}

/// Starts brokers 1, 2 and 3.
async fn start_all(config: impl Fn(u64) -> NodeConfig) -> Vec<Option<Node>> {
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Some(start_node(config(id)).await.unwrap()));
    }
    nodes
}

/// Waits until `f` returns `Some`, polling, for at most `limit`.
async fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The leader of `partition` as all live nodes agree on it.
async fn leader_of(nodes: &[Option<Node>], partition: u32) -> u64 {
    wait_for(
        Duration::from_secs(10),
        "a leader all nodes agree on",
        || {
            let leaders: Vec<Option<u64>> = nodes
                .iter()
                .flatten()
                .map(|n| n.status(TOPIC, partition).unwrap().leader)
                .collect();
            let first = (*leaders.first()?)?;
            let live: Vec<u64> = nodes.iter().flatten().map(|n| n.id()).collect();
            (live.contains(&first) && leaders.iter().all(|l| *l == Some(first))).then_some(first)
        },
    )
    .await
}

/// Appends to partition 0's leader, following a leadership change that happens meanwhile (a
/// refusal with `NotLeader` was not applied, so resending is safe). Bounded by a deadline.
async fn append_to_leader(nodes: &[Option<Node>], records: &[Record]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = leader_of(nodes, 0).await;
        match node_ref(nodes, leader).append(TOPIC, 0, records).await {
            Ok(_) => return,
            Err(Error::NotLeader { .. }) => {
                assert!(Instant::now() < deadline, "no leader took the write");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("append failed: {e}"),
        }
    }
}

fn values(node: &Node, partition: u32) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = node.status(TOPIC, partition).unwrap().log_start;
    // Bounded: each pass moves `next` forward, or restarts once at a moved log start.
    loop {
        let batches = match node.read(TOPIC, partition, next, 1 << 20) {
            Ok(b) => b,
            // Retention purged under us: continue from the new start.
            Err(Error::OffsetOutOfRange { start, .. }) if start > next => {
                out.retain(|(o, _)| *o >= start.get());
                next = start;
                continue;
            }
            Err(e) => panic!("read failed: {e}"),
        };
        if batches.is_empty() {
            return out;
        }
        for b in batches {
            for (o, r) in b.records() {
                if o >= next {
                    out.push((o.get(), r.value.to_vec()));
                }
            }
            next = b.next_offset();
        }
    }
}

/// A data frame as a replica reads it: log index, term, base offset, record count, timestamp,
/// and each record's key and value.
type Frame = (u64, u64, u64, u32, u64, Vec<(Option<Vec<u8>>, Vec<u8>)>);

fn node_ref(nodes: &[Option<Node>], id: u64) -> &Node {
    nodes[id as usize - 1].as_ref().unwrap()
}

/// Appends an idempotent batch to partition 0's leader, following leadership changes and
/// waiting out `TryAgain`; returns any other outcome. Bounded by a deadline.
async fn append_idempotent_to_leader(
    nodes: &[Option<Node>],
    producer: u64,
    sequence: u32,
    records: &[Record],
) -> replog::Result<replog::AppendInfo> {
    append_numbered_to_leader(nodes, ProducerSeq::new(producer, sequence), records).await
}

/// [`append_idempotent_to_leader`] with the batch's epoch too.
async fn append_numbered_to_leader(
    nodes: &[Option<Node>],
    numbers: ProducerSeq,
    records: &[Record],
) -> replog::Result<replog::AppendInfo> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = leader_of(nodes, 0).await;
        match node_ref(nodes, leader)
            .append_idempotent(TOPIC, 0, numbers, records)
            .await
        {
            Err(Error::NotLeader { .. } | Error::TryAgain { .. }) => {
                assert!(Instant::now() < deadline, "no leader took the write");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

async fn wait_for_fetch(client: &replog::Client, addr: SocketAddr) -> Vec<replog::Batch> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let batches = client
            .fetch(TOPIC, 0, Offset(0), 1 << 20, Some(addr))
            .await
            .unwrap();
        if !batches.is_empty() {
            return batches;
        }
        assert!(Instant::now() < deadline, "no data on {addr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `replog node` process that is killed with SIGKILL when dropped.
struct Broker(std::process::Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `replog node` `id`; with `configured`, the broker is started with the topic
/// configured (one partition), otherwise topics are created at run time.
fn spawn_broker(id: u64, addrs: &[SocketAddr], dir: &Path, configured: bool) -> Broker {
    spawn_broker_with(id, addrs, dir, configured, &[])
}

/// [`spawn_broker`] with more arguments.
fn spawn_broker_with(
    id: u64,
    addrs: &[SocketAddr],
    dir: &Path,
    configured: bool,
    more: &[&str],
) -> Broker {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_replog"));
    cmd.args([
        "node",
        "--id",
        &id.to_string(),
        "--listen",
        &addrs[id as usize - 1].to_string(),
    ]);
    for (i, a) in addrs.iter().enumerate() {
        if i as u64 + 1 != id {
            cmd.args(["--peer", &format!("{}@{a}", i + 1)]);
        }
    }
    if configured {
        cmd.args(["--topic", &format!("{TOPIC}:1")]);
    }
    cmd.args(["--election-timeout-ms", "500"]);
    cmd.args(more);
    cmd.arg("--data").arg(dir.join(format!("proc-{id}")));
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    Broker(cmd.spawn().expect("spawn replog node"))
}

/// Runs the `replog` binary with `args` and `stdin`; returns (success, stdout, stderr).
fn cli(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_replog"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run replog");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Retries `f` every 100 ms until it returns `Some`, for at most `limit`.
fn retry<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Brokers without configured topics: `config` with none.
fn bare(id: u64, addrs: &[SocketAddr], dir: &Path) -> NodeConfig {
    let mut c = config(id, addrs, dir);
    c.topics = Vec::new();
    c
}

/// The brokers that host a replica of `topic`/`partition`, by asking each node.
fn hosts(nodes: &[Option<Node>], topic: &str, partition: u32) -> Vec<u64> {
    nodes
        .iter()
        .flatten()
        .filter(|n| {
            n.partitions()
                .contains(&replog::PartitionId::new(topic, partition))
        })
        .map(|n| n.id())
        .collect()
}

fn bytes_of(s: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(s.as_bytes())
}

/// The committed values of a partition's local replica, from offset 0 (`None` while it
/// cannot be read).
fn committed_values(node: &Node, topic: &str, partition: u32) -> Option<Vec<String>> {
    let batches = node.read(topic, partition, Offset(0), 1 << 20).ok()?;
    Some(
        batches
            .iter()
            .flat_map(|b| b.records())
            .map(|(_, r)| String::from_utf8_lossy(&r.value).into_owned())
            .collect(),
    )
}

/// Waits until every running broker's catalog has broker `id` at `addr`.
async fn wait_for_broker_everywhere(nodes: &[Option<Node>], id: u64, addr: SocketAddr) {
    wait_for(
        Duration::from_secs(10),
        "every broker to know the broker",
        || {
            nodes
                .iter()
                .flatten()
                .all(|n| n.brokers().contains(&(id, addr)))
                .then_some(())
        },
    )
    .await;
}

/// Waits until a client bootstrapped at `via` names broker `id` at `addr`, and returns every
/// broker it names then.
async fn wait_for_broker(via: SocketAddr, id: u64, addr: SocketAddr) -> Vec<(u64, SocketAddr)> {
    use replog::{Client, ClientConfig};
    let client = Client::connect(&[via], ClientConfig::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let brokers = client.brokers().await.unwrap();
        if brokers.contains(&(id, addr)) {
            return brokers;
        }
        assert!(
            Instant::now() < deadline,
            "{via} still names {brokers:?}, not broker {id} at {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bytes of disk blocks held by the files under `dir`.
fn disk_bytes_under(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    // Bounded by the number of directories under `dir`.
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}
