//! The environment seam (as raft-engine's `env/`): what the storage, raft and broker floors
//! need from the machine, in one place below all of them: making directory changes durable,
//! writing a small file atomically, the wall clock, and the fault hooks tests inject (disk
//! faults per log, network faults between in-process brokers; `failpoints` feature).
//!
//! Nothing here depends on another module of the crate, so every floor can use it without a
//! cycle.

mod disk_faults;
mod net_faults;

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub use disk_faults::FaultPoint;
pub(crate) use disk_faults::Faults;
#[cfg(any(test, feature = "failpoints"))]
pub use disk_faults::{FaultInjector, PowerLoss};
#[cfg(any(test, feature = "failpoints"))]
pub use net_faults::NetFaults;
#[cfg(any(test, feature = "failpoints"))]
pub(crate) use net_faults::Verdict;

/// What a log or a broker takes from its surroundings besides its configuration: the fault
/// hooks a test injects (`failpoints` feature), passed in beside the configuration so that a
/// configuration stays plain data (cloned, compared, printed) and never carries a test's
/// state. `Env::default()` is the real machine: no faults.
///
/// Given to [`PartitionLog::open_in`](crate::PartitionLog::open_in),
/// [`Node::start_in`](crate::Node::start_in) and
/// [`LocalCluster::start_in`](crate::LocalCluster::start_in).
#[derive(Clone, Debug, Default)]
pub struct Env {
    #[cfg(any(test, feature = "failpoints"))]
    disk: Option<std::sync::Arc<FaultInjector>>,
    #[cfg(any(test, feature = "failpoints"))]
    net: Option<std::sync::Arc<NetFaults>>,
    /// The budget of open sealed segment maps, if not the process's.
    maps: Option<std::sync::Arc<crate::segment::lazy::MapCache>>,
}

impl Env {
    /// This environment with `faults` deciding which file operations of its logs fail and what
    /// a simulated power loss takes away. Every log opened in it shares the injector.
    #[cfg(any(test, feature = "failpoints"))]
    #[must_use]
    pub fn with_disk_faults(mut self, faults: std::sync::Arc<FaultInjector>) -> Env {
        self.disk = Some(faults);
        self
    }

    /// This environment with `faults` deciding the fate of every Raft message between this
    /// broker and the others (not of client traffic).
    #[cfg(any(test, feature = "failpoints"))]
    #[must_use]
    pub fn with_net_faults(mut self, faults: std::sync::Arc<NetFaults>) -> Env {
        self.net = Some(faults);
        self
    }

    /// This environment without its disk faults (the broker's metadata log is never
    /// impaired: it is the catalog every replica starts from).
    pub(crate) fn without_disk_faults(&self) -> Env {
        Env {
            #[cfg(any(test, feature = "failpoints"))]
            disk: None,
            #[cfg(any(test, feature = "failpoints"))]
            net: self.net.clone(),
            maps: self.maps.clone(),
        }
    }

    /// This environment with its logs' sealed segments counted against `maps` instead of the
    /// process's budget.
    #[cfg(test)]
    pub(crate) fn with_map_cache(
        mut self,
        maps: std::sync::Arc<crate::segment::lazy::MapCache>,
    ) -> Env {
        self.maps = Some(maps);
        self
    }

    /// The budget of open sealed segment maps the logs opened here count against.
    pub(crate) fn map_cache(&self) -> std::sync::Arc<crate::segment::lazy::MapCache> {
        self.maps
            .clone()
            .unwrap_or_else(crate::segment::lazy::MapCache::global)
    }

    /// The disk faults a log opened here consults (none without the feature).
    pub(crate) fn disk_faults(&self) -> Faults {
        #[cfg(any(test, feature = "failpoints"))]
        return Faults::new(self.disk.clone());
        #[cfg(not(any(test, feature = "failpoints")))]
        Faults::default()
    }

    /// The network faults between brokers, if any.
    #[cfg(any(test, feature = "failpoints"))]
    pub(crate) fn net_faults(&self) -> Option<std::sync::Arc<NetFaults>> {
        self.net.clone()
    }
}

/// Creates `dir` and its parents if missing; an error names the directory.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot create directory {}: {e}", dir.display()),
        )
    })
}

/// Syncs a directory so that creating, renaming or deleting files in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `path` with `bytes` so that a crash leaves either the old file or the new one,
/// whole: writes `{path}.tmp`, syncs it, renames it over `path`, and syncs the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A test fault that strikes a number of times: whether one of the `left` strikes is taken
/// now (one fewer left after it).
#[cfg(test)]
pub(crate) fn strikes(left: &std::sync::atomic::AtomicU32) -> bool {
    use std::sync::atomic::Ordering;
    left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-meta");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("raft-meta")]);
    }
}
