//! Idempotent producers: what a partition remembers of each producer's recent batches, so that
//! a retried batch gets its original offsets back instead of being written twice.
//!
//! A producer numbers its records per partition (Kafka's sequence numbers): a batch carries the
//! sequence of its first record, and the next batch must start where the previous one ended.
//! The state machine keeps the last [`BATCHES_PER_PRODUCER`] committed batches of each
//! producer, in every replica's state and in snapshots, so a new leader knows them too. The
//! leader checks each incoming batch against them plus the batches it has proposed but not yet
//! applied (see `Replica::write`):
//!
//! - the same `(producer, epoch, base sequence, count)` as a remembered batch: a duplicate,
//!   answered with the original offsets;
//! - an epoch below the producer's latest: fenced, refused (nothing written, and nothing of that
//!   epoch ever will be). A client that gives up on a batch moves to the next epoch, so the
//!   batches it had in flight under the old one can never land after the ones it sends next;
//! - the sequence right after the producer's last batch in the same epoch, or 0 in a later epoch
//!   or from a producer the partition does not know: new, appended;
//! - anything else: out of order, refused (nothing written). A client with at most five batches
//!   in flight retries it once the batches before it are in.
//!
//! Sequence numbers wrap at `u32::MAX`. A producer's epochs only grow in log order: every
//! batch passed a leader's check against everything before it in the log.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// How many batches per producer a partition remembers (Kafka's limit of five in flight).
pub(crate) const BATCHES_PER_PRODUCER: usize = 5;

/// How many producers a partition remembers; past it the one idle longest (by log position)
/// is forgotten, deterministically on every replica.
pub(crate) const PRODUCERS_MAX: usize = 4096;

/// One committed batch of a producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SeqBatch {
    /// The producer's epoch (absent in snapshots written before epochs existed: 0).
    #[serde(default)]
    pub(crate) epoch: u16,
    pub(crate) base_sequence: u32,
    pub(crate) record_count: u32,
    pub(crate) base_offset: u64,
    pub(crate) log_index: u64,
}

impl SeqBatch {
    /// The batch as the leader's check names it.
    fn key(&self) -> PendingBatch {
        (self.epoch, self.base_sequence, self.record_count)
    }
}

/// A batch as the leader's check names it: `(epoch, base sequence, count)`. Also the form of
/// a batch the leader proposed and has not seen applied yet.
pub(crate) type PendingBatch = (u16, u32, u32);

/// What to do with an incoming batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Append it.
    New,
    /// Already committed: answer with this.
    Duplicate(SeqBatch),
    /// Already proposed by this leader and not applied yet: try again shortly.
    InFlight,
    /// Not the next sequence: nothing written.
    OutOfOrder {
        /// The sequence the producer's next batch must start at.
        expected: u32,
    },
    /// An earlier epoch than the producer's latest: nothing written.
    Fenced {
        /// The producer's latest epoch.
        current: u16,
    },
}

/// The committed batches of every known producer of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProducerTable {
    /// Producer id → its last batches, oldest first.
    producers: BTreeMap<u64, VecDeque<SeqBatch>>,
}

impl ProducerTable {
    /// Classifies `batch` of `producer`, given the batches this leader has proposed for it and
    /// not yet seen applied (in proposal order, all after the committed ones).
    pub(crate) fn check(
        &self,
        producer: u64,
        batch: PendingBatch,
        pending: &VecDeque<PendingBatch>,
    ) -> Check {
        let committed = self.producers.get(&producer);
        if let Some(found) = committed.and_then(|batches| batches.iter().find(|b| b.key() == batch))
        {
            return Check::Duplicate(*found);
        }
        if pending.contains(&batch) {
            return Check::InFlight;
        }
        let (epoch, base_sequence, _) = batch;
        // The producer's latest batch: `(epoch, the sequence its next batch starts at)`.
        let last = match pending.back() {
            Some(&(e, base, count)) => Some((e, base.wrapping_add(count))),
            None => committed
                .and_then(|b| b.back())
                .map(|b| (b.epoch, b.base_sequence.wrapping_add(b.record_count))),
        };
        // A producer the partition does not know, or a new epoch, starts at 0 (a client that
        // took a fresh producer id or epoch numbers from 0), so a later batch that overtakes
        // the first one on its way is refused, not taken first.
        let expected = match last {
            Some((current, _)) if epoch < current => return Check::Fenced { current },
            Some((current, next)) if epoch == current => next,
            _ => 0,
        };
        if expected == base_sequence {
            Check::New
        } else {
            Check::OutOfOrder { expected }
        }
    }

