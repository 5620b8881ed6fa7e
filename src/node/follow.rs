//! The task that follows the metadata log on every broker: it applies each committed command
//! to the catalog and starts and stops replicas to match; registers what this broker must
//! have in the log (its address, its Kafka address, its rack, the bootstrap users); and, on
//! the metadata leader, adds joined brokers to the metadata Raft group, removes brokers that left,
//! and proposes the moves that balance replicas.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::MetaCommand;
use crate::protocol::ProposeRequest;
use crate::types::PartitionId;

use super::Broker;

/// Partitions replica balancing moves at once.
const REPLICA_MOVES_AT_ONCE: usize = 4;

/// Follows the metadata log: applies each committed command to the catalog, then starts and
/// stops replicas to match it. Runs until shutdown.
pub(super) async fn follow_metadata(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut applied = broker.meta.sm.subscribe();
    let mut follower = Follower::new(broker);
    loop {
        follower.round().await;
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = applied.changed() => {}
            // Retries replicas that failed to start.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
    follower.abort_tasks();
}

/// What the metadata follower keeps from one round to the next: the tasks it started that may
/// still run (one of each kind at a time), and what it has said already.
struct Follower {
    broker: Arc<Broker>,
    /// Registering this broker's address, Kafka address or rack, or the bootstrap users.
    registering: Option<tokio::task::JoinHandle<()>>,
    /// Adding a joined broker to the metadata Raft group.
    adding: Option<tokio::task::JoinHandle<()>>,
    /// Driving each partition's move.
    moving: HashMap<PartitionId, tokio::task::JoinHandle<()>>,
    /// Taking a decommissioned or removed broker out.
    removing: Option<tokio::task::JoinHandle<()>>,
    /// Proposing a replica balancing move.
    balancing: Option<tokio::task::JoinHandle<()>>,
    said_removed: bool,
    /// Finalizing the cluster's protocol version.
    finalizing: Option<tokio::task::JoinHandle<()>>,
    said_version: u16,
    said_refused: bool,
}

impl Follower {
    /// A follower of `broker`'s metadata log with nothing started or said yet.
    fn new(broker: Arc<Broker>) -> Follower {
        let said_version = broker.catalog.read().finalized_version();
        Follower {
            broker,
            registering: None,
            adding: None,
            moving: HashMap::new(),
            removing: None,
            balancing: None,
            said_removed: false,
            finalizing: None,
            said_version,
            said_refused: false,
        }
    }

    /// One round: applies what is new in the metadata log, starts and stops replicas to
    /// match, and starts the tasks that register this broker and, on the metadata leader,
    /// change the cluster's membership and balance its replicas.
    async fn round(&mut self) {
        let broker = Arc::clone(&self.broker);
        let progressed = self.catch_up_catalog();
        super::versions::say_finalized(&broker.catalog.read(), &mut self.said_version);
        super::versions::finalize_version(&broker, &mut self.finalizing);
        broker.reconcile().await;
        if progressed {
            broker.sweep_deleted();
            broker.refresh_topic_settings();
        }
        // Until the catalog has this broker's address, one registration at a time is in
        // flight; a failed one is tried again on the next round (at least a second later).
        let me = broker.config.id;
        broker.say_when_removed(&mut self.said_removed);
        let leaving = {
            let catalog = broker.catalog.read();
            catalog.is_draining(me) || catalog.is_removed(me)
        };
        self.register_address(leaving);
        // Then its Kafka address, the same way (the catalog's names it for every broker).
        self.register_kafka_addr();
        // Then its rack, the same way.
        self.register_rack(leaving);
        // The users the cluster starts with, while it has none (once it has one, they are the
        // operators' to change).
        self.write_bootstrap_users();
        broker.drive_moves(&mut self.moving);
        // The metadata leader makes every broker that joined a learner of the metadata Raft group,
        // one at a time (a membership change waits for the previous one).
        self.add_joined_broker();
        // The metadata leader takes each decommissioned broker that holds no replica any
        // more out of the metadata Raft group, then out of the cluster, one at a time.
        self.remove_departed_broker();
        // With replica balancing on, the metadata leader records one move at a time that
        // evens out the brokers' replica counts, a few partitions moving at once.
        self.balance_replicas();
    }

    /// Applies the committed commands not applied yet to the catalog; returns whether any
    /// was.
    fn catch_up_catalog(&mut self) -> bool {
        match self.broker.catch_up_catalog() {
            Ok(progressed) => progressed,
            // Said once: the broker applies no more of the log until it runs a newer build.
            Err(e @ crate::Error::UnsupportedVersion { .. }) => {
                if !std::mem::replace(&mut self.said_refused, true) {
                    tracing::error!(error = %e, "metadata log not applied past a record this broker does not understand");
                }
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "metadata log unreadable; will retry");
                false
            }
        }
    }

    /// Whether no registration is in flight.
    fn registering_done(&self) -> bool {
        self.registering
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Registers this broker's address, unless it is `leaving` or the catalog has it.
    fn register_address(&mut self, leaving: bool) {
        let broker = &self.broker;
        let me = broker.config.id;
        if !leaving
            && broker.catalog.read().broker_addr(me).as_ref() != Some(&broker.addr)
            && self.registering_done()
        {
            let broker = Arc::clone(broker);
            self.registering = Some(tokio::spawn(async move {
                if let Err(e) = broker.register().await {
                    tracing::debug!(error = %e, "registering this broker's address failed; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
    }

    /// Registers this broker's Kafka address, once its address is registered, if the catalog
    /// does not have it.
    fn register_kafka_addr(&mut self) {
        let broker = &self.broker;
        let me = broker.config.id;
        if let Some(kafka) = broker.kafka_addr.get().cloned()
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.catalog.read().kafka_addr(me).as_ref() != Some(&kafka)
            && broker.meta.raft.leader().is_some()
            && self.registering_done()
        {
            let command = MetaCommand::RegisterKafka {
                id: me,
                addr: kafka.to_string(),
            };
            self.registering = Some(propose_later(
                broker,
                command,
                "this broker's Kafka address",
            ));
        }
    }

    /// Registers this broker's rack, unless it is `leaving`, once its address is registered,
    /// if the catalog does not have it.
    fn register_rack(&mut self, leaving: bool) {
        let broker = &self.broker;
        let me = broker.config.id;
        if !leaving
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.catalog.read().rack(me) != broker.config.rack.as_deref()
            && broker.meta.raft.leader().is_some()
            && self.registering_done()
        {
            let command = MetaCommand::RegisterRack {
                id: me,
                rack: broker.config.rack.clone(),
            };
            self.registering = Some(propose_later(broker, command, "this broker's rack"));
        }
    }

    /// Writes the configured bootstrap users, once this broker's address is registered, while
    /// the cluster has no user.
    fn write_bootstrap_users(&mut self) {
        let broker = &self.broker;
        let me = broker.config.id;
        if !broker.config.bootstrap_users.is_empty()
            && !broker.catalog.read().has_users()
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.meta.raft.leader().is_some()
            && self.registering_done()
        {
            let broker = Arc::clone(broker);
            self.registering = Some(tokio::spawn(async move {
                for (user, credential) in &broker.config.bootstrap_users {
                    let request = ProposeRequest {
                        command: credential.put_command(user),
                        forwarded: false,
                    };
                    if let Err(e) = broker.propose(request).await {
                        tracing::debug!(error = %e, "writing the bootstrap users failed; will retry");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        return;
                    }
                }
                let users: std::collections::BTreeSet<&str> = broker
                    .config
                    .bootstrap_users
                    .iter()
                    .map(|(user, _)| user.as_str())
                    .collect();
                tracing::info!(
                    users = users.len(),
                    "bootstrap users written to the metadata log"
                );
            }));
        }
    }

    /// On the metadata leader, with no addition in flight: makes a broker that joined and is
    /// not a member of the metadata Raft group yet a learner of it.
    fn add_joined_broker(&mut self) {
        let broker = &self.broker;
        let me = broker.config.id;
        if broker.meta.raft.leader() == Some(me)
            && self
                .adding
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let members = broker.meta.raft.member_ids();
            let catalog = broker.catalog.read();
            // Not a broker being decommissioned: it leaves the metadata Raft group instead.
            let missing = catalog
                .brokers()
                .into_iter()
                .find(|id| !members.contains(id) && !catalog.is_draining(*id));
            drop(catalog);
            if let Some(id) = missing
                && let Some(addr) = broker.broker_addr(id)
            {
                let broker = Arc::clone(broker);
                self.adding = Some(tokio::spawn(async move {
                    match broker.meta.raft.add_learner(id, addr.to_string()).await {
                        Ok(()) => {
                            tracing::info!(broker = id, "broker joined the metadata Raft group")
                        }
                        Err(e) => {
                            tracing::debug!(broker = id, error = %e, "adding a learner failed; will retry");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }));
            }
        }
    }

    /// On the metadata leader, with no removal in flight: removes a drained broker, or else
    /// takes a removed one out of the metadata Raft group.
    fn remove_departed_broker(&mut self) {
        let broker = &self.broker;
        let me = broker.config.id;
        if broker.meta.raft.leader() == Some(me)
            && self
                .removing
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let drained = broker.catalog.read().drained().first().copied();
            let members = broker.meta.raft.member_ids();
            let gone = {
                let catalog = broker.catalog.read();
                members.into_iter().find(|m| catalog.is_removed(*m))
            };
            let broker = Arc::clone(broker);
            self.removing = match (drained, gone) {
                (Some(id), _) => Some(tokio::spawn(async move {
                    if let Err(e) = broker.remove_drained(id).await {
                        tracing::debug!(broker = id, error = %e, "removing a decommissioned broker; will retry");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                })),
                (None, Some(id)) => Some(tokio::spawn(async move {
                    if let Err(e) = broker.remove_from_metadata_raft(id).await {
                        tracing::debug!(broker = id, error = %e, "taking a removed broker out of the metadata Raft group; will retry");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                })),
                (None, None) => None,
            };
        }
    }

    /// With replica balancing on, on the metadata leader, with no balancing move being
    /// proposed: proposes the next move the catalog finds.
    fn balance_replicas(&mut self) {
        let broker = &self.broker;
        if broker.config.replica_balance
            && broker.meta.raft.leader() == Some(broker.config.id)
            && self
                .balancing
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
            && let Some((name, partition, replicas)) =
                broker.catalog.read().balancing_move(REPLICA_MOVES_AT_ONCE)
        {
            let broker = Arc::clone(broker);
            self.balancing = Some(tokio::spawn(async move {
                let request = ProposeRequest {
                    command: MetaCommand::ReassignPartition {
                        name: name.clone(),
                        partition,
                        replicas: replicas.clone(),
                    },
                    forwarded: false,
                };
                match broker.propose(request).await {
                    Ok(()) => {
                        tracing::info!(topic = %name, partition, ?replicas, "partition moving to even out the brokers' replicas")
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "a balancing move was refused; will retry");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }));
        }
    }

    /// Stops the registration, addition, finalization and partition move tasks still running
    /// (a removal or balancing move in flight runs on).
    fn abort_tasks(self) {
        for task in [self.registering, self.adding, self.finalizing]
            .into_iter()
            .flatten()
            .chain(self.moving.into_values())
        {
            task.abort();
        }
    }
}

/// Commits `command` in the metadata log on a task of its own; on failure it says so (at
/// debug: it is tried again on a later round) and the task holds its place a second, so that
/// the next try waits.
fn propose_later(
    broker: &Arc<Broker>,
    command: MetaCommand,
    what: &'static str,
) -> tokio::task::JoinHandle<()> {
    let broker = Arc::clone(broker);
    tokio::spawn(async move {
        let request = ProposeRequest {
            command,
            forwarded: false,
        };
        if let Err(e) = broker.propose(request).await {
            tracing::debug!(error = %e, "proposing {what} failed; will retry");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}
