//! NVMe over Fabrics commands and controller properties (NVMe-oF 1.1,
//! chapter 3; NVMe Base 2.0, section 3.1.3 for the registers).
//!
//! Fabrics commands share opcode 0x7F and are told apart by FCTYPE in byte
//! 4 of the entry. Connect (FCTYPE 0x01):
//!
//! | SQE offset | size | field                               |
//! |------------|------|-------------------------------------|
//! | 40         | 2    | RECFMT: record format (0)           |
//! | 42         | 2    | QID: queue to create (0 = admin)    |
//! | 44         | 2    | SQSIZE: queue size, 0-based         |
//! | 46         | 1    | CATTR: connect attributes           |
//! | 48         | 4    | KATO: keep alive timeout (ms)       |
//!
//! Its 1024-byte data:
//!
//! | offset | size | field                               |
//! |--------|------|-------------------------------------|
//! | 0      | 16   | HOSTID                              |
//! | 16     | 2    | CNTLID (0xFFFF: dynamic)            |
//! | 256    | 256  | SUBNQN, NUL-terminated              |
//! | 512    | 256  | HOSTNQN, NUL-terminated             |
//!
//! Property Get (FCTYPE 0x04): ATTRIB (size, bits 0-2: 0 = 4 bytes,
//! 1 = 8 bytes) at 40, OFST at 44. Property Set (0x00): ATTRIB at 40, OFST
//! at 44, VALUE at 48.

use crate::codec::{get_str, get_u16, get_u32, get_u64, put_str, put_u16, put_u32, put_u64};
use crate::command::Sqe;

/// Opcode of every fabrics command.
pub const FABRICS_OPCODE: u8 = 0x7F;

/// Fabrics command types (NVMe-oF 1.1, figure 11).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECEIVE: u8 = 0x06;
    /// Disconnect.
    pub const DISCONNECT: u8 = 0x08;
}

/// The well-known NQN of a discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Longest NQN in bytes, without the NUL (NVMe Base 2.0, section 4.5).
pub const NQN_MAX_LEN: usize = 223;
/// Controller ID a host sends to ask for any controller (dynamic model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Connect response DW0 bit 17, ATR: the host must authenticate the
/// queue (DH-HMAC-CHAP) before anything else (Linux
/// `NVME_CONNECT_AUTHREQ_ATR`).
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response DW0 bit 18, ASCR: authentication and a secure
/// channel are required (secure channel concatenation; strata never sets it).
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;

/// Offset of RECFMT in a Connect entry.
pub const CONNECT_RECFMT_OFFSET: usize = 40;
/// Offset of QID in a Connect entry.
pub const CONNECT_QID_OFFSET: usize = CONNECT_RECFMT_OFFSET + 2;
/// Offset of SQSIZE in a Connect entry.
pub const CONNECT_SQSIZE_OFFSET: usize = CONNECT_QID_OFFSET + 2;
/// Offset of CATTR in a Connect entry.
pub const CONNECT_CATTR_OFFSET: usize = CONNECT_SQSIZE_OFFSET + 2;
/// Offset of KATO in a Connect entry.
pub const CONNECT_KATO_OFFSET: usize = CONNECT_CATTR_OFFSET + 2;

/// Size of the Connect data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Offset of HOSTID in the Connect data.
pub const CONNECT_HOSTID_OFFSET: usize = 0;
/// Offset of CNTLID in the Connect data.
pub const CONNECT_CNTLID_OFFSET: usize = CONNECT_HOSTID_OFFSET + 16;
/// Offset of SUBNQN in the Connect data.
pub const CONNECT_SUBNQN_OFFSET: usize = 256;
/// Offset of HOSTNQN in the Connect data.
pub const CONNECT_HOSTNQN_OFFSET: usize = CONNECT_SUBNQN_OFFSET + 256;
/// Size of each NQN field in the Connect data.
pub const CONNECT_NQN_FIELD_LEN: usize = 256;

/// Offset of ATTRIB in Property Get/Set.
pub const PROPERTY_ATTRIB_OFFSET: usize = 40;
/// Offset of OFST in Property Get/Set.
pub const PROPERTY_OFFSET_OFFSET: usize = 44;
/// Offset of VALUE in Property Set.
pub const PROPERTY_VALUE_OFFSET: usize = 48;

/// Fields of a Connect command entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record format; only 0 is defined.
    pub recfmt: u16,
    /// Queue to create: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Connect attributes.
    pub cattr: u8,
    /// Keep alive timeout in milliseconds (admin queue only).
    pub kato: u32,
}

