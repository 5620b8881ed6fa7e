//! Sealed segments' maps, opened on first read and closed again when unused.
//!
//! A partition log maps its active segment for as long as it is open. A sealed segment is
//! different: it is read rarely (a consumer catching up, a follower being repaired, compaction),
//! and a broker hosting ten thousand replicas with several sealed segments each would otherwise
//! hold one memory map per segment, past the kernel's `vm.max_map_count` (65,530 by default).
//! So a sealed segment holds no file descriptor at all (a map stays valid after its file is
//! closed, and a sync opens the file for its duration), and its map only while it is used:
//!
//! - A [`LazyMap`] is opened on the first read that needs the segment's bytes, by its path.
//!   Opening checks that the file there is still the segment's (same device and inode) and
//!   that the segment was not removed from its log ([`LazyMap::retire`]): a retired segment is
//!   never opened again, because another file may have taken its name (compaction and
//!   truncation rename a new segment over an old one).
//! - Open sealed maps are counted in a [`MapCache`], one per process unless a test makes its
//!   own. When more than its budget are open ([`OPEN_SEALED_MAX_DEFAULT`]), opening one more
//!   closes the least recently used; a map unused for [`IDLE_CLOSE_MS`] is closed by the next
//!   open or the next sweep ([`MapCache::close_idle`], which retention runs).
//! - Closing drops the cache's reference only: a reader that holds the map (a batch whose
//!   payload shares it) keeps it alive, and the kernel unmaps it when the last one goes.
//!
//! The active segment, and a sealed one until it is synced and indexed, keep their map open
//! and are not counted: only durable segments are closed, so a sync never has to trust a
//! descriptor opened after a write it must report on.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock};

use super::mmap::MappedFile;
use crate::error::Result;

/// How many sealed segments' maps a process keeps open at most, by default: a tenth of the
/// kernel's default `vm.max_map_count` less headroom, so that ten thousand active segments,
/// the allocator's and the threads' maps and these stay far below it.
pub const OPEN_SEALED_MAX_DEFAULT: usize = 4096;

/// A sealed segment's map unused this long is closed by the next open or sweep.
pub const IDLE_CLOSE_MS: u64 = 60_000;

/// How often [`MapCache::close_idle`] sweeps at most.
const SWEEP_EVERY_MS: u64 = 1_000;

/// `MapCache::last_sweep_ms` before the first sweep.
const NEVER: u64 = u64::MAX;

/// The open maps of sealed segments, with their budget. See the module docs.
#[derive(Debug)]
pub(crate) struct MapCache {
    budget: usize,
    idle_close_ms: u64,
    /// The evictable maps that were open when last looked at (closed ones are dropped lazily).
    open: Mutex<Vec<Weak<LazyMap>>>,
    last_sweep_ms: AtomicU64,
}

impl MapCache {
    /// A cache keeping at most `budget` sealed maps (at least one), closing any unused for
    /// `idle_close_ms`.
    pub(crate) fn new(budget: usize, idle_close_ms: u64) -> Arc<MapCache> {
        Arc::new(MapCache {
            budget: budget.max(1),
            idle_close_ms,
            open: Mutex::new(Vec::new()),
            last_sweep_ms: AtomicU64::new(NEVER),
        })
    }

    /// The process's cache, with the default budget.
    pub(crate) fn global() -> Arc<MapCache> {
        static GLOBAL: OnceLock<Arc<MapCache>> = OnceLock::new();
        Arc::clone(GLOBAL.get_or_init(|| MapCache::new(OPEN_SEALED_MAX_DEFAULT, IDLE_CLOSE_MS)))
    }

    /// How many sealed maps are open.
    #[cfg(test)]
    pub(crate) fn open_count(&self) -> usize {
        self.open
            .lock()
            .iter()
            .filter(|w| w.upgrade().is_some_and(|m| m.is_open()))
            .count()
    }

    /// Counts `map`, just opened, and closes what the budget and the idle time say.
    fn admit(&self, map: &Arc<LazyMap>) {
        let mut victims = Vec::new();
        {
            let mut open = self.open.lock();
            open.push(Arc::downgrade(map));
            self.collect_victims(&mut open, Some(map), &mut victims);
        }
        // Closed outside the cache's lock: closing takes the map's own lock.
        for v in victims {
            v.close();
        }
    }

    /// Closes maps unused for the idle time; does nothing if it ran less than a second ago.
    pub(crate) fn close_idle(&self) {
        let now = now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if (last != NEVER && now.saturating_sub(last) < SWEEP_EVERY_MS)
            || self
                .last_sweep_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let mut victims = Vec::new();
        self.collect_victims(&mut self.open.lock(), None, &mut victims);
        for v in victims {
            v.close();
        }
    }

