//! NVMe completion status codes (NVMe Base 2.0, section 4.6.1.2).
//!
//! The 15-bit status field of a completion, without the phase bit:
//!
//! | bits  | field | meaning                      |
//! |-------|-------|------------------------------|
//! | 0..8  | SC    | status code                  |
//! | 8..11 | SCT   | status code type             |
//! | 11..13| CRD   | command retry delay          |
//! | 13    | M     | more (error log has details) |
//! | 14    | DNR   | do not retry                 |
//!
//! [`Status`] keeps SCT and SC in one `u16` as `SCT << 8 | SC`, the form the
//! Linux kernel uses (`NVME_SC_*`), plus the DNR bit. Unknown codes are
//! representable: a status is an open set.

/// A completion status: status code type, status code and the DNR bit.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(u16);

/// Status code type: generic command status.
pub const SCT_GENERIC: u8 = 0;
/// Status code type: command specific status.
pub const SCT_COMMAND_SPECIFIC: u8 = 1;
/// Status code type: media and data integrity errors.
pub const SCT_MEDIA: u8 = 2;
/// Status code type: path related status.
pub const SCT_PATH: u8 = 3;
/// Status code type: vendor specific.
pub const SCT_VENDOR: u8 = 7;

const DNR_BIT: u16 = 1 << 14;
const MORE_BIT: u16 = 1 << 13;

impl Status {
    /// Builds a status from type and code, with DNR clear.
    pub const fn new(sct: u8, sc: u8) -> Status {
        Status(((sct as u16 & 0x7) << 8) | sc as u16)
    }

    /// Success.
    pub const SUCCESS: Status = Status::new(SCT_GENERIC, 0x00);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Status = Status::new(SCT_GENERIC, 0x01);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Status = Status::new(SCT_GENERIC, 0x02);
    /// Command ID Conflict.
    pub const CID_CONFLICT: Status = Status::new(SCT_GENERIC, 0x03);
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Status = Status::new(SCT_GENERIC, 0x04);
    /// Commands Aborted due to Power Loss Notification.
    pub const ABORTED_POWER_LOSS: Status = Status::new(SCT_GENERIC, 0x05);
    /// Internal Error.
    pub const INTERNAL: Status = Status::new(SCT_GENERIC, 0x06);
    /// Command Abort Requested.
    pub const ABORT_REQUESTED: Status = Status::new(SCT_GENERIC, 0x07);
    /// Command Aborted due to SQ Deletion.
    pub const ABORTED_SQ_DELETION: Status = Status::new(SCT_GENERIC, 0x08);
    /// Invalid Namespace or Format.
    pub const INVALID_NS: Status = Status::new(SCT_GENERIC, 0x0B);
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE: Status = Status::new(SCT_GENERIC, 0x0C);
    /// Invalid SGL Last Segment Descriptor.
    pub const SGL_INVALID_LAST: Status = Status::new(SCT_GENERIC, 0x0D);
    /// Invalid Number of SGL Descriptors.
    pub const SGL_INVALID_COUNT: Status = Status::new(SCT_GENERIC, 0x0E);
    /// Data SGL Length Invalid.
    pub const SGL_INVALID_DATA: Status = Status::new(SCT_GENERIC, 0x0F);
    /// SGL Descriptor Type Invalid.
    pub const SGL_INVALID_TYPE: Status = Status::new(SCT_GENERIC, 0x11);
    /// SGL Offset Invalid.
    pub const SGL_INVALID_OFFSET: Status = Status::new(SCT_GENERIC, 0x16);
    /// SGL Descriptor Subtype Invalid.
    pub const SGL_INVALID_SUBTYPE: Status = Status::new(SCT_GENERIC, 0x17);
    /// Host Identifier Inconsistent Format.
    pub const HOST_ID_INCONSISTENT: Status = Status::new(SCT_GENERIC, 0x18);
    /// Keep Alive Timer Expired.
    pub const KEEP_ALIVE_EXPIRED: Status = Status::new(SCT_GENERIC, 0x19);
    /// Command Interrupted.
    pub const COMMAND_INTERRUPTED: Status = Status::new(SCT_GENERIC, 0x21);
    /// Transient Transport Error.
    pub const TRANSIENT_TRANSPORT: Status = Status::new(SCT_GENERIC, 0x22);
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: Status = Status::new(SCT_GENERIC, 0x80);
    /// Capacity Exceeded (a thin pool is full; hosts map it to ENOSPC).
    pub const CAPACITY_EXCEEDED: Status = Status::new(SCT_GENERIC, 0x81);
    /// Namespace Not Ready.
    pub const NS_NOT_READY: Status = Status::new(SCT_GENERIC, 0x82);
    /// Reservation Conflict.
    pub const RESERVATION_CONFLICT: Status = Status::new(SCT_GENERIC, 0x83);
    /// Asymmetric Access Persistent Loss: this path will not serve the
    /// namespace again (a host retries on another path).
    pub const ANA_PERSISTENT_LOSS: Status = Status::new(SCT_PATH, 0x01);
    /// Asymmetric Access Inaccessible: this path does not serve the
    /// namespace now (a host retries on another path).
    pub const ANA_INACCESSIBLE: Status = Status::new(SCT_PATH, 0x02);
    /// Asymmetric Access Transition: the path is changing state (a host
    /// retries, here or elsewhere, within ANATT).
    pub const ANA_TRANSITION: Status = Status::new(SCT_PATH, 0x03);

