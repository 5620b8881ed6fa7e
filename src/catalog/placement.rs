//! Where replicas go: the checks of a partition's replica list, and Kafka's placement of a
//! new topic's partitions over the brokers, with or without racks.

use std::collections::{BTreeMap, BTreeSet};

use super::{PARTITIONS_MAX, check_topic_name};
use crate::types::NodeId;

/// Checks one partition's replica list: distinct brokers of the cluster, at least one.
pub(super) fn check_replicas(
    replicas: &[NodeId],
    brokers: &BTreeSet<NodeId>,
) -> Result<(), String> {
    let distinct: BTreeSet<&NodeId> = replicas.iter().collect();
    if replicas.is_empty() || distinct.len() != replicas.len() {
        return Err("each partition needs distinct replicas".into());
    }
    if let Some(unknown) = replicas.iter().find(|b| !brokers.contains(b)) {
        return Err(format!("broker {unknown} is not in the cluster"));
    }
    Ok(())
}

pub(super) fn check_assignment(
    name: &str,
    assignment: &[Vec<NodeId>],
    brokers: &BTreeSet<NodeId>,
) -> Result<(), String> {
    check_topic_name(name)?;
    let partitions = u32::try_from(assignment.len()).unwrap_or(u32::MAX);
    if partitions == 0 || partitions > PARTITIONS_MAX {
        return Err(format!("a topic has 1 to {PARTITIONS_MAX} partitions"));
    }
    for replicas in assignment {
        check_replicas(replicas, brokers)?;
    }
    Ok(())
}

/// Assigns `partitions` partitions of `replication_factor` replicas each over `brokers`, the
/// way Kafka does without racks (`AdminUtils.assignReplicasToBrokers`): the first replicas go
/// round-robin from broker `start`, and the followers of each partition are shifted so that
/// the replicas of one broker's partitions spread over all the others.
pub(crate) fn assign(
    brokers: &[NodeId],
    partitions: u32,
    replication_factor: usize,
    start: u64,
) -> Result<Vec<Vec<NodeId>>, String> {
    // One rack holding every broker: the rack rule never applies.
    let unracked: Vec<(NodeId, Option<&str>)> = brokers.iter().map(|b| (*b, None)).collect();
    assign_racked(&unracked, partitions, replication_factor, start)
}

/// [`assign`], with each partition's replicas spread over as many racks as the brokers are
/// in (Kafka's rack-aware assignment): the brokers are listed alternating between racks (the
/// first of each rack, then the second of each, ...), each partition's first replica walks
/// that list, and each further replica is the next one along (shifted per round, as in
/// [`assign`]) in a rack the partition has no replica in yet, until every rack has one.
/// Brokers with no rack count as one rack of their own; with no rack named at all, every
/// further replica is simply the next one along: [`assign`].
pub(crate) fn assign_racked(
    brokers: &[(NodeId, Option<&str>)],
    partitions: u32,
    replication_factor: usize,
    start: u64,
) -> Result<Vec<Vec<NodeId>>, String> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<NodeId>> = BTreeMap::new();
    for (b, rack) in brokers {
        by_rack.entry(*rack).or_default().push(*b);
    }
    for list in by_rack.values_mut() {
        list.sort_unstable();
        list.dedup();
    }
    let racks = by_rack.len();
    let deepest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut alternated: Vec<(NodeId, Option<&str>)> = Vec::new();
    for i in 0..deepest {
        for (rack, list) in &by_rack {
            if let Some(b) = list.get(i) {
                alternated.push((*b, *rack));
            }
        }
    }
    let n = alternated.len();
    if replication_factor == 0 || replication_factor > n {
        return Err(format!(
            "replication factor {replication_factor} is not between 1 and the {n} brokers"
        ));
    }
    let n64 = n as u64;
    let start = start % n64;
    let mut shift = start;
    let mut out = Vec::with_capacity(partitions as usize);
    for p in 0..u64::from(partitions) {
        if p > 0 && p % n64 == 0 {
            shift += 1;
        }
        let first = (p + start) % n64;
        let (leader, leader_rack) = alternated[first as usize];
        let mut replicas = vec![leader];
        let mut racks_used = BTreeSet::from([leader_rack]);
        let mut k = 0u64;
        // Bounded: each pass over the other brokers takes at least one (the rack rule lapses
        // once every rack is used, and the broker rule only once every broker is).
        while replicas.len() < replication_factor && k < n64 * n64 * 2 {
            let step = 1 + (shift * racks as u64 + k) % (n64 - 1).max(1);
            let (b, rack) = alternated[((first + step) % n64) as usize];
            k += 1;
            let rack_ok = !racks_used.contains(&rack) || racks_used.len() == racks;
            if rack_ok && !replicas.contains(&b) {
                replicas.push(b);
                racks_used.insert(rack);
            }
        }
        if replicas.len() < replication_factor {
            return Err("the brokers cannot hold the replicas".into());
        }
        out.push(replicas);
    }
    Ok(out)
}
