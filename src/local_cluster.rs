//! [`LocalCluster`]: a cluster's brokers in this process, on loopback, for tests, benches,
//! examples and the demo (and an embedding service's own tests).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::error::{Error, Result};
use crate::node::{Node, NodeConfig};
use crate::types::NodeId;

/// `n` brokers of one cluster in this process, with ids `1..=n`, each listening on a port of
/// 127.0.0.1 that was bound once and handed to it (never found free, released, and bound
/// again, which another process could take in between), with its data in `{dir}/{id}`.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> replog::Result<()> {
/// use std::time::Duration;
/// use replog::{Client, ClientConfig, LocalCluster, Record};
///
/// let dir = tempfile::tempdir()?;
/// let cluster = LocalCluster::start(3, dir.path(), |config| {
///     config.topics = vec![("email.send".into(), 1)];
/// })
/// .await?;
/// cluster.wait_for_leaders("email.send", 1, Duration::from_secs(20)).await?;
/// let client = Client::connect(&cluster.addrs()[1..2], ClientConfig::default()).await?;
/// client.send("email.send", 0, &[Record::new("hello")]).await?;
/// # drop(client);
/// cluster.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LocalCluster {
    configs: Vec<NodeConfig>,
    envs: Vec<Env>,
    nodes: Vec<Option<Arc<Node>>>,
}

impl LocalCluster {
    /// Starts `n` brokers. `configure` sees each broker's configuration (its id, address, peers
    /// and data directory already set) before it starts.
    ///
    /// # Errors
    ///
    /// What [`Node::start_on`] returns for the first broker that does not start (the ones
    /// started before it are shut down).
    pub async fn start(
        n: usize,
        dir: &Path,
        configure: impl FnMut(&mut NodeConfig),
    ) -> Result<LocalCluster> {
        let listeners = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        LocalCluster::start_on(listeners, dir, configure).await
    }

