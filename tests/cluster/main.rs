//! Brokers over real loopback TCP, in this process or as `replog node` processes: the helpers
//! of this binary's topic (configs, leaders, appends, reads) and one module per subject. The
//! clusters, ports and waits come from the fixture all test binaries share, `tests/support`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use replog::{Error, LogConfig, Node, NodeConfig, Offset, ProducerSeq, Record};
use support::{
    Broker, cli, free_addrs, local_cluster, process_addrs, shutdown_all, start_all, start_node,
    wait_until, wait_until_blocking,
};

mod attack;
mod compaction;
mod consumer;
mod decommission;
mod groups;
mod hostile;
mod idempotence;
mod kafka;
mod kafka_acls;
mod kafka_answers;
mod kafka_changelog;
mod kafka_configs;
mod kafka_group_deletion;
mod kafka_groups;
mod kafka_leaders;
mod kafka_python;
mod kafka_sasl;
mod kafka_tls;
mod kafka_wire;
mod leader_balance;
mod long_poll;
mod many_partitions;
mod metrics;
mod native_tls;
mod principal_mapping;
mod processes;
mod racks;
mod replication;
#[path = "../support/mod.rs"]
mod support;
mod topic_configs;
mod topics;
mod upgrade;

const TOPIC: &str = "email.send";
const PARTITIONS: u32 = 3;
const ELECTION_TIMEOUT_MS: u64 = support::nodes::ELECTION_TIMEOUT.as_millis() as u64;

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
    c.heartbeat_interval = support::nodes::HEARTBEAT_INTERVAL;
    c.election_timeout = support::nodes::ELECTION_TIMEOUT;
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
        wait_until(
            Duration::from_secs(10),
            "every replica to commit",
            async || node.status(TOPIC, 0).unwrap().high_watermark == Offset(want.len() as u64),
        )
        .await;
        assert_eq!(
            values(node, 0),
            want,
            "replica {} holds each batch once",
            node.id()
        );
    }
}

/// The leader of `partition` as all live nodes agree on it.
async fn leader_of(nodes: &[Option<Node>], partition: u32) -> u64 {
    wait_until(
        Duration::from_secs(10),
        "a leader all nodes agree on",
        async || {
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
    wait_until(
        Duration::from_secs(20),
        "a leader to take the write",
        async || {
            let leader = leader_of(nodes, 0).await;
            match node_ref(nodes, leader).append(TOPIC, 0, records).await {
                Ok(_) => Ok(()),
                Err(e @ Error::NotLeader { .. }) => Err(e),
                Err(e) => panic!("append failed: {e}"),
            }
        },
    )
    .await
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
    wait_until(
        Duration::from_secs(20),
        "a leader to take the write",
        async || {
            let leader = leader_of(nodes, 0).await;
            match node_ref(nodes, leader)
                .append_idempotent(TOPIC, 0, numbers, records)
                .await
            {
                Err(e @ (Error::NotLeader { .. } | Error::TryAgain { .. })) => Err(e),
                other => Ok(other),
            }
        },
    )
    .await
}

async fn wait_for_fetch(client: &replog::Client, addr: SocketAddr) -> Vec<replog::Batch> {
    wait_until(
        Duration::from_secs(10),
        &format!("data on {addr}"),
        async || {
            let batches = client
                .fetch(TOPIC, 0, Offset(0), 1 << 20, Some(addr.into()))
                .await
                .unwrap();
            (!batches.is_empty()).then_some(batches)
        },
    )
    .await
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
    let topic = format!("{TOPIC}:1");
    let mut args = Vec::new();
    if configured {
        args.extend(["--topic", topic.as_str()]);
    }
    args.extend(more);
    Broker::spawn(id, addrs, dir, &args)
}

/// [`spawn_broker_with`], every broker named `localhost:PORT` (`--listen`, `--peer`).
fn spawn_named_broker(id: u64, addrs: &[SocketAddr], dir: &Path, more: &[&str]) -> Broker {
    Broker::spawn_named(id, addrs, dir, more, Some("localhost"))
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
    wait_until(
        Duration::from_secs(10),
        "every broker to know the broker",
        async || {
            nodes
                .iter()
                .flatten()
                .all(|n| n.brokers().contains(&(id, addr.into())))
                .then_some(())
        },
    )
    .await;
}

/// Waits until a client bootstrapped at `via` names broker `id` at `addr`, and returns every
/// broker it names then.
async fn wait_for_broker(
    via: SocketAddr,
    id: u64,
    addr: SocketAddr,
) -> Vec<(u64, replog::Address)> {
    use replog::{Client, ClientConfig};
    let client = Client::connect(&[via], ClientConfig::default())
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        &format!("{via} to name broker {id} at {addr}"),
        async || {
            let brokers = client.brokers().await.unwrap();
            if brokers.contains(&(id, addr.into())) {
                Ok(brokers)
            } else {
                Err(format!("{via} still names {brokers:?}"))
            }
        },
    )
    .await
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
