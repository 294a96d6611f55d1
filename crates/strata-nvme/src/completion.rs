//! The 16-byte completion queue entry (NVMe Base 2.0, figure 90).
//!
//! | offset | size | field                                   |
//! |--------|------|-----------------------------------------|
//! | 0      | 8    | command specific result (DW0, DW1)      |
//! | 8      | 2    | SQHD: submission queue head pointer     |
//! | 10     | 2    | SQID: submission queue identifier       |
//! | 12     | 2    | CID: command identifier                 |
//! | 14     | 2    | status field, bit 0 is the phase tag    |

use crate::codec::{get_u16, get_u64, put_u16, put_u64};
use crate::status::Status;

/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;
/// Offset of the command specific result (DW0 and DW1).
pub const RESULT_OFFSET: usize = 0;
/// Offset of SQHD.
pub const SQHD_OFFSET: usize = RESULT_OFFSET + 8;
/// Offset of SQID.
pub const SQID_OFFSET: usize = SQHD_OFFSET + 2;
/// Offset of CID.
pub const CID_OFFSET: usize = SQID_OFFSET + 2;
/// Offset of the status field.
pub const STATUS_OFFSET: usize = CID_OFFSET + 2;

/// A decoded completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result: DW0 in the low 32 bits, DW1 in the high.
    pub result: u64,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// Identifier of the command this completes.
    pub cid: u16,
    /// Completion status.
    pub status: Status,
}

impl Cqe {
    /// A completion for `cid` with `status` and a zero result.
    pub fn new(cid: u16, status: Status) -> Cqe {
        Cqe { result: 0, sqhd: 0, sqid: 0, cid, status }
    }

    /// Encodes the entry (phase bit 0: fabrics do not use it).
    pub fn encode(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        put_u64(&mut b, RESULT_OFFSET, self.result);
        put_u16(&mut b, SQHD_OFFSET, self.sqhd);
        put_u16(&mut b, SQID_OFFSET, self.sqid);
        put_u16(&mut b, CID_OFFSET, self.cid);
        put_u16(&mut b, STATUS_OFFSET, self.status.to_field());
        b
    }

    /// Decodes an entry from exactly [`CQE_LEN`] bytes.
    pub fn decode(b: &[u8; CQE_LEN]) -> Cqe {
        Cqe {
            result: get_u64(b, RESULT_OFFSET),
            sqhd: get_u16(b, SQHD_OFFSET),
            sqid: get_u16(b, SQID_OFFSET),
            cid: get_u16(b, CID_OFFSET),
            status: Status::from_field(get_u16(b, STATUS_OFFSET)),
        }
    }

    /// DW0 of the result.
    pub fn dw0(&self) -> u32 {
        self.result as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_spec() {
        // struct nvme_completion in include/linux/nvme.h.
        assert_eq!((RESULT_OFFSET, SQHD_OFFSET, SQID_OFFSET, CID_OFFSET, STATUS_OFFSET), (0, 8, 10, 12, 14));
        assert_eq!(STATUS_OFFSET + 2, CQE_LEN);
    }

    #[test]
    fn round_trip() {
        let c = Cqe {
            result: 0x1122_3344_5566_7788,
            sqhd: 5,
            sqid: 2,
            cid: 0xbeef,
            status: Status::LBA_OUT_OF_RANGE.dnr(),
        };
        let b = c.encode();
        assert_eq!(&b[12..14], &[0xef, 0xbe]);
        // Status 0x80 with DNR, shifted past the phase bit: 0x4080 << 1.
        assert_eq!(u16::from_le_bytes([b[14], b[15]]), 0x8100);
        assert_eq!(Cqe::decode(&b), c);
    }
}