    /// Invalid Queue Identifier.
    pub const INVALID_QID: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x01);
    /// Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x02);
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT_EXCEEDED: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x05);
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x09);
    /// Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x0D);
    /// Feature Not Changeable.
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x0E);
    /// Conflicting Attributes (Dataset Management, Read, Write).
    pub const CONFLICTING_ATTRIBUTES: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x80);
    /// Connect: Incompatible Format.
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x80);
    /// Connect: Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x81);
    /// Connect: Connect Invalid Parameters.
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x82);
    /// Connect: Connect Restart Discovery.
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x83);
    /// Connect: Connect Invalid Host.
    pub const CONNECT_INVALID_HOST: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x84);
    /// Authentication Required: the queue must finish in-band
    /// authentication before any other command (Linux `NVME_SC_AUTH_REQUIRED`, 191h).
    pub const AUTH_REQUIRED: Status = Status::new(SCT_COMMAND_SPECIFIC, 0x91);

    /// Write Fault.
    pub const WRITE_FAULT: Status = Status::new(SCT_MEDIA, 0x80);
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(SCT_MEDIA, 0x81);
    /// Compare Failure.
    pub const COMPARE_FAILURE: Status = Status::new(SCT_MEDIA, 0x85);
    /// strata, vendor specific: a fenced command's epoch is older than the
    /// replica's; its sender no longer owns the volume.
    pub const STALE_EPOCH: Status = Status::new(SCT_VENDOR, 0x01);
    /// strata, vendor specific: a fenced namespace takes only fenced
    /// commands (an unfenced I/O would bypass the owner's epoch).
    pub const FENCE_REQUIRED: Status = Status::new(SCT_VENDOR, 0x02);
    /// strata, vendor specific: a fenced command's epoch is newer than the
    /// replica's, and the replica promised its current owner to let no
    /// newer one in for a while (the completion's result: milliseconds
    /// left). Its sender tries again after that.
    pub const PROMISED: Status = Status::new(SCT_VENDOR, 0x03);

    /// Status code type.
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }

    /// Status code.
    pub const fn sc(self) -> u8 {
        (self.0 & 0xff) as u8
    }

    /// True for [`Status::SUCCESS`] (DNR and other bits ignored).
    pub const fn is_success(self) -> bool {
        self.0 & 0x7ff == 0
    }

    /// The same status with the Do Not Retry bit set.
    pub const fn dnr(self) -> Status {
        Status(self.0 | DNR_BIT)
    }

    /// True for a path-related status (SCT 3: ANA states, path errors):
    /// the command may succeed through another path, and a multipath host
    /// retries it there rather than fail it.
    pub const fn is_path_error(self) -> bool {
        self.sct() == SCT_PATH
    }

    /// True when Do Not Retry is set.
    pub const fn is_dnr(self) -> bool {
        self.0 & DNR_BIT != 0
    }

    /// The same status with the More bit set.
    pub const fn more(self) -> Status {
        Status(self.0 | MORE_BIT)
    }

    /// The CQE status field (bits 1..16 of CQE dword 3's upper half), phase
    /// bit clear.
    pub const fn to_field(self) -> u16 {
        self.0 << 1
    }

    /// Decodes the CQE status field, ignoring the phase bit.
    pub const fn from_field(field: u16) -> Status {
        Status(field >> 1)
    }

    /// Status code type and code as `SCT << 8 | SC`, without DNR/More/CRD:
    /// the kernel's `NVME_SC_*` value.
    pub const fn code(self) -> u16 {
        self.0 & 0x7ff
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Status(sct={:#x}, sc={:#04x}{})", self.sct(), self.sc(), if self.is_dnr() { ", dnr" } else { "" })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.code() {
            0x000 => "success",
            0x001 => "invalid command opcode",
            0x002 => "invalid field in command",
            0x003 => "command id conflict",
            0x004 => "data transfer error",
            0x006 => "internal error",
            0x00b => "invalid namespace or format",
            0x00c => "command sequence error",
            0x00f => "data SGL length invalid",
            0x011 => "SGL descriptor type invalid",
            0x016 => "SGL offset invalid",
            0x019 => "keep alive timer expired",
            0x022 => "transient transport error",
            0x080 => "LBA out of range",
            0x081 => "capacity exceeded",
            0x082 => "namespace not ready",
            0x101 => "invalid queue identifier",
            0x102 => "invalid queue size",
            0x109 => "invalid log page",
            0x180 => "connect: incompatible format / conflicting attributes",
            0x181 => "connect: controller busy",
            0x182 => "connect: invalid parameters",
            0x184 => "connect: invalid host",
            0x280 => "write fault",
            0x281 => "unrecovered read error",
            0x285 => "compare failure",
            0x701 => "strata: stale epoch (fenced)",
            0x702 => "strata: fenced command required",
            _ => "status",
        };
        write!(f, "{name} ({:#05x})", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_kernel_constants() {
        // include/linux/nvme.h: NVME_SC_INVALID_FIELD 0x2, NVME_SC_LBA_RANGE 0x80,
        // NVME_SC_CONNECT_INVALID_PARAM 0x182, NVME_SC_CONNECT_INVALID_HOST 0x184,
        // NVME_SC_COMPARE_FAILED 0x285, NVME_SC_DNR 0x4000.
        assert_eq!(Status::INVALID_FIELD.code(), 0x002);
        assert_eq!(Status::LBA_OUT_OF_RANGE.code(), 0x080);
        assert_eq!(Status::CONNECT_INVALID_PARAMETERS.code(), 0x182);
        assert_eq!(Status::CONNECT_INVALID_HOST.code(), 0x184);
        assert_eq!(Status::COMPARE_FAILURE.code(), 0x285);
        assert_eq!(Status::INVALID_FIELD.dnr().0, 0x4002);
    }

    #[test]
    fn field_round_trip_drops_phase() {
        let s = Status::INVALID_NS.dnr();
        assert_eq!(Status::from_field(s.to_field() | 1), s);
        assert!(Status::from_field(1).is_success());
        assert!(!s.is_success() && s.is_dnr());
        assert_eq!((s.sct(), s.sc()), (0, 0x0B));
    }
}
