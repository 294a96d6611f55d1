//! Identify data structures returned by the Admin Identify command.
//!
//! This module owns the 4096-byte data buffers for the CNS values a
//! fabrics target answers: Identify Controller (CNS 01h), Identify
//! Namespace (CNS 00h), the Active Namespace ID list (CNS 02h, and CNS 07h
//! for one I/O Command Set), the Namespace Identification Descriptor list
//! (CNS 03h), the NVM Command Set specific Identify Controller (CNS 06h,
//! CSI 00h) and the I/O Command Set Independent Identify Namespace (CNS
//! 08h). It encodes them for
//! the target and decodes them for the host library. Deciding *which*
//! values to report (MDTS, IOCCSZ, which namespaces are active) belongs to
//! the target; the Identify command itself is parsed in [`crate::command`].
//!
//! Every structure is a plain Rust struct holding the fields a target sets.
//! Fields this crate does not model (reserved bytes, host memory buffer,
//! telemetry, NVMe-MI, vendor specific) encode as zero and are ignored on
//! decode, so `decode(encode(x)) == x` for every value whose strings fit
//! their fields. Strings longer than their field are cut on a character
//! boundary; ASCII fields (SN, MN, FR) are space padded and the NQN field is
//! NUL padded, as the spec requires.
//!
//! Offsets come from the NVMe Base Specification 2.0 ("Identify Controller
//! Data Structure", "Namespace Identification Descriptor") and the NVM
//! Command Set Specification 1.0 ("Identify Namespace Data Structure"), and
//! match Linux `include/linux/nvme.h` (`struct nvme_id_ctrl`,
//! `struct nvme_id_ns`, `struct nvme_ns_id_desc`). The tests pin each one.
//!
//! # Format: Identify Controller (CNS 01h), 4096 bytes
//!
//! | Bytes       | Field      | Bytes       | Field      |
//! |-------------|------------|-------------|------------|
//! | 01:00       | VID        | 263         | NPSS       |
//! | 03:02       | SSVID      | 267:266     | WCTEMP     |
//! | 23:04       | SN         | 269:268     | CCTEMP     |
//! | 63:24       | MN         | 321:320     | KAS        |
//! | 71:64       | FR         | 342         | ANATT      |
//! | 72          | RAB        | 343         | ANACAP     |
//! | 75:73       | IEEE       | 347:344     | ANAGRPMAX  |
//! | 76          | CMIC       | 351:348     | NANAGRPID  |
//! | 77          | MDTS       | 512         | SQES       |
//! | 79:78       | CNTLID     | 513         | CQES       |
//! | 83:80       | VER        | 515:514     | MAXCMD     |
//! | 87:84       | RTD3R      | 519:516     | NN         |
//! | 91:88       | RTD3E      | 521:520     | ONCS       |
//! | 95:92       | OAES       | 523:522     | FUSES      |
//! | 99:96       | CTRATT     | 524         | FNA        |
//! | 111         | CNTRLTYPE  | 525         | VWC        |
//! | 127:112     | FGUID      | 527:526     | AWUN       |
//! | 257:256     | OACS       | 529:528     | AWUPF      |
//! | 258         | ACL        | 533:532     | ACWU       |
//! | 259         | AERL       | 539:536     | SGLS       |
//! | 260         | FRMW       | 543:540     | MNAN       |
//! | 261         | LPA        | 1023:768    | SUBNQN     |
//! | 262         | ELPE       | 1795:1792   | IOCCSZ     |
//! |             |            | 1799:1796   | IORCSZ     |
//! |             |            | 1801:1800   | ICDOFF     |
//! |             |            | 1802        | FCATT      |
//! |             |            | 1803        | MSDBD      |
//! |             |            | 1805:1804   | OFCS       |
//! |             |            | 2079:2048   | PSD0       |
//!
//! Power State Descriptor (32 bytes): MP 01:00, MXPS/NOPS 03, ENLAT 07:04,
//! EXLAT 11:08, RRT 12, RRL 13, RWT 14, RWL 15, IDLP 17:16, IPS 18,
//! ACTP 21:20, APW/APS 22.
//!
//! # Format: Identify Namespace (CNS 00h), 4096 bytes
//!
//! | Bytes   | Field   | Bytes   | Field    |
//! |---------|---------|---------|----------|
//! | 07:00   | NSZE    | 45:44   | NABSPF   |
//! | 15:08   | NCAP    | 47:46   | NOIOB    |
//! | 23:16   | NUSE    | 63:48   | NVMCAP   |
//! | 24      | NSFEAT  | 65:64   | NPWG     |
//! | 25      | NLBAF   | 67:66   | NPWA     |
//! | 26      | FLBAS   | 69:68   | NPDG     |
//! | 27      | MC      | 71:70   | NPDA     |
//! | 28      | DPC     | 73:72   | NOWS     |
//! | 29      | DPS     | 95:92   | ANAGRPID |
//! | 30      | NMIC    | 99      | NSATTR   |
//! | 31      | RESCAP  | 101:100 | NVMSETID |
//! | 32      | FPI     | 103:102 | ENDGID   |
//! | 33      | DLFEAT  | 119:104 | NGUID    |
//! | 35:34   | NAWUN   | 127:120 | EUI64    |
//! | 37:36   | NAWUPF  | 383:128 | LBAF0..LBAF63 (4 bytes each: MS 01:00, LBADS 02, RP 03) |
//! | 39:38   | NACWU   |         |          |
//! | 41:40   | NABSN   |         |          |
//! | 43:42   | NABO    |         |          |
//!
//! # Format: NVM Command Set Identify Controller (CNS 06h, CSI 00h), 4096 bytes
//!
//! NVM Command Set Specification 1.0, "I/O Command Set Specific Identify
//! Controller Data Structure for the NVM Command Set"; Linux
//! `struct nvme_id_ctrl_nvm`, SPDK `struct spdk_nvme_nvm_ctrlr_data`.
//!
//! | Bytes | Field | Meaning                                         |
//! |-------|-------|-------------------------------------------------|
//! | 0     | VSL   | Verify Size Limit, 2^n CAP.MPSMIN units; 0 none |
//! | 1     | WZSL  | Write Zeroes Size Limit, same units; 0 none     |
//! | 2     | WUSL  | Write Uncorrectable Size Limit; 0 none          |
//! | 3     | DMRL  | Dataset Management Ranges Limit; 0 none         |
//! | 7:4   | DMRSL | DSM Range Size Limit, logical blocks; 0 none    |
//! | 15:8  | DMSL  | DSM Size Limit, logical blocks; 0 none          |
//! | 4095:16 | reserved |                                             |
//!
//! # Format: I/O Command Set Independent Identify Namespace (CNS 08h), 4096 bytes
//!
//! NVMe Base 2.0, "I/O Command Set Independent Identify Namespace Data
//! Structure"; Linux `struct nvme_id_ns_cs_indep`.
//!
//! | Bytes | Field    | Bytes | Field    |
//! |-------|----------|-------|----------|
//! | 0     | NSFEAT   | 8     | NSATTR   |
//! | 1     | NMIC     | 11:10 | NVMSETID |
//! | 2     | RESCAP   | 13:12 | ENDGID   |
//! | 3     | FPI      | 14    | NSTAT    |
//! | 7:4   | ANAGRPID |       |          |
//!
//! # Format: Active Namespace ID list (CNS 02h)
//!
//! Up to 1024 little-endian `u32` NSIDs, ascending, each greater than the
//! NSID in the command; unused entries are zero.
//!
//! # Format: Namespace Identification Descriptor list (CNS 03h)
//!
//! A sequence of descriptors, each NIDT (byte 0), NIDL (byte 1), reserved
//! (bytes 03:02) and NIDL bytes of NID. A descriptor with NIDL 0 ends the
//! list (the rest of the 4096 bytes is zero).

use crate::codec::{get_str, get_u16, get_u32, get_u64, get_u128, put_str, put_u16, put_u32, put_u64, put_u128};

/// Size of every Identify data buffer (`NVME_IDENTIFY_DATA_SIZE`).
pub const IDENTIFY_DATA_LEN: usize = 4096;

/// Controller or Namespace Structure (CNS), CDW10 bits 07:00 of Identify.
///
/// An open set: values this crate has no name for are still representable,
/// so a target can answer them with Invalid Field instead of failing to
/// parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cns(pub u8);

impl Cns {
    /// Identify Namespace data structure for the given NSID.
    pub const NAMESPACE: Cns = Cns(0x00);
    /// Identify Controller data structure.
    pub const CONTROLLER: Cns = Cns(0x01);
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: Cns = Cns(0x02);
    /// Namespace Identification Descriptor list.
    pub const NS_ID_DESCRIPTOR_LIST: Cns = Cns(0x03);
    /// I/O Command Set specific Identify Namespace.
    pub const IO_CS_NAMESPACE: Cns = Cns(0x05);
    /// I/O Command Set specific Identify Controller.
    pub const IO_CS_CONTROLLER: Cns = Cns(0x06);
    /// Active Namespace ID list for an I/O Command Set.
    pub const IO_CS_ACTIVE_NS_LIST: Cns = Cns(0x07);
    /// I/O Command Set Independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: Cns = Cns(0x08);
}

/// Errors from decoding (or, for descriptor lists, encoding) Identify data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentifyError {
    /// The buffer is shorter than the structure.
    #[error("identify data truncated: need {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the structure occupies.
        needed: usize,
        /// Bytes supplied.
        got: usize,
    },
    /// A string field holds bytes that are not UTF-8.
    #[error("identify field {field} is not valid UTF-8")]
    NotUtf8 {
        /// Spec name of the field.
        field: &'static str,
    },
    /// A numeric field holds a value the spec does not allow.
    #[error("identify field {field} holds {value}, above the maximum {max}")]
    FieldOutOfRange {
        /// Spec name of the field.
        field: &'static str,
        /// Value received.
        value: u64,
        /// Largest value allowed.
        max: u64,
    },
    /// An Active Namespace ID list entry is not above the one before it.
    #[error("active namespace list entry {index} (NSID {nsid}) is not above the previous entry")]
    NsListNotAscending {
        /// Position of the offending entry.
        index: usize,
        /// NSID found there.
        nsid: u32,
    },
    /// A known descriptor type carries the wrong NIDL.
    #[error("namespace identification descriptor type {nidt} has NIDL {nidl}, expected {expected}")]
    DescriptorLength {
        /// Descriptor type (NIDT).
        nidt: u8,
        /// Length received (NIDL).
        nidl: u8,
        /// Length the type requires.
        expected: u8,
    },
    /// A descriptor's NID runs past the end of the 4096-byte list.
    #[error("namespace identification descriptor at byte {offset} with NIDL {nidl} runs past the list")]
    DescriptorOverrun {
        /// Byte offset of the descriptor header.
        offset: usize,
        /// Length received (NIDL).
        nidl: u8,
    },
    /// The descriptors to encode do not fit in 4096 bytes.
    #[error("descriptor list needs {needed} bytes, only {capacity} fit")]
    DescriptorListOverflow {
        /// Bytes the list would occupy.
        needed: usize,
        /// Bytes available.
        capacity: usize,
    },
    /// An [`NsIdDescriptor::Unknown`] has a NID length NIDL cannot carry
    /// (0, which would end the list, or more than 255).
    #[error("descriptor type {nidt} with {len} bytes of NID cannot be encoded")]
    UnencodableDescriptor {
        /// Descriptor type (NIDT).
        nidt: u8,
        /// Length of the NID supplied.
        len: usize,
    },
}

/// Returns the first [`IDENTIFY_DATA_LEN`] bytes of `buf`, or `Truncated`.
fn identify_page(buf: &[u8]) -> Result<&[u8], IdentifyError> {
    buf.get(..IDENTIFY_DATA_LEN).ok_or(IdentifyError::Truncated { needed: IDENTIFY_DATA_LEN, got: buf.len() })
}

/// Cuts `s` to at most `max` bytes without splitting a character, so that
/// what is encoded always decodes as UTF-8.
pub(crate) fn fit_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Writes `s` into a fixed field, cut to fit on a character boundary.
pub(crate) fn put_text(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
    put_str(b, off, len, fit_str(s, len), pad);
}

/// Reads a fixed string field as an owned `String`.
pub(crate) fn get_text(b: &[u8], off: usize, len: usize) -> Option<String> {
    get_str(b, off, len).map(str::to_owned)
}

fn read_text(b: &[u8], off: usize, len: usize, field: &'static str) -> Result<String, IdentifyError> {
    get_text(b, off, len).ok_or(IdentifyError::NotUtf8 { field })
}

fn get_array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

// ---------------------------------------------------------------------------
// Identify Controller
// ---------------------------------------------------------------------------

