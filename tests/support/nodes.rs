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
