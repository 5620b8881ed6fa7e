//! Unit tests of `segment/kafka/inflate.rs`.

use kafka_protocol::records::Record as KafkaRecord;

use super::*;
use crate::segment::kafka::tests::{batch, kafka_record, sample};
use crate::segment::kafka::{CODECS, decode_records};

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
