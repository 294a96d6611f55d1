//! NVMe/TCP protocol data units (NVMe/TCP Transport Specification 1.0,
//! chapter 3).
//!
//! Every PDU starts with an 8-byte common header:
//!
//! | offset | size | field | meaning                                      |
//! |--------|------|-------|----------------------------------------------|
//! | 0      | 1    | TYPE  | PDU type                                     |
//! | 1      | 1    | FLAGS | HDGSTF, DDGSTF, LAST_PDU, SUCCESS            |
//! | 2      | 1    | HLEN  | header length (fixed per type)               |
//! | 3      | 1    | PDO   | offset of the data from the start of the PDU |
//! | 4      | 4    | PLEN  | total length including digests and padding   |
//!
//! followed by the type-specific part of the header (up to HLEN), a header
//! digest (4 bytes, when negotiated and the type carries one), padding up
//! to PDO, the data, and a data digest (when negotiated and data is
//! present).
//!
//! | type         | HLEN | type-specific fields (offset: field)              |
//! |--------------|------|---------------------------------------------------|
//! | ICReq  0x00  | 128  | 8: PFV u16, 10: HPDA, 11: DGST, 12: MAXR2T u32    |
//! | ICResp 0x01  | 128  | 8: PFV u16, 10: CPDA, 11: DGST, 12: MAXH2CDATA u32|
//! | H2CTermReq 2 | 24   | 8: FES u16, 10: FEI u32; data: offending header   |
//! | C2HTermReq 3 | 24   | as H2CTermReq                                     |
//! | CapsuleCmd 4 | 72   | 8: the 64-byte SQE                                |
//! | CapsuleResp 5| 24   | 8: the 16-byte CQE                                |
//! | H2CData 6    | 24   | 8: CCCID, 10: TTAG, 12: DATAO u32, 16: DATAL u32  |
//! | C2HData 7    | 24   | 8: CCCID, 12: DATAO u32, 16: DATAL u32            |
//! | R2T 9        | 24   | 8: CCCID, 10: TTAG, 12: R2TO u32, 16: R2TL u32    |
//!
//! Decoding is split in two steps so that a receiver can tell "need more
//! bytes" (a normal condition, `Ok(None)`) from "malformed" (an error that
//! ends the connection with a termination PDU): [`CommonHeader::parse`]
//! needs 8 bytes, [`PduLayout::new`] validates HLEN, PDO, PLEN and the
//! digest flags against the type and the negotiated digests before any
//! length from the peer is used, and [`decode_pdu`] does both on a
//! contiguous buffer and borrows the data from it.

use crate::codec::{get_u16, get_u32, put_u16, put_u32};
use crate::command::{SQE_LEN, Sqe};
use crate::completion::{CQE_LEN, Cqe};
use crate::digest::{DIGEST_LEN, check_digest, digest_bytes};

/// Length of the common header.
pub const CH_LEN: usize = 8;
/// Offset of TYPE.
pub const TYPE_OFFSET: usize = 0;
/// Offset of FLAGS.
pub const FLAGS_OFFSET: usize = TYPE_OFFSET + 1;
/// Offset of HLEN.
pub const HLEN_OFFSET: usize = FLAGS_OFFSET + 1;
/// Offset of PDO.
pub const PDO_OFFSET: usize = HLEN_OFFSET + 1;
/// Offset of PLEN.
pub const PLEN_OFFSET: usize = PDO_OFFSET + 1;

/// FLAGS: a header digest follows the header.
pub const FLAG_HDGSTF: u8 = 0x01;
/// FLAGS: a data digest follows the data.
pub const FLAG_DDGSTF: u8 = 0x02;
/// FLAGS (H2CData, C2HData): last data PDU of the transfer.
pub const FLAG_DATA_LAST: u8 = 0x04;
/// FLAGS (C2HData): the command succeeded; no CapsuleResp follows.
pub const FLAG_DATA_SUCCESS: u8 = 0x08;

/// Length of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// HLEN of CapsuleCmd.
pub const CAPSULE_CMD_HLEN: usize = CH_LEN + SQE_LEN;
/// HLEN of CapsuleResp.
pub const CAPSULE_RESP_HLEN: usize = CH_LEN + CQE_LEN;
/// HLEN of H2CData, C2HData and R2T.
pub const DATA_HLEN: usize = 24;
/// HLEN of H2CTermReq and C2HTermReq.
pub const TERM_HLEN: usize = 24;
/// Most bytes of the offending PDU header a termination request carries.
pub const TERM_MAX_ERROR_DATA: usize = 128;
/// Longest header plus header digest, for fixed-size header buffers.
pub const MAX_HEADER_LEN: usize = IC_LEN + DIGEST_LEN;

/// ICReq/ICResp: offset of PFV.
pub const IC_PFV_OFFSET: usize = CH_LEN;
/// ICReq: offset of HPDA; ICResp: offset of CPDA.
pub const IC_PDA_OFFSET: usize = IC_PFV_OFFSET + 2;
/// ICReq/ICResp: offset of DGST (bit 0 header digest, bit 1 data digest).
pub const IC_DGST_OFFSET: usize = IC_PDA_OFFSET + 1;
/// ICReq: offset of MAXR2T; ICResp: offset of MAXH2CDATA.
pub const IC_MAX_OFFSET: usize = IC_DGST_OFFSET + 1;
/// Largest HPDA/CPDA value (0's based dwords: 128-byte alignment); larger
/// values are reserved.
pub const HPDA_MAX: u8 = 31;

