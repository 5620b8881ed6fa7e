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
//! 1. **Mapped files are never shrunk.** Recovery cuts a damaged tail *before* the file is
//!    mapped; retention and truncation unlink whole files, which leaves existing maps valid.
//!    Files are preallocated to the mapped length before mapping, so a page of the map always
//!    has a block behind it (no SIGBUS on a full disk either).
//! 2. **Bytes below the published length never change.** [`WriteHandle`] is the only way to
//!    write, there is exactly one per map, and it writes only at or above the published length.
//!    It publishes new bytes with a `Release` store after writing them; readers `Acquire`-load the
//!    length and never look past it. Truncating the log never rewrites published bytes: it
//!    stops using them (the writer moves on to a new segment file).
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

    /// Maps `len` bytes of `file` for writing, with the first `published` already written, and
    /// returns the map together with its only write handle.
    pub(crate) fn map_writable(
        file: &File,
        len: usize,
        published: usize,
        populate: bool,
    ) -> io::Result<(Arc<Self>, WriteHandle)> {
        assert!(
            published <= len && len > 0,
            "published {published} within mapped {len}"
        );
        let mut options = MmapOptions::new();
        options.len(len);
        if populate {
            options.populate();
        }
        let raw = options.map_raw(file)?;
        let map = Arc::new(MappedFile {
            raw,
            published: AtomicUsize::new(published),
        });
        Ok((Arc::clone(&map), WriteHandle { map }))
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

    /// Writes the bytes in `[start, end)` back to the file and waits for the device
    /// (`msync(MS_SYNC)`).
    pub(crate) fn sync_range(&self, start: usize, end: usize) -> io::Result<()> {
        if end <= start {
            return Ok(());
        }
        self.raw.flush_range(start, end - start)
    }

    /// The published length.
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

/// The single writer of a [`MappedFile`]. Not `Clone`: holding `&mut WriteHandle` is what
/// makes the unpublished tail exclusively ours.
#[derive(Debug)]
pub(crate) struct WriteHandle {
    map: Arc<MappedFile>,
}

impl WriteHandle {
    /// The unpublished tail of the map, `[published, len)`, for the writer to fill.
    pub(crate) fn unpublished_mut(&mut self) -> &mut [u8] {
        let start = self.map.published.load(Ordering::Relaxed);
        let len = self.map.raw.len() - start;
        let ptr = self.map.raw.as_mut_ptr().wrapping_add(start);
        #[expect(unsafe_code, reason = "writing a memory map needs a raw-pointer slice")]
        // SAFETY: `[start, start + len)` lies inside the writable map (`start <= raw.len()`, an
        // invariant of `publish`). Readers never look at bytes at or above `published` (rule 2),
        // and this handle is the only writer of this map and is borrowed mutably here, so no
        // other reference to these bytes exists while the returned slice lives.
        let tail = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        tail
    }

    /// Makes the first `len` bytes of the map visible to readers. `len` only grows.
    pub(crate) fn publish(&mut self, len: usize) {
        let old = self.map.published.load(Ordering::Relaxed);
        assert!(
            old <= len && len <= self.map.raw.len(),
            "publish {old} -> {len}"
        );
        self.map.published.store(len, Ordering::Release);
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
        let (map, mut w) = MappedFile::map_writable(&file, 4096, 0, false).unwrap();
        w.unpublished_mut()[..5].copy_from_slice(b"hello");
        assert!(map.published().is_empty());
        assert!(map.bytes(0, 5).is_none());
        w.publish(5);
        let view = map.bytes(0, 5).unwrap();
        assert_eq!(&view[..], b"hello");
        w.unpublished_mut()[..1].copy_from_slice(b"!");
        w.publish(6);
        drop(w);
        drop(map);
        // The view keeps the map alive after every other owner is gone.
        assert_eq!(&view[..], b"hello");
        map_sync_is_ok(&file);
    }

    fn map_sync_is_ok(file: &File) {
        let map = MappedFile::map_read_only(file, 4096, 6).unwrap();
        assert_eq!(map.published(), b"hello!");
        map.sync_range(0, 6).unwrap();
        assert_eq!(map.published_len(), 6);
    }
}
