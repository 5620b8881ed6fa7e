//! Partitions moving between brokers: reassignments and their cancellation, the moves under
//! way as Kafka's ListPartitionReassignments lists them, a broker's decommission and removal,
//! and the moves that balance replicas over the brokers.

use std::collections::{BTreeMap, BTreeSet};

use super::{CONFIGURED_TOPIC_ID, Catalog, Refused, TopicEntry, check_replicas};
use crate::types::NodeId;

impl Catalog {
    pub(super) fn reassign(
        &mut self,
        name: &str,
        partition: u32,
        replicas: &[NodeId],
    ) -> Result<(), Refused> {
        let brokers = &self.brokers;
        let (current, leaving, was, moved) = moving_partition(&mut self.topics, name, partition)?;
        check_replicas(replicas, brokers).map_err(Refused::BadReplicas)?;
        if current.as_slice() == replicas {
            // Already there, or on its way (a retried request): nothing to change.
            return Ok(());
        }
        if !was.is_empty() {
            return Err(Refused::Moving);
        }
        *leaving = current
            .iter()
            .copied()
            .filter(|b| !replicas.contains(b))
            .collect();
        *was = std::mem::replace(current, replicas.to_vec());
        *moved = true;
        Ok(())
    }

    /// [`MetaCommand::CancelReassignment`].
    pub(super) fn cancel_reassignment(
        &mut self,
        name: &str,
        partition: u32,
    ) -> Result<(), Refused> {
        let (current, leaving, was, _) = moving_partition(&mut self.topics, name, partition)?;
        if was.is_empty() || current == was {
            return Err(Refused::NotMoving);
        }
        let back = was.clone();
        let added: Vec<NodeId> = current
            .iter()
            .copied()
            .filter(|b| !back.contains(b))
            .collect();
        *leaving = added;
        *current = back;
        Ok(())
    }
}

impl Catalog {
    /// The partitions moving now ([`TopicEntry::was`] set), of `topics` only if given, in
    /// partition order.
    pub(crate) fn reassignments(&self, topics: Option<&[String]>) -> Vec<crate::Reassignment> {
        let mut moving = Vec::new();
        for (name, t) in &self.topics {
            if topics.is_some_and(|wanted| !wanted.contains(name)) {
                continue;
            }
            for (p, was) in t.was.iter().enumerate() {
                if was.is_empty() {
                    continue;
                }
                let target = t.assignment.get(p).cloned().unwrap_or_default();
                let removing = t.leaving.get(p).cloned().unwrap_or_default();
                let adding: Vec<NodeId> = target
                    .iter()
                    .copied()
                    .filter(|b| !was.contains(b))
                    .collect();
                let leaving: Vec<NodeId> = removing
                    .iter()
                    .copied()
                    .filter(|b| !target.contains(b))
                    .collect();
                let mut replicas = target;
                replicas.extend(leaving);
                moving.push(crate::Reassignment {
                    partition: crate::types::PartitionId::new(
                        name.clone(),
                        u32::try_from(p).unwrap_or(u32::MAX),
                    ),
                    replicas,
                    adding,
                    removing,
                });
            }
        }
        moving
    }
}

impl Catalog {
    /// [`MetaCommand::DecommissionBroker`]: checks the whole move first, then records every
    /// partition's reassignment, so that it is taken whole or not at all.
    pub(super) fn decommission(&mut self, id: NodeId) -> Result<(), Refused> {
        if !self.brokers.contains(&id) {
            return Err(Refused::Invalid(format!(
                "broker {id} is not in the cluster"
            )));
        }
        if self.draining.contains(&id) {
            // Asked again (a retried request): it is under way.
            return Ok(());
        }
        let others: Vec<NodeId> = self
            .brokers
            .iter()
            .copied()
            .filter(|b| *b != id && !self.draining.contains(b))
            .collect();
        // Replicas per broker now, updated as each replacement is chosen.
        let mut load: BTreeMap<NodeId, usize> = others.iter().map(|b| (*b, 0)).collect();
        for t in self.topics.values() {
            for replicas in &t.assignment {
                for b in replicas {
                    if let Some(n) = load.get_mut(b) {
                        *n += 1;
                    }
                }
            }
        }
        let mut moves: Vec<(String, u32, Vec<NodeId>)> = Vec::new();
        for (name, t) in &self.topics {
            for (p, replicas) in t.assignment.iter().enumerate() {
                if !replicas.contains(&id) {
                    continue;
                }
                if t.id == CONFIGURED_TOPIC_ID {
                    return Err(Refused::Invalid(format!(
                        "broker {id} holds replicas of topic {name}, configured on the brokers \
                         (their replicas cannot move)"
                    )));
                }
                if t.was.get(p).is_some_and(|w| !w.is_empty()) {
                    return Err(Refused::Invalid(format!(
                        "partition {p} of {name} is moving: decommission broker {id} once it \
                         has moved"
                    )));
                }
                // A rack the partition's other replicas are not in first, then the least
                // loaded broker, then the lowest id.
                let racks_kept: BTreeSet<Option<&str>> = replicas
                    .iter()
                    .filter(|b| **b != id)
                    .map(|b| self.racks.get(b).map(String::as_str))
                    .collect();
                let replacement = load
                    .iter()
                    .filter(|(b, _)| !replicas.contains(b))
                    .min_by_key(|(b, n)| {
                        let rack = self.racks.get(*b).map(String::as_str);
                        let shared = !self.racks.is_empty() && racks_kept.contains(&rack);
                        (shared, **n, **b)
                    })
                    .map(|(b, _)| *b);
                let Some(replacement) = replacement else {
                    return Err(Refused::Invalid(format!(
                        "the other {} brokers cannot hold the {} replicas of partition {p} of \
                         {name}",
                        others.len(),
                        replicas.len()
                    )));
                };
                if let Some(n) = load.get_mut(&replacement) {
                    *n += 1;
                }
                let mut moved: Vec<NodeId> =
                    replicas.iter().copied().filter(|b| *b != id).collect();
                moved.push(replacement);
                moves.push((name.clone(), u32::try_from(p).unwrap_or(u32::MAX), moved));
            }
        }
        for (name, partition, replicas) in moves {
            self.reassign(&name, partition, &replicas)?;
        }
        self.draining.insert(id);
        Ok(())
    }

