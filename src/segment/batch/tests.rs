//! Unit tests of `segment/batch.rs`.

use super::*;
use crate::segment::frame::decode_frame;
use crate::segment::test_util::{LIMITS, encode, sample};

#[test]
fn frame_round_trips_with_all_record_shapes() {
    let records = sample();
    let (h, buf) = encode(&records);
    assert_eq!(decode_frame(&buf, 0, &LIMITS), Ok(Some(h)));
    let batch = Batch {
        log_index: LogIndex(5),
        term: Term(3),
        base_offset: Offset(10),
        record_count: 3,
        timestamp_ms: 0,
        kind: EntryKind::Data,
        format: PayloadFormat::Replog,
        compacted: false,
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
        payload: Bytes::copy_from_slice(&buf[FRAME_HEADER_LEN..]),
    };
    let got: Vec<_> = batch.records().collect();
    assert_eq!(got.len(), 3);
    for (i, (off, rec)) in got.into_iter().enumerate() {
        assert_eq!(off, Offset(10 + i as u64));
        assert_eq!(rec, records[i]);
    }
}
