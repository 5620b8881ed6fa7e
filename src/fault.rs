//! Fault injection for the file layer, for tests (`failpoints` feature).
//!
//! A [`FaultInjector`] is attached to one log through `LogConfig::faults`, so tests that run in
//! parallel do not see each other's faults.

use std::io;
use std::path::Path;
#[cfg(any(test, feature = "failpoints"))]
use std::path::PathBuf;
#[cfg(any(test, feature = "failpoints"))]
use std::sync::Arc;

/// A place in the file layer where a fault can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// Making appended bytes durable (`fdatasync`).
    Sync,
    /// Writing an appended frame (`pwrite`).
    Write,
    /// Giving a new segment its blocks (`fallocate` or writing zeros).
    Preallocate,
    /// Creating a new segment file.
    CreateSegment,
    /// Writing an index file.
    WriteIndex,
    /// Syncing the directory after creating a segment file.
    SyncDir,
}

/// Decides which I/O operations fail. Cloned into every log that shares it.
#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
pub struct FaultInjector {
    armed: parking_lot::Mutex<Vec<(FaultPoint, io::ErrorKind, Remaining)>>,
    unsynced: parking_lot::Mutex<Unsynced>,
}

/// Frames written to segment files and not yet synced, for [`FaultInjector::lose_power`].
#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
struct Unsynced {
    /// Numbers writes, so that a sync forgets only the writes made before it began.
    next: u64,
    /// Per file: (write number, position, length).
    writes: std::collections::HashMap<PathBuf, Vec<(u64, u64, u64)>>,
}

/// What a simulated power loss takes away: the bytes written to segment files since their
/// last sync. See [`FaultInjector::lose_power`].
#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug)]
#[must_use = "a power loss takes nothing away until it is applied"]
pub struct PowerLoss {
    writes: Vec<(PathBuf, u64, u64)>,
}

#[cfg(any(test, feature = "failpoints"))]
impl PowerLoss {
    /// Zeroes every byte written but not synced before the loss (segment files are
    /// preallocated with zeros, so this is what the disk held). Run it once the logs are
    /// closed. Returns the number of bytes taken away.
    ///
    /// # Errors
    ///
    /// Any I/O error but a file that no longer exists.
    pub fn apply(self) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let mut lost = 0;
        for (path, pos, len) in self.writes {
            let file = match std::fs::OpenOptions::new().write(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let zeros = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
            file.write_all_at(&zeros, pos)?;
            file.sync_data()?;
            lost += len;
        }
        Ok(lost)
    }

    /// Bytes this loss takes away.
    pub fn bytes(&self) -> u64 {
        self.writes.iter().map(|(_, _, len)| len).sum()
    }
}

#[cfg(any(test, feature = "failpoints"))]
#[derive(Clone, Copy, Debug)]
enum Remaining {
    Times(u32),
    Always,
}

#[cfg(any(test, feature = "failpoints"))]
impl FaultInjector {
    /// A new injector with nothing armed.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Makes the next `times` operations at `point` fail with `kind`.
    pub fn fail_times(&self, point: FaultPoint, kind: io::ErrorKind, times: u32) {
        self.armed
            .lock()
            .push((point, kind, Remaining::Times(times)));
    }

    /// Makes every operation at `point` fail with `kind` until [`FaultInjector::clear`].
    pub fn fail_always(&self, point: FaultPoint, kind: io::ErrorKind) {
        self.armed.lock().push((point, kind, Remaining::Always));
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        self.armed.lock().clear();
    }

