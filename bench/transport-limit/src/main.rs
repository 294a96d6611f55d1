//! The "transport limit": a minimal NVMe/TCP responder used as the
//! reference point of strata's benchmarks. It answers just enough of the
//! admin set for an initiator to connect (Connect, Property Get/Set,
//! Identify, Set Features, Keep Alive), answers every Read with a C2HData
//! of zeros of the right size, accepts every Write (in-capsule or through
//! one R2T) and does nothing else: no storage, no controller state, no
//! checks. One thread, one task per connection, one write per batch of
//! responses.
//!
//! A load generator that reaches N IOPS against this server on a core can
//! drive any target up to N; a target that reaches M shows what its own
//! logic costs as M/N.
//!
//!     transport-limit [ADDR:PORT] [NAMESPACE_MIB]     (default 127.0.0.1:4430, 1024)
//!
//! Any subsystem NQN is accepted; the namespace is NSID 1 with 4 KiB blocks.

use std::collections::HashMap;

use strata_nvme::command::{FeaturesCmd, IdentifyCmd, ReadWrite, SGL_TRANSPORT_DATA, Sqe, admin, feature, io};
use strata_nvme::completion::Cqe;
use strata_nvme::digest::digest_bytes;
use strata_nvme::fabrics::{ConnectCmd, FABRICS_OPCODE, PropertyCmd, fctype, reg};
use strata_nvme::identify::{self as id, Cns, IdentifyController, IdentifyNamespace, LbaFormat};
use strata_nvme::pdu::{self, DataHeader, Digests, FLAG_DATA_LAST, FLAG_DATA_SUCCESS, IcResp, Pdu, R2t};
use strata_nvme::status::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BLOCK: u64 = 4096;
const IN_CAPSULE: usize = 8192;
const MAX_H2C: u32 = 128 * 1024;
const FLUSH_BYTES: usize = 32 * 1024;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:4430".into());
    let mib: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind(&addr).await?;
        eprintln!("transport-limit listening on {} ({mib} MiB namespace)", listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(async move {
                let _ = serve(stream, mib * 1024 * 1024 / BLOCK).await;
            });
        }
    })
}

struct Conn {
    digests: Digests,
    success_flag: bool,
    blocks: u64,
    /// Writes waiting for their H2CData: CID -> bytes still to come.
    pending: HashMap<u16, usize>,
    out: Vec<u8>,
}

async fn serve(mut stream: TcpStream, blocks: u64) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut filled = 0;
    let mut conn =
        Conn { digests: Digests::default(), success_flag: false, blocks, pending: HashMap::new(), out: Vec::new() };
    let mut negotiated = false;
    loop {
        let n = stream.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        let mut off = 0;
        loop {
            let digests = if negotiated { conn.digests } else { Digests::default() };
            let decoded = match pdu::decode_pdu(&buf[off..filled], digests, 1 << 20) {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(_) => return Ok(()),
            };
            off += decoded.len;
            match decoded.pdu {
                Pdu::IcReq(req) => {
                    conn.digests = req.digests;
                    negotiated = true;
                    let resp = IcResp { pfv: 0, cpda: 0, digests: req.digests, maxh2cdata: MAX_H2C };
                    conn.out.extend_from_slice(&resp.encode());
                }
                Pdu::CapsuleCmd { sqe, data } => {
                    conn.command(&sqe, data.len());
                    // Same flush policy as the strata target: write once 32 KiB
                    // of responses are ready, so the host starts on them early.
                    if conn.out.len() >= FLUSH_BYTES {
                        stream.write_all(&conn.out).await?;
                        conn.out.clear();
                    }
                }
                Pdu::H2cData { header, data, .. } => {
                    let left = conn.pending.get_mut(&header.cccid).map(|l| {
                        *l = l.saturating_sub(data.len());
                        *l
                    });
                    if left == Some(0) {
                        conn.pending.remove(&header.cccid);
                        conn.resp(Cqe::new(header.cccid, Status::SUCCESS));
                    }
                }
                _ => return Ok(()),
            }
        }
        buf.copy_within(off..filled, 0);
        filled -= off;
        if filled == buf.len() {
            return Ok(());
        }
        if !conn.out.is_empty() {
            stream.write_all(&conn.out).await?;
            conn.out.clear();
        }
    }
}

impl Conn {
    fn resp(&mut self, cqe: Cqe) {
        self.out.extend_from_slice(pdu::encode_capsule_resp(&cqe, self.digests).as_slice());
    }

    fn resp_result(&mut self, cid: u16, result: u64) {
        let mut cqe = Cqe::new(cid, Status::SUCCESS);
        cqe.result = result;
        self.resp(cqe);
    }

