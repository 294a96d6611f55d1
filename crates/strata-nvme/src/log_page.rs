//! Log pages returned by the Admin Get Log Page command.
//!
//! This module owns the byte layout of the log pages a fabrics target
//! serves: Error Information (01h), SMART / Health Information (02h),
//! Changed Namespace List (04h), Asymmetric Namespace Access (0Ch) and the
//! Discovery log page (70h). It also
//! picks the window of a page a Get Log Page command asked for
//! ([`log_window`]). Gathering the values (counters, the changed-NSID set,
//! the ports and subsystems a host may see) is the target's job; decoding
//! the Get Log Page command (LID, NUMD, LPO) belongs to [`crate::command`].
//!
//! Each page is a plain struct (or list) with `encode`/`decode`. Decoders
//! never trust a count from the peer: the Discovery log page's NUMREC is
//! checked against the bytes actually supplied before any entry is read or
//! any memory is reserved for entries.
//!
//! Offsets come from the NVMe Base Specification 2.0 ("Get Log Page" log
//! page definitions, "Discovery Log Page") and match Linux
//! `include/linux/nvme.h` (`struct nvme_error_slot` as extended by
//! libnvme's `struct nvme_error_log_page`, `struct nvme_smart_log`,
//! `struct nvmf_disc_rsp_page_hdr`, `struct nvmf_disc_rsp_page_entry`).
//! The tests pin each one.
//!
//! # Format: Error Information log entry, 64 bytes
//!
//! | Bytes | Field                         |
//! |-------|-------------------------------|
//! | 07:00 | Error Count                   |
//! | 09:08 | Submission Queue ID           |
//! | 11:10 | Command ID                    |
//! | 13:12 | Status Field (bit 0 phase)    |
//! | 15:14 | Parameter Error Location      |
//! | 23:16 | LBA                           |
//! | 27:24 | Namespace                     |
//! | 28    | Vendor Specific Info Available|
//! | 29    | Transport Type (TRTYPE)       |
//! | 39:32 | Command Specific Information  |
//! | 41:40 | Transport Type Specific Info  |
//!
//! # Format: SMART / Health Information log, 512 bytes
//!
//! | Bytes   | Field                          | Bytes   | Field                         |
//! |---------|--------------------------------|---------|-------------------------------|
//! | 0       | Critical Warning               | 127:112 | Power Cycles                  |
//! | 2:1     | Composite Temperature (K)      | 143:128 | Power On Hours                |
//! | 3       | Available Spare                | 159:144 | Unsafe Shutdowns              |
//! | 4       | Available Spare Threshold      | 175:160 | Media and Data Integrity Errors |
//! | 5       | Percentage Used                | 191:176 | Number of Error Info Log Entries |
//! | 6       | Endurance Group Crit. Warning Summary | 195:192 | Warning Composite Temperature Time |
//! | 47:32   | Data Units Read                | 199:196 | Critical Composite Temperature Time |
//! | 63:48   | Data Units Written             | 215:200 | Temperature Sensor 1..8       |
//! | 79:64   | Host Read Commands             | 219:216 | Thermal Mgmt Temp 1 Transition Count |
//! | 95:80   | Host Write Commands            | 223:220 | Thermal Mgmt Temp 2 Transition Count |
//! | 111:96  | Controller Busy Time           | 231:224 | Total Time For Thermal Mgmt Temp 1 / 2 |
//!
//! # Format: Changed Namespace List, 4096 bytes
//!
//! Up to 1024 little-endian `u32` NSIDs, zero filled. If more than 1024
//! namespaces changed, entry 0 is FFFFFFFFh and the rest are zero.
//!
//! # Format: Asymmetric Namespace Access log page
//!
//! A 16-byte header (CHGCNT 07:00, NGRPS 09:08), then NGRPS ANA Group
//! Descriptors, each 32 bytes (ANAGRPID 03:00, NNSID 07:04, CHGCNT 15:08,
//! ANAS in byte 16 bits 3:0) followed by NNSID 4-byte NSIDs. With Return
//! Groups Only (LSP bit 0) NNSID is 0. The decoder checks NGRPS and each
//! NNSID against the bytes supplied.
//!
//! # Format: Discovery log page
//!
//! A 1024-byte header (GENCTR 07:00, NUMREC 15:08, RECFMT 17:16) followed by
//! NUMREC 1024-byte entries:
//!
//! | Bytes     | Field   | Bytes     | Field   |
//! |-----------|---------|-----------|---------|
//! | 00        | TRTYPE  | 09:08     | ASQSZ   |
//! | 01        | ADRFAM  | 11:10     | EFLAGS  |
//! | 02        | SUBTYPE | 63:32     | TRSVCID |
//! | 03        | TREQ    | 511:256   | SUBNQN  |
//! | 05:04     | PORTID  | 767:512   | TRADDR  |
//! | 07:06     | CNTLID  | 1023:768  | TSAS    |
//!
//! TRSVCID and TRADDR are ASCII, SUBNQN is UTF-8; this encoder NUL pads all
//! three like nvmet, and the decoder accepts NUL or space padding (SPDK pads
//! with spaces). For TCP, TSAS byte 0 is SECTYPE.

use crate::codec::{get_u16, get_u32, get_u64, get_u128, put_u16, put_u32, put_u64, put_u128};
use crate::identify::{get_text, put_text};

/// Log Page Identifier (LID), CDW10 bits 07:00 of Get Log Page.
///
/// An open set: unknown identifiers stay representable so the target can
/// answer them with Invalid Field (or Invalid Log Page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogPageId(pub u8);

impl LogPageId {
    /// Supported Log Pages.
    pub const SUPPORTED_LOG_PAGES: LogPageId = LogPageId(0x00);
    /// Error Information.
    pub const ERROR: LogPageId = LogPageId(0x01);
    /// SMART / Health Information.
    pub const SMART: LogPageId = LogPageId(0x02);
    /// Firmware Slot Information.
    pub const FW_SLOT: LogPageId = LogPageId(0x03);
    /// Changed Namespace List.
    pub const CHANGED_NS: LogPageId = LogPageId(0x04);
    /// Commands Supported and Effects.
    pub const CMD_EFFECTS: LogPageId = LogPageId(0x05);
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: LogPageId = LogPageId(0x06);
    /// Telemetry Host-Initiated.
    pub const TELEMETRY_HOST: LogPageId = LogPageId(0x07);
    /// Telemetry Controller-Initiated.
    pub const TELEMETRY_CTRL: LogPageId = LogPageId(0x08);
    /// Endurance Group Information.
    pub const ENDURANCE_GROUP: LogPageId = LogPageId(0x09);
    /// Asymmetric Namespace Access.
    pub const ANA: LogPageId = LogPageId(0x0c);
    /// Feature Identifiers Supported and Effects.
    pub const FEATURES: LogPageId = LogPageId(0x12);
    /// Discovery (fabrics discovery controllers only).
    pub const DISCOVERY: LogPageId = LogPageId(0x70);
    /// Reservation Notification.
    pub const RESERVATION: LogPageId = LogPageId(0x80);
}

/// Errors from decoding log pages or choosing a log page window.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogPageError {
    /// The buffer is shorter than the structure.
    #[error("log page data truncated: need {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the structure occupies.
        needed: usize,
        /// Bytes supplied.
        got: usize,
    },
    /// A string field holds bytes that are not UTF-8.
    #[error("log page field {field} is not valid UTF-8")]
    NotUtf8 {
        /// Spec name of the field.
        field: &'static str,
    },
    /// The Discovery log header claims more records than the bytes hold.
    #[error("discovery log NUMREC {numrec} exceeds the {available} entries supplied")]
    NumrecExceedsData {
        /// NUMREC from the header.
        numrec: u64,
        /// Whole entries present after the header.
        available: u64,
    },
    /// An ANA Group Descriptor holds a reserved ANA state.
    #[error("ANA group descriptor state {state:#x} is reserved")]
    BadAnaState {
        /// The ANAS field.
        state: u8,
    },
    /// The Log Page Offset lies past the end of the page.
    #[error("log page offset {offset} is beyond the {page_len}-byte page")]
    OffsetBeyondPage {
        /// Requested offset in bytes.
        offset: u64,
        /// Page size in bytes.
        page_len: usize,
    },
    /// The Log Page Offset is not dword aligned.
    #[error("log page offset {offset} is not a multiple of 4")]
    UnalignedOffset {
        /// Requested offset in bytes.
        offset: u64,
    },
}

fn need(buf: &[u8], needed: usize) -> Result<&[u8], LogPageError> {
    buf.get(..needed).ok_or(LogPageError::Truncated { needed, got: buf.len() })
}

fn read_text(b: &[u8], off: usize, len: usize, field: &'static str) -> Result<String, LogPageError> {
    get_text(b, off, len).ok_or(LogPageError::NotUtf8 { field })
}

