//! Unit tests of `segment/kafka.rs`.

use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType,
};

use super::*;

const LIMITS: Limits = Limits {
    record_bytes_max: 1 << 20,
    batch_bytes_max: 4 << 20,
};

fn kafka_record(i: i64, value: Option<Bytes>) -> KafkaRecord {
    let mut headers = IndexMap::new();
    headers.insert(
        StrBytes::from_static_str("h"),
        Some(Bytes::from(format!("{i}"))),
    );
    headers.insert(StrBytes::from_static_str("null"), None);
    KafkaRecord {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: 7,
        producer_epoch: 2,
        timestamp_type: TimestampType::Creation,
        offset: i,
        sequence: 40 + i32::try_from(i).unwrap(),
        timestamp: 1_700_000_000_000 + i,
        key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
        value,
        headers,
    }
}

fn batch(records: &[KafkaRecord], compression: Compression) -> Bytes {
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}

fn sample(compression: Compression) -> Bytes {
    let records: Vec<KafkaRecord> = (0..5)
        .map(|i| kafka_record(i, (i != 3).then(|| Bytes::from(vec![b'v'; 100]))))
        .collect();
    batch(&records, compression)
}

#[test]
fn every_codec_checks_and_decodes_to_the_same_records() {
    for codec in CODECS {
        let b = sample(codec);
        let info = check(&b).unwrap();
        assert_eq!(info.record_count, 5, "{codec:?}");
        assert_eq!(
            (info.producer_id, info.producer_epoch, info.base_sequence),
            (7, 2, 40)
        );
        assert_eq!(info.codec, codec as i16);
        assert_eq!(info.max_timestamp, 1_700_000_000_004);
        let records = decode_records(&b, &LIMITS).unwrap();
        assert_eq!(records.len(), 5);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.key.is_some(), i % 2 == 0, "{codec:?}");
            // A null value reads as an empty one in replog's records.
            let want = if i == 3 { 0 } else { 100 };
            assert_eq!(r.value.len(), want);
            assert_eq!(r.headers.len(), 2);
            assert_eq!(&r.headers[0].value[..], format!("{i}").as_bytes());
            assert!(r.headers[1].value.is_empty());
        }
    }
}

/// Kafka's CRC-32C of a batch, recomputed after a test changed a covered byte.
fn reseal(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
    (&mut b[CRC_POS..CRC_POS + 4]).put_u32(crc);
}

#[test]
fn every_broken_rule_is_a_typed_error() {
    let good = sample(Compression::None).to_vec();
    // Every cut.
    for n in 0..good.len() {
        assert!(check(&good[..n]).is_err(), "cut at {n}");
    }
    // Every bit flip after the two fields a broker sets is caught.
    for pos in MAGIC_POS..good.len() {
        let mut bad = good.clone();
        bad[pos] ^= 0x10;
        assert!(check(&bad).is_err(), "flip at {pos}");
    }
    // The base offset and leader epoch are not covered: a broker sets them.
    let mut moved = good.clone();
    moved[3] ^= 1;
    moved[13] ^= 1;
    assert!(check(&moved).is_ok());
    // Rules checked after the CRC.
    let cases: [(usize, &[u8], &str); 5] = [
        (ATTRIBUTES_POS + 1, &[0x10], "transactional"),
        (ATTRIBUTES_POS + 1, &[0x20], "control"),
        (ATTRIBUTES_POS + 1, &[0x05], "codec 5"),
        (LAST_OFFSET_DELTA_POS, &[0, 0, 0, 9], "last delta"),
        (RECORD_COUNT_POS, &[0, 0, 0, 0], "no records"),
    ];
    for (pos, bytes, what) in cases {
        let mut bad = good.clone();
        bad[pos..pos + bytes.len()].copy_from_slice(bytes);
        reseal(&mut bad);
        assert!(
            matches!(check(&bad), Err(CorruptKind::BadKafkaBatch(_))),
            "{what}"
        );
    }
    // Two batches in one payload: the length does not match.
    let mut two = good.clone();
    two.extend_from_slice(&good);
    assert!(matches!(check(&two), Err(CorruptKind::BadKafkaBatch(_))));
    // Records that do not decode inside a valid CRC.
    let mut bad = good.clone();
    bad[BATCH_HEADER_LEN] = 0x7f;
    reseal(&mut bad);
    assert!(check(&bad).is_ok());
    let bad = Bytes::from(bad);
    assert!(accept(&bad, &LIMITS).is_err());
    assert!(decode_records(&bad, &LIMITS).is_err());
}

