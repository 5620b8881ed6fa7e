//! A broker's start: its listeners, its data directory, its replicas and the tasks it runs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{
    Broker, HostedReplica, META_RECORD_BYTES_MAX, META_SEGMENT_BYTES, Node, NodeConfig,
    NodeHandler, ReplicaSpec, follow_metadata, groups, liveness, open_data_dir,
    open_or_rebuild_replica, open_replica, partition_dir, replicas, service,
};
use crate::catalog::{CONFIGURED_TOPIC_ID, Catalog, METADATA_TOPIC};
use crate::config::LogConfig;
use crate::env::Env;
use crate::error::Result;
use crate::raft::replica::Timing;
use crate::tls::{TlsDialer, TlsServer};
use crate::transport::{Admission, ClientBudgets, Handler, PeerSet, ServerLimits, spawn_server};
use crate::types::Durability;
use crate::types::{NodeId, PartitionId};
use service::BrokerService;

/// The TLS a broker's listeners serve and its peer connections dial with.
struct BrokerTls {
    /// The certificate the listeners serving TLS present (see [`NodeConfig::tls`]).
    server: Option<TlsServer>,
    /// What the native listener serves.
    native: Option<TlsServer>,
    /// What peers are dialed over.
    dialer: Option<TlsDialer>,
    /// What the Kafka listener serves, where its security protocol asks for TLS.
    kafka: Option<TlsServer>,
}

impl Node {
    /// Opens and recovers the replicas of the configured topics and the metadata Raft group,
    /// listens on `config.listen`, and joins each Raft group. Replicas of created topics start a
    /// moment later, once the metadata log is re-applied (at once, from the local log, up to
    /// where it was committed at the last shutdown). A fresh cluster elects its leaders by
    /// itself.
    ///
    /// # Errors
    ///
    /// Anything [`PartitionLog::open`](crate::PartitionLog::open) returns, and [`Error::Io`]
    /// if the address cannot be bound.
    ///
    /// [`Error::Io`]: crate::Error::Io
    pub async fn start(config: NodeConfig) -> Result<Node> {
        Node::start_in(config, Env::default(), None).await
    }