/// Returns the part of `page` a Get Log Page with Log Page Offset `offset`
/// and transfer length `len` reads.
///
/// A window that runs past the end of the page is returned **short**: the
/// caller sends it and zero-fills the rest of the transfer (nvmet does the
/// same for the Changed Namespace List). An offset equal to the page length
/// gives an empty window.
///
/// # Errors
///
/// [`LogPageError::UnalignedOffset`] if `offset` is not a multiple of 4 and
/// [`LogPageError::OffsetBeyondPage`] if it exceeds the page length; the
/// target maps both to Invalid Field in Command.
pub fn log_window(page: &[u8], offset: u64, len: usize) -> Result<&[u8], LogPageError> {
    if !offset.is_multiple_of(4) {
        return Err(LogPageError::UnalignedOffset { offset });
    }
    let start = usize::try_from(offset)
        .ok()
        .filter(|&s| s <= page.len())
        .ok_or(LogPageError::OffsetBeyondPage { offset, page_len: page.len() })?;
    let end = start.saturating_add(len).min(page.len());
    Ok(&page[start..end])
}

// ---------------------------------------------------------------------------
// Error Information (01h)
// ---------------------------------------------------------------------------

/// Size of one Error Information log entry.
pub const ERROR_LOG_ENTRY_LEN: usize = 64;

const ERR_ERROR_COUNT_OFFSET: usize = 0;
const ERR_SQID_OFFSET: usize = ERR_ERROR_COUNT_OFFSET + 8;
const ERR_CMDID_OFFSET: usize = ERR_SQID_OFFSET + 2;
const ERR_STATUS_FIELD_OFFSET: usize = ERR_CMDID_OFFSET + 2;
const ERR_PARAM_ERROR_LOCATION_OFFSET: usize = ERR_STATUS_FIELD_OFFSET + 2;
const ERR_LBA_OFFSET: usize = ERR_PARAM_ERROR_LOCATION_OFFSET + 2;
const ERR_NSID_OFFSET: usize = ERR_LBA_OFFSET + 8;
const ERR_VS_OFFSET: usize = ERR_NSID_OFFSET + 4;
const ERR_TRTYPE_OFFSET: usize = ERR_VS_OFFSET + 1;
/// Bytes 31:30 are reserved.
const ERR_CS_OFFSET: usize = ERR_TRTYPE_OFFSET + 1 + 2;
const ERR_TRTYPE_SPECIFIC_OFFSET: usize = ERR_CS_OFFSET + 8;
/// Bytes 63:42 are reserved.
#[cfg(test)]
const ERR_RSVD42_UNUSED_OFFSET: usize = ERR_TRTYPE_SPECIFIC_OFFSET + 2;

/// One Error Information log entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorLogEntry {
    /// Error Count: unique, increasing; 0 means the entry is empty.
    pub error_count: u64,
    /// Submission Queue ID of the failed command.
    pub sqid: u16,
    /// Command ID of the failed command.
    pub cmdid: u16,
    /// Status Field: bit 0 is the phase tag, bits 15:1 the status.
    pub status_field: u16,
    /// Parameter Error Location: byte (7:0) and bit (10:8) in the command;
    /// FFFFh if not applicable.
    pub param_error_location: u16,
    /// First LBA that had the error.
    pub lba: u64,
    /// Namespace of the error.
    pub nsid: u32,
    /// Vendor Specific Information Available: a log page ID, or 0.
    pub vendor_specific: u8,
    /// Transport Type (TRTYPE) of a transport error, else 0.
    pub trtype: u8,
    /// Command Specific Information.
    pub command_specific: u64,
    /// Transport Type Specific Information.
    pub trtype_specific: u16,
}

impl ErrorLogEntry {
    /// Encodes the 64-byte entry.
    pub fn encode(&self) -> [u8; ERROR_LOG_ENTRY_LEN] {
        let mut b = [0u8; ERROR_LOG_ENTRY_LEN];
        put_u64(&mut b, ERR_ERROR_COUNT_OFFSET, self.error_count);
        put_u16(&mut b, ERR_SQID_OFFSET, self.sqid);
        put_u16(&mut b, ERR_CMDID_OFFSET, self.cmdid);
        put_u16(&mut b, ERR_STATUS_FIELD_OFFSET, self.status_field);
        put_u16(&mut b, ERR_PARAM_ERROR_LOCATION_OFFSET, self.param_error_location);
        put_u64(&mut b, ERR_LBA_OFFSET, self.lba);
        put_u32(&mut b, ERR_NSID_OFFSET, self.nsid);
        b[ERR_VS_OFFSET] = self.vendor_specific;
        b[ERR_TRTYPE_OFFSET] = self.trtype;
        put_u64(&mut b, ERR_CS_OFFSET, self.command_specific);
        put_u16(&mut b, ERR_TRTYPE_SPECIFIC_OFFSET, self.trtype_specific);
        b
    }

    /// Decodes an entry from the first 64 bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`LogPageError::Truncated`] if `buf` is shorter than 64 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, LogPageError> {
        let b = need(buf, ERROR_LOG_ENTRY_LEN)?;
        Ok(ErrorLogEntry {
            error_count: get_u64(b, ERR_ERROR_COUNT_OFFSET),
            sqid: get_u16(b, ERR_SQID_OFFSET),
            cmdid: get_u16(b, ERR_CMDID_OFFSET),
            status_field: get_u16(b, ERR_STATUS_FIELD_OFFSET),
            param_error_location: get_u16(b, ERR_PARAM_ERROR_LOCATION_OFFSET),
            lba: get_u64(b, ERR_LBA_OFFSET),
            nsid: get_u32(b, ERR_NSID_OFFSET),
            vendor_specific: b[ERR_VS_OFFSET],
            trtype: b[ERR_TRTYPE_OFFSET],
            command_specific: get_u64(b, ERR_CS_OFFSET),
            trtype_specific: get_u16(b, ERR_TRTYPE_SPECIFIC_OFFSET),
        })
    }
}

// ---------------------------------------------------------------------------
// SMART / Health Information (02h)
// ---------------------------------------------------------------------------

/// Size of the SMART / Health Information log page.
pub const SMART_LOG_LEN: usize = 512;

const SMART_CRITICAL_WARNING_OFFSET: usize = 0;
const SMART_COMPOSITE_TEMPERATURE_OFFSET: usize = SMART_CRITICAL_WARNING_OFFSET + 1;
const SMART_AVAILABLE_SPARE_OFFSET: usize = SMART_COMPOSITE_TEMPERATURE_OFFSET + 2;
const SMART_AVAILABLE_SPARE_THRESHOLD_OFFSET: usize = SMART_AVAILABLE_SPARE_OFFSET + 1;
const SMART_PERCENTAGE_USED_OFFSET: usize = SMART_AVAILABLE_SPARE_THRESHOLD_OFFSET + 1;
const SMART_ENDURANCE_GROUP_SUMMARY_OFFSET: usize = SMART_PERCENTAGE_USED_OFFSET + 1;
/// Bytes 31:7 are reserved.
const SMART_RSVD7_UNUSED_LEN: usize = 25;
const SMART_DATA_UNITS_READ_OFFSET: usize = SMART_ENDURANCE_GROUP_SUMMARY_OFFSET + 1 + SMART_RSVD7_UNUSED_LEN;
const SMART_DATA_UNITS_WRITTEN_OFFSET: usize = SMART_DATA_UNITS_READ_OFFSET + 16;
const SMART_HOST_READ_COMMANDS_OFFSET: usize = SMART_DATA_UNITS_WRITTEN_OFFSET + 16;
const SMART_HOST_WRITE_COMMANDS_OFFSET: usize = SMART_HOST_READ_COMMANDS_OFFSET + 16;
const SMART_CONTROLLER_BUSY_TIME_OFFSET: usize = SMART_HOST_WRITE_COMMANDS_OFFSET + 16;
const SMART_POWER_CYCLES_OFFSET: usize = SMART_CONTROLLER_BUSY_TIME_OFFSET + 16;
const SMART_POWER_ON_HOURS_OFFSET: usize = SMART_POWER_CYCLES_OFFSET + 16;
const SMART_UNSAFE_SHUTDOWNS_OFFSET: usize = SMART_POWER_ON_HOURS_OFFSET + 16;
const SMART_MEDIA_ERRORS_OFFSET: usize = SMART_UNSAFE_SHUTDOWNS_OFFSET + 16;
const SMART_NUM_ERROR_LOG_ENTRIES_OFFSET: usize = SMART_MEDIA_ERRORS_OFFSET + 16;
const SMART_WARNING_TEMP_TIME_OFFSET: usize = SMART_NUM_ERROR_LOG_ENTRIES_OFFSET + 16;
const SMART_CRITICAL_TEMP_TIME_OFFSET: usize = SMART_WARNING_TEMP_TIME_OFFSET + 4;
const SMART_TEMP_SENSOR_OFFSET: usize = SMART_CRITICAL_TEMP_TIME_OFFSET + 4;
const SMART_TEMP_SENSOR_COUNT: usize = 8;
const SMART_TMT1_COUNT_OFFSET: usize = SMART_TEMP_SENSOR_OFFSET + 2 * SMART_TEMP_SENSOR_COUNT;
const SMART_TMT2_COUNT_OFFSET: usize = SMART_TMT1_COUNT_OFFSET + 4;
const SMART_TMT1_TIME_OFFSET: usize = SMART_TMT2_COUNT_OFFSET + 4;
const SMART_TMT2_TIME_OFFSET: usize = SMART_TMT1_TIME_OFFSET + 4;
/// Bytes 511:232 are reserved.
#[cfg(test)]
const SMART_RSVD232_UNUSED_OFFSET: usize = SMART_TMT2_TIME_OFFSET + 4;

