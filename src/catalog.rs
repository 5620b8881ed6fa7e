//! The cluster catalog: which brokers there are and where, which topics exist, and which
//! brokers host each partition.
//!
//! Topics come from two places:
//!
//! - **Configured topics** ([`NodeConfig::topics`](crate::NodeConfig)) exist from the start on
//!   every founding broker, with a replica on each. Every broker must be given the same list.
//!   They cannot be deleted.
//! - **Created topics** come from the metadata Raft group: a Raft group that every broker is a
//!   member of (the founding brokers vote, brokers that joined later are learners), whose partition log (`__cluster_metadata-0`) holds one record per command
//!   ([`MetaCommand`], postcard-encoded in the record's value). Every broker applies the
//!   committed commands in log order, so every broker reaches the same catalog, and starts
//!   or stops the replicas assigned to it.
//!
//! The brokers come from the same two places: the founding brokers are every broker's
//! configuration (the same on all of them), and the metadata log adds each broker's registered
//! address and the brokers that joined since ([`MetaCommand::RegisterBroker`]).
//!
//! A created topic's id is the offset of its `CreateTopic` record in the metadata log plus one
//! (0 is [`CONFIGURED_TOPIC_ID`]): unique
//! for the life of the cluster, so a topic deleted and created again under the same name is
//! a different topic, and a broker that slept through both never mistakes the old data for
//! the new (see `partition.metadata` in `node/replica_dir.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::security::acl::Acls;
use crate::security::{ScramCredential, ScramMechanism};
use crate::topic_config::TopicConfigs;

mod acls;
mod command;
mod moves;
mod placement;

use crate::types::{NodeId, PartitionId};
pub(crate) use acls::{AclFilterRecord, AclRecord};
pub(crate) use command::MetaCommand;
pub(crate) use placement::{assign, assign_racked};
use placement::{check_assignment, check_replicas};

/// The metadata Raft group's topic name (one partition).
pub(crate) const METADATA_TOPIC: &str = "__cluster_metadata";

/// Longest file name the file systems replog runs on take (ext4, xfs, btrfs).
pub(crate) const FILE_NAME_BYTES_MAX: usize = 255;

/// The longest suffix replog puts after a topic's name in a file name: a deleted replica's
/// directory, `{topic}-{partition}.{topic id}-delete` (`node/replica_dir.rs`), with a partition
/// below [`PARTITIONS_MAX`] and a topic id up to `u64::MAX`.
const LONGEST_NAME_SUFFIX: &str = "-9999.18446744073709551615-delete";

/// The most bytes of a topic's name a replica's directory name holds (222): with
/// [`LONGEST_NAME_SUFFIX`] after them, every file name made from it fits
/// [`FILE_NAME_BYTES_MAX`]. A longer name stands in file names shortened to this length
/// (`node/replica_dir.rs`).
pub(crate) const DIR_TOPIC_BYTES_MAX: usize = FILE_NAME_BYTES_MAX - LONGEST_NAME_SUFFIX.len();

/// Longest topic name, Kafka's (249 bytes). Names over [`DIR_TOPIC_BYTES_MAX`] take a
/// shortened form in their replicas' directory names.
pub(crate) const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Most partitions per created topic.
pub(crate) const PARTITIONS_MAX: u32 = 10_000;

/// How many recent command outcomes the catalog remembers, for proposers waiting on them.
const OUTCOMES_KEPT: usize = 1024;

/// The id of every configured topic (created topics take their metadata log offset + 1).
pub(crate) const CONFIGURED_TOPIC_ID: u64 = 0;

/// A broker's replica of a partition, as the catalog places it (see [`Catalog::hosted_by`]).
#[derive(Clone, Debug)]
pub(crate) struct Hosting {
    pub(crate) topic_id: u64,
    pub(crate) hosts: Vec<NodeId>,
    pub(crate) founders: Option<Vec<NodeId>>,
}

/// Longest user name a credential may have, in bytes.
pub(crate) const USER_NAME_BYTES_MAX: usize = 255;

