//! Exclusive ownership of a partition directory.
//!
//! Two layers, because neither alone is enough:
//!
//! - An in-process table of held directories answers a second open in the same process at once.
//! - An `flock` on `LOCK` keeps other processes out.
//!
//! An `flock` belongs to the open file description, and a child process that is being spawned
//! holds a copy of every descriptor until its `exec` closes them. So right after this process
//! releases a directory, a sibling thread's `Command::spawn` can keep the lock alive for a
//! moment. When the table says no one in this process holds the directory, `acquire` therefore
//! retries a refused `flock` for a short, bounded time before it reports [`Error::Locked`].

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Directories held by a [`DirLock`] in this process, by canonical path.
static HELD: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// How long a refused `flock` is retried when no one in this process holds the directory.
const RETRY_FOR: Duration = Duration::from_millis(500);
const RETRY_EVERY: Duration = Duration::from_millis(2);

/// Held while a log owns its directory; dropping it releases the directory.
#[derive(Debug)]
pub(crate) struct DirLock {
    file: Option<File>,
    key: PathBuf,
}

impl DirLock {
    /// Takes `dir` (which must exist) for this process, or fails with [`Error::Locked`].
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock> {
        let key = dir.canonicalize()?;
        let lock_path = dir.join("LOCK");
        if !HELD
            .lock()
            .get_or_insert_with(HashSet::new)
            .insert(key.clone())
        {
            return Err(Error::Locked { path: lock_path });
        }
        // From here on the entry is ours; `DirLock`'s drop (or the error path) removes it.
        let mut guard = DirLock { file: None, key };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)?;
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(RETRY_EVERY);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::Locked { path: lock_path });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
            }
        }
        guard.file = Some(file);
        Ok(guard)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Release the flock before the table entry, so that an open that finds the entry gone
        // also finds the flock free.
        drop(self.file.take());
        if let Some(held) = HELD.lock().as_mut() {
            held.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_acquire_in_the_same_process_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        let started = Instant::now();
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(Error::Locked { .. })
        ));
        assert!(
            started.elapsed() < RETRY_FOR,
            "answered from the table, not by retrying"
        );
        drop(first);
        let _again = DirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn another_holder_of_the_flock_is_waited_for_then_reported() {
        let dir = tempfile::tempdir().unwrap();
        // A second open file description stands in for another process (or a child that has
        // not reached `exec` yet).
        let other = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.path().join("LOCK"))
            .unwrap();
        other.lock().unwrap();
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(Error::Locked { .. })
        ));
        // A holder that lets go within the retry window is waited for.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(other);
        });
        let _ours = DirLock::acquire(dir.path()).unwrap();
        release.join().unwrap();
    }

    #[test]
    fn the_same_directory_through_another_path_is_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("p")).unwrap();
        let _first = DirLock::acquire(&dir.path().join("p")).unwrap();
        assert!(matches!(
            DirLock::acquire(&dir.path().join("p/../p")),
            Err(Error::Locked { .. })
        ));
    }
}
