//! Shared by the fuzz targets and `make_corpus`.

use replog::LogConfig;

/// Largest input the `segment_open` target writes to disk (64 KiB, one segment of
/// [`small_config`]).
pub const MAX_SEGMENT_INPUT: usize = 64 << 10;

/// Name of the one segment file the `segment_open` target writes: base log index 0.
pub const SEGMENT_FILE_NAME: &str = "00000000000000000000.log";

/// The small configuration used both to make the seed corpus and to open fuzzed segments.
pub fn small_config() -> LogConfig {
    let mut cfg = LogConfig::default();
    cfg.segment_bytes = 1 << 16;
    cfg.batch_bytes_max = 1 << 14;
    cfg.record_bytes_max = 1 << 12;
    cfg.index_interval_bytes = 256;
    cfg
}