/// Data PDUs and R2T: offset of CCCID.
pub const DATA_CCCID_OFFSET: usize = CH_LEN;
/// Data PDUs and R2T: offset of TTAG (reserved in C2HData).
pub const DATA_TTAG_OFFSET: usize = DATA_CCCID_OFFSET + 2;
/// Data PDUs: offset of DATAO; R2T: offset of R2TO.
pub const DATA_OFFSET_OFFSET: usize = DATA_TTAG_OFFSET + 2;
/// Data PDUs: offset of DATAL; R2T: offset of R2TL.
pub const DATA_LENGTH_OFFSET: usize = DATA_OFFSET_OFFSET + 4;

/// Termination requests: offset of FES.
pub const TERM_FES_OFFSET: usize = CH_LEN;
/// Termination requests: offset of FEI.
pub const TERM_FEI_OFFSET: usize = TERM_FES_OFFSET + 2;

/// A PDU type. An open set: unknown values are representable so that the
/// receiver can answer them with a termination PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PduType(pub u8);

impl PduType {
    /// Initialize Connection Request.
    pub const IC_REQ: PduType = PduType(0x00);
    /// Initialize Connection Response.
    pub const IC_RESP: PduType = PduType(0x01);
    /// Host to Controller Terminate Connection Request.
    pub const H2C_TERM_REQ: PduType = PduType(0x02);
    /// Controller to Host Terminate Connection Request.
    pub const C2H_TERM_REQ: PduType = PduType(0x03);
    /// Command Capsule.
    pub const CAPSULE_CMD: PduType = PduType(0x04);
    /// Response Capsule.
    pub const CAPSULE_RESP: PduType = PduType(0x05);
    /// Host to Controller Data.
    pub const H2C_DATA: PduType = PduType(0x06);
    /// Controller to Host Data.
    pub const C2H_DATA: PduType = PduType(0x07);
    /// Ready to Transfer.
    pub const R2T: PduType = PduType(0x09);

    /// The fixed HLEN of this type, or `None` for an unknown type.
    pub fn hlen(self) -> Option<usize> {
        Some(match self {
            PduType::IC_REQ | PduType::IC_RESP => IC_LEN,
            PduType::CAPSULE_CMD => CAPSULE_CMD_HLEN,
            PduType::CAPSULE_RESP => CAPSULE_RESP_HLEN,
            PduType::H2C_DATA | PduType::C2H_DATA | PduType::R2T => DATA_HLEN,
            PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => TERM_HLEN,
            _ => return None,
        })
    }

    /// True for types that carry a header digest when one was negotiated.
    pub fn has_header_digest(self) -> bool {
        matches!(
            self,
            PduType::CAPSULE_CMD | PduType::CAPSULE_RESP | PduType::H2C_DATA | PduType::C2H_DATA | PduType::R2T
        )
    }

    /// True for types that may carry data with a data digest.
    pub fn has_data_digest(self) -> bool {
        matches!(self, PduType::CAPSULE_CMD | PduType::H2C_DATA | PduType::C2H_DATA)
    }
}

/// Fatal error status values of a termination request (NVMe/TCP 1.0,
/// figure 18).
pub mod fes {
    /// Invalid PDU Header Field.
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// PDU Sequence Error.
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    /// Header Digest Error.
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    /// Data Transfer Out of Range.
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    /// R2T Limit Exceeded / Data Transfer Limit Exceeded.
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    /// Unsupported Parameter.
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// A malformed PDU. Each variant maps to the FES and FEI of the
/// termination request that answers it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PduError {
    /// The TYPE byte names no PDU type.
    #[error("unknown PDU type {0:#04x}")]
    UnknownType(u8),
    /// A PDU type that this side never receives (e.g. a C2HData at a
    /// controller).
    #[error("unexpected PDU type {0:#04x} for this side of the connection")]
    UnexpectedType(u8),
    /// A header field holds a value the specification forbids here.
    #[error("invalid {field} ({value:#x}) in PDU header at byte {offset}")]
    InvalidField {
        /// Field name from the specification.
        field: &'static str,
        /// Byte offset of the field in the PDU.
        offset: usize,
        /// The value received.
        value: u32,
    },
    /// The header digest does not match the header.
    #[error("header digest mismatch: received {received:#010x}, computed {computed:#010x}")]
    HeaderDigest {
        /// Digest received.
        received: u32,
        /// Digest computed over the header.
        computed: u32,
    },
    /// The PDU carries more data than this side accepts.
    #[error("PDU carries {len} data bytes, more than the limit of {max}")]
    DataLimitExceeded {
        /// Data bytes in the PDU.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A parameter this side does not support (e.g. a PDU format version).
    #[error("unsupported {field} ({value:#x}) at byte {offset}")]
    Unsupported {
        /// Field name from the specification.
        field: &'static str,
        /// Byte offset of the field.
        offset: usize,
        /// The value received.
        value: u32,
    },
}

impl PduError {
    /// Fatal Error Status for the termination request.
    pub fn fes(&self) -> u16 {
        match self {
            PduError::UnknownType(_) | PduError::InvalidField { .. } => fes::INVALID_HEADER_FIELD,
            PduError::UnexpectedType(_) => fes::PDU_SEQUENCE_ERROR,
            PduError::HeaderDigest { .. } => fes::HEADER_DIGEST_ERROR,
            PduError::DataLimitExceeded { .. } => fes::DATA_LIMIT_EXCEEDED,
            PduError::Unsupported { .. } => fes::UNSUPPORTED_PARAMETER,
        }
    }

    /// Fatal Error Information: the byte offset of the bad field for
    /// header field errors, else 0.
    pub fn fei(&self) -> u32 {
        match self {
            PduError::InvalidField { offset, .. } | PduError::Unsupported { offset, .. } => *offset as u32,
            _ => 0,
        }
    }
}

/// The 8-byte common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU type.
    pub pdu_type: PduType,
    /// Flags.
    pub flags: u8,
    /// Header length.
    pub hlen: u8,
    /// PDU data offset.
    pub pdo: u8,
    /// Total PDU length.
    pub plen: u32,
}

