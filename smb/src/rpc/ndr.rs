//! NDR 2.0 (C706 chapter 14), little-endian, for the srvsvc types: primitives with natural
//! alignment, unique/full pointers as referent ids, and conformant varying UTF-16 strings.
//! Alignment is relative to the start of the stub, which is how DCE/RPC defines it.

use super::RpcError;
use crate::proto::wire::{le_u16_units, le_u32_at};

/// Longest string (UTF-16 code units, terminator included) the reader accepts.
pub const MAX_STRING_UNITS: u32 = 1024;
/// First referent id the writer hands out (what Windows uses); each next one is 4 more.
pub const FIRST_REFERENT_ID: u32 = 0x0002_0000;

/// Writes NDR into a growing buffer.
#[derive(Debug)]
pub struct NdrWriter {
    buf: Vec<u8>,
    next_ref: u32,
}

impl Default for NdrWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl NdrWriter {
    /// An empty stub.
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            next_ref: FIRST_REFERENT_ID,
        }
    }

    /// Pads with zeros to a multiple of `n`.
    pub fn align(&mut self, n: usize) {
        while !self.buf.len().is_multiple_of(n) {
            self.buf.push(0);
        }
    }

    /// An aligned u32.
    pub fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A unique pointer: a fresh referent id if `present`, else 0.
    pub fn ptr(&mut self, present: bool) {
        if present {
            let id = self.next_ref;
            self.next_ref = self.next_ref.wrapping_add(4);
            self.u32(id);
        } else {
            self.u32(0);
        }
    }

    /// A conformant varying, NUL-terminated UTF-16 string (`[string] wchar_t*` referent).
    pub fn wstr(&mut self, s: &str) {
        let units: Vec<u16> = s.encode_utf16().chain(std::iter::once(0)).collect();
        let n = units.len() as u32;
        self.u32(n);
        self.u32(0);
        self.u32(n);
        for u in units {
            self.buf.extend_from_slice(&u.to_le_bytes());
        }
    }

    /// The stub written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads NDR from a stub, bounds-checked.
#[derive(Debug)]
pub struct NdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> NdrReader<'a> {
    /// Starts at the beginning of `stub`.
    pub fn new(stub: &'a [u8]) -> Self {
        Self { buf: stub, pos: 0 }
    }

    fn align(&mut self, n: usize) -> Result<(), RpcError> {
        let pad = (n - self.pos % n) % n;
        if self.pos + pad > self.buf.len() {
            return Err(RpcError::Malformed("NDR: truncated padding"));
        }
        self.pos += pad;
        Ok(())
    }

    /// An aligned u32.
    pub fn u32(&mut self) -> Result<u32, RpcError> {
        self.align(4)?;
        let v = le_u32_at(self.buf, self.pos).ok_or(RpcError::Malformed("NDR: truncated u32"))?;
        self.pos += 4;
        Ok(v)
    }

    /// A unique pointer's referent id (0 = NULL).
    pub fn ptr(&mut self) -> Result<u32, RpcError> {
        self.u32()
    }

    /// A conformant varying UTF-16 string; the trailing NUL, if any, is dropped.
    pub fn wstr(&mut self) -> Result<String, RpcError> {
        let max = self.u32()?;
        let offset = self.u32()?;
        let actual = self.u32()?;
        if max > MAX_STRING_UNITS || actual > max || offset != 0 {
            return Err(RpcError::Malformed("NDR: bad string bounds"));
        }
        let len = actual as usize * 2;
        let b = self
            .buf
            .get(self.pos..self.pos + len)
            .ok_or(RpcError::Malformed("NDR: truncated string"))?;
        self.pos += len;
        let mut units: Vec<u16> = le_u16_units(b).collect();
        if units.last() == Some(&0) {
            units.pop();
        }
        String::from_utf16(&units).map_err(|_| RpcError::Malformed("NDR: invalid UTF-16"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_round_trip_and_alignment() {
        let mut w = NdrWriter::new();
        w.ptr(true);
        w.wstr("data");
        w.u32(7);
        w.ptr(false);
        w.ptr(true);
        let b = w.into_bytes();
        // ref id, max 5, offset 0, actual 5, 10 bytes, 2 pad, 7, null, next ref id
        assert_eq!(b.len(), 4 + 12 + 10 + 2 + 4 + 4 + 4);
        assert_eq!(&b[..4], &[0, 0, 2, 0]);
        assert_eq!(&b[b.len() - 4..], &[4, 0, 2, 0]);
        let mut r = NdrReader::new(&b);
        assert_eq!(r.ptr().unwrap(), 0x20000);
        assert_eq!(r.wstr().unwrap(), "data");
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.ptr().unwrap(), 0);
    }

    #[test]
    fn reader_rejects_hostile_strings() {
        for bad in [
            vec![5u8, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0],
            vec![0xff, 0xff, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
            vec![2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0],
            vec![2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0],
        ] {
            assert!(NdrReader::new(&bad).wstr().is_err());
        }
    }
}