    /// Takes out of `open` the closed and dropped maps, the idle ones, and then the least
    /// recently used until the budget holds; `keep` (just opened) is never a victim.
    fn collect_victims(
        &self,
        open: &mut Vec<Weak<LazyMap>>,
        keep: Option<&Arc<LazyMap>>,
        victims: &mut Vec<Arc<LazyMap>>,
    ) {
        let now = now_ms();
        let kept = |m: &Arc<LazyMap>| keep.is_some_and(|k| Arc::ptr_eq(k, m));
        open.retain(|w| {
            let Some(m) = w.upgrade().filter(|m| m.is_open()) else {
                return false;
            };
            let idle = now.saturating_sub(m.last_used_ms.load(Ordering::Relaxed));
            if idle >= self.idle_close_ms && !kept(&m) {
                victims.push(m);
                return false;
            }
            true
        });
        // Bounded: each turn removes one entry.
        while open.len() > self.budget {
            let lru = open
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.upgrade().map(|m| (i, m)))
                .filter(|(_, m)| !kept(m))
                .min_by_key(|(_, m)| m.last_used_ms.load(Ordering::Relaxed));
            let Some((i, m)) = lru else { break };
            open.swap_remove(i);
            victims.push(m);
        }
    }
}

/// Milliseconds on a monotonic clock, for recency.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let ms = EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[derive(Debug)]
struct MapState {
    map: Option<Arc<MappedFile>>,
    /// Counted in the cache and closed when it says so: a durable sealed segment.
    evictable: bool,
    /// Removed from its log: never opened again.
    retired: bool,
}

/// A segment file's map that can be closed and opened again. See the module docs.
#[derive(Debug)]
pub(crate) struct LazyMap {
    path: PathBuf,
    /// The file's device and inode when the segment was first opened.
    id: (u64, u64),
    cache: Arc<MapCache>,
    last_used_ms: AtomicU64,
    state: RwLock<MapState>,
}

impl LazyMap {
    /// The map of `file` (at `path`), open and not evictable.
    pub(crate) fn new(
        path: PathBuf,
        file: &File,
        map: Arc<MappedFile>,
        cache: Arc<MapCache>,
    ) -> io::Result<Arc<LazyMap>> {
        let meta = file.metadata()?;
        Ok(Arc::new(LazyMap {
            path,
            id: (meta.dev(), meta.ino()),
            cache,
            last_used_ms: AtomicU64::new(now_ms()),
            state: RwLock::new(MapState {
                map: Some(map),
                evictable: false,
                retired: false,
            }),
        }))
    }

    /// The map, opening it again if it was closed.
    ///
    /// # Errors
    ///
    /// [`Error::Io`](crate::Error::Io) if the segment was removed from its log, or its file
    /// can no longer be opened, is another file, or cannot be mapped.
    pub(crate) fn get(self: &Arc<Self>) -> Result<Arc<MappedFile>> {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        if let Some(map) = &self.state.read().map {
            return Ok(Arc::clone(map));
        }
        let map = {
            let mut s = self.state.write();
            if let Some(map) = &s.map {
                return Ok(Arc::clone(map));
            }
            if s.retired {
                return Err(gone(&self.path, "was removed from its log").into());
            }
            let file = self.open_file_unchecked()?;
            let len = usize::try_from(file.metadata()?.len())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
            if len == 0 {
                return Err(gone(&self.path, "is empty").into());
            }
            // The file is the segment's (checked by inode above), sealed and durable: it is
            // never shrunk while mapped (mmap.rs, rule 1) and nothing writes to it any more.
            // The descriptor is closed when this returns; the map does not need it.
            let map = MappedFile::map_read_only(&file, len, len)?;
            s.map = Some(Arc::clone(&map));
            map
        };
        // Counted outside the map's lock: the cache may close others, taking their locks.
        self.cache.admit(self);
        Ok(map)
    }

    /// The map, if it is open, without opening it.
    pub(crate) fn current(&self) -> Option<Arc<MappedFile>> {
        self.state.read().map.clone()
    }

    /// Whether the map is open.
    pub(crate) fn is_open(&self) -> bool {
        self.state.read().map.is_some()
    }

    /// Whether anyone besides this holds the map (a reader's view of its bytes).
    pub(crate) fn in_use(&self) -> bool {
        self.state
            .read()
            .map
            .as_ref()
            .is_some_and(|m| Arc::strong_count(m) != 1 || Arc::weak_count(m) != 0)
    }