/// The CRC-32C is checked where a batch enters a log ([`accept`]); a stored batch's reads check
/// its header and records, and leave damage inside them to the frame's CRC.
#[test]
fn the_crc_32c_is_checked_on_entry_not_on_reads() {
    for codec in CODECS {
        let good = sample(codec);
        assert_eq!(accept(&good, &LIMITS), check(&good), "{codec:?}");
        let mut bad = good.to_vec();
        bad[CRC_POS] ^= 0x01;
        let bad = Bytes::from(bad);
        assert!(matches!(
            accept(&bad, &LIMITS),
            Err(CorruptKind::ChecksumMismatch { .. })
        ));
        assert!(header(&bad).is_ok());
        assert_eq!(
            decode_records(&bad, &LIMITS).unwrap(),
            decode_records(&good, &LIMITS).unwrap()
        );
    }
}

#[test]
fn decoding_stops_at_the_batch_limit_whatever_the_codec() {
    // 8 MiB of zeros compresses to little; the limit is 1 MiB.
    let records: Vec<KafkaRecord> = (0..8)
        .map(|i| kafka_record(i, Some(Bytes::from(vec![0u8; 1 << 20]))))
        .collect();
    let limits = Limits {
        record_bytes_max: 2 << 20,
        batch_bytes_max: 1 << 20,
    };
    for codec in &CODECS[1..] {
        let b = batch(&records, *codec);
        assert!(b.len() < 1 << 20, "{codec:?} compresses");
        assert!(
            matches!(
                decode_records(&b, &limits),
                Err(CorruptKind::LengthOutOfRange { .. })
            ),
            "{codec:?} is refused past the limit"
        );
    }
    // A record over record_bytes_max is refused too.
    let small = Limits {
        record_bytes_max: 50,
        batch_bytes_max: 4 << 20,
    };
    assert!(matches!(
        decode_records(&sample(Compression::Gzip), &small),
        Err(CorruptKind::LengthOutOfRange { .. })
    ));
}

#[test]
fn a_record_count_the_bytes_cannot_hold_is_refused_before_any_allocation() {
    // A valid CRC around a count of i32::MAX: the decoder would reserve room for that
    // many records first.
    for codec in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let mut b = sample(codec).to_vec();
        b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4]
            .copy_from_slice(&[0x7f, 0xff, 0xff, 0xfe]);
        b[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        reseal(&mut b);
        assert!(
            decode_records(&Bytes::from(b), &LIMITS).is_err(),
            "{codec:?}"
        );
    }
}

/// Found by the `kafka_batch` fuzz target: a snappy batch whose one record claims
/// 2^31 headers made kafka-protocol's decoder reserve 4.4 GB (and abort). Our decoder
/// checks every count against the bytes left first.
#[test]
fn a_header_count_the_record_cannot_hold_is_refused_before_any_allocation() {
    let found = "AAAAAAAAAAAAAACCAAAAAAIyhDsmAAIAAAADAAABi8/laAAAAAGLz+VoAwAAAAAAAAAHAAAAAAAAAAAABIJTTkFQUFkAAAAAAQAAAAEAAAA99gEomgEAAAAEazCAAXb6AQAogq2xOrlQWQACAQEBCyAxmgEABAQEazL+WgAJWhgylgEABgYB/k0ACU0AMw==";
    let bytes = base64_decode(found);
    assert!(fuzz_kafka_batch(&bytes).is_err());
    // And by construction: one record of 4 bytes claiming i32::MAX headers.
    let mut b = sample(Compression::None).to_vec();
    b.truncate(BATCH_HEADER_LEN);
    b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&[0, 0, 0, 0]);
    b[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&[0, 0, 0, 1]);
    // length 10: attributes, timestamp delta 0, offset delta 0, null key, null value,
    // then a header count of i32::MAX (zigzag 0xFFFFFFFE as a varint).
    b.extend_from_slice(&[20, 0, 0, 0, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
    let len = (b.len() - BATCH_LENGTH_END) as u32;
    (&mut b[BATCH_LENGTH_POS..BATCH_LENGTH_END]).put_u32(len);
    reseal(&mut b);
    assert!(check(&b).is_ok());
    assert!(matches!(
        decode_records(&Bytes::from(b), &LIMITS),
        Err(CorruptKind::BadKafkaBatch(_))
    ));
}

fn base64_decode(s: &str) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = alphabet.iter().position(|a| *a == c).unwrap() as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
fn offset_deltas_must_be_dense() {
    let records = [kafka_record(0, None), kafka_record(2, None)];
    let b = batch(&records, Compression::None);
    // The encoder writes last_offset_delta 2 for two records: refused by the count rule.
    assert!(check(&b).is_err());
}

#[test]
fn a_served_batch_keeps_its_bytes_and_crc_with_new_offsets() {
    for codec in CODECS {
        let stored = sample(codec);
        let mut out = BytesMut::new();
        serve(&stored, 1_000, 9, &mut out);
        assert_eq!(out.len(), stored.len());
        assert_eq!(
            out[MAGIC_POS..],
            stored[MAGIC_POS..],
            "verbatim after the epoch"
        );
        assert!(check(&out).is_ok(), "CRC still valid");
        let mut read = out.freeze();
        let set = RecordBatchDecoder::decode(&mut read).unwrap();
        assert_eq!(set.compression, codec);
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![1_000, 1_001, 1_002, 1_003, 1_004]);
        assert!(set.records.iter().all(|r| r.partition_leader_epoch == 9));
        assert_eq!(set.records[3].value, None, "a null value stays null");
        assert_eq!(set.records[1].timestamp, 1_700_000_000_001);
    }
}

