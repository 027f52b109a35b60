//! Fuzzes `walrelay::pgoutput::decode` with arbitrary payloads.
//!
//! Oracle: decoding never panics, and whatever decodes must encode again and
//! decode to the same message (so the decoder cannot accept bytes it would
//! misread).

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use walrelay::pgoutput::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = decode(Bytes::copy_from_slice(data)) {
        let bytes = encode(&msg).expect("a decoded message must encode");
        assert_eq!(decode(bytes).ok(), Some(msg));
    }
});
