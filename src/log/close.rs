//! The end of a log's life: [`PartitionLog::close`], the same on drop, and
//! [`PartitionLog::abandon`], which leaves the files as a crash would.

use std::sync::atomic::Ordering;

use super::PartitionLog;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

impl PartitionLog {
    /// Flushes, writes the active segment's index, and releases the directory. Dropping the log
    /// does the same, ignoring errors.
    ///
    /// # Errors
    ///
    /// As [`flush`](Self::flush), and [`Error::Io`] if the index could not be written.
    pub fn close(self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.flush()?;
        let mut w = self.writer.lock();
        self.seal_all_locked(&mut w)?;
        w.active.write_index(&self.opts.faults)?;
        Ok(())
    }

    /// Drops the log without flushing or writing an index, as a crash would leave it (except
    /// that the page cache keeps what was written). For tests.
    #[doc(hidden)]
    pub fn abandon(self) {
        self.closed.store(true, Ordering::Release);
        let mut w = self.writer.lock();
        self.discard_spares(&mut w);
        if let Some(pending) = w.pending_seal.take() {
            // A crash would stop the background sync wherever it is; stop it before its index.
            pending.cancel.store(true, Ordering::Release);
            let _ = pending.thread.join();
        }
    }
}

impl Drop for PartitionLog {
    fn drop(&mut self) {
        // Never leave a thread that may still write into the directory after the lock is gone.
        if let Some(pending) = self.writer.lock().pending_seal.take() {
            let _ = pending.thread.join();
        }
        self.discard_spares(&mut self.writer.lock());
        if self.failed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.close_inner() {
            // A replica discarded (its topic deleted, its partition moved away) may be closed
            // by its last handle after its directory is gone: nothing is lost then.
            if !self.dir.exists() {
                tracing::debug!(dir = %self.dir.display(), error = %e, "closed a log whose directory was discarded");
                return;
            }
            tracing::warn!(dir = %self.dir.display(), error = %e, "closing the log failed");
        }
    }
}
