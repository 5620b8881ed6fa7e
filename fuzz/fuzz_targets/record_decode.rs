#![no_main]

//! Decodes one record-batch frame from arbitrary bytes. Any `Err` is fine; a panic is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = replog::__fuzz::fuzz_decode_frame(data);
});
