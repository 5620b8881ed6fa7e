//! Fault injection for the file layer, for tests (`failpoints` feature).
//!
//! A [`FaultInjector`] is given to the logs of one environment (`Env::with_disk_faults`), so
//! tests that run in parallel do not see each other's faults. The log consults it through [`Faults`], which is
//! empty (and free) without the feature.

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
    /// Points where every operation waits until [`FaultInjector::clear`] (a disk that stalls).
    stalled: parking_lot::Mutex<Vec<FaultPoint>>,
    unstalled: parking_lot::Condvar,
}

/// The longest an operation waits at a stalled point before it fails (`TimedOut`), so that a
/// test that forgets to clear its stall still ends.
#[cfg(any(test, feature = "failpoints"))]
const STALL_MAX: std::time::Duration = std::time::Duration::from_secs(120);

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

    /// Makes every operation at `point` wait, as on a disk that stopped answering, until
    /// [`FaultInjector::clear`] (or two minutes, after which it fails with `TimedOut`).
    pub fn stall(&self, point: FaultPoint) {
        self.stalled.lock().push(point);
    }

    /// Disarms every fault, and lets the operations waiting at stalled points go on.
    pub fn clear(&self) {
        self.armed.lock().clear();
        self.stalled.lock().clear();
        self.unstalled.notify_all();
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

    /// Waits while `point` is stalled (at most [`STALL_MAX`]).
    fn wait_if_stalled(&self, point: FaultPoint) -> io::Result<()> {
        let deadline = std::time::Instant::now() + STALL_MAX;
        let mut stalled = self.stalled.lock();
        // Bounded by the deadline.
        while stalled.contains(&point) {
            if self
                .unstalled
                .wait_until(&mut stalled, deadline)
                .timed_out()
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("injected stall at {point:?}"),
                ));
            }
        }
        Ok(())
    }

    fn check(&self, point: FaultPoint) -> io::Result<()> {
        self.wait_if_stalled(point)?;
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
    /// The faults of the injector a log was given, if any.
    #[cfg(any(test, feature = "failpoints"))]
    pub(crate) fn new(injector: Option<Arc<FaultInjector>>) -> Self {
        Faults { injector }
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

    /// Waits while `point` is stalled, and nothing else: for I/O outside the logs (the
    /// liveness probe), which a stalled disk holds up too but the logs' armed faults are not
    /// meant for.
    pub(crate) fn wait_if_stalled(&self, _point: FaultPoint) -> io::Result<()> {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            return injector.wait_if_stalled(_point);
        }
        Ok(())
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
