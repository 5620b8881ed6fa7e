//! The records of the offsets topic ([`OFFSETS_TOPIC`](super::OFFSETS_TOPIC)), byte by byte.
//!
//! Each is an ordinary replog record (see `segment/FORMAT.md`) with a key and a value. All
//! integers are little-endian, as in the segment files. A `str` is a `u16` byte length and that many UTF-8 bytes; a
//! `blob` is a `u32` byte length and that many bytes.
//!
//! **Offset commit**, one per (group, topic, partition):
//!
//! ```text
//! key:   u8 kind = 1 | str group | str topic | u32 partition
//! value: u8 version = 1 | u64 offset | u64 commit_timestamp_ms | i32 generation
//!        | str metadata | i32 leader_epoch
//! ```
//!
//! `leader_epoch` is the committer's leader epoch of the partition (Kafka's
//! `committed_leader_epoch`, OffsetCommit v6+), -1 when it named none. Version 0, written
//! before it was kept, is the same without `leader_epoch`, and still loads (as -1).
//!
//! **Group**, written when a rebalance completes (the leader's assignment), when a static
//! member comes back with a new member id, and when the group empties; with an empty value
//! when the group is deleted:
//!
//! ```text
//! key:   u8 kind = 2 | str group
//! value: u8 version = 1 | i32 generation | str protocol_type | str protocol | str leader
//!        | u32 member_count | member_count × member
//! member: str member_id | str client_id | str client_host | u32 session_timeout_ms
//!        | u32 rebalance_timeout_ms | blob subscription | blob assignment
//!        | str group_instance_id
//! ```
//!
//! `group_instance_id` is the member's `group.instance.id` (a static member, Kafka's
//! KIP-345), empty for a dynamic member (Kafka refuses an empty instance id). Version 0,
//! written before it was kept, is the same without `group_instance_id` (every member
//! dynamic), and still loads.
//!
//! **Rewrite**, written by earlier versions after a coordinator re-appended every live record
//! of its partition, before the topic was compacted; read and ignored now:
//!
//! ```text
//! key:   u8 kind = 3
//! value: u8 version = 0 | u64 keep_from_log_index
//! ```
//!
//! The latest record of a key wins: a coordinator that loads the partition applies them in
//! offset order, and compaction keeps each key's latest record (`node/retention.rs`). An empty
//! value deletes the key's earlier value (an offset reset to "nothing committed") and is a
//! tombstone to compaction, which drops it after the topic's `delete.retention.ms`. A group's
//! empty value deletes the whole group: its membership, its generation and every offset
//! committed before it (Kafka's DeleteGroups); records of the group after it are a new group's.
//! Since compaction keeps only each key's latest record, a deletion of a group is written with
//! an empty value for each of its committed offsets too: once a new group of the same name
//! writes its group record, the old group's empty value goes, and its offsets must already
//! be deleted under their own keys. A record that does not decode (unknown kind or version, truncated) is
//! skipped with a warning: it never stops a coordinator from loading the rest.

use bytes::{BufMut, Bytes, BytesMut};

use super::state::{Committed, Snapshot, SnapshotMember};

/// What a record of the offsets topic says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GroupRecord {
    /// A committed offset (`None`: deleted).
    Offset {
        group: String,
        topic: String,
        partition: u32,
        committed: Option<(Committed, i32)>,
    },
    /// A group's membership after a rebalance (`None`: the group deleted, its committed
    /// offsets with it).
    Group {
        group: String,
        snapshot: Option<Snapshot>,
    },
    /// A rewrite ended (written by earlier versions only; ignored).
    Rewrite { keep_from_log_index: u64 },
}

/// Why a record did not decode.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("record ends early")]
    Truncated,
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    #[error("unknown value version {0}")]
    UnknownVersion(u8),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("bytes after the record's end")]
    Trailing,
}

const KIND_OFFSET: u8 = 1;
const KIND_GROUP: u8 = 2;
const KIND_REWRITE: u8 = 3;
/// The version of every value written.
const VERSION: u8 = 1;
/// The rewrite record's value version.
const REWRITE_VERSION: u8 = 0;
/// The offset and group values' first version (no leader epoch, no instance ids): read only.
const VERSION_0: u8 = 0;

fn put_str(b: &mut BytesMut, s: &str) {
    // Every string written is bounded (names by GROUP_NAME_BYTES_MAX, metadata by
    // COMMIT_METADATA_BYTES_MAX) well below u16::MAX.
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    b.put_u16_le(len);
    b.put_slice(&s.as_bytes()[..usize::from(len)]);
}

