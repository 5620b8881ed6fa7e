//! Unit tests of `segment/frame.rs`.

use super::*;
use crate::segment::record::encode_records;
use crate::segment::test_util::{LIMITS, encode, reseal, sample};

#[test]
fn zero_length_is_end_of_data() {
    assert_eq!(decode_frame(&[0u8; 64], 0, &LIMITS), Ok(None));
    assert_eq!(
        decode_frame(&[0u8; 3], 0, &LIMITS),
        Err(CorruptKind::Truncated)
    );
    assert_eq!(
        decode_frame(&[0u8; 8], 9, &LIMITS),
        Err(CorruptKind::Truncated)
    );
}

#[test]
fn length_out_of_range() {
    let (_, mut buf) = encode(&sample());
    buf[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_frame(&buf, 0, &LIMITS),
        Err(CorruptKind::LengthOutOfRange {
            len: 0xFFFF_FFFF,
            ..
        })
    ));
    buf[0..4].copy_from_slice(&39u32.to_le_bytes());
    assert!(matches!(
        decode_frame(&buf, 0, &LIMITS),
        Err(CorruptKind::LengthOutOfRange { len: 39, .. })
    ));
}

#[test]
fn truncated_frame() {
    let (_, buf) = encode(&sample());
    for cut in 4..buf.len() {
        assert_eq!(
            decode_frame(&buf[..cut], 0, &LIMITS),
            Err(CorruptKind::Truncated)
        );
    }
}

#[test]
fn checksum_mismatch_on_any_body_flip() {
    let (_, buf) = encode(&sample());
    for i in FRAME_LOG_INDEX_POS..buf.len() {
        let mut bad = buf.clone();
        bad[i] ^= 0x10;
        assert!(matches!(
            decode_frame(&bad, 0, &LIMITS),
            Err(CorruptKind::ChecksumMismatch { .. })
        ));
    }
}

#[test]
fn unknown_kind_and_reserved_bits() {
    let (_, buf) = encode(&sample());
    let mut bad = buf.clone();
    bad[FRAME_KIND_POS] = 9;
    reseal(&mut bad);
    assert_eq!(
        decode_frame(&bad, 0, &LIMITS),
        Err(CorruptKind::UnknownEntryKind(9))
    );
    let mut bad = buf.clone();
    bad[FRAME_KIND_POS] = 0;
    reseal(&mut bad);
    assert_eq!(
        decode_frame(&bad, 0, &LIMITS),
        Err(CorruptKind::UnknownEntryKind(0))
    );
    for flags in [4, 5, 0x80] {
        let mut bad = buf.clone();
        bad[FRAME_FLAGS_POS] = flags;
        reseal(&mut bad);
        assert_eq!(
            decode_frame(&bad, 0, &LIMITS),
            Err(CorruptKind::NonZeroReserved)
        );
    }
    // The compacted flag on records without offset deltas: the payload does not check out.
    let mut bad = buf.clone();
    bad[FRAME_FLAGS_POS] = FRAME_FLAG_COMPACTED;
    reseal(&mut bad);
    assert_eq!(decode_frame(&bad, 0, &LIMITS), Err(CorruptKind::BadRecord));
    // The Kafka flag on replog records: the payload is checked as a Kafka batch.
    let mut bad = buf.clone();
    bad[FRAME_FLAGS_POS] = FRAME_FLAG_KAFKA;
    reseal(&mut bad);
    assert!(matches!(
        decode_frame(&bad, 0, &LIMITS),
        Err(CorruptKind::BadKafkaBatch(_))
    ));
    let mut bad = buf;
    // A producer epoch without a producer.
    bad[FRAME_PRODUCER_EPOCH_POS + 1] = 1;
    reseal(&mut bad);
    assert_eq!(
        decode_frame(&bad, 0, &LIMITS),
        Err(CorruptKind::NonZeroReserved)
    );
}

#[test]
fn a_header_written_before_its_payload_is_the_frame_encode_frame_writes() {
    let records = sample();
    let (h, whole) = encode(&records);
    let payload = &whole[FRAME_HEADER_LEN..];
    let head = encode_frame_header(&h, payload);
    assert_eq!([&head[..], payload].concat(), whole);
    let kafka = FrameHeader {
        format: PayloadFormat::Kafka,
        producer_id: 7,
        producer_epoch: 2,
        base_sequence: 40,
        ..h
    };
    let mut raw = vec![0u8; kafka.frame_len()];
    encode_frame(&mut raw, &kafka, &Payload::Raw(payload));
    assert_eq!(
        [&encode_frame_header(&kafka, payload)[..], payload].concat(),
        raw
    );
}

#[test]
fn control_frames_carry_no_records() {
    let h = FrameHeader {
        body_len: body_len_for(3, &LIMITS).unwrap(),
        log_index: 1,
        term: 1,
        base_offset: 0,
        record_count: 0,
        kind: EntryKind::Control,
        format: PayloadFormat::Replog,
        compacted: false,
        entries: 1,
        timestamp_ms: 0,
        producer_id: 9,
        producer_epoch: 0x0102,
        base_sequence: 4,
    };
    let mut buf = vec![0u8; h.frame_len()];
    encode_frame(&mut buf, &h, &Payload::Raw(b"abc"));
    assert_eq!(decode_frame(&buf, 0, &LIMITS), Ok(Some(h)));
    assert_eq!(
        buf[FRAME_PRODUCER_EPOCH_POS..FRAME_PRODUCER_EPOCH_POS + 2],
        [0x02, 0x01],
        "the producer epoch is little-endian at bytes 38..40"
    );
    buf[FRAME_RECORD_COUNT_POS] = 1;
    reseal(&mut buf);
    assert_eq!(decode_frame(&buf, 0, &LIMITS), Err(CorruptKind::BadRecord));
}

#[test]
fn fuzz_entry_point_accepts_garbage() {
    for len in 0..200 {
        let data: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
        let _ = fuzz_decode_frame(&data);
    }
    let (_, buf) = encode(&sample());
    assert_eq!(fuzz_decode_frame(&buf), Ok(3));
}

/// A frame whose offsets would overflow made the record iterator overflow (a panic in
/// debug and fuzz builds).
#[test]
fn regression_overflowing_counters_are_corruption() {
    let (payload, n) = encode_records(&[Record::new("x")], 1024).unwrap();
    let h = FrameHeader {
        body_len: body_len_for(payload.len(), &Limits::ON_DISK).unwrap(),
        log_index: 0,
        term: 0,
        base_offset: u64::MAX,
        record_count: n,
        kind: EntryKind::Data,
        format: PayloadFormat::Replog,
        compacted: false,
        entries: 1,
        timestamp_ms: 0,
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
    };
    let mut buf = vec![0u8; h.frame_len()];
    encode_frame(&mut buf, &h, &Payload::Raw(&payload));
    assert!(fuzz_decode_frame(&buf).is_err());
}