/// A block of producer ids a broker took: `ids`, by the command tagged `tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProducerBlock {
    pub(crate) ids: std::ops::Range<u64>,
    pub(crate) tag: u64,
}

/// Longest rack name, in bytes.
pub(crate) const RACK_BYTES_MAX: usize = 255;

/// The most producer ids one [`MetaCommand::AllocateProducerIds`] takes.
pub(crate) const PRODUCER_ID_BLOCK_MAX: u64 = 1 << 20;

/// Producer ids the cluster hands out lie in `[1, 2^63)`: positive as Kafka's (an `i64`), 0 being
/// replog's "no producer". A native client's own random ids lie above (see
/// `client::new_producer_id`), so the two never meet.
const PRODUCER_IDS_END: u64 = 1 << 63;

/// One topic in the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicEntry {
    /// [`CONFIGURED_TOPIC_ID`], or the creating record's offset + 1.
    pub(crate) id: u64,
    /// Per partition, the brokers hosting a replica; the first is the preferred leader.
    pub(crate) assignment: Vec<Vec<NodeId>>,
    /// Per partition, the brokers a reassignment moves it away from: they keep their replica
    /// until the Raft group no longer counts them ([`MetaCommand::ReassignDone`]).
    pub(crate) leaving: Vec<Vec<NodeId>>,
    /// Per partition, its replicas before the reassignment in progress; empty while none is.
    /// The partition's leader records each move's end, which clears it.
    pub(crate) was: Vec<Vec<NodeId>>,
    /// Per partition, whether it was ever reassigned. Such a Raft group is never initialized
    /// again: a replica made afresh for it (a broker it comes back to) must wait for the
    /// leader, not found a Raft group of its own.
    pub(crate) moved: Vec<bool>,
    /// The configs set on the topic (the rest are the brokers' defaults).
    pub(crate) configs: TopicConfigs,
    /// How many times its configs were changed since it was created.
    pub(crate) config_version: u64,
}

/// A topic's UUID as Kafka's clients know it (KIP-516): derived from its name and its id in
/// the catalog, so every broker names it alike without storing it, and a topic deleted and
/// created again under the same name has another. The first 16 bytes of SHA-256 over
/// `"replog topic id" 00`, the id (8 bytes, little-endian) and the name, with the bits of a
/// version-4 UUID set (never Kafka's all-zero "no id").
pub(crate) fn topic_uuid(name: &str, id: u64) -> [u8; 16] {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(b"replog topic id\0");
    hash.update(id.to_le_bytes());
    hash.update(name.as_bytes());
    let digest = hash.finalize();
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&digest[..16]);
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    uuid
}

impl TopicEntry {
    /// Its UUID as Kafka's clients know it ([`topic_uuid`]).
    pub(crate) fn uuid(&self, name: &str) -> [u8; 16] {
        topic_uuid(name, self.id)
    }

    fn new(id: u64, assignment: Vec<Vec<NodeId>>, configs: TopicConfigs) -> Self {
        let n = assignment.len();
        TopicEntry {
            id,
            assignment,
            leaving: vec![Vec::new(); n],
            was: vec![Vec::new(); n],
            moved: vec![false; n],
            configs,
            config_version: 0,
        }
    }
}

/// Why a command did not take effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    TopicExists,
    UnknownTopic,
    /// Deleting a configured topic, or a malformed command.
    Invalid(String),
    /// A change of a topic computed from a state of it that has changed since.
    TopicChanged,
    /// A topic config refused: its key, value and why.
    InvalidConfig(String, Option<String>, String),
    /// A partition's new replicas refused (not distinct, or a broker the cluster lacks).
    BadReplicas(String),
    /// A reassignment of a partition that is still moving.
    Moving,
    /// A cancellation of a partition that is not moving.
    NotMoving,
}