    /// Makes the map closable (the segment is sealed and durable) and counts it in the cache.
    pub(crate) fn set_evictable(self: &Arc<Self>) {
        let open = {
            let mut s = self.state.write();
            let was = std::mem::replace(&mut s.evictable, true);
            !was && s.map.is_some()
        };
        if open {
            self.cache.admit(self);
        }
    }

    /// Closes the map if it is evictable (the next read opens it again).
    pub(crate) fn close(&self) {
        let mut s = self.state.write();
        if s.evictable {
            s.map = None;
        }
    }

    /// Marks the segment as removed from its log: its map is never opened again (one that is
    /// open stays usable until closed, as a map of an unlinked file does).
    pub(crate) fn retire(&self) {
        self.state.write().retired = true;
    }

    /// Opens the segment's file for reading and writing (to sync or recycle it), after
    /// checking that the segment was not retired.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub(crate) fn open_file(&self) -> io::Result<File> {
        if self.state.read().retired {
            return Err(gone(&self.path, "was removed from its log"));
        }
        self.open_file_unchecked()
    }

    /// Opens the file at the segment's path and checks that it is the segment's.
    fn open_file_unchecked(&self) -> io::Result<File> {
        let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        let meta = file.metadata()?;
        if (meta.dev(), meta.ino()) != self.id {
            return Err(gone(&self.path, "was replaced by another file"));
        }
        Ok(file)
    }
}

