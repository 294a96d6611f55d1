//! Little-endian field access at fixed offsets.
//!
//! Every wire structure in this crate is a byte slice read and written at
//! named offsets (see each module's `*_OFFSET` constants), never a cast to a
//! `repr(C)` struct. These helpers do the one thing that repeats: move an
//! integer in or out of a slice at an offset. Callers check lengths once
//! (in a checked `from_bytes` or by construction), so the helpers index
//! directly; an out-of-bounds offset is a bug in this crate, caught by the
//! size-pinning tests, not something outside input can reach.

/// Reads a `u16` at `off`.
#[inline]
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Reads a `u32` at `off`.
#[inline]
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Reads a `u64` at `off`.
#[inline]
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Writes a `u16` at `off`.
#[inline]
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u32` at `off`.
#[inline]
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u64` at `off`.
#[inline]
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes a `u128` at `off` (SMART counters are 16-byte little-endian).
#[inline]
pub(crate) fn put_u128(b: &mut [u8], off: usize, v: u128) {
    b[off..off + 16].copy_from_slice(&v.to_le_bytes());
}

/// Reads a `u128` at `off`.
#[inline]
pub(crate) fn get_u128(b: &[u8], off: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    u128::from_le_bytes(a)
}

/// Writes `s` into the fixed-size field `b[off..off+len]`, padded with
/// `pad` (ASCII strings in Identify are space-padded, NQNs NUL-padded).
/// A string longer than the field is cut at the field's length.
pub(crate) fn put_str(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
    let field = &mut b[off..off + len];
    field.fill(pad);
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Reads a NUL-terminated (or field-filling) string from a fixed-size field,
/// trimming trailing spaces. Returns `None` when the bytes are not UTF-8.
pub(crate) fn get_str(b: &[u8], off: usize, len: usize) -> Option<&str> {
    let field = &b[off..off + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    std::str::from_utf8(&field[..end]).ok().map(|s| s.trim_end_matches(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_little_endian() {
        let mut b = [0u8; 32];
        put_u16(&mut b, 1, 0x0102);
        put_u32(&mut b, 3, 0x0304_0506);
        put_u64(&mut b, 7, 0x0708_090a_0b0c_0d0e);
        put_u128(&mut b, 15, 0x1112);
        assert_eq!(&b[1..3], &[2, 1]);
        assert_eq!(&b[3..7], &[6, 5, 4, 3]);
        assert_eq!(b[7], 0x0e);
        assert_eq!(get_u16(&b, 1), 0x0102);
        assert_eq!(get_u32(&b, 3), 0x0304_0506);
        assert_eq!(get_u64(&b, 7), 0x0708_090a_0b0c_0d0e);
        assert_eq!(get_u128(&b, 15), 0x1112);
    }

    #[test]
    fn strings_pad_and_trim() {
        let mut b = [0xffu8; 12];
        put_str(&mut b, 2, 8, "abc", b' ');
        assert_eq!(&b[2..10], b"abc     ");
        assert_eq!(get_str(&b, 2, 8), Some("abc"));
        put_str(&mut b, 2, 8, "nqn.too-long-for-field", 0);
        assert_eq!(get_str(&b, 2, 8), Some("nqn.too-"));
        put_str(&mut b, 2, 8, "x", 0);
        assert_eq!(get_str(&b, 2, 8), Some("x"));
    }
}