fn put_blob(b: &mut BytesMut, v: &[u8]) {
    let len = u32::try_from(v.len()).unwrap_or(u32::MAX);
    b.put_u32_le(len);
    b.put_slice(&v[..len as usize]);
}

/// The key and value of an offset commit.
pub(crate) fn offset_record(
    group: &str,
    topic: &str,
    partition: u32,
    committed: &Committed,
    generation: i32,
) -> (Bytes, Bytes) {
    let mut key = BytesMut::new();
    key.put_u8(KIND_OFFSET);
    put_str(&mut key, group);
    put_str(&mut key, topic);
    key.put_u32_le(partition);
    let mut value = BytesMut::new();
    value.put_u8(VERSION);
    value.put_u64_le(committed.offset);
    value.put_u64_le(committed.commit_timestamp_ms);
    value.put_i32_le(generation);
    put_str(&mut value, &committed.metadata);
    value.put_i32_le(committed.leader_epoch.unwrap_or(-1));
    (key.freeze(), value.freeze())
}

/// The key of a deleted offset commit (its value is empty).
pub(crate) fn offset_tombstone(group: &str, topic: &str, partition: u32) -> Bytes {
    let mut key = BytesMut::new();
    key.put_u8(KIND_OFFSET);
    put_str(&mut key, group);
    put_str(&mut key, topic);
    key.put_u32_le(partition);
    key.freeze()
}

/// The key of a deleted group (its value is empty): the group, its membership and its
/// committed offsets are gone.
pub(crate) fn group_tombstone(group: &str) -> Bytes {
    let mut key = BytesMut::new();
    key.put_u8(KIND_GROUP);
    put_str(&mut key, group);
    key.freeze()
}

/// The key and value of a group's membership.
pub(crate) fn group_record(group: &str, snapshot: &Snapshot) -> (Bytes, Bytes) {
    let key = group_tombstone(group);
    let mut value = BytesMut::new();
    value.put_u8(VERSION);
    value.put_i32_le(snapshot.generation);
    put_str(&mut value, &snapshot.protocol_type);
    put_str(&mut value, &snapshot.protocol);
    put_str(&mut value, &snapshot.leader);
    value.put_u32_le(u32::try_from(snapshot.members.len()).unwrap_or(u32::MAX));
    for m in &snapshot.members {
        put_str(&mut value, &m.member_id);
        put_str(&mut value, &m.client_id);
        put_str(&mut value, &m.client_host);
        value.put_u32_le(m.session_timeout_ms);
        value.put_u32_le(m.rebalance_timeout_ms);
        put_blob(&mut value, &m.subscription);
        put_blob(&mut value, &m.assignment);
        put_str(
            &mut value,
            m.group_instance_id.as_deref().unwrap_or_default(),
        );
    }
    (key, value.freeze())
}

/// Reads fields off the front of a record's bytes.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(self.u32()? as i32)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn str(&mut self) -> Result<String, DecodeError> {
        let len = usize::from(self.u16()?);
        let b = self.take(len)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::NotUtf8)
    }

    fn blob(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.u32()? as usize;
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }

    fn end(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing)
        }
    }
}