    /// Whether `batch` of `producer` is among the committed ones remembered.
    pub(crate) fn contains(&self, producer: u64, batch: PendingBatch) -> bool {
        self.producers
            .get(&producer)
            .is_some_and(|batches| batches.iter().any(|b| b.key() == batch))
    }

    /// Records a committed batch (called in log order on every replica).
    pub(crate) fn record(&mut self, producer: u64, batch: SeqBatch) {
        if !self.producers.contains_key(&producer) && self.producers.len() >= PRODUCERS_MAX {
            let idlest = self
                .producers
                .iter()
                .min_by_key(|(id, batches)| (batches.back().map_or(0, |b| b.log_index), **id))
                .map(|(id, _)| *id);
            if let Some(id) = idlest {
                self.producers.remove(&id);
            }
        }
        let batches = self.producers.entry(producer).or_default();
        batches.push_back(batch);
        while batches.len() > BATCHES_PER_PRODUCER {
            batches.pop_front();
        }
    }

    /// How many producers are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_sequence: u32, record_count: u32, base_offset: u64) -> SeqBatch {
        SeqBatch {
            epoch: 0,
            base_sequence,
            record_count,
            base_offset,
            log_index: base_offset + 1,
        }
    }

    #[test]
    fn classifies_new_duplicate_in_flight_and_out_of_order() {
        let mut t = ProducerTable::default();
        let none = VecDeque::new();
        assert_eq!(
            t.check(7, (0, 0, 3), &none),
            Check::New,
            "an unknown producer starts at 0"
        );
        assert_eq!(
            t.check(7, (0, 42, 3), &none),
            Check::OutOfOrder { expected: 0 },
            "not with a later batch"
        );
        t.record(7, batch(0, 3, 100));
        t.record(7, batch(3, 2, 103));
        assert_eq!(
            t.check(7, (0, 0, 3), &none),
            Check::Duplicate(batch(0, 3, 100))
        );
        assert_eq!(
            t.check(7, (0, 3, 2), &none),
            Check::Duplicate(batch(3, 2, 103))
        );
        assert_eq!(t.check(7, (0, 5, 1), &none), Check::New);
        assert_eq!(
            t.check(7, (0, 6, 1), &none),
            Check::OutOfOrder { expected: 5 }
        );
        assert_eq!(
            t.check(7, (0, 3, 1), &none),
            Check::OutOfOrder { expected: 5 }
        );
        let pending = VecDeque::from([(0, 5, 4)]);
        assert_eq!(t.check(7, (0, 5, 4), &pending), Check::InFlight);
        assert_eq!(t.check(7, (0, 9, 1), &pending), Check::New);
        assert_eq!(
            t.check(7, (0, 5, 1), &pending),
            Check::OutOfOrder { expected: 9 }
        );
        assert_eq!(
            t.check(8, (0, 0, 1), &none),
            Check::New,
            "producers are independent"
        );
    }

    #[test]
    fn remembers_the_last_five_batches_only() {
        let mut t = ProducerTable::default();
        for i in 0..8u32 {
            t.record(1, batch(i * 10, 10, u64::from(i) * 10));
        }
        let none = VecDeque::new();
        assert_eq!(
            t.check(1, (0, 20, 10), &none),
            Check::OutOfOrder { expected: 80 }
        );
        assert!(matches!(
            t.check(1, (0, 30, 10), &none),
            Check::Duplicate(_)
        ));
        assert!(matches!(
            t.check(1, (0, 70, 10), &none),
            Check::Duplicate(_)
        ));
        assert_eq!(t.check(1, (0, 80, 10), &none), Check::New);
    }

    /// Regression (fault schedules with a pipelined producer): a partition took any sequence
    /// from a producer it did not know, so a producer's second batch that arrived first was
    /// taken, and the first one was renumbered and landed after it.
    #[test]
    fn regression_a_later_batch_cannot_overtake_a_new_producers_first() {
        let t = ProducerTable::default();
        let none = VecDeque::new();
        assert_eq!(
            t.check(9, (0, 17, 4), &none),
            Check::OutOfOrder { expected: 0 }
        );
        assert_eq!(t.check(9, (0, 0, 17), &none), Check::New);
        let first = VecDeque::from([(0, 0, 17)]);
        assert_eq!(t.check(9, (0, 17, 4), &first), Check::New);
    }

    /// Regression (a pipelined producer under faults): a client that gave up on a batch
    /// took a fresh producer id, so a batch it still had in flight under the old id (its
    /// outcome unknown, resent, or still queued on a broker) was taken after the batches sent
    /// under the new one. A later epoch now fences the earlier ones once it has written.
    #[test]
    fn regression_a_later_epoch_fences_the_batches_of_an_earlier_one() {
        let mut t = ProducerTable::default();
        let none = VecDeque::new();
        t.record(5, batch(0, 10, 0));
        // The batch at sequence 10 of epoch 0 is still on its way; the client moved on to
        // epoch 1 and its first batch there is taken.
        assert_eq!(t.check(5, (1, 0, 3), &none), Check::New);
        let pending = VecDeque::from([(1, 0, 3)]);
        assert_eq!(
            t.check(5, (0, 10, 4), &pending),
            Check::Fenced { current: 1 },
            "an earlier epoch is refused while the later one is being committed"
        );
        t.record(
            5,
            SeqBatch {
                epoch: 1,
                ..batch(0, 3, 10)
            },
        );
        assert_eq!(
            t.check(5, (0, 10, 4), &none),
            Check::Fenced { current: 1 },
            "and once it is committed"
        );
        assert_eq!(
            t.check(5, (0, 0, 10), &none),
            Check::Duplicate(batch(0, 10, 0)),
            "a batch the partition holds is still answered with its offsets"
        );
        assert_eq!(t.check(5, (1, 3, 1), &none), Check::New);
        assert_eq!(
            t.check(5, (1, 4, 1), &none),
            Check::OutOfOrder { expected: 3 }
        );
        assert_eq!(
            t.check(5, (2, 3, 1), &none),
            Check::OutOfOrder { expected: 0 },
            "a new epoch starts at 0"
        );
        assert_eq!(t.check(5, (2, 0, 1), &none), Check::New);
    }

    /// A snapshot written before epochs existed reads as epoch 0.
    #[test]
    fn a_snapshot_without_epochs_reads_as_epoch_0() {
        let old = r#"{"producers":{"7":[{"base_sequence":0,"record_count":2,"base_offset":4,"log_index":9}]}}"#;
        let t: ProducerTable = serde_json::from_str(old).unwrap();
        assert!(t.contains(7, (0, 0, 2)));
    }

    #[test]
    fn sequences_wrap() {
        let mut t = ProducerTable::default();
        t.record(1, batch(u32::MAX - 1, 3, 0));
        assert_eq!(t.check(1, (0, 1, 1), &VecDeque::new()), Check::New);
    }

    #[test]
    fn forgets_the_idlest_producer_past_the_limit() {
        let mut t = ProducerTable::default();
        for p in 0..PRODUCERS_MAX as u64 {
            t.record(p, batch(0, 1, p));
        }
        // Producer 0 writes again, so producer 1 is now the idlest.
        t.record(0, batch(1, 1, 1_000_000));
        t.record(u64::MAX, batch(0, 1, 1_000_001));
        assert_eq!(t.len(), PRODUCERS_MAX);
        assert!(t.contains(0, (0, 1, 1)));
        assert!(!t.contains(1, (0, 0, 1)));
        assert!(t.contains(2, (0, 0, 1)));
    }

    #[test]
    fn survives_a_snapshot_round_trip() {
        let mut t = ProducerTable::default();
        t.record(u64::MAX, batch(5, 5, 9));
        let json = serde_json::to_vec(&t).unwrap();
        assert_eq!(serde_json::from_slice::<ProducerTable>(&json).unwrap(), t);
    }
}