#[test]
fn replogs_records_go_out_as_a_kafka_batch_any_decoder_reads() {
    let records = vec![
        (
            40u64,
            Record::new("v0")
                .with_key("k0")
                .with_header("h", "x")
                .with_header("", ""),
        ),
        (41, Record::new(Bytes::new())),
        (42, Record::new(vec![b'v'; 300]).with_key(Bytes::new())),
        (
            43,
            Record::new("v3").with_header(Bytes::from_static(&[0xff, 0xfe]), "not utf-8"),
        ),
    ];
    let mut out = BytesMut::from(&b"before"[..]);
    encode_appended(&records, 7, 1_700_000_000_123, &mut out);
    let batch = out.split_off(6).freeze();
    assert_eq!(&out[..], b"before", "appended after what out held");
    let info = check(&batch).unwrap();
    assert_eq!(info.record_count, 4);
    // replog's own decoder.
    let decoded = decode_records(&batch, &LIMITS).unwrap();
    let mut expected: Vec<Record> = records.iter().map(|(_, r)| r.clone()).collect();
    expected[3].headers[0].name = Bytes::new();
    assert_eq!(decoded, expected);
    // kafka-protocol's.
    let mut read = batch.clone();
    let set = RecordBatchDecoder::decode(&mut read).unwrap();
    assert_eq!(set.compression, Compression::None);
    let r = &set.records;
    assert_eq!(
        r.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![40, 41, 42, 43]
    );
    assert!(
        r.iter()
            .all(|r| r.timestamp_type == TimestampType::LogAppend
                && r.timestamp == 1_700_000_000_123
                && r.partition_leader_epoch == 7
                && r.producer_id == -1)
    );
    // kafka-protocol numbers each record from the batch's base sequence, -1 here.
    assert_eq!(r[0].sequence, -1);
    assert_eq!(r[0].key.as_deref(), Some(&b"k0"[..]));
    assert_eq!(r[1].key, None);
    assert_eq!(
        r[2].key.as_deref(),
        Some(&b""[..]),
        "an empty key is not null"
    );
    assert_eq!(r[2].value.as_deref().map(<[u8]>::len), Some(300));
    assert_eq!(r[0].headers.len(), 2);
    assert_eq!(r[3].headers.keys().next().map(|k| k.as_str()), Some(""));
    // Nothing at all for no records.
    let mut none = BytesMut::new();
    encode_appended(&[], 7, 0, &mut none);
    assert!(none.is_empty());
}

