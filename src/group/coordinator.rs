//! A broker's coordinators: one [`Shard`] per offsets partition it leads, each holding the
//! groups that hash to that partition.
//!
//! A shard belongs to one Raft term of its partition. When the broker becomes the partition's
//! leader, the first group request loads the shard: a read barrier (so the new leader has
//! applied every commit acknowledged by its predecessors), then every record of the partition
//! from its log start, applied in offset order ([`Shard::apply`]). When the broker loses the
//! leadership, or leads again in a later term, the shard is dropped with everything parked in
//! it (waiting joins and syncs are answered `NotCoordinator`), and a later request loads a new
//! one.
//!
//! Writes to a shard's partition (commits and completed rebalances) take the shard's
//! `writer` lock from their check to their commit, so the records land in the order their
//! checks passed. Without it, a commit checked against generation N could land after the
//! write of generation N+1 and overwrite the offset a member of N+1 committed.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::live::LiveGroup;
use super::records::{DecodeError, GroupRecord, decode};

/// One offsets partition's groups, as one term's leader serves them.
pub(crate) struct Shard {
    pub(crate) partition: u32,
    pub(crate) term: u64,
    pub(crate) groups: Mutex<HashMap<String, LiveGroup>>,
    /// Held from a write's check until its record is committed.
    pub(crate) writer: tokio::sync::Mutex<()>,
    /// Locked while loading; `true` once loaded.
    pub(crate) loaded: tokio::sync::Mutex<bool>,
    /// Set when the shard is dropped: a request that still holds it must not use it (a new
    /// shard, loaded afresh, takes its place).
    pub(crate) dead: std::sync::atomic::AtomicBool,
}

impl Shard {
    /// Whether the shard was dropped.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Acquire)
    }

    fn new(partition: u32, term: u64) -> Shard {
        Shard {
            partition,
            term,
            groups: Mutex::new(HashMap::new()),
            writer: tokio::sync::Mutex::new(()),
            loaded: tokio::sync::Mutex::new(false),
            dead: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Applies one record read back from the partition while loading.
    pub(crate) fn apply(&self, key: &[u8], value: &[u8], now: Instant) -> Result<(), DecodeError> {
        let record = decode(key, value)?;
        let mut groups = self.groups.lock();
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                committed,
            } => {
                let g = groups.entry(group).or_default();
                g.commit(topic, partition, committed.map(|(c, _generation)| c));
            }
            GroupRecord::Group {
                group,
                snapshot: Some(s),
            } => {
                let g = groups.entry(group).or_default();
                // A later generation only: an older one written late changes nothing.
                if s.generation >= g.generation {
                    g.restore(s, now);
                }
            }
            // A deleted group, with its offsets: what follows is a new group's.
            GroupRecord::Group {
                group,
                snapshot: None,
            } => {
                groups.remove(&group);
            }
            GroupRecord::Rewrite { .. } => {}
        }
        Ok(())
    }
}

/// The shards of one broker.
#[derive(Default)]
pub(crate) struct Shards {
    map: Mutex<HashMap<u32, Arc<Shard>>>,
}

impl Shards {
    /// The shard of `partition` for `term`: the current one, or a new, unloaded one (which
    /// replaces a shard of another term).
    pub(crate) fn get(&self, partition: u32, term: u64) -> Arc<Shard> {
        let mut map = self.map.lock();
        match map.get(&partition) {
            Some(s) if s.term == term => Arc::clone(s),
            _ => {
                let shard = Arc::new(Shard::new(partition, term));
                map.insert(partition, Arc::clone(&shard));
                shard
            }
        }
    }

    /// Every shard.
    pub(crate) fn all(&self) -> Vec<Arc<Shard>> {
        self.map.lock().values().cloned().collect()
    }

    /// Drops `shard` (marking it dead) and forgets it if it is still the current one of its
    /// partition.
    pub(crate) fn drop_shard(&self, shard: &Shard) {
        shard.dead.store(true, std::sync::atomic::Ordering::Release);
        let mut map = self.map.lock();
        if map
            .get(&shard.partition)
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), shard))
        {
            map.remove(&shard.partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::group::assignor::encode_subscription;
    use crate::group::records::{group_record, group_tombstone, offset_record};
    use crate::group::state::{Committed, Snapshot, SnapshotMember};

    fn snapshot(generation: i32, topic: &str) -> Snapshot {
        Snapshot {
            generation,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "m".into(),
            members: vec![SnapshotMember {
                member_id: "m".into(),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 10_000,
                subscription: encode_subscription(&[topic.to_string()]),
                assignment: Bytes::new(),
                group_instance_id: None,
            }],
        }
    }

    fn commit(shard: &Shard, group: &str, offset: u64) {
        let committed = Committed {
            offset,
            metadata: String::new(),
            commit_timestamp_ms: 0,
            leader_epoch: None,
        };
        let (k, v) = offset_record(group, "t", 0, &committed, 1);
        shard.apply(&k, &v, Instant::now()).unwrap();
    }

    /// A group's tombstone, read back, deletes the group with its offsets and nothing else;
    /// the group's records after it make a new group, whose lower generation is not taken for
    /// a late record of the deleted one.
    #[test]
    fn a_deleted_group_is_gone_and_its_name_starts_a_new_group() {
        let shard = Shard::new(0, 1);
        let now = Instant::now();
        let (k, v) = group_record("g", &snapshot(5, "t"));
        shard.apply(&k, &v, now).unwrap();
        commit(&shard, "g", 42);
        commit(&shard, "other", 7);
        assert!(shard.groups.lock()["g"].subscribed_to("t"));
        assert!(!shard.groups.lock()["g"].subscribed_to("u"));
        shard.apply(&group_tombstone("g"), b"", now).unwrap();
        assert!(!shard.groups.lock().contains_key("g"));
        assert_eq!(shard.groups.lock()["other"].offsets.len(), 1);
        let (k, v) = group_record("g", &snapshot(1, "u"));
        shard.apply(&k, &v, now).unwrap();
        let groups = shard.groups.lock();
        let g = &groups["g"];
        assert_eq!((g.generation, g.members.len()), (1, 1));
        assert!(
            g.offsets.is_empty(),
            "the deleted group's offsets stay deleted"
        );
        assert!(g.subscribed_to("u"));
    }
}
