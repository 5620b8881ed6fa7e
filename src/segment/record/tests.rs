//! Unit tests of `segment/record.rs`.

use super::*;
use crate::segment::format::{FRAME_HEADER_LEN, FRAME_RECORD_COUNT_POS};
use crate::segment::frame::{FrameHeader, Payload, body_len_for, decode_frame, encode_frame};
use crate::segment::test_util::{LIMITS, encode, header_for, reseal, sample};

#[test]
fn bad_record_layout() {
    let (_, buf) = encode(&sample());
    // Count says one more record than the payload holds.
    let mut bad = buf.clone();
    bad[FRAME_RECORD_COUNT_POS] = 4;
    reseal(&mut bad);
    assert_eq!(decode_frame(&bad, 0, &LIMITS), Err(CorruptKind::BadRecord));
    // Count says fewer: bytes left over.
    let mut bad = buf.clone();
    bad[FRAME_RECORD_COUNT_POS] = 2;
    reseal(&mut bad);
    assert_eq!(decode_frame(&bad, 0, &LIMITS), Err(CorruptKind::BadRecord));
    // A value length running past the payload.
    let mut bad = buf.clone();
    let vpos = FRAME_HEADER_LEN + RECORD_VALUE_LEN_POS;
    bad[vpos..vpos + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut bad);
    assert!(decode_frame(&bad, 0, &LIMITS).is_err());
    // Zero records in a data frame.
    let mut bad = buf;
    bad[FRAME_RECORD_COUNT_POS] = 0;
    reseal(&mut bad);
    assert_eq!(decode_frame(&bad, 0, &LIMITS), Err(CorruptKind::BadRecord));
}

#[test]
fn record_of_exactly_the_limit() {
    let max = LIMITS.record_bytes_max as usize;
    let exact = Record::new(vec![1u8; max - RECORD_FIXED_LEN]);
    assert_eq!(exact.encoded_len(LIMITS.record_bytes_max).unwrap(), max);
    let (_, buf) = encode(std::slice::from_ref(&exact));
    assert!(decode_frame(&buf, 0, &LIMITS).unwrap().is_some());
    let over = Record::new(vec![1u8; max - RECORD_FIXED_LEN + 1]);
    assert!(matches!(
        over.encoded_len(LIMITS.record_bytes_max),
        Err(Error::RecordTooLarge { len, max: 1024 }) if len == 1025
    ));
    // A record over the limit on disk is rejected by the decoder, too.
    let big = Limits {
        record_bytes_max: 4096,
        ..LIMITS
    };
    let h = FrameHeader {
        body_len: body_len_for(max + 1, &big).unwrap(),
        ..header_for(std::slice::from_ref(&exact), 1, 1)
    };
    let mut buf = vec![0u8; h.frame_len()];
    encode_frame(&mut buf, &h, &Payload::Records(std::slice::from_ref(&over)));
    assert!(matches!(
        decode_frame(&buf, 0, &LIMITS),
        Err(CorruptKind::LengthOutOfRange {
            len: 1025,
            max: 1024
        })
    ));
}
