//! The idempotent producer's numbering of one partition's batches: which producer id and
//! epoch a batch goes under, its sequence number, and what happens to the batches behind one
//! that failed for good.
//!
//! # The ordering argument
//!
//! A partition takes a producer's batches of one epoch only in sequence order, and once it has
//! taken a batch of some epoch it refuses every earlier epoch (`ProducerTable::check`). So:
//!
//! - Within an epoch, batches land in the order they were numbered, which is the order `send`
//!   was called.
//! - When a batch fails for good, the batches numbered after it can never land under their
//!   numbers (the failed one leaves a gap, unless it was written after all, see below). The
//!   sequencer moves to the next epoch and renumbers, in their order, those that are *idle*:
//!   not being sent right now and never possibly written. They land after everything of the
//!   old epoch that lands at all, because an old-epoch batch can only be taken before the first
//!   new-epoch batch is.
//! - A batch that was being sent (its attempt may still land) or may already be in the log keeps
//!   its old numbers. If it is refused under them it cannot be renumbered (batches numbered
//!   after it may already have landed under the new epoch), so it fails: definitely not written
//!   if no attempt of it may have landed, outcome unknown otherwise.
//!
//! Before this module, a failure took a fresh random producer id
//! instead of a new epoch: nothing tied the two ids together, so a batch still in flight under
//! the old id could be taken after batches sent under the new one.

use std::collections::{HashMap, VecDeque};

use crate::types::ProducerSeq;

/// One partition's numbering.
#[derive(Debug)]
pub(crate) struct Sequencer {
    /// The producer id and epoch new batches go under, and the next sequence number.
    current: ProducerSeq,
    /// The current epoch's batches not yet answered, in the order they were numbered.
    unanswered: VecDeque<Unanswered>,
    /// Batches of earlier epochs renumbered under a later one: old numbers → new numbers.
    renumbered: HashMap<ProducerSeq, ProducerSeq>,
}

#[derive(Debug)]
struct Unanswered {
    base_sequence: u32,
    record_count: u32,
    /// An attempt's outcome was unknown: it may be in the log under these numbers.
    maybe_written: bool,
    /// An attempt is on its way: it may still land under these numbers.
    sending: bool,
}

/// What an attempt of a batch taught about its numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Refused, or never sent: nothing of it landed.
    Refused,
    /// No answer, or an answer that it landed: it may be in the log.
    MayHaveLanded,
}

impl Sequencer {
    /// A sequencer for a new producer id.
    pub(crate) fn new(producer_id: u64) -> Sequencer {
        Sequencer {
            current: ProducerSeq::new(producer_id, 0),
            unanswered: VecDeque::new(),
            renumbered: HashMap::new(),
        }
    }

    /// Numbers a batch of `count` records.
    pub(crate) fn take(&mut self, count: u32) -> ProducerSeq {
        let taken = self.current;
        self.unanswered.push_back(Unanswered {
            base_sequence: taken.base_sequence,
            record_count: count,
            maybe_written: false,
            sending: false,
        });
        self.current.base_sequence = taken.base_sequence.wrapping_add(count);
        taken
    }

    fn entry(&mut self, numbers: ProducerSeq) -> Option<&mut Unanswered> {
        if !self.is_current_epoch(numbers) {
            return None;
        }
        self.unanswered
            .iter_mut()
            .find(|u| u.base_sequence == numbers.base_sequence)
    }

    /// Whether `numbers` belong to the epoch new batches go under.
    pub(crate) fn is_current_epoch(&self, numbers: ProducerSeq) -> bool {
        (numbers.producer_id, numbers.epoch) == (self.current.producer_id, self.current.epoch)
    }

    /// An attempt of the batch numbered `*numbers` is about to be sent: takes its new numbers
    /// if it was renumbered, and marks it as being sent.
    pub(crate) fn begin_attempt(&mut self, numbers: &mut ProducerSeq) {
        if let Some(new) = self.renumbering_of(*numbers) {
            *numbers = new;
        }
        if let Some(u) = self.entry(*numbers) {
            u.sending = true;
        }
    }

    /// The attempt begun with `numbers` ended as `attempt` said.
    pub(crate) fn end_attempt(&mut self, numbers: ProducerSeq, attempt: Attempt) {
        if let Some(u) = self.entry(numbers) {
            u.sending = false;
            u.maybe_written |= attempt == Attempt::MayHaveLanded;
        }
    }

    /// The batch numbered `numbers` has its final answer (`failed`: it failed for good). A
    /// failure moves the partition to the next epoch, unless that happened since.
    pub(crate) fn finished(&mut self, numbers: ProducerSeq, failed: bool) {
        // A batch that failed before it took the numbers it was renumbered to leaves those.
        let numbers = self.renumbering_of(numbers).unwrap_or(numbers);
        if self.is_current_epoch(numbers) {
            self.unanswered
                .retain(|u| u.base_sequence != numbers.base_sequence);
            if failed {
                self.next_epoch();
            }
        }
    }

    /// Whether `numbers` are those of the oldest batch still waiting for an answer.
    pub(crate) fn is_oldest(&self, numbers: ProducerSeq) -> bool {
        self.is_current_epoch(numbers)
            && self.unanswered.front().map(|u| u.base_sequence) == Some(numbers.base_sequence)
    }