impl ConnectCmd {
    /// Decodes a Connect entry's fields.
    pub fn decode(sqe: &Sqe) -> ConnectCmd {
        let b = sqe.bytes();
        ConnectCmd {
            recfmt: get_u16(b, CONNECT_RECFMT_OFFSET),
            qid: get_u16(b, CONNECT_QID_OFFSET),
            sqsize: get_u16(b, CONNECT_SQSIZE_OFFSET),
            cattr: b[CONNECT_CATTR_OFFSET],
            kato: get_u32(b, CONNECT_KATO_OFFSET),
        }
    }

    /// Writes these fields (and the fabrics opcode and type) into `sqe`.
    pub fn encode(&self, sqe: &mut Sqe) {
        sqe.bytes_mut()[0] = FABRICS_OPCODE;
        sqe.set_fctype(fctype::CONNECT);
        let b = sqe.bytes_mut();
        put_u16(b, CONNECT_RECFMT_OFFSET, self.recfmt);
        put_u16(b, CONNECT_QID_OFFSET, self.qid);
        put_u16(b, CONNECT_SQSIZE_OFFSET, self.sqsize);
        b[CONNECT_CATTR_OFFSET] = self.cattr;
        put_u32(b, CONNECT_KATO_OFFSET, self.kato);
    }
}

/// Why Connect data is unacceptable; each names the field, for the
/// IATTR/IPO result of a Connect Invalid Parameters status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectDataError {
    /// The data is shorter than 1024 bytes.
    #[error("connect data is {0} bytes, expected 1024")]
    Short(usize),
    /// An NQN field is not NUL-terminated UTF-8 of at most 223 bytes, or
    /// SUBNQN is empty.
    #[error("{field} in connect data is not a valid NQN")]
    BadNqn {
        /// Which field.
        field: &'static str,
        /// Its offset in the data.
        offset: usize,
    },
}

impl ConnectDataError {
    /// Byte offset of the offending field in the Connect data.
    pub fn offset(&self) -> usize {
        match self {
            ConnectDataError::Short(_) => 0,
            ConnectDataError::BadNqn { offset, .. } => *offset,
        }
    }
}

/// The Connect command's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Requested controller ID (0xFFFF for dynamic).
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
}

impl ConnectData {
    /// Decodes and validates Connect data.
    ///
    /// An empty HOSTNQN is accepted: SPDK's initiator sends one when its
    /// application set none, and both SPDK's target and Linux nvmet let it
    /// connect wherever any host may. Whether it may connect is the
    /// subsystem's access list's decision, not a format error. An empty
    /// SUBNQN names nothing and is refused.
    ///
    /// # Errors
    ///
    /// [`ConnectDataError`] naming the first bad field.
    pub fn decode(b: &[u8]) -> Result<ConnectData, ConnectDataError> {
        if b.len() < CONNECT_DATA_LEN {
            return Err(ConnectDataError::Short(b.len()));
        }
        let nqn = |off: usize, field: &'static str, may_be_empty: bool| -> Result<String, ConnectDataError> {
            let raw = &b[off..off + CONNECT_NQN_FIELD_LEN];
            let len = raw.iter().position(|&c| c == 0).unwrap_or(CONNECT_NQN_FIELD_LEN);
            let s = get_str(b, off, CONNECT_NQN_FIELD_LEN)
                .filter(|s| (may_be_empty || !s.is_empty()) && len <= NQN_MAX_LEN);
            s.map(str::to_owned).ok_or(ConnectDataError::BadNqn { field, offset: off })
        };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[CONNECT_HOSTID_OFFSET..CONNECT_HOSTID_OFFSET + 16]);
        Ok(ConnectData {
            hostid,
            cntlid: get_u16(b, CONNECT_CNTLID_OFFSET),
            subnqn: nqn(CONNECT_SUBNQN_OFFSET, "SUBNQN", false)?,
            hostnqn: nqn(CONNECT_HOSTNQN_OFFSET, "HOSTNQN", true)?,
        })
    }

    /// SUBNQN and HOSTNQN of possibly invalid Connect data as text (up to
    /// the first NUL, invalid UTF-8 replaced, missing bytes empty), for
    /// naming them when a Connect is refused, even for bad data.
    pub fn nqns_lossy(b: &[u8]) -> (String, String) {
        let field = |off: usize| {
            let f = b.get(off..(off + CONNECT_NQN_FIELD_LEN).min(b.len())).unwrap_or(&[]);
            let end = f.iter().position(|&c| c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).into_owned()
        };
        (field(CONNECT_SUBNQN_OFFSET), field(CONNECT_HOSTNQN_OFFSET))
    }

    /// Encodes the data (NQNs longer than their field are cut).
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[CONNECT_HOSTID_OFFSET..CONNECT_HOSTID_OFFSET + 16].copy_from_slice(&self.hostid);
        put_u16(&mut b, CONNECT_CNTLID_OFFSET, self.cntlid);
        put_str(&mut b, CONNECT_SUBNQN_OFFSET, CONNECT_NQN_FIELD_LEN - 1, &self.subnqn, 0);
        put_str(&mut b, CONNECT_HOSTNQN_OFFSET, CONNECT_NQN_FIELD_LEN - 1, &self.hostnqn, 0);
        b
    }
}

