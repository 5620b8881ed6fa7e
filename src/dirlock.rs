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
//!
//! A directory whose parent this process holds (a broker's replica directories, inside the data
//! directory the broker holds) keeps no `flock` of its own, so that an idle replica costs no
//! descriptor for it: the parent's keeps other processes out. Exclusion across processes still
//! holds because every acquire takes the two locks in the same order and checks the other:
//! a nested acquire probes the directory's own `LOCK` (takes and releases it, so a process
//! holding it is seen), and a top-level acquire, holding its own `LOCK`, probes the parent's
//! (shared; a `LOCK` file there must not be held by anyone else). Whichever comes second sees
//! the first. A nested acquire creates no `LOCK`: where there is none, no other process holds
//! the directory (a holder creates the file before it locks it), and one that creates it
//! after the probe then meets the parent's lock. A broker's new replica directory so costs one
//! file fewer to create.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Directories held by a [`DirLock`] in this process, by canonical path, with whether the hold
/// has an `flock` of its own (only those cover the directories nested in them).
static HELD: Mutex<Option<HashMap<PathBuf, bool>>> = Mutex::new(None);

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
        let nested = {
            let mut held = HELD.lock();
            let held = held.get_or_insert_with(HashMap::new);
            if held.contains_key(&key) {
                return Err(Error::Locked { path: lock_path });
            }
            let nested = key.parent().and_then(|p| held.get(p)) == Some(&true);
            // Covers nested directories only once its flock is taken, below.
            held.insert(key.clone(), false);
            nested
        };
        // From here on the entry is ours; `DirLock`'s drop (or the error path) removes it.
        let mut guard = DirLock { file: None, key };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(!nested)
            .truncate(false)
            .open(&lock_path);
        let file = match file {
            // The probe finds no `LOCK`, so no holder.
            Err(e) if nested && e.kind() == std::io::ErrorKind::NotFound => return Ok(guard),
            other => other?,
        };
        lock_within(&file, &lock_path, false)?;
        if nested {
            // The probe: no other process holds it. Dropping the file releases it.
            return Ok(guard);
        }
        if let Some(parent) = guard.key.parent().map(|p| p.join("LOCK"))
            && let Ok(outer) = File::open(&parent)
        {
            lock_within(&outer, &parent, true)?;
        }
        guard.file = Some(file);
        if let Some(flocked) = HELD.lock().as_mut().and_then(|h| h.get_mut(&guard.key)) {
            *flocked = true;
        }
        Ok(guard)
    }
}

/// Takes an `flock` of `file` (shared if `shared`), retrying for [`RETRY_FOR`].
fn lock_within(file: &File, path: &Path, shared: bool) -> Result<()> {
    let deadline = Instant::now() + RETRY_FOR;
    // Bounded by the deadline.
    loop {
        let tried = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match tried {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(RETRY_EVERY);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: path.to_path_buf(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
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

    /// Another process's lock on `path`, stood in for by an open file description of its own.
    fn foreign_lock(path: &Path) -> File {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap();
        f.lock().unwrap();
        f
    }

    #[test]
    fn a_directory_in_a_held_one_keeps_no_lock_of_its_own_yet_excludes_others() {
        let root = tempfile::tempdir().unwrap();
        let child = root.path().join("p");
        std::fs::create_dir(&child).unwrap();
        let parent = DirLock::acquire(root.path()).unwrap();
        let nested = DirLock::acquire(&child).unwrap();
        assert!(
            nested.file.is_none(),
            "no descriptor held for the nested lock"
        );
        assert!(!child.join("LOCK").exists(), "and no file created for it");
        assert!(matches!(
            DirLock::acquire(&child),
            Err(Error::Locked { .. })
        ));
        // Another process taking the child on its own meets the parent's lock.
        let probe = File::open(root.path().join("LOCK")).unwrap();
        assert!(probe.try_lock_shared().is_err());
        drop(nested);
        // A nested acquire sees another process that holds the child's lock.
        let other = foreign_lock(&child.join("LOCK"));
        assert!(matches!(
            DirLock::acquire(&child),
            Err(Error::Locked { .. })
        ));
        drop(other);
        let _again = DirLock::acquire(&child).unwrap();
        drop(parent);
    }

    #[test]
    fn a_directory_whose_parent_another_process_holds_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let child = root.path().join("p");
        std::fs::create_dir(&child).unwrap();
        let other = foreign_lock(&root.path().join("LOCK"));
        assert!(matches!(
            DirLock::acquire(&child),
            Err(Error::Locked { .. })
        ));
        drop(other);
        let alone = DirLock::acquire(&child).unwrap();
        assert!(
            alone.file.is_some(),
            "no parent held here: a lock of its own"
        );
    }
}