impl CommonHeader {
    /// Reads the common header from the start of `b`; `None` when fewer
    /// than [`CH_LEN`] bytes are available.
    pub fn parse(b: &[u8]) -> Option<CommonHeader> {
        if b.len() < CH_LEN {
            return None;
        }
        Some(CommonHeader {
            pdu_type: PduType(b[TYPE_OFFSET]),
            flags: b[FLAGS_OFFSET],
            hlen: b[HLEN_OFFSET],
            pdo: b[PDO_OFFSET],
            plen: get_u32(b, PLEN_OFFSET),
        })
    }

    fn encode(&self, b: &mut [u8]) {
        b[TYPE_OFFSET] = self.pdu_type.0;
        b[FLAGS_OFFSET] = self.flags;
        b[HLEN_OFFSET] = self.hlen;
        b[PDO_OFFSET] = self.pdo;
        put_u32(b, PLEN_OFFSET, self.plen);
    }
}

/// Digests negotiated by ICReq/ICResp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Digests {
    /// Header digest enabled.
    pub header: bool,
    /// Data digest enabled.
    pub data: bool,
}

impl Digests {
    fn from_byte(b: u8) -> Digests {
        Digests { header: b & 1 != 0, data: b & 2 != 0 }
    }

    fn to_byte(self) -> u8 {
        u8::from(self.header) | (u8::from(self.data) << 1)
    }
}

/// Where the parts of a PDU lie, validated against its type and the
/// negotiated digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduLayout {
    /// The common header it was computed from.
    pub header: CommonHeader,
    /// Header length.
    pub hlen: usize,
    /// A header digest follows the header.
    pub hdgst: bool,
    /// Offset of the data from the start of the PDU.
    pub data_offset: usize,
    /// Data bytes (0 when none).
    pub data_len: usize,
    /// A data digest follows the data.
    pub ddgst: bool,
    /// Total PDU length (PLEN).
    pub total: usize,
}

impl PduLayout {
    /// Validates a common header and computes the layout.
    ///
    /// `max_data` bounds the data a PDU of this type may carry on this
    /// connection (in-capsule data size, MAXH2CDATA, ...).
    ///
    /// # Errors
    ///
    /// [`PduError`] naming the first inconsistent field.
    pub fn new(ch: CommonHeader, digests: Digests, max_data: usize) -> Result<PduLayout, PduError> {
        let t = ch.pdu_type;
        let hlen = t.hlen().ok_or(PduError::UnknownType(t.0))?;
        let bad = |field: &'static str, offset: usize, value: u32| PduError::InvalidField { field, offset, value };
        if usize::from(ch.hlen) != hlen {
            return Err(bad("HLEN", HLEN_OFFSET, ch.hlen.into()));
        }
        let plen = ch.plen as usize;
        let hdgst = digests.header && t.has_header_digest();
        if (ch.flags & FLAG_HDGSTF != 0) != hdgst {
            return Err(bad("FLAGS (HDGSTF)", FLAGS_OFFSET, ch.flags.into()));
        }
        let header_end = hlen + if hdgst { DIGEST_LEN } else { 0 };
        let mut layout = PduLayout { header: ch, hlen, hdgst, data_offset: 0, data_len: 0, ddgst: false, total: plen };
        match t {
            PduType::IC_REQ | PduType::IC_RESP => {
                if plen != IC_LEN {
                    return Err(bad("PLEN", PLEN_OFFSET, ch.plen));
                }
                if ch.pdo != 0 {
                    return Err(bad("PDO", PDO_OFFSET, ch.pdo.into()));
                }
            }
            PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => {
                if !(TERM_HLEN..=TERM_HLEN + TERM_MAX_ERROR_DATA).contains(&plen) {
                    return Err(bad("PLEN", PLEN_OFFSET, ch.plen));
                }
                layout.data_offset = TERM_HLEN;
                layout.data_len = plen - TERM_HLEN;
            }
            PduType::CAPSULE_RESP | PduType::R2T => {
                if plen != header_end {
                    return Err(bad("PLEN", PLEN_OFFSET, ch.plen));
                }
                if ch.flags & FLAG_DDGSTF != 0 {
                    return Err(bad("FLAGS (DDGSTF)", FLAGS_OFFSET, ch.flags.into()));
                }
            }
            _ => {
                // CapsuleCmd, H2CData, C2HData: data is optional for a
                // capsule, required for data PDUs.
                if plen < header_end {
                    return Err(bad("PLEN", PLEN_OFFSET, ch.plen));
                }
                let has_data = plen > header_end;
                if !has_data {
                    if t != PduType::CAPSULE_CMD {
                        return Err(bad("PLEN", PLEN_OFFSET, ch.plen));
                    }
                    if ch.flags & FLAG_DDGSTF != 0 {
                        return Err(bad("FLAGS (DDGSTF)", FLAGS_OFFSET, ch.flags.into()));
                    }
                    return Ok(layout);
                }
                let ddgst = digests.data;
                if (ch.flags & FLAG_DDGSTF != 0) != ddgst {
                    return Err(bad("FLAGS (DDGSTF)", FLAGS_OFFSET, ch.flags.into()));
                }
                let pdo = usize::from(ch.pdo);
                let trailer = if ddgst { DIGEST_LEN } else { 0 };
                if pdo < header_end || pdo + trailer >= plen {
                    return Err(bad("PDO", PDO_OFFSET, ch.pdo.into()));
                }
                let data_len = plen - pdo - trailer;
                if data_len > max_data {
                    return Err(PduError::DataLimitExceeded { len: data_len, max: max_data });
                }
                layout.data_offset = pdo;
                layout.data_len = data_len;
                layout.ddgst = ddgst;
            }
        }
        Ok(layout)
    }