/// Critical Warning bit 0: available spare below threshold.
pub const SMART_CRIT_SPARE: u8 = 1 << 0;
/// Critical Warning bit 1: temperature outside a threshold.
pub const SMART_CRIT_TEMPERATURE: u8 = 1 << 1;
/// Critical Warning bit 2: reliability degraded by media errors.
pub const SMART_CRIT_RELIABILITY: u8 = 1 << 2;
/// Critical Warning bit 3: all media placed in read-only mode.
pub const SMART_CRIT_READ_ONLY: u8 = 1 << 3;
/// Critical Warning bit 4: volatile memory backup device failed.
pub const SMART_CRIT_VOLATILE_BACKUP: u8 = 1 << 4;

/// SMART / Health Information log page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmartLog {
    /// Critical Warning (`SMART_CRIT_*`).
    pub critical_warning: u8,
    /// Composite Temperature in Kelvin.
    pub composite_temperature_kelvin: u16,
    /// Available Spare, percent.
    pub available_spare: u8,
    /// Available Spare Threshold, percent.
    pub available_spare_threshold: u8,
    /// Percentage Used (may exceed 100).
    pub percentage_used: u8,
    /// Endurance Group Critical Warning Summary.
    pub endurance_group_critical_warning_summary: u8,
    /// Data Units Read, in thousands of 512-byte units (rounded up).
    pub data_units_read: u128,
    /// Data Units Written, in thousands of 512-byte units (rounded up).
    pub data_units_written: u128,
    /// Host Read Commands completed.
    pub host_read_commands: u128,
    /// Host Write Commands completed.
    pub host_write_commands: u128,
    /// Controller Busy Time, minutes.
    pub controller_busy_time: u128,
    /// Power Cycles.
    pub power_cycles: u128,
    /// Power On Hours.
    pub power_on_hours: u128,
    /// Unsafe Shutdowns.
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors.
    pub media_errors: u128,
    /// Number of Error Information Log Entries over the controller's life.
    pub num_error_log_entries: u128,
    /// Warning Composite Temperature Time, minutes.
    pub warning_temp_time: u32,
    /// Critical Composite Temperature Time, minutes.
    pub critical_temp_time: u32,
    /// Temperature Sensors 1..8 in Kelvin; 0 = not implemented.
    pub temperature_sensors: [u16; SMART_TEMP_SENSOR_COUNT],
    /// Thermal Management Temperature 1 Transition Count.
    pub thermal_mgmt_temp1_transitions: u32,
    /// Thermal Management Temperature 2 Transition Count.
    pub thermal_mgmt_temp2_transitions: u32,
    /// Total Time For Thermal Management Temperature 1, seconds.
    pub thermal_mgmt_temp1_time: u32,
    /// Total Time For Thermal Management Temperature 2, seconds.
    pub thermal_mgmt_temp2_time: u32,
}

impl SmartLog {
    /// Converts a count of 512-byte units into Data Units (thousands of
    /// 512-byte units, rounded up), as the spec and nvmet count them.
    pub fn data_units_from_sectors(sectors: u128) -> u128 {
        sectors.div_ceil(1000)
    }

    /// Encodes the 512-byte page.
    pub fn encode(&self) -> [u8; SMART_LOG_LEN] {
        let mut b = [0u8; SMART_LOG_LEN];
        b[SMART_CRITICAL_WARNING_OFFSET] = self.critical_warning;
        put_u16(&mut b, SMART_COMPOSITE_TEMPERATURE_OFFSET, self.composite_temperature_kelvin);
        b[SMART_AVAILABLE_SPARE_OFFSET] = self.available_spare;
        b[SMART_AVAILABLE_SPARE_THRESHOLD_OFFSET] = self.available_spare_threshold;
        b[SMART_PERCENTAGE_USED_OFFSET] = self.percentage_used;
        b[SMART_ENDURANCE_GROUP_SUMMARY_OFFSET] = self.endurance_group_critical_warning_summary;
        put_u128(&mut b, SMART_DATA_UNITS_READ_OFFSET, self.data_units_read);
        put_u128(&mut b, SMART_DATA_UNITS_WRITTEN_OFFSET, self.data_units_written);
        put_u128(&mut b, SMART_HOST_READ_COMMANDS_OFFSET, self.host_read_commands);
        put_u128(&mut b, SMART_HOST_WRITE_COMMANDS_OFFSET, self.host_write_commands);
        put_u128(&mut b, SMART_CONTROLLER_BUSY_TIME_OFFSET, self.controller_busy_time);
        put_u128(&mut b, SMART_POWER_CYCLES_OFFSET, self.power_cycles);
        put_u128(&mut b, SMART_POWER_ON_HOURS_OFFSET, self.power_on_hours);
        put_u128(&mut b, SMART_UNSAFE_SHUTDOWNS_OFFSET, self.unsafe_shutdowns);
        put_u128(&mut b, SMART_MEDIA_ERRORS_OFFSET, self.media_errors);
        put_u128(&mut b, SMART_NUM_ERROR_LOG_ENTRIES_OFFSET, self.num_error_log_entries);
        put_u32(&mut b, SMART_WARNING_TEMP_TIME_OFFSET, self.warning_temp_time);
        put_u32(&mut b, SMART_CRITICAL_TEMP_TIME_OFFSET, self.critical_temp_time);
        for (i, t) in self.temperature_sensors.iter().enumerate() {
            put_u16(&mut b, SMART_TEMP_SENSOR_OFFSET + 2 * i, *t);
        }
        put_u32(&mut b, SMART_TMT1_COUNT_OFFSET, self.thermal_mgmt_temp1_transitions);
        put_u32(&mut b, SMART_TMT2_COUNT_OFFSET, self.thermal_mgmt_temp2_transitions);
        put_u32(&mut b, SMART_TMT1_TIME_OFFSET, self.thermal_mgmt_temp1_time);
        put_u32(&mut b, SMART_TMT2_TIME_OFFSET, self.thermal_mgmt_temp2_time);
        b
    }

    /// Decodes the page from the first 512 bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`LogPageError::Truncated`] if `buf` is shorter than 512 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, LogPageError> {
        let b = need(buf, SMART_LOG_LEN)?;
        let mut temperature_sensors = [0u16; SMART_TEMP_SENSOR_COUNT];
        for (i, t) in temperature_sensors.iter_mut().enumerate() {
            *t = get_u16(b, SMART_TEMP_SENSOR_OFFSET + 2 * i);
        }
        Ok(SmartLog {
            critical_warning: b[SMART_CRITICAL_WARNING_OFFSET],
            composite_temperature_kelvin: get_u16(b, SMART_COMPOSITE_TEMPERATURE_OFFSET),
            available_spare: b[SMART_AVAILABLE_SPARE_OFFSET],
            available_spare_threshold: b[SMART_AVAILABLE_SPARE_THRESHOLD_OFFSET],
            percentage_used: b[SMART_PERCENTAGE_USED_OFFSET],
            endurance_group_critical_warning_summary: b[SMART_ENDURANCE_GROUP_SUMMARY_OFFSET],
            data_units_read: get_u128(b, SMART_DATA_UNITS_READ_OFFSET),
            data_units_written: get_u128(b, SMART_DATA_UNITS_WRITTEN_OFFSET),
            host_read_commands: get_u128(b, SMART_HOST_READ_COMMANDS_OFFSET),
            host_write_commands: get_u128(b, SMART_HOST_WRITE_COMMANDS_OFFSET),
            controller_busy_time: get_u128(b, SMART_CONTROLLER_BUSY_TIME_OFFSET),
            power_cycles: get_u128(b, SMART_POWER_CYCLES_OFFSET),
            power_on_hours: get_u128(b, SMART_POWER_ON_HOURS_OFFSET),
            unsafe_shutdowns: get_u128(b, SMART_UNSAFE_SHUTDOWNS_OFFSET),
            media_errors: get_u128(b, SMART_MEDIA_ERRORS_OFFSET),
            num_error_log_entries: get_u128(b, SMART_NUM_ERROR_LOG_ENTRIES_OFFSET),
            warning_temp_time: get_u32(b, SMART_WARNING_TEMP_TIME_OFFSET),
            critical_temp_time: get_u32(b, SMART_CRITICAL_TEMP_TIME_OFFSET),
            temperature_sensors,
            thermal_mgmt_temp1_transitions: get_u32(b, SMART_TMT1_COUNT_OFFSET),
            thermal_mgmt_temp2_transitions: get_u32(b, SMART_TMT2_COUNT_OFFSET),
            thermal_mgmt_temp1_time: get_u32(b, SMART_TMT1_TIME_OFFSET),
            thermal_mgmt_temp2_time: get_u32(b, SMART_TMT2_TIME_OFFSET),
        })
    }
}

// ---------------------------------------------------------------------------
// Changed Namespace List (04h)
// ---------------------------------------------------------------------------

/// Size of the Changed Namespace List log page.
pub const CHANGED_NS_LIST_LEN: usize = 4096;
/// Most NSIDs the Changed Namespace List names individually.
pub const CHANGED_NS_LIST_MAX: usize = CHANGED_NS_LIST_LEN / 4;
/// Entry 0 value meaning "more than 1024 namespaces changed".
pub const CHANGED_NS_OVERFLOW: u32 = 0xffff_ffff;