    /// [`start`](Self::start) on a listener the caller bound already (`config.listen` becomes
    /// its address): a caller that binds port 0 to find a free port hands that very socket
    /// over, so no other process can take the port in between.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_on(config: NodeConfig, listener: std::net::TcpListener) -> Result<Node> {
        Node::start_in(config, Env::default(), Some(listener)).await
    }

    /// [`start`](Self::start) in the environment `env` (for tests: the disk faults of its logs,
    /// the network faults between it and its peers), on `listener` if given (as
    /// [`start_on`](Self::start_on)) or else on `config.listen`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_in(
        mut config: NodeConfig,
        env: Env,
        listener: Option<std::net::TcpListener>,
    ) -> Result<Node> {
        // Both listeners are bound before anything opens: a start that fails after opening
        // replicas must stop them again (see `replicas::let_go`).
        let listener = bind_native(&mut config, listener).await?;
        let kafka_listener = match config.kafka_listen {
            Some(at) => {
                let listener = tokio::net::TcpListener::bind(at).await.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot listen on {at}: {e}"))
                })?;
                let local = listener.local_addr()?;
                Some((listener, local))
            }
            None => None,
        };
        let tls = broker_tls(&config)?;
        let data_lock = open_data_dir(&config.data_dir)?;
        if config.log.preallocate == crate::segment::Preallocate::Auto {
            config.log.preallocate = crate::segment::Preallocate::Fallocate;
        }
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let broker = open_broker(config, env, addr, tls.dialer, &shutdown_rx).await?;
        // Before anything can reach the replicas (see `Broker::initialize`).
        replicas::initialize_replicas(&broker).await;
        if let Err(e) = broker.check_version_at_start().await {
            // The broker's map (or its metadata field) and this list hold each one.
            replicas::let_go(&broker.all_replicas(), 2, super::SHUTDOWN_RELEASE_WAIT).await;
            return Err(e);
        }
        broker.refresh_topic_settings();
        let handler: Arc<dyn Handler> = Arc::new(NodeHandler {
            broker: Arc::clone(&broker),
            service: BrokerService::new(Arc::clone(&broker)),
            sasl: (broker.config.native_sasl).then(|| service::SaslSettings::new(&broker.config)),
        });
        let shutdown_for_retention = shutdown_rx.clone();
        let limits = broker.config.server_limits();
        let client_budgets = ClientBudgets::new(&limits);
        // One connection cap for both doors.
        let admission = Admission::new(limits);
        let kafka_bound = std::sync::OnceLock::new();
        let kafka = match kafka_listener {
            Some((listener, local)) => {
                let doors = (limits, client_budgets.clone(), Arc::clone(&admission));
                let on = (listener, local);
                let kafka = spawn_kafka(&broker, on, doors, tls.kafka, shutdown_rx.clone());
                let _ = kafka_bound.set(local);
                Some(kafka)
            }
            None => None,
        };
        let server = spawn_server(
            listener,
            handler,
            limits,
            client_budgets,
            (admission, tls.native),
            shutdown_rx,
        );
        let follower = tokio::spawn(follow_metadata(
            Arc::clone(&broker),
            shutdown_for_retention.clone(),
        ));
        let node = Node {
            broker,
            addr,
            kafka_bound,
            shutdown,
            server,
            follower,
            kafka,
            tls: tls.server,
            background: Vec::new(),
            _data_lock: data_lock,
        };
        let background = node.spawn_background(shutdown_for_retention);
        Ok(Node { background, ..node })
    }

    /// Starts the tasks a running broker keeps going until `shutdown`: supervision, group
    /// timers, metrics, liveness, quiet groups, leader balance and retention; each by name.
    fn spawn_background(
        &self,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<(&'static str, JoinHandle<()>)> {
        let broker = &self.broker;
        let mut tasks = vec![
            (
                "supervision",
                tokio::spawn(Arc::clone(broker).supervise(shutdown.clone())),
            ),
            (
                "group timers",
                tokio::spawn(groups::run_timers(Arc::clone(broker), shutdown.clone())),
            ),
            (
                "metrics",
                tokio::spawn(Arc::clone(broker).report_metrics(shutdown.clone())),
            ),
            (
                "liveness",
                tokio::spawn(Arc::clone(broker).run_liveness(shutdown.clone())),
            ),
            (
                "quiet groups",
                tokio::spawn(Arc::clone(broker).run_quiet(shutdown.clone())),
            ),
        ];
        tasks.extend(
            self.spawn_leader_balance(shutdown.clone())
                .map(|t| ("leader balance", t)),
        );
        tasks.extend(self.spawn_retention(shutdown).map(|t| ("retention", t)));
        tasks
    }
}

/// Validates `config` and returns the native listener: `listener` if the caller bound one
/// (`config.listen` becomes its address), or else one bound on `config.listen`.
async fn bind_native(
    config: &mut NodeConfig,
    listener: Option<std::net::TcpListener>,
) -> Result<tokio::net::TcpListener> {
    Ok(match listener {
        Some(listener) => {
            config.listen = listener.local_addr()?;
            config.validate()?;
            listener.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(listener)?
        }
        None => {
            config.validate()?;
            tokio::net::TcpListener::bind(config.listen)
                .await
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("cannot listen on {}: {e}", config.listen),
                    )
                })?
        }
    })
}

/// Loads the certificate of [`NodeConfig::tls`], and from it the TLS of each listener and of
/// the peer connections.
fn broker_tls(config: &NodeConfig) -> Result<BrokerTls> {
    let tls = config.tls.as_ref().map(TlsServer::new).transpose()?;
    // With the brokers' CA, the native listener serves TLS, asking for certificates (peer
    // brokers present theirs), and peers are dialed over it, with this broker's.
    let ca = config.tls.as_ref().and_then(|t| t.ca_cert.clone());
    // Kafka clients are asked for certificates where `client_auth` says so.
    let client_auth = config.client_auth;
    let required = client_auth == crate::ClientAuth::Required;
    let (native, dialer, kafka) = match (&tls, ca) {
        (Some(server), Some(ca)) => (
            Some(server.asking_for_certificates(&ca, required)?),
            Some(TlsDialer::for_peers(&ca, server)?),
            match client_auth {
                crate::ClientAuth::None => Some(server.clone()),
                _ => Some(server.asking_for_certificates(&ca, required)?),
            },
        ),
        (server, _) => (None, None, server.clone()),
    };
    Ok(BrokerTls {
        server: tls,
        native,
        dialer,
        kafka,
    })
}

