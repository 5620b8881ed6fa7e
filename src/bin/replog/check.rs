//! `replog check`: its arguments, and reading every segment file of a partition directory
//! without changing anything, printing a line per file: what it holds, where its valid data
//! ends and why. Exits 1 if a segment other than the last ends early or two do not follow on.
//! Frames are judged as recovery judges them, by the format's limits (FORMAT.md §4), so a
//! file that `PartitionLog::open` reads whole is never called invalid here.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::error::CliError;

/// The arguments of `replog check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The partition directory.
    dir: PathBuf,
    /// Ignored, kept so that scripts keep working: segments are read with the format's
    /// limits, as recovery reads them.
    #[arg(long, default_value_t = 1 << 20)]
    record_bytes_max: u32,
    /// Ignored, kept so that scripts keep working: segments are read with the format's
    /// limits, as recovery reads them.
    #[arg(long, default_value_t = 4 << 20)]
    batch_bytes_max: u32,
}

/// Checks the directory: success if every segment is sound, 1 if not.
pub(crate) fn run(args: &CheckArgs) -> Result<ExitCode, CliError> {
    let CheckArgs {
        dir,
        // The limits a log is configured with bound what is written, not what is read back
        // (FORMAT.md §4): recovery reads every frame the format allows, and so does check.
        record_bytes_max: _,
        batch_bytes_max: _,
    } = args;
    let ok = check(dir).map_err(|source| CliError::Io {
        path: dir.clone(),
        source,
    })?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints a line per segment, read as recovery reads it (`inspect_segment`: the same frame
/// scan, with the format's limits); returns whether every segment but the last ends cleanly
/// where the next one begins.
fn check(dir: &Path) -> std::io::Result<bool> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let mut ok = true;
    let mut expected_next: Option<(u64, u64)> = None;
    let count = files.len();
    for (i, path) in files.iter().enumerate() {
        let data = std::fs::read(path)?;
        let r = replog::__tools::inspect_segment(&data);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match r.header {
            Err(kind) => {
                ok = false;
                println!("{name}: bad header: {kind}");
                expected_next = None;
                continue;
            }
            Ok((base, base_offset)) => {
                if let Some((idx, off)) = expected_next
                    && (idx, off) != (base, base_offset)
                {
                    ok = false;
                    println!(
                        "{name}: starts at log index {base}, offset {base_offset}; expected {idx}, {off}"
                    );
                }
                let end = match &r.stop {
                    None => "clean end".to_string(),
                    Some(kind) => {
                        if i + 1 < count {
                            ok = false;
                        }
                        format!("invalid frame: {kind}")
                    }
                };
                println!(
                    "{name}: log index {base}..{}, offsets {base_offset}..{}, {} frames, {} records, \
                     data ends at byte {} ({end})",
                    r.next.0, r.next.1, r.frames, r.records, r.end
                );
            }
        }
        expected_next = Some((r.next.0, r.next.1));
    }
    Ok(ok)
}
