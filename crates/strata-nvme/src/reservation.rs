//! Reservations: the four commands' fields and data, the extended
//! Reservation Status data structure that Reservation Report returns, and
//! the Reservation Notification log page (NVMe Base 2.0, 8.19; NVM Command
//! Set 1.0, 4.1-4.4 for the commands).
//!
//! # Commands (I/O queue, NSID names the namespace)
//!
//! | command | opcode | CDW10 | data (host to controller) |
//! |---|---|---|---|
//! | Reservation Register | 0Dh | RREGA 2:0, IEKEY 3, CPTPL 31:30 | CRKEY 7:0, NRKEY 15:8 |
//! | Reservation Report | 0Eh | NUMD 31:0 (dwords, 0's based); CDW11 EDS bit 0 | (controller to host) |
//! | Reservation Acquire | 11h | RACQA 2:0, IEKEY 3, RTYPE 15:8 | CRKEY 7:0, PRKEY 15:8 |
//! | Reservation Release | 15h | RRELA 2:0, IEKEY 3, RTYPE 15:8 | CRKEY 7:0 |
//!
//! # Extended Reservation Status (Report with EDS = 1)
//!
//! | bytes | field |
//! |---|---|
//! | 3:0 | GEN, the generation |
//! | 4 | RTYPE (0: no reservation) |
//! | 6:5 | REGCTL, the number of registrants |
//! | 9 | PTPLS, persist through power loss |
//! | 63:10 | reserved |
//! | 64 + 64 n | registrant n: CNTLID 1:0, RCSTS 2 (bit 0: holds the reservation), RKEY 15:8, HOSTID 31:16 |
//!
//! # Reservation Notification log page (80h), 64 bytes
//!
//! Log Page Count 7:0, type 8, Number of Available Log Pages 9, NSID 15:12.

use crate::codec::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

/// Opcodes of the reservation commands (NVM command set).
pub mod opcode {
    /// Reservation Register.
    pub const REGISTER: u8 = 0x0D;
    /// Reservation Report.
    pub const REPORT: u8 = 0x0E;
    /// Reservation Acquire.
    pub const ACQUIRE: u8 = 0x11;
    /// Reservation Release.
    pub const RELEASE: u8 = 0x15;
}

/// The Reservation Notification log page identifier.
pub const NOTIFICATION_LOG_PAGE: u8 = 0x80;
/// Feature: Reservation Notification Mask.
pub const FEATURE_NOTIFICATION_MASK: u8 = 0x82;
/// Feature: Reservation Persistence.
pub const FEATURE_PERSISTENCE: u8 = 0x83;

/// Bytes of Reservation Register's data: CRKEY, NRKEY.
pub const REGISTER_DATA_BYTES: usize = 16;
/// Bytes of Reservation Acquire's data: CRKEY, PRKEY.
pub const ACQUIRE_DATA_BYTES: usize = 16;
/// Bytes of Reservation Release's data: CRKEY.
pub const RELEASE_DATA_BYTES: usize = 8;
/// Bytes of the extended Reservation Status header.
pub const STATUS_HEADER_BYTES: usize = 64;
/// Bytes of one extended registrant entry.
pub const REGISTRANT_BYTES: usize = 64;
/// Bytes of the Reservation Notification log page.
pub const NOTICE_BYTES: usize = 64;

/// A field of a reservation command that the command set does not
/// define (the controller answers Invalid Field in Command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReservationFieldError {
    /// An action code the command does not define.
    #[error("reservation action {0} is not defined")]
    Action(u8),
    /// A reservation type outside 1..=6.
    #[error("reservation type {0} is not defined")]
    Type(u8),
    /// CPTPL 01b, which is reserved.
    #[error("change persist through power loss value 1 is reserved")]
    Persistence,
    /// The command's data is shorter than its fixed size.
    #[error("reservation data of {got} bytes, {need} expected")]
    ShortData {
        /// Bytes given.
        got: usize,
        /// Bytes the command takes.
        need: usize,
    },
}

/// A reservation type (RTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReservationType {
    /// Only the holder writes; everyone reads.
    WriteExclusive = 1,
    /// Only the holder reads or writes.
    ExclusiveAccess = 2,
    /// Only registrants write; everyone reads.
    WriteExclusiveRegistrantsOnly = 3,
    /// Only registrants read or write.
    ExclusiveAccessRegistrantsOnly = 4,
    /// Every registrant holds it and writes; everyone reads.
    WriteExclusiveAllRegistrants = 5,
    /// Every registrant holds it, reads and writes.
    ExclusiveAccessAllRegistrants = 6,
}

