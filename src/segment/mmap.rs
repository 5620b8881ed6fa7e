//! The memory map of a segment file: the only `unsafe` code in replog.
//!
//! # The contract
//!
//! A mapped file is only sound to read while nobody shrinks it or changes bytes that a reader
//! can see. replog keeps that contract itself, as follows, and asks one thing of its embedder:
//! **nothing outside replog modifies files in an open partition directory** (the `LOCK` file
//! keeps other replog instances out; an outside process that truncates a segment can make the
//! process crash with SIGBUS).
//!
//! What the code guarantees, each relied on by a `SAFETY` comment below:
//!
//! 1. **Mapped files are never shrunk.** Recovery cuts a damaged tail only after dropping the
//!    read-only map it scanned through, and before it maps the file again; retention and
//!    truncation unlink whole files, which leaves existing maps valid, and retention renames a
//!    file for reuse only once no map of it is left (`Segment::recycle`).
//!    A sealed segment's map is closed when unused and opened again on the next read
//!    (`lazy.rs`): only while the segment is still in its log (a removed one is never opened
//!    again, since another file may take its name) and only if the file at its path is the
//!    same one (device and inode), which, sealed, is never shrunk or written again.
//!    A file is as long as its map from the moment it is mapped (its tail may be a hole: reading
//!    a hole through a map gives zeros, never a signal). Its blocks are allocated ahead of the
//!    writer, a step at a time (`LogConfig::preallocate_step_bytes`), and every write goes
//!    through `pwrite`, so a full disk is an error returned to the writer, never a SIGBUS.
//! 2. **Bytes below the published length never change.** [`WriteHandle`] is the only writer,
//!    there is exactly one per map, and it writes (through the file descriptor, into the page
//!    cache the map shows) only at or above the published length. It publishes new bytes with a
//!    `Release` store after writing them; readers `Acquire`-load the length and never look past
//!    it. Maps are read-only, so nothing can store through them. Truncating the log never
//!    rewrites published bytes: it stops using them (the writer moves on to a new segment file).
//! 3. **No slice outlives its map.** Slices borrow the [`MappedFile`]; [`Bytes`] views own an
//!    `Arc` of it.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

/// A mapped segment file with a published length.
#[derive(Debug)]
pub(crate) struct MappedFile {
    raw: MmapRaw,
    /// Bytes [0, published) are written and immutable. Only grows.
    published: AtomicUsize,
}

impl MappedFile {
    /// Maps `len` bytes of `file` read-only, with the first `published` readable.
    ///
    /// The caller guarantees `file` is at least `len` bytes long and will not be shrunk (module
    /// docs, rule 1); `published <= len`.
    pub(crate) fn map_read_only(
        file: &File,
        len: usize,
        published: usize,
    ) -> io::Result<Arc<Self>> {
        assert!(
            published <= len && len > 0,
            "published {published} within mapped {len}"
        );
        let raw = MmapOptions::new().len(len).map_raw_read_only(file)?;
        Ok(Arc::new(MappedFile {
            raw,
            published: AtomicUsize::new(published),
        }))
    }

    /// The published bytes.
    pub(crate) fn published(&self) -> &[u8] {
        let len = self.published.load(Ordering::Acquire);
        debug_assert!(len <= self.raw.len());
        #[expect(unsafe_code, reason = "reading a memory map needs a raw-pointer slice")]
        // SAFETY: `raw` maps at least `len` bytes (`published` never exceeds the mapped length,
        // asserted in the constructors and in `WriteHandle::publish`), the file behind it is never
        // shrunk while mapped (module docs, rule 1), and bytes below `published` are never
        // written again (rule 2), so a shared slice of them is valid for as long as `self` lives.
        let bytes = unsafe { std::slice::from_raw_parts(self.raw.as_ptr(), len) };
        bytes
    }

    /// A zero-copy [`Bytes`] of published bytes `[start, end)`, which keeps the map alive.
    /// Returns `None` if the range is not published.
    pub(crate) fn bytes(self: &Arc<Self>, start: usize, end: usize) -> Option<Bytes> {
        if start > end || end > self.published.load(Ordering::Acquire) {
            return None;
        }
        Some(Bytes::from_owner(MapSlice {
            map: Arc::clone(self),
            start,
            end,
        }))
    }

    /// The published length.
    #[cfg(test)]
    pub(crate) fn published_len(&self) -> usize {
        self.published.load(Ordering::Acquire)
    }
}

/// The owner behind a zero-copy [`Bytes`] view of a map.
struct MapSlice {
    map: Arc<MappedFile>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        // The range was checked against the published length when the view was made, and the
        // published length only grows.
        self.map
            .published()
            .get(self.start..self.end)
            .unwrap_or_default()
    }
}

/// The single writer of a [`MappedFile`]. Not `Clone`: there is one per map, and it only
/// writes at or above the published length.
///
/// Writes go through the file descriptor (`pwrite`), not through the map: the kernel copies
/// them into the same page cache the map shows, so readers see them once published. Writing
/// this way avoids a page fault per newly touched page and keeps the map read-only, so no
/// stray store through it can ever change a segment.
#[derive(Debug)]
pub(crate) struct WriteHandle {
    map: Arc<MappedFile>,
    /// The segment file, shared with its segment (one descriptor for both).
    file: Arc<File>,
    /// Bytes `[0, allocated)` of the file have disk blocks: given by a preallocation that
    /// returned, or written. Never below the published length.
    allocated: usize,
    /// Blocks being preallocated above `allocated` on a thread of their own, which returns
    /// how far they then reach. Joined before the handle goes away, so that nothing writes to
    /// the file after its writer is done with it (it may be recycled as another segment).
    ahead: Option<std::thread::JoinHandle<io::Result<usize>>>,
}

