//! A tour of the local partition log: append, read without copying, crash, recover.
//!
//! Run: `cargo run --release --example local_log`

use replog::{LogConfig, Offset, PartitionLog, Record};

fn main() -> replog::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = LogConfig::default();
    config.segment_bytes = 1 << 20; // small segments, so this tour rolls a few
    config.batch_bytes_max = 256 << 10; // a batch must fit in one segment
    config.record_bytes_max = 64 << 10;
    println!("opening a partition log in {}", dir.path().display());
    let log = PartitionLog::open(dir.path(), config.clone())?;

    for i in 0..3000u32 {
        let batch: Vec<Record> = (0..10)
            .map(|j| {
                Record::new(format!("email #{} to user{j}@example.com", i * 10 + j))
                    .with_key(format!("user{j}"))
                    .with_header("topic", "email.send")
            })
            .collect();
        log.append(&batch)?;
    }
    log.flush()?;
    println!(
        "appended {} records in {} segments ({} bytes); flushed",
        log.end_offset(),
        log.segment_count(),
        log.size_bytes()
    );

    let unflushed = log.append(&[Record::new("follower-message-1")])?;
    println!(
        "appended one more record at offset {} without flushing",
        unflushed.base_offset
    );

    println!("simulating a crash that tears the last record's bytes...");
    log.abandon();
    tear_last_frame(dir.path())?;

    let log = PartitionLog::open(dir.path(), config)?;
    let rec = log.recovery();
    println!(
        "recovered: log ends at offset {} ({} at byte {}: {})",
        log.end_offset(),
        rec.file.display(),
        rec.position,
        rec.reason
            .as_ref()
            .map_or("clean end".to_string(), |r| r.to_string())
    );

    let batches = log.read(Offset(29_995), 1 << 20)?;
    for (offset, record) in batches
        .iter()
        .flat_map(|b| b.records())
        .filter(|(o, _)| o.get() >= 29_995)
    {
        println!("  {offset}: {}", String::from_utf8_lossy(&record.value));
    }
    let info = log.append(&[Record::new("follower-message-1")])?;
    log.flush()?;
    println!(
        "re-appended the lost record at offset {}; durable",
        info.base_offset
    );
    Ok(())
}

/// Flips a byte in the last frame of the newest segment, as a torn write would leave it.
fn tear_last_frame(dir: &std::path::Path) -> std::io::Result<()> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let Some(last) = segments.pop() else {
        return Ok(());
    };
    let mut bytes = std::fs::read(&last)?;
    // Walk the frames (FORMAT.md §4): a u32 length, then that many bytes after the CRC.
    let (mut pos, mut last_frame) = (32usize, None);
    while let Some(len) = bytes.get(pos..pos + 4) {
        let body_len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if body_len == 0 {
            break;
        }
        last_frame = Some(pos);
        pos += 8 + body_len;
    }
    if let Some(b) = last_frame.and_then(|p| bytes.get_mut(p + 60)) {
        *b ^= 0xFF;
    }
    std::fs::write(&last, bytes)
}