/// Byte offsets in the Identify Controller data structure.
mod id_ctrl {
    pub(super) const VID_OFFSET: usize = 0;
    pub(super) const SSVID_OFFSET: usize = VID_OFFSET + 2;
    pub(super) const SN_OFFSET: usize = SSVID_OFFSET + 2;
    pub(super) const SN_LEN: usize = 20;
    pub(super) const MN_OFFSET: usize = SN_OFFSET + SN_LEN;
    pub(super) const MN_LEN: usize = 40;
    pub(super) const FR_OFFSET: usize = MN_OFFSET + MN_LEN;
    pub(super) const FR_LEN: usize = 8;
    pub(super) const RAB_OFFSET: usize = FR_OFFSET + FR_LEN;
    pub(super) const IEEE_OFFSET: usize = RAB_OFFSET + 1;
    pub(super) const IEEE_LEN: usize = 3;
    pub(super) const CMIC_OFFSET: usize = IEEE_OFFSET + IEEE_LEN;
    pub(super) const MDTS_OFFSET: usize = CMIC_OFFSET + 1;
    pub(super) const CNTLID_OFFSET: usize = MDTS_OFFSET + 1;
    pub(super) const VER_OFFSET: usize = CNTLID_OFFSET + 2;
    pub(super) const RTD3R_OFFSET: usize = VER_OFFSET + 4;
    pub(super) const RTD3E_OFFSET: usize = RTD3R_OFFSET + 4;
    pub(super) const OAES_OFFSET: usize = RTD3E_OFFSET + 4;
    pub(super) const CTRATT_OFFSET: usize = OAES_OFFSET + 4;
    /// RRLS (101:100) and reserved bytes 110:102, not modelled.
    pub(super) const RSVD100_UNUSED_LEN: usize = 11;
    pub(super) const CNTRLTYPE_OFFSET: usize = CTRATT_OFFSET + 4 + RSVD100_UNUSED_LEN;
    pub(super) const FGUID_OFFSET: usize = CNTRLTYPE_OFFSET + 1;
    pub(super) const FGUID_LEN: usize = 16;
    /// CRDT1..3, reserved and the NVMe-MI area (255:128), not modelled.
    pub(super) const RSVD128_UNUSED_LEN: usize = 128;
    pub(super) const OACS_OFFSET: usize = FGUID_OFFSET + FGUID_LEN + RSVD128_UNUSED_LEN;
    pub(super) const ACL_OFFSET: usize = OACS_OFFSET + 2;
    pub(super) const AERL_OFFSET: usize = ACL_OFFSET + 1;
    pub(super) const FRMW_OFFSET: usize = AERL_OFFSET + 1;
    pub(super) const LPA_OFFSET: usize = FRMW_OFFSET + 1;
    pub(super) const ELPE_OFFSET: usize = LPA_OFFSET + 1;
    pub(super) const NPSS_OFFSET: usize = ELPE_OFFSET + 1;
    /// AVSCC (264) and APSTA (265), not modelled.
    pub(super) const WCTEMP_OFFSET: usize = NPSS_OFFSET + 1 + 2;
    pub(super) const CCTEMP_OFFSET: usize = WCTEMP_OFFSET + 2;
    /// MTFA through FWUG (319:270), not modelled.
    pub(super) const RSVD270_UNUSED_LEN: usize = 50;
    pub(super) const KAS_OFFSET: usize = CCTEMP_OFFSET + 2 + RSVD270_UNUSED_LEN;
    /// HCTMA through ENDGIDMAX (341:322), not modelled.
    pub(super) const RSVD322_UNUSED_LEN: usize = 20;
    pub(super) const ANATT_OFFSET: usize = KAS_OFFSET + 2 + RSVD322_UNUSED_LEN;
    pub(super) const ANACAP_OFFSET: usize = ANATT_OFFSET + 1;
    pub(super) const ANAGRPMAX_OFFSET: usize = ANACAP_OFFSET + 1;
    pub(super) const NANAGRPID_OFFSET: usize = ANAGRPMAX_OFFSET + 4;
    /// PELS and reserved (511:352), not modelled.
    pub(super) const RSVD352_UNUSED_LEN: usize = 160;
    pub(super) const SQES_OFFSET: usize = NANAGRPID_OFFSET + 4 + RSVD352_UNUSED_LEN;
    pub(super) const CQES_OFFSET: usize = SQES_OFFSET + 1;
    pub(super) const MAXCMD_OFFSET: usize = CQES_OFFSET + 1;
    pub(super) const NN_OFFSET: usize = MAXCMD_OFFSET + 2;
    pub(super) const ONCS_OFFSET: usize = NN_OFFSET + 4;
    pub(super) const FUSES_OFFSET: usize = ONCS_OFFSET + 2;
    pub(super) const FNA_OFFSET: usize = FUSES_OFFSET + 2;
    pub(super) const VWC_OFFSET: usize = FNA_OFFSET + 1;
    pub(super) const AWUN_OFFSET: usize = VWC_OFFSET + 1;
    pub(super) const AWUPF_OFFSET: usize = AWUN_OFFSET + 2;
    /// ICSVSCC (530) and NWPC (531), not modelled.
    pub(super) const ACWU_OFFSET: usize = AWUPF_OFFSET + 2 + 2;
    /// OCFS (535:534), not modelled.
    pub(super) const SGLS_OFFSET: usize = ACWU_OFFSET + 2 + 2;
    pub(super) const MNAN_OFFSET: usize = SGLS_OFFSET + 4;
    /// MAXDNA, MAXCNA and reserved (767:544), not modelled.
    pub(super) const RSVD544_UNUSED_LEN: usize = 224;
    pub(super) const SUBNQN_OFFSET: usize = MNAN_OFFSET + 4 + RSVD544_UNUSED_LEN;
    pub(super) const SUBNQN_LEN: usize = 256;
    /// Reserved (1791:1024).
    pub(super) const RSVD1024_UNUSED_LEN: usize = 768;
    pub(super) const IOCCSZ_OFFSET: usize = SUBNQN_OFFSET + SUBNQN_LEN + RSVD1024_UNUSED_LEN;
    pub(super) const IORCSZ_OFFSET: usize = IOCCSZ_OFFSET + 4;
    pub(super) const ICDOFF_OFFSET: usize = IORCSZ_OFFSET + 4;
    pub(super) const FCATT_OFFSET: usize = ICDOFF_OFFSET + 2;
    pub(super) const MSDBD_OFFSET: usize = FCATT_OFFSET + 1;
    pub(super) const OFCS_OFFSET: usize = MSDBD_OFFSET + 1;
    /// DCTYPE (1806) and reserved (2047:1807), not modelled.
    pub(super) const RSVD1806_UNUSED_LEN: usize = 242;
    pub(super) const PSD0_OFFSET: usize = OFCS_OFFSET + 2 + RSVD1806_UNUSED_LEN;
    #[cfg(test)]
    pub(super) const PSD_COUNT: usize = 32;
    #[cfg(test)]
    pub(super) const VS_OFFSET: usize = PSD0_OFFSET + PSD_COUNT * super::POWER_STATE_DESCRIPTOR_LEN;
    #[cfg(test)]
    pub(super) const VS_LEN: usize = 1024;
}

/// Size of one Power State Descriptor in Identify Controller.
pub const POWER_STATE_DESCRIPTOR_LEN: usize = 32;

/// Byte offsets within a Power State Descriptor.
mod psd {
    pub(super) const MP_OFFSET: usize = 0;
    /// Byte 2 is reserved.
    pub(super) const FLAGS_OFFSET: usize = MP_OFFSET + 2 + 1;
    pub(super) const ENLAT_OFFSET: usize = FLAGS_OFFSET + 1;
    pub(super) const EXLAT_OFFSET: usize = ENLAT_OFFSET + 4;
    pub(super) const RRT_OFFSET: usize = EXLAT_OFFSET + 4;
    pub(super) const RRL_OFFSET: usize = RRT_OFFSET + 1;
    pub(super) const RWT_OFFSET: usize = RRL_OFFSET + 1;
    pub(super) const RWL_OFFSET: usize = RWT_OFFSET + 1;
    pub(super) const IDLP_OFFSET: usize = RWL_OFFSET + 1;
    pub(super) const IPS_OFFSET: usize = IDLP_OFFSET + 2;
    /// Byte 19 is reserved.
    pub(super) const ACTP_OFFSET: usize = IPS_OFFSET + 1 + 1;
    pub(super) const APW_APS_OFFSET: usize = ACTP_OFFSET + 2;
}

/// CMIC bit: the NVM subsystem may have more than one port.
pub const CMIC_MULTI_PORT: u8 = 1 << 0;
/// CMIC bit: the NVM subsystem may have more than one controller.
pub const CMIC_MULTI_CONTROLLER: u8 = 1 << 1;
/// CMIC bit: the controller reports Asymmetric Namespace Access.
pub const CMIC_ANA: u8 = 1 << 3;

/// ANACAP bit: reports the ANA Optimized state.
pub const ANACAP_OPTIMIZED: u8 = 1 << 0;
/// ANACAP bit: reports the ANA Non-Optimized state.
pub const ANACAP_NON_OPTIMIZED: u8 = 1 << 1;
/// ANACAP bit: reports the ANA Inaccessible state.
pub const ANACAP_INACCESSIBLE: u8 = 1 << 2;
/// ANACAP bit: reports the ANA Persistent Loss state.
pub const ANACAP_PERSISTENT_LOSS: u8 = 1 << 3;
/// ANACAP bit: reports the ANA Change state.
pub const ANACAP_CHANGE: u8 = 1 << 4;
/// ANACAP bit: a namespace's ANAGRPID does not change while it is
/// attached.
pub const ANACAP_GRPID_STATIC: u8 = 1 << 6;

/// OAES bit 8: Namespace Attribute Notices (Changed Namespace List AEN).
pub const OAES_NS_ATTRIBUTE_NOTICES: u32 = 1 << 8;
/// OAES bit 9: Firmware Activation Notices.
pub const OAES_FW_ACTIVATION_NOTICES: u32 = 1 << 9;
/// OAES bit 11: Asymmetric Namespace Access Change Notices.
pub const OAES_ANA_CHANGE_NOTICES: u32 = 1 << 11;
/// OAES bit 31: Discovery Log Page Change Notices.
pub const OAES_DISCOVERY_LOG_CHANGE_NOTICES: u32 = 1 << 31;

/// CTRATT bit 0: 128-bit Host Identifier supported (required for fabrics).
pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
/// CTRATT bit 6: Traffic Based Keep Alive supported.
pub const CTRATT_TBKAS: u32 = 1 << 6;

/// CNTRLTYPE: I/O controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// CNTRLTYPE: Discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;
/// CNTRLTYPE: Administrative controller.
pub const CNTRLTYPE_ADMIN: u8 = 3;

/// FRMW bit 0: firmware slot 1 is read only.
pub const FRMW_SLOT1_READ_ONLY: u8 = 1 << 0;
/// FRMW bits 3:1: number of firmware slots (shift).
pub const FRMW_NUM_SLOTS_SHIFT: u8 = 1;

/// LPA bit 0: SMART / Health log available per namespace.
pub const LPA_SMART_PER_NAMESPACE: u8 = 1 << 0;
/// LPA bit 1: Commands Supported and Effects log page supported.
pub const LPA_COMMANDS_EFFECTS: u8 = 1 << 1;
/// LPA bit 2: extended data for Get Log Page (NUMDU, LPO) supported.
pub const LPA_EXTENDED_DATA: u8 = 1 << 2;
/// LPA bit 3: Telemetry log pages supported.
pub const LPA_TELEMETRY: u8 = 1 << 3;
/// LPA bit 4: Persistent Event log supported.
pub const LPA_PERSISTENT_EVENT: u8 = 1 << 4;

/// SQES for 64-byte (2^6) required and maximum submission queue entries.
pub const SQES_64: u8 = (6 << 4) | 6;
/// CQES for 16-byte (2^4) required and maximum completion queue entries.
pub const CQES_16: u8 = (4 << 4) | 4;

/// ONCS bit 0: Compare command supported.
pub const ONCS_COMPARE: u16 = 1 << 0;
/// ONCS bit 1: Write Uncorrectable command supported.
pub const ONCS_WRITE_UNCORRECTABLE: u16 = 1 << 1;
/// ONCS bit 2: Dataset Management command supported.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit 3: Write Zeroes command supported.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// ONCS bit 4: Save field in Set Features and Select in Get Features.
pub const ONCS_SAVE_SELECT: u16 = 1 << 4;
/// ONCS bit 5: reservations supported.
pub const ONCS_RESERVATIONS: u16 = 1 << 5;
/// ONCS bit 6: Timestamp feature supported.
pub const ONCS_TIMESTAMP: u16 = 1 << 6;
/// ONCS bit 7: Verify command supported.
pub const ONCS_VERIFY: u16 = 1 << 7;