    /// The next move that evens out the brokers' replica counts, if they differ by more than
    /// one and fewer than `at_once` partitions are moving: a replica of a created topic's
    /// partition, not moving, from the broker holding the most to the one holding the fewest
    /// (in its place in the list), where that keeps the partition's racks. None while a
    /// broker is being decommissioned.
    pub(crate) fn balancing_move(&self, at_once: usize) -> Option<(String, u32, Vec<NodeId>)> {
        if !self.draining.is_empty() {
            return None;
        }
        let moving = self
            .topics
            .values()
            .flat_map(|t| &t.was)
            .filter(|w| !w.is_empty())
            .count();
        if moving >= at_once {
            return None;
        }
        let mut counts: BTreeMap<NodeId, usize> = self.brokers.iter().map(|b| (*b, 0)).collect();
        for t in self.topics.values().filter(|t| t.id != CONFIGURED_TOPIC_ID) {
            for replicas in &t.assignment {
                for b in replicas {
                    if let Some(n) = counts.get_mut(b) {
                        *n += 1;
                    }
                }
            }
        }
        let (&most, &high) = counts
            .iter()
            .max_by_key(|(b, n)| (**n, std::cmp::Reverse(**b)))?;
        let (&fewest, &low) = counts.iter().min_by_key(|(b, n)| (**n, **b))?;
        if high <= low + 1 {
            return None;
        }
        let rack = |b: &NodeId| self.racks.get(b).map(String::as_str);
        for (name, t) in self
            .topics
            .iter()
            .filter(|(_, t)| t.id != CONFIGURED_TOPIC_ID)
        {
            for (p, replicas) in t.assignment.iter().enumerate() {
                let still = t.was.get(p).is_some_and(Vec::is_empty);
                if !still || !replicas.contains(&most) || replicas.contains(&fewest) {
                    continue;
                }
                let moved: Vec<NodeId> = replicas
                    .iter()
                    .map(|b| if *b == most { fewest } else { *b })
                    .collect();
                let span = |list: &[NodeId]| list.iter().map(rack).collect::<BTreeSet<_>>().len();
                if span(&moved) < span(replicas) {
                    continue;
                }
                return Some((name.clone(), u32::try_from(p).unwrap_or(u32::MAX), moved));
            }
        }
        None
    }

    /// [`MetaCommand::RemoveBroker`].
    pub(super) fn remove_broker(&mut self, id: NodeId) -> Result<(), Refused> {
        if !self.draining.contains(&id) {
            return Err(Refused::Invalid(format!(
                "broker {id} is not being decommissioned"
            )));
        }
        let (replicas, _) = self.replicas_on(id);
        if replicas > 0 {
            return Err(Refused::Invalid(format!(
                "broker {id} still holds {replicas} replicas"
            )));
        }
        self.draining.remove(&id);
        self.brokers.remove(&id);
        self.addrs.remove(&id);
        self.kafka_addrs.remove(&id);
        self.racks.remove(&id);
        self.removed.insert(id);
        Ok(())
    }
}

/// Partition `partition` of the created topic `name`: its replicas, the brokers it leaves,
/// those it had before its move, whether it ever moved.
type MovingPartition<'a> = (
    &'a mut Vec<NodeId>,
    &'a mut Vec<NodeId>,
    &'a mut Vec<NodeId>,
    &'a mut bool,
);

fn moving_partition<'a>(
    topics: &'a mut BTreeMap<String, TopicEntry>,
    name: &str,
    partition: u32,
) -> Result<MovingPartition<'a>, Refused> {
    let Some(t) = topics.get_mut(name) else {
        return Err(Refused::UnknownTopic);
    };
    if t.id == CONFIGURED_TOPIC_ID {
        return Err(Refused::Invalid(format!(
            "topic {name} is configured on the brokers: its replicas cannot move"
        )));
    }
    let p = partition as usize;
    match (
        t.assignment.get_mut(p),
        t.leaving.get_mut(p),
        t.was.get_mut(p),
        t.moved.get_mut(p),
    ) {
        (Some(current), Some(leaving), Some(was), Some(moved)) => {
            Ok((current, leaving, was, moved))
        }
        _ => Err(Refused::UnknownTopic),
    }
}
