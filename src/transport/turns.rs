//! Turns: tasks that start in some order pass one point in that same order.
//!
//! Work that must keep an order (a producer's batches of one partition, the produce requests of
//! one connection) is handed out [`Turn`]s in order. A task waits for its turn before the
//! point that fixes the order (queueing a request on a connection, taking the partition's
//! producer gate) and drops the turn right after it. A turn counts as passed once it and every
//! earlier turn are dropped, so a turn dropped early (a task that gave up, or one with nothing
//! to order) never lets a later one overtake an earlier one that is still waiting.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Hands out turns and tracks which have passed.
#[derive(Debug)]
pub(crate) struct Turns {
    state: Mutex<State>,
    /// Every turn below this one has passed.
    passed_below: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    issued: u64,
    /// Turns dropped before every earlier one was.
    early: BTreeSet<u64>,
}

impl Turns {
    pub(crate) fn new() -> Arc<Turns> {
        Arc::new(Turns {
            state: Mutex::default(),
            passed_below: watch::channel(0).0,
        })
    }

    /// The next turn.
    pub(crate) fn issue(self: &Arc<Self>) -> Turn {
        let mut state = self.state.lock();
        let ticket = state.issued;
        state.issued += 1;
        Turn {
            turns: Arc::clone(self),
            ticket,
        }
    }

    fn pass(&self, ticket: u64) {
        let mut state = self.state.lock();
        let mut below = *self.passed_below.borrow();
        if ticket != below {
            state.early.insert(ticket);
            return;
        }
        below += 1;
        while state.early.remove(&below) {
            below += 1;
        }
        self.passed_below.send_replace(below);
    }
}

impl Turns {
    /// Waits until the first `n` turns issued have passed.
    pub(crate) async fn passed(&self, n: u64) {
        let mut passed = self.passed_below.subscribe();
        let _ = passed.wait_for(|below| *below >= n).await;
    }
}

/// One task's place in the order; dropping it lets the next one through.
#[derive(Debug)]
pub(crate) struct Turn {
    turns: Arc<Turns>,
    ticket: u64,
}

impl Turn {
    /// Waits until every earlier turn has passed.
    pub(crate) async fn wait(&self) {
        let mut passed = self.turns.passed_below.subscribe();
        let _ = passed.wait_for(|below| *below >= self.ticket).await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.pass(self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn turns_pass_in_order_even_when_dropped_out_of_order() {
        let turns = Turns::new();
        let (a, b, c) = (turns.issue(), turns.issue(), turns.issue());
        a.wait().await;
        // `c` gives up before `b` passes: `b` is still next, and `c` does not hold anyone up.
        drop(c);
        let early = tokio::time::timeout(Duration::from_millis(50), b.wait()).await;
        assert!(early.is_err(), "b waits for a");
        let d = tokio::time::timeout(Duration::from_millis(50), async {
            let d = turns.issue();
            d.wait().await;
        })
        .await;
        assert!(d.is_err(), "d waits for a and b");
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), b.wait())
            .await
            .expect("b's turn once a passed");
        drop(b);
        let e = turns.issue();
        tokio::time::timeout(Duration::from_secs(5), e.wait())
            .await
            .expect("every turn before e has passed, c and d included");
    }

    #[tokio::test]
    async fn waiters_are_released_in_ticket_order() {
        let turns = Turns::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        let issued: Vec<Turn> = (0..20).map(|_| turns.issue()).collect();
        // Spawned in reverse, so that any reordering by the scheduler would show.
        for (i, turn) in issued.into_iter().enumerate().rev() {
            let order = Arc::clone(&order);
            tasks.spawn(async move {
                turn.wait().await;
                order.lock().push(i);
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        assert_eq!(*order.lock(), (0..20).collect::<Vec<_>>());
    }
}
