//! New segment files: a [`SpareFile`] preallocated under a temporary name (ahead of time, or
//! a removed segment's file recycled), and [`Segment::create`], which gives one its header
//! and renames it into place durably.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{END_MARK, SEGMENT_HEADER_LEN, SegmentHeader, segment_file_name};
use super::mmap::{MappedFile, WriteHandle};
use super::{Cursor, Segment, SegmentOptions, SegmentState};
use crate::env::sync_dir;
use crate::env::{FaultPoint, Faults};
use crate::error::Result;

/// How a segment file gets its disk blocks: ahead of the writer, a step of
/// [`preallocate_step_bytes`](crate::LogConfig::preallocate_step_bytes) at a time, so that a
/// full disk fails an append with an error before any byte of it is written, and a partition
/// that holds little data takes little disk (a segment file is as long as its capacity, but
/// only its written part and at most two steps past it have blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Preallocate {
    /// `fallocate(2)` of each step: instant, but the first write to each block later converts
    /// an "unwritten" extent, which makes each sync after it slower.
    Fallocate,
    /// Write zeros over each step on a background thread one step ahead of the writer (falls
    /// back from `Fallocate` where the file system lacks it), and sync them if the log was
    /// flushed since the previous step. Costs one more write of every byte, off the append
    /// path, and makes syncs cheaper: frames overwrite blocks whose allocation is already
    /// durable, so a sync writes only their bytes. The zeros are never synced ahead of a writer
    /// that does not flush: `fdatasync` of the file would write back that writer's dirty pages
    /// too, and a log that never syncs would run at the speed of one that syncs every step.
    Zeros,
    /// `Zeros` for a log on its own while it is flushed at least once a step, `fallocate(2)`
    /// for its steps otherwise and for a broker's logs. A log on its own that syncs every
    /// batch runs at 0.94 of the disk's `pwrite`+`fdatasync` floor with zeros and 0.63 with
    /// `fallocate` (`cargo bench --bench append -- sync_growing`); one that is not flushed
    /// gains nothing from zeros (they are not synced) and would pay for their second copy of
    /// every byte, so it runs at `Fallocate`'s speed (`cargo run --release --example
    /// append_sustained`). A broker's three replicas share the disk and group commit spreads
    /// syncs over many batches: there the zeros' second write of every byte costs more than the
    /// extents' conversion (with zeros, `kcat -P` of 1 KiB lines through a follower of a
    /// `Fsync` cluster ran at half the rate; `cargo run --release --example kafka_targets`).
    #[default]
    Auto,
}

/// A preallocated file under a temporary name, waiting to become a segment: either new
/// (zeros, or `fallocate`d extents, synced), or a recycled segment that retention deleted (old
/// frames, FORMAT.md §7). Rolls use one made ahead of time on a background thread, or a
/// recycled one, so that preallocating (which writes the whole file when
/// `Preallocate::Zeros`) is off the append path.
#[derive(Debug)]
pub(crate) struct SpareFile {
    /// The file, open while it was just made; `None` for a recycled one, which waits for a
    /// roll (perhaps a long time, in a quiet log) without holding a descriptor.
    file: Option<File>,
    path: PathBuf,
    capacity: u64,
    /// Bytes at the start of the file that have blocks.
    allocated: u64,
}

