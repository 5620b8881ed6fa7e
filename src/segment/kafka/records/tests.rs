//! Unit tests of `segment/kafka/records.rs`.

use bytes::{BufMut, Bytes};
use kafka_protocol::records::Compression;

use super::*;
use crate::segment::kafka::tests::{LIMITS, reseal, sample};
use crate::segment::kafka::{
    BATCH_HEADER_LEN, BATCH_LENGTH_END, BATCH_LENGTH_POS, LAST_OFFSET_DELTA_POS, RECORD_COUNT_POS,
    check, decode_records, fuzz_kafka_batch,
};

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