/// Connects to the peers, opens the metadata Raft group's replica and the configured topics'
/// replicas, and builds the broker's shared state around them (its replicas not started yet:
/// see [`replicas::initialize_replicas`]).
async fn open_broker(
    config: NodeConfig,
    env: Env,
    addr: SocketAddr,
    dialer: Option<TlsDialer>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Result<Arc<Broker>> {
    let timing = Timing {
        heartbeat: config.heartbeat_interval,
        election_timeout: config.election_timeout,
    };
    let peers = PeerSet::new(
        &config.peers,
        config.id,
        config.frame_bytes_max,
        shutdown_rx,
        (dialer, config.protocol_version),
    );
    #[cfg(any(test, feature = "failpoints"))]
    let peers = peers.with_faults(env.net_faults());
    let peers = Arc::new(peers);
    let founders = founders(&config);
    let catalog = Catalog::with_configured(&config.topics, &founders);
    let opener = ReplicaOpener {
        config: &config,
        env: &env,
        peers: &peers,
        timing,
    };
    let (meta, replicas) = opener.open_configured().await?;
    let topic_defaults = crate::topic_config::broker_defaults(&config.log, &config.topic_defaults);
    let advertised = config.advertised.clone().unwrap_or_else(|| addr.into());
    let coordinator = groups::coordinator(&config);
    let liveness = Arc::new(liveness::Liveness::new(
        config.heartbeat_interval,
        config.election_timeout,
    ));
    Ok(Arc::new(Broker {
        config,
        env,
        addr: advertised,
        timing,
        peers,
        founders,
        replicas: RwLock::new(replicas),
        meta,
        catalog_applied: watch::Sender::new(catalog.next_offset()),
        catalog: RwLock::new(catalog),
        replicas_changing: tokio::sync::Mutex::new(()),
        closing: AtomicBool::new(false),
        down: parking_lot::Mutex::default(),
        stopping: shutdown_rx.clone(),
        coordinator,
        kafka_addr: std::sync::OnceLock::new(),
        producer_ids: tokio::sync::Mutex::new(0..0),
        failed_logins: crate::security::FailedLogins::default(),
        topic_defaults,
        liveness,
        withdrawals: Default::default(),
        withdrawn: Default::default(),
        #[cfg(test)]
        lost_withdrawals: Default::default(),
    }))
}

/// The founding brokers' ids, sorted: this one's and its peers', or only its peers' when it
/// joins.
fn founders(config: &NodeConfig) -> Vec<NodeId> {
    let mut founders: Vec<NodeId> = config.peers.keys().copied().collect();
    if !config.join {
        founders.push(config.id);
    }
    founders.sort_unstable();
    founders.dedup();
    founders
}

/// The metadata log's configuration, from the broker's `log`.
fn metadata_log_config(log: &LogConfig) -> LogConfig {
    // The metadata log is never purged (the catalog is its replay) and always synced. Its
    // records are a few topic commands: small segments, preallocated without writing.
    let mut meta_log = log.clone();
    meta_log.retention_bytes = None;
    meta_log.retention_time = None;
    meta_log.segment_bytes = META_SEGMENT_BYTES;
    meta_log.record_bytes_max = META_RECORD_BYTES_MAX;
    meta_log.batch_bytes_max = META_RECORD_BYTES_MAX;
    meta_log.preallocate = crate::segment::Preallocate::Fallocate;
    meta_log
}

/// Opens a starting broker's replicas in its data directory.
struct ReplicaOpener<'a> {
    config: &'a NodeConfig,
    env: &'a Env,
    peers: &'a Arc<PeerSet>,
    timing: Timing,
}

