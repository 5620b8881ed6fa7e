//! A history checker for a replicated log.
//!
//! The test records every client operation (which producer, its per-producer number, the
//! partition, the payload, and how it ended), then reads every replica of every partition in
//! full. [`check`] says whether what the replicas hold is explained by what the clients were
//! told. Payloads identify their operation: `"<producer>:<n>"`, so a record in the log can be
//! traced back to the call that sent it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// How a send ended, as the client reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged at this offset.
    Ok { offset: u64 },
    /// Acknowledged at this offset under `Durability::Replicated`, but sent before a broker
    /// lost power (its unsynced writes). The contract allows such a record to be lost: it is
    /// then absent from every replica, and its offset may hold a later record. If it is
    /// anywhere, it must be where an acknowledged record must be.
    OkLossy { offset: u64 },
    /// Definitely not applied (the client says nothing was written).
    Fail,
    /// Unknown: may or may not have been applied.
    Unknown,
}

/// One send of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub producer: u32,
    /// The producer's own count of its sends, from 0, in the order it made them.
    pub n: u64,
    pub partition: u32,
    pub outcome: Outcome,
}

impl Op {
    pub fn payload(producer: u32, n: u64) -> Vec<u8> {
        format!("{producer}:{n}").into_bytes()
    }

    /// [`payload`](Self::payload) padded to `len` bytes (at least its own length): the id, a
    /// `|`, then filler.
    pub fn payload_sized(producer: u32, n: u64, len: usize) -> Vec<u8> {
        let mut p = format!("{producer}:{n}|").into_bytes();
        p.resize(len.max(p.len()), b'.');
        p
    }
}

/// What one replica holds of one partition: `(offset, payload)` in offset order.
#[derive(Clone, Debug)]
pub struct Replica {
    pub node: u64,
    pub partition: u32,
    pub records: Vec<(u64, Vec<u8>)>,
}

/// A way the replicas contradict the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged record is missing from a replica, or sits at another offset.
    LostAck {
        producer: u32,
        n: u64,
        node: u64,
        offset: u64,
    },
    /// Two replicas hold different records at the same offset.
    Divergent { partition: u32, offset: u64 },
    /// One operation's record appears more than once.
    Duplicate { producer: u32, n: u64 },
    /// A producer's records appear out of the order it sent them in.
    Reordered { producer: u32, partition: u32 },
    /// A send the client reported as failed appears in the log.
    FailedApplied { producer: u32, n: u64 },
    /// A record no operation sent (or sent to another partition).
    Phantom { partition: u32, offset: u64 },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Counts of what the checker saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub acknowledged: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unknown sends that turned out to be applied.
    pub unknown_applied: usize,
    /// Acknowledged sends lost as the `Replicated` contract allows (see [`Outcome::OkLossy`]).
    pub lost_as_allowed: usize,
    /// Records read back, over all replicas.
    pub records_read: usize,
}

fn parse(payload: &[u8]) -> Option<(u32, u64)> {
    let id = payload.split(|b| *b == b'|').next()?;
    let s = std::str::from_utf8(id).ok()?;
    let (p, n) = s.split_once(':')?;
    Some((p.parse().ok()?, n.parse().ok()?))
}

