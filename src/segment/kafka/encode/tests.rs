//! Unit tests of `segment/kafka/encode.rs`.

use kafka_protocol::records::{Compression, RecordBatchDecoder, TimestampType};

use super::*;
use crate::segment::kafka::tests::{LIMITS, sample};
use crate::segment::kafka::{CODECS, check, decode_records};

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
        mixed(Record::new("v3").with_header(Bytes::from_static(&[0xff, 0xfe]), "not utf-8")),
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

/// A producer's records as a native client sends them: a Kafka batch the leader accepts,
/// kafka-protocol reads with the client's time as CreateTime, and replog's decoder reads back
/// as the records sent; none for a header name Kafka's layout cannot carry.
#[test]
fn a_native_producers_records_go_out_as_a_kafka_batch_the_leader_accepts() {
    let records = mixed(Record::new(vec![b'w'; 1 << 16]).with_key("big"));
    let batch = encode_produced(&records, 1_700_000_000_555).unwrap();
    let info = crate::segment::kafka::accept(&batch, &LIMITS).unwrap();
    assert_eq!(info.record_count, 4);
    assert_eq!(
        (info.producer_id, info.producer_epoch, info.base_sequence),
        (-1, -1, -1)
    );
    assert!(!info.log_append_time);
    assert_eq!(decode_records(&batch, &LIMITS).unwrap(), records);
    let mut read = batch.clone();
    let set = RecordBatchDecoder::decode(&mut read).unwrap();
    let r = &set.records;
    assert_eq!(
        r.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(r.iter().all(|r| r.timestamp_type == TimestampType::Creation
        && r.timestamp == 1_700_000_000_555
        && r.partition_leader_epoch == -1));
    // Served, it takes its offsets and epoch, and its CRC still holds.
    let mut out = BytesMut::new();
    serve(&batch, 500, 3, &mut out);
    assert_eq!(check(&out).unwrap().record_count, 4);
    let odd = vec![Record::new("v").with_header(Bytes::from_static(&[0xff]), "x")];
    assert_eq!(
        encode_produced(&odd, 0),
        None,
        "not UTF-8: replog's layout instead"
    );
}

/// Three records of every shape (a key and headers, an empty value, an empty key), then
/// `last`.
fn mixed(last: Record) -> Vec<Record> {
    vec![
        Record::new("v0")
            .with_key("k0")
            .with_header("h", "x")
            .with_header("", ""),
        Record::new(Bytes::new()),
        Record::new(vec![b'v'; 300]).with_key(Bytes::new()),
        last,
    ]
}