impl ReservationType {
    /// The type of RTYPE `code`.
    ///
    /// # Errors
    ///
    /// [`ReservationFieldError::Type`] outside 1..=6.
    pub fn from_code(code: u8) -> Result<ReservationType, ReservationFieldError> {
        Ok(match code {
            1 => ReservationType::WriteExclusive,
            2 => ReservationType::ExclusiveAccess,
            3 => ReservationType::WriteExclusiveRegistrantsOnly,
            4 => ReservationType::ExclusiveAccessRegistrantsOnly,
            5 => ReservationType::WriteExclusiveAllRegistrants,
            6 => ReservationType::ExclusiveAccessAllRegistrants,
            other => return Err(ReservationFieldError::Type(other)),
        })
    }

    /// Its RTYPE code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Every registrant is a holder (types 5 and 6).
    pub fn all_registrants(self) -> bool {
        matches!(self, ReservationType::WriteExclusiveAllRegistrants | ReservationType::ExclusiveAccessAllRegistrants)
    }

    /// Reads are limited too (the exclusive access types).
    pub fn exclusive_access(self) -> bool {
        matches!(
            self,
            ReservationType::ExclusiveAccess
                | ReservationType::ExclusiveAccessRegistrantsOnly
                | ReservationType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants that do not hold it keep access (types 3 to 6).
    pub fn registrants_keep_access(self) -> bool {
        !matches!(self, ReservationType::WriteExclusive | ReservationType::ExclusiveAccess)
    }
}

/// Bits 2:0 and bit 3 (IEKEY) of a reservation command's CDW10.
fn action_and_ignore_key(cdw10: u32) -> (u8, bool) {
    ((cdw10 & 0x7) as u8, cdw10 & 0x8 != 0)
}

/// Bits 15:8 of a reservation command's CDW10.
fn rtype_code(cdw10: u32) -> u8 {
    (cdw10 >> 8) as u8
}

/// Reservation Register's action (RREGA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterAction {
    /// Register with NRKEY.
    Register,
    /// Unregister (CRKEY must match unless IEKEY).
    Unregister,
    /// Replace the key with NRKEY (CRKEY must match unless IEKEY).
    Replace,
}

/// Change Persist Through Power Loss (CPTPL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistChange {
    /// Leave it.
    Keep,
    /// Clear it (reservations do not survive a power loss).
    Clear,
    /// Set it (reservations survive a power loss).
    Set,
}

/// A Reservation Register command's CDW10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterFields {
    /// RREGA.
    pub action: RegisterAction,
    /// IEKEY: ignore the current key.
    pub ignore_key: bool,
    /// CPTPL.
    pub persist: PersistChange,
}

impl RegisterFields {
    /// Decodes CDW10.
    ///
    /// # Errors
    ///
    /// An undefined action, or CPTPL 01b.
    pub fn from_cdw10(cdw10: u32) -> Result<RegisterFields, ReservationFieldError> {
        let (a, ignore_key) = action_and_ignore_key(cdw10);
        let action = match a {
            0 => RegisterAction::Register,
            1 => RegisterAction::Unregister,
            2 => RegisterAction::Replace,
            other => return Err(ReservationFieldError::Action(other)),
        };
        let persist = match cdw10 >> 30 {
            0 => PersistChange::Keep,
            2 => PersistChange::Clear,
            3 => PersistChange::Set,
            _ => return Err(ReservationFieldError::Persistence),
        };
        Ok(RegisterFields { action, ignore_key, persist })
    }
}

/// Reservation Acquire's action (RACQA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireAction {
    /// Acquire.
    Acquire,
    /// Preempt the registrants whose key is PRKEY.
    Preempt,
    /// Preempt, and let nothing the preempted hosts had in flight run on.
    PreemptAndAbort,
}

/// A Reservation Acquire command's CDW10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireFields {
    /// RACQA.
    pub action: AcquireAction,
    /// IEKEY (obsolete for Acquire: a controller refuses it).
    pub ignore_key: bool,
    /// RTYPE.
    pub rtype: ReservationType,
}

