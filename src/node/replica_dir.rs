//! A replica's directory on disk and its crash protocol: the topic-id marker
//! (`partition.metadata`), discarding a stale directory, the rebuild staging swap and
//! `-delete` directories.

use std::path::{Path, PathBuf};

use crate::catalog::DIR_TOPIC_BYTES_MAX;
use crate::env::{sync_dir, write_atomic};
use crate::error::{Error, Result};
use crate::raft::types::Vote;
use crate::types::PartitionId;

/// A replica's directory: `{topic}-{partition}` in the broker's data directory, the topic as
/// [`dir_topic`] writes it.
pub(super) fn partition_dir(data_dir: &Path, id: &PartitionId) -> PathBuf {
    data_dir.join(format!("{}-{}", dir_topic(&id.topic), id.partition))
}

/// A topic's name as its replicas' directory names hold it: the name itself up to
/// [`DIR_TOPIC_BYTES_MAX`] bytes (222); a longer one (Kafka's names go to 249) as its first
/// 157 bytes, `~` and the SHA-256 of the whole name in lowercase hex, 222 bytes too, so that
/// `{topic}-{partition}.{topic id}-delete` still fits a file name. `~` is in no topic name,
/// so a shortened name is never another topic's full one, and the hash keeps names that
/// share their first 157 bytes apart.
///
/// A directory's name is never read back as a topic: a broker opens the replicas its
/// catalog (the metadata log) and its configured topics name, each at the directory made
/// from the full name, and a deleted topic's directories are found by the topic id in their
/// `partition.metadata`. So the full name is kept where it already is, and nothing on disk
/// changes for names of 222 bytes or fewer.
fn dir_topic(topic: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest;
    use std::fmt::Write;
    if topic.len() <= DIR_TOPIC_BYTES_MAX {
        return topic.into();
    }
    let digest = sha2::Sha256::digest(topic.as_bytes());
    let mut short = String::with_capacity(DIR_TOPIC_BYTES_MAX);
    // Topic names are ASCII: any byte length is a character boundary; `get` keeps it safe
    // for any string all the same.
    let kept = DIR_TOPIC_BYTES_MAX - 1 - 2 * digest.len();
    short.push_str(topic.get(..kept).unwrap_or(topic));
    short.push('~');
    for byte in digest {
        let _ = write!(short, "{byte:02x}");
    }
    short.into()
}

/// The file in a created topic's partition directory that names the topic's id.
pub(super) const PARTITION_METADATA: &str = "partition.metadata";

