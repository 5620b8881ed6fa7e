//! Brokers in this process: a whole [`replog::LocalCluster`], or single [`Node`]s started on
//! loopback listeners held from the moment their port is chosen.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use replog::{Node, NodeConfig};

/// Heartbeats of the brokers the fixture starts.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// Election timeout of the brokers the fixture starts.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);

/// `n` brokers in this process (a `LocalCluster`) with `topic` configured with `partitions`,
/// fast heartbeats, `configure` applied last; returns once every partition has a settled
/// leader.
pub async fn local_cluster(
    n: usize,
    dir: &Path,
    topic: &str,
    partitions: u32,
    configure: impl Fn(&mut NodeConfig),
) -> replog::LocalCluster {
    let cluster = replog::LocalCluster::start(n, dir, |c| {
        c.topics = vec![(topic.into(), partitions)];
        c.heartbeat_interval = HEARTBEAT_INTERVAL;
        c.election_timeout = ELECTION_TIMEOUT;
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
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
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
pub async fn start_node(config: NodeConfig) -> replog::Result<Node> {
    let held = HELD.lock().unwrap().remove(&config.listen);
    match held {
        Some(listener) => Node::start_on(config, listener).await,
        None => Node::start(config).await,
    }
}

/// Starts brokers 1, 2 and 3, each with `config(id)`.
pub async fn start_all(config: impl Fn(u64) -> NodeConfig) -> Vec<Option<Node>> {
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Some(start_node(config(id)).await.unwrap()));
    }
    nodes
}

/// Stops every broker still running.
pub async fn shutdown_all(nodes: Vec<Option<Node>>) {
    for node in nodes.into_iter().flatten() {
        node.shutdown().await.unwrap();
    }
}

/// Waits (up to 20 s a partition) until every running broker of `cluster` holds each record of
/// `acked` (partition, offset, value) at its offset, and each value once: acknowledged writes
/// that a failover or a restart must not lose nor double.
pub async fn wait_for_acked_on_every_replica(
    cluster: &replog::LocalCluster,
    topic: &str,
    partitions: u32,
    acked: &[(u32, u64, String)],
) {
    for p in 0..partitions {
        let want: BTreeMap<u64, String> = acked
            .iter()
            .filter(|(q, _, _)| *q == p)
            .map(|(_, o, v)| (*o, v.clone()))
            .collect();
        let last = want.keys().last().copied().unwrap_or(0);
        crate::support::wait_until(
            Duration::from_secs(20),
            "every replica to hold the acknowledged records",
            async || {
                for node in cluster.nodes() {
                    let got = read_all(node, topic, p)?;
                    // Each value is written once, so each may be in the log once.
                    let distinct: std::collections::BTreeSet<&String> = got.values().collect();
                    let end = got.keys().last().map_or(0, |o| o + 1);
                    if want.iter().any(|(o, v)| got.get(o) != Some(v))
                        || end <= last
                        || distinct.len() != got.len()
                    {
                        return Err(format!("broker {} partition {p}", node.id()));
                    }
                }
                Ok(())
            },
        )
        .await;
    }
}

/// Every record of `topic`'s partition `p` in `node`'s replica, by offset, as text.
fn read_all(node: &Node, topic: &str, p: u32) -> Result<BTreeMap<u64, String>, String> {
    let mut got = BTreeMap::new();
    let mut next = replog::Offset(0);
    // Bounded: each read moves `next` on, and stops at the end.
    for _ in 0..10_000 {
        let batches = node
            .read(topic, p, next, 1 << 20)
            .map_err(|e| e.to_string())?;
        if batches.is_empty() {
            break;
        }
        for b in batches {
            for (o, r) in b.records() {
                got.insert(o.get(), String::from_utf8_lossy(&r.value).into_owned());
                next = replog::Offset(o.get() + 1);
            }
        }
    }
    Ok(got)
}

/// A task that writes one record at a time to `topic`'s `partitions` in turn, through
/// `client`, until `stop` is set, and returns what was acknowledged: (partition, offset,
/// value), each value written once. `written` counts the acknowledgements as they come.
pub fn spawn_writer(
    client: std::sync::Arc<replog::Client>,
    topic: &'static str,
    partitions: u32,
    (stop, written): (
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ),
) -> tokio::task::JoinHandle<Vec<(u32, u64, String)>> {
    use std::sync::atomic::Ordering;
    tokio::spawn(async move {
        let mut acked = Vec::new();
        // Bounded by `stop`.
        for n in 0u64.. {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let p = (n % u64::from(partitions)) as u32;
            let value = format!("{n}");
            if let Ok(d) = client
                .send(topic, p, &[replog::Record::new(value.clone())])
                .await
            {
                acked.push((p, d.base_offset.get(), value));
                written.fetch_add(1, Ordering::AcqRel);
            }
        }
        acked
    })
}

/// Waits (up to 30 s) until the writer of [`spawn_writer`] has had `more` writes acknowledged
/// since it counted `since`: writes go on after what came before, however slow the machine.
pub async fn wait_for_writes(written: &std::sync::atomic::AtomicUsize, since: usize, more: usize) {
    crate::support::wait_until(
        Duration::from_secs(30),
        "the writer to have writes acknowledged",
        async || {
            let now = written.load(std::sync::atomic::Ordering::Acquire);
            (now >= since + more)
                .then_some(())
                .ok_or(format!("{now} written"))
        },
    )
    .await;
}