/// VWC bit 0: a volatile write cache is present.
pub const VWC_PRESENT: u8 = 1 << 0;
/// VWC bits 2:1: Flush behaviour with NSID FFFFFFFFh (mask).
pub const VWC_FLUSH_BROADCAST_MASK: u8 = 0b11 << 1;
/// VWC bits 2:1 = 00b: broadcast Flush support not indicated.
pub const VWC_FLUSH_BROADCAST_NOT_INDICATED: u8 = 0b00 << 1;
/// VWC bits 2:1 = 10b: Flush with NSID FFFFFFFFh is not supported.
pub const VWC_FLUSH_BROADCAST_UNSUPPORTED: u8 = 0b10 << 1;
/// VWC bits 2:1 = 11b: Flush with NSID FFFFFFFFh is supported.
pub const VWC_FLUSH_BROADCAST_SUPPORTED: u8 = 0b11 << 1;

/// SGLS bits 1:0 = 01b: SGLs supported, no alignment requirement.
pub const SGLS_SUPPORTED_BYTE_ALIGNED: u32 = 0b01;
/// SGLS bits 1:0 = 10b: SGLs supported, dword alignment required.
pub const SGLS_SUPPORTED_DWORD_ALIGNED: u32 = 0b10;
/// SGLS bit 2: Keyed SGL Data Block descriptor supported (RDMA).
pub const SGLS_KEYED_DATA_BLOCK: u32 = 1 << 2;
/// SGLS bit 16: SGL Bit Bucket descriptor supported.
pub const SGLS_BIT_BUCKET: u32 = 1 << 16;
/// SGLS bit 18: SGL length may exceed the data transferred.
pub const SGLS_LENGTH_LARGER_THAN_DATA: u32 = 1 << 18;
/// SGLS bit 19: MPTR may hold an SGL descriptor (MSDS).
pub const SGLS_MPTR_SGL: u32 = 1 << 19;
/// SGLS bit 20: Address field may hold an offset (needed for in-capsule data).
pub const SGLS_ADDRESS_AS_OFFSET: u32 = 1 << 20;
/// SGLS bit 21: Transport SGL Data Block descriptor supported.
pub const SGLS_TRANSPORT_DATA_BLOCK: u32 = 1 << 21;

/// FCATT bit 0: static controller model (cleared: dynamic).
pub const FCATT_STATIC_CONTROLLER: u8 = 1 << 0;
/// OFCS bit 0: the Disconnect fabrics command is supported.
pub const OFCS_DISCONNECT: u16 = 1 << 0;

/// Power State Descriptor flags bit 0 (MXPS): MP is in 0.0001 W units.
pub const PSD_FLAG_MAX_POWER_SCALE: u8 = 1 << 0;
/// Power State Descriptor flags bit 1 (NOPS): non-operational state.
pub const PSD_FLAG_NON_OPERATIONAL: u8 = 1 << 1;

/// One Power State Descriptor of Identify Controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerStateDescriptor {
    /// MP: maximum power, in centiwatts (0.01 W) unless MXPS is set.
    pub mp: u16,
    /// Byte 3: MXPS (bit 0) and NOPS (bit 1), see `PSD_FLAG_*`.
    pub flags: u8,
    /// ENLAT: entry latency in microseconds.
    pub enlat: u32,
    /// EXLAT: exit latency in microseconds.
    pub exlat: u32,
    /// RRT: relative read throughput.
    pub rrt: u8,
    /// RRL: relative read latency.
    pub rrl: u8,
    /// RWT: relative write throughput.
    pub rwt: u8,
    /// RWL: relative write latency.
    pub rwl: u8,
    /// IDLP: idle power.
    pub idlp: u16,
    /// Byte 18: IPS (idle power scale) in bits 7:6.
    pub ips: u8,
    /// ACTP: active power.
    pub actp: u16,
    /// Byte 22: APW (bits 2:0) and APS (bits 7:6).
    pub apw_aps: u8,
}

impl PowerStateDescriptor {
    /// Writes the descriptor at `base`; `b` must hold `base + 32` bytes
    /// (guaranteed by the callers, which write into a full Identify page).
    fn encode_at(&self, b: &mut [u8], base: usize) {
        put_u16(b, base + psd::MP_OFFSET, self.mp);
        b[base + psd::FLAGS_OFFSET] = self.flags;
        put_u32(b, base + psd::ENLAT_OFFSET, self.enlat);
        put_u32(b, base + psd::EXLAT_OFFSET, self.exlat);
        b[base + psd::RRT_OFFSET] = self.rrt;
        b[base + psd::RRL_OFFSET] = self.rrl;
        b[base + psd::RWT_OFFSET] = self.rwt;
        b[base + psd::RWL_OFFSET] = self.rwl;
        put_u16(b, base + psd::IDLP_OFFSET, self.idlp);
        b[base + psd::IPS_OFFSET] = self.ips;
        put_u16(b, base + psd::ACTP_OFFSET, self.actp);
        b[base + psd::APW_APS_OFFSET] = self.apw_aps;
    }

    fn decode_at(b: &[u8], base: usize) -> Self {
        PowerStateDescriptor {
            mp: get_u16(b, base + psd::MP_OFFSET),
            flags: b[base + psd::FLAGS_OFFSET],
            enlat: get_u32(b, base + psd::ENLAT_OFFSET),
            exlat: get_u32(b, base + psd::EXLAT_OFFSET),
            rrt: b[base + psd::RRT_OFFSET],
            rrl: b[base + psd::RRL_OFFSET],
            rwt: b[base + psd::RWT_OFFSET],
            rwl: b[base + psd::RWL_OFFSET],
            idlp: get_u16(b, base + psd::IDLP_OFFSET),
            ips: b[base + psd::IPS_OFFSET],
            actp: get_u16(b, base + psd::ACTP_OFFSET),
            apw_aps: b[base + psd::APW_APS_OFFSET],
        }
    }
}

/// Identify Controller data structure (CNS 01h): the fields a fabrics
/// target reports. Field names follow the spec; see the module table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentifyController {
    /// VID: PCI vendor ID.
    pub vid: u16,
    /// SSVID: PCI subsystem vendor ID.
    pub ssvid: u16,
    /// SN: serial number (ASCII, 20 bytes, space padded).
    pub sn: String,
    /// MN: model number (ASCII, 40 bytes, space padded).
    pub mn: String,
    /// FR: firmware revision (ASCII, 8 bytes, space padded).
    pub fr: String,
    /// RAB: recommended arbitration burst (2^n commands).
    pub rab: u8,
    /// IEEE: OUI, least significant byte first.
    pub ieee: [u8; 3],
    /// CMIC: multi-path I/O and namespace sharing capabilities (`CMIC_*`).
    pub cmic: u8,
    /// MDTS: maximum data transfer size, 2^n units of CAP.MPSMIN; 0 = none.
    pub mdts: u8,
    /// CNTLID: controller ID.
    pub cntlid: u16,
    /// VER: version, major in 31:16, minor in 15:8, tertiary in 7:0.
    pub ver: u32,
    /// RTD3R: RTD3 resume latency in microseconds.
    pub rtd3r: u32,
    /// RTD3E: RTD3 entry latency in microseconds.
    pub rtd3e: u32,
    /// OAES: optional asynchronous events supported (`OAES_*`).
    pub oaes: u32,
    /// CTRATT: controller attributes (`CTRATT_*`).
    pub ctratt: u32,
    /// CNTRLTYPE: controller type (`CNTRLTYPE_*`).
    pub cntrltype: u8,
    /// FGUID: FRU globally unique identifier.
    pub fguid: [u8; 16],
    /// OACS: optional admin command support.
    pub oacs: u16,
    /// ACL: abort command limit, 0's based.
    pub acl: u8,
    /// AERL: asynchronous event request limit, 0's based.
    pub aerl: u8,
    /// FRMW: firmware updates (`FRMW_*`).
    pub frmw: u8,
    /// LPA: log page attributes (`LPA_*`).
    pub lpa: u8,
    /// ELPE: error log page entries, 0's based.
    pub elpe: u8,
    /// NPSS: number of power states supported, 0's based.
    pub npss: u8,
    /// WCTEMP: warning composite temperature threshold, Kelvin.
    pub wctemp: u16,
    /// CCTEMP: critical composite temperature threshold, Kelvin.
    pub cctemp: u16,
    /// KAS: keep alive support, granularity in 100 ms units; 0 = none.
    pub kas: u16,
    /// ANATT: ANA transition time, seconds.
    pub anatt: u8,
    /// ANACAP: ANA capabilities.
    pub anacap: u8,
    /// ANAGRPMAX: ANA group identifier maximum.
    pub anagrpmax: u32,
    /// NANAGRPID: number of ANA group identifiers.
    pub nanagrpid: u32,
    /// SQES: submission queue entry size, max in 7:4 and required in 3:0.
    pub sqes: u8,
    /// CQES: completion queue entry size, max in 7:4 and required in 3:0.
    pub cqes: u8,
    /// MAXCMD: maximum outstanding commands per queue.
    pub maxcmd: u16,
    /// NN: number of namespaces (largest valid NSID).
    pub nn: u32,
    /// ONCS: optional NVM command support (`ONCS_*`).
    pub oncs: u16,
    /// FUSES: fused operation support.
    pub fuses: u16,
    /// FNA: format NVM attributes.
    pub fna: u8,
    /// VWC: volatile write cache (`VWC_*`).
    pub vwc: u8,
    /// AWUN: atomic write unit normal, 0's based logical blocks.
    pub awun: u16,
    /// AWUPF: atomic write unit power fail, 0's based logical blocks.
    pub awupf: u16,
    /// ACWU: atomic compare & write unit, 0's based logical blocks.
    pub acwu: u16,
    /// SGLS: SGL support (`SGLS_*`).
    pub sgls: u32,
    /// MNAN: maximum number of allowed namespaces.
    pub mnan: u32,
    /// SUBNQN: NVM subsystem NQN (UTF-8, 256 bytes, NUL padded).
    pub subnqn: String,
    /// IOCCSZ: I/O queue command capsule supported size, 16-byte units.
    pub ioccsz: u32,
    /// IORCSZ: I/O queue response capsule supported size, 16-byte units.
    pub iorcsz: u32,
    /// ICDOFF: in-capsule data offset, 16-byte units after the SQE.
    pub icdoff: u16,
    /// FCATT: fabrics controller attributes (`FCATT_*`).
    pub fcatt: u8,
    /// MSDBD: maximum SGL data block descriptors; 0 = no limit.
    pub msdbd: u8,
    /// OFCS: optional fabric commands supported (`OFCS_*`).
    pub ofcs: u16,
    /// PSD0: power state 0 descriptor. Descriptors 1..31 encode as zero.
    pub psd0: PowerStateDescriptor,
}

impl IdentifyController {
    /// Encodes the 4096-byte Identify Controller data structure. Fields not
    /// modelled are zero.
    pub fn encode(&self) -> [u8; IDENTIFY_DATA_LEN] {
        use id_ctrl::*;
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        put_u16(&mut b, VID_OFFSET, self.vid);
        put_u16(&mut b, SSVID_OFFSET, self.ssvid);
        put_text(&mut b, SN_OFFSET, SN_LEN, &self.sn, b' ');
        put_text(&mut b, MN_OFFSET, MN_LEN, &self.mn, b' ');
        put_text(&mut b, FR_OFFSET, FR_LEN, &self.fr, b' ');
        b[RAB_OFFSET] = self.rab;
        b[IEEE_OFFSET..IEEE_OFFSET + IEEE_LEN].copy_from_slice(&self.ieee);
        b[CMIC_OFFSET] = self.cmic;
        b[MDTS_OFFSET] = self.mdts;
        put_u16(&mut b, CNTLID_OFFSET, self.cntlid);
        put_u32(&mut b, VER_OFFSET, self.ver);
        put_u32(&mut b, RTD3R_OFFSET, self.rtd3r);
        put_u32(&mut b, RTD3E_OFFSET, self.rtd3e);
        put_u32(&mut b, OAES_OFFSET, self.oaes);
        put_u32(&mut b, CTRATT_OFFSET, self.ctratt);
        b[CNTRLTYPE_OFFSET] = self.cntrltype;
        b[FGUID_OFFSET..FGUID_OFFSET + FGUID_LEN].copy_from_slice(&self.fguid);
        put_u16(&mut b, OACS_OFFSET, self.oacs);
        b[ACL_OFFSET] = self.acl;
        b[AERL_OFFSET] = self.aerl;
        b[FRMW_OFFSET] = self.frmw;
        b[LPA_OFFSET] = self.lpa;
        b[ELPE_OFFSET] = self.elpe;
        b[NPSS_OFFSET] = self.npss;
        put_u16(&mut b, WCTEMP_OFFSET, self.wctemp);
        put_u16(&mut b, CCTEMP_OFFSET, self.cctemp);
        put_u16(&mut b, KAS_OFFSET, self.kas);
        b[ANATT_OFFSET] = self.anatt;
        b[ANACAP_OFFSET] = self.anacap;
        put_u32(&mut b, ANAGRPMAX_OFFSET, self.anagrpmax);
        put_u32(&mut b, NANAGRPID_OFFSET, self.nanagrpid);
        b[SQES_OFFSET] = self.sqes;
        b[CQES_OFFSET] = self.cqes;
        put_u16(&mut b, MAXCMD_OFFSET, self.maxcmd);
        put_u32(&mut b, NN_OFFSET, self.nn);
        put_u16(&mut b, ONCS_OFFSET, self.oncs);
        put_u16(&mut b, FUSES_OFFSET, self.fuses);
        b[FNA_OFFSET] = self.fna;
        b[VWC_OFFSET] = self.vwc;
        put_u16(&mut b, AWUN_OFFSET, self.awun);
        put_u16(&mut b, AWUPF_OFFSET, self.awupf);
        put_u16(&mut b, ACWU_OFFSET, self.acwu);
        put_u32(&mut b, SGLS_OFFSET, self.sgls);
        put_u32(&mut b, MNAN_OFFSET, self.mnan);
        put_text(&mut b, SUBNQN_OFFSET, SUBNQN_LEN, &self.subnqn, 0);
        put_u32(&mut b, IOCCSZ_OFFSET, self.ioccsz);
        put_u32(&mut b, IORCSZ_OFFSET, self.iorcsz);
        put_u16(&mut b, ICDOFF_OFFSET, self.icdoff);
        b[FCATT_OFFSET] = self.fcatt;
        b[MSDBD_OFFSET] = self.msdbd;
        put_u16(&mut b, OFCS_OFFSET, self.ofcs);
        self.psd0.encode_at(&mut b, PSD0_OFFSET);
        b
    }