/// Checks `replicas` against `ops`; returns every violation found (empty: the history is
/// explained) and a summary.
pub fn check(ops: &[Op], replicas: &[Replica]) -> (Vec<Violation>, Summary) {
    let mut violations = Vec::new();
    let mut summary = Summary::default();
    let by_id: HashMap<(u32, u64), &Op> = ops.iter().map(|o| ((o.producer, o.n), o)).collect();
    for op in ops {
        match op.outcome {
            Outcome::Ok { .. } | Outcome::OkLossy { .. } => summary.acknowledged += 1,
            Outcome::Fail => summary.failed += 1,
            Outcome::Unknown => summary.unknown += 1,
        }
    }
    let mut partitions: BTreeMap<u32, Vec<&Replica>> = BTreeMap::new();
    for r in replicas {
        partitions.entry(r.partition).or_default().push(r);
        summary.records_read += r.records.len();
    }
    for (&partition, reps) in &partitions {
        // Offset by offset, every replica that holds an offset holds the same record.
        let mut merged: BTreeMap<u64, &[u8]> = BTreeMap::new();
        let mut divergent = std::collections::BTreeSet::new();
        for r in reps {
            for (offset, payload) in &r.records {
                match merged.get(offset) {
                    Some(p) if *p != payload.as_slice() => {
                        divergent.insert(*offset);
                    }
                    Some(_) => {}
                    None => {
                        merged.insert(*offset, payload);
                    }
                }
            }
        }
        violations.extend(
            divergent
                .into_iter()
                .map(|offset| Violation::Divergent { partition, offset }),
        );
        // Each record traced back to its operation.
        let mut seen: HashMap<(u32, u64), u64> = HashMap::new();
        let mut last_by_producer: HashMap<u32, u64> = HashMap::new();
        let mut reordered = std::collections::BTreeSet::new();
        for (&offset, payload) in &merged {
            let Some(op) = parse(payload).and_then(|id| by_id.get(&id)) else {
                violations.push(Violation::Phantom { partition, offset });
                continue;
            };
            if op.partition != partition {
                violations.push(Violation::Phantom { partition, offset });
                continue;
            }
            if seen.insert((op.producer, op.n), offset).is_some() {
                violations.push(Violation::Duplicate {
                    producer: op.producer,
                    n: op.n,
                });
            }
            match op.outcome {
                Outcome::Fail => violations.push(Violation::FailedApplied {
                    producer: op.producer,
                    n: op.n,
                }),
                Outcome::Unknown => summary.unknown_applied += 1,
                Outcome::Ok { .. } | Outcome::OkLossy { .. } => {}
            }
            if let Some(prev) = last_by_producer.insert(op.producer, op.n)
                && prev > op.n
            {
                reordered.insert(op.producer);
            }
        }
        violations.extend(reordered.into_iter().map(|producer| Violation::Reordered {
            producer,
            partition,
        }));
        // Every acknowledged record at its offset on every replica.
        for op in ops.iter().filter(|o| o.partition == partition) {
            let offset = match op.outcome {
                Outcome::Ok { offset } => offset,
                Outcome::OkLossy { offset } => {
                    if !seen.contains_key(&(op.producer, op.n)) {
                        summary.lost_as_allowed += 1;
                        continue;
                    }
                    offset
                }
                Outcome::Fail | Outcome::Unknown => continue,
            };
            let want = Some((op.producer, op.n));
            for r in reps {
                let held = r
                    .records
                    .binary_search_by_key(&offset, |(o, _)| *o)
                    .ok()
                    .and_then(|i| parse(&r.records[i].1));
                if held != want {
                    violations.push(Violation::LostAck {
                        producer: op.producer,
                        n: op.n,
                        node: r.node,
                        offset,
                    });
                }
            }
        }
    }
    (violations, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(producer: u32, n: u64, outcome: Outcome) -> Op {
        Op {
            producer,
            n,
            partition: 0,
            outcome,
        }
    }

    fn replica(node: u64, ids: &[(u32, u64)]) -> Replica {
        Replica {
            node,
            partition: 0,
            records: (0u64..)
                .zip(ids)
                .map(|(o, (p, n))| (o, Op::payload(*p, *n)))
                .collect(),
        }
    }

    fn ok(offset: u64) -> Outcome {
        Outcome::Ok { offset }
    }

    #[test]
    fn a_clean_history_passes() {
        let ops = [
            op(1, 0, ok(0)),
            op(2, 0, ok(1)),
            op(1, 1, Outcome::Unknown),
            op(2, 1, Outcome::Fail),
        ];
        let log = [(1, 0), (2, 0), (1, 1)];
        let (v, s) = check(&ops, &[replica(1, &log), replica(2, &log)]);
        assert_eq!(v, vec![]);
        assert_eq!((s.acknowledged, s.unknown_applied, s.failed), (2, 1, 1));
    }

    #[test]
    fn each_violation_class_is_named() {
        let ops = [op(1, 0, ok(0)), op(1, 1, ok(1))];
        // Lost: replica 2 lacks the second acknowledged record.
        let (v, _) = check(
            &ops,
            &[replica(1, &[(1, 0), (1, 1)]), replica(2, &[(1, 0)])],
        );
        assert_eq!(
            v,
            vec![Violation::LostAck {
                producer: 1,
                n: 1,
                node: 2,
                offset: 1
            }]
        );
        // At another offset than acknowledged.
        let (v, _) = check(&ops, &[replica(1, &[(1, 1), (1, 0)])]);
        assert!(v.contains(&Violation::LostAck {
            producer: 1,
            n: 0,
            node: 1,
            offset: 0
        }));
        assert!(v.contains(&Violation::Reordered {
            producer: 1,
            partition: 0
        }));
        // Divergent replicas.
        let (v, _) = check(
            &[op(1, 0, Outcome::Unknown), op(2, 0, Outcome::Unknown)],
            &[replica(1, &[(1, 0)]), replica(2, &[(2, 0)])],
        );
        assert_eq!(
            v,
            vec![Violation::Divergent {
                partition: 0,
                offset: 0
            }]
        );
        // Duplicate of an unknown send.
        let (v, _) = check(
            &[op(1, 0, Outcome::Unknown)],
            &[replica(1, &[(1, 0), (1, 0)])],
        );
        assert_eq!(v, vec![Violation::Duplicate { producer: 1, n: 0 }]);
        // A failed send that was applied.
        let (v, _) = check(&[op(1, 0, Outcome::Fail)], &[replica(1, &[(1, 0)])]);
        assert_eq!(v, vec![Violation::FailedApplied { producer: 1, n: 0 }]);
        // A record nobody sent.
        let (v, _) = check(&[], &[replica(1, &[(9, 9)])]);
        assert_eq!(
            v,
            vec![Violation::Phantom {
                partition: 0,
                offset: 0
            }]
        );
        let garbage = Replica {
            node: 1,
            partition: 0,
            records: vec![(0, b"not an op".to_vec())],
        };
        assert_eq!(check(&[], &[garbage]).0.len(), 1);
    }

    #[test]
    fn a_lossy_acknowledgement_may_be_lost_whole_but_not_moved_or_split() {
        let lossy = |offset| Outcome::OkLossy { offset };
        let ops = [op(1, 0, ok(0)), op(1, 1, lossy(1)), op(2, 0, ok(1))];
        // Lost on every replica, its offset taken by a later record: allowed, and counted.
        let log = [(1, 0), (2, 0)];
        let (v, s) = check(&ops, &[replica(1, &log), replica(2, &log)]);
        assert_eq!(v, vec![]);
        assert_eq!(s.lost_as_allowed, 1);
        // Kept on one replica only: not allowed.
        let ops = [op(1, 0, ok(0)), op(1, 1, lossy(1))];
        let (v, _) = check(
            &ops,
            &[replica(1, &[(1, 0), (1, 1)]), replica(2, &[(1, 0)])],
        );
        assert_eq!(
            v,
            vec![Violation::LostAck {
                producer: 1,
                n: 1,
                node: 2,
                offset: 1
            }]
        );
        // Present, at another offset: not allowed.
        let ops = [op(1, 0, lossy(0))];
        let (v, _) = check(&ops, &[replica(1, &[(2, 0), (1, 0)])]);
        assert!(v.contains(&Violation::LostAck {
            producer: 1,
            n: 0,
            node: 1,
            offset: 0
        }));
    }

    #[test]
    fn a_record_in_the_wrong_partition_is_a_phantom() {
        let mut o = op(1, 0, Outcome::Unknown);
        o.partition = 1;
        let (v, _) = check(&[o], &[replica(1, &[(1, 0)])]);
        assert_eq!(
            v,
            vec![Violation::Phantom {
                partition: 0,
                offset: 0
            }]
        );
    }
}