    /// Bytes of header plus header digest.
    pub fn header_end(&self) -> usize {
        self.hlen + if self.hdgst { DIGEST_LEN } else { 0 }
    }

    /// Checks the header digest of a PDU whose first [`Self::header_end`]
    /// bytes are in `b`.
    ///
    /// # Errors
    ///
    /// [`PduError::HeaderDigest`] on mismatch.
    pub fn check_header_digest(&self, b: &[u8]) -> Result<(), PduError> {
        if !self.hdgst {
            return Ok(());
        }
        let mut received = [0u8; DIGEST_LEN];
        received.copy_from_slice(&b[self.hlen..self.hlen + DIGEST_LEN]);
        check_digest(&b[..self.hlen], received)
            .map_err(|computed| PduError::HeaderDigest { received: u32::from_le_bytes(received), computed })
    }

    /// True when the data digest of a complete PDU in `b` matches (or no
    /// data digest is present).
    pub fn data_digest_ok(&self, b: &[u8]) -> bool {
        if !self.ddgst {
            return true;
        }
        let end = self.data_offset + self.data_len;
        let mut received = [0u8; DIGEST_LEN];
        received.copy_from_slice(&b[end..end + DIGEST_LEN]);
        check_digest(&b[self.data_offset..end], received).is_ok()
    }
}

/// Initialize Connection Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment, in dwords minus one.
    pub hpda: u8,
    /// Digests the host asks for.
    pub digests: Digests,
    /// Most outstanding R2Ts per command, 0-based.
    pub maxr2t: u32,
}

impl IcReq {
    /// Encodes the whole 128-byte PDU.
    pub fn encode(&self) -> [u8; IC_LEN] {
        let mut b = [0u8; IC_LEN];
        ic_header(PduType::IC_REQ).encode(&mut b);
        put_u16(&mut b, IC_PFV_OFFSET, self.pfv);
        b[IC_PDA_OFFSET] = self.hpda;
        b[IC_DGST_OFFSET] = self.digests.to_byte();
        put_u32(&mut b, IC_MAX_OFFSET, self.maxr2t);
        b
    }

    /// Decodes the type-specific fields of a validated ICReq.
    pub fn decode(b: &[u8; IC_LEN]) -> IcReq {
        IcReq {
            pfv: get_u16(b, IC_PFV_OFFSET),
            hpda: b[IC_PDA_OFFSET],
            digests: Digests::from_byte(b[IC_DGST_OFFSET]),
            maxr2t: get_u32(b, IC_MAX_OFFSET),
        }
    }
}

/// Initialize Connection Response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version (0).
    pub pfv: u16,
    /// Controller PDU data alignment, in dwords minus one.
    pub cpda: u8,
    /// Digests enabled on this connection.
    pub digests: Digests,
    /// Most data bytes the host may send in one H2CData PDU.
    pub maxh2cdata: u32,
}

impl IcResp {
    /// Encodes the whole 128-byte PDU.
    pub fn encode(&self) -> [u8; IC_LEN] {
        let mut b = [0u8; IC_LEN];
        ic_header(PduType::IC_RESP).encode(&mut b);
        put_u16(&mut b, IC_PFV_OFFSET, self.pfv);
        b[IC_PDA_OFFSET] = self.cpda;
        b[IC_DGST_OFFSET] = self.digests.to_byte();
        put_u32(&mut b, IC_MAX_OFFSET, self.maxh2cdata);
        b
    }

    /// Decodes the type-specific fields of a validated ICResp.
    pub fn decode(b: &[u8; IC_LEN]) -> IcResp {
        IcResp {
            pfv: get_u16(b, IC_PFV_OFFSET),
            cpda: b[IC_PDA_OFFSET],
            digests: Digests::from_byte(b[IC_DGST_OFFSET]),
            maxh2cdata: get_u32(b, IC_MAX_OFFSET),
        }
    }
}

fn ic_header(t: PduType) -> CommonHeader {
    CommonHeader { pdu_type: t, flags: 0, hlen: IC_LEN as u8, pdo: 0, plen: IC_LEN as u32 }
}

/// The type-specific header of H2CData and C2HData.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Command capsule CID the data belongs to.
    pub cccid: u16,
    /// Transfer tag from the R2T (H2CData only).
    pub ttag: u16,
    /// Offset of this PDU's data within the command's data.
    pub datao: u32,
    /// Data bytes in this PDU.
    pub datal: u32,
}

impl DataHeader {
    fn decode(b: &[u8]) -> DataHeader {
        DataHeader {
            cccid: get_u16(b, DATA_CCCID_OFFSET),
            ttag: get_u16(b, DATA_TTAG_OFFSET),
            datao: get_u32(b, DATA_OFFSET_OFFSET),
            datal: get_u32(b, DATA_LENGTH_OFFSET),
        }
    }

    fn encode(&self, b: &mut [u8]) {
        put_u16(b, DATA_CCCID_OFFSET, self.cccid);
        put_u16(b, DATA_TTAG_OFFSET, self.ttag);
        put_u32(b, DATA_OFFSET_OFFSET, self.datao);
        put_u32(b, DATA_LENGTH_OFFSET, self.datal);
    }
}

/// Ready to Transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag the host echoes in its H2CData PDUs.
    pub ttag: u16,
    /// Offset of the requested data within the command's data.
    pub r2to: u32,
    /// Bytes requested.
    pub r2tl: u32,
}