/// Decoded Changed Namespace List.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangedNsList {
    /// The NSIDs that changed (at most 1024).
    Listed(Vec<u32>),
    /// More than 1024 namespaces changed; the host must rescan them all.
    Overflow,
}

/// Encodes a Changed Namespace List. NSID 0 is skipped (it would end the
/// list early); more than 1024 remaining NSIDs encode as the overflow
/// marker FFFFFFFFh followed by zeros.
pub fn encode_changed_ns_list(nsids: &[u32]) -> [u8; CHANGED_NS_LIST_LEN] {
    let mut b = [0u8; CHANGED_NS_LIST_LEN];
    let listed = || nsids.iter().copied().filter(|&n| n != 0);
    if listed().count() > CHANGED_NS_LIST_MAX {
        put_u32(&mut b, 0, CHANGED_NS_OVERFLOW);
        return b;
    }
    for (i, nsid) in listed().enumerate() {
        put_u32(&mut b, i * 4, nsid);
    }
    b
}

/// Decodes a Changed Namespace List: the NSIDs before the first zero entry,
/// or [`ChangedNsList::Overflow`] if entry 0 is FFFFFFFFh.
///
/// # Errors
///
/// [`LogPageError::Truncated`] if `buf` is shorter than 4096 bytes.
pub fn decode_changed_ns_list(buf: &[u8]) -> Result<ChangedNsList, LogPageError> {
    let b = need(buf, CHANGED_NS_LIST_LEN)?;
    if get_u32(b, 0) == CHANGED_NS_OVERFLOW {
        return Ok(ChangedNsList::Overflow);
    }
    let nsids = (0..CHANGED_NS_LIST_MAX).map(|i| get_u32(b, i * 4)).take_while(|&n| n != 0).collect();
    Ok(ChangedNsList::Listed(nsids))
}

// ---------------------------------------------------------------------------
// Asymmetric Namespace Access (0Ch)
// ---------------------------------------------------------------------------

/// Size of the ANA log page header (CHGCNT 07:00, NGRPS 09:08).
pub const ANA_LOG_HEADER_LEN: usize = 16;
/// Size of one ANA Group Descriptor before its NSID list (ANAGRPID 03:00,
/// NNSID 07:04, CHGCNT 15:08, ANAS 16 bits 3:0), each NSID 4 bytes after.
pub const ANA_GROUP_DESC_LEN: usize = 32;
/// Get Log Page LSP bit 0 for the ANA page: Return Groups Only (no NSID
/// lists).
pub const ANA_LSP_RGO: u8 = 1 << 0;

const ANA_CHGCNT_OFFSET: usize = 0;
const ANA_NGRPS_OFFSET: usize = ANA_CHGCNT_OFFSET + 8;
/// Bytes 15:10 of the header are reserved.
#[cfg(test)]
const ANA_RSVD10_UNUSED_OFFSET: usize = ANA_NGRPS_OFFSET + 2;

const AG_GRPID_OFFSET: usize = 0;
const AG_NNSID_OFFSET: usize = AG_GRPID_OFFSET + 4;
const AG_CHGCNT_OFFSET: usize = AG_NNSID_OFFSET + 4;
const AG_STATE_OFFSET: usize = AG_CHGCNT_OFFSET + 8;
/// Bytes 31:17 of a group descriptor are reserved.
#[cfg(test)]
const AG_RSVD17_UNUSED_OFFSET: usize = AG_STATE_OFFSET + 1;

/// An ANA state: how a namespace is reached through this controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnaState {
    /// The best path: I/O is served here.
    Optimized,
    /// A working path that is not the best one.
    NonOptimized,
    /// No I/O through this path for now (ANA Inaccessible).
    Inaccessible,
    /// No I/O through this path, for good (ANA Persistent Loss).
    PersistentLoss,
    /// Changing state; I/O gets ANA Transition until it settles (within
    /// ANATT).
    Change,
}

impl AnaState {
    /// The ANAS field's value.
    pub const fn code(self) -> u8 {
        match self {
            AnaState::Optimized => 0x01,
            AnaState::NonOptimized => 0x02,
            AnaState::Inaccessible => 0x03,
            AnaState::PersistentLoss => 0x04,
            AnaState::Change => 0x0f,
        }
    }

    /// The state an ANAS value names; `None` for a reserved value.
    pub const fn from_code(code: u8) -> Option<AnaState> {
        Some(match code {
            0x01 => AnaState::Optimized,
            0x02 => AnaState::NonOptimized,
            0x03 => AnaState::Inaccessible,
            0x04 => AnaState::PersistentLoss,
            0x0f => AnaState::Change,
            _ => return None,
        })
    }

    /// Whether I/O is served through a path in this state.
    pub const fn serves_io(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }
}

/// One ANA Group Descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroup {
    /// ANA Group ID (non-zero).
    pub grpid: u32,
    /// The group's change count.
    pub chgcnt: u64,
    /// Its state through this controller.
    pub state: AnaState,
    /// Its namespaces attached to this controller, ascending (empty with
    /// Return Groups Only).
    pub nsids: Vec<u32>,
}

/// The Asymmetric Namespace Access log page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnaLog {
    /// The log's change count (bumped at every ANA state change).
    pub chgcnt: u64,
    /// The ANA groups, ascending by ID.
    pub groups: Vec<AnaGroup>,
}

impl AnaLog {
    /// Encodes the page; with `groups_only` (Return Groups Only) each
    /// descriptor's NNSID is 0 and no NSIDs follow.
    pub fn encode(&self, groups_only: bool) -> Vec<u8> {
        let nsids = |g: &AnaGroup| if groups_only { 0 } else { g.nsids.len() };
        let len = ANA_LOG_HEADER_LEN + self.groups.iter().map(|g| ANA_GROUP_DESC_LEN + 4 * nsids(g)).sum::<usize>();
        let mut b = vec![0u8; len];
        put_u64(&mut b, ANA_CHGCNT_OFFSET, self.chgcnt);
        put_u16(&mut b, ANA_NGRPS_OFFSET, u16::try_from(self.groups.len()).unwrap_or(u16::MAX));
        let mut at = ANA_LOG_HEADER_LEN;
        for g in self.groups.iter().take(usize::from(u16::MAX)) {
            let n = nsids(g);
            put_u32(&mut b, at + AG_GRPID_OFFSET, g.grpid);
            put_u32(&mut b, at + AG_NNSID_OFFSET, n as u32);
            put_u64(&mut b, at + AG_CHGCNT_OFFSET, g.chgcnt);
            b[at + AG_STATE_OFFSET] = g.state.code();
            at += ANA_GROUP_DESC_LEN;
            for &nsid in &g.nsids[..n] {
                put_u32(&mut b, at, nsid);
                at += 4;
            }
        }
        b
    }

    /// Decodes a page as a host reads it (the bytes after the last
    /// descriptor, if any, are ignored).
    ///
    /// # Errors
    ///
    /// [`LogPageError::Truncated`] when NGRPS or a descriptor's NNSID
    /// claims more than `buf` holds; [`LogPageError::BadAnaState`] for a
    /// reserved state.
    pub fn decode(buf: &[u8]) -> Result<AnaLog, LogPageError> {
        let h = need(buf, ANA_LOG_HEADER_LEN)?;
        let ngrps = usize::from(get_u16(h, ANA_NGRPS_OFFSET));
        let mut groups = Vec::with_capacity(ngrps.min(buf.len() / ANA_GROUP_DESC_LEN));
        let mut at = ANA_LOG_HEADER_LEN;
        let truncated = |needed: usize| LogPageError::Truncated { needed, got: buf.len() };
        for _ in 0..ngrps {
            let list_at = at + ANA_GROUP_DESC_LEN;
            let d = buf.get(at..list_at).ok_or(truncated(list_at))?;
            let nnsid = get_u32(d, AG_NNSID_OFFSET) as usize;
            let state = d[AG_STATE_OFFSET] & 0x0f;
            let state = AnaState::from_code(state).ok_or(LogPageError::BadAnaState { state })?;
            let end = nnsid.saturating_mul(4).saturating_add(list_at);
            let list = buf.get(list_at..end).ok_or(truncated(end))?;
            groups.push(AnaGroup {
                grpid: get_u32(d, AG_GRPID_OFFSET),
                chgcnt: get_u64(d, AG_CHGCNT_OFFSET),
                state,
                nsids: list.chunks_exact(4).map(|c| get_u32(c, 0)).collect(),
            });
            at = end;
        }
        Ok(AnaLog { chgcnt: get_u64(h, ANA_CHGCNT_OFFSET), groups })
    }
}

// ---------------------------------------------------------------------------
// Discovery log page (70h)
// ---------------------------------------------------------------------------

/// Size of the Discovery log page header.
pub const DISCOVERY_LOG_HEADER_LEN: usize = 1024;
/// Size of one Discovery log page entry.
pub const DISCOVERY_LOG_ENTRY_LEN: usize = 1024;

