#![no_main]

//! Decodes arbitrary bytes as a Kafka request (header and body, after the length), as the
//! Kafka listener does with what a client sends. Any `Err` is fine; a panic is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = replog::__fuzz::fuzz_kafka_request(data);
});
