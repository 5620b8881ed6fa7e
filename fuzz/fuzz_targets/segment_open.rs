#![no_main]

//! Decodes a segment header and scans its frames from arbitrary bytes, then writes the same
//! bytes as the only segment of a partition directory and opens it with
//! `PartitionLog::open`, reading everything back. Any `Err` is fine; a panic is a bug.

use libfuzzer_sys::fuzz_target;
use replog::{Offset, PartitionLog};
use replog_fuzz::{MAX_SEGMENT_INPUT, SEGMENT_FILE_NAME, small_config};

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_SEGMENT_INPUT {
        return;
    }
    let _ = replog::__fuzz::fuzz_scan_segment(data);

    let dir = tempfile::tempdir().expect("create temp dir");
    std::fs::write(dir.path().join(SEGMENT_FILE_NAME), data).expect("write segment file");
    if let Ok(log) = PartitionLog::open(dir.path(), small_config()) {
        for item in log.iter(Offset(log.start_offset().get())) {
            if item.is_err() {
                break;
            }
        }
        drop(log);
    }
});