const DISC_GENCTR_OFFSET: usize = 0;
const DISC_NUMREC_OFFSET: usize = DISC_GENCTR_OFFSET + 8;
const DISC_RECFMT_OFFSET: usize = DISC_NUMREC_OFFSET + 8;
/// Bytes 1023:18 of the header are reserved.
#[cfg(test)]
const DISC_RSVD18_UNUSED_OFFSET: usize = DISC_RECFMT_OFFSET + 2;

const DE_TRTYPE_OFFSET: usize = 0;
const DE_ADRFAM_OFFSET: usize = DE_TRTYPE_OFFSET + 1;
const DE_SUBTYPE_OFFSET: usize = DE_ADRFAM_OFFSET + 1;
const DE_TREQ_OFFSET: usize = DE_SUBTYPE_OFFSET + 1;
const DE_PORTID_OFFSET: usize = DE_TREQ_OFFSET + 1;
const DE_CNTLID_OFFSET: usize = DE_PORTID_OFFSET + 2;
const DE_ASQSZ_OFFSET: usize = DE_CNTLID_OFFSET + 2;
const DE_EFLAGS_OFFSET: usize = DE_ASQSZ_OFFSET + 2;
/// Bytes 31:12 are reserved.
const DE_RSVD12_UNUSED_LEN: usize = 20;
const DE_TRSVCID_OFFSET: usize = DE_EFLAGS_OFFSET + 2 + DE_RSVD12_UNUSED_LEN;
/// TRSVCID field size (`NVMF_TRSVCID_SIZE`).
pub const TRSVCID_LEN: usize = 32;
/// Bytes 255:64 are reserved.
const DE_RSVD64_UNUSED_LEN: usize = 192;
const DE_SUBNQN_OFFSET: usize = DE_TRSVCID_OFFSET + TRSVCID_LEN + DE_RSVD64_UNUSED_LEN;
/// SUBNQN field size (`NVMF_NQN_FIELD_LEN`).
pub const SUBNQN_LEN: usize = 256;
const DE_TRADDR_OFFSET: usize = DE_SUBNQN_OFFSET + SUBNQN_LEN;
/// TRADDR field size (`NVMF_TRADDR_SIZE`).
pub const TRADDR_LEN: usize = 256;
const DE_TSAS_OFFSET: usize = DE_TRADDR_OFFSET + TRADDR_LEN;
/// TSAS field size (`NVMF_TSAS_SIZE`).
pub const TSAS_LEN: usize = 256;
/// TSAS byte 0 for TCP: SECTYPE.
const TSAS_TCP_SECTYPE_OFFSET: usize = 0;

/// TRTYPE: RDMA.
pub const TRTYPE_RDMA: u8 = 1;
/// TRTYPE: Fibre Channel.
pub const TRTYPE_FC: u8 = 2;
/// TRTYPE: TCP.
pub const TRTYPE_TCP: u8 = 3;
/// TRTYPE: intra-host (loop), reserved for host use.
pub const TRTYPE_LOOP: u8 = 254;

/// ADRFAM: IPv4.
pub const ADRFAM_IPV4: u8 = 1;
/// ADRFAM: IPv6.
pub const ADRFAM_IPV6: u8 = 2;
/// ADRFAM: InfiniBand.
pub const ADRFAM_IB: u8 = 3;
/// ADRFAM: Fibre Channel.
pub const ADRFAM_FC: u8 = 4;

/// SUBTYPE: referral to another discovery subsystem.
pub const SUBTYPE_DISCOVERY_REFERRAL: u8 = 1;
/// SUBTYPE: NVM subsystem.
pub const SUBTYPE_NVME: u8 = 2;
/// SUBTYPE: the current discovery subsystem.
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;

/// TREQ bits 1:0 = 00b: secure channel requirement not specified.
pub const TREQ_SECURE_CHANNEL_NOT_SPECIFIED: u8 = 0;
/// TREQ bits 1:0 = 01b: secure channel required.
pub const TREQ_SECURE_CHANNEL_REQUIRED: u8 = 1;
/// TREQ bits 1:0 = 10b: secure channel not required.
pub const TREQ_SECURE_CHANNEL_NOT_REQUIRED: u8 = 2;
/// TREQ bits 1:0: secure channel requirement (mask).
pub const TREQ_SECURE_CHANNEL_MASK: u8 = 0b11;
/// TREQ bit 2: SQ flow control disable supported.
pub const TREQ_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;

/// TCP SECTYPE: no security.
pub const TCP_SECTYPE_NONE: u8 = 0;
/// TCP SECTYPE: TLS 1.2.
pub const TCP_SECTYPE_TLS12: u8 = 1;
/// TCP SECTYPE: TLS 1.3.
pub const TCP_SECTYPE_TLS13: u8 = 2;

/// EFLAGS bit 0: duplicate returned information.
pub const EFLAGS_DUPLICATE_RETURNED_INFO: u16 = 1 << 0;
/// EFLAGS bit 1: explicit persistent connection support for discovery.
pub const EFLAGS_EPCSD: u16 = 1 << 1;

/// CNTLID meaning "dynamic controller model: any controller".
pub const CNTLID_DYNAMIC: u16 = 0xffff;
/// Admin queue depth nvmet advertises in ASQSZ (`NVME_AQ_DEPTH`).
pub const DEFAULT_ASQSZ: u16 = 32;
/// Well-known NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Discovery log page header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryLogHeader {
    /// GENCTR: generation counter, changes whenever the log changes.
    pub genctr: u64,
    /// NUMREC: number of records.
    pub numrec: u64,
    /// RECFMT: record format, 0.
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    /// Writes the header into the first 1024 bytes of `b` (caller sized).
    fn encode_into(&self, b: &mut [u8]) {
        put_u64(b, DISC_GENCTR_OFFSET, self.genctr);
        put_u64(b, DISC_NUMREC_OFFSET, self.numrec);
        put_u16(b, DISC_RECFMT_OFFSET, self.recfmt);
    }

    /// Decodes the header from the first 1024 bytes of `buf`, for a host
    /// that reads the header first to learn NUMREC.
    ///
    /// # Errors
    ///
    /// [`LogPageError::Truncated`] if `buf` is shorter than 1024 bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, LogPageError> {
        let b = need(buf, DISCOVERY_LOG_HEADER_LEN)?;
        Ok(DiscoveryLogHeader {
            genctr: get_u64(b, DISC_GENCTR_OFFSET),
            numrec: get_u64(b, DISC_NUMREC_OFFSET),
            recfmt: get_u16(b, DISC_RECFMT_OFFSET),
        })
    }
}

/// One Discovery log page entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// TRTYPE: transport type (`TRTYPE_*`).
    pub trtype: u8,
    /// ADRFAM: address family (`ADRFAM_*`).
    pub adrfam: u8,
    /// SUBTYPE: subsystem type (`SUBTYPE_*`).
    pub subtype: u8,
    /// TREQ: transport requirements (`TREQ_*`).
    pub treq: u8,
    /// PORTID: NVM subsystem port ID.
    pub portid: u16,
    /// CNTLID: controller ID, [`CNTLID_DYNAMIC`] for the dynamic model.
    pub cntlid: u16,
    /// ASQSZ: maximum admin submission queue size.
    pub asqsz: u16,
    /// EFLAGS: entry flags (`EFLAGS_*`).
    pub eflags: u16,
    /// TRSVCID: transport service ID; the TCP port as decimal text.
    pub trsvcid: String,
    /// SUBNQN: subsystem NQN.
    pub subnqn: String,
    /// TRADDR: transport address; the IP address as text for TCP.
    pub traddr: String,
    /// TSAS: transport specific address subtype; for TCP byte 0 is SECTYPE.
    pub tsas: [u8; TSAS_LEN],
}

impl DiscoveryEntry {
    /// A TCP entry as nvmet builds it: dynamic controller, ASQSZ 32, no
    /// secure channel requirement stated, SECTYPE none.
    pub fn tcp(adrfam: u8, subtype: u8, portid: u16, traddr: &str, trsvcid: &str, subnqn: &str) -> Self {
        DiscoveryEntry {
            trtype: TRTYPE_TCP,
            adrfam,
            subtype,
            treq: TREQ_SECURE_CHANNEL_NOT_SPECIFIED,
            portid,
            cntlid: CNTLID_DYNAMIC,
            asqsz: DEFAULT_ASQSZ,
            eflags: 0,
            trsvcid: trsvcid.to_owned(),
            subnqn: subnqn.to_owned(),
            traddr: traddr.to_owned(),
            tsas: [0; TSAS_LEN],
        }
    }

    /// TCP SECTYPE (TSAS byte 0); meaningful when TRTYPE is TCP.
    pub fn tcp_sectype(&self) -> u8 {
        self.tsas[TSAS_TCP_SECTYPE_OFFSET]
    }

    /// Sets the TCP SECTYPE (`TCP_SECTYPE_*`).
    pub fn set_tcp_sectype(&mut self, sectype: u8) {
        self.tsas[TSAS_TCP_SECTYPE_OFFSET] = sectype;
    }

    /// Where a TCP entry's controller listens: TRADDR is a bare IPv4 or
    /// IPv6 address (no brackets), TRSVCID the port. `None` when either
    /// does not parse (or a host name was given).
    pub fn tcp_socket_addr(&self) -> Option<std::net::SocketAddr> {
        let ip = self.traddr.trim().parse::<std::net::IpAddr>().ok()?;
        Some(std::net::SocketAddr::new(ip, self.trsvcid.trim().parse().ok()?))
    }