fn gone(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("segment {} {what}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Env;
    use crate::types::Offset;
    use crate::{Error, LogConfig, PartitionLog, Record};

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 64,
            record_bytes_max: 256,
            batch_bytes_max: 512,
            preallocate: crate::Preallocate::Fallocate,
            ..LogConfig::default()
        }
    }

    /// A log of ten segments or more, written, closed, and opened again counting against
    /// `maps`, as a restarted broker finds it.
    fn reopened(dir: &Path, maps: &Arc<MapCache>) -> PartitionLog {
        {
            let log = PartitionLog::open(dir, config()).unwrap();
            for i in 0..120 {
                log.append(&[Record::new(format!("value-{i}"))]).unwrap();
            }
            log.flush().unwrap();
        }
        let env = Env::default().with_map_cache(Arc::clone(maps));
        let log = PartitionLog::open_in(dir, config(), &env).unwrap();
        assert!(log.segment_count() >= 10, "{}", log.segment_count());
        log
    }

    fn value_at(log: &PartitionLog, offset: u64) -> Vec<u8> {
        let batches = log.read(Offset(offset), 1).unwrap();
        let (_, record) = batches[0].records().find(|(o, _)| o.0 == offset).unwrap();
        record.value.to_vec()
    }

    /// Reads the first record of sealed segment `i`, then lets the clock move on, so that
    /// reads made one after another have distinct recency.
    fn read_segment(log: &PartitionLog, i: usize) {
        let base = log.segments()[i].base_offset;
        assert_eq!(value_at(log, base), format!("value-{base}").into_bytes());
        std::thread::sleep(std::time::Duration::from_millis(3));
    }

    fn mapped(log: &PartitionLog) -> Vec<bool> {
        log.segments().iter().map(|s| s.is_mapped()).collect()
    }

    #[test]
    fn a_read_of_a_closed_sealed_segment_opens_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(100, IDLE_CLOSE_MS);
        let log = reopened(dir.path(), &maps);
        let open = mapped(&log);
        let (active, sealed) = open.split_last().unwrap();
        assert!(*active, "the active segment stays mapped");
        assert!(
            !sealed.iter().any(|m| *m),
            "recovery leaves sealed ones closed"
        );
        assert_eq!(maps.open_count(), 0);
        assert_eq!(value_at(&log, 3), b"value-3");
        assert!(log.segments()[0].is_mapped());
        assert_eq!(maps.open_count(), 1);
        // Closed again (as the budget or the idle sweep does), it opens on the next read.
        log.segments()[0].map.close();
        assert!(!log.segments()[0].is_mapped());
        assert_eq!(value_at(&log, 2), b"value-2");
        // A batch read before the close keeps its bytes: it holds the map.
        let held = log.read(Offset(1), 1).unwrap();
        log.segments()[0].map.close();
        let (_, record) = held[0].records().next().unwrap();
        assert_eq!(&record.value[..], b"value-1");
        assert_eq!(
            values(&log),
            (0..120).map(|i| format!("value-{i}")).collect::<Vec<_>>()
        );
    }

    fn values(log: &PartitionLog) -> Vec<String> {
        log.iter(Offset(0))
            .map(|r| String::from_utf8(r.unwrap().1.value.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn over_the_budget_the_least_recently_used_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(2, IDLE_CLOSE_MS);
        let log = reopened(dir.path(), &maps);
        read_segment(&log, 0);
        read_segment(&log, 1);
        read_segment(&log, 0);
        assert_eq!(maps.open_count(), 2);
        read_segment(&log, 2);
        let open = mapped(&log);
        assert_eq!(
            &open[..4],
            [true, false, true, false],
            "segment 1 was used least lately"
        );
        assert_eq!(maps.open_count(), 2);
        // A whole read opens every segment in turn and keeps within the budget.
        assert_eq!(values(&log).len(), 120);
        assert_eq!(maps.open_count(), 2);
        let sealed_open = mapped(&log).iter().rev().skip(1).filter(|m| **m).count();
        assert_eq!(sealed_open, 2);
    }

    #[test]
    fn unused_maps_are_closed_by_the_idle_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(100, 0);
        let log = reopened(dir.path(), &maps);
        read_segment(&log, 0);
        assert!(log.segments()[0].is_mapped());
        maps.close_idle();
        assert!(!log.segments()[0].is_mapped());
        assert!(
            log.segments().last().unwrap().is_mapped(),
            "never the active one"
        );
        read_segment(&log, 1);
        // Swept less than a second ago: this sweep does nothing.
        maps.close_idle();
        assert!(log.segments()[1].is_mapped());
    }

    #[test]
    fn a_removed_segment_is_never_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(100, IDLE_CLOSE_MS);
        let log = reopened(dir.path(), &maps);
        let first = Arc::clone(&log.segments()[0]);
        let second = Arc::clone(&log.segments()[1]);
        read_segment(&log, 1);
        let kept = log.segments()[2].base_offset;
        log.purge_to(Offset(kept)).unwrap();
        assert!(
            matches!(first.mapped(), Err(Error::Io(_))),
            "closed and gone"
        );
        // A file by its name again (as a rename of a new segment would put there) is not it.
        std::fs::write(&first.path, b"another file").unwrap();
        match first.mapped() {
            Err(Error::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
            other => panic!("a removed segment opened: {other:?}"),
        }
        // One that was open when removed stays readable until closed, as before.
        assert!(second.mapped().is_ok());
        second.map.close();
        assert!(second.mapped().is_err());
        assert_eq!(value_at(&log, kept), format!("value-{kept}").into_bytes());
    }

    #[test]
    fn a_truncation_inside_a_closed_segment_reads_as_before_and_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(1, IDLE_CLOSE_MS);
        let log = reopened(dir.path(), &maps);
        // One record per entry: log indexes are offsets.
        let last_kept = log.segments()[3].base_offset + 1;
        assert!(!log.segments()[3].is_mapped());
        log.truncate_after(Some(crate::types::LogIndex(last_kept)))
            .unwrap();
        let want: Vec<String> = (0..=last_kept).map(|i| format!("value-{i}")).collect();
        assert_eq!(values(&log), want);
        log.append(&[Record::new("after")]).unwrap();
        drop(log);
        let env = Env::default().with_map_cache(Arc::clone(&maps));
        let log = PartitionLog::open_in(dir.path(), config(), &env).unwrap();
        let mut want = want;
        want.push("after".into());
        assert_eq!(values(&log), want);
    }

    #[test]
    fn a_file_replaced_under_a_closed_segment_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let maps = MapCache::new(100, IDLE_CLOSE_MS);
        let log = reopened(dir.path(), &maps);
        let seg = Arc::clone(&log.segments()[0]);
        // Same bytes, another file: whoever did this broke the directory's ownership contract.
        let copy = dir.path().join("copy");
        std::fs::copy(&seg.path, &copy).unwrap();
        std::fs::rename(&copy, &seg.path).unwrap();
        match log.read(Offset(0), 1) {
            Err(Error::Io(e)) => assert!(e.to_string().contains("replaced"), "{e}"),
            other => panic!("read a replaced file: {other:?}"),
        }
    }

    #[test]
    fn an_idle_log_in_a_held_directory_holds_one_descriptor_and_one_map() {
        let root = tempfile::tempdir().unwrap();
        let _parent = crate::dirlock::DirLock::acquire(root.path()).unwrap();
        let dir = root.path().join("p");
        let maps = MapCache::new(100, IDLE_CLOSE_MS);
        let log = reopened(&dir, &maps);
        let dir = dir.canonicalize().unwrap();
        let fds = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
            .count();
        let maps_in_dir = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.contains(dir.to_str().unwrap()))
            .count();
        assert_eq!(
            (fds, maps_in_dir),
            (1, 1),
            "the active segment's, of {} segments",
            log.segment_count()
        );
    }
}
