//! Standard base64 (RFC 4648 section 4, `+/` alphabet), as etcd's JSON
//! gateway writes every key and value.
//!
//! Small enough to own rather than add a crate for. The encoder always
//! pads. The decoder takes what the gateway (Go's protobuf JSON codec) may
//! write or accept: padded or unpadded input; it rejects any other
//! character, a length that cannot come from an encoder (one character in
//! the last group) and padding in the middle. Trailing bits of the last
//! character that do not fit a byte are ignored, as Go's decoder ignores
//! them, so `encode(decode(s))` may differ from `s`; `decode(encode(b))`
//! is always `b` (the fuzz target `etcd_responses` checks it).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Why a base64 text was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Base64Error {
    /// A byte outside the alphabet (or `=` before the end).
    #[error("byte {byte:#04x} at offset {offset} is not standard base64")]
    InvalidByte {
        /// The offending byte.
        byte: u8,
        /// Its offset in the text.
        offset: usize,
    },
    /// The text (without padding) has a length no encoder produces.
    #[error("base64 text of {len} characters (without padding) cannot be complete")]
    InvalidLength {
        /// The length without padding.
        len: usize,
    },
}

/// Encodes `data` with padding.
pub fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// The 6-bit value of an alphabet byte.
fn value(byte: u8) -> Option<u32> {
    let v = match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes padded or unpadded standard base64.
///
/// # Errors
///
/// [`Base64Error`] names the first problem.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    // Up to two trailing '=' are padding; any other '=' is an invalid byte.
    let unpadded = match bytes {
        [rest @ .., b'=', b'='] | [rest @ .., b'='] => rest,
        all => all,
    };
    if unpadded.len() % 4 == 1 || (unpadded.len() != bytes.len() && !bytes.len().is_multiple_of(4)) {
        return Err(Base64Error::InvalidLength { len: unpadded.len() });
    }
    let mut out = Vec::with_capacity(unpadded.len() / 4 * 3 + 2);
    for (group_index, group) in unpadded.chunks(4).enumerate() {
        let mut n = 0u32;
        for (i, &byte) in group.iter().enumerate() {
            let v = value(byte).ok_or(Base64Error::InvalidByte { byte, offset: group_index * 4 + i })?;
            n |= v << (18 - 6 * i);
        }
        // A group of k characters carries k*6 bits: k-1 whole bytes.
        let whole = group.len() - 1;
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..whole]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4648_test_vectors() {
        let vectors =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, coded) in vectors {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
            assert_eq!(decode(coded.trim_end_matches('=')).unwrap(), plain.as_bytes(), "unpadded {coded}");
        }
        assert_eq!(decode("Zm9vYmFy").unwrap(), b"foobar");
    }

    #[test]
    fn every_byte_value_round_trips() {
        let all: Vec<u8> = (0..=255u8).collect();
        for len in 0..all.len() {
            assert_eq!(decode(&encode(&all[..len])).unwrap(), &all[..len]);
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn garbage_is_rejected_with_its_position() {
        assert_eq!(decode("Zm9v!A=="), Err(Base64Error::InvalidByte { byte: b'!', offset: 4 }));
        assert_eq!(decode("Zm=v"), Err(Base64Error::InvalidByte { byte: b'=', offset: 2 }));
        assert_eq!(decode("Z"), Err(Base64Error::InvalidLength { len: 1 }));
        assert_eq!(decode("Zm9vY"), Err(Base64Error::InvalidLength { len: 5 }));
        // Padding that does not complete a group of four.
        assert_eq!(decode("Zm8=="), Err(Base64Error::InvalidLength { len: 3 }));
        assert_eq!(decode("Zg="), Err(Base64Error::InvalidLength { len: 2 }));
        assert!(decode("é").is_err());
    }
}
