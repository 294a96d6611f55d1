//! The KV fast path's control protocol (`strata_kv::shm::wire`) on bytes
//! from a client (requests) and from a server (replies). Invariants:
//! never panic; a message that decodes re-encodes to a frame whose body
//! is exactly the bytes decoded (the format has one encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_kv::shm::wire::{Reply, Request, frame_len};

fuzz_target!(|data: &[u8]| {
    if let Some(head) = data.get(..4) {
        let _ = frame_len(head.try_into().unwrap_or([0; 4]));
    }
    if let Ok(req) = Request::decode(data) {
        let frame = req.encode();
        assert_eq!(&frame[4..], data, "a request re-encodes to its own bytes");
    }
    if let Ok(reply) = Reply::decode(data) {
        let frame = reply.encode();
        assert_eq!(&frame[4..], data, "a reply re-encodes to its own bytes");
    }
});