    /// Simulates a power loss now: from here on every write, sync, preallocation, segment
    /// creation and index write of the logs sharing this injector fails (as the machine is
    /// off), and the returned [`PowerLoss`] knows which bytes were written since their file's
    /// last sync. Close the logs (a broker's shutdown fails to flush them, as intended), apply
    /// the loss, [`clear`](Self::clear) the injector, and reopen: recovery finds the logs as
    /// a machine that lost power would. Writes outside segment files (Raft's vote, snapshots,
    /// the metadata log) are synced before they count, so they are kept.
    pub fn lose_power(&self) -> PowerLoss {
        for point in [
            FaultPoint::Write,
            FaultPoint::Sync,
            FaultPoint::Preallocate,
            FaultPoint::CreateSegment,
            FaultPoint::WriteIndex,
            FaultPoint::SyncDir,
        ] {
            self.fail_always(point, io::ErrorKind::Other);
        }
        let writes = std::mem::take(&mut self.unsynced.lock().writes);
        PowerLoss {
            writes: writes
                .into_iter()
                .flat_map(|(path, w)| {
                    w.into_iter()
                        .map(move |(_, pos, len)| (path.clone(), pos, len))
                })
                .collect(),
        }
    }

    fn wrote(&self, path: &Path, pos: u64, len: u64) {
        let mut u = self.unsynced.lock();
        let n = u.next;
        u.next += 1;
        u.writes
            .entry(path.to_path_buf())
            .or_default()
            .push((n, pos, len));
    }

    fn sync_token(&self) -> u64 {
        self.unsynced.lock().next
    }

    fn synced(&self, path: &Path, token: u64) {
        if let Some(w) = self.unsynced.lock().writes.get_mut(path) {
            w.retain(|(n, _, _)| *n >= token);
        }
    }

    fn check(&self, point: FaultPoint) -> io::Result<()> {
        let mut armed = self.armed.lock();
        let Some(i) = armed.iter().position(|(p, _, _)| *p == point) else {
            return Ok(());
        };
        let Some((_, kind, remaining)) = armed.get_mut(i) else {
            return Ok(());
        };
        let kind = *kind;
        match remaining {
            Remaining::Always => {}
            Remaining::Times(n) if *n > 1 => *n -= 1,
            Remaining::Times(_) => {
                armed.remove(i);
            }
        }
        Err(io::Error::new(kind, format!("injected fault at {point:?}")))
    }
}

/// The faults one log consults: none unless the `failpoints` feature (or a unit test) set some.
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    #[cfg(any(test, feature = "failpoints"))]
    injector: Option<Arc<FaultInjector>>,
}

impl Faults {
    pub(crate) fn from_config(_config: &crate::config::LogConfig) -> Self {
        Faults {
            #[cfg(any(test, feature = "failpoints"))]
            injector: _config.faults.clone(),
        }
    }

    /// Notes a write of `len` bytes at `pos` of the segment file `path` (for power losses).
    pub(crate) fn wrote(&self, _path: &Path, _pos: u64, _len: u64) {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            injector.wrote(_path, _pos, _len);
        }
    }

    /// A token to pass to [`synced`](Self::synced) once a sync that starts now returns.
    pub(crate) fn sync_token(&self) -> u64 {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            return injector.sync_token();
        }
        0
    }

    /// Notes that `path` was synced: every write noted before `token` was taken is durable.
    pub(crate) fn synced(&self, _path: &Path, _token: u64) {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            injector.synced(_path, _token);
        }
    }

    /// `Err` if a fault is armed at `point`.
    pub(crate) fn check(&self, _point: FaultPoint) -> io::Result<()> {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            return injector.check(_point);
        }
        Ok(())
    }
}

/// Decides which broker-to-broker messages of an in-process cluster are lost or late, for
/// tests (`failpoints` feature). One injector is shared by every broker of the cluster through
/// `NodeConfig::net_faults`; it acts on Raft traffic between brokers, not on clients.
///
/// A lost request is never delivered; a lost response belongs to a request that *was*
/// delivered and processed. Either way the sender waits out its timeout, as it would on a real
/// network.
#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
pub struct NetFaults {
    state: parking_lot::Mutex<NetState>,
}

#[cfg(any(test, feature = "failpoints"))]
#[derive(Debug, Default)]
struct NetState {
    /// Directed links `(from, to)` that carry nothing.
    cut: std::collections::HashSet<(u64, u64)>,
    /// Chance, in thousandths, that a message on a working link is lost.
    loss_per_mille: u32,
    /// Each delivered request waits this long first: `[min, max]` milliseconds.
    delay_ms: (u64, u64),
    rng: u64,
}