    /// [`start`](Self::start) on listeners the caller bound (broker `i + 1` on
    /// `listeners[i]`), for fixed ports such as the tutorial's 9092, 19092 and 29092.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_on(
        listeners: Vec<TcpListener>,
        dir: &Path,
        configure: impl FnMut(&mut NodeConfig),
    ) -> Result<LocalCluster> {
        LocalCluster::start_in(listeners, dir, configure, |_| Env::default()).await
    }

    /// [`start_on`](Self::start_on) with broker `id` in the environment `env(id)` (for
    /// tests: each broker's disk faults, the network faults between them). A broker
    /// [`restart`](Self::restart)ed keeps its environment.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_in(
        listeners: Vec<TcpListener>,
        dir: &Path,
        mut configure: impl FnMut(&mut NodeConfig),
        mut env: impl FnMut(NodeId) -> Env,
    ) -> Result<LocalCluster> {
        let addrs = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut cluster = LocalCluster {
            configs: Vec::new(),
            envs: Vec::new(),
            nodes: Vec::new(),
        };
        for ((id, addr), listener) in (1u64..).zip(&addrs).zip(listeners) {
            let peers: BTreeMap<NodeId, SocketAddr> = (1u64..)
                .zip(&addrs)
                .filter(|(p, _)| *p != id)
                .map(|(p, a)| (p, *a))
                .collect();
            let mut config = NodeConfig::new(id, *addr, peers, dir.join(id.to_string()));
            configure(&mut config);
            let env = env(id);
            match Node::start_in(config.clone(), env.clone(), Some(listener)).await {
                Ok(node) => {
                    cluster.configs.push(config);
                    cluster.envs.push(env);
                    cluster.nodes.push(Some(Arc::new(node)));
                }
                Err(e) => {
                    let _ = cluster.shutdown().await;
                    return Err(e);
                }
            }
        }
        Ok(cluster)
    }

    /// Every broker's address, broker 1's first.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.configs.iter().map(|c| c.listen).collect()
    }

    /// The running brokers.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().flatten().map(|n| &**n)
    }

    /// Broker `id`, unless it is stopped.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(index(id)?)?.as_deref()
    }

    /// Broker `id` as a handle that tasks spawned on the runtime can own (a borrow from
    /// [`node`](Self::node) cannot outlive the cluster). Drop every such handle before the
    /// broker is stopped: [`stop`](Self::stop) and [`shutdown`](Self::shutdown) refuse a
    /// broker still shared.
    pub fn shared(&self, id: NodeId) -> Option<Arc<Node>> {
        self.nodes.get(index(id)?)?.clone()
    }

    /// The configuration broker `id` was started with.
    pub fn config(&self, id: NodeId) -> Option<&NodeConfig> {
        self.configs.get(index(id)?)
    }

    /// Broker `id`'s configuration, to change before it is [`restart`](Self::restart)ed (as an
    /// operator changes a broker's flags between a stop and a start).
    pub fn config_mut(&mut self, id: NodeId) -> Option<&mut NodeConfig> {
        self.configs.get_mut(index(id)?)
    }

    /// The directory broker `id` keeps its data in.
    pub fn data_dir(&self, id: NodeId) -> Option<PathBuf> {
        Some(self.config(id)?.data_dir.clone())
    }

    /// Shuts broker `id` down (a no-op if it is stopped).
    ///
    /// # Errors
    ///
    /// What [`Node::shutdown`] returns; [`Error::InvalidConfig`] if a handle from
    /// [`shared`](Self::shared) is still held (the broker keeps running).
    pub async fn stop(&mut self, id: NodeId) -> Result<()> {
        let Some(slot) = index(id).and_then(|i| self.nodes.get_mut(i)) else {
            return Ok(());
        };
        match slot.take().map(Arc::try_unwrap) {
            None => Ok(()),
            Some(Ok(node)) => node.shutdown().await,
            Some(Err(node)) => {
                *slot = Some(node);
                Err(still_shared(id))
            }
        }
    }

    /// Starts broker `id` again with its configuration, on its address (a no-op if it runs).
    ///
    /// # Errors
    ///
    /// What [`Node::start`] returns.
    pub async fn restart(&mut self, id: NodeId) -> Result<()> {
        let Some(i) = index(id).filter(|i| *i < self.nodes.len()) else {
            return Err(unknown(id));
        };
        if self.nodes[i].is_none() {
            let node = Node::start_in(self.configs[i].clone(), self.envs[i].clone(), None).await?;
            self.nodes[i] = Some(Arc::new(node));
        }
        Ok(())
    }

    /// Waits until every partition of `topic` has a leader that every running broker hosting
    /// a replica of it names (the election is settled, not only won somewhere), and that is
    /// running itself, and returns them (partition 0's first).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if that does not happen within `timeout`.
    pub async fn wait_for_leaders(
        &self,
        topic: &str,
        partitions: u32,
        timeout: Duration,
    ) -> Result<Vec<NodeId>> {
        let started = Instant::now();
        // Bounded by `timeout`.
        loop {
            let leaders: Option<Vec<NodeId>> = (0..partitions)
                .map(|p| {
                    let named: Vec<Option<NodeId>> = self
                        .nodes()
                        .filter_map(|n| Some(n.status(topic, p).ok()?.leader))
                        .collect();
                    let leader = (*named.first()?)?;
                    let agreed = named.iter().all(|l| *l == Some(leader));
                    (agreed && self.node(leader).is_some()).then_some(leader)
                })
                .collect();
            if let Some(leaders) = leaders {
                return Ok(leaders);
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    last: format!("waiting for a leader of every partition of {topic}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Shuts every running broker down, all of them even if one fails: each is told first that
    /// the whole cluster stops (no leadership is handed over, no peer is reported lost).
    ///
    /// # Errors
    ///
    /// The first error [`stop`](Self::stop) returned for a broker.
    pub async fn shutdown(mut self) -> Result<()> {
        // Every broker learns first that all of them stop, so that none logs the others' going
        // as a lost peer. A broker still shared elsewhere is left as it is (stop refuses it).
        for node in self.nodes.iter().flatten() {
            if Arc::strong_count(node) == 1 {
                node.stopping_with_its_cluster();
            }
        }
        let mut first = Ok(());
        for id in (1..).take(self.nodes.len()) {
            let result = self.stop(id).await;
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

fn index(id: NodeId) -> Option<usize> {
    usize::try_from(id).ok()?.checked_sub(1)
}

fn still_shared(id: NodeId) -> Error {
    Error::InvalidConfig {
        field: "id",
        reason: format!("broker {id} is still shared: drop its LocalCluster::shared handles first"),
    }
}

fn unknown(id: NodeId) -> Error {
    Error::InvalidConfig {
        field: "id",
        reason: format!("broker {id} is not in this cluster"),
    }
}