/// The topics of the cluster, as of some prefix of the metadata log.
#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    topics: BTreeMap<String, TopicEntry>,
    /// Ids of created topics since deleted.
    deleted: BTreeSet<u64>,
    /// The metadata log offset of the next command to apply.
    next_offset: u64,
    /// How many topics were ever created (spreads the assignments' starting broker).
    created: u64,
    /// The outcomes of the last commands, by offset.
    outcomes: BTreeMap<u64, Result<(), Refused>>,
    /// Brokers' registered addresses.
    addrs: BTreeMap<NodeId, crate::Address>,
    /// Brokers' registered Kafka addresses.
    kafka_addrs: BTreeMap<NodeId, crate::Address>,
    /// The cluster's brokers: the founding ones (every broker's configuration names the same),
    /// and those that joined since, less those removed.
    brokers: BTreeSet<NodeId>,
    /// Brokers' racks, as they registered them.
    racks: BTreeMap<NodeId, String>,
    /// Brokers decommissioned and not removed yet: their replicas are moving away.
    draining: BTreeSet<NodeId>,
    /// Brokers removed from the cluster (decommissioned, then emptied).
    removed: BTreeSet<NodeId>,
    /// The first producer id no block has taken (0 until the first block: ids start at 1).
    next_producer_id: u64,
    /// Each broker's latest block of producer ids, `[start, end)`, with its command's tag.
    producer_blocks: BTreeMap<NodeId, ProducerBlock>,
    /// Each user's SCRAM credentials, by mechanism.
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
    /// The ACL bindings.
    acls: Acls,
    /// The cluster's finalized protocol version: the newest every broker speaks (1 until a
    /// `FinalizeVersion` raises it).
    finalized_version: u16,
}

impl Catalog {
    /// A catalog of the founding `brokers` and the configured topics, each replicated on every
    /// one of them.
    pub(crate) fn with_configured(topics: &[(String, u32)], brokers: &[NodeId]) -> Self {
        let mut catalog = Catalog {
            brokers: brokers.iter().copied().collect(),
            ..Catalog::default()
        };
        for (name, partitions) in topics {
            // Partition p is led first by the broker at p modulo the broker count.
            let assignment = assign(brokers, *partitions, brokers.len(), 0).unwrap_or_default();
            catalog.topics.insert(
                name.clone(),
                TopicEntry::new(CONFIGURED_TOPIC_ID, assignment, TopicConfigs::default()),
            );
        }
        catalog
    }

    /// The metadata log offset of the next command to apply.
    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The cluster's finalized protocol version (see [`MetaCommand::FinalizeVersion`]).
    pub(crate) fn finalized_version(&self) -> u16 {
        self.finalized_version.max(crate::PROTOCOL_VERSION_MIN)
    }

    /// How many topics were ever created.
    pub(crate) fn created(&self) -> u64 {
        self.created
    }

    /// A topic, if it exists.
    pub(crate) fn topic(&self, name: &str) -> Option<&TopicEntry> {
        self.topics.get(name)
    }

    /// Every topic, by name.
    pub(crate) fn topics(&self) -> impl Iterator<Item = (&String, &TopicEntry)> {
        self.topics.iter()
    }

    /// The partitions of created topics that broker `me` hosts a replica of: each with its
    /// topic's id, the brokers hosting it (those a move is taking it from included: they keep
    /// theirs until the move is done), and the brokers that may initialize its Raft group
    /// (none once it was moved).
    pub(crate) fn hosted_by(&self, me: NodeId) -> HashMap<PartitionId, Hosting> {
        self.topics
            .iter()
            .filter(|(_, t)| t.id != CONFIGURED_TOPIC_ID)
            .flat_map(|(name, t)| {
                (0..t.assignment.len()).filter_map(move |p| {
                    let assigned = t.assignment.get(p)?;
                    let leaving = t.leaving.get(p)?;
                    if !assigned.contains(&me) && !leaving.contains(&me) {
                        return None;
                    }
                    let hosts: Vec<NodeId> = assigned.iter().chain(leaving).copied().collect();
                    let founders = (!t.moved.get(p)?).then(|| assigned.clone());
                    let p = u32::try_from(p).unwrap_or(u32::MAX);
                    let hosting = Hosting {
                        topic_id: t.id,
                        hosts,
                        founders,
                    };
                    Some((PartitionId::new(name.clone(), p), hosting))
                })
            })
            .collect()
    }