/// A termination request (H2CTermReq or C2HTermReq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermReq<'a> {
    /// Fatal error status.
    pub fes: u16,
    /// Fatal error information.
    pub fei: u32,
    /// The header of the PDU in error, as far as it was copied.
    pub error_data: &'a [u8],
}

/// A decoded PDU whose data, if any, borrows from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pdu<'a> {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq.
    H2cTermReq(TermReq<'a>),
    /// C2HTermReq.
    C2hTermReq(TermReq<'a>),
    /// CapsuleCmd with its in-capsule data (possibly empty).
    CapsuleCmd {
        /// The submission queue entry.
        sqe: Sqe,
        /// In-capsule data.
        data: &'a [u8],
    },
    /// CapsuleResp.
    CapsuleResp(Cqe),
    /// H2CData.
    H2cData {
        /// Header fields.
        header: DataHeader,
        /// Flags byte (LAST_PDU).
        flags: u8,
        /// Data.
        data: &'a [u8],
    },
    /// C2HData.
    C2hData {
        /// Header fields.
        header: DataHeader,
        /// Flags byte (LAST_PDU, SUCCESS).
        flags: u8,
        /// Data.
        data: &'a [u8],
    },
    /// R2T.
    R2t(R2t),
}

/// A PDU decoded from the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The PDU.
    pub pdu: Pdu<'a>,
    /// Bytes of the buffer it occupied (its PLEN).
    pub len: usize,
    /// False when a data digest was present and did not match; the PDU is
    /// otherwise well formed.
    pub data_digest_ok: bool,
}

/// Decodes one PDU from the start of `b`.
///
/// Returns `Ok(None)` while `b` holds less than a whole PDU. The ICReq and
/// ICResp are decoded regardless of `digests` (they are exchanged before
/// digests are in force).
///
/// # Errors
///
/// [`PduError`] when the bytes cannot be a valid PDU; the connection should
/// be terminated with [`encode_term_req`].
pub fn decode_pdu(b: &[u8], digests: Digests, max_data: usize) -> Result<Option<Decoded<'_>>, PduError> {
    let Some(ch) = CommonHeader::parse(b) else {
        return Ok(None);
    };
    let layout = PduLayout::new(ch, digests, max_data)?;
    if b.len() < layout.total {
        return Ok(None);
    }
    let b = &b[..layout.total];
    layout.check_header_digest(b)?;
    let data = &b[layout.data_offset..layout.data_offset + layout.data_len];
    let pdu = match ch.pdu_type {
        PduType::IC_REQ | PduType::IC_RESP => {
            let mut ic = [0u8; IC_LEN];
            ic.copy_from_slice(b);
            let pfv = get_u16(&ic, IC_PFV_OFFSET);
            if pfv != 0 {
                return Err(PduError::Unsupported { field: "PFV", offset: IC_PFV_OFFSET, value: pfv.into() });
            }
            if ch.pdu_type == PduType::IC_REQ {
                Pdu::IcReq(IcReq::decode(&ic))
            } else {
                Pdu::IcResp(IcResp::decode(&ic))
            }
        }
        PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => {
            let t = TermReq { fes: get_u16(b, TERM_FES_OFFSET), fei: get_u32(b, TERM_FEI_OFFSET), error_data: data };
            if ch.pdu_type == PduType::H2C_TERM_REQ { Pdu::H2cTermReq(t) } else { Pdu::C2hTermReq(t) }
        }
        PduType::CAPSULE_CMD => {
            let mut sqe = [0u8; SQE_LEN];
            sqe.copy_from_slice(&b[CH_LEN..CAPSULE_CMD_HLEN]);
            Pdu::CapsuleCmd { sqe: Sqe(sqe), data }
        }
        PduType::CAPSULE_RESP => {
            let mut cqe = [0u8; CQE_LEN];
            cqe.copy_from_slice(&b[CH_LEN..CAPSULE_RESP_HLEN]);
            Pdu::CapsuleResp(Cqe::decode(&cqe))
        }
        PduType::H2C_DATA | PduType::C2H_DATA => {
            let header = DataHeader::decode(b);
            if header.datal as usize != layout.data_len {
                return Err(PduError::InvalidField { field: "DATAL", offset: DATA_LENGTH_OFFSET, value: header.datal });
            }
            if ch.pdu_type == PduType::H2C_DATA {
                Pdu::H2cData { header, flags: ch.flags, data }
            } else {
                Pdu::C2hData { header, flags: ch.flags, data }
            }
        }
        PduType::R2T => {
            let h = DataHeader::decode(b);
            Pdu::R2t(R2t { cccid: h.cccid, ttag: h.ttag, r2to: h.datao, r2tl: h.datal })
        }
        other => return Err(PduError::UnknownType(other.0)),
    };
    Ok(Some(Decoded { pdu, len: layout.total, data_digest_ok: layout.data_digest_ok(b) }))
}

/// An encoded PDU header (common header, type-specific part and header
/// digest) in a fixed buffer, ready to be written before the data.
#[derive(Clone, Copy)]
pub struct HeaderBuf {
    buf: [u8; MAX_HEADER_LEN],
    len: usize,
}

impl HeaderBuf {
    /// The header bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Debug for HeaderBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderBuf({:02x?})", self.as_slice())
    }
}

/// Builds a header of type `t` whose type-specific part is written by
/// `fill`, for a PDU carrying `data_len` data bytes.
fn build_header(t: PduType, flags: u8, data_len: usize, digests: Digests, fill: impl FnOnce(&mut [u8])) -> HeaderBuf {
    build_header_aligned(t, flags, data_len, digests, 0, fill)
}

