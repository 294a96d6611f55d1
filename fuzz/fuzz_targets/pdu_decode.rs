//! Decodes arbitrary bytes as NVMe/TCP PDUs, under every digest setting.
//! Invariants: never panics; a decoded PDU never claims more bytes than it
//! was given; "need more bytes" only happens for a strict prefix of a PDU
//! that the common header says is longer than the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_nvme::pdu::{CommonHeader, Digests, decode_pdu};

fuzz_target!(|data: &[u8]| {
    for (h, d) in [(false, false), (true, false), (false, true), (true, true)] {
        let digests = Digests { header: h, data: d };
        match decode_pdu(data, digests, 1 << 20) {
            Ok(Some(dec)) => assert!(dec.len <= data.len() && dec.len >= 8),
            Ok(None) => {
                if let Some(ch) = CommonHeader::parse(data) {
                    assert!((ch.plen as usize) > data.len(), "incomplete but plen {} <= {}", ch.plen, data.len());
                } else {
                    assert!(data.len() < 8);
                }
            }
            Err(e) => {
                // Every error maps to a defined fatal error status.
                assert!((1..=6).contains(&e.fes()), "{e}");
            }
        }
    }
});