    /// The cluster's brokers, sorted.
    pub(crate) fn brokers(&self) -> Vec<NodeId> {
        self.brokers.iter().copied().collect()
    }

    /// The brokers new replicas go to: the cluster's, less those being decommissioned.
    pub(crate) fn placement_brokers(&self) -> Vec<NodeId> {
        self.brokers.difference(&self.draining).copied().collect()
    }

    /// The rack broker `id` registered, if it named one.
    pub(crate) fn rack(&self, id: NodeId) -> Option<&str> {
        self.racks.get(&id).map(String::as_str)
    }

    /// Replicas for a new topic's partitions over the placement brokers, spread over their
    /// racks ([`assign_racked`]).
    pub(crate) fn place(
        &self,
        partitions: u32,
        replication_factor: usize,
        start: u64,
    ) -> Result<Vec<Vec<NodeId>>, String> {
        let brokers: Vec<(NodeId, Option<&str>)> = self
            .placement_brokers()
            .into_iter()
            .map(|b| (b, self.rack(b)))
            .collect();
        assign_racked(&brokers, partitions, replication_factor, start)
    }

    /// Whether broker `id` is being decommissioned (its replicas moving away).
    pub(crate) fn is_draining(&self, id: NodeId) -> bool {
        self.draining.contains(&id)
    }

    /// Whether broker `id` was decommissioned and removed from the cluster.
    pub(crate) fn is_removed(&self, id: NodeId) -> bool {
        self.removed.contains(&id)
    }

    /// The replicas (assigned, or still leaving) broker `id` holds, and how many of those
    /// partitions it is the preferred leader of.
    pub(crate) fn replicas_on(&self, id: NodeId) -> (usize, usize) {
        let (mut replicas, mut preferred) = (0, 0);
        for t in self.topics.values() {
            for (p, assigned) in t.assignment.iter().enumerate() {
                let leaving = t.leaving.get(p).is_some_and(|l| l.contains(&id));
                if assigned.contains(&id) || leaving {
                    replicas += 1;
                }
                if assigned.first() == Some(&id) {
                    preferred += 1;
                }
            }
        }
        (replicas, preferred)
    }

    /// The draining brokers that hold no replica any more (ready to be removed).
    pub(crate) fn drained(&self) -> Vec<NodeId> {
        self.draining
            .iter()
            .copied()
            .filter(|id| self.replicas_on(*id).0 == 0)
            .collect()
    }

    /// The address broker `id` registered, if it did.
    pub(crate) fn broker_addr(&self, id: NodeId) -> Option<crate::Address> {
        self.addrs.get(&id).cloned()
    }

    /// Broker `id`'s registered Kafka address, if it has one.
    pub(crate) fn kafka_addr(&self, id: NodeId) -> Option<crate::Address> {
        self.kafka_addrs.get(&id).cloned()
    }

    /// Broker `id`'s latest block of producer ids, if it took one.
    pub(crate) fn producer_block(&self, id: NodeId) -> Option<ProducerBlock> {
        self.producer_blocks.get(&id).cloned()
    }