/// As [`build_header`], with the data starting at a multiple of `align`
/// bytes (zero padding after the header, inside the returned buffer).
/// `align` is at most 128 (HPDA 31), so the padded header fits.
fn build_header_aligned(
    t: PduType,
    flags: u8,
    data_len: usize,
    digests: Digests,
    align: usize,
    fill: impl FnOnce(&mut [u8]),
) -> HeaderBuf {
    // Only called with the fixed-size types below.
    let hlen = t.hlen().unwrap_or(CH_LEN);
    let hdgst = digests.header && t.has_header_digest();
    let ddgst = digests.data && data_len > 0 && t.has_data_digest();
    let header_end = hlen + if hdgst { DIGEST_LEN } else { 0 };
    let data_start = if data_len > 0 && align > 1 {
        header_end.div_ceil(align).saturating_mul(align).min(MAX_HEADER_LEN)
    } else {
        header_end
    };
    let plen = data_start + data_len + if ddgst { DIGEST_LEN } else { 0 };
    let mut flags = flags;
    if hdgst {
        flags |= FLAG_HDGSTF;
    }
    if ddgst {
        flags |= FLAG_DDGSTF;
    }
    let pdo = if data_len > 0 { data_start as u8 } else { 0 };
    let mut h = HeaderBuf { buf: [0; MAX_HEADER_LEN], len: data_start };
    CommonHeader { pdu_type: t, flags, hlen: hlen as u8, pdo, plen: plen as u32 }.encode(&mut h.buf);
    fill(&mut h.buf[..hlen]);
    if hdgst {
        let d = digest_bytes(&h.buf[..hlen]);
        h.buf[hlen..hlen + DIGEST_LEN].copy_from_slice(&d);
    }
    h
}

/// Header of a CapsuleCmd carrying `data_len` bytes of in-capsule data
/// (the data, then its digest when enabled, follow).
pub fn encode_capsule_cmd(sqe: &Sqe, data_len: usize, digests: Digests) -> HeaderBuf {
    build_header(PduType::CAPSULE_CMD, 0, data_len, digests, |b| b[CH_LEN..CAPSULE_CMD_HLEN].copy_from_slice(&sqe.0))
}

/// A whole CapsuleResp PDU.
pub fn encode_capsule_resp(cqe: &Cqe, digests: Digests) -> HeaderBuf {
    build_header(PduType::CAPSULE_RESP, 0, 0, digests, |b| b[CH_LEN..CAPSULE_RESP_HLEN].copy_from_slice(&cqe.encode()))
}

/// Header of a C2HData PDU; `flags` may hold [`FLAG_DATA_LAST`] and
/// [`FLAG_DATA_SUCCESS`].
pub fn encode_c2h_data(header: &DataHeader, flags: u8, digests: Digests) -> HeaderBuf {
    build_header(PduType::C2H_DATA, flags, header.datal as usize, digests, |b| header.encode(b))
}

/// Header of a C2HData PDU whose data starts at a multiple of `align`
/// bytes, as a host's HPDA asks (`align = (HPDA + 1) * 4`); the padding
/// is part of the returned header.
pub fn encode_c2h_data_aligned(header: &DataHeader, flags: u8, digests: Digests, align: usize) -> HeaderBuf {
    build_header_aligned(PduType::C2H_DATA, flags, header.datal as usize, digests, align, |b| header.encode(b))
}

/// Header of an H2CData PDU; `flags` may hold [`FLAG_DATA_LAST`].
pub fn encode_h2c_data(header: &DataHeader, flags: u8, digests: Digests) -> HeaderBuf {
    build_header(PduType::H2C_DATA, flags, header.datal as usize, digests, |b| header.encode(b))
}

/// A whole R2T PDU.
pub fn encode_r2t(r2t: &R2t, digests: Digests) -> HeaderBuf {
    let h = DataHeader { cccid: r2t.cccid, ttag: r2t.ttag, datao: r2t.r2to, datal: r2t.r2tl };
    build_header(PduType::R2T, 0, 0, digests, |b| h.encode(b))
}