/// A stored batch encoded in place is the batch its decoded records encode to.
#[test]
fn a_stored_batch_encodes_in_place_as_its_decoded_records_do() {
    let dir = tempfile::tempdir().unwrap();
    let log = crate::PartitionLog::open(dir.path(), crate::LogConfig::default()).unwrap();
    let batches: Vec<Vec<Record>> = vec![
        vec![
            Record::new("v0")
                .with_key("k0")
                .with_header("h", "x")
                .with_header("", ""),
            Record::new(Bytes::new()),
            Record::new(vec![b'v'; 300]).with_key(Bytes::new()),
            Record::new("v3").with_header(Bytes::from_static(&[0xff, 0xfe]), "not utf-8"),
        ],
        vec![Record::new(vec![7u8; 1024])],
    ];
    for records in &batches {
        log.append(records).unwrap();
    }
    let stored = log.read(crate::types::Offset(0), 1 << 20).unwrap();
    assert_eq!(stored.len(), 2);
    for b in &stored {
        let decoded: Vec<(u64, Record)> = b.records().map(|(o, r)| (o.get(), r)).collect();
        let mut model = BytesMut::new();
        encode_appended(&decoded, b.term().get(), b.timestamp_ms(), &mut model);
        let mut in_place = BytesMut::with_capacity(native_len(b));
        let room = in_place.capacity();
        encode_native(b, &mut in_place);
        assert_eq!(in_place, model);
        assert_eq!(in_place.len(), native_len(b), "the size computed first");
        assert_eq!(in_place.capacity(), room, "no reallocation");
        assert_eq!(
            check(&in_place).unwrap().record_count as usize,
            decoded.len()
        );
    }
}

#[test]
fn a_batch_stamped_with_the_brokers_time_decodes_with_that_time() {
    for codec in CODECS {
        let stored = sample(codec);
        let (_, keyless) = accept_keyed(&stored, &LIMITS).unwrap();
        assert!(keyless, "odd records of the sample have no key");
        let stamped = stamp_log_append_time(&stored, 1_800_000_000_000);
        assert!(check(&stamped).is_ok(), "CRC summed again");
        let mut read = stamped.clone();
        let set = RecordBatchDecoder::decode(&mut read).unwrap();
        // Kafka's clients take the max timestamp as every record's time in such a batch (this
        // crate's decoder keeps the deltas, so only the type is checked through it).
        assert!(
            set.records
                .iter()
                .all(|r| r.timestamp_type == TimestampType::LogAppend),
            "{codec:?}"
        );
        assert_eq!(header(&stamped).unwrap().max_timestamp, 1_800_000_000_000);
    }
    let keyed: Vec<KafkaRecord> = (0..3)
        .map(|i| KafkaRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            ..kafka_record(i, None)
        })
        .collect();
    let (_, keyless) = accept_keyed(&batch(&keyed, Compression::None), &LIMITS).unwrap();
    assert!(!keyless);
    // Too short for a header: as is.
    assert_eq!(&stamp_log_append_time(b"short", 1)[..], b"short");
}

/// The record a time lookup wants is found inside the batch, whatever the codec and however
/// the records' timestamps are ordered; a batch whose max timestamp is below one of its
/// records' is refused where it enters the log, as the lookup relies on it.
#[test]
fn the_first_record_at_a_time_is_found_inside_the_batch() {
    let base = 1_700_000_000_000;
    for codec in CODECS {
        let b = sample(codec);
        let at = |t| first_record_at(&b, false, t, &LIMITS).unwrap();
        assert_eq!(at(0), Some((0, base)), "{codec:?}");
        assert_eq!(at(base + 2), Some((2, base + 2)), "{codec:?}");
        assert_eq!(at(base + 4), Some((4, base + 4)), "{codec:?}");
        assert_eq!(at(base + 5), None, "{codec:?}");
        assert_eq!(max_timestamp(&b), Some(base + 4));
        let mut unordered: Vec<KafkaRecord> = (0..3).map(|i| kafka_record(i, None)).collect();
        for (r, t) in unordered.iter_mut().zip([10, 50, 30]) {
            r.timestamp = t;
        }
        let b = batch(&unordered, codec);
        let at = |t| first_record_at(&b, false, t, &LIMITS).unwrap();
        assert_eq!(at(10), Some((0, 10)), "{codec:?}");
        assert_eq!(at(11), Some((1, 50)), "{codec:?}");
        assert_eq!(at(31), Some((1, 50)), "{codec:?}");
        assert_eq!(at(51), None, "{codec:?}");
    }
    let mut lying = sample(Compression::None).to_vec();
    (&mut lying[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8]).put_i64(base + 3);
    reseal(&mut lying);
    assert!(matches!(
        accept(&Bytes::from(lying), &LIMITS),
        Err(CorruptKind::BadKafkaBatch(_))
    ));
}

/// The fuzz entry point on valid batches of every codec: decoded, and compacted to every
/// other record (uncompressed then) and decoded again as a compacted batch.
#[test]
fn the_fuzz_entry_compacts_what_it_decodes() {
    for codec in CODECS {
        let b = sample(codec);
        let n = decode_records(&b, &LIMITS).unwrap().len();
        assert_eq!(fuzz_kafka_batch(&b), Ok(n), "{codec:?}");
    }
}