    /// User `user`'s credential for `mechanism`, if it has one.
    pub(crate) fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.users.get(user)?.get(&mechanism).cloned()
    }

    /// Every user with a credential, and its mechanisms' iteration counts.
    pub(crate) fn users(&self) -> impl Iterator<Item = (&String, Vec<(ScramMechanism, u32)>)> {
        self.users.iter().map(|(name, credentials)| {
            let infos = credentials
                .iter()
                .map(|(m, c)| (*m, c.iterations))
                .collect();
            (name, infos)
        })
    }

    /// Whether any user has a credential.
    pub(crate) fn has_users(&self) -> bool {
        !self.users.is_empty()
    }

    /// Every credential of user `user`.
    pub(crate) fn scram_credentials(&self, user: &str) -> Vec<ScramCredential> {
        self.users
            .get(user)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the created topic `id` was deleted.
    pub(crate) fn is_deleted(&self, id: u64) -> bool {
        self.deleted.contains(&id)
    }

    /// The outcome of the command at `offset`, if it is applied and still remembered.
    pub(crate) fn outcome(&self, offset: u64) -> Option<Result<(), Refused>> {
        self.outcomes.get(&offset).cloned()
    }

    /// Applies the command at `offset` (`None`: a record that is not a command, which is
    /// skipped so that every broker skips it alike).
    pub(crate) fn apply(&mut self, offset: u64, command: Option<&MetaCommand>) {
        let outcome = match command {
            None => Err(Refused::Invalid("not a metadata command".into())),
            Some(MetaCommand::CreateTopic { name, assignment }) => {
                self.create_topic(offset, name, assignment, &TopicConfigs::default())
            }
            Some(MetaCommand::CreateTopicWithConfigs {
                name,
                assignment,
                configs,
            }) => self.create_topic(offset, name, assignment, configs),
            Some(MetaCommand::AddPartitions {
                name,
                topic_id,
                from,
                assignment,
            }) => self.add_partitions(name, *topic_id, *from, assignment),
            Some(MetaCommand::SetTopicConfigs {
                name,
                version,
                configs,
            }) => match self.topics.get_mut(name) {
                None => Err(Refused::UnknownTopic),
                Some(t) if t.config_version != *version => Err(Refused::TopicChanged),
                Some(t) => match configs.check() {
                    Err(crate::error::Error::InvalidTopicConfig { key, value, reason }) => {
                        Err(Refused::InvalidConfig(key, value, reason))
                    }
                    Err(e) => Err(Refused::Invalid(e.to_string())),
                    Ok(()) => {
                        t.configs = configs.clone();
                        t.config_version += 1;
                        Ok(())
                    }
                },
            },
            Some(MetaCommand::DeleteTopic { name }) => match self.topics.get(name) {
                None => Err(Refused::UnknownTopic),
                Some(t) if t.id == CONFIGURED_TOPIC_ID => Err(Refused::Invalid(format!(
                    "topic {name} is configured on the brokers and cannot be deleted"
                ))),
                Some(t) => {
                    self.deleted.insert(t.id);
                    self.topics.remove(name);
                    Ok(())
                }
            },
            Some(MetaCommand::RegisterBroker { id, addr, join }) => {
                match addr.parse::<crate::Address>() {
                    Err(e) => Err(Refused::Invalid(e.to_string())),
                    Ok(_) if !join && !self.brokers.contains(id) => Err(Refused::Invalid(format!(
                        "broker {id} is not in the cluster (a new broker joins with --join)"
                    ))),
                    // A second broker given a taken id must not take over its address.
                    Ok(_) if *join && self.brokers.contains(id) => Err(Refused::Invalid(format!(
                        "broker {id} is in the cluster already: a joining broker needs a new id"
                    ))),
                    Ok(addr) => {
                        self.brokers.insert(*id);
                        self.removed.remove(id);
                        self.addrs.insert(*id, addr);
                        Ok(())
                    }
                }
            }
            Some(MetaCommand::ReassignPartition {
                name,
                partition,
                replicas,
            }) => self.reassign(name, *partition, replicas),
            Some(MetaCommand::CancelReassignment { name, partition }) => {
                self.cancel_reassignment(name, *partition)
            }
            Some(MetaCommand::DecommissionBroker { id }) => self.decommission(*id),
            Some(MetaCommand::RemoveBroker { id }) => self.remove_broker(*id),
            Some(MetaCommand::FinalizeVersion { version }) => {
                if *version > self.finalized_version {
                    self.finalized_version = *version;
                }
                Ok(())
            }
            Some(MetaCommand::RegisterRack { id, rack }) => match rack {
                _ if !self.brokers.contains(id) => Err(Refused::Invalid(format!(
                    "broker {id} is not in the cluster"
                ))),
                Some(rack) if rack.is_empty() || rack.len() > RACK_BYTES_MAX => Err(
                    Refused::Invalid(format!("a rack name has 1 to {RACK_BYTES_MAX} bytes")),
                ),
                Some(rack) => {
                    self.racks.insert(*id, rack.clone());
                    Ok(())
                }
                None => {
                    self.racks.remove(id);
                    Ok(())
                }
            },
            Some(MetaCommand::RegisterKafka { id, addr }) => match addr.parse::<crate::Address>() {
                Err(e) => Err(Refused::Invalid(e.to_string())),
                Ok(_) if !self.brokers.contains(id) => Err(Refused::Invalid(format!(
                    "broker {id} is not in the cluster"
                ))),
                Ok(addr) => {
                    self.kafka_addrs.insert(*id, addr);
                    Ok(())
                }
            },
            Some(MetaCommand::AllocateProducerIds { broker, count, tag }) => {
                self.allocate_producer_ids(*broker, *count, *tag)
            }
            Some(put @ MetaCommand::PutScramCredential { user, .. }) => {
                scram_credential(put).map(|c| {
                    self.users
                        .entry(user.clone())
                        .or_default()
                        .insert(c.mechanism, c);
                })
            }
            Some(MetaCommand::DeleteScramCredential { user, mechanism }) => {
                let removed = ScramMechanism::from_kafka_type(*mechanism as i8).and_then(|m| {
                    let credentials = self.users.get_mut(user)?;
                    let removed = credentials.remove(&m);
                    if credentials.is_empty() {
                        self.users.remove(user);
                    }
                    removed
                });
                removed.map(|_| ()).ok_or_else(|| {
                    Refused::Invalid(format!("user {user:?} has no such credential"))
                })
            }
            Some(acls @ (MetaCommand::CreateAcls { .. } | MetaCommand::DeleteAcls { .. })) => {
                self.apply_acls(acls)
            }
            Some(MetaCommand::ReassignDone {
                topic_id,
                partition,
                replicas,
            }) => {
                let entry = self.topics.values_mut().find(|t| t.id == *topic_id);
                let p = *partition as usize;
                match entry {
                    Some(t) if t.assignment.get(p) == Some(replicas) => {
                        if let Some(leaving) = t.leaving.get_mut(p) {
                            leaving.clear();
                        }
                        if let Some(was) = t.was.get_mut(p) {
                            was.clear();
                        }
                        Ok(())
                    }
                    // Another reassignment came in between, or the topic is gone.
                    _ => Err(Refused::Invalid("a stale reassignment".into())),
                }
            }
        };
        self.next_offset = offset + 1;
        self.outcomes.insert(offset, outcome);
        while self.outcomes.len() > OUTCOMES_KEPT {
            self.outcomes.pop_first();
        }
    }
}