    fn data(&mut self, cid: u16, data: &[u8], len: usize) {
        let len = len.max(data.len());
        let header = DataHeader { cccid: cid, ttag: 0, datao: 0, datal: len as u32 };
        let flags = FLAG_DATA_LAST | if self.success_flag { FLAG_DATA_SUCCESS } else { 0 };
        self.out.extend_from_slice(pdu::encode_c2h_data(&header, flags, self.digests).as_slice());
        let start = self.out.len();
        self.out.extend_from_slice(data);
        self.out.resize(start + len, 0);
        if self.digests.data {
            let d = digest_bytes(&self.out[start..]);
            self.out.extend_from_slice(&d);
        }
        if !self.success_flag {
            self.resp(Cqe::new(cid, Status::SUCCESS));
        }
    }

    fn command(&mut self, sqe: &Sqe, in_capsule: usize) {
        let cid = sqe.cid();
        let len = sqe.sgl().length as usize;
        match (sqe.opcode(), sqe.fctype()) {
            (FABRICS_OPCODE, fctype::CONNECT) => {
                self.success_flag = ConnectCmd::decode(sqe).cattr & (1 << 2) != 0;
                self.resp_result(cid, 1);
            }
            (FABRICS_OPCODE, fctype::PROPERTY_GET) => {
                let p = PropertyCmd::decode(sqe);
                let v = match p.offset {
                    reg::CAP => reg::cap(1023, 1),
                    reg::VS => u64::from(reg::VERSION_1_4),
                    reg::CSTS => u64::from(reg::CSTS_RDY),
                    _ => 0,
                };
                self.resp_result(cid, v);
            }
            (FABRICS_OPCODE, _) => self.resp(Cqe::new(cid, Status::SUCCESS)),
            (io::READ, _) if sqe.nsid() != 0 && len > 0 => {
                let rw = ReadWrite::decode(sqe);
                if rw.slba + u64::from(rw.nlb) > self.blocks {
                    self.resp(Cqe::new(cid, Status::LBA_OUT_OF_RANGE.dnr()));
                } else {
                    self.data(cid, &[], len);
                }
            }
            (io::WRITE, _) if sqe.sgl().sgl_type == SGL_TRANSPORT_DATA && in_capsule == 0 && len > 0 => {
                self.pending.insert(cid, len);
                let r2t = R2t { cccid: cid, ttag: cid, r2to: 0, r2tl: len as u32 };
                self.out.extend_from_slice(pdu::encode_r2t(&r2t, self.digests).as_slice());
            }
            (admin::IDENTIFY, _) => {
                let cmd = IdentifyCmd::decode(sqe);
                let data = match Cns(cmd.cns) {
                    Cns::CONTROLLER => self.identify_controller().to_vec(),
                    Cns::NAMESPACE if sqe.nsid() == 1 => self.identify_namespace().to_vec(),
                    Cns::ACTIVE_NS_LIST => id::encode_active_ns_list([1], sqe.nsid()).to_vec(),
                    _ => vec![0; 4096],
                };
                self.data(cid, &data, len);
            }
            (admin::SET_FEATURES, _) if FeaturesCmd::decode(sqe).fid == feature::NUMBER_OF_QUEUES => {
                self.resp_result(cid, (63 << 16) | 63);
            }
            (op, _) if strata_nvme::command::is_controller_to_host(op) && len > 0 => self.data(cid, &[], len),
            _ => self.resp(Cqe::new(cid, Status::SUCCESS)),
        }
    }

    fn identify_controller(&self) -> [u8; 4096] {
        IdentifyController {
            mn: "transport-limit".into(),
            sn: "LIMIT".into(),
            fr: "0".into(),
            cntlid: 1,
            ver: reg::VERSION_1_4,
            mdts: 8,
            sqes: id::SQES_64,
            cqes: id::CQES_16,
            maxcmd: 1024,
            nn: 1,
            sgls: id::SGLS_SUPPORTED_BYTE_ALIGNED | id::SGLS_ADDRESS_AS_OFFSET,
            ioccsz: ((64 + IN_CAPSULE) / 16) as u32,
            iorcsz: 1,
            cntrltype: id::CNTRLTYPE_IO,
            ..Default::default()
        }
        .encode()
    }

    fn identify_namespace(&self) -> [u8; 4096] {
        let mut lbaf = [LbaFormat::default(); id::LBAF_COUNT];
        lbaf[0] = LbaFormat { ms: 0, lbads: 12, rp: 0 };
        IdentifyNamespace { nsze: self.blocks, ncap: self.blocks, nuse: self.blocks, lbaf, ..Default::default() }
            .encode()
    }
}