impl Drop for WriteHandle {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            let _ = ahead.join();
        }
    }
}

impl WriteHandle {
    /// The writer for `map`, writing through `file` (the same file, which must not be written
    /// by anyone else), whose first `allocated` bytes have disk blocks.
    pub(crate) fn new(map: Arc<MappedFile>, file: Arc<File>, allocated: usize) -> Self {
        let allocated = allocated.max(map.published.load(Ordering::Relaxed));
        WriteHandle {
            map,
            file,
            allocated,
            ahead: None,
        }
    }

    /// Hands the handle the thread preallocating blocks above [`allocated`](Self::allocated)
    /// (at most one at a time), so that it is joined before the handle goes away.
    pub(crate) fn set_ahead(&mut self, thread: std::thread::JoinHandle<io::Result<usize>>) {
        debug_assert!(self.ahead.is_none(), "one preallocation ahead at a time");
        self.ahead = Some(thread);
    }

    /// Whether a preallocation ahead is under way.
    pub(crate) fn has_ahead(&self) -> bool {
        self.ahead.is_some()
    }

    /// Waits for the preallocation ahead, if any, and counts the blocks it gave.
    pub(crate) fn join_ahead(&mut self) {
        if let Some(ahead) = self.ahead.take()
            && let Ok(Ok(to)) = ahead.join()
        {
            self.allocated_to(to);
        }
    }

    /// Bytes at the start of the file that have disk blocks.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    /// The mapped length, which is the file's length.
    pub(crate) fn capacity(&self) -> usize {
        self.map.raw.len()
    }

    /// Records that blocks `[allocated, to)` were given to the file through
    /// [`file`](Self::file), which wrote nothing below the published length.
    pub(crate) fn allocated_to(&mut self, to: usize) {
        self.allocated = self.allocated.max(to.min(self.map.raw.len()));
    }

    /// The file, for preallocating blocks above [`allocated`](Self::allocated), never for
    /// writing bytes a reader could see.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The file, shared, for the thread preallocating blocks ahead ([`set_ahead`](Self::set_ahead)).
    pub(crate) fn shared_file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Bytes left between the published length and the end of the map.
    pub(crate) fn free_len(&self) -> usize {
        self.map.raw.len() - self.map.published.load(Ordering::Relaxed)
    }

    /// Writes `bytes` right after the published bytes and then publishes all but the last
    /// `trailer` of them, returning the position they were written at. `bytes` must fit in
    /// [`free_len`](Self::free_len). The trailer (the log's end-of-data mark) stays
    /// unpublished, so the next append writes over it.
    pub(crate) fn append(&mut self, bytes: &[u8], trailer: usize) -> io::Result<usize> {
        self.append_parts([bytes, &[], &[]], trailer)
    }

    /// [`append`](Self::append) of the concatenation of `parts`, written with one `pwritev`
    /// (more only after a short write) instead of being copied together first.
    pub(crate) fn append_parts(&mut self, parts: [&[u8]; 3], trailer: usize) -> io::Result<usize> {
        let pos = self.map.published.load(Ordering::Relaxed);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let end = pos + len;
        assert!(
            end <= self.map.raw.len() && trailer <= len,
            "append of {len} at {pos} past the map"
        );
        let mut slices = parts.map(io::IoSlice::new);
        let mut slices = &mut slices[..];
        let mut at = pos as u64;
        // Bounded by `len`: each turn writes at least one byte or returns.
        while !slices.is_empty() {
            match rustix::io::pwritev(&*self.file, slices, at) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    at += n as u64;
                    io::IoSlice::advance_slices(&mut slices, n);
                }
                Err(e) if e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.allocated = self.allocated.max(end);
        // Release: a reader that sees the new length sees the bytes written above.
        self.map.published.store(end - trailer, Ordering::Release);
        Ok(pos)
    }

    /// The map this handle writes.
    pub(crate) fn map(&self) -> &Arc<MappedFile> {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_bytes_become_visible_only_when_published() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        file.set_len(4096).unwrap();
        let map = MappedFile::map_read_only(&file, 4096, 0).unwrap();
        let mut w = WriteHandle::new(Arc::clone(&map), Arc::new(file), 0);
        assert!(map.published().is_empty());
        assert!(map.bytes(0, 5).is_none());
        assert_eq!(w.append(b"hello\0\0", 2).unwrap(), 0);
        assert!(map.bytes(0, 6).is_none(), "the trailer is not published");
        let view = map.bytes(0, 5).unwrap();
        assert_eq!(&view[..], b"hello");
        assert_eq!(w.append(b"!", 0).unwrap(), 5);
        assert_eq!(w.free_len(), 4096 - 6);
        assert_eq!(map.published_len(), 6);
        drop(w);
        drop(map);
        // The view keeps the map alive after every other owner is gone.
        assert_eq!(&view[..], b"hello");
    }
}
