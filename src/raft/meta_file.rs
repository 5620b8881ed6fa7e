//! The `raft-meta` file: a replica's vote and Raft markers, kept in two slots written in turn
//! (layout: FORMAT.md §6.1).
//!
//! A vote is saved on the path of every election. Writing the file whole each time (a new file,
//! its sync, a rename and the directory's sync) created an inode and cost two syncs per save; a
//! thousand partitions electing at once spent more of their time in ext4's inode allocation
//! than anywhere else. So the file is created whole once, and from then on each save rewrites
//! only the slot that does not hold the newest copy, and syncs the file's data. A crash during
//! that write can tear only the slot being written: the other still holds the last save that
//! completed, which is the one whose caller went on.
//!
//! Layout, two slots of [`SLOT_LEN`] bytes (8,192 bytes in all); each slot, little-endian:
//!
//! | pos | size | field | rule |
//! |---|---|---|---|
//! | 0 | 4 | magic | `RMET` |
//! | 4 | 4 | crc | CRC-32 of bytes [8, 4096): the rest of the slot, padding included |
//! | 8 | 8 | generation | ≥ 1; one more than the save before; written to slot `generation % 2` |
//! | 16 | 4 | len | bytes of body, ≤ 4,076 |
//! | 20 | len | body | the metadata as JSON (as in the single-copy layout) |
//! | 20 + len | rest | zero | |
//!
//! The slot with the highest generation among those whose magic, length and CRC hold is the
//! file's content; a file of any other length, or with no valid slot, is read in the
//! single-copy layout of earlier builds (`crc` u32, then the JSON), which the next save replaces
//! whole.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::storage::RaftMeta;
use crate::error::{Error, Result};

/// Bytes of one slot: a page, so that writing one never rewrites the other's page.
pub(crate) const SLOT_LEN: usize = 4096;
/// Bytes of the two-slot file.
const FILE_LEN: usize = 2 * SLOT_LEN;
const MAGIC: &[u8; 4] = b"RMET";
/// Magic, CRC, generation and length.
const SLOT_HEADER_LEN: usize = 20;
/// The most bytes of JSON one slot holds.
const BODY_MAX: usize = SLOT_LEN - SLOT_HEADER_LEN;

/// The file's content: the metadata, and the generation of the slot it was read from (`None`
/// for a file that does not exist or is in the single-copy layout, which the next save writes
/// whole).
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) meta: RaftMeta,
    pub(crate) generation: Option<u64>,
}

/// Reads the file at `path`: the default metadata if it does not exist.
///
/// # Errors
///
/// `Error::Corrupt` if neither layout reads (the vote must never be guessed); I/O errors.
pub(crate) fn read(path: &Path) -> Result<Stored> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Stored {
                meta: RaftMeta::default(),
                generation: None,
            });
        }
        Err(e) => return Err(e.into()),
    };
    if bytes.len() == FILE_LEN {
        let newest = bytes
            .chunks_exact(SLOT_LEN)
            .filter_map(decode_slot)
            .max_by_key(|(generation, _)| *generation);
        if let Some((generation, meta)) = newest {
            return Ok(Stored {
                meta,
                generation: Some(generation),
            });
        }
    }
    Ok(Stored {
        meta: read_single_copy(path, &bytes)?,
        generation: None,
    })
}

/// The single-copy layout: a CRC-32 of the rest, then the JSON.
fn read_single_copy(path: &Path, bytes: &[u8]) -> Result<RaftMeta> {
    let corrupt = |kind| Error::Corrupt {
        file: path.to_path_buf(),
        position: 0,
        kind,
    };
    let (crc, body) = bytes
        .split_at_checked(4)
        .ok_or(corrupt(crate::CorruptKind::Truncated))?;
    let expected = u32::from_le_bytes(crc.try_into().unwrap_or_default());
    let actual = crc32fast::hash(body);
    if expected != actual {
        return Err(corrupt(crate::CorruptKind::ChecksumMismatch {
            expected,
            actual,
        }));
    }
    serde_json::from_slice(body).map_err(|_| corrupt(crate::CorruptKind::BadRecord))
}

/// One slot's generation and metadata, if its magic, length, CRC and JSON all hold.
fn decode_slot(slot: &[u8]) -> Option<(u64, RaftMeta)> {
    let magic = slot.get(0..4)?;
    let crc = u32::from_le_bytes(slot.get(4..8)?.try_into().ok()?);
    let generation = u64::from_le_bytes(slot.get(8..16)?.try_into().ok()?);
    let len = u32::from_le_bytes(slot.get(16..20)?.try_into().ok()?) as usize;
    if magic != MAGIC || generation == 0 || len > BODY_MAX {
        return None;
    }
    if slot.len() != SLOT_LEN || crc32fast::hash(&slot[8..]) != crc {
        return None;
    }
    let meta = serde_json::from_slice(slot.get(SLOT_HEADER_LEN..SLOT_HEADER_LEN + len)?).ok()?;
    Some((generation, meta))
}