    /// Decodes an Identify Controller data structure from the first 4096
    /// bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes;
    /// [`IdentifyError::NotUtf8`] if SN, MN, FR or SUBNQN is not UTF-8.
    pub fn decode(buf: &[u8]) -> Result<Self, IdentifyError> {
        use id_ctrl::*;
        let b = identify_page(buf)?;
        Ok(IdentifyController {
            vid: get_u16(b, VID_OFFSET),
            ssvid: get_u16(b, SSVID_OFFSET),
            sn: read_text(b, SN_OFFSET, SN_LEN, "SN")?,
            mn: read_text(b, MN_OFFSET, MN_LEN, "MN")?,
            fr: read_text(b, FR_OFFSET, FR_LEN, "FR")?,
            rab: b[RAB_OFFSET],
            ieee: get_array(b, IEEE_OFFSET),
            cmic: b[CMIC_OFFSET],
            mdts: b[MDTS_OFFSET],
            cntlid: get_u16(b, CNTLID_OFFSET),
            ver: get_u32(b, VER_OFFSET),
            rtd3r: get_u32(b, RTD3R_OFFSET),
            rtd3e: get_u32(b, RTD3E_OFFSET),
            oaes: get_u32(b, OAES_OFFSET),
            ctratt: get_u32(b, CTRATT_OFFSET),
            cntrltype: b[CNTRLTYPE_OFFSET],
            fguid: get_array(b, FGUID_OFFSET),
            oacs: get_u16(b, OACS_OFFSET),
            acl: b[ACL_OFFSET],
            aerl: b[AERL_OFFSET],
            frmw: b[FRMW_OFFSET],
            lpa: b[LPA_OFFSET],
            elpe: b[ELPE_OFFSET],
            npss: b[NPSS_OFFSET],
            wctemp: get_u16(b, WCTEMP_OFFSET),
            cctemp: get_u16(b, CCTEMP_OFFSET),
            kas: get_u16(b, KAS_OFFSET),
            anatt: b[ANATT_OFFSET],
            anacap: b[ANACAP_OFFSET],
            anagrpmax: get_u32(b, ANAGRPMAX_OFFSET),
            nanagrpid: get_u32(b, NANAGRPID_OFFSET),
            sqes: b[SQES_OFFSET],
            cqes: b[CQES_OFFSET],
            maxcmd: get_u16(b, MAXCMD_OFFSET),
            nn: get_u32(b, NN_OFFSET),
            oncs: get_u16(b, ONCS_OFFSET),
            fuses: get_u16(b, FUSES_OFFSET),
            fna: b[FNA_OFFSET],
            vwc: b[VWC_OFFSET],
            awun: get_u16(b, AWUN_OFFSET),
            awupf: get_u16(b, AWUPF_OFFSET),
            acwu: get_u16(b, ACWU_OFFSET),
            sgls: get_u32(b, SGLS_OFFSET),
            mnan: get_u32(b, MNAN_OFFSET),
            subnqn: read_text(b, SUBNQN_OFFSET, SUBNQN_LEN, "SUBNQN")?,
            ioccsz: get_u32(b, IOCCSZ_OFFSET),
            iorcsz: get_u32(b, IORCSZ_OFFSET),
            icdoff: get_u16(b, ICDOFF_OFFSET),
            fcatt: b[FCATT_OFFSET],
            msdbd: b[MSDBD_OFFSET],
            ofcs: get_u16(b, OFCS_OFFSET),
            psd0: PowerStateDescriptor::decode_at(b, PSD0_OFFSET),
        })
    }
}

// ---------------------------------------------------------------------------
// Identify Namespace
// ---------------------------------------------------------------------------

/// Byte offsets in the Identify Namespace data structure (NVM command set).
mod id_ns {
    pub(super) const NSZE_OFFSET: usize = 0;
    pub(super) const NCAP_OFFSET: usize = NSZE_OFFSET + 8;
    pub(super) const NUSE_OFFSET: usize = NCAP_OFFSET + 8;
    pub(super) const NSFEAT_OFFSET: usize = NUSE_OFFSET + 8;
    pub(super) const NLBAF_OFFSET: usize = NSFEAT_OFFSET + 1;
    pub(super) const FLBAS_OFFSET: usize = NLBAF_OFFSET + 1;
    pub(super) const MC_OFFSET: usize = FLBAS_OFFSET + 1;
    pub(super) const DPC_OFFSET: usize = MC_OFFSET + 1;
    pub(super) const DPS_OFFSET: usize = DPC_OFFSET + 1;
    pub(super) const NMIC_OFFSET: usize = DPS_OFFSET + 1;
    pub(super) const RESCAP_OFFSET: usize = NMIC_OFFSET + 1;
    pub(super) const FPI_OFFSET: usize = RESCAP_OFFSET + 1;
    pub(super) const DLFEAT_OFFSET: usize = FPI_OFFSET + 1;
    pub(super) const NAWUN_OFFSET: usize = DLFEAT_OFFSET + 1;
    pub(super) const NAWUPF_OFFSET: usize = NAWUN_OFFSET + 2;
    pub(super) const NACWU_OFFSET: usize = NAWUPF_OFFSET + 2;
    pub(super) const NABSN_OFFSET: usize = NACWU_OFFSET + 2;
    pub(super) const NABO_OFFSET: usize = NABSN_OFFSET + 2;
    pub(super) const NABSPF_OFFSET: usize = NABO_OFFSET + 2;
    pub(super) const NOIOB_OFFSET: usize = NABSPF_OFFSET + 2;
    pub(super) const NVMCAP_OFFSET: usize = NOIOB_OFFSET + 2;
    pub(super) const NPWG_OFFSET: usize = NVMCAP_OFFSET + 16;
    pub(super) const NPWA_OFFSET: usize = NPWG_OFFSET + 2;
    pub(super) const NPDG_OFFSET: usize = NPWA_OFFSET + 2;
    pub(super) const NPDA_OFFSET: usize = NPDG_OFFSET + 2;
    pub(super) const NOWS_OFFSET: usize = NPDA_OFFSET + 2;
    /// MSSRL, MCL, MSRC and reserved (91:74), not modelled.
    pub(super) const RSVD74_UNUSED_LEN: usize = 18;
    pub(super) const ANAGRPID_OFFSET: usize = NOWS_OFFSET + 2 + RSVD74_UNUSED_LEN;
    /// Reserved (98:96).
    pub(super) const NSATTR_OFFSET: usize = ANAGRPID_OFFSET + 4 + 3;
    pub(super) const NVMSETID_OFFSET: usize = NSATTR_OFFSET + 1;
    pub(super) const ENDGID_OFFSET: usize = NVMSETID_OFFSET + 2;
    pub(super) const NGUID_OFFSET: usize = ENDGID_OFFSET + 2;
    pub(super) const NGUID_LEN: usize = 16;
    pub(super) const EUI64_OFFSET: usize = NGUID_OFFSET + NGUID_LEN;
    pub(super) const EUI64_LEN: usize = 8;
    pub(super) const LBAF_OFFSET: usize = EUI64_OFFSET + EUI64_LEN;
    pub(super) const LBAF_LEN: usize = 4;
    pub(super) const LBAF_MS_OFFSET: usize = 0;
    pub(super) const LBAF_LBADS_OFFSET: usize = LBAF_MS_OFFSET + 2;
    pub(super) const LBAF_RP_OFFSET: usize = LBAF_LBADS_OFFSET + 1;
    #[cfg(test)]
    pub(super) const VS_OFFSET: usize = LBAF_OFFSET + super::LBAF_COUNT * LBAF_LEN;
}

/// Number of LBA Format slots in Identify Namespace (LBAF0..LBAF63).
pub const LBAF_COUNT: usize = 64;

/// NSFEAT bit 0: thin provisioning supported.
pub const NSFEAT_THIN_PROVISIONING: u8 = 1 << 0;
/// NSFEAT bit 1 (NSABP): NAWUN, NAWUPF and NACWU are valid.
pub const NSFEAT_NSABP: u8 = 1 << 1;
/// NSFEAT bit 2 (DAE): Deallocated or Unwritten Logical Block error supported.
pub const NSFEAT_DAE: u8 = 1 << 2;
/// NSFEAT bit 3 (UIDREUSE): NGUID and EUI64 are never reused.
pub const NSFEAT_UIDREUSE: u8 = 1 << 3;
/// NSFEAT bit 4 (OPTPERF): NPWG, NPWA, NPDG, NPDA and NOWS are valid.
pub const NSFEAT_OPTPERF: u8 = 1 << 4;

/// FLBAS bits 3:0: low bits of the formatted LBA format index.
pub const FLBAS_INDEX_LOW_MASK: u8 = 0x0f;
/// FLBAS bit 4: metadata is transferred at the end of the data LBA.
pub const FLBAS_EXTENDED_METADATA: u8 = 1 << 4;
/// FLBAS bits 6:5: high bits of the formatted LBA format index.
pub const FLBAS_INDEX_HIGH_MASK: u8 = 0x60;

/// NMIC bit 0: the namespace may be attached to more than one controller.
pub const NMIC_SHARED: u8 = 1 << 0;
/// NSATTR bit 0: the namespace is write protected.
pub const NSATTR_WRITE_PROTECTED: u8 = 1 << 0;

/// DLFEAT bits 2:0: the values read from a deallocated block (mask).
pub const DLFEAT_READ_MASK: u8 = 0b111;
/// DLFEAT bits 2:0 = 000b: read value not reported.
pub const DLFEAT_READ_NOT_REPORTED: u8 = 0b000;
/// DLFEAT bits 2:0 = 001b: deallocated blocks read as all 00h.
pub const DLFEAT_READ_ZEROES: u8 = 0b001;
/// DLFEAT bits 2:0 = 010b: deallocated blocks read as all FFh.
pub const DLFEAT_READ_ONES: u8 = 0b010;
/// DLFEAT bit 3: the Deallocate bit of Write Zeroes is supported.
pub const DLFEAT_WRITE_ZEROES_DEALLOCATE: u8 = 1 << 3;
/// DLFEAT bit 4: the Guard field of deallocated blocks is the CRC of the
/// data read (cleared: FFFFh).
pub const DLFEAT_GUARD_CRC: u8 = 1 << 4;

/// One LBA Format entry of Identify Namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat {
    /// MS: metadata bytes per logical block.
    pub ms: u16,
    /// LBADS: LBA data size, 2^n bytes (9 = 512); 0 = format not available.
    pub lbads: u8,
    /// RP: relative performance in bits 1:0 (0 best .. 3 degraded).
    pub rp: u8,
}