/// Shift of IPO (Invalid Parameter Offset) in a Connect response's DW0.
pub const CONNECT_RSP_IPO_SHIFT: u32 = 0;
/// Width of IPO in bits.
pub const CONNECT_RSP_IPO_BITS: u32 = 16;
/// Shift of IATTR (Invalid Attributes) in a Connect response's DW0.
pub const CONNECT_RSP_IATTR_SHIFT: u32 = CONNECT_RSP_IPO_SHIFT + CONNECT_RSP_IPO_BITS;
/// IATTR bit 0: the invalid parameter is in the Connect data (cleared: in
/// the SQE).
pub const CONNECT_RSP_IATTR_IN_DATA: u8 = 1 << 0;

/// Where a refused Connect's invalid parameter is: the Status Code Specific
/// DW0 of a Connect response with Connect Invalid Parameters (or Connect
/// Invalid Host), NVMe over Fabrics 1.1 section 3.3 "Connect Response":
///
/// | DW0 bits | field                                              |
/// |----------|----------------------------------------------------|
/// | 15:00    | IPO: byte offset of the parameter                  |
/// | 23:16    | IATTR: bit 0 set = in the Connect data, clear = SQE |
/// | 31:24    | reserved                                           |
///
/// Linux builds it with `IPO_IATTR_CONNECT_DATA(x)` = `(1 << 16) | offset`
/// (`drivers/nvme/target/nvmet.h`) and reads it back with `offset >> 16`
/// and `offset & 0xffff` (`nvmf_log_connect_error`); SPDK's
/// `struct spdk_nvmf_fabric_connect_rsp` has `uint16_t ipo; uint8_t iattr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectInvalidParam {
    /// IATTR bit 0: the parameter is in the Connect data, not the SQE.
    pub in_data: bool,
    /// IPO: its byte offset in the data or the SQE.
    pub offset: u16,
}

impl ConnectInvalidParam {
    /// The DW0 value carrying this location.
    pub fn to_dw0(self) -> u32 {
        let iattr = if self.in_data { CONNECT_RSP_IATTR_IN_DATA } else { 0 };
        (u32::from(self.offset) << CONNECT_RSP_IPO_SHIFT) | (u32::from(iattr) << CONNECT_RSP_IATTR_SHIFT)
    }

    /// Reads the location from a Connect response's DW0; reserved bits and
    /// IATTR bits 7:1 are ignored.
    pub fn from_dw0(dw0: u32) -> ConnectInvalidParam {
        let iattr = (dw0 >> CONNECT_RSP_IATTR_SHIFT) as u8;
        ConnectInvalidParam {
            in_data: iattr & CONNECT_RSP_IATTR_IN_DATA != 0,
            offset: (dw0 >> CONNECT_RSP_IPO_SHIFT) as u16,
        }
    }
}

/// Completion DW0 for Connect Invalid Parameters naming the field at
/// `offset` of the Connect data (`in_data`) or the SQE; see
/// [`ConnectInvalidParam`].
pub fn connect_invalid_param_result(in_data: bool, offset: u16) -> u32 {
    ConnectInvalidParam { in_data, offset }.to_dw0()
}

/// Fields of Property Get and Property Set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyCmd {
    /// True for an 8-byte property access, false for 4 bytes.
    pub eight_bytes: bool,
    /// Property offset (a register offset below).
    pub offset: u32,
    /// Value to set (Property Set only).
    pub value: u64,
}

impl PropertyCmd {
    /// Decodes a Property Get/Set entry.
    pub fn decode(sqe: &Sqe) -> PropertyCmd {
        let b = sqe.bytes();
        PropertyCmd {
            eight_bytes: b[PROPERTY_ATTRIB_OFFSET] & 0x7 == 1,
            offset: get_u32(b, PROPERTY_OFFSET_OFFSET),
            value: get_u64(b, PROPERTY_VALUE_OFFSET),
        }
    }

