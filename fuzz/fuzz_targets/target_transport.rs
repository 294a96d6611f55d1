//! Drives the target's NVMe/TCP connection state machine with a valid
//! ICReq followed by arbitrary bytes, delivered in arbitrary pieces, and
//! completes every command it yields.
//! Invariants: never panics; a fatal error yields a well-formed
//! C2HTermReq; every output byte stream decodes as whole PDUs.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use strata_nvme::completion::Cqe;
use strata_nvme::pdu::{Digests, IcReq, Pdu, decode_pdu};
use strata_nvme::status::Status;
use strata_target::transport::{Input, Transport, TransportLimits};

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else { return };
    let limits = TransportLimits {
        in_capsule_data: 8192,
        max_h2c_data: 4096,
        max_transfer: 1 << 16,
        max_r2t_inflight: 4,
        r2t_timeout: std::time::Duration::from_secs(10),
    };
    let now = std::time::Instant::now();
    let digests = Digests { header: cfg & 1 != 0, data: cfg & 2 != 0 };
    let mut t = Transport::new(limits);
    let mut rbuf = BytesMut::from(&IcReq { pfv: 0, hpda: 0, digests, maxr2t: 0 }.encode()[..]);
    let mut inputs = Vec::new();
    t.receive(&mut rbuf, &mut inputs, now).expect("a valid ICReq is accepted");
    let chunk = usize::from(cfg >> 2).max(1) * 7;
    let mut out = t.take_output();
    for piece in rest.chunks(chunk) {
        rbuf.extend_from_slice(piece);
        match t.receive(&mut rbuf, &mut inputs, now) {
            Ok(()) => {}
            Err(fatal) => {
                let term = fatal.term_req();
                let d = decode_pdu(&term, Digests::default(), 0).expect("valid term req").expect("whole");
                assert!(matches!(d.pdu, Pdu::C2hTermReq(_)));
                return;
            }
        }
        for input in inputs.drain(..) {
            if let Input::Command(cmd) = input {
                let cqe = Cqe::new(cmd.sqe.cid(), Status::SUCCESS);
                if cmd.read_len > 0 {
                    t.complete_with_data(cqe, &vec![0xa5; cmd.read_len.min(1 << 16)]);
                } else {
                    t.complete(cqe);
                }
            }
        }
        out.extend_from_slice(&t.take_output());
    }
    // What the target sent is a sequence of whole, valid PDUs.
    let mut off = 0;
    let mut first = true;
    while off < out.len() {
        let dg = if first { Digests::default() } else { digests };
        let d = decode_pdu(&out[off..], dg, 1 << 20).expect("target output decodes").expect("whole PDUs only");
        off += d.len;
        first = false;
    }
});