impl AcquireFields {
    /// Decodes CDW10.
    ///
    /// # Errors
    ///
    /// An undefined action or type.
    pub fn from_cdw10(cdw10: u32) -> Result<AcquireFields, ReservationFieldError> {
        let (a, ignore_key) = action_and_ignore_key(cdw10);
        let action = match a {
            0 => AcquireAction::Acquire,
            1 => AcquireAction::Preempt,
            2 => AcquireAction::PreemptAndAbort,
            other => return Err(ReservationFieldError::Action(other)),
        };
        Ok(AcquireFields { action, ignore_key, rtype: ReservationType::from_code(rtype_code(cdw10))? })
    }
}

/// Reservation Release's action (RRELA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseAction {
    /// Release the reservation this host holds.
    Release,
    /// Clear: drop the reservation and every registrant.
    Clear,
}

/// A Reservation Release command's CDW10. RTYPE stays raw: Release
/// compares it with the reservation's type, Clear ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseFields {
    /// RRELA.
    pub action: ReleaseAction,
    /// IEKEY (obsolete for Release: a controller refuses it).
    pub ignore_key: bool,
    /// RTYPE, as sent.
    pub rtype: u8,
}

impl ReleaseFields {
    /// Decodes CDW10.
    ///
    /// # Errors
    ///
    /// An undefined action.
    pub fn from_cdw10(cdw10: u32) -> Result<ReleaseFields, ReservationFieldError> {
        let (a, ignore_key) = action_and_ignore_key(cdw10);
        let action = match a {
            0 => ReleaseAction::Release,
            1 => ReleaseAction::Clear,
            other => return Err(ReservationFieldError::Action(other)),
        };
        Ok(ReleaseFields { action, ignore_key, rtype: rtype_code(cdw10) })
    }
}

/// A Reservation Report command's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportFields {
    /// Bytes the host takes (NUMD + 1 dwords).
    pub bytes: u64,
    /// EDS: the extended data structure (128-bit host identifiers).
    pub extended: bool,
}

impl ReportFields {
    /// Decodes CDW10 and CDW11.
    pub fn from_cdws(cdw10: u32, cdw11: u32) -> ReportFields {
        ReportFields { bytes: (u64::from(cdw10) + 1) * 4, extended: cdw11 & 1 != 0 }
    }
}

/// The two keys of Register (CRKEY, NRKEY) or Acquire (CRKEY, PRKEY).
///
/// # Errors
///
/// [`ReservationFieldError::ShortData`] below 16 bytes.
pub fn two_keys(data: &[u8]) -> Result<(u64, u64), ReservationFieldError> {
    if data.len() < REGISTER_DATA_BYTES {
        return Err(ReservationFieldError::ShortData { got: data.len(), need: REGISTER_DATA_BYTES });
    }
    Ok((get_u64(data, 0), get_u64(data, 8)))
}

/// Release's key (CRKEY).
///
/// # Errors
///
/// [`ReservationFieldError::ShortData`] below 8 bytes.
pub fn one_key(data: &[u8]) -> Result<u64, ReservationFieldError> {
    if data.len() < RELEASE_DATA_BYTES {
        return Err(ReservationFieldError::ShortData { got: data.len(), need: RELEASE_DATA_BYTES });
    }
    Ok(get_u64(data, 0))
}

/// One registrant as Reservation Report shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrantEntry {
    /// Its controller (FFFFh: the dynamic controller model, any).
    pub cntlid: u16,
    /// It holds the reservation.
    pub holds: bool,
    /// Its key.
    pub key: u64,
    /// Its host identifier.
    pub hostid: [u8; 16],
}

/// The extended Reservation Status data structure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReservationStatus {
    /// GEN.
    pub generation: u32,
    /// RTYPE; `None` without a reservation.
    pub rtype: Option<ReservationType>,
    /// PTPLS.
    pub persist: bool,
    /// The registrants, in order.
    pub registrants: Vec<RegistrantEntry>,
}

