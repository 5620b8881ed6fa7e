#![no_main]

//! Network frames from arbitrary bytes: one header, then a whole stream read as a connection
//! reads it. Any rejection is fine; a panic, or an allocation beyond the frame limit, is a bug.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = replog::__fuzz::fuzz_decode_head(data);
    let _ = replog::__fuzz::fuzz_read_frames(data);
});