    /// Encodes the 1024-byte entry. Strings are cut to their fields on a
    /// character boundary and NUL padded.
    pub fn encode(&self) -> [u8; DISCOVERY_LOG_ENTRY_LEN] {
        let mut b = [0u8; DISCOVERY_LOG_ENTRY_LEN];
        self.encode_into(&mut b);
        b
    }

    /// Writes the entry into the first 1024 bytes of `b` (caller sized).
    fn encode_into(&self, b: &mut [u8]) {
        b[DE_TRTYPE_OFFSET] = self.trtype;
        b[DE_ADRFAM_OFFSET] = self.adrfam;
        b[DE_SUBTYPE_OFFSET] = self.subtype;
        b[DE_TREQ_OFFSET] = self.treq;
        put_u16(b, DE_PORTID_OFFSET, self.portid);
        put_u16(b, DE_CNTLID_OFFSET, self.cntlid);
        put_u16(b, DE_ASQSZ_OFFSET, self.asqsz);
        put_u16(b, DE_EFLAGS_OFFSET, self.eflags);
        put_text(b, DE_TRSVCID_OFFSET, TRSVCID_LEN, &self.trsvcid, 0);
        put_text(b, DE_SUBNQN_OFFSET, SUBNQN_LEN, &self.subnqn, 0);
        put_text(b, DE_TRADDR_OFFSET, TRADDR_LEN, &self.traddr, 0);
        b[DE_TSAS_OFFSET..DE_TSAS_OFFSET + TSAS_LEN].copy_from_slice(&self.tsas);
    }

    /// Decodes an entry from the first 1024 bytes of `buf`.
    ///
    /// # Errors
    ///
    /// [`LogPageError::Truncated`] if `buf` is shorter than 1024 bytes;
    /// [`LogPageError::NotUtf8`] if TRSVCID, SUBNQN or TRADDR is not UTF-8.
    pub fn decode(buf: &[u8]) -> Result<Self, LogPageError> {
        let b = need(buf, DISCOVERY_LOG_ENTRY_LEN)?;
        let mut tsas = [0u8; TSAS_LEN];
        tsas.copy_from_slice(&b[DE_TSAS_OFFSET..DE_TSAS_OFFSET + TSAS_LEN]);
        Ok(DiscoveryEntry {
            trtype: b[DE_TRTYPE_OFFSET],
            adrfam: b[DE_ADRFAM_OFFSET],
            subtype: b[DE_SUBTYPE_OFFSET],
            treq: b[DE_TREQ_OFFSET],
            portid: get_u16(b, DE_PORTID_OFFSET),
            cntlid: get_u16(b, DE_CNTLID_OFFSET),
            asqsz: get_u16(b, DE_ASQSZ_OFFSET),
            eflags: get_u16(b, DE_EFLAGS_OFFSET),
            trsvcid: read_text(b, DE_TRSVCID_OFFSET, TRSVCID_LEN, "TRSVCID")?,
            subnqn: read_text(b, DE_SUBNQN_OFFSET, SUBNQN_LEN, "SUBNQN")?,
            traddr: read_text(b, DE_TRADDR_OFFSET, TRADDR_LEN, "TRADDR")?,
            tsas,
        })
    }
}

/// Encodes the full Discovery log page: header (NUMREC = `entries.len()`,
/// RECFMT 0) followed by every entry. The caller slices the result with
/// [`log_window`] for each Get Log Page.
pub fn encode_discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut page = vec![0u8; DISCOVERY_LOG_HEADER_LEN + entries.len() * DISCOVERY_LOG_ENTRY_LEN];
    let header = DiscoveryLogHeader { genctr, numrec: entries.len() as u64, recfmt: 0 };
    let (head, body) = page.split_at_mut(DISCOVERY_LOG_HEADER_LEN);
    header.encode_into(head);
    for (e, chunk) in entries.iter().zip(body.chunks_exact_mut(DISCOVERY_LOG_ENTRY_LEN)) {
        e.encode_into(chunk);
    }
    page
}