impl ReservationStatus {
    /// Its bytes, cut to `len` (what the host asked for); REGCTL counts
    /// every registrant, listed or not.
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; STATUS_HEADER_BYTES + self.registrants.len() * REGISTRANT_BYTES];
        put_u32(&mut b, 0, self.generation);
        b[4] = self.rtype.map_or(0, ReservationType::code);
        put_u16(&mut b, 5, u16::try_from(self.registrants.len()).unwrap_or(u16::MAX));
        b[9] = u8::from(self.persist);
        for (i, r) in self.registrants.iter().enumerate() {
            let e = &mut b[STATUS_HEADER_BYTES + i * REGISTRANT_BYTES..][..REGISTRANT_BYTES];
            put_u16(e, 0, r.cntlid);
            e[2] = u8::from(r.holds);
            put_u64(e, 8, r.key);
            e[16..32].copy_from_slice(&r.hostid);
        }
        b.resize(len, 0);
        b
    }

    /// Reads it back from what a controller returned (the registrants
    /// that fit, up to REGCTL).
    ///
    /// # Errors
    ///
    /// Fewer than 64 bytes, or an undefined RTYPE.
    pub fn decode(b: &[u8]) -> Result<ReservationStatus, ReservationFieldError> {
        if b.len() < STATUS_HEADER_BYTES {
            return Err(ReservationFieldError::ShortData { got: b.len(), need: STATUS_HEADER_BYTES });
        }
        let rtype = match b[4] {
            0 => None,
            code => Some(ReservationType::from_code(code)?),
        };
        let count = usize::from(get_u16(b, 5));
        let registrants = b[STATUS_HEADER_BYTES..]
            .chunks_exact(REGISTRANT_BYTES)
            .take(count)
            .map(|e| {
                let mut hostid = [0u8; 16];
                hostid.copy_from_slice(&e[16..32]);
                RegistrantEntry { cntlid: get_u16(e, 0), holds: e[2] & 1 != 0, key: get_u64(e, 8), hostid }
            })
            .collect();
        Ok(ReservationStatus { generation: get_u32(b, 0), rtype, persist: b[9] & 1 != 0, registrants })
    }
}

/// What a Reservation Notification log page reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoticeKind {
    /// Nothing (an empty page).
    Empty = 0,
    /// This host's registration was preempted.
    RegistrationPreempted = 1,
    /// The reservation was released (or its type changed).
    ReservationReleased = 2,
    /// The reservation was preempted (or cleared).
    ReservationPreempted = 3,
}

impl NoticeKind {
    /// Its bit in the Reservation Notification Mask feature (a set bit
    /// masks the notice).
    pub fn mask_bit(self) -> u32 {
        match self {
            NoticeKind::Empty => 0,
            NoticeKind::RegistrationPreempted => 1 << 1,
            NoticeKind::ReservationReleased => 1 << 2,
            NoticeKind::ReservationPreempted => 1 << 3,
        }
    }
}

/// The Reservation Notification log page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationNotice {
    /// Log Page Count: increments with each notice (0: none yet).
    pub count: u64,
    /// What happened.
    pub kind: NoticeKind,
    /// Notices still waiting after this one.
    pub available: u8,
    /// The namespace.
    pub nsid: u32,
}

impl ReservationNotice {
    /// The empty page (no notice waiting).
    pub const EMPTY: ReservationNotice = ReservationNotice { count: 0, kind: NoticeKind::Empty, available: 0, nsid: 0 };

    /// Its 64 bytes.
    pub fn encode(&self) -> [u8; NOTICE_BYTES] {
        let mut b = [0u8; NOTICE_BYTES];
        put_u64(&mut b, 0, self.count);
        b[8] = self.kind as u8;
        b[9] = self.available;
        put_u32(&mut b, 12, self.nsid);
        b
    }

