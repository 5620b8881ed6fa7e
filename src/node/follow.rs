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
    let mut registering: Option<tokio::task::JoinHandle<()>> = None;
    let mut adding: Option<tokio::task::JoinHandle<()>> = None;
    let mut moving: HashMap<PartitionId, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut removing: Option<tokio::task::JoinHandle<()>> = None;
    let mut balancing: Option<tokio::task::JoinHandle<()>> = None;
    let mut said_removed = false;
    let mut finalizing: Option<tokio::task::JoinHandle<()>> = None;
    let mut said_version = broker.catalog.read().finalized_version();
    let mut said_refused = false;
    loop {
        let progressed = match broker.catch_up_catalog() {
            Ok(progressed) => progressed,
            // Said once: the broker applies no more of the log until it runs a newer build.
            Err(e @ crate::Error::UnsupportedVersion { .. }) => {
                if !std::mem::replace(&mut said_refused, true) {
                    tracing::error!(error = %e, "metadata log not applied past a record this broker does not understand");
                }
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "metadata log unreadable; will retry");
                false
            }
        };
        super::versions::say_finalized(&broker.catalog.read(), &mut said_version);
        super::versions::finalize_version(&broker, &mut finalizing);
        broker.reconcile().await;
        if progressed {
            broker.sweep_deleted();
            broker.refresh_topic_settings();
        }
        // Until the catalog has this broker's address, one registration at a time is in
        // flight; a failed one is tried again on the next round (at least a second later).
        let me = broker.config.id;
        broker.say_when_removed(&mut said_removed);
        let leaving = {
            let catalog = broker.catalog.read();
            catalog.is_draining(me) || catalog.is_removed(me)
        };
        if !leaving
            && broker.catalog.read().broker_addr(me).as_ref() != Some(&broker.addr)
            && registering
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let broker = Arc::clone(&broker);
            registering = Some(tokio::spawn(async move {
                if let Err(e) = broker.register().await {
                    tracing::debug!(error = %e, "registering this broker's address failed; will retry");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }));
        }
        // Then its Kafka address, the same way (the catalog's names it for every broker).
        if let Some(kafka) = broker.kafka_addr.get().cloned()
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.catalog.read().kafka_addr(me).as_ref() != Some(&kafka)
            && broker.meta.raft.leader().is_some()
            && registering
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let command = MetaCommand::RegisterKafka {
                id: me,
                addr: kafka.to_string(),
            };
            registering = Some(propose_later(
                &broker,
                command,
                "this broker's Kafka address",
            ));
        }
        // Then its rack, the same way.
        if !leaving
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.catalog.read().rack(me) != broker.config.rack.as_deref()
            && broker.meta.raft.leader().is_some()
            && registering
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let command = MetaCommand::RegisterRack {
                id: me,
                rack: broker.config.rack.clone(),
            };
            registering = Some(propose_later(&broker, command, "this broker's rack"));
        }
        // The users the cluster starts with, while it has none (once it has one, they are the
        // operators' to change).
        if !broker.config.bootstrap_users.is_empty()
            && !broker.catalog.read().has_users()
            && broker.catalog.read().broker_addr(me).as_ref() == Some(&broker.addr)
            && broker.meta.raft.leader().is_some()
            && registering
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let broker = Arc::clone(&broker);
            registering = Some(tokio::spawn(async move {
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
        broker.drive_moves(&mut moving);
        // The metadata leader makes every broker that joined a learner of the metadata Raft group,
        // one at a time (a membership change waits for the previous one).
        if broker.meta.raft.leader() == Some(me)
            && adding
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
                let broker = Arc::clone(&broker);
                adding = Some(tokio::spawn(async move {
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
        // The metadata leader takes each decommissioned broker that holds no replica any
        // more out of the metadata Raft group, then out of the cluster, one at a time.
        if broker.meta.raft.leader() == Some(me)
            && removing
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let drained = broker.catalog.read().drained().first().copied();
            let members = broker.meta.raft.member_ids();
            let gone = {
                let catalog = broker.catalog.read();
                members.into_iter().find(|m| catalog.is_removed(*m))
            };
            let broker = Arc::clone(&broker);
            removing = match (drained, gone) {
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
        // With replica balancing on, the metadata leader records one move at a time that
        // evens out the brokers' replica counts, a few partitions moving at once.
        if broker.config.replica_balance
            && broker.meta.raft.leader() == Some(me)
            && balancing
                .as_ref()
                .is_none_or(tokio::task::JoinHandle::is_finished)
            && let Some((name, partition, replicas)) =
                broker.catalog.read().balancing_move(REPLICA_MOVES_AT_ONCE)
        {
            let broker = Arc::clone(&broker);
            balancing = Some(tokio::spawn(async move {
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
    for task in [registering, adding, finalizing]
        .into_iter()
        .flatten()
        .chain(moving.into_values())
    {
        task.abort();
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
