#![no_main]

//! Checks and decodes one Kafka record batch (magic 2, any codec) from arbitrary bytes, as the
//! Kafka listener does with a producer's batch. Any `Err` is fine; a panic is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = replog::__fuzz::fuzz_kafka_batch(data);
});