impl SpareFile {
    /// Creates `dir/name`, `opts.capacity` bytes long with the first step's blocks
    /// preallocated, and synced.
    pub(crate) fn create(dir: &Path, name: &str, opts: &SegmentOptions) -> io::Result<SpareFile> {
        let allocated = opts.capacity.min(step_at(0, opts.preallocate_step.max(1)));
        let path = dir.join(name);
        let result = (|| -> io::Result<File> {
            opts.faults.check(FaultPoint::CreateSegment)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            file.set_len(opts.capacity)?;
            preallocate_from(&file, 0, allocated, opts.preallocate, &opts.faults)?;
            file.sync_all()?;
            Ok(file)
        })();
        match result {
            Ok(file) => Ok(SpareFile {
                file: Some(file),
                path,
                capacity: opts.capacity,
                allocated,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Deletes the file.
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What [`Segment::recycle`] did.
#[derive(Debug)]
pub(crate) enum Recycled {
    /// The segment's file, renamed to a spare.
    Spare(SpareFile),
    /// Someone still holds the segment or a view of its bytes, or its file is not a full
    /// segment of the current capacity: delete it instead.
    No(Arc<Segment>),
}

/// Writes `bytes` at `pos` with `RWF_DSYNC`: durable when it returns, like a write followed by
/// `fdatasync` of just that range (Linux 4.7 and later).
fn write_dsync(file: &File, bytes: &[u8], pos: u64) -> io::Result<()> {
    let written = rustix::io::pwritev2(
        file,
        &[io::IoSlice::new(bytes)],
        pos,
        rustix::io::ReadWriteFlags::DSYNC,
    )?;
    if written != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!(
                "short synchronous write: {written} of {} bytes",
                bytes.len()
            ),
        ));
    }
    Ok(())
}

impl Segment {
    /// Creates a new, empty segment at `base` durably: a preallocated file under a temporary
    /// name (`spare`, made ahead of time, or a new one) is given its header and an end mark by
    /// a write that is durable when it returns (`RWF_DSYNC`; the rest of the file is not
    /// synced), renamed into place (replacing any file of that name), and the directory synced.
    /// Returns it with its write handle.
    pub(crate) fn create(
        dir: &Path,
        base: Cursor,
        opts: &SegmentOptions,
        spare: Option<SpareFile>,
        restart: bool,
    ) -> Result<(Arc<Segment>, WriteHandle)> {
        let path = dir.join(segment_file_name(base.next_log_index));
        let spare = match spare {
            Some(s) if s.capacity == opts.capacity => s,
            other => {
                if let Some(s) = other {
                    s.discard();
                }
                let name = format!("{}.tmp", segment_file_name(base.next_log_index));
                SpareFile::create(dir, &name, opts)?
            }
        };
        let result = (|| -> io::Result<File> {
            let file = match spare.file {
                Some(file) => file,
                None => OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&spare.path)?,
            };
            let header = SegmentHeader {
                version: super::format::FORMAT_VERSION,
                base_log_index: base.next_log_index,
                base_offset: base.next_offset,
                restart,
                compacted: false,
            };
            // The header and, right after it, the end-of-data mark: a recycled file still
            // holds old frames there (FORMAT.md §7).
            let mut start = [0u8; SEGMENT_HEADER_LEN + END_MARK.len()];
            if let Some(h) = start.get_mut(..SEGMENT_HEADER_LEN) {
                h.copy_from_slice(&header.encode());
            }
            // Durable by a write that syncs only its own bytes: a recycled file may still hold
            // its old data unsynced, which a whole-file sync would write out for nothing. (The
            // file's size and blocks were made durable when it was first preallocated.)
            opts.faults.check(FaultPoint::Sync)?;
            write_dsync(&file, &start, 0)?;
            std::fs::rename(&spare.path, &path)?;
            opts.faults.check(FaultPoint::SyncDir)?;
            sync_dir(dir)?;
            Ok(file)
        })();
        let file = match result {
            Ok(file) => Arc::new(file),
            Err(e) => {
                let _ = std::fs::remove_file(&spare.path);
                return Err(e.into());
            }
        };
        let capacity = usize::try_from(opts.capacity)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let map = MappedFile::map_read_only(&file, capacity, SEGMENT_HEADER_LEN)?;
        let allocated = usize::try_from(spare.allocated).unwrap_or(capacity);
        let handle = WriteHandle::new(Arc::clone(&map), Arc::clone(&file), allocated);
        let state = SegmentState {
            data_len: SEGMENT_HEADER_LEN,
            cursor: base,
            max_timestamp_ms: 0,
            max_record_time: super::index::NO_TIME,
            entries: Vec::new(),
            last_indexed: 0,
        };
        let seg = Segment::new(
            dir,
            super::format::FORMAT_VERSION,
            base,
            file,
            map,
            opts,
            state,
        )?;
        Ok((Arc::new(seg), handle))
    }

    /// Takes a segment that was just removed from the log for reuse: if nothing else holds it
    /// (no other `Arc`, no reader's view of its map, which could otherwise see the bytes
    /// change) and its file has `capacity` bytes, deletes its index and renames the file to
    /// `to`. The caller syncs the directory.
    pub(crate) fn recycle(self: Arc<Self>, to: PathBuf, capacity: u64) -> io::Result<Recycled> {
        let seg = match Arc::try_unwrap(self) {
            Ok(seg) => seg,
            Err(shared) => return Ok(Recycled::No(shared)),
        };
        // Views of the bytes hold the map; with the segment owned here, no new one can appear
        // (and a closed map cannot be opened again: only this owner could).
        if seg.map.in_use() {
            return Ok(Recycled::No(Arc::new(seg)));
        }
        // The file itself, if nothing else holds it, or (a sealed segment) opened again.
        let held = seg.file.lock().take().map(Arc::try_unwrap);
        let file = match held {
            Some(Ok(file)) => file,
            Some(Err(_)) | None => seg.map.open_file()?,
        };
        if file.metadata()?.len() != capacity {
            return Ok(Recycled::No(Arc::new(seg)));
        }
        seg.retire();
        seg.remove_index_file()?;
        std::fs::rename(&seg.path, &to)?;
        // Its frames were written, so blocks exist at least that far.
        let allocated = seg.state.read().data_len as u64;
        drop(file);
        Ok(Recycled::Spare(SpareFile {
            file: None,
            path: to,
            capacity,
            allocated,
        }))
    }
}

/// Gives the file `handle` writes blocks at least up to byte `end`, so that writing there
/// cannot run out of disk: rounded up to a whole step. Nothing below the published length is
/// touched. On an error nothing the log holds has changed.
///
/// `synced` tells whether the writer synced (`flush`) since the last step was preallocated.
/// Zeros ([`Preallocate::Zeros`], and `Auto` while `synced`) are written a step ahead on a
/// thread of its own while the writer fills this one, so that they are not on the append path
/// (the writer waits for that thread only if it catches up with it). That thread syncs them
/// only if `synced`: its `fdatasync` of the file also writes back every dirty page the writer
/// left there, so syncing zeros ahead of a writer that never syncs made that log run at the
/// speed of a synced one. `Auto` takes `fallocate(2)` steps while the writer does not sync:
/// unsynced zeros buy nothing but a second copy of every byte. Returns whether a step was
/// preallocated (or started ahead).
pub(crate) fn reserve(
    handle: &mut WriteHandle,
    end: usize,
    opts: &SegmentOptions,
    synced: bool,
) -> io::Result<bool> {
    let mode = match opts.preallocate {
        Preallocate::Auto if synced => Preallocate::Zeros,
        Preallocate::Auto => Preallocate::Fallocate,
        mode => mode,
    };
    let step = step_at(end as u64, opts.preallocate_step.max(1));
    let capacity = handle.capacity() as u64;
    if end > handle.allocated() {
        handle.join_ahead();
    }
    let mut reserved = false;
    if end > handle.allocated() {
        let to = (end as u64)
            .div_ceil(step)
            .saturating_mul(step)
            .min(capacity);
        preallocate_from(
            handle.file(),
            handle.allocated() as u64,
            to,
            mode,
            &opts.faults,
        )?;
        handle.allocated_to(usize::try_from(to).unwrap_or(usize::MAX));
        reserved = true;
    }
    let from = handle.allocated() as u64;
    if mode == Preallocate::Zeros
        && !handle.has_ahead()
        && from < capacity
        && from.saturating_sub(end as u64) < step
    {
        let to = from.saturating_add(step).min(capacity);
        reserved |= zeros_ahead(handle, from, to, opts, synced);
    }
    Ok(reserved)
}

/// The first preallocation step of a segment: a partition that holds nothing yet takes this
/// much disk for its segment, however large its configured step.
pub(crate) const FIRST_STEP_BYTES: u64 = 32 << 10;

/// The preallocation step of a segment written to `end`: [`FIRST_STEP_BYTES`] at first,
/// doubling as the segment fills (the next power of two at or above `end`), up to `step`, the
/// configured one. A quiet partition so holds 32 KiB of disk for its segment, not a whole
/// step, and a busy one reaches its full step after a few hundred KiB.
pub(crate) fn step_at(end: u64, step: u64) -> u64 {
    end.max(1)
        .checked_next_power_of_two()
        .unwrap_or(step)
        .clamp(FIRST_STEP_BYTES.min(step), step)
}

/// Starts a thread that writes zeros over `[from, to)` of `handle`'s file, and syncs them if
/// `sync` (counted in `SegmentOptions::zeros_syncs`). Returns whether it started.
fn zeros_ahead(
    handle: &mut WriteHandle,
    from: u64,
    to: u64,
    opts: &SegmentOptions,
    sync: bool,
) -> bool {
    let faults = opts.faults.clone();
    let syncs = sync.then(|| Arc::clone(&opts.zeros_syncs));
    // Shared with the handle, which joins this thread before it lets go of the file.
    let file = handle.shared_file();
    let spawned = std::thread::Builder::new()
        .name("replog-zeros".into())
        .spawn(move || {
            preallocate_from(&file, from, to, Preallocate::Zeros, &faults)?;
            if let Some(syncs) = syncs {
                file.sync_data()?;
                syncs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(usize::try_from(to).unwrap_or(usize::MAX))
        });
    match spawned {
        Ok(thread) => {
            handle.set_ahead(thread);
            true
        }
        Err(_) => false,
    }
}

/// Gives bytes `[from, len)` of `file` allocated blocks that read as zeros.
pub(super) fn preallocate_from(
    file: &File,
    from: u64,
    len: u64,
    mode: Preallocate,
    faults: &Faults,
) -> io::Result<()> {
    faults.check(FaultPoint::Preallocate)?;
    if len <= from {
        return Ok(());
    }
    if mode == Preallocate::Fallocate {
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), from, len - from) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
    }
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK];
    let mut pos = from;
    // Bounded by len / CHUNK iterations.
    while pos < len {
        let n = usize::try_from((len - pos).min(CHUNK as u64)).unwrap_or(CHUNK);
        file.write_all_at(zeros.get(..n).unwrap_or_default(), pos)?;
        pos += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_start_small_and_double_up_to_the_configured_one() {
        let mib = 1 << 20;
        assert_eq!(step_at(0, mib), FIRST_STEP_BYTES);
        assert_eq!(step_at(1, mib), FIRST_STEP_BYTES);
        assert_eq!(step_at(FIRST_STEP_BYTES, mib), FIRST_STEP_BYTES);
        assert_eq!(step_at(FIRST_STEP_BYTES + 1, mib), 2 * FIRST_STEP_BYTES);
        assert_eq!(step_at(300 << 10, mib), 512 << 10);
        assert_eq!(step_at(40 << 10, mib), 64 << 10);
        assert_eq!(step_at(mib, mib), mib);
        assert_eq!(step_at(60 << 20, mib), mib);
        assert_eq!(step_at(u64::MAX, mib), mib);
        // A configured step below the first is used from the start; one above grows to it.
        assert_eq!(step_at(0, 4096), 4096);
        assert_eq!(step_at(5 << 20, 64 << 20), 8 << 20);
    }
}