/// The credential a [`MetaCommand::PutScramCredential`] carries, checked.
fn scram_credential(command: &MetaCommand) -> Result<ScramCredential, Refused> {
    let MetaCommand::PutScramCredential {
        user,
        mechanism,
        salt,
        iterations,
        stored_key,
        server_key,
    } = command
    else {
        return Err(Refused::Invalid("not a credential".into()));
    };
    if user.is_empty() || user.len() > USER_NAME_BYTES_MAX {
        return Err(Refused::Invalid(format!(
            "a user name has 1 to {USER_NAME_BYTES_MAX} bytes"
        )));
    }
    let mechanism = ScramMechanism::from_kafka_type(*mechanism as i8)
        .ok_or_else(|| Refused::Invalid(format!("unknown SCRAM mechanism {mechanism}")))?;
    ScramCredential::from_keys(
        mechanism,
        salt.clone(),
        *iterations,
        stored_key.clone(),
        server_key.clone(),
    )
    .map_err(|e| Refused::Invalid(e.to_string()))
}

impl Catalog {
    /// Gives `broker` the next `count` producer ids.
    /// Creates topic `name` at metadata log `offset` with `assignment` and `configs`.
    fn create_topic(
        &mut self,
        offset: u64,
        name: &str,
        assignment: &[Vec<NodeId>],
        configs: &TopicConfigs,
    ) -> Result<(), Refused> {
        if self.topics.contains_key(name) {
            return Err(Refused::TopicExists);
        }
        check_assignment(name, assignment, &self.brokers).map_err(Refused::Invalid)?;
        if let Err(e) = configs.check() {
            return Err(Refused::Invalid(e.to_string()));
        }
        self.created += 1;
        self.topics.insert(
            name.to_string(),
            TopicEntry::new(offset + 1, assignment.to_vec(), configs.clone()),
        );
        Ok(())
    }