/// A whole termination request of type `t` (H2CTermReq or C2HTermReq)
/// carrying up to 128 bytes of the offending PDU header.
pub fn encode_term_req(t: PduType, fes: u16, fei: u32, offending: &[u8]) -> Vec<u8> {
    let n = offending.len().min(TERM_MAX_ERROR_DATA);
    let mut b = vec![0u8; TERM_HLEN + n];
    CommonHeader { pdu_type: t, flags: 0, hlen: TERM_HLEN as u8, pdo: 0, plen: (TERM_HLEN + n) as u32 }.encode(&mut b);
    put_u16(&mut b, TERM_FES_OFFSET, fes);
    put_u32(&mut b, TERM_FEI_OFFSET, fei);
    b[TERM_HLEN..].copy_from_slice(&offending[..n]);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVMe/TCP 1.0 section 3.6.2.1 and 3.6.2.5: with HPDA h, the data of
    /// a controller-to-host PDU starts at a multiple of (h + 1) * 4 bytes
    /// (PDO), the gap (PAD) after the header and its digest is zeros, and
    /// the data digest follows the data.
    #[test]
    fn c2h_data_honours_every_hpda() {
        let data: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        for hpda in 0..=HPDA_MAX {
            for digests in [Digests::default(), ALL_DIGESTS] {
                let align = (usize::from(hpda) + 1) * 4;
                let h = DataHeader { cccid: 9, ttag: 0, datao: 0, datal: data.len() as u32 };
                let head = encode_c2h_data_aligned(&h, FLAG_DATA_LAST, digests, align);
                let mut pdu = head.as_slice().to_vec();
                assert_eq!(pdu.len() % align, 0, "hpda {hpda}");
                let header_end = DATA_HLEN + if digests.header { DIGEST_LEN } else { 0 };
                assert!(pdu[header_end..].iter().all(|&b| b == 0), "padding is zeros");
                pdu.extend_from_slice(&data);
                if digests.data {
                    pdu.extend_from_slice(&digest_bytes(&data));
                }
                let d = decode_pdu(&pdu, digests, 1 << 20).unwrap().unwrap();
                assert_eq!(d.len, pdu.len());
                assert_eq!(usize::from(pdu[PDO_OFFSET]) % align, 0);
                let Pdu::C2hData { data: got, .. } = d.pdu else { panic!("not C2HData") };
                assert_eq!(got, &data[..]);
            }
        }
    }
    use crate::status::Status;
    use proptest::prelude::*;

    const ALL_DIGESTS: Digests = Digests { header: true, data: true };

    #[test]
    fn layout_matches_spec() {
        // struct nvme_tcp_hdr and the PDU structs of include/linux/nvme-tcp.h.
        assert_eq!((TYPE_OFFSET, FLAGS_OFFSET, HLEN_OFFSET, PDO_OFFSET, PLEN_OFFSET, CH_LEN), (0, 1, 2, 3, 4, 8));
        assert_eq!((IC_PFV_OFFSET, IC_PDA_OFFSET, IC_DGST_OFFSET, IC_MAX_OFFSET), (8, 10, 11, 12));
        assert_eq!((DATA_CCCID_OFFSET, DATA_TTAG_OFFSET, DATA_OFFSET_OFFSET, DATA_LENGTH_OFFSET), (8, 10, 12, 16));
        assert_eq!((TERM_FES_OFFSET, TERM_FEI_OFFSET), (8, 10));
        assert_eq!((CAPSULE_CMD_HLEN, CAPSULE_RESP_HLEN, DATA_HLEN, IC_LEN), (72, 24, 24, 128));
    }

    fn whole(header: HeaderBuf, data: &[u8], digests: Digests) -> Vec<u8> {
        let mut v = header.as_slice().to_vec();
        v.extend_from_slice(data);
        if digests.data && !data.is_empty() {
            v.extend_from_slice(&digest_bytes(data));
        }
        v
    }

    #[test]
    fn ic_round_trip() {
        let req = IcReq { pfv: 0, hpda: 0, digests: ALL_DIGESTS, maxr2t: 0 };
        let b = req.encode();
        let d = decode_pdu(&b, Digests::default(), 0).unwrap().unwrap();
        assert_eq!((d.pdu, d.len), (Pdu::IcReq(req), 128));
        let resp = IcResp { pfv: 0, cpda: 0, digests: Digests { header: true, data: false }, maxh2cdata: 131072 };
        let b = resp.encode();
        assert_eq!(decode_pdu(&b, Digests::default(), 0).unwrap().unwrap().pdu, Pdu::IcResp(resp));
    }

    #[test]
    fn unsupported_pfv_is_reported_at_its_offset() {
        let mut b = IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode();
        b[8] = 1;
        let e = decode_pdu(&b, Digests::default(), 0).unwrap_err();
        assert_eq!((e.fes(), e.fei()), (fes::UNSUPPORTED_PARAMETER, 8));
    }

    #[test]
    fn capsule_with_data_round_trips_with_and_without_digests() {
        for digests in [Digests::default(), ALL_DIGESTS, Digests { header: true, data: false }] {
            let mut sqe = Sqe::new(crate::command::io::WRITE, 42);
            sqe.set_nsid(1);
            let data = vec![0xabu8; 4096];
            let b = whole(encode_capsule_cmd(&sqe, data.len(), digests), &data, digests);
            let d = decode_pdu(&b, digests, 8192).unwrap().unwrap();
            assert_eq!(d.len, b.len());
            assert!(d.data_digest_ok);
            assert_eq!(d.pdu, Pdu::CapsuleCmd { sqe, data: &data });
            // Every strict prefix is "need more bytes", never an error.
            for cut in [0, 7, 8, 71, b.len() - 1] {
                assert_eq!(decode_pdu(&b[..cut], digests, 8192), Ok(None));
            }
        }
    }

    #[test]
    fn capsule_without_data() {
        let sqe = Sqe::new(crate::command::io::FLUSH, 1);
        let b = whole(encode_capsule_cmd(&sqe, 0, ALL_DIGESTS), &[], ALL_DIGESTS);
        assert_eq!(b.len(), 76);
        let d = decode_pdu(&b, ALL_DIGESTS, 0).unwrap().unwrap();
        assert_eq!(d.pdu, Pdu::CapsuleCmd { sqe, data: &[] });
    }

    #[test]
    fn response_data_and_r2t_round_trip() {
        let digests = ALL_DIGESTS;
        let cqe = Cqe::new(9, Status::INVALID_FIELD.dnr());
        let b = encode_capsule_resp(&cqe, digests);
        assert_eq!(b.as_slice().len(), 28);
        assert_eq!(decode_pdu(b.as_slice(), digests, 0).unwrap().unwrap().pdu, Pdu::CapsuleResp(cqe));

        let r2t = R2t { cccid: 3, ttag: 5, r2to: 4096, r2tl: 8192 };
        let b = encode_r2t(&r2t, digests);
        assert_eq!(decode_pdu(b.as_slice(), digests, 0).unwrap().unwrap().pdu, Pdu::R2t(r2t));

        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let header = DataHeader { cccid: 3, ttag: 0, datao: 16, datal: 8 };
        let b = whole(encode_c2h_data(&header, FLAG_DATA_LAST | FLAG_DATA_SUCCESS, digests), &data, digests);
        let d = decode_pdu(&b, digests, 64).unwrap().unwrap();
        assert_eq!(
            d.pdu,
            Pdu::C2hData { header, flags: FLAG_DATA_LAST | FLAG_DATA_SUCCESS | FLAG_HDGSTF | FLAG_DDGSTF, data: &data }
        );
        let header = DataHeader { cccid: 3, ttag: 5, datao: 0, datal: 8 };
        let b = whole(encode_h2c_data(&header, FLAG_DATA_LAST, Digests::default()), &data, Digests::default());
        let d = decode_pdu(&b, Digests::default(), 64).unwrap().unwrap();
        assert_eq!(d.pdu, Pdu::H2cData { header, flags: FLAG_DATA_LAST, data: &data });
    }

    #[test]
    fn corrupt_data_digest_is_flagged_not_fatal() {
        let sqe = Sqe::new(crate::command::io::WRITE, 1);
        let mut b = whole(encode_capsule_cmd(&sqe, 8, ALL_DIGESTS), &[7; 8], ALL_DIGESTS);
        let last = b.len() - 1;
        b[last] ^= 1;
        let d = decode_pdu(&b, ALL_DIGESTS, 64).unwrap().unwrap();
        assert!(!d.data_digest_ok);
    }

    #[test]
    fn corrupt_header_digest_is_fatal() {
        let b = encode_capsule_resp(&Cqe::new(1, Status::SUCCESS), ALL_DIGESTS);
        let mut b = b.as_slice().to_vec();
        b[12] ^= 0x10;
        let e = decode_pdu(&b, ALL_DIGESTS, 0).unwrap_err();
        assert!(matches!(e, PduError::HeaderDigest { .. }));
        assert_eq!(e.fes(), fes::HEADER_DIGEST_ERROR);
    }

    #[test]
    fn each_header_field_error_names_its_offset() {
        let sqe = Sqe::new(crate::command::io::WRITE, 1);
        let good = whole(encode_capsule_cmd(&sqe, 16, Digests::default()), &[0; 16], Digests::default());
        let check = |mutate: &dyn Fn(&mut Vec<u8>), fes_: u16, fei: u32| {
            let mut b = good.clone();
            mutate(&mut b);
            let e = decode_pdu(&b, Digests::default(), 1024).unwrap_err();
            assert_eq!((e.fes(), e.fei()), (fes_, fei), "{e}");
        };
        check(&|b| b[0] = 0x08, fes::INVALID_HEADER_FIELD, 0);
        check(&|b| b[2] = 71, fes::INVALID_HEADER_FIELD, 2);
        check(&|b| b[1] |= FLAG_HDGSTF, fes::INVALID_HEADER_FIELD, 1);
        check(&|b| b[1] |= FLAG_DDGSTF, fes::INVALID_HEADER_FIELD, 1);
        check(&|b| b[3] = 10, fes::INVALID_HEADER_FIELD, 3);
        check(&|b| b[3] = 200, fes::INVALID_HEADER_FIELD, 3);
        check(&|b| b[4..8].copy_from_slice(&70u32.to_le_bytes()), fes::INVALID_HEADER_FIELD, 4);
        // More data than the in-capsule limit.
        let e = decode_pdu(&good, Digests::default(), 8).unwrap_err();
        assert_eq!(e, PduError::DataLimitExceeded { len: 16, max: 8 });
        assert_eq!(e.fes(), fes::DATA_LIMIT_EXCEEDED);
    }

    #[test]
    fn data_pdu_with_wrong_datal_is_rejected() {
        let header = DataHeader { cccid: 1, ttag: 1, datao: 0, datal: 8 };
        let mut b = whole(encode_h2c_data(&header, 0, Digests::default()), &[0; 8], Digests::default());
        b[DATA_LENGTH_OFFSET] = 9;
        let e = decode_pdu(&b, Digests::default(), 64).unwrap_err();
        assert_eq!(e.fei(), DATA_LENGTH_OFFSET as u32);
    }

    #[test]
    fn term_req_round_trip_and_cap() {
        let offending = [0xeeu8; 200];
        let b = encode_term_req(PduType::C2H_TERM_REQ, fes::PDU_SEQUENCE_ERROR, 0, &offending);
        assert_eq!(b.len(), 152);
        let d = decode_pdu(&b, ALL_DIGESTS, 0).unwrap().unwrap();
        assert_eq!(
            d.pdu,
            Pdu::C2hTermReq(TermReq { fes: fes::PDU_SEQUENCE_ERROR, fei: 0, error_data: &offending[..128] })
        );
    }

    proptest! {
        /// Any byte string either decodes, asks for more, or is an error;
        /// a decoded PDU never claims more bytes than it was given.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300), h: bool, d: bool) {
            let digests = Digests { header: h, data: d };
            if let Ok(Some(dec)) = decode_pdu(&b, digests, 256) {
                prop_assert!(dec.len <= b.len());
            }
        }

        #[test]
        fn capsules_round_trip(cid: u16, nsid: u32, len in 0usize..600, h: bool, d: bool) {
            let digests = Digests { header: h, data: d };
            let mut sqe = Sqe::new(crate::command::io::WRITE, cid);
            sqe.set_nsid(nsid);
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let b = whole(encode_capsule_cmd(&sqe, len, digests), &data, digests);
            let dec = decode_pdu(&b, digests, 600).unwrap().unwrap();
            prop_assert_eq!(dec.pdu, Pdu::CapsuleCmd { sqe, data: &data });
            prop_assert_eq!(dec.len, b.len());
        }
    }
}