    /// Writes a Property Get (`set == false`) or Set into `sqe`.
    pub fn encode(&self, sqe: &mut Sqe, set: bool) {
        sqe.bytes_mut()[0] = FABRICS_OPCODE;
        sqe.set_fctype(if set { fctype::PROPERTY_SET } else { fctype::PROPERTY_GET });
        let b = sqe.bytes_mut();
        b[PROPERTY_ATTRIB_OFFSET] = u8::from(self.eight_bytes);
        put_u32(b, PROPERTY_OFFSET_OFFSET, self.offset);
        if set {
            put_u64(b, PROPERTY_VALUE_OFFSET, self.value);
        }
    }
}

/// Controller registers exposed as fabrics properties (NVMe Base 2.0,
/// figure 35) and their fields.
pub mod reg {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;

    /// CC.EN: enable.
    pub const CC_EN: u32 = 1 << 0;
    /// CC.SHN: shutdown notification, bits 14-15.
    pub const CC_SHN_SHIFT: u32 = 14;
    /// CC.IOSQES shift (bits 16-19).
    pub const CC_IOSQES_SHIFT: u32 = 16;
    /// CC.IOCQES shift (bits 20-23).
    pub const CC_IOCQES_SHIFT: u32 = 20;
    /// CC.CSS shift (bits 4-6).
    pub const CC_CSS_SHIFT: u32 = 4;
    /// CC.MPS shift (bits 7-10).
    pub const CC_MPS_SHIFT: u32 = 7;

    /// CSTS.RDY.
    pub const CSTS_RDY: u32 = 1 << 0;
    /// CSTS.CFS: controller fatal status.
    pub const CSTS_CFS: u32 = 1 << 1;
    /// CSTS.SHST = 10b: shutdown processing complete.
    pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;

    /// NVMe version 1.4.0 in VS format.
    pub const VERSION_1_4: u32 = 0x0001_0400;

