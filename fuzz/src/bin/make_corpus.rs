//! Writes the seed corpora for the fuzz targets from valid encodings made by replog itself:
//!
//! - `corpus/segment_open/`: each `.log` segment file, whole (preallocated to
//!   `segment_bytes`), plus a copy cut after its last frame (a smaller, faster seed); and a
//!   compacted segment (frames with records removed, a gap frame), whole.
//! - `corpus/record_decode/`: each frame of the first segment on its own, and of the
//!   compacted segment.
//! - `corpus/kafka_batch/`: a Kafka record batch per codec.
//! - `corpus/kafka_request/`: a Kafka request (header and body) per API served, at its oldest
//!   and newest version served.
//!
//! Run with `cargo run --manifest-path fuzz/Cargo.toml --bin make_corpus`.

use std::fs;
use std::path::{Path, PathBuf};

use replog::{CompactionPolicy, LogIndex, PartitionLog, Record};
use replog_fuzz::small_config;

/// Size of the segment header; frames start here (see `src/segment/FORMAT.md`).
const SEGMENT_HEADER_LEN: usize = 32;
/// `body_len` and `crc` come before the body of a frame.
const FRAME_PREFIX_LEN: usize = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seg_out = corpus.join("segment_open");
    let frame_out = corpus.join("record_decode");
    fs::create_dir_all(&seg_out)?;
    fs::create_dir_all(&frame_out)?;

    let tmp = tempfile::tempdir()?;
    {
        let log = PartitionLog::open(tmp.path(), small_config())?;
        log.append(&[Record::new("v0")])?;
        log.append(&[
            Record::new("value-1").with_key("key-1"),
            Record::new(Vec::new()).with_key(Vec::new()),
            Record::new(Vec::new()),
        ])?;
        log.append(&[Record::new("v").with_key("k").with_header("h1", "x")])?;
        log.append(&[
            Record::new(Vec::new())
                .with_key("only-headers")
                .with_header("content-type", "text/plain")
                .with_header("", ""),
            Record::new("after-headers").with_header("trace", vec![0u8; 16]),
        ])?;
        log.append(&[Record::new(vec![0xAB; 300]).with_key(vec![0xCD; 40])])?;
        log.flush()?;
        // Dropping the log closes it cleanly.
    }

    let mut segments: Vec<PathBuf> = fs::read_dir(tmp.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    if segments.is_empty() {
        return Err("the log wrote no segment file".into());
    }

    let mut frame_count = 0;
    for (i, path) in segments.iter().enumerate() {
        let bytes = fs::read(path)?;
        let frames = frames(&bytes);
        let data_len = frames.last().map_or(SEGMENT_HEADER_LEN, |f| f.end);
        // Seeds must be valid encodings, or they teach the fuzzer nothing.
        replog::__fuzz::fuzz_scan_segment(&bytes)
            .map_err(|e| format!("{}: scan failed: {e:?}", path.display()))?;
        fs::write(seg_out.join(format!("segment-{i}-whole")), &bytes)?;
        fs::write(
            seg_out.join(format!("segment-{i}-data")),
            &bytes[..data_len],
        )?;
        if i == 0 {
            for (j, f) in frames.iter().enumerate() {
                replog::__fuzz::fuzz_decode_frame(&bytes[f.clone()])
                    .map_err(|e| format!("frame {j} does not decode: {e:?}"))?;
                fs::write(frame_out.join(format!("frame-{j}")), &bytes[f.clone()])?;
                frame_count += 1;
            }
        }
    }
    // A compacted segment: one-record batches over three keys, compacted, so that most of
    // them empty into a gap frame and a few keep records with their offsets.
    let compacted = tempfile::tempdir()?;
    {
        let log = PartitionLog::open(compacted.path(), small_config())?;
        for i in 0..300u32 {
            log.append(&[Record::new(format!("v{i}")).with_key(format!("k{}", i % 3))])?;
            if i % 50 == 49 {
                log.append(&[
                    Record::new("kept").with_key(format!("batch-{i}")),
                    Record::new("gone").with_key("k0"),
                ])?;
            }
        }
        log.roll()?;
        let upto = LogIndex(log.next_log_index().get() - 1);
        log.compact(&CompactionPolicy::new(upto))?;
    }
    let path = compacted.path().join("00000000000000000000.log");
    let bytes = fs::read(&path)?;
    replog::__fuzz::fuzz_scan_segment(&bytes)
        .map_err(|e| format!("{}: scan failed: {e:?}", path.display()))?;
    fs::write(seg_out.join("compacted-whole"), &bytes)?;
    for (j, f) in frames(&bytes).iter().enumerate() {
        replog::__fuzz::fuzz_decode_frame(&bytes[f.clone()])
            .map_err(|e| format!("compacted frame {j} does not decode: {e:?}"))?;
        fs::write(
            frame_out.join(format!("compacted-frame-{j}")),
            &bytes[f.clone()],
        )?;
        frame_count += 1;
    }
    println!(
        "wrote {} segment seeds to {} and {frame_count} frame seeds to {}",
        2 * segments.len(),
        seg_out.display(),
        frame_out.display()
    );
    kafka_batches(&corpus.join("kafka_batch"))?;
    kafka_requests(&corpus.join("kafka_request"))?;
    Ok(())
}

