//! The one wait of the tests: poll a condition with a short backoff until it holds or a
//! deadline passes, then fail naming what was awaited and how long it took.

use std::time::{Duration, Instant};

/// The first pause between two polls; each next pause doubles, up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// When a wait gives up: after a [`Duration`] from now, or at an [`Instant`].
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

impl From<Duration> for Deadline {
    fn from(limit: Duration) -> Deadline {
        Deadline(Instant::now() + limit)
    }
}

impl From<Instant> for Deadline {
    fn from(at: Instant) -> Deadline {
        Deadline(at)
    }
}

/// What a condition returns: `true`, `Some(value)` or `Ok(value)` when it holds; `false`,
/// `None` or `Err(why)` while it does not (the last `why` is named if the wait times out).
pub trait Ready {
    type Value;
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

impl Ready for bool {
    type Value = ();
    fn ready(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Ready for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// The poll plan of a wait: pauses that grow from [`BACKOFF_MIN`] to [`BACKOFF_MAX`], and the
/// most polls that fit before the deadline (each pause is at least `BACKOFF_MIN`).
struct Polls {
    started: Instant,
    deadline: Instant,
    pause: Duration,
    polls_max: u128,
}

impl Polls {
    fn new(deadline: Deadline) -> Polls {
        let started = Instant::now();
        let limit = deadline.0.saturating_duration_since(started);
        Polls {
            started,
            deadline: deadline.0,
            pause: BACKOFF_MIN,
            polls_max: limit.as_millis() / BACKOFF_MIN.as_millis() + 2,
        }
    }

    /// The pause before the next poll, or `None` once the deadline has passed.
    fn next_pause(&mut self) -> Option<Duration> {
        let left = self.deadline.checked_duration_since(Instant::now())?;
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(BACKOFF_MAX);
        Some(pause)
    }

    fn timed_out(&self, what: &str, last: Option<String>) -> ! {
        let elapsed = self.started.elapsed();
        match last {
            Some(last) => panic!("timed out after {elapsed:?} waiting for {what}: {last}"),
            None => panic!("timed out after {elapsed:?} waiting for {what}"),
        }
    }
}

/// Polls `condition` until it is ready (see [`Ready`]) and returns its value; panics naming
/// `what`, the time waited and the last reason given once `deadline` has passed. A poll that
/// is still running at the deadline may finish (so a slow check is not cut short), but one
/// poll never runs for longer than the whole wait could.
///
/// `condition` is an `async || ..` closure, which may borrow the test's state mutably. Inside
/// a spawned task, make it `async move || ..` owning what it uses: a closure that borrows from
/// its surroundings there makes the task's future not provably `Send`.
pub async fn wait_until<R: Ready>(
    deadline: impl Into<Deadline>,
    what: &str,
    mut condition: impl AsyncFnMut() -> R,
) -> R::Value {
    let mut polls = Polls::new(deadline.into());
    let poll_max = polls.deadline.saturating_duration_since(polls.started) + BACKOFF_MAX;
    let mut last = None;
    // Bounded: at most `polls_max` polls, each bounded by `poll_max`, with pauses in between.
    for _ in 0..polls.polls_max {
        match tokio::time::timeout(poll_max, condition()).await {
            Ok(outcome) => match outcome.ready() {
                Ok(value) => return value,
                Err(why) => last = why.or(last),
            },
            Err(_) => last = Some(format!("one check did not end within {poll_max:?}")),
        }
        match polls.next_pause() {
            // The backoff between two polls: not waiting for anything but the next poll.
            Some(pause) => tokio::time::sleep(pause).await,
            None => break,
        }
    }
    polls.timed_out(what, last)
}

/// [`wait_until`] for tests without a runtime: `condition` is polled on this thread.
pub fn wait_until_blocking<R: Ready>(
    deadline: impl Into<Deadline>,
    what: &str,
    mut condition: impl FnMut() -> R,
) -> R::Value {
    let mut polls = Polls::new(deadline.into());
    let mut last = None;
    // Bounded: at most `polls_max` polls, with pauses in between.
    for _ in 0..polls.polls_max {
        match condition().ready() {
            Ok(value) => return value,
            Err(why) => last = why.or(last),
        }
        match polls.next_pause() {
            // The backoff between two polls: not waiting for anything but the next poll.
            Some(pause) => std::thread::sleep(pause),
            None => break,
        }
    }
    polls.timed_out(what, last)
}