/// What happens to one message.
#[cfg(any(test, feature = "failpoints"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Deliver(std::time::Duration),
    Lose,
}

#[cfg(any(test, feature = "failpoints"))]
impl NetFaults {
    /// An injector with a healthy network.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Cuts the link from `from` to `to` (one way).
    pub fn cut(&self, from: u64, to: u64) {
        self.state.lock().cut.insert((from, to));
    }

    /// Cuts every link between a broker in `a` and one in `b`, both ways.
    pub fn partition(&self, a: &[u64], b: &[u64]) {
        let mut s = self.state.lock();
        for x in a {
            for y in b {
                s.cut.insert((*x, *y));
                s.cut.insert((*y, *x));
            }
        }
    }

    /// Loses each message on a working link with this chance, in thousandths.
    pub fn set_loss(&self, per_mille: u32) {
        self.state.lock().loss_per_mille = per_mille.min(1000);
    }

    /// Delays each delivered request by `min_ms..=max_ms` milliseconds.
    pub fn set_delay(&self, min_ms: u64, max_ms: u64) {
        self.state.lock().delay_ms = (min_ms, max_ms.max(min_ms));
    }

    /// Restores a healthy network: no cuts, no loss, no delay.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        s.cut.clear();
        s.loss_per_mille = 0;
        s.delay_ms = (0, 0);
    }

    /// The fate of one message from `from` to `to`.
    pub(crate) fn verdict(&self, from: u64, to: u64) -> Verdict {
        let mut s = self.state.lock();
        if s.cut.contains(&(from, to)) {
            return Verdict::Lose;
        }
        // xorshift: the sequence is not seeded per test; the schedule's own seed decides when
        // faults are on, this only spreads them over messages.
        s.rng = if s.rng == 0 { 0x2545_F491 } else { s.rng };
        s.rng ^= s.rng << 13;
        s.rng ^= s.rng >> 7;
        s.rng ^= s.rng << 17;
        if s.loss_per_mille > 0 && (s.rng % 1000) < u64::from(s.loss_per_mille) {
            return Verdict::Lose;
        }
        let (lo, hi) = s.delay_ms;
        let ms = if hi > lo {
            lo + (s.rng >> 20) % (hi - lo + 1)
        } else {
            lo
        };
        Verdict::Deliver(std::time::Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn cuts_are_directed_partitions_symmetric_and_heal_restores_everything() {
        let net = NetFaults::new();
        assert_eq!(net.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
        net.cut(1, 2);
        assert_eq!(net.verdict(1, 2), Verdict::Lose);
        assert_eq!(net.verdict(2, 1), Verdict::Deliver(Duration::ZERO));
        net.partition(&[3], &[1, 2]);
        for (a, b) in [(3, 1), (1, 3), (3, 2), (2, 3)] {
            assert_eq!(net.verdict(a, b), Verdict::Lose);
        }
        net.heal();
        assert_eq!(net.verdict(1, 2), Verdict::Deliver(Duration::ZERO));
        assert_eq!(net.verdict(3, 1), Verdict::Deliver(Duration::ZERO));
    }

    #[test]
    fn loss_and_delay_stay_within_their_settings() {
        let net = NetFaults::new();
        net.set_loss(1000);
        assert!((0..100).all(|_| net.verdict(1, 2) == Verdict::Lose));
        net.set_loss(200);
        net.set_delay(5, 9);
        let mut lost = 0;
        for _ in 0..10_000 {
            match net.verdict(1, 2) {
                Verdict::Lose => lost += 1,
                Verdict::Deliver(d) => {
                    assert!((Duration::from_millis(5)..=Duration::from_millis(9)).contains(&d));
                }
            }
        }
        assert!((1000..3000).contains(&lost), "about a fifth lost: {lost}");
    }
}