/// One slot holding `meta` as save number `generation`.
fn encode_slot(meta: &RaftMeta, generation: u64) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(meta).map_err(io::Error::other)?;
    if body.len() > BODY_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft metadata of {} bytes does not fit a slot", body.len()),
        ));
    }
    let mut slot = vec![0u8; SLOT_LEN];
    slot[0..4].copy_from_slice(MAGIC);
    slot[8..16].copy_from_slice(&generation.to_le_bytes());
    slot[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
    slot[SLOT_HEADER_LEN..SLOT_HEADER_LEN + body.len()].copy_from_slice(&body);
    let crc = crc32fast::hash(&slot[8..]);
    slot[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(slot)
}

/// Writes the file whole, with `meta` as save number `generation` in its slot and the other
/// slot empty: a new file, synced, renamed over `path`, the directory synced. For a file that
/// does not exist yet or is in the single-copy layout.
pub(crate) fn write_whole(path: &Path, meta: &RaftMeta, generation: u64) -> io::Result<()> {
    let slot = encode_slot(meta, generation)?;
    let mut bytes = vec![0u8; FILE_LEN];
    let at = slot_position(generation);
    bytes[at..at + SLOT_LEN].copy_from_slice(&slot);
    crate::env::write_atomic(path, &bytes)
}

/// Writes `meta` as save number `generation` over the slot that holds the save before the
/// last, and syncs the file's data: the file, which [`write_whole`] made, keeps its size, so
/// neither its inode nor its directory changes.
pub(crate) fn write_in_place(path: &Path, meta: &RaftMeta, generation: u64) -> io::Result<()> {
    let slot = encode_slot(meta, generation)?;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all_at(&slot, slot_position(generation) as u64)?;
    file.sync_data()
}

/// Where save number `generation` goes.
fn slot_position(generation: u64) -> usize {
    (generation % 2) as usize * SLOT_LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::LogId;

    fn meta(index: u64) -> RaftMeta {
        RaftMeta {
            last_purged: Some(LogId::new_term_index(3, index)),
            ..RaftMeta::default()
        }
    }

    #[test]
    fn saves_alternate_slots_and_the_newest_valid_one_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-meta");
        write_whole(&path, &meta(1), 1).unwrap();
        for generation in 2..=5 {
            write_in_place(&path, &meta(generation), generation).unwrap();
            let stored = read(&path).unwrap();
            assert_eq!(
                (stored.meta, stored.generation),
                (meta(generation), Some(generation))
            );
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_LEN as u64);
        // Save 6 torn inside its slot (slot 0): save 5, the last one that completed, is read.
        write_in_place(&path, &meta(6), 6).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SLOT_HEADER_LEN + 3] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let stored = read(&path).unwrap();
        assert_eq!((stored.meta, stored.generation), (meta(5), Some(5)));
        // Its magic torn too: the same.
        bytes[0] = 0;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path).unwrap().generation, Some(5));
    }

    #[test]
    fn a_file_without_a_valid_slot_or_copy_is_corrupt_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-meta");
        let stored = read(&path).unwrap();
        assert_eq!(
            (stored.meta, stored.generation),
            (RaftMeta::default(), None)
        );
        write_whole(&path, &meta(1), 1).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        // The only slot (1) damaged in its body.
        bytes[SLOT_LEN + SLOT_HEADER_LEN + 1] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(read(&path), Err(Error::Corrupt { .. })));
        // A length past the slot: refused without reading past it.
        let mut slot = encode_slot(&meta(1), 1).unwrap();
        slot[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut bytes = vec![0u8; FILE_LEN];
        bytes[SLOT_LEN..].copy_from_slice(&slot);
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(read(&path), Err(Error::Corrupt { .. })));
        for short in [&[][..], &[1, 2][..], &[0u8; SLOT_LEN][..]] {
            std::fs::write(&path, short).unwrap();
            assert!(matches!(read(&path), Err(Error::Corrupt { .. })));
        }
    }

    /// A file an earlier build wrote (one copy: its CRC, then the JSON) is read, and the next
    /// save replaces it whole with the two-slot layout.
    #[test]
    fn the_single_copy_layout_of_earlier_builds_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft-meta");
        let body = serde_json::to_vec(&meta(7)).unwrap();
        let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        std::fs::write(&path, &bytes).unwrap();
        let stored = read(&path).unwrap();
        assert_eq!((stored.meta, stored.generation), (meta(7), None));
        write_whole(&path, &meta(8), 1).unwrap();
        assert_eq!(read(&path).unwrap().generation, Some(1));
    }
}