/// Makes `dir` ready to hold a replica of created topic `topic_id`: a directory left by an
/// earlier topic of the same name (a lower id, or none recorded) is discarded first.
///
/// A directory of a *later* topic of that name (a higher id: ids only grow) is never touched:
/// after a crash the catalog is rebuilt from an older committed point and may still name the
/// earlier topic for a moment; discarding the later one's data would lose acknowledged
/// records and this replica's Raft vote. The caller retries once the catalog caught up.
pub(super) fn prepare_partition_dir(dir: &Path, topic_id: u64) -> Result<()> {
    let marker = dir.join(PARTITION_METADATA);
    match std::fs::read_to_string(&marker) {
        Ok(text) => match parse_topic_id(&text) {
            Some(found) if found == topic_id => return Ok(()),
            Some(found) if found > topic_id => {
                return Err(Error::from(std::io::Error::other(format!(
                    "{} holds topic id {found}, newer than {topic_id}: waiting for the \
                     catalog to catch up",
                    dir.display()
                ))));
            }
            found => discard_dir(dir, found.unwrap_or(0))?,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.exists() {
                discard_dir(dir, 0)?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    crate::env::create_dir_all(dir)?;
    write_partition_metadata(dir, topic_id)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Writes `partition.metadata` (the topic id) into `dir` durably.
fn write_partition_metadata(dir: &Path, topic_id: u64) -> Result<()> {
    let body = format!("version: 0\ntopic_id: {topic_id}\n");
    write_atomic(&dir.join(PARTITION_METADATA), body.as_bytes())?;
    Ok(())
}

pub(super) fn parse_topic_id(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|v| v.trim().parse().ok())
}

/// Renames `dir` to `{dir}.{topic_id}-delete` (so that its name is free at once), then
/// removes it. A crash in between leaves the renamed directory for the next start.
pub(super) fn discard_dir(dir: &Path, topic_id: u64) -> Result<()> {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let doomed = dir.with_file_name(format!("{name}.{topic_id}-delete"));
    // Left by an earlier discard that crashed between its rename and its removal.
    if doomed.exists() {
        std::fs::remove_dir_all(&doomed)?;
    }
    match std::fs::rename(dir, &doomed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    std::fs::remove_dir_all(&doomed)?;
    Ok(())
}

/// Replaces the replica directory `dir` with an empty one that holds only its topic id and
/// `vote`. The new directory is made complete beside the old one first (`{dir}.rebuild`), then
/// the old one is discarded and the new one renamed into place; a crash in between leaves
/// either the old directory (the rebuild never happened) or only the new one, which
/// [`remove_deleted_dirs`] moves into place at the next start.
pub(super) fn replace_with_empty_replica(
    dir: &Path,
    topic_id: u64,
    vote: Option<Vote>,
    rebuilt_below: Option<u64>,
) -> Result<()> {
    let staging = rebuild_staging(dir);
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    crate::env::create_dir_all(&staging)?;
    write_partition_metadata(&staging, topic_id)?;
    crate::raft::storage::write_meta(
        &staging.join(crate::raft::storage::RAFT_META),
        &crate::raft::storage::RaftMeta {
            vote,
            rebuilt_below,
            ..Default::default()
        },
    )?;
    discard_dir(dir, topic_id)?;
    std::fs::rename(&staging, dir)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Where a replica directory's replacement is built.
fn rebuild_staging(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(REBUILD_SUFFIX);
    dir.with_file_name(name)
}

/// Suffix of a replica directory's replacement under construction.
const REBUILD_SUFFIX: &str = ".rebuild";

/// Creates the broker's data directory if needed, takes it for the broker (a `LOCK` of its own
/// keeps other processes out of it and of every replica directory in it, which then hold no
/// descriptor for their locks: `dirlock.rs`), and finishes what a crash interrupted there
/// ([`remove_deleted_dirs`]). The broker holds the lock until it is dropped.
pub(super) fn open_data_dir(data_dir: &Path) -> Result<crate::dirlock::DirLock> {
    crate::env::create_dir_all(data_dir)?;
    let lock = crate::dirlock::DirLock::acquire(data_dir)?;
    remove_deleted_dirs(data_dir);
    Ok(lock)
}

/// Finishes what a crash interrupted in the data directory: removes directories of deleted
/// replicas, and completes replica rebuilds (a finished replacement whose old directory is
/// gone is moved into place; one whose old directory is still there was never used).
pub(super) fn remove_deleted_dirs(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !path.is_dir() {
            continue;
        }
        let done = if name.ends_with("-delete") {
            std::fs::remove_dir_all(&path)
        } else if let Some(target) = name.strip_suffix(REBUILD_SUFFIX) {
            let target = path.with_file_name(target);
            if target.exists() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::rename(&path, &target)
                    .and_then(|()| sync_dir(data_dir).map_err(std::io::Error::other))
            }
        } else {
            Ok(())
        };
        if let Err(e) = done {
            tracing::warn!(path = %path.display(), error = %e, "could not finish an interrupted replica change");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names of up to 222 bytes are their own directory names; longer ones (to Kafka's 249)
    /// are shortened to 222 bytes, alike every time, apart for names alike in their first 157
    /// bytes, and their replicas' deletion names still fit a file name.
    #[test]
    fn long_topic_names_make_directory_names_that_fit() {
        let data = tempfile::tempdir().unwrap();
        let plain = "t".repeat(DIR_TOPIC_BYTES_MAX);
        assert_eq!(
            partition_dir(data.path(), &PartitionId::new(plain.clone(), 7)),
            data.path().join(format!("{plain}-7"))
        );
        let long = |last: char| format!("{}{last}", "t".repeat(248));
        let (a, b) = (long('a'), long('b'));
        let short = dir_topic(&a);
        assert_eq!(short.len(), DIR_TOPIC_BYTES_MAX);
        assert!(short.starts_with(&"t".repeat(157)) && short.as_bytes()[157] == b'~');
        assert_eq!(short, dir_topic(&a), "stable");
        assert_ne!(short, dir_topic(&b));
        let dir = partition_dir(data.path(), &PartitionId::new(a.clone(), 9999));
        prepare_partition_dir(&dir, u64::MAX).unwrap();
        discard_dir(&dir, u64::MAX).unwrap();
        assert!(!dir.exists());
        let deleted = format!("{short}-9999.{}-delete", u64::MAX);
        assert!(deleted.len() <= crate::catalog::FILE_NAME_BYTES_MAX);
        std::fs::create_dir(data.path().join(&deleted)).unwrap();
    }

    /// After a crash the catalog can name an earlier topic of a name for a moment: the
    /// directory of the later topic is never discarded for it; an earlier one, or one without
    /// a marker, is.
    #[test]
    fn a_partition_directory_of_a_later_topic_is_never_discarded() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("t-0");
        prepare_partition_dir(&dir, 9).unwrap();
        std::fs::write(dir.join("data"), b"acknowledged").unwrap();
        assert!(
            prepare_partition_dir(&dir, 5).is_err(),
            "id 9 is newer than 5"
        );
        assert_eq!(std::fs::read(dir.join("data")).unwrap(), b"acknowledged");
        prepare_partition_dir(&dir, 9).unwrap();
        assert!(dir.join("data").exists(), "its own id: kept");
        prepare_partition_dir(&dir, 12).unwrap();
        assert!(!dir.join("data").exists(), "an earlier topic's data goes");
        // A directory without a marker, and a leftover `-delete` of the same name.
        let bare = data.path().join("u-0");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::create_dir_all(data.path().join("u-0.0-delete")).unwrap();
        std::fs::write(bare.join("stray"), b"x").unwrap();
        prepare_partition_dir(&bare, 3).unwrap();
        assert!(!bare.join("stray").exists());
        let names: Vec<String> = std::fs::read_dir(data.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with("-delete")), "{names:?}");
    }

    /// A rebuilt replica directory holds its topic id and vote and nothing else; a rebuild a
    /// crash interrupted is finished (or dropped, if it never replaced the old directory) at
    /// the next start.
    #[test]
    fn a_rebuilt_replica_keeps_only_its_vote_and_an_interrupted_rebuild_is_finished() {
        use crate::raft::storage::{RAFT_META, RaftMeta, read_meta, write_meta};
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("t-0");
        prepare_partition_dir(&dir, 7).unwrap();
        let vote = Vote::new(4, 2);
        let meta = RaftMeta {
            vote: Some(vote),
            last_purged: Some(openraft::LogId::new_term_index(3, 10)),
            committed: Some(openraft::LogId::new_term_index(4, 40)),
            rebuilt_below: None,
        };
        write_meta(&dir.join(RAFT_META), &meta).unwrap();
        std::fs::write(dir.join("00000000000000000011.log"), b"entries").unwrap();
        replace_with_empty_replica(&dir, 7, Some(vote), Some(40)).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [PARTITION_METADATA, RAFT_META]);
        let rebuilt = read_meta(&dir.join(RAFT_META)).unwrap();
        assert_eq!(
            rebuilt,
            RaftMeta {
                vote: Some(vote),
                rebuilt_below: Some(40),
                ..Default::default()
            }
        );
        assert_eq!(
            parse_topic_id(&std::fs::read_to_string(dir.join(PARTITION_METADATA)).unwrap()),
            Some(7)
        );
        assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 1);

        // Interrupted before the old directory went: the replacement is dropped.
        let staging = rebuild_staging(&dir);
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(dir.join("kept"), b"x").unwrap();
        remove_deleted_dirs(data.path());
        assert!(!staging.exists() && dir.join("kept").exists());
        // Interrupted after it went: the replacement moves into place.
        std::fs::rename(&dir, data.path().join("t-0.7-delete")).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("new"), b"y").unwrap();
        remove_deleted_dirs(data.path());
        assert!(!staging.exists() && dir.join("new").exists());
        assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 1);
    }
}