impl ReplicaOpener<'_> {
    /// Opens the metadata Raft group's replica, then the configured topics' replicas.
    async fn open_configured(
        &self,
    ) -> Result<(Arc<HostedReplica>, HashMap<PartitionId, Arc<HostedReplica>>)> {
        let config = self.config;
        let meta = self
            .open(
                PartitionId::new(METADATA_TOPIC, 0),
                CONFIGURED_TOPIC_ID,
                metadata_log_config(&config.log),
                Durability::Fsync,
            )
            .await?;
        let mut replicas = HashMap::new();
        // Configured topics have a replica on every founding broker, and only there.
        let configured = if config.join {
            &[][..]
        } else {
            &config.topics[..]
        };
        for (topic, count) in configured {
            for partition in 0..*count {
                let id = PartitionId::new(topic.clone(), partition);
                let opened = self
                    .open(
                        id.clone(),
                        CONFIGURED_TOPIC_ID,
                        config.log.clone(),
                        config.durability,
                    )
                    .await;
                match opened {
                    Ok(replica) => {
                        replicas.insert(id, replica);
                    }
                    Err(e) => {
                        // What opened already runs Raft members over its logs: they stop.
                        let opened: Vec<_> = std::iter::once(meta)
                            .chain(replicas.into_values())
                            .collect();
                        replicas::let_go(&opened, 1, super::SHUTDOWN_RELEASE_WAIT).await;
                        return Err(e);
                    }
                }
            }
        }
        Ok((meta, replicas))
    }

    /// Opens the replica of partition `id` (of the topic `topic_id`) with `log` and
    /// `durability`, rebuilding a partition replica whose files are damaged.
    async fn open(
        &self,
        id: PartitionId,
        topic_id: u64,
        log: LogConfig,
        durability: Durability,
    ) -> Result<Arc<HostedReplica>> {
        let config = self.config;
        let peers = Arc::clone(self.peers);
        let dir = partition_dir(&config.data_dir, &id);
        let me = config.id;
        let others = config.peers.keys().filter(|p| **p != me).count();
        // Partition replicas with damaged files are rebuilt from their leaders; the metadata
        // replica (the catalog every replica is started from) is not.
        let metadata = id.topic == METADATA_TOPIC;
        let env = if metadata {
            self.env.without_disk_faults()
        } else {
            self.env.clone()
        };
        let spec = ReplicaSpec {
            me,
            timing: self.timing,
            peers,
            id,
            topic_id,
            dir,
            log,
            env,
            durability,
            replication_bytes_max: config.payload_bytes_max(),
        };
        if metadata {
            open_replica(spec).await
        } else {
            open_or_rebuild_replica(others, spec).await
        }
    }
}

/// Starts the Kafka listener's accept loop on `listener`, serving with `tls` where its
/// security protocol asks for TLS and sharing the native listener's limits, client budgets and
/// admission (`doors`); `local` is the address it is bound to. Returns the accept loop.
fn spawn_kafka(
    broker: &Arc<Broker>,
    (listener, local): (tokio::net::TcpListener, SocketAddr),
    (limits, budgets, admission): (ServerLimits, ClientBudgets, Arc<Admission>),
    tls: Option<TlsServer>,
    shutdown_rx: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let advertised = broker.config.kafka_advertised.clone();
    let _ = broker
        .kafka_addr
        .set(advertised.unwrap_or_else(|| local.into()));
    let sasl = crate::kafka::sasl_settings(&broker.config);
    let config = crate::kafka::KafkaConfig {
        me: broker.config.id,
        limits,
        budgets,
        admission,
        sasl,
        principal_rules: broker.config.ssl_principal_mapping_rules.clone(),
    };
    let protocol = broker.config.kafka_security_protocol;
    tracing::info!(%local, security = protocol.name(), "kafka listener");
    crate::kafka::spawn(
        listener,
        BrokerService::new(Arc::clone(broker)),
        config,
        tls.filter(|_| protocol.tls()),
        shutdown_rx,
    )
}