    /// Builds CAP: `mqes` (0-based maximum queue entries), `timeout_500ms`
    /// (CAP.TO, worst-case time to ready in 500 ms units); NVM command set
    /// supported (CSS bit 37), contiguous queues required (CQR),
    /// MPSMIN = MPSMAX = 0 (4 KiB).
    pub fn cap(mqes: u16, timeout_500ms: u8) -> u64 {
        u64::from(mqes) | (1 << 16) | (u64::from(timeout_500ms) << 24) | (1 << 37)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_spec() {
        // struct nvmf_connect_command / nvmf_connect_data in include/linux/nvme.h.
        assert_eq!(
            (
                CONNECT_RECFMT_OFFSET,
                CONNECT_QID_OFFSET,
                CONNECT_SQSIZE_OFFSET,
                CONNECT_CATTR_OFFSET,
                CONNECT_KATO_OFFSET
            ),
            (40, 42, 44, 46, 48)
        );
        assert_eq!((CONNECT_CNTLID_OFFSET, CONNECT_SUBNQN_OFFSET, CONNECT_HOSTNQN_OFFSET), (16, 256, 512));
        // struct nvmf_property_get_command / _set_command.
        assert_eq!((PROPERTY_ATTRIB_OFFSET, PROPERTY_OFFSET_OFFSET, PROPERTY_VALUE_OFFSET), (40, 44, 48));
    }

    #[test]
    fn connect_round_trip() {
        let c = ConnectCmd { recfmt: 0, qid: 3, sqsize: 127, cattr: 0, kato: 5000 };
        let mut s = Sqe::new(FABRICS_OPCODE, 9);
        c.encode(&mut s);
        assert_eq!(s.fctype(), fctype::CONNECT);
        assert_eq!(ConnectCmd::decode(&s), c);
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: "nqn.2026-11.io.strata:vol".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1234".into(),
        };
        assert_eq!(ConnectData::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn bad_connect_data_names_the_field() {
        assert_eq!(ConnectData::decode(&[0; 10]), Err(ConnectDataError::Short(10)));
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[CONNECT_HOSTNQN_OFFSET] = b'h';
        // Empty SUBNQN.
        let e = ConnectData::decode(&b).unwrap_err();
        assert_eq!(e.offset(), 256);
        // Unterminated 256-byte HOSTNQN is longer than 223 bytes.
        b[CONNECT_SUBNQN_OFFSET] = b's';
        b[CONNECT_HOSTNQN_OFFSET..].fill(b'h');
        assert_eq!(ConnectData::decode(&b).unwrap_err().offset(), 512);
        // Not UTF-8.
        b[CONNECT_HOSTNQN_OFFSET..].fill(0);
        b[CONNECT_HOSTNQN_OFFSET] = 0xff;
        assert_eq!(ConnectData::decode(&b).unwrap_err().offset(), 512);
    }

    /// SPDK's initiator sends an empty HOSTNQN when none was configured;
    /// SPDK's target and nvmet accept it (access lists decide).
    #[test]
    fn empty_hostnqn_decodes_and_empty_subnqn_does_not() {
        let d = ConnectData { hostid: [1; 16], cntlid: CNTLID_DYNAMIC, subnqn: "nqn.s".into(), hostnqn: String::new() };
        assert_eq!(ConnectData::decode(&d.encode()), Ok(d.clone()));
        let no_sub = ConnectData { subnqn: String::new(), hostnqn: "nqn.h".into(), ..d };
        assert_eq!(ConnectData::decode(&no_sub.encode()).unwrap_err().offset(), CONNECT_SUBNQN_OFFSET);
    }

    #[test]
    fn nqns_lossy_reads_whatever_is_there() {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[CONNECT_SUBNQN_OFFSET..CONNECT_SUBNQN_OFFSET + 3].copy_from_slice(b"s\xffq");
        b[CONNECT_HOSTNQN_OFFSET..].fill(b'h');
        let (sub, host) = ConnectData::nqns_lossy(&b);
        assert_eq!(sub, "s\u{fffd}q");
        assert_eq!(host, "h".repeat(CONNECT_NQN_FIELD_LEN));
        assert_eq!(ConnectData::nqns_lossy(&b[..300]), ("s\u{fffd}q".into(), String::new()));
        assert_eq!(ConnectData::nqns_lossy(&[]), (String::new(), String::new()));
    }

    #[test]
    fn property_round_trip() {
        let p = PropertyCmd { eight_bytes: true, offset: reg::CAP, value: 0 };
        let mut s = Sqe::new(0, 1);
        p.encode(&mut s, false);
        assert_eq!(s.fctype(), fctype::PROPERTY_GET);
        assert_eq!(PropertyCmd::decode(&s), p);
        let p = PropertyCmd { eight_bytes: false, offset: reg::CC, value: 0x460001 };
        p.encode(&mut s, true);
        assert_eq!(PropertyCmd::decode(&s), p);
    }

    #[test]
    fn cap_fields() {
        let cap = reg::cap(1023, 30);
        assert_eq!(cap & 0xffff, 1023);
        assert_eq!((cap >> 24) & 0xff, 30);
        assert_ne!(cap & (1 << 37), 0);
    }

    /// Regression: DW0 used to carry IATTR in byte 0 and IPO in bytes 3:2,
    /// so hosts read "SQE offset 1" for a bad SUBNQN. NVMe over Fabrics 1.1
    /// section 3.3 (Connect Response) puts IPO in bits 15:00 and IATTR in
    /// bits 23:16; Linux nvmet's `IPO_IATTR_CONNECT_DATA(subsysnqn)` is
    /// `(1 << 16) | 256` and `IPO_IATTR_CONNECT_SQE(qid)` is `42`.
    #[test]
    fn connect_invalid_param_dw0_matches_spec_and_nvmet() {
        assert_eq!((CONNECT_RSP_IPO_SHIFT, CONNECT_RSP_IATTR_SHIFT), (0, 16));
        assert_eq!(connect_invalid_param_result(true, CONNECT_SUBNQN_OFFSET as u16), (1 << 16) | 256);
        assert_eq!(connect_invalid_param_result(true, CONNECT_HOSTNQN_OFFSET as u16), 0x0001_0200);
        assert_eq!(connect_invalid_param_result(false, CONNECT_QID_OFFSET as u16), 42);
        assert_eq!(connect_invalid_param_result(true, CONNECT_HOSTID_OFFSET as u16), 0x0001_0000);
        // Little-endian DW0 bytes as SPDK's `invalid.ipo` (u16) and
        // `invalid.iattr` (u8) see them.
        assert_eq!(connect_invalid_param_result(true, 0x0123).to_le_bytes(), [0x23, 0x01, 0x01, 0x00]);
    }

    #[test]
    fn connect_invalid_param_round_trips_and_ignores_reserved_bits() {
        for in_data in [false, true] {
            for offset in [0u16, 16, 44, 256, 512, 1023, u16::MAX] {
                let p = ConnectInvalidParam { in_data, offset };
                assert_eq!(ConnectInvalidParam::from_dw0(p.to_dw0()), p);
                assert_eq!(ConnectInvalidParam::from_dw0(p.to_dw0() | 0xff00_0000 | (0xfe << 16)), p);
            }
        }
    }
}