/// Identify Namespace data structure (CNS 00h, NVM command set). Field
/// names follow the spec; see the module table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// NSZE: namespace size in logical blocks.
    pub nsze: u64,
    /// NCAP: namespace capacity in logical blocks.
    pub ncap: u64,
    /// NUSE: namespace utilization in logical blocks.
    pub nuse: u64,
    /// NSFEAT: namespace features (`NSFEAT_*`).
    pub nsfeat: u8,
    /// NLBAF: number of LBA formats, 0's based (at most 63).
    pub nlbaf: u8,
    /// FLBAS: formatted LBA size (`FLBAS_*`).
    pub flbas: u8,
    /// MC: metadata capabilities.
    pub mc: u8,
    /// DPC: end-to-end data protection capabilities.
    pub dpc: u8,
    /// DPS: end-to-end data protection type settings.
    pub dps: u8,
    /// NMIC: namespace multi-path I/O and sharing (`NMIC_*`).
    pub nmic: u8,
    /// RESCAP: reservation capabilities.
    pub rescap: u8,
    /// FPI: format progress indicator.
    pub fpi: u8,
    /// DLFEAT: deallocate logical block features (`DLFEAT_*`).
    pub dlfeat: u8,
    /// NAWUN: namespace atomic write unit normal, 0's based.
    pub nawun: u16,
    /// NAWUPF: namespace atomic write unit power fail, 0's based.
    pub nawupf: u16,
    /// NACWU: namespace atomic compare & write unit, 0's based.
    pub nacwu: u16,
    /// NABSN: namespace atomic boundary size normal, 0's based.
    pub nabsn: u16,
    /// NABO: namespace atomic boundary offset.
    pub nabo: u16,
    /// NABSPF: namespace atomic boundary size power fail, 0's based.
    pub nabspf: u16,
    /// NOIOB: namespace optimal I/O boundary, logical blocks.
    pub noiob: u16,
    /// NVMCAP: NVM capacity in bytes.
    pub nvmcap: u128,
    /// NPWG: preferred write granularity, 0's based logical blocks.
    pub npwg: u16,
    /// NPWA: preferred write alignment, 0's based logical blocks.
    pub npwa: u16,
    /// NPDG: preferred deallocate granularity, 0's based logical blocks.
    pub npdg: u16,
    /// NPDA: preferred deallocate alignment, 0's based logical blocks.
    pub npda: u16,
    /// NOWS: optimal write size, 0's based logical blocks.
    pub nows: u16,
    /// ANAGRPID: ANA group identifier.
    pub anagrpid: u32,
    /// NSATTR: namespace attributes (`NSATTR_*`).
    pub nsattr: u8,
    /// NVMSETID: NVM set identifier.
    pub nvmsetid: u16,
    /// ENDGID: endurance group identifier.
    pub endgid: u16,
    /// NGUID: namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// EUI64: IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// LBAF0..LBAF63. Only `lbaf[..=nlbaf]` are meaningful.
    pub lbaf: [LbaFormat; LBAF_COUNT],
}

impl Default for IdentifyNamespace {
    /// All fields zero: the structure a target returns for an inactive NSID.
    fn default() -> Self {
        IdentifyNamespace {
            nsze: 0,
            ncap: 0,
            nuse: 0,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            mc: 0,
            dpc: 0,
            dps: 0,
            nmic: 0,
            rescap: 0,
            fpi: 0,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nacwu: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
            noiob: 0,
            nvmcap: 0,
            npwg: 0,
            npwa: 0,
            npdg: 0,
            npda: 0,
            nows: 0,
            anagrpid: 0,
            nsattr: 0,
            nvmsetid: 0,
            endgid: 0,
            nguid: [0; 16],
            eui64: [0; 8],
            lbaf: [LbaFormat::default(); LBAF_COUNT],
        }
    }
}

impl IdentifyNamespace {
    /// Index of the formatted LBA format: FLBAS bits 3:0 plus bits 6:5 as
    /// bits 5:4. Always below [`LBAF_COUNT`].
    pub fn formatted_lbaf_index(&self) -> usize {
        usize::from((self.flbas & FLBAS_INDEX_LOW_MASK) | ((self.flbas & FLBAS_INDEX_HIGH_MASK) >> 1))
    }

    /// Logical block size of the formatted LBA format in bytes, or `None`
    /// if its LBADS is 0 (unavailable) or too large to represent.
    pub fn block_size_bytes(&self) -> Option<u64> {
        let lbads = self.lbaf[self.formatted_lbaf_index()].lbads;
        if lbads == 0 {
            return None;
        }
        1u64.checked_shl(u32::from(lbads))
    }

    /// Encodes the 4096-byte Identify Namespace data structure.
    pub fn encode(&self) -> [u8; IDENTIFY_DATA_LEN] {
        use id_ns::*;
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        put_u64(&mut b, NSZE_OFFSET, self.nsze);
        put_u64(&mut b, NCAP_OFFSET, self.ncap);
        put_u64(&mut b, NUSE_OFFSET, self.nuse);
        b[NSFEAT_OFFSET] = self.nsfeat;
        b[NLBAF_OFFSET] = self.nlbaf;
        b[FLBAS_OFFSET] = self.flbas;
        b[MC_OFFSET] = self.mc;
        b[DPC_OFFSET] = self.dpc;
        b[DPS_OFFSET] = self.dps;
        b[NMIC_OFFSET] = self.nmic;
        b[RESCAP_OFFSET] = self.rescap;
        b[FPI_OFFSET] = self.fpi;
        b[DLFEAT_OFFSET] = self.dlfeat;
        put_u16(&mut b, NAWUN_OFFSET, self.nawun);
        put_u16(&mut b, NAWUPF_OFFSET, self.nawupf);
        put_u16(&mut b, NACWU_OFFSET, self.nacwu);
        put_u16(&mut b, NABSN_OFFSET, self.nabsn);
        put_u16(&mut b, NABO_OFFSET, self.nabo);
        put_u16(&mut b, NABSPF_OFFSET, self.nabspf);
        put_u16(&mut b, NOIOB_OFFSET, self.noiob);
        put_u128(&mut b, NVMCAP_OFFSET, self.nvmcap);
        put_u16(&mut b, NPWG_OFFSET, self.npwg);
        put_u16(&mut b, NPWA_OFFSET, self.npwa);
        put_u16(&mut b, NPDG_OFFSET, self.npdg);
        put_u16(&mut b, NPDA_OFFSET, self.npda);
        put_u16(&mut b, NOWS_OFFSET, self.nows);
        put_u32(&mut b, ANAGRPID_OFFSET, self.anagrpid);
        b[NSATTR_OFFSET] = self.nsattr;
        put_u16(&mut b, NVMSETID_OFFSET, self.nvmsetid);
        put_u16(&mut b, ENDGID_OFFSET, self.endgid);
        b[NGUID_OFFSET..NGUID_OFFSET + NGUID_LEN].copy_from_slice(&self.nguid);
        b[EUI64_OFFSET..EUI64_OFFSET + EUI64_LEN].copy_from_slice(&self.eui64);
        for (i, f) in self.lbaf.iter().enumerate() {
            let base = LBAF_OFFSET + i * LBAF_LEN;
            put_u16(&mut b, base + LBAF_MS_OFFSET, f.ms);
            b[base + LBAF_LBADS_OFFSET] = f.lbads;
            b[base + LBAF_RP_OFFSET] = f.rp;
        }
        b
    }

    /// Decodes an Identify Namespace data structure from the first 4096
    /// bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes;
    /// [`IdentifyError::FieldOutOfRange`] if NLBAF exceeds 63.
    pub fn decode(buf: &[u8]) -> Result<Self, IdentifyError> {
        use id_ns::*;
        let b = identify_page(buf)?;
        let nlbaf = b[NLBAF_OFFSET];
        // A host sizes loops over the LBA formats by NLBAF; 64 slots exist.
        if usize::from(nlbaf) >= LBAF_COUNT {
            return Err(IdentifyError::FieldOutOfRange {
                field: "NLBAF",
                value: u64::from(nlbaf),
                max: (LBAF_COUNT - 1) as u64,
            });
        }
        let mut lbaf = [LbaFormat::default(); LBAF_COUNT];
        for (i, f) in lbaf.iter_mut().enumerate() {
            let base = LBAF_OFFSET + i * LBAF_LEN;
            *f = LbaFormat {
                ms: get_u16(b, base + LBAF_MS_OFFSET),
                lbads: b[base + LBAF_LBADS_OFFSET],
                rp: b[base + LBAF_RP_OFFSET],
            };
        }
        Ok(IdentifyNamespace {
            nsze: get_u64(b, NSZE_OFFSET),
            ncap: get_u64(b, NCAP_OFFSET),
            nuse: get_u64(b, NUSE_OFFSET),
            nsfeat: b[NSFEAT_OFFSET],
            nlbaf,
            flbas: b[FLBAS_OFFSET],
            mc: b[MC_OFFSET],
            dpc: b[DPC_OFFSET],
            dps: b[DPS_OFFSET],
            nmic: b[NMIC_OFFSET],
            rescap: b[RESCAP_OFFSET],
            fpi: b[FPI_OFFSET],
            dlfeat: b[DLFEAT_OFFSET],
            nawun: get_u16(b, NAWUN_OFFSET),
            nawupf: get_u16(b, NAWUPF_OFFSET),
            nacwu: get_u16(b, NACWU_OFFSET),
            nabsn: get_u16(b, NABSN_OFFSET),
            nabo: get_u16(b, NABO_OFFSET),
            nabspf: get_u16(b, NABSPF_OFFSET),
            noiob: get_u16(b, NOIOB_OFFSET),
            nvmcap: get_u128(b, NVMCAP_OFFSET),
            npwg: get_u16(b, NPWG_OFFSET),
            npwa: get_u16(b, NPWA_OFFSET),
            npdg: get_u16(b, NPDG_OFFSET),
            npda: get_u16(b, NPDA_OFFSET),
            nows: get_u16(b, NOWS_OFFSET),
            anagrpid: get_u32(b, ANAGRPID_OFFSET),
            nsattr: b[NSATTR_OFFSET],
            nvmsetid: get_u16(b, NVMSETID_OFFSET),
            endgid: get_u16(b, ENDGID_OFFSET),
            nguid: get_array(b, NGUID_OFFSET),
            eui64: get_array(b, EUI64_OFFSET),
            lbaf,
        })
    }
}

// ---------------------------------------------------------------------------
// NVM Command Set Identify Controller (CNS 06h, CSI 00h)
// ---------------------------------------------------------------------------

/// Byte offsets in the NVM Command Set Identify Controller data structure.
mod id_ctrl_nvm {
    pub(super) const VSL_OFFSET: usize = 0;
    pub(super) const WZSL_OFFSET: usize = VSL_OFFSET + 1;
    pub(super) const WUSL_OFFSET: usize = WZSL_OFFSET + 1;
    pub(super) const DMRL_OFFSET: usize = WUSL_OFFSET + 1;
    pub(super) const DMRSL_OFFSET: usize = DMRL_OFFSET + 1;
    pub(super) const DMSL_OFFSET: usize = DMRSL_OFFSET + 4;
    /// Bytes 4095:16 are reserved.
    #[cfg(test)]
    pub(super) const RSVD16_UNUSED_OFFSET: usize = DMSL_OFFSET + 8;
}

/// I/O Command Set specific Identify Controller data structure of the NVM
/// Command Set (CNS 06h with CSI 00h). Each field is a recommended limit;
/// 0 means the controller reports no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentifyControllerNvm {
    /// VSL: Verify Size Limit, 2^n units of CAP.MPSMIN.
    pub vsl: u8,
    /// WZSL: Write Zeroes Size Limit, 2^n units of CAP.MPSMIN.
    pub wzsl: u8,
    /// WUSL: Write Uncorrectable Size Limit, 2^n units of CAP.MPSMIN.
    pub wusl: u8,
    /// DMRL: Dataset Management Ranges Limit.
    pub dmrl: u8,
    /// DMRSL: Dataset Management Range Size Limit, logical blocks.
    pub dmrsl: u32,
    /// DMSL: Dataset Management Size Limit, logical blocks.
    pub dmsl: u64,
}

impl IdentifyControllerNvm {
    /// Encodes the 4096-byte structure.
    pub fn encode(&self) -> [u8; IDENTIFY_DATA_LEN] {
        use id_ctrl_nvm::*;
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        b[VSL_OFFSET] = self.vsl;
        b[WZSL_OFFSET] = self.wzsl;
        b[WUSL_OFFSET] = self.wusl;
        b[DMRL_OFFSET] = self.dmrl;
        put_u32(&mut b, DMRSL_OFFSET, self.dmrsl);
        put_u64(&mut b, DMSL_OFFSET, self.dmsl);
        b
    }

    /// Decodes the structure from the first 4096 bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, IdentifyError> {
        use id_ctrl_nvm::*;
        let b = identify_page(buf)?;
        Ok(IdentifyControllerNvm {
            vsl: b[VSL_OFFSET],
            wzsl: b[WZSL_OFFSET],
            wusl: b[WUSL_OFFSET],
            dmrl: b[DMRL_OFFSET],
            dmrsl: get_u32(b, DMRSL_OFFSET),
            dmsl: get_u64(b, DMSL_OFFSET),
        })
    }
}

// ---------------------------------------------------------------------------
// I/O Command Set Independent Identify Namespace (CNS 08h)
// ---------------------------------------------------------------------------