    /// The partition refused `numbers` as out of order although the batch was never written
    /// (it forgot the producer, or the batch's place in the sequence is gone): moves to the next
    /// epoch and returns the batch's new numbers, if it can take new ones (it is of the current
    /// epoch and idle). `None`: it must fail.
    pub(crate) fn renumber_refused(&mut self, numbers: ProducerSeq) -> Option<ProducerSeq> {
        if !self.is_current_epoch(numbers) {
            return self.renumbering_of(numbers);
        }
        self.next_epoch();
        self.renumbering_of(numbers)
    }

    /// Moves to the next epoch (a fresh producer id once the epochs run out) and renumbers the
    /// idle, never-written batches of the old one under it, in their order.
    fn next_epoch(&mut self) {
        let old = self.current;
        self.current = match old.epoch.checked_add(1) {
            Some(epoch) => ProducerSeq {
                epoch,
                base_sequence: 0,
                ..old
            },
            None => ProducerSeq::new(super::new_producer_id(), 0),
        };
        for u in std::mem::take(&mut self.unanswered) {
            if !u.maybe_written && !u.sending {
                let new = self.take(u.record_count);
                let was = ProducerSeq {
                    base_sequence: u.base_sequence,
                    ..old
                };
                self.renumbered.insert(was, new);
            }
        }
    }

    /// Where `numbers` were renumbered to, following later renumberings.
    fn renumbering_of(&mut self, numbers: ProducerSeq) -> Option<ProducerSeq> {
        let mut at = self.renumbered.remove(&numbers)?;
        // Bounded: each step removes an entry.
        while let Some(next) = self.renumbered.remove(&at) {
            at = next;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(epoch: u16, base_sequence: u32) -> ProducerSeq {
        ProducerSeq::new(7, base_sequence).with_epoch(epoch)
    }

    #[test]
    fn sequences_count_records_and_a_failure_moves_to_the_next_epoch_once() {
        let mut s = Sequencer::new(7);
        s.current.base_sequence = u32::MAX - 1;
        let (a, b) = (s.take(3), s.take(1));
        assert_eq!((a, b), (seq(0, u32::MAX - 1), seq(0, 1)), "wraps");
        s.finished(a, false);
        s.finished(b, true);
        assert_eq!(s.take(2), seq(1, 0), "the next epoch starts at 0");
        // A second batch that failed in the old epoch does not move it again.
        s.finished(a, true);
        assert_eq!(s.take(1), seq(1, 2));
        // The oldest unanswered batch is tracked per epoch.
        assert!(s.is_oldest(seq(1, 0)));
        s.finished(seq(1, 0), false);
        assert!(s.is_oldest(seq(1, 2)) && !s.is_oldest(seq(0, 2)));
    }

    /// Regression (fault schedules with a pipelined producer): after a batch failed for good,
    /// the batches behind it took fresh numbers in whatever order their retries came, and
    /// landed out of order.
    #[test]
    fn regression_a_failure_renumbers_the_idle_batches_behind_in_their_order() {
        let mut s = Sequencer::new(7);
        let failed = s.take(10);
        let (mut b, mut c, mut d, mut e) = (s.take(5), s.take(7), s.take(1), s.take(2));
        // d may be in the log; e is on its way.
        s.begin_attempt(&mut d);
        s.end_attempt(d, Attempt::MayHaveLanded);
        s.begin_attempt(&mut e);
        s.finished(failed, true);
        // Asked for in reverse order, the idle ones still get their numbers in the original
        // order; the others keep theirs.
        s.begin_attempt(&mut c);
        s.begin_attempt(&mut b);
        assert_eq!((b, c), (seq(1, 0), seq(1, 5)));
        let (was_d, was_e) = (d, e);
        s.begin_attempt(&mut d);
        assert_eq!(d, was_d);
        assert_eq!(e, was_e);
        assert_eq!(s.take(3), seq(1, 12), "new batches come after them");
        // A second failure before a batch took its new numbers still finds them.
        let mut f = s.take(2);
        let before = f;
        s.finished(b, true);
        s.begin_attempt(&mut f);
        assert_eq!((f.epoch, before.epoch), (2, 1));
    }

    /// Regression: the batch still on its way when another failed for good went on under
    /// its old numbers while the batches behind it moved to a fresh producer id, and a broker
    /// took them first. It now keeps an epoch the partition fences once the new one writes,
    /// and a refusal of it cannot renumber it behind them.
    #[test]
    fn regression_a_batch_in_flight_at_a_failure_is_never_renumbered_behind_later_ones() {
        let mut s = Sequencer::new(7);
        let failed = s.take(4);
        let mut in_flight = s.take(4);
        let mut idle = s.take(4);
        s.begin_attempt(&mut in_flight);
        s.finished(failed, true);
        s.begin_attempt(&mut idle);
        assert_eq!(idle, seq(1, 0));
        // The one in flight is refused (out of order, or fenced): it cannot take new numbers.
        s.end_attempt(in_flight, Attempt::Refused);
        assert_eq!(s.renumber_refused(in_flight), None);
        // A batch of the current epoch refused as forgotten is renumbered under the next one.
        s.end_attempt(idle, Attempt::Refused);
        assert_eq!(s.renumber_refused(idle), Some(seq(2, 0)));
    }

    #[test]
    fn epochs_that_run_out_take_a_fresh_producer_id() {
        let mut s = Sequencer::new(7);
        s.current.epoch = u16::MAX;
        let a = s.take(1);
        s.finished(a, true);
        let b = s.take(1);
        assert_ne!(b.producer_id, 7);
        assert_eq!((b.epoch, b.base_sequence), (0, 0));
    }
}
