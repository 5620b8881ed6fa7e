//! Fault injection for the file layer, for tests (`failpoints` feature).
//!
//! A [`FaultInjector`] is attached to one log through `LogConfig::faults`, so tests that run in
//! parallel do not see each other's faults.

use std::io;
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

    /// `Err` if a fault is armed at `point`.
    pub(crate) fn check(&self, _point: FaultPoint) -> io::Result<()> {
        #[cfg(any(test, feature = "failpoints"))]
        if let Some(injector) = &self.injector {
            return injector.check(_point);
        }
        Ok(())
    }
}
