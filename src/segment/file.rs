//! An open segment's files: making its data durable, writing its index once it is, and
//! deleting both.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::Segment;
use super::index::IndexFile;
use crate::env::{FaultPoint, Faults};

impl Segment {
    /// Makes everything written to the segment file so far durable: an `fdatasync` of the
    /// whole file (published frames and the end mark after them alike).
    pub(crate) fn sync(&self, faults: &Faults) -> io::Result<()> {
        faults.check(FaultPoint::Sync)?;
        let token = faults.sync_token();
        // A sealed, durable segment holds no descriptor: open one for the sync.
        let held = self.file.lock().clone();
        let file = match held {
            Some(file) => file,
            None => std::sync::Arc::new(self.map.open_file()?),
        };
        file.sync_data()?;
        faults.synced(&self.path, token);
        Ok(())
    }

    /// Writes the index file (temporary name, sync, rename). The segment's bytes it describes
    /// must already be durable.
    pub(crate) fn write_index(&self, faults: &Faults) -> io::Result<()> {
        let s = self.state.read().clone();
        let file = IndexFile {
            base_log_index: self.base_log_index,
            data_len: s.data_len as u64,
            next_log_index: s.cursor.next_log_index,
            next_offset: s.cursor.next_offset,
            max_timestamp_ms: s.max_timestamp_ms,
            last_term: s.cursor.last_term,
            entries: s.entries,
        };
        let tmp = self.index_path.with_extension("index.tmp");
        let result = (|| {
            faults.check(FaultPoint::WriteIndex)?;
            let f = File::create(&tmp)?;
            f.write_all_at(&file.encode(), 0)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.index_path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Deletes the segment's index file, if it has one.
    pub(crate) fn remove_index_file(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.index_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Deletes the segment's files. Existing maps stay valid until their last user drops them.
    pub(crate) fn remove_files(&self) -> io::Result<()> {
        self.retire();
        match std::fs::remove_file(&self.index_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::remove_file(&self.path)
    }
}
