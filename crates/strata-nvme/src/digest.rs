//! CRC32C header and data digests (NVMe/TCP 1.0, section 3.6.2.7 / 3.6.2.8).
//!
//! A digest is the CRC32C (Castagnoli) of the covered bytes, sent as a
//! little-endian `u32` right after them. The header digest covers the
//! `HLEN` bytes of the PDU header; the data digest covers the PDU data
//! without padding.

/// Length of a header or data digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32C over `data` starting from a previous value, for data
/// that arrives in pieces.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The digest bytes for `data`.
#[inline]
pub fn digest_bytes(data: &[u8]) -> [u8; DIGEST_LEN] {
    crc32c(data).to_le_bytes()
}

/// Checks a received digest against the bytes it covers. Returns the
/// computed value on mismatch, for the error message.
pub fn check_digest(data: &[u8], received: [u8; DIGEST_LEN]) -> Result<(), u32> {
    let computed = crc32c(data);
    if computed == u32::from_le_bytes(received) { Ok(()) } else { Err(computed) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_castagnoli_check_value() {
        // The standard check value of CRC-32C over "123456789" (RFC 3720 B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(digest_bytes(b"123456789"), [0x83, 0x92, 0x06, 0xE3]);
    }

    #[test]
    fn append_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let (a, b) = data.split_at(333);
        assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
    }

    #[test]
    fn corrupted_digest_is_reported() {
        let d = digest_bytes(b"payload");
        assert!(check_digest(b"payload", d).is_ok());
        assert!(check_digest(b"paylaod", d).is_err());
    }
}