    /// Grows topic `name` of id `topic_id` from `from` partitions by `assignment`.
    fn add_partitions(
        &mut self,
        name: &str,
        topic_id: u64,
        from: u32,
        assignment: &[Vec<NodeId>],
    ) -> Result<(), Refused> {
        let t = match self.topics.get_mut(name) {
            Some(t) if t.id == topic_id => t,
            _ => return Err(Refused::UnknownTopic),
        };
        if t.id == CONFIGURED_TOPIC_ID {
            return Err(Refused::Invalid(format!(
                "topic {name} is configured on the brokers: its partitions are theirs"
            )));
        }
        if t.assignment.len() != from as usize {
            return Err(Refused::TopicChanged);
        }
        let total = t.assignment.len().saturating_add(assignment.len());
        if assignment.is_empty() || total > PARTITIONS_MAX as usize {
            return Err(Refused::Invalid(format!(
                "a topic has 1 to {PARTITIONS_MAX} partitions"
            )));
        }
        for replicas in assignment {
            check_replicas(replicas, &self.brokers).map_err(Refused::Invalid)?;
        }
        t.assignment.extend(assignment.iter().cloned());
        t.leaving.resize(total, Vec::new());
        t.was.resize(total, Vec::new());
        t.moved.resize(total, false);
        Ok(())
    }

    fn allocate_producer_ids(
        &mut self,
        broker: NodeId,
        count: u64,
        tag: u64,
    ) -> Result<(), Refused> {
        if !self.brokers.contains(&broker) {
            return Err(Refused::Invalid(format!(
                "broker {broker} is not in the cluster"
            )));
        }
        if count == 0 || count > PRODUCER_ID_BLOCK_MAX {
            return Err(Refused::Invalid(format!(
                "a block of 1 to {PRODUCER_ID_BLOCK_MAX} producer ids, not {count}"
            )));
        }
        let start = self.next_producer_id.max(1);
        let end = start
            .checked_add(count)
            .filter(|end| *end <= PRODUCER_IDS_END)
            .ok_or_else(|| Refused::Invalid("the cluster's producer ids are spent".into()))?;
        self.producer_blocks.insert(
            broker,
            ProducerBlock {
                ids: start..end,
                tag,
            },
        );
        self.next_producer_id = end;
        Ok(())
    }
}

/// Checks a topic name: 1 to [`TOPIC_NAME_BYTES_MAX`] bytes of ASCII letters, digits, `.`, `_` and `-`, not `.`
/// or `..`, and not starting with `__` (reserved for replog's own topics; of those only the
/// offsets topic is created at run time, by the brokers).
pub(crate) fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(format!(
            "a topic name has 1 to {TOPIC_NAME_BYTES_MAX} characters; this one has {}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a topic name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic names use ASCII letters, digits, '.', '_' and '-', not {c:?}"
        ));
    }
    if name.starts_with("__") && name != crate::group::OFFSETS_TOPIC {
        return Err("topic names starting with \"__\" are reserved".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