    /// Reads a page a controller returned.
    ///
    /// # Errors
    ///
    /// Fewer than 64 bytes, or an undefined type.
    pub fn decode(b: &[u8]) -> Result<ReservationNotice, ReservationFieldError> {
        if b.len() < NOTICE_BYTES {
            return Err(ReservationFieldError::ShortData { got: b.len(), need: NOTICE_BYTES });
        }
        let kind = match b[8] {
            0 => NoticeKind::Empty,
            1 => NoticeKind::RegistrationPreempted,
            2 => NoticeKind::ReservationReleased,
            3 => NoticeKind::ReservationPreempted,
            other => return Err(ReservationFieldError::Type(other)),
        };
        Ok(ReservationNotice { count: get_u64(b, 0), kind, available: b[9], nsid: get_u32(b, 12) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_fields_sit_at_their_bits() {
        let r = RegisterFields::from_cdw10(0b1010 | 3 << 30).unwrap();
        assert_eq!(
            r,
            RegisterFields { action: RegisterAction::Replace, ignore_key: true, persist: PersistChange::Set }
        );
        assert_eq!(RegisterFields::from_cdw10(2 << 30).unwrap().persist, PersistChange::Clear);
        assert_eq!(RegisterFields::from_cdw10(1 << 30), Err(ReservationFieldError::Persistence));
        assert_eq!(RegisterFields::from_cdw10(3), Err(ReservationFieldError::Action(3)));
        let a = AcquireFields::from_cdw10(2 | 6 << 8).unwrap();
        assert_eq!(a.action, AcquireAction::PreemptAndAbort);
        assert_eq!(a.rtype, ReservationType::ExclusiveAccessAllRegistrants);
        assert!(!a.ignore_key);
        assert_eq!(AcquireFields::from_cdw10(7 << 8), Err(ReservationFieldError::Type(7)));
        assert_eq!(AcquireFields::from_cdw10(1 << 8 | 4), Err(ReservationFieldError::Action(4)));
        let r = ReleaseFields::from_cdw10(1 | 1 << 3 | 9 << 8).unwrap();
        assert_eq!(r, ReleaseFields { action: ReleaseAction::Clear, ignore_key: true, rtype: 9 });
        assert_eq!(ReportFields::from_cdws(15, 1), ReportFields { bytes: 64, extended: true });
        assert_eq!(ReportFields::from_cdws(u32::MAX, 0).bytes, (1u64 << 32) * 4, "no overflow");
    }

    #[test]
    fn keys_are_read_at_their_offsets_and_short_data_is_refused() {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        d[8..].copy_from_slice(&42u64.to_le_bytes());
        assert_eq!(two_keys(&d), Ok((0x1122_3344_5566_7788, 42)));
        assert_eq!(one_key(&d[..8]), Ok(0x1122_3344_5566_7788));
        assert_eq!(two_keys(&d[..15]), Err(ReservationFieldError::ShortData { got: 15, need: 16 }));
        assert_eq!(one_key(&d[..7]), Err(ReservationFieldError::ShortData { got: 7, need: 8 }));
    }

    #[test]
    fn the_extended_status_has_its_fields_at_their_offsets_and_round_trips() {
        let s = ReservationStatus {
            generation: 0x0102_0304,
            rtype: Some(ReservationType::WriteExclusiveRegistrantsOnly),
            persist: true,
            registrants: vec![
                RegistrantEntry { cntlid: 0xffff, holds: true, key: 7, hostid: [0xaa; 16] },
                RegistrantEntry { cntlid: 3, holds: false, key: 9, hostid: [0xbb; 16] },
            ],
        };
        let b = s.encode(192);
        assert_eq!(b.len(), 192);
        assert_eq!(&b[0..4], &[4, 3, 2, 1]);
        assert_eq!(b[4], 3);
        assert_eq!(&b[5..7], &[2, 0]);
        assert_eq!(b[9], 1);
        assert_eq!(&b[64..66], &[0xff, 0xff]);
        assert_eq!(b[66], 1);
        assert_eq!(&b[72..80], &7u64.to_le_bytes());
        assert_eq!(&b[80..96], &[0xaa; 16]);
        assert_eq!(&b[128 + 8..128 + 16], &9u64.to_le_bytes());
        assert_eq!(ReservationStatus::decode(&b).unwrap(), s);
        // Cut short: REGCTL still counts both; one entry fits.
        let short = s.encode(128);
        assert_eq!(&short[5..7], &[2, 0]);
        assert_eq!(ReservationStatus::decode(&short).unwrap().registrants, s.registrants[..1]);
        assert!(ReservationStatus::decode(&short[..63]).is_err());
    }

    #[test]
    fn the_notification_page_has_its_fields_at_their_offsets_and_round_trips() {
        let n = ReservationNotice { count: 5, kind: NoticeKind::ReservationPreempted, available: 2, nsid: 9 };
        let b = n.encode();
        assert_eq!(b.len(), 64);
        assert_eq!(&b[0..8], &5u64.to_le_bytes());
        assert_eq!((b[8], b[9]), (3, 2));
        assert_eq!(&b[12..16], &9u32.to_le_bytes());
        assert_eq!(ReservationNotice::decode(&b), Ok(n));
        assert_eq!(ReservationNotice::decode(&ReservationNotice::EMPTY.encode()), Ok(ReservationNotice::EMPTY));
        assert!(ReservationNotice::decode(&b[..10]).is_err());
    }
}
