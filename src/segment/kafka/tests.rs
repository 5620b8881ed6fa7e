//! Unit tests of `segment/kafka.rs`.

use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType,
};

use super::*;

pub(super) const LIMITS: Limits = Limits {
    record_bytes_max: 1 << 20,
    batch_bytes_max: 4 << 20,
};

pub(super) fn kafka_record(i: i64, value: Option<Bytes>) -> KafkaRecord {
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

pub(super) fn batch(records: &[KafkaRecord], compression: Compression) -> Bytes {
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}

pub(super) fn sample(compression: Compression) -> Bytes {
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

/// A native fetch's direct conversion of a stored batch writes what its decoded records
/// encode to, for every codec, compacted or not, with null and empty keys, values and header
/// values.
#[test]
fn a_stored_batch_converts_to_replogs_records_as_its_decoded_records_encode() {
    use crate::segment::record::{encode_compacted_records, encode_records};
    for codec in CODECS {
        let b = sample(codec);
        let records = decode_records(&b, &LIMITS).unwrap();
        let (model, _) = encode_records(&records, u32::MAX).unwrap();
        assert_eq!(
            replog_payload(&b, false, &LIMITS).unwrap(),
            model,
            "{codec:?}"
        );
        // Compaction keeps every other record, as a compacted frame's payload.
        let mut i = 0;
        let kept = compact_batch(&b, false, &LIMITS, |_, _, _| {
            i += 1;
            i % 2 == 1
        })
        .unwrap()
        .unwrap();
        let kept_records = decode_records_of(&kept, true, &LIMITS).unwrap();
        assert_eq!(kept_records.len(), 3);
        let model = encode_compacted_records(&kept_records).unwrap();
        assert_eq!(
            replog_payload(&kept, true, &LIMITS).unwrap(),
            model,
            "{codec:?}"
        );
    }
    let mut empty = kafka_record(0, Some(Bytes::new()));
    empty.key = Some(Bytes::new());
    empty.headers.clear();
    let b = batch(&[empty], Compression::None);
    let (model, _) = encode_records(&decode_records(&b, &LIMITS).unwrap(), u32::MAX).unwrap();
    assert_eq!(replog_payload(&b, false, &LIMITS).unwrap(), model);
}

/// Kafka's CRC-32C of a batch, recomputed after a test changed a covered byte.
pub(super) fn reseal(b: &mut [u8]) {
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
    let cases: [(usize, &[u8], &str); 6] = [
        (ATTRIBUTES_POS + 1, &[0x10], "transactional"),
        (ATTRIBUTES_POS + 1, &[0x20], "control"),
        (ATTRIBUTES_POS + 1, &[0x05], "codec 5"),
        (LAST_OFFSET_DELTA_POS, &[0, 0, 0, 9], "last delta"),
        (RECORD_COUNT_POS, &[0, 0, 0, 0], "no records"),
        (RECORD_COUNT_POS, &[0x80, 0, 0, 0], "the least i32 records"),
    ];
    for (pos, bytes, what) in cases {
        let mut bad = good.clone();
        bad[pos..pos + bytes.len()].copy_from_slice(bytes);
        reseal(&mut bad);
        assert!(
            matches!(check(&bad), Err(CorruptKind::BadKafkaBatch(_))),
            "{what}"
        );
        if pos == RECORD_COUNT_POS {
            assert!(header_of(&bad, true).is_err(), "{what}, compacted");
        }
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
fn offset_deltas_must_be_dense() {
    let records = [kafka_record(0, None), kafka_record(2, None)];
    let b = batch(&records, Compression::None);
    // The encoder writes last_offset_delta 2 for two records: refused by the count rule.
    assert!(check(&b).is_err());
}

#[test]
fn a_batch_stamped_with_the_brokers_time_decodes_with_that_time() {
    for codec in CODECS {
        let stored = sample(codec);
        let keyless = accept_keyed(&stored, &LIMITS).unwrap().keyless;
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
    let keyless = accept_keyed(&batch(&keyed, Compression::None), &LIMITS)
        .unwrap()
        .keyless;
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

/// A batch's records read with their own timestamps: a Kafka producer's CreateTime record by
/// record, the broker's stamp where the batch says LogAppendTime, the append time for
/// replog's own records.
#[test]
fn a_batchs_records_read_with_their_own_timestamps() {
    use crate::segment::batch::Batch;
    use crate::segment::format::{EntryKind, PayloadFormat};
    use crate::types::{LogIndex, Offset, Term};
    let batch = |format, payload: Bytes| Batch {
        log_index: LogIndex(1),
        term: Term(1),
        base_offset: Offset(0),
        record_count: 5,
        timestamp_ms: 1_800_000_000_000,
        kind: EntryKind::Data,
        format,
        compacted: false,
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
        payload,
    };
    use crate::segment::batch::TimestampType::{CreateTime, LogAppendTime};
    let times = |b: &Batch| {
        let mut iter = b.records();
        let mut out = Vec::new();
        while iter.next().is_some() {
            out.push((iter.timestamp_ms(), iter.timestamp_type()));
        }
        out
    };
    for codec in CODECS {
        let created = batch(PayloadFormat::Kafka, sample(codec));
        let want: Vec<_> = (0..5)
            .map(|i| (1_700_000_000_000 + i, CreateTime))
            .collect();
        assert_eq!(times(&created), want, "{codec:?}");
        let stamped = stamp_log_append_time(&sample(codec), 1_750_000_000_000);
        let stamped = batch(PayloadFormat::Kafka, stamped);
        let want = vec![(1_750_000_000_000, LogAppendTime); 5];
        assert_eq!(times(&stamped), want, "{codec:?}");
    }
    let records: Vec<Record> = (0..5).map(|i| Record::new(format!("v{i}"))).collect();
    let (payload, _) = crate::segment::record::encode_records(&records, u32::MAX).unwrap();
    let own = batch(PayloadFormat::Replog, payload);
    assert_eq!(times(&own), vec![(1_800_000_000_000, LogAppendTime); 5]);
}