/// Byte offsets in the I/O Command Set Independent Identify Namespace data
/// structure.
mod id_ns_indep {
    pub(super) const NSFEAT_OFFSET: usize = 0;
    pub(super) const NMIC_OFFSET: usize = NSFEAT_OFFSET + 1;
    pub(super) const RESCAP_OFFSET: usize = NMIC_OFFSET + 1;
    pub(super) const FPI_OFFSET: usize = RESCAP_OFFSET + 1;
    pub(super) const ANAGRPID_OFFSET: usize = FPI_OFFSET + 1;
    pub(super) const NSATTR_OFFSET: usize = ANAGRPID_OFFSET + 4;
    /// Byte 9 is reserved.
    pub(super) const NVMSETID_OFFSET: usize = NSATTR_OFFSET + 1 + 1;
    pub(super) const ENDGID_OFFSET: usize = NVMSETID_OFFSET + 2;
    pub(super) const NSTAT_OFFSET: usize = ENDGID_OFFSET + 2;
    /// Bytes 4095:15 are reserved.
    #[cfg(test)]
    pub(super) const RSVD15_UNUSED_OFFSET: usize = NSTAT_OFFSET + 1;
}

/// NSTAT bit 0: the namespace is ready (Linux `NVME_NSTAT_NRDY`).
pub const NSTAT_NAMESPACE_READY: u8 = 1 << 0;

/// I/O Command Set Independent Identify Namespace data structure (CNS 08h):
/// what a host needs of a namespace whatever its command set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdentifyNamespaceIndependent {
    /// NSFEAT: command set independent namespace features.
    pub nsfeat: u8,
    /// NMIC: namespace multi-path I/O and sharing (`NMIC_*`).
    pub nmic: u8,
    /// RESCAP: reservation capabilities.
    pub rescap: u8,
    /// FPI: format progress indicator.
    pub fpi: u8,
    /// ANAGRPID: ANA group identifier.
    pub anagrpid: u32,
    /// NSATTR: namespace attributes (`NSATTR_*`).
    pub nsattr: u8,
    /// NVMSETID: NVM set identifier.
    pub nvmsetid: u16,
    /// ENDGID: endurance group identifier.
    pub endgid: u16,
    /// NSTAT: namespace status (`NSTAT_*`).
    pub nstat: u8,
}

impl IdentifyNamespaceIndependent {
    /// Encodes the 4096-byte structure.
    pub fn encode(&self) -> [u8; IDENTIFY_DATA_LEN] {
        use id_ns_indep::*;
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        b[NSFEAT_OFFSET] = self.nsfeat;
        b[NMIC_OFFSET] = self.nmic;
        b[RESCAP_OFFSET] = self.rescap;
        b[FPI_OFFSET] = self.fpi;
        put_u32(&mut b, ANAGRPID_OFFSET, self.anagrpid);
        b[NSATTR_OFFSET] = self.nsattr;
        put_u16(&mut b, NVMSETID_OFFSET, self.nvmsetid);
        put_u16(&mut b, ENDGID_OFFSET, self.endgid);
        b[NSTAT_OFFSET] = self.nstat;
        b
    }

    /// Decodes the structure from the first 4096 bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, IdentifyError> {
        use id_ns_indep::*;
        let b = identify_page(buf)?;
        Ok(IdentifyNamespaceIndependent {
            nsfeat: b[NSFEAT_OFFSET],
            nmic: b[NMIC_OFFSET],
            rescap: b[RESCAP_OFFSET],
            fpi: b[FPI_OFFSET],
            anagrpid: get_u32(b, ANAGRPID_OFFSET),
            nsattr: b[NSATTR_OFFSET],
            nvmsetid: get_u16(b, NVMSETID_OFFSET),
            endgid: get_u16(b, ENDGID_OFFSET),
            nstat: b[NSTAT_OFFSET],
        })
    }
}

// ---------------------------------------------------------------------------
// Active Namespace ID list (CNS 02h)
// ---------------------------------------------------------------------------

/// Most NSIDs one Active Namespace ID list holds.
pub const ACTIVE_NS_LIST_MAX: usize = IDENTIFY_DATA_LEN / 4;

/// The broadcast NSID, never a member of a namespace list.
const NSID_BROADCAST: u32 = 0xffff_ffff;

/// Encodes an Active Namespace ID list: the (at most 1024) smallest NSIDs of
/// `nsids` greater than `start_after`, ascending and deduplicated, followed
/// by zeros. `nsids` may come in any order. The broadcast NSID FFFFFFFFh is
/// never listed. Rejecting a `start_after` of FFFFFFFEh or FFFFFFFFh with
/// Invalid Namespace is the caller's job.
pub fn encode_active_ns_list(nsids: impl IntoIterator<Item = u32>, start_after: u32) -> [u8; IDENTIFY_DATA_LEN] {
    let mut list: Vec<u32> = nsids.into_iter().filter(|&n| n > start_after && n != NSID_BROADCAST).collect();
    list.sort_unstable();
    list.dedup();
    let mut b = [0u8; IDENTIFY_DATA_LEN];
    for (i, nsid) in list.into_iter().take(ACTIVE_NS_LIST_MAX).enumerate() {
        put_u32(&mut b, i * 4, nsid);
    }
    b
}

/// Decodes an Active Namespace ID list: the NSIDs before the first zero
/// entry.
///
/// # Errors
///
/// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes;
/// [`IdentifyError::NsListNotAscending`] if an entry is not greater than the
/// one before it (a host paging with "start after the last NSID" would
/// otherwise loop).
pub fn decode_active_ns_list(buf: &[u8]) -> Result<Vec<u32>, IdentifyError> {
    let b = identify_page(buf)?;
    let mut out = Vec::new();
    let mut prev = 0u32;
    for index in 0..ACTIVE_NS_LIST_MAX {
        let nsid = get_u32(b, index * 4);
        if nsid == 0 {
            break;
        }
        if nsid <= prev {
            return Err(IdentifyError::NsListNotAscending { index, nsid });
        }
        prev = nsid;
        out.push(nsid);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Namespace Identification Descriptor list (CNS 03h)
// ---------------------------------------------------------------------------

/// Bytes before the NID in each descriptor: NIDT, NIDL, two reserved.
pub const NS_ID_DESC_HEADER_LEN: usize = 4;
const NIDT_OFFSET: usize = 0;
const NIDL_OFFSET: usize = NIDT_OFFSET + 1;
/// Bytes 03:02 are reserved.
const NID_OFFSET: usize = NIDL_OFFSET + 1 + 2;

/// NIDT: IEEE Extended Unique Identifier.
pub const NIDT_EUI64: u8 = 0x01;
/// NIDT: Namespace Globally Unique Identifier.
pub const NIDT_NGUID: u8 = 0x02;
/// NIDT: Namespace UUID.
pub const NIDT_UUID: u8 = 0x03;
/// NIDT: Command Set Identifier.
pub const NIDT_CSI: u8 = 0x04;
/// NIDL for [`NIDT_EUI64`].
pub const NIDT_EUI64_LEN: u8 = 8;
/// NIDL for [`NIDT_NGUID`].
pub const NIDT_NGUID_LEN: u8 = 16;
/// NIDL for [`NIDT_UUID`].
pub const NIDT_UUID_LEN: u8 = 16;
/// NIDL for [`NIDT_CSI`].
pub const NIDT_CSI_LEN: u8 = 1;

/// Command Set Identifier of the NVM command set.
pub const CSI_NVM: u8 = 0x00;

/// One Namespace Identification Descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NsIdDescriptor {
    /// NIDT 01h: IEEE Extended Unique Identifier.
    Eui64([u8; 8]),
    /// NIDT 02h: Namespace Globally Unique Identifier.
    Nguid([u8; 16]),
    /// NIDT 03h: Namespace UUID.
    Uuid([u8; 16]),
    /// NIDT 04h: Command Set Identifier.
    Csi(u8),
    /// A type this crate does not know, kept so a host can skip it.
    Unknown {
        /// Descriptor type (NIDT).
        nidt: u8,
        /// The NID bytes (NIDL of them).
        nid: Vec<u8>,
    },
}

impl NsIdDescriptor {
    fn nidt_and_nid(&self) -> (u8, &[u8]) {
        match self {
            NsIdDescriptor::Eui64(v) => (NIDT_EUI64, v),
            NsIdDescriptor::Nguid(v) => (NIDT_NGUID, v),
            NsIdDescriptor::Uuid(v) => (NIDT_UUID, v),
            NsIdDescriptor::Csi(v) => (NIDT_CSI, std::slice::from_ref(v)),
            NsIdDescriptor::Unknown { nidt, nid } => (*nidt, nid),
        }
    }
}

/// Encodes a Namespace Identification Descriptor list. Descriptors are
/// packed back to back (a CSI descriptor is 5 bytes, so the next one is not
/// dword aligned, as in nvmet); the rest of the 4096 bytes is zero, which
/// terminates the list.
///
/// # Errors
///
/// [`IdentifyError::UnencodableDescriptor`] for an `Unknown` descriptor with
/// an empty NID or one longer than 255 bytes;
/// [`IdentifyError::DescriptorListOverflow`] if the descriptors need more
/// than 4096 bytes.
pub fn encode_ns_id_descriptors(descs: &[NsIdDescriptor]) -> Result<[u8; IDENTIFY_DATA_LEN], IdentifyError> {
    let mut b = [0u8; IDENTIFY_DATA_LEN];
    let mut off = 0usize;
    for d in descs {
        let (nidt, nid) = d.nidt_and_nid();
        let nidl = match u8::try_from(nid.len()) {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(IdentifyError::UnencodableDescriptor { nidt, len: nid.len() });
            }
        };
        let end = off + NS_ID_DESC_HEADER_LEN + nid.len();
        if end > IDENTIFY_DATA_LEN {
            let needed = descs.iter().map(|d| NS_ID_DESC_HEADER_LEN + d.nidt_and_nid().1.len()).sum();
            return Err(IdentifyError::DescriptorListOverflow { needed, capacity: IDENTIFY_DATA_LEN });
        }
        b[off + NIDT_OFFSET] = nidt;
        b[off + NIDL_OFFSET] = nidl;
        b[off + NID_OFFSET..end].copy_from_slice(nid);
        off = end;
    }
    Ok(b)
}

