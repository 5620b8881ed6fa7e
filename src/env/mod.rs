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