/// Decodes a record of the offsets topic. Never panics, whatever the bytes.
pub(crate) fn decode(key: &[u8], value: &[u8]) -> Result<GroupRecord, DecodeError> {
    let mut k = Reader { rest: key };
    let kind = k.u8()?;
    if kind == KIND_REWRITE {
        k.end()?;
        let mut v = Reader { rest: value };
        let version = v.u8()?;
        if version != REWRITE_VERSION {
            return Err(DecodeError::UnknownVersion(version));
        }
        let keep_from_log_index = v.u64()?;
        v.end()?;
        return Ok(GroupRecord::Rewrite {
            keep_from_log_index,
        });
    }
    let group = k.str()?;
    match kind {
        KIND_OFFSET => {
            let topic = k.str()?;
            let partition = k.u32()?;
            k.end()?;
            if value.is_empty() {
                return Ok(GroupRecord::Offset {
                    group,
                    topic,
                    partition,
                    committed: None,
                });
            }
            let mut v = Reader { rest: value };
            let version = v.u8()?;
            if version != VERSION && version != VERSION_0 {
                return Err(DecodeError::UnknownVersion(version));
            }
            let offset = v.u64()?;
            let commit_timestamp_ms = v.u64()?;
            let generation = v.i32()?;
            let metadata = v.str()?;
            let leader_epoch = if version == VERSION_0 {
                None
            } else {
                Some(v.i32()?).filter(|e| *e >= 0)
            };
            v.end()?;
            Ok(GroupRecord::Offset {
                group,
                topic,
                partition,
                committed: Some((
                    Committed {
                        offset,
                        metadata,
                        commit_timestamp_ms,
                        leader_epoch,
                    },
                    generation,
                )),
            })
        }
        KIND_GROUP => {
            k.end()?;
            if value.is_empty() {
                return Ok(GroupRecord::Group {
                    group,
                    snapshot: None,
                });
            }
            let mut v = Reader { rest: value };
            let version = v.u8()?;
            if version != VERSION && version != VERSION_0 {
                return Err(DecodeError::UnknownVersion(version));
            }
            let generation = v.i32()?;
            let protocol_type = v.str()?;
            let protocol = v.str()?;
            let leader = v.str()?;
            let count = v.u32()?;
            // Bounded by the record's bytes: each member takes at least 18 of them.
            let mut members = Vec::new();
            for _ in 0..count {
                members.push(SnapshotMember {
                    member_id: v.str()?,
                    client_id: v.str()?,
                    client_host: v.str()?,
                    session_timeout_ms: v.u32()?,
                    rebalance_timeout_ms: v.u32()?,
                    subscription: v.blob()?,
                    assignment: v.blob()?,
                    group_instance_id: if version == VERSION_0 {
                        None
                    } else {
                        Some(v.str()?).filter(|i| !i.is_empty())
                    },
                });
            }
            v.end()?;
            Ok(GroupRecord::Group {
                group,
                snapshot: Some(Snapshot {
                    generation,
                    protocol_type,
                    protocol,
                    leader,
                    members,
                }),
            })
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        Snapshot {
            generation: 7,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "m-1".into(),
            members: vec![SnapshotMember {
                member_id: "m-1".into(),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 30_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
                group_instance_id: Some("instance-1".into()),
            }],
        }
    }

    #[test]
    fn records_round_trip() {
        let committed = Committed {
            offset: 42,
            metadata: "meta".into(),
            commit_timestamp_ms: 1234,
            leader_epoch: Some(2),
        };
        let (k, v) = offset_record("g", "t", 3, &committed, 5);
        assert_eq!(
            decode(&k, &v),
            Ok(GroupRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                committed: Some((committed, 5)),
            })
        );
        assert_eq!(
            decode(&offset_tombstone("g", "t", 3), b""),
            Ok(GroupRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3,
                committed: None,
            })
        );
        let (k, v) = group_record("g", &snapshot());
        assert_eq!(
            decode(&k, &v),
            Ok(GroupRecord::Group {
                group: "g".into(),
                snapshot: Some(snapshot()),
            })
        );
        assert_eq!(&k, &group_tombstone("g"), "one key for the group's records");
        assert_eq!(
            decode(&group_tombstone("g"), b""),
            Ok(GroupRecord::Group {
                group: "g".into(),
                snapshot: None,
            })
        );
        // A rewrite's end, as earlier versions wrote it, still decodes.
        let k = [KIND_REWRITE];
        let mut v = vec![REWRITE_VERSION];
        v.extend(77u64.to_le_bytes());
        assert_eq!(
            decode(&k, &v),
            Ok(GroupRecord::Rewrite {
                keep_from_log_index: 77
            })
        );
        assert_eq!(decode(&k, &v[..5]), Err(DecodeError::Truncated));
    }

    /// Every cut of a record, and every flipped byte of its kind or version, is a typed
    /// error, never a panic.
    #[test]
    fn damaged_records_are_typed_errors() {
        let (k, v) = group_record("group", &snapshot());
        for cut in 0..v.len() {
            assert!(decode(&k, &v[..cut]).is_err() || cut == 0, "cut at {cut}");
        }
        for cut in 0..k.len() {
            assert!(decode(&k[..cut], &v).is_err(), "key cut at {cut}");
        }
        let mut bad = v.to_vec();
        bad[0] = 9;
        assert_eq!(decode(&k, &bad), Err(DecodeError::UnknownVersion(9)));
        let mut bad_key = k.to_vec();
        bad_key[0] = 7;
        assert_eq!(decode(&bad_key, &v), Err(DecodeError::UnknownKind(7)));
        // A member count of 4 billion with no bytes behind it ends early, without allocating.
        let mut huge = v[..1 + 4].to_vec();
        for s in ["consumer", "range", "m-1"] {
            huge.extend_from_slice(&(s.len() as u16).to_le_bytes());
            huge.extend_from_slice(s.as_bytes());
        }
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&k, &huge), Err(DecodeError::Truncated));
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    /// The values written today, byte by byte: an offset commit ends with its leader epoch
    /// (-1 for none), a group member with its instance id (empty for none).
    #[test]
    fn values_carry_the_leader_epoch_and_the_instance_ids() {
        let committed = Committed {
            offset: 7,
            metadata: "m".into(),
            commit_timestamp_ms: 9,
            leader_epoch: Some(2),
        };
        let (_, v) = offset_record("g", "t", 0, &committed, 3);
        let mut want = vec![1u8];
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(&3i32.to_le_bytes());
        want.extend_from_slice(&[1, 0, b'm']);
        want.extend_from_slice(&2i32.to_le_bytes());
        assert_eq!(&v[..], &want[..]);
        let none = Committed {
            leader_epoch: None,
            ..committed
        };
        let (k, v) = offset_record("g", "t", 0, &none, 3);
        assert_eq!(&v[v.len() - 4..], &(-1i32).to_le_bytes());
        assert!(matches!(
            decode(&k, &v),
            Ok(GroupRecord::Offset { committed: Some((c, 3)), .. }) if c == none
        ));
        let snapshot = Snapshot {
            generation: 1,
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            leader: "a".into(),
            members: vec![SnapshotMember {
                member_id: "a".into(),
                client_id: "c".into(),
                client_host: "h".into(),
                session_timeout_ms: 1,
                rebalance_timeout_ms: 2,
                subscription: Bytes::new(),
                assignment: Bytes::new(),
                group_instance_id: None,
            }],
        };
        let (k, v) = group_record("g", &snapshot);
        assert_eq!(v[0], 1);
        // The member ends with an empty instance id: a dynamic member.
        assert_eq!(&v[v.len() - 2..], &[0, 0]);
        assert_eq!(
            decode(&k, &v),
            Ok(GroupRecord::Group {
                group: "g".into(),
                snapshot: Some(snapshot),
            })
        );
    }

    /// Records written before the leader epoch and the instance ids were kept (value version
    /// 0) still load: no epoch, every member dynamic.
    #[test]
    fn version_0_records_still_load() {
        let key = offset_tombstone("g", "t", 4);
        let mut v0 = vec![0u8];
        v0.extend_from_slice(&42u64.to_le_bytes());
        v0.extend_from_slice(&1234u64.to_le_bytes());
        v0.extend_from_slice(&5i32.to_le_bytes());
        v0.extend_from_slice(&[4, 0]);
        v0.extend_from_slice(b"meta");
        assert_eq!(
            decode(&key, &v0),
            Ok(GroupRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 4,
                committed: Some((
                    Committed {
                        offset: 42,
                        metadata: "meta".into(),
                        commit_timestamp_ms: 1234,
                        leader_epoch: None,
                    },
                    5
                )),
            })
        );
        let (key, _) = group_record(
            "g",
            &Snapshot {
                generation: 0,
                protocol_type: String::new(),
                protocol: String::new(),
                leader: String::new(),
                members: Vec::new(),
            },
        );
        let str_ = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u16).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        };
        let mut v0 = vec![0u8];
        v0.extend_from_slice(&7i32.to_le_bytes());
        for s in ["consumer", "range", "m-1"] {
            str_(&mut v0, s);
        }
        v0.extend_from_slice(&1u32.to_le_bytes());
        for s in ["m-1", "c", "/127.0.0.1"] {
            str_(&mut v0, s);
        }
        v0.extend_from_slice(&10_000u32.to_le_bytes());
        v0.extend_from_slice(&30_000u32.to_le_bytes());
        for blob in [&b"sub"[..], &b"asg"[..]] {
            v0.extend_from_slice(&(blob.len() as u32).to_le_bytes());
            v0.extend_from_slice(blob);
        }
        let Ok(GroupRecord::Group {
            snapshot: Some(s), ..
        }) = decode(&key, &v0)
        else {
            panic!("a version 0 group record loads");
        };
        assert_eq!(s.generation, 7);
        assert_eq!(s.members.len(), 1);
        assert_eq!(s.members[0].member_id, "m-1");
        assert_eq!(s.members[0].assignment, Bytes::from_static(b"asg"));
        assert_eq!(s.members[0].group_instance_id, None);
        // A version 0 value with bytes after its end is still refused.
        v0.extend_from_slice(&[0, 0]);
        assert_eq!(decode(&key, &v0), Err(DecodeError::Trailing));
    }
}