/// Decodes a Namespace Identification Descriptor list. The list ends at the
/// first descriptor whose NIDL is 0 (as the Linux host does) or when fewer
/// than 4 bytes remain. Unknown types are returned as
/// [`NsIdDescriptor::Unknown`].
///
/// # Errors
///
/// [`IdentifyError::Truncated`] if `buf` is shorter than 4096 bytes;
/// [`IdentifyError::DescriptorOverrun`] if a NID runs past byte 4095;
/// [`IdentifyError::DescriptorLength`] if a known type has the wrong NIDL.
pub fn decode_ns_id_descriptors(buf: &[u8]) -> Result<Vec<NsIdDescriptor>, IdentifyError> {
    let b = identify_page(buf)?;
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + NS_ID_DESC_HEADER_LEN <= IDENTIFY_DATA_LEN {
        let nidt = b[off + NIDT_OFFSET];
        let nidl = b[off + NIDL_OFFSET];
        if nidl == 0 {
            break;
        }
        let start = off + NID_OFFSET;
        let end = start + usize::from(nidl);
        let nid = b.get(start..end).ok_or(IdentifyError::DescriptorOverrun { offset: off, nidl })?;
        let expect = |expected: u8| {
            if nidl == expected { Ok(()) } else { Err(IdentifyError::DescriptorLength { nidt, nidl, expected }) }
        };
        let d = match nidt {
            NIDT_EUI64 => {
                expect(NIDT_EUI64_LEN)?;
                NsIdDescriptor::Eui64(get_array(nid, 0))
            }
            NIDT_NGUID => {
                expect(NIDT_NGUID_LEN)?;
                NsIdDescriptor::Nguid(get_array(nid, 0))
            }
            NIDT_UUID => {
                expect(NIDT_UUID_LEN)?;
                NsIdDescriptor::Uuid(get_array(nid, 0))
            }
            NIDT_CSI => {
                expect(NIDT_CSI_LEN)?;
                NsIdDescriptor::Csi(nid[0])
            }
            _ => NsIdDescriptor::Unknown { nidt, nid: nid.to_vec() },
        };
        out.push(d);
        off = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Offsets and sizes of Identify Controller, from NVMe Base 2.0
    /// "Identify Controller Data Structure" and Linux `struct nvme_id_ctrl`.
    #[test]
    fn id_ctrl_offsets_match_spec() {
        use id_ctrl::*;
        assert_eq!(VID_OFFSET, 0);
        assert_eq!(SSVID_OFFSET, 2);
        assert_eq!(SN_OFFSET, 4);
        assert_eq!(MN_OFFSET, 24);
        assert_eq!(FR_OFFSET, 64);
        assert_eq!(RAB_OFFSET, 72);
        assert_eq!(IEEE_OFFSET, 73);
        assert_eq!(CMIC_OFFSET, 76);
        assert_eq!(MDTS_OFFSET, 77);
        assert_eq!(CNTLID_OFFSET, 78);
        assert_eq!(VER_OFFSET, 80);
        assert_eq!(RTD3R_OFFSET, 84);
        assert_eq!(RTD3E_OFFSET, 88);
        assert_eq!(OAES_OFFSET, 92);
        assert_eq!(CTRATT_OFFSET, 96);
        assert_eq!(CNTRLTYPE_OFFSET, 111);
        assert_eq!(FGUID_OFFSET, 112);
        assert_eq!(OACS_OFFSET, 256);
        assert_eq!(ACL_OFFSET, 258);
        assert_eq!(AERL_OFFSET, 259);
        assert_eq!(FRMW_OFFSET, 260);
        assert_eq!(LPA_OFFSET, 261);
        assert_eq!(ELPE_OFFSET, 262);
        assert_eq!(NPSS_OFFSET, 263);
        assert_eq!(WCTEMP_OFFSET, 266);
        assert_eq!(CCTEMP_OFFSET, 268);
        assert_eq!(KAS_OFFSET, 320);
        assert_eq!(ANATT_OFFSET, 342);
        assert_eq!(ANACAP_OFFSET, 343);
        assert_eq!(ANAGRPMAX_OFFSET, 344);
        assert_eq!(NANAGRPID_OFFSET, 348);
        assert_eq!(SQES_OFFSET, 512);
        assert_eq!(CQES_OFFSET, 513);
        assert_eq!(MAXCMD_OFFSET, 514);
        assert_eq!(NN_OFFSET, 516);
        assert_eq!(ONCS_OFFSET, 520);
        assert_eq!(FUSES_OFFSET, 522);
        assert_eq!(FNA_OFFSET, 524);
        assert_eq!(VWC_OFFSET, 525);
        assert_eq!(AWUN_OFFSET, 526);
        assert_eq!(AWUPF_OFFSET, 528);
        assert_eq!(ACWU_OFFSET, 532);
        assert_eq!(SGLS_OFFSET, 536);
        assert_eq!(MNAN_OFFSET, 540);
        assert_eq!(SUBNQN_OFFSET, 768);
        assert_eq!(IOCCSZ_OFFSET, 1792);
        assert_eq!(IORCSZ_OFFSET, 1796);
        assert_eq!(ICDOFF_OFFSET, 1800);
        assert_eq!(FCATT_OFFSET, 1802);
        assert_eq!(MSDBD_OFFSET, 1803);
        assert_eq!(OFCS_OFFSET, 1804);
        assert_eq!(PSD0_OFFSET, 2048);
        assert_eq!(VS_OFFSET, 3072);
        assert_eq!(VS_OFFSET + VS_LEN, IDENTIFY_DATA_LEN);
    }

    /// Linux `struct nvme_id_power_state`, 32 bytes.
    #[test]
    fn power_state_descriptor_offsets_match_spec() {
        use psd::*;
        assert_eq!(MP_OFFSET, 0);
        assert_eq!(FLAGS_OFFSET, 3);
        assert_eq!(ENLAT_OFFSET, 4);
        assert_eq!(EXLAT_OFFSET, 8);
        assert_eq!(RRT_OFFSET, 12);
        assert_eq!(RRL_OFFSET, 13);
        assert_eq!(RWT_OFFSET, 14);
        assert_eq!(RWL_OFFSET, 15);
        assert_eq!(IDLP_OFFSET, 16);
        assert_eq!(IPS_OFFSET, 18);
        assert_eq!(ACTP_OFFSET, 20);
        assert_eq!(APW_APS_OFFSET, 22);
        assert_eq!(POWER_STATE_DESCRIPTOR_LEN, 32);
    }

    /// NVM Command Set 1.0 "Identify Namespace Data Structure" and Linux
    /// `struct nvme_id_ns`.
    #[test]
    fn id_ns_offsets_match_spec() {
        use id_ns::*;
        assert_eq!(NSZE_OFFSET, 0);
        assert_eq!(NCAP_OFFSET, 8);
        assert_eq!(NUSE_OFFSET, 16);
        assert_eq!(NSFEAT_OFFSET, 24);
        assert_eq!(NLBAF_OFFSET, 25);
        assert_eq!(FLBAS_OFFSET, 26);
        assert_eq!(MC_OFFSET, 27);
        assert_eq!(DPC_OFFSET, 28);
        assert_eq!(DPS_OFFSET, 29);
        assert_eq!(NMIC_OFFSET, 30);
        assert_eq!(RESCAP_OFFSET, 31);
        assert_eq!(FPI_OFFSET, 32);
        assert_eq!(DLFEAT_OFFSET, 33);
        assert_eq!(NAWUN_OFFSET, 34);
        assert_eq!(NAWUPF_OFFSET, 36);
        assert_eq!(NACWU_OFFSET, 38);
        assert_eq!(NABSN_OFFSET, 40);
        assert_eq!(NABO_OFFSET, 42);
        assert_eq!(NABSPF_OFFSET, 44);
        assert_eq!(NOIOB_OFFSET, 46);
        assert_eq!(NVMCAP_OFFSET, 48);
        assert_eq!(NPWG_OFFSET, 64);
        assert_eq!(NPWA_OFFSET, 66);
        assert_eq!(NPDG_OFFSET, 68);
        assert_eq!(NPDA_OFFSET, 70);
        assert_eq!(NOWS_OFFSET, 72);
        assert_eq!(ANAGRPID_OFFSET, 92);
        assert_eq!(NSATTR_OFFSET, 99);
        assert_eq!(NVMSETID_OFFSET, 100);
        assert_eq!(ENDGID_OFFSET, 102);
        assert_eq!(NGUID_OFFSET, 104);
        assert_eq!(EUI64_OFFSET, 120);
        assert_eq!(LBAF_OFFSET, 128);
        assert_eq!(LBAF_LEN, 4);
        assert_eq!((LBAF_MS_OFFSET, LBAF_LBADS_OFFSET, LBAF_RP_OFFSET), (0, 2, 3));
        assert_eq!(VS_OFFSET, 384);
    }

    /// Linux `struct nvme_ns_id_desc` and `NVME_NIDT_*`.
    #[test]
    fn ns_id_descriptor_layout_matches_spec() {
        assert_eq!((NIDT_OFFSET, NIDL_OFFSET, NID_OFFSET), (0, 1, 4));
        assert_eq!(NS_ID_DESC_HEADER_LEN, 4);
        assert_eq!((NIDT_EUI64, NIDT_NGUID, NIDT_UUID, NIDT_CSI), (1, 2, 3, 4));
        assert_eq!((NIDT_EUI64_LEN, NIDT_NGUID_LEN, NIDT_UUID_LEN, NIDT_CSI_LEN), (8, 16, 16, 1));
        assert_eq!(ACTIVE_NS_LIST_MAX, 1024);
    }

    /// NVM Command Set 1.0 "I/O Command Set Specific Identify Controller
    /// Data Structure for the NVM Command Set"; Linux
    /// `struct nvme_id_ctrl_nvm` and SPDK `struct spdk_nvme_nvm_ctrlr_data`
    /// (u8 vsl, wzsl, wusl, dmrl; le32 dmrsl; le64 dmsl; 4080 reserved).
    #[test]
    fn id_ctrl_nvm_offsets_match_spec() {
        use id_ctrl_nvm::*;
        assert_eq!((VSL_OFFSET, WZSL_OFFSET, WUSL_OFFSET, DMRL_OFFSET), (0, 1, 2, 3));
        assert_eq!((DMRSL_OFFSET, DMSL_OFFSET), (4, 8));
        assert_eq!(RSVD16_UNUSED_OFFSET + 4080, IDENTIFY_DATA_LEN);
    }

    #[test]
    fn id_ctrl_nvm_round_trips_at_spec_offsets() {
        let c = IdentifyControllerNvm { vsl: 1, wzsl: 13, wusl: 3, dmrl: 255, dmrsl: 0x0102_0304, dmsl: u64::MAX - 1 };
        let b = c.encode();
        assert_eq!(&b[..8], &[1, 13, 3, 255, 4, 3, 2, 1]);
        assert_eq!(&b[8..16], &(u64::MAX - 1).to_le_bytes());
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyControllerNvm::decode(&b), Ok(c));
    }

    /// NVMe Base 2.0 "I/O Command Set Independent Identify Namespace Data
    /// Structure"; Linux `struct nvme_id_ns_cs_indep` (nsfeat, nmic, rescap,
    /// fpi, le32 anagrpid, nsattr, rsvd9, le16 nvmsetid, le16 endgid, nstat).
    #[test]
    fn id_ns_indep_offsets_match_spec() {
        use id_ns_indep::*;
        assert_eq!((NSFEAT_OFFSET, NMIC_OFFSET, RESCAP_OFFSET, FPI_OFFSET), (0, 1, 2, 3));
        assert_eq!((ANAGRPID_OFFSET, NSATTR_OFFSET, NVMSETID_OFFSET, ENDGID_OFFSET), (4, 8, 10, 12));
        assert_eq!(NSTAT_OFFSET, 14);
        assert_eq!(RSVD15_UNUSED_OFFSET + 4081, IDENTIFY_DATA_LEN);
        assert_eq!(NSTAT_NAMESPACE_READY, 1);
    }

    #[test]
    fn id_ns_indep_round_trips_at_spec_offsets() {
        let n = IdentifyNamespaceIndependent {
            nsfeat: 0x18,
            nmic: NMIC_SHARED,
            rescap: 0x7f,
            fpi: 0x80,
            anagrpid: 0x0a0b_0c0d,
            nsattr: NSATTR_WRITE_PROTECTED,
            nvmsetid: 0x1234,
            endgid: 0x5678,
            nstat: NSTAT_NAMESPACE_READY,
        };
        let b = n.encode();
        assert_eq!(&b[..15], &[0x18, 1, 0x7f, 0x80, 0x0d, 0x0c, 0x0b, 0x0a, 1, 0, 0x34, 0x12, 0x78, 0x56, 1]);
        assert!(b[15..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyNamespaceIndependent::decode(&b), Ok(n));
    }

    #[test]
    fn id_ctrl_nvm_and_id_ns_indep_short_buffers_are_truncated() {
        let short = [0u8; 4095];
        let want = IdentifyError::Truncated { needed: 4096, got: 4095 };
        assert_eq!(IdentifyControllerNvm::decode(&short).unwrap_err(), want);
        assert_eq!(IdentifyNamespaceIndependent::decode(&short).unwrap_err(), want);
    }

    #[test]
    fn bit_constants_match_spec() {
        assert_eq!(OAES_NS_ATTRIBUTE_NOTICES, 0x100);
        assert_eq!(OAES_DISCOVERY_LOG_CHANGE_NOTICES, 0x8000_0000);
        assert_eq!([ONCS_COMPARE, ONCS_WRITE_UNCORRECTABLE, ONCS_DSM, ONCS_WRITE_ZEROES], [1, 2, 4, 8]);
        assert_eq!([ONCS_SAVE_SELECT, ONCS_RESERVATIONS, ONCS_TIMESTAMP], [16, 32, 64]);
        assert_eq!(VWC_FLUSH_BROADCAST_SUPPORTED, 0b110);
        assert_eq!(VWC_FLUSH_BROADCAST_UNSUPPORTED, 0b100);
        assert_eq!((CNTRLTYPE_IO, CNTRLTYPE_DISCOVERY, CNTRLTYPE_ADMIN), (1, 2, 3));
        assert_eq!((SQES_64, CQES_16), (0x66, 0x44));
        assert_eq!(SGLS_ADDRESS_AS_OFFSET, 0x10_0000);
        assert_eq!(Cns::NS_ID_DESCRIPTOR_LIST, Cns(3));
    }

    fn sample_ctrl() -> IdentifyController {
        IdentifyController {
            vid: 0x1b36,
            ssvid: 0x1af4,
            sn: "0123456789abcdef0123".into(),
            mn: "strata".into(),
            fr: "0.1.0".into(),
            rab: 6,
            ieee: [0x01, 0x02, 0x03],
            cmic: CMIC_MULTI_PORT | CMIC_MULTI_CONTROLLER | CMIC_ANA,
            mdts: 5,
            cntlid: 0x1234,
            ver: 0x0002_0000,
            rtd3r: 7,
            rtd3e: 8,
            oaes: OAES_NS_ATTRIBUTE_NOTICES | OAES_ANA_CHANGE_NOTICES,
            ctratt: CTRATT_HOST_ID_128 | CTRATT_TBKAS,
            cntrltype: CNTRLTYPE_IO,
            fguid: [9; 16],
            oacs: 0x0a,
            acl: 3,
            aerl: 3,
            frmw: FRMW_SLOT1_READ_ONLY | (1 << FRMW_NUM_SLOTS_SHIFT),
            lpa: LPA_SMART_PER_NAMESPACE | LPA_COMMANDS_EFFECTS | LPA_EXTENDED_DATA,
            elpe: 127,
            npss: 0,
            wctemp: 343,
            cctemp: 373,
            kas: 50,
            anatt: 10,
            anacap: 0x1f,
            anagrpmax: 128,
            nanagrpid: 128,
            sqes: SQES_64,
            cqes: CQES_16,
            maxcmd: 128,
            nn: 1024,
            oncs: ONCS_DSM | ONCS_WRITE_ZEROES | ONCS_RESERVATIONS,
            fuses: 1,
            fna: 2,
            vwc: VWC_PRESENT | VWC_FLUSH_BROADCAST_SUPPORTED,
            awun: 11,
            awupf: 12,
            acwu: 13,
            sgls: SGLS_SUPPORTED_BYTE_ALIGNED | SGLS_ADDRESS_AS_OFFSET,
            mnan: 1024,
            subnqn: "nqn.2024-01.io.strata:subsys1".into(),
            ioccsz: (64 + 8192) / 16,
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
            ofcs: OFCS_DISCONNECT,
            psd0: PowerStateDescriptor {
                mp: 0x9c4,
                flags: 0,
                enlat: 0x10,
                exlat: 0x4,
                rrt: 1,
                rrl: 2,
                rwt: 3,
                rwl: 4,
                idlp: 5,
                ips: 0x40,
                actp: 6,
                apw_aps: 0x82,
            },
        }
    }

    #[test]
    fn id_ctrl_round_trips() {
        let c = sample_ctrl();
        let b = c.encode();
        assert_eq!(IdentifyController::decode(&b), Ok(c));
    }

    #[test]
    fn id_ctrl_fields_land_at_spec_offsets() {
        let b = sample_ctrl().encode();
        assert_eq!(b[77], 5, "MDTS");
        assert_eq!(&b[78..80], &[0x34, 0x12], "CNTLID");
        assert_eq!(&b[24..32], b"strata  ", "MN is space padded");
        assert_eq!(&b[768..772], b"nqn.", "SUBNQN");
        assert_eq!(b[768 + 29], 0, "SUBNQN is NUL padded");
        assert_eq!(b[512], 0x66, "SQES");
        assert_eq!(&b[1792..1796], &516u32.to_le_bytes(), "IOCCSZ");
        assert_eq!(&b[2048..2050], &0x9c4u16.to_le_bytes(), "PSD0.MP");
        assert!(b[3072..].iter().all(|&x| x == 0), "vendor specific is zero");
    }

    #[test]
    fn id_ctrl_cuts_long_strings_on_char_boundary() {
        let c = IdentifyController {
            fr: "1234567é".into(), // 9 bytes; the 2-byte 'é' does not fit.
            ..IdentifyController::default()
        };
        let d = IdentifyController::decode(&c.encode()).unwrap();
        assert_eq!(d.fr, "1234567");
    }

    #[test]
    fn id_ctrl_short_buffer_is_truncated() {
        let b = sample_ctrl().encode();
        assert_eq!(IdentifyController::decode(&b[..4095]), Err(IdentifyError::Truncated { needed: 4096, got: 4095 }));
    }

    #[test]
    fn id_ctrl_non_utf8_model_is_rejected() {
        let mut b = sample_ctrl().encode();
        b[id_ctrl::MN_OFFSET] = 0xff;
        assert_eq!(IdentifyController::decode(&b), Err(IdentifyError::NotUtf8 { field: "MN" }));
    }

    fn sample_ns() -> IdentifyNamespace {
        let mut lbaf = [LbaFormat::default(); LBAF_COUNT];
        lbaf[0] = LbaFormat { ms: 0, lbads: 9, rp: 2 };
        lbaf[1] = LbaFormat { ms: 8, lbads: 12, rp: 0 };
        lbaf[63] = LbaFormat { ms: 0xffff, lbads: 0xff, rp: 0xff };
        IdentifyNamespace {
            nsze: 1 << 30,
            ncap: (1 << 30) - 1,
            nuse: 12345,
            nsfeat: NSFEAT_THIN_PROVISIONING | NSFEAT_OPTPERF,
            nlbaf: 1,
            flbas: 1,
            mc: 1,
            dpc: 2,
            dps: 3,
            nmic: NMIC_SHARED,
            rescap: 0x7f,
            fpi: 0x80,
            dlfeat: DLFEAT_READ_ZEROES | DLFEAT_WRITE_ZEROES_DEALLOCATE,
            nawun: 1,
            nawupf: 2,
            nacwu: 3,
            nabsn: 4,
            nabo: 5,
            nabspf: 6,
            noiob: 7,
            nvmcap: u128::MAX - 5,
            npwg: 8,
            npwa: 9,
            npdg: 10,
            npda: 11,
            nows: 12,
            anagrpid: 1,
            nsattr: NSATTR_WRITE_PROTECTED,
            nvmsetid: 13,
            endgid: 14,
            nguid: [0xab; 16],
            eui64: [0xcd; 8],
            lbaf,
        }
    }

    #[test]
    fn id_ns_round_trips() {
        let n = sample_ns();
        let b = n.encode();
        assert_eq!(&b[104..120], &[0xab; 16], "NGUID at 104");
        assert_eq!(&b[132..136], &[8, 0, 12, 0], "LBAF1 at 132");
        assert_eq!(IdentifyNamespace::decode(&b), Ok(n));
    }

    #[test]
    fn id_ns_default_is_all_zero() {
        assert!(IdentifyNamespace::default().encode().iter().all(|&x| x == 0));
    }

    #[test]
    fn id_ns_block_size_uses_flbas_index() {
        let mut n = sample_ns();
        assert_eq!(n.formatted_lbaf_index(), 1);
        assert_eq!(n.block_size_bytes(), Some(4096));
        n.flbas = 0x60 | 0x0f; // index 63, LBADS 255: not representable.
        assert_eq!(n.formatted_lbaf_index(), 63);
        assert_eq!(n.block_size_bytes(), None);
    }

    #[test]
    fn id_ns_short_buffer_is_truncated() {
        assert_eq!(IdentifyNamespace::decode(&[0u8; 100]), Err(IdentifyError::Truncated { needed: 4096, got: 100 }));
    }

    #[test]
    fn id_ns_nlbaf_above_63_is_rejected() {
        let mut b = sample_ns().encode();
        b[id_ns::NLBAF_OFFSET] = 64;
        assert_eq!(
            IdentifyNamespace::decode(&b),
            Err(IdentifyError::FieldOutOfRange { field: "NLBAF", value: 64, max: 63 })
        );
    }

    #[test]
    fn active_ns_list_sorts_filters_and_round_trips() {
        let b = encode_active_ns_list([7, 3, 1, 3, 9, NSID_BROADCAST], 1);
        assert_eq!(&b[..4], &3u32.to_le_bytes());
        assert_eq!(decode_active_ns_list(&b), Ok(vec![3, 7, 9]));
    }

    #[test]
    fn active_ns_list_caps_at_1024_entries() {
        let b = encode_active_ns_list(1..=5000, 10);
        let l = decode_active_ns_list(&b).unwrap();
        assert_eq!(l.len(), 1024);
        assert_eq!((l[0], l[1023]), (11, 1034));
    }

    #[test]
    fn active_ns_list_short_buffer_is_truncated() {
        assert!(matches!(decode_active_ns_list(&[0u8; 4092]), Err(IdentifyError::Truncated { .. })));
    }

    #[test]
    fn active_ns_list_out_of_order_is_rejected() {
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        put_u32(&mut b, 0, 5);
        put_u32(&mut b, 4, 5);
        assert_eq!(decode_active_ns_list(&b), Err(IdentifyError::NsListNotAscending { index: 1, nsid: 5 }));
    }

    #[test]
    fn ns_id_descriptors_round_trip_like_nvmet() {
        // nvmet order: UUID, NGUID, then CSI last.
        let descs = vec![
            NsIdDescriptor::Uuid([1; 16]),
            NsIdDescriptor::Nguid([2; 16]),
            NsIdDescriptor::Eui64([3; 8]),
            NsIdDescriptor::Unknown { nidt: 0x7e, nid: vec![4, 5, 6] },
            NsIdDescriptor::Csi(CSI_NVM),
        ];
        let b = encode_ns_id_descriptors(&descs).unwrap();
        assert_eq!(&b[..4], &[NIDT_UUID, 16, 0, 0]);
        assert_eq!(&b[20..24], &[NIDT_NGUID, 16, 0, 0]);
        assert_eq!(decode_ns_id_descriptors(&b), Ok(descs));
    }

    #[test]
    fn ns_id_descriptors_empty_list_is_all_zero() {
        let b = encode_ns_id_descriptors(&[]).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(decode_ns_id_descriptors(&b), Ok(vec![]));
    }

    #[test]
    fn ns_id_descriptors_short_buffer_is_truncated() {
        assert!(matches!(decode_ns_id_descriptors(&[0u8; 10]), Err(IdentifyError::Truncated { .. })));
    }

    #[test]
    fn ns_id_descriptor_with_wrong_nidl_is_rejected() {
        let mut b = encode_ns_id_descriptors(&[NsIdDescriptor::Eui64([3; 8])]).unwrap();
        b[NIDL_OFFSET] = 16;
        assert_eq!(
            decode_ns_id_descriptors(&b),
            Err(IdentifyError::DescriptorLength { nidt: NIDT_EUI64, nidl: 16, expected: 8 })
        );
    }

    #[test]
    fn ns_id_descriptor_running_past_the_list_is_rejected() {
        // Chain 255-byte NIDs until the next one no longer fits.
        let mut b = [0u8; IDENTIFY_DATA_LEN];
        let mut off = 0;
        loop {
            b[off] = 0x7e;
            b[off + 1] = 255;
            if off + 4 + 255 > IDENTIFY_DATA_LEN {
                break;
            }
            off += 4 + 255;
        }
        assert_eq!(off, 15 * 259);
        assert_eq!(decode_ns_id_descriptors(&b), Err(IdentifyError::DescriptorOverrun { offset: off, nidl: 255 }));
    }

    #[test]
    fn ns_id_descriptor_list_overflow_is_rejected() {
        let descs = vec![NsIdDescriptor::Uuid([1; 16]); 205]; // 205 * 20 > 4096
        assert_eq!(
            encode_ns_id_descriptors(&descs),
            Err(IdentifyError::DescriptorListOverflow { needed: 4100, capacity: 4096 })
        );
        assert!(encode_ns_id_descriptors(&descs[..204]).is_ok());
    }

    #[test]
    fn ns_id_descriptor_unknown_with_unencodable_length_is_rejected() {
        for len in [0usize, 256] {
            let d = NsIdDescriptor::Unknown { nidt: 9, nid: vec![1; len] };
            assert_eq!(encode_ns_id_descriptors(&[d]), Err(IdentifyError::UnencodableDescriptor { nidt: 9, len }));
        }
    }

    fn descriptor() -> impl Strategy<Value = NsIdDescriptor> {
        prop_oneof![
            any::<[u8; 8]>().prop_map(NsIdDescriptor::Eui64),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Nguid),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Uuid),
            any::<u8>().prop_map(NsIdDescriptor::Csi),
            (5u8..=255, proptest::collection::vec(any::<u8>(), 1..=255))
                .prop_map(|(nidt, nid)| NsIdDescriptor::Unknown { nidt, nid }),
        ]
    }

    proptest! {
        /// Any list that fits decodes back to itself; any list that does
        /// not fit is refused with the byte count it needed.
        #[test]
        fn ns_id_descriptor_lists_round_trip(descs in proptest::collection::vec(descriptor(), 0..40)) {
            let needed: usize = descs.iter().map(|d| 4 + d.nidt_and_nid().1.len()).sum();
            match encode_ns_id_descriptors(&descs) {
                Ok(b) => {
                    prop_assert!(needed <= IDENTIFY_DATA_LEN);
                    prop_assert_eq!(decode_ns_id_descriptors(&b), Ok(descs));
                }
                Err(e) => prop_assert_eq!(
                    e,
                    IdentifyError::DescriptorListOverflow { needed, capacity: IDENTIFY_DATA_LEN }
                ),
            }
        }

        /// Arbitrary bytes never panic any decoder.
        #[test]
        fn decoders_do_not_panic_on_random_pages(page in proptest::collection::vec(any::<u8>(), 4000..=4200)) {
            let _ = IdentifyController::decode(&page);
            let _ = IdentifyNamespace::decode(&page);
            let _ = decode_active_ns_list(&page);
            let _ = decode_ns_id_descriptors(&page);
            let _ = IdentifyControllerNvm::decode(&page);
            let _ = IdentifyNamespaceIndependent::decode(&page);
        }

        #[test]
        fn active_ns_lists_round_trip(mut nsids in proptest::collection::vec(1u32..0xffff_fff0, 0..1500), after in 0u32..1000) {
            let b = encode_active_ns_list(nsids.iter().copied(), after);
            nsids.retain(|&n| n > after);
            nsids.sort_unstable();
            nsids.dedup();
            nsids.truncate(ACTIVE_NS_LIST_MAX);
            prop_assert_eq!(decode_active_ns_list(&b), Ok(nsids));
        }
    }
}
