#![no_main]

//! Feeds arbitrary bytes to the broker's SASL server side: a SCRAM exchange (the client's two
//! messages, split at the first 0xFF) and a PLAIN message. Any `Err` is fine; a panic is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = replog::__fuzz::fuzz_sasl_server(data);
});