/// Decodes a Discovery log page: the header and its NUMREC entries. Bytes
/// after the last entry are ignored.
///
/// # Errors
///
/// [`LogPageError::Truncated`] if `buf` is shorter than the header;
/// [`LogPageError::NumrecExceedsData`] if NUMREC names more entries than
/// `buf` holds (checked before anything is allocated, so a hostile NUMREC
/// cannot drive allocation); [`LogPageError::NotUtf8`] from an entry.
pub fn decode_discovery_log(buf: &[u8]) -> Result<(DiscoveryLogHeader, Vec<DiscoveryEntry>), LogPageError> {
    let header = DiscoveryLogHeader::decode(buf)?;
    let body = &buf[DISCOVERY_LOG_HEADER_LEN..];
    let available = (body.len() / DISCOVERY_LOG_ENTRY_LEN) as u64;
    if header.numrec > available {
        return Err(LogPageError::NumrecExceedsData { numrec: header.numrec, available });
    }
    // numrec <= available <= buf.len() / 1024, so this fits in usize.
    let numrec = header.numrec as usize;
    let entries = body
        .chunks_exact(DISCOVERY_LOG_ENTRY_LEN)
        .take(numrec)
        .map(DiscoveryEntry::decode)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((header, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_tcp_entry_gives_its_address_v4_or_v6() {
        let e = |a: &str, p: &str| DiscoveryEntry::tcp(ADRFAM_IPV4, SUBTYPE_NVME, 1, a, p, "nqn.x").tcp_socket_addr();
        assert_eq!(e("10.0.0.5", "4420"), Some("10.0.0.5:4420".parse().unwrap()));
        assert_eq!(e("fd00::5", "4421 "), Some("[fd00::5]:4421".parse().unwrap()));
        assert_eq!(e("[fd00::5]", "4421"), None, "TRADDR holds no brackets");
        assert_eq!(e("storage-1", "4420"), None);
        assert_eq!(e("10.0.0.5", "nvme"), None);
    }

    /// NVMe Base 2.0 "Error Information Log Entry"; libnvme
    /// `struct nvme_error_log_page` (Linux `struct nvme_error_slot` predates
    /// TRTYPE and keeps bytes 29..32 reserved).
    #[test]
    fn error_log_entry_offsets_match_spec() {
        assert_eq!(ERR_ERROR_COUNT_OFFSET, 0);
        assert_eq!(ERR_SQID_OFFSET, 8);
        assert_eq!(ERR_CMDID_OFFSET, 10);
        assert_eq!(ERR_STATUS_FIELD_OFFSET, 12);
        assert_eq!(ERR_PARAM_ERROR_LOCATION_OFFSET, 14);
        assert_eq!(ERR_LBA_OFFSET, 16);
        assert_eq!(ERR_NSID_OFFSET, 24);
        assert_eq!(ERR_VS_OFFSET, 28);
        assert_eq!(ERR_TRTYPE_OFFSET, 29);
        assert_eq!(ERR_CS_OFFSET, 32);
        assert_eq!(ERR_TRTYPE_SPECIFIC_OFFSET, 40);
        assert_eq!(ERR_RSVD42_UNUSED_OFFSET + 22, ERROR_LOG_ENTRY_LEN);
    }

    /// NVMe Base 2.0 "SMART / Health Information Log Page"; Linux
    /// `struct nvme_smart_log`.
    #[test]
    fn smart_log_offsets_match_spec() {
        assert_eq!(SMART_CRITICAL_WARNING_OFFSET, 0);
        assert_eq!(SMART_COMPOSITE_TEMPERATURE_OFFSET, 1);
        assert_eq!(SMART_AVAILABLE_SPARE_OFFSET, 3);
        assert_eq!(SMART_AVAILABLE_SPARE_THRESHOLD_OFFSET, 4);
        assert_eq!(SMART_PERCENTAGE_USED_OFFSET, 5);
        assert_eq!(SMART_ENDURANCE_GROUP_SUMMARY_OFFSET, 6);
        assert_eq!(SMART_DATA_UNITS_READ_OFFSET, 32);
        assert_eq!(SMART_DATA_UNITS_WRITTEN_OFFSET, 48);
        assert_eq!(SMART_HOST_READ_COMMANDS_OFFSET, 64);
        assert_eq!(SMART_HOST_WRITE_COMMANDS_OFFSET, 80);
        assert_eq!(SMART_CONTROLLER_BUSY_TIME_OFFSET, 96);
        assert_eq!(SMART_POWER_CYCLES_OFFSET, 112);
        assert_eq!(SMART_POWER_ON_HOURS_OFFSET, 128);
        assert_eq!(SMART_UNSAFE_SHUTDOWNS_OFFSET, 144);
        assert_eq!(SMART_MEDIA_ERRORS_OFFSET, 160);
        assert_eq!(SMART_NUM_ERROR_LOG_ENTRIES_OFFSET, 176);
        assert_eq!(SMART_WARNING_TEMP_TIME_OFFSET, 192);
        assert_eq!(SMART_CRITICAL_TEMP_TIME_OFFSET, 196);
        assert_eq!(SMART_TEMP_SENSOR_OFFSET, 200);
        assert_eq!(SMART_TMT1_COUNT_OFFSET, 216);
        assert_eq!(SMART_TMT2_COUNT_OFFSET, 220);
        assert_eq!(SMART_TMT1_TIME_OFFSET, 224);
        assert_eq!(SMART_TMT2_TIME_OFFSET, 228);
        assert_eq!(SMART_RSVD232_UNUSED_OFFSET, 232);
        assert_eq!(SMART_LOG_LEN, 512);
    }

    /// NVMe Base 2.0 "Discovery Log Page"; Linux
    /// `struct nvmf_disc_rsp_page_hdr` and `struct nvmf_disc_rsp_page_entry`.
    #[test]
    fn discovery_log_offsets_match_spec() {
        assert_eq!(DISC_GENCTR_OFFSET, 0);
        assert_eq!(DISC_NUMREC_OFFSET, 8);
        assert_eq!(DISC_RECFMT_OFFSET, 16);
        assert_eq!(DISC_RSVD18_UNUSED_OFFSET + 1006, DISCOVERY_LOG_HEADER_LEN);
        assert_eq!(DE_TRTYPE_OFFSET, 0);
        assert_eq!(DE_ADRFAM_OFFSET, 1);
        assert_eq!(DE_SUBTYPE_OFFSET, 2);
        assert_eq!(DE_TREQ_OFFSET, 3);
        assert_eq!(DE_PORTID_OFFSET, 4);
        assert_eq!(DE_CNTLID_OFFSET, 6);
        assert_eq!(DE_ASQSZ_OFFSET, 8);
        assert_eq!(DE_EFLAGS_OFFSET, 10);
        assert_eq!(DE_TRSVCID_OFFSET, 32);
        assert_eq!(DE_SUBNQN_OFFSET, 256);
        assert_eq!(DE_TRADDR_OFFSET, 512);
        assert_eq!(DE_TSAS_OFFSET, 768);
        assert_eq!(DE_TSAS_OFFSET + TSAS_LEN, DISCOVERY_LOG_ENTRY_LEN);
        assert_eq!((TRSVCID_LEN, SUBNQN_LEN, TRADDR_LEN), (32, 256, 256));
    }

    /// NVMe Base 2.0 "Asymmetric Namespace Access Log Page"; Linux
    /// `struct nvme_ana_rsp_hdr` (16 bytes) and `struct
    /// nvme_ana_group_desc` (32 bytes, then `__le32 nsids[]`).
    #[test]
    fn ana_log_offsets_match_spec() {
        assert_eq!(ANA_CHGCNT_OFFSET, 0);
        assert_eq!(ANA_NGRPS_OFFSET, 8);
        assert_eq!(ANA_RSVD10_UNUSED_OFFSET + 6, ANA_LOG_HEADER_LEN);
        assert_eq!(AG_GRPID_OFFSET, 0);
        assert_eq!(AG_NNSID_OFFSET, 4);
        assert_eq!(AG_CHGCNT_OFFSET, 8);
        assert_eq!(AG_STATE_OFFSET, 16);
        assert_eq!(AG_RSVD17_UNUSED_OFFSET + 15, ANA_GROUP_DESC_LEN);
        let states = [
            (AnaState::Optimized, 1),
            (AnaState::NonOptimized, 2),
            (AnaState::Inaccessible, 3),
            (AnaState::PersistentLoss, 4),
            (AnaState::Change, 0xf),
        ];
        for (s, code) in states {
            assert_eq!(s.code(), code);
            assert_eq!(AnaState::from_code(code), Some(s));
        }
        assert_eq!(AnaState::from_code(0), None, "0 is reserved: Linux refuses it");
    }

    fn two_groups() -> AnaLog {
        AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroup { grpid: 1, chgcnt: 5, state: AnaState::Optimized, nsids: vec![1, 3] },
                AnaGroup { grpid: 2, chgcnt: 7, state: AnaState::Inaccessible, nsids: vec![2] },
            ],
        }
    }

    #[test]
    fn an_ana_log_lands_at_its_offsets_and_reads_back() {
        let b = two_groups().encode(false);
        assert_eq!(b.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(get_u64(&b, 0), 7);
        assert_eq!(get_u16(&b, 8), 2);
        assert_eq!((get_u32(&b, 16), get_u32(&b, 20), get_u64(&b, 24), b[32]), (1, 2, 5, 1));
        assert_eq!((get_u32(&b, 48), get_u32(&b, 52)), (1, 3));
        assert_eq!((get_u32(&b, 56), get_u32(&b, 60), b[72], get_u32(&b, 88)), (2, 1, 3, 2));
        assert_eq!(AnaLog::decode(&b), Ok(two_groups()));
        // A host reads a buffer sized for the most groups and namespaces:
        // the zeros after the last descriptor mean nothing.
        let mut padded = b.clone();
        padded.resize(4096, 0);
        assert_eq!(AnaLog::decode(&padded), Ok(two_groups()));
    }

    #[test]
    fn return_groups_only_leaves_the_namespace_lists_out() {
        let b = two_groups().encode(true);
        assert_eq!(b.len(), 16 + 2 * 32);
        let got = AnaLog::decode(&b).unwrap();
        assert!(got.groups.iter().all(|g| g.nsids.is_empty()));
        assert_eq!(got.groups[1].state, AnaState::Inaccessible);
    }

    #[test]
    fn an_ana_log_that_claims_more_than_it_holds_is_refused() {
        let b = two_groups().encode(false);
        assert!(matches!(AnaLog::decode(&b[..b.len() - 1]), Err(LogPageError::Truncated { .. })));
        let mut more = b.clone();
        put_u16(&mut more, ANA_NGRPS_OFFSET, 3);
        assert!(matches!(AnaLog::decode(&more), Err(LogPageError::Truncated { .. })));
        let mut huge = b.clone();
        put_u32(&mut huge, ANA_LOG_HEADER_LEN + AG_NNSID_OFFSET, u32::MAX);
        assert!(matches!(AnaLog::decode(&huge), Err(LogPageError::Truncated { .. })));
        let mut bad = b;
        bad[ANA_LOG_HEADER_LEN + AG_STATE_OFFSET] = 0x05;
        assert_eq!(AnaLog::decode(&bad), Err(LogPageError::BadAnaState { state: 5 }));
    }

    #[test]
    fn constants_match_spec() {
        assert_eq!(LogPageId::DISCOVERY, LogPageId(0x70));
        assert_eq!(LogPageId::ANA, LogPageId(0x0c));
        assert_eq!(TRTYPE_TCP, 3);
        assert_eq!((ADRFAM_IPV4, ADRFAM_IPV6), (1, 2));
        assert_eq!((SUBTYPE_DISCOVERY_REFERRAL, SUBTYPE_NVME, SUBTYPE_CURRENT_DISCOVERY), (1, 2, 3));
        assert_eq!(TREQ_DISABLE_SQ_FLOW_CONTROL, 4);
        assert_eq!(CHANGED_NS_LIST_MAX, 1024);
    }

    #[test]
    fn log_window_slices_shortens_and_rejects() {
        let page: Vec<u8> = (0..=255).collect();
        assert_eq!(log_window(&page, 0, 4), Ok(&page[..4]));
        assert_eq!(log_window(&page, 252, 64), Ok(&page[252..]), "short at the end");
        assert_eq!(log_window(&page, 256, 4), Ok(&[][..]), "offset == len is empty");
        assert_eq!(log_window(&page, 0, usize::MAX), Ok(&page[..]));
        assert_eq!(log_window(&page, 260, 4), Err(LogPageError::OffsetBeyondPage { offset: 260, page_len: 256 }));
        assert_eq!(
            log_window(&page, u64::MAX - 3, 4),
            Err(LogPageError::OffsetBeyondPage { offset: u64::MAX - 3, page_len: 256 })
        );
        assert_eq!(log_window(&page, 2, 4), Err(LogPageError::UnalignedOffset { offset: 2 }));
    }

    #[test]
    fn error_log_entry_round_trips() {
        let e = ErrorLogEntry {
            error_count: 42,
            sqid: 1,
            cmdid: 0xbeef,
            status_field: (0x2 << 1) | 1,
            param_error_location: 0xffff,
            lba: 1 << 40,
            nsid: 3,
            vendor_specific: 0x80,
            trtype: TRTYPE_TCP,
            command_specific: 7,
            trtype_specific: 9,
        };
        let b = e.encode();
        assert_eq!(b[29], TRTYPE_TCP);
        assert_eq!(ErrorLogEntry::decode(&b), Ok(e));
    }

    #[test]
    fn error_log_entry_short_buffer_is_truncated() {
        assert_eq!(ErrorLogEntry::decode(&[0u8; 63]), Err(LogPageError::Truncated { needed: 64, got: 63 }));
    }

    #[test]
    fn smart_log_round_trips() {
        let s = SmartLog {
            critical_warning: SMART_CRIT_SPARE | SMART_CRIT_READ_ONLY,
            composite_temperature_kelvin: 310,
            available_spare: 100,
            available_spare_threshold: 10,
            percentage_used: 255,
            endurance_group_critical_warning_summary: 1,
            data_units_read: SmartLog::data_units_from_sectors(1001),
            data_units_written: u128::MAX,
            host_read_commands: 3,
            host_write_commands: 4,
            controller_busy_time: 5,
            power_cycles: 6,
            power_on_hours: 7,
            unsafe_shutdowns: 8,
            media_errors: 9,
            num_error_log_entries: 10,
            warning_temp_time: 11,
            critical_temp_time: 12,
            temperature_sensors: [300, 301, 0, 0, 0, 0, 0, 399],
            thermal_mgmt_temp1_transitions: 13,
            thermal_mgmt_temp2_transitions: 14,
            thermal_mgmt_temp1_time: 15,
            thermal_mgmt_temp2_time: 16,
        };
        assert_eq!(s.data_units_read, 2, "1001 sectors round up to 2 units");
        let b = s.encode();
        assert_eq!(&b[1..3], &310u16.to_le_bytes());
        assert_eq!(&b[32..48], &2u128.to_le_bytes());
        assert_eq!(SmartLog::decode(&b), Ok(s));
    }

    #[test]
    fn smart_log_short_buffer_is_truncated() {
        assert_eq!(SmartLog::decode(&[0u8; 511]), Err(LogPageError::Truncated { needed: 512, got: 511 }));
    }

    #[test]
    fn changed_ns_list_round_trips() {
        let b = encode_changed_ns_list(&[4, 0, 2, 9]);
        assert_eq!(&b[..4], &4u32.to_le_bytes());
        assert_eq!(decode_changed_ns_list(&b), Ok(ChangedNsList::Listed(vec![4, 2, 9])));
        let full: Vec<u32> = (1..=1024).collect();
        let b = encode_changed_ns_list(&full);
        assert_eq!(decode_changed_ns_list(&b), Ok(ChangedNsList::Listed(full)));
    }

    #[test]
    fn changed_ns_list_over_1024_is_the_overflow_marker() {
        let many: Vec<u32> = (1..=1025).collect();
        let b = encode_changed_ns_list(&many);
        assert_eq!(&b[..4], &[0xff; 4]);
        assert!(b[4..].iter().all(|&x| x == 0));
        assert_eq!(decode_changed_ns_list(&b), Ok(ChangedNsList::Overflow));
    }

    #[test]
    fn changed_ns_list_short_buffer_is_truncated() {
        assert!(matches!(decode_changed_ns_list(&[0u8; 4095]), Err(LogPageError::Truncated { .. })));
    }

    fn sample_entry() -> DiscoveryEntry {
        let mut e =
            DiscoveryEntry::tcp(ADRFAM_IPV4, SUBTYPE_NVME, 1, "192.168.1.10", "4420", "nqn.2024-01.io.strata:subsys1");
        e.treq = TREQ_SECURE_CHANNEL_NOT_REQUIRED | TREQ_DISABLE_SQ_FLOW_CONTROL;
        e.tsas[0] = TCP_SECTYPE_NONE;
        e
    }

    #[test]
    fn discovery_entry_fields_land_at_spec_offsets() {
        let b = sample_entry().encode();
        assert_eq!(&b[..4], &[TRTYPE_TCP, ADRFAM_IPV4, SUBTYPE_NVME, 0b110]);
        assert_eq!(&b[6..8], &[0xff, 0xff], "CNTLID dynamic");
        assert_eq!(&b[8..10], &[32, 0], "ASQSZ");
        assert_eq!(&b[32..37], b"4420\0", "TRSVCID NUL padded like nvmet");
        assert_eq!(&b[256..260], b"nqn.");
        assert_eq!(&b[512..524], b"192.168.1.10");
        assert_eq!(b[768], TCP_SECTYPE_NONE);
    }

    #[test]
    fn discovery_entry_accepts_space_padding() {
        let mut b = sample_entry().encode();
        b[DE_TRSVCID_OFFSET + 4..DE_TRSVCID_OFFSET + TRSVCID_LEN].fill(b' ');
        b[DE_TRADDR_OFFSET + 12..DE_TRADDR_OFFSET + TRADDR_LEN].fill(b' ');
        assert_eq!(DiscoveryEntry::decode(&b), Ok(sample_entry()));
    }

    #[test]
    fn discovery_log_round_trips() {
        let referral =
            DiscoveryEntry::tcp(ADRFAM_IPV6, SUBTYPE_DISCOVERY_REFERRAL, 2, "fe80::1", "8009", DISCOVERY_NQN);
        let entries = vec![sample_entry(), referral];
        let page = encode_discovery_log(7, &entries);
        assert_eq!(page.len(), 3 * 1024);
        let (h, e) = decode_discovery_log(&page).unwrap();
        assert_eq!(h, DiscoveryLogHeader { genctr: 7, numrec: 2, recfmt: 0 });
        assert_eq!(e, entries);
    }

    #[test]
    fn discovery_log_short_buffer_is_truncated() {
        assert_eq!(decode_discovery_log(&[0u8; 1023]), Err(LogPageError::Truncated { needed: 1024, got: 1023 }));
    }

    #[test]
    fn discovery_log_numrec_beyond_data_is_rejected() {
        let mut page = encode_discovery_log(1, &[sample_entry()]);
        put_u64(&mut page, DISC_NUMREC_OFFSET, u64::MAX);
        assert_eq!(
            decode_discovery_log(&page),
            Err(LogPageError::NumrecExceedsData { numrec: u64::MAX, available: 1 })
        );
    }

    #[test]
    fn discovery_entry_non_utf8_traddr_is_rejected() {
        let mut page = encode_discovery_log(1, &[sample_entry()]);
        page[DISCOVERY_LOG_HEADER_LEN + DE_TRADDR_OFFSET] = 0xc3; // lone lead byte
        assert_eq!(decode_discovery_log(&page), Err(LogPageError::NotUtf8 { field: "TRADDR" }));
    }

    fn text(charset: &'static [u8], max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(charset), 0..=max)
            .prop_map(|v| String::from_utf8(v).unwrap())
    }

    fn entry() -> impl Strategy<Value = DiscoveryEntry> {
        const ADDR: &[u8] = b"0123456789abcdefABCDEF.:-_%[]";
        const NQN: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789.-:_";
        (
            any::<[u8; 4]>(),
            any::<[u16; 4]>(),
            text(ADDR, TRSVCID_LEN),
            text(NQN, SUBNQN_LEN),
            text(ADDR, TRADDR_LEN),
            proptest::collection::vec(any::<u8>(), TSAS_LEN),
        )
            .prop_map(|(t, w, trsvcid, subnqn, traddr, tsas_v)| {
                let mut tsas = [0u8; TSAS_LEN];
                tsas.copy_from_slice(&tsas_v);
                DiscoveryEntry {
                    trtype: t[0],
                    adrfam: t[1],
                    subtype: t[2],
                    treq: t[3],
                    portid: w[0],
                    cntlid: w[1],
                    asqsz: w[2],
                    eflags: w[3],
                    trsvcid,
                    subnqn,
                    traddr,
                    tsas,
                }
            })
    }

    proptest! {
        #[test]
        fn discovery_logs_round_trip(genctr in any::<u64>(), entries in proptest::collection::vec(entry(), 0..6)) {
            let page = encode_discovery_log(genctr, &entries);
            let (h, e) = decode_discovery_log(&page).unwrap();
            prop_assert_eq!(h, DiscoveryLogHeader { genctr, numrec: entries.len() as u64, recfmt: 0 });
            prop_assert_eq!(e, entries);
        }

        /// A page cut at any length decodes iff the header and all NUMREC
        /// entries survive; otherwise the decoder names the right error.
        #[test]
        fn truncated_discovery_logs_get_the_expected_verdict(
            entries in proptest::collection::vec(entry(), 0..4),
            cut_seed in any::<usize>(),
        ) {
            let page = encode_discovery_log(3, &entries);
            let cut = cut_seed % (page.len() + 1);
            let got = decode_discovery_log(&page[..cut]);
            if cut < DISCOVERY_LOG_HEADER_LEN {
                prop_assert_eq!(got, Err(LogPageError::Truncated { needed: DISCOVERY_LOG_HEADER_LEN, got: cut }));
            } else if cut < page.len() {
                let available = ((cut - DISCOVERY_LOG_HEADER_LEN) / DISCOVERY_LOG_ENTRY_LEN) as u64;
                prop_assert_eq!(got, Err(LogPageError::NumrecExceedsData { numrec: entries.len() as u64, available }));
            } else {
                prop_assert_eq!(got.map(|(_, e)| e), Ok(entries));
            }
        }

        /// Random bytes with a random NUMREC never panic or over-allocate.
        #[test]
        fn random_discovery_pages_do_not_panic(page in proptest::collection::vec(any::<u8>(), 1000..5200)) {
            if let Ok((h, e)) = decode_discovery_log(&page) {
                prop_assert_eq!(h.numrec, e.len() as u64);
            }
        }

        #[test]
        fn log_window_stays_in_bounds(len_page in 0usize..600, offset in any::<u64>(), len in any::<usize>()) {
            let page = vec![0u8; len_page];
            if let Ok(w) = log_window(&page, offset, len) {
                prop_assert!(w.len() <= len);
                prop_assert!(offset as usize + w.len() <= page.len());
            }
        }
    }
}
