//! NVMe and NVMe/TCP wire formats.
//!
//! This crate encodes and decodes the bytes that cross an NVMe/TCP
//! connection: the transport PDUs ([`pdu`]), the 64-byte submission queue
//! entry and 16-byte completion ([`command`], [`completion`]), fabrics
//! commands ([`fabrics`]), status codes ([`status`]), Identify data
//! ([`identify`]), log pages ([`log_page`]), reservations
//! ([`reservation`]) and CRC32C digests ([`digest`]). It does no I/O and
//! keeps no connection state: the target and the host library drive these
//! types from their own state machines.
//!
//! Every structure is read at checked offsets from a byte slice; field
//! offsets are named constants taken from the NVMe Base 2.0, NVMe-oF 1.1
//! and NVMe/TCP transport specifications and pinned by tests.

mod codec;

pub mod auth;
pub mod command;
pub mod completion;
pub mod digest;
pub mod fabrics;
pub mod identify;
pub mod log_page;
pub mod pdu;
pub mod reservation;
pub mod status;
