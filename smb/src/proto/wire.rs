//! Bounds-checked little-endian reading and writing. Every decoder in [`crate::proto`] reads
//! through [`Reader`], so an out-of-range offset or a short buffer becomes a [`ProtoError`]
//! instead of a panic: this is the one place where slice indexing is allowed to fail.

use super::ProtoError;

/// A cursor over a borrowed buffer that never panics: every read checks the remaining length.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading `buf` at offset 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current offset from the start of the buffer.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self.pos.checked_add(n).ok_or(ProtoError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(ProtoError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), ProtoError> {
        self.bytes(n).map(|_| ())
    }

    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let s = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.array::<1>()?[0])
    }

    /// Reads a little-endian u16.
    pub fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// Returns `buf[offset..offset+len]`, or [`ProtoError::BadOffset`] when the range is not
/// inside `buf`. Used for every (offset, length) pair a client sends.
pub fn slice_at(buf: &[u8], offset: usize, len: usize) -> Result<&[u8], ProtoError> {
    if len == 0 {
        return Ok(&[]);
    }
    let end = offset.checked_add(len).ok_or(ProtoError::BadOffset)?;
    buf.get(offset..end).ok_or(ProtoError::BadOffset)
}

/// The `N` bytes at `at` as an array, or `None` when they are not all inside `buf`. For
/// decoders outside [`crate::proto`] that read fields at offsets and map a miss to their own
/// error type.
pub fn array_at<const N: usize>(buf: &[u8], at: usize) -> Option<&[u8; N]> {
    buf.get(at..)?.first_chunk()
}

/// The little-endian u16 at `at`, or `None` when it is not all inside `buf`.
pub fn le_u16_at(buf: &[u8], at: usize) -> Option<u16> {
    array_at(buf, at).map(|a| u16::from_le_bytes(*a))
}

/// The little-endian u32 at `at`, or `None` when it is not all inside `buf`.
pub fn le_u32_at(buf: &[u8], at: usize) -> Option<u32> {
    array_at(buf, at).map(|a| u32::from_le_bytes(*a))
}

/// The little-endian u16 units of `bytes`, in order; an odd trailing byte is not read
/// (callers that decode UTF-16 refuse odd lengths first).
pub fn le_u16_units(bytes: &[u8]) -> impl ExactSizeIterator<Item = u16> + Clone + '_ {
    let lo = bytes.iter().step_by(2);
    let hi = bytes.iter().skip(1).step_by(2);
    lo.zip(hi).map(|(&l, &h)| u16::from_le_bytes([l, h]))
}

/// Decodes UTF-16LE bytes into a `String`, refusing odd lengths and unpaired surrogates.
pub fn utf16le(bytes: &[u8]) -> Result<String, ProtoError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(ProtoError::BadString);
    }
    char::decode_utf16(le_u16_units(bytes))
        .collect::<Result<String, _>>()
        .map_err(|_| ProtoError::BadString)
}

/// Little-endian append helpers on `Vec<u8>`: encoders build messages with these.
pub trait Put {
    /// Appends one byte.
    fn put_u8(&mut self, v: u8);
    /// Appends a little-endian u16.
    fn put_u16(&mut self, v: u16);
    /// Appends a little-endian u32.
    fn put_u32(&mut self, v: u32);
    /// Appends a little-endian u64.
    fn put_u64(&mut self, v: u64);
    /// Appends `n` zero bytes.
    fn put_zeros(&mut self, n: usize);
    /// Appends a string as UTF-16LE (no terminator).
    fn put_utf16(&mut self, s: &str);
    /// Pads with zeros until the length is a multiple of `align`.
    fn pad_to(&mut self, align: usize);
    /// Overwrites a little-endian u16 at `at` (no-op when out of range: encoders only patch
    /// fields they wrote).
    fn set_u16(&mut self, at: usize, v: u16);
    /// Overwrites a little-endian u32 at `at` (no-op when out of range).
    fn set_u32(&mut self, at: usize, v: u32);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn put_utf16(&mut self, s: &str) {
        for u in s.encode_utf16() {
            self.extend_from_slice(&u.to_le_bytes());
        }
    }
    fn pad_to(&mut self, align: usize) {
        if align > 1 {
            let rem = self.len() % align;
            if rem != 0 {
                self.put_zeros(align - rem);
            }
        }
    }
    fn set_u16(&mut self, at: usize, v: u16) {
        if let Some(s) = self.get_mut(at..at.saturating_add(2)) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
    fn set_u32(&mut self, at: usize, v: u32) {
        if let Some(s) = self.get_mut(at..at.saturating_add(4)) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Byte length of a string once encoded as UTF-16LE.
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count() * 2
}

/// Converts a length to the u16/u32 a wire field holds, saturating (callers bound sizes well
/// below these limits; saturation only guards against a logic slip turning into a panic).
pub fn len_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// See [`len_u16`].
pub fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_refuses_short_reads() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert_eq!(r.u16(), Err(ProtoError::Truncated));
        assert_eq!(r.u8().unwrap(), 3);
        assert_eq!(r.bytes(usize::MAX), Err(ProtoError::Truncated));
    }

    #[test]
    fn slice_at_checks_ranges() {
        let b = [0u8; 10];
        assert!(slice_at(&b, 8, 2).is_ok());
        assert_eq!(slice_at(&b, 9, 2), Err(ProtoError::BadOffset));
        assert_eq!(slice_at(&b, usize::MAX, 2), Err(ProtoError::BadOffset));
        assert_eq!(slice_at(&b, 100, 0).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn field_helpers_check_bounds() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(le_u16_at(&b, 3), Some(0x0504));
        assert_eq!(le_u16_at(&b, 4), None);
        assert_eq!(le_u32_at(&b, 1), Some(0x0504_0302));
        assert_eq!(le_u32_at(&b, 2), None);
        assert_eq!(le_u32_at(&b, usize::MAX), None);
        assert_eq!(array_at::<0>(&b, 5), Some(&[]));
        assert_eq!(array_at::<1>(&b, 6), None);
        assert_eq!(le_u16_units(&b).collect::<Vec<_>>(), [0x0201, 0x0403]);
        assert_eq!(le_u16_units(&b).len(), 2);
        assert_eq!(le_u16_units(&[]).len(), 0);
    }

    #[test]
    fn utf16_round_trip() {
        let mut v = Vec::new();
        v.put_utf16("dir\\f\u{e9}");
        assert_eq!(utf16le(&v).unwrap(), "dir\\f\u{e9}");
        assert_eq!(utf16le(&[0x00, 0xd8]), Err(ProtoError::BadString));
        assert_eq!(utf16le(&[0x41]), Err(ProtoError::BadString));
    }
}
