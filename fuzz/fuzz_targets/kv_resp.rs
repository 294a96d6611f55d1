//! The KV server's request path and the client's reply parser, on bytes
//! from the network. Invariants: never panic; a request parsed whole
//! re-encodes to bytes that parse to the same arguments (and has one at
//! least: empty arrays are skipped); parsing the same bytes fed in two
//! pieces gives the same requests; every reply decodes back after
//! encoding. The glob patterns of `KEYS` and `SCAN ... MATCH` (from the
//! network too): the input split in two is a pattern and a key, matched
//! in time linear in their product, and as Redis's own algorithm
//! matches them when both are short.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use strata_kv::command::Command;
use strata_kv::glob::{Glob, reference_match};
use strata_kv::resp::{self, Limits, Out};

fn requests(chunks: &[&[u8]], limits: &Limits) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        loop {
            match resp::parse_request(&mut buf, limits) {
                Ok(Some(args)) => out.push(args),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_bulk: 1 << 20, max_args: 1 << 12 };
    let at = data.first().map(|&b| b as usize % (data.len() + 1)).unwrap_or(0);
    let (pattern, key) = data.split_at(at);
    let glob = Glob::new(pattern);
    let matched = glob.matches(key);
    if pattern.len() <= 12 && key.len() <= 16 && pattern != b"*" {
        assert_eq!(matched, reference_match(pattern, key), "the glob and Redis disagree");
    }
    let (whole, failed) = requests(&[data], &limits);
    let cut = data.first().map(|&b| b as usize % (data.len() + 1)).unwrap_or(0);
    let (split, failed2) = requests(&[&data[..cut], &data[cut..]], &limits);
    assert_eq!(failed, failed2);
    assert_eq!(whole, split);
    for args in whole {
        let mut enc = BytesMut::new();
        resp::encode_request(&args, &mut enc);
        assert!(!args.is_empty(), "an empty request was handed out");
        let back = resp::parse_request(&mut enc, &limits).expect("re-encoded request parses");
        assert_eq!(back.as_ref(), Some(&args));
        if let Err(reply) = Command::parse(args) {
            let mut out = Out::default();
            reply.encode(2, &mut out);
            let mut b = BytesMut::from(&out.to_vec()[..]);
            assert!(resp::parse_reply(&mut b, &limits).unwrap().is_some());
        }
    }
    let mut buf = BytesMut::from(data);
    while let Ok(Some(r)) = resp::parse_reply(&mut buf, &limits) {
        for proto in [2, 3] {
            let mut out = Out::default();
            r.encode(proto, &mut out);
            let mut b = BytesMut::from(&out.to_vec()[..]);
            assert!(resp::parse_reply(&mut b, &limits).unwrap().is_some());
        }
    }
});