/// A default request of each API the Kafka listener serves, at the oldest and newest versions
/// it serves, as a client sends it after the length (header, then body), into `out`.
fn kafka_requests(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::Encodable;
    fn write<R: Encodable + Default>(
        out: &Path,
        api: ApiKey,
        versions: [i16; 2],
    ) -> Result<(), Box<dyn std::error::Error>> {
        for version in versions {
            let mut header = RequestHeader::default();
            header.request_api_key = api as i16;
            header.request_api_version = version;
            header.correlation_id = 1;
            let mut bytes = bytes::BytesMut::new();
            header.encode(&mut bytes, api.request_header_version(version))?;
            R::default().encode(&mut bytes, version)?;
            fs::write(out.join(format!("{api:?}-v{version}")), &bytes)?;
        }
        Ok(())
    }
    fs::create_dir_all(out)?;
    write::<ApiVersionsRequest>(out, ApiKey::ApiVersions, [0, 3])?;
    write::<MetadataRequest>(out, ApiKey::Metadata, [1, 12])?;
    write::<ProduceRequest>(out, ApiKey::Produce, [3, 11])?;
    write::<FetchRequest>(out, ApiKey::Fetch, [4, 12])?;
    write::<ListOffsetsRequest>(out, ApiKey::ListOffsets, [1, 7])?;
    write::<FindCoordinatorRequest>(out, ApiKey::FindCoordinator, [0, 3])?;
    write::<JoinGroupRequest>(out, ApiKey::JoinGroup, [0, 7])?;
    write::<OffsetCommitRequest>(out, ApiKey::OffsetCommit, [2, 8])?;
    write::<OffsetFetchRequest>(out, ApiKey::OffsetFetch, [1, 7])?;
    write::<CreateTopicsRequest>(out, ApiKey::CreateTopics, [2, 7])?;
    write::<InitProducerIdRequest>(out, ApiKey::InitProducerId, [0, 4])?;
    write::<OffsetForLeaderEpochRequest>(out, ApiKey::OffsetForLeaderEpoch, [2, 4])?;
    println!("wrote Kafka request seeds to {}", out.display());
    Ok(())
}

/// One Kafka record batch per codec (keys, a null value, headers), as a Kafka client encodes
/// it, into `out`.
fn kafka_batches(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    fs::create_dir_all(out)?;
    let records: Vec<KafkaRecord> = (0..4i64)
        .map(|i| {
            let mut headers = IndexMap::new();
            headers.insert(StrBytes::from_static_str("h"), Some(format!("{i}").into()));
            KafkaRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + i,
                key: (i % 2 == 0).then(|| format!("k{i}").into()),
                value: (i != 1).then(|| vec![b'v'; 64].into()),
                headers,
            }
        })
        .collect();
    for (name, compression) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let mut batch = bytes::BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut batch, records.iter(), &options)?;
        fs::write(out.join(name), &batch)?;
    }
    println!("wrote 5 Kafka batch seeds to {}", out.display());
    Ok(())
}

/// Byte ranges of the frames of a segment: from position 32, each `8 + body_len` bytes, up to
/// the first zero `body_len` or the end of the file.
fn frames(segment: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN;
    while let Some(len) = segment.get(pos..pos + 4) {
        let body_len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let end = pos + FRAME_PREFIX_LEN + body_len;
        if body_len == 0 || end > segment.len() {
            break;
        }
        out.push(pos..end);
        pos = end;
    }
    out
}
