//! The data buffer of a storage operation. Its start is 4 KiB-aligned, so a backend can
//! hand it to `O_DIRECT` I/O in place: a write's data is copied once, out of the receive
//! buffer, and a read's data lands where the answer is built from, with no bounce buffer
//! in between. Built in safe code from an over-allocated `Vec` (no custom allocator).

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Alignment of every [`IoBuf`]'s start: what `O_DIRECT` needs on 512-byte and 4 KiB
/// logical-block devices.
pub const IO_BUF_ALIGN: usize = 4096;

/// A byte buffer whose start is [`IO_BUF_ALIGN`]-aligned (see [`IoBuf::is_aligned`] for
/// the one case where it is not), of fixed capacity: it never reallocates, so the
/// alignment holds for its whole life.
#[derive(Default)]
pub struct IoBuf {
    /// Padding up to the aligned start, then the data; its capacity is never exceeded.
    buf: Vec<u8>,
    /// Where the data starts in `buf`.
    off: usize,
    /// Most data bytes it takes (`buf` never grows past `off + cap`).
    cap: usize,
}

impl IoBuf {
    /// An empty buffer that can take `cap` bytes through [`IoBuf::extend_from_slice`].
    pub fn with_capacity(cap: usize) -> IoBuf {
        let mut buf: Vec<u8> = Vec::with_capacity(cap.saturating_add(IO_BUF_ALIGN));
        let off = buf.as_ptr().align_offset(IO_BUF_ALIGN);
        // `align_offset` on bytes is exact; should it ever not be, the buffer is simply
        // unaligned (correct, only slower: `is_aligned` tells users).
        let off = if off < IO_BUF_ALIGN { off } else { 0 };
        buf.resize(off, 0);
        IoBuf { buf, off, cap }
    }

    /// `len` zero bytes, for a read to fill.
    pub fn zeroed(len: usize) -> IoBuf {
        let mut b = IoBuf::with_capacity(len);
        b.buf.resize(b.off + len, 0);
        b
    }

    /// A copy of `data`.
    pub fn copy_from(data: &[u8]) -> IoBuf {
        let mut b = IoBuf::with_capacity(data.len());
        b.buf.extend_from_slice(data);
        b
    }

    /// Appends `data` if it fits the capacity; returns false (appending nothing) if not.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> bool {
        if self.len().saturating_add(data.len()) > self.cap {
            return false;
        }
        self.buf.extend_from_slice(data);
        true
    }

    /// Whether the data starts on an [`IO_BUF_ALIGN`] boundary (always, except for an
    /// empty default buffer).
    pub fn is_aligned(&self) -> bool {
        (self.as_ptr() as usize).is_multiple_of(IO_BUF_ALIGN)
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(self.off..).unwrap_or_default()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.off..).unwrap_or_default()
    }
}

impl Clone for IoBuf {
    fn clone(&self) -> IoBuf {
        IoBuf::copy_from(self)
    }
}

impl PartialEq for IoBuf {
    fn eq(&self, other: &IoBuf) -> bool {
        **self == **other
    }
}

impl Eq for IoBuf {}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len())
    }
}

impl From<&[u8]> for IoBuf {
    fn from(data: &[u8]) -> IoBuf {
        IoBuf::copy_from(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_aligned_and_hold_what_was_put_in() {
        for len in [0, 1, 512, 4096, 4097, 128 * 1024, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let b = IoBuf::copy_from(&data);
            assert!(b.is_aligned(), "copy of {len}");
            assert_eq!(&*b, &data[..]);
            let z = IoBuf::zeroed(len);
            assert!(z.is_aligned(), "zeroed {len}");
            assert_eq!(z.len(), len);
            assert!(z.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn extending_stops_at_the_capacity_and_never_moves_the_data() {
        let mut b = IoBuf::with_capacity(10_000);
        let start = b.as_ptr();
        assert!(b.extend_from_slice(&[1; 6000]));
        assert!(b.extend_from_slice(&[2; 4000]));
        assert!(!b.extend_from_slice(&[3; 1]), "one byte over the capacity");
        assert_eq!(b.len(), 10_000);
        assert_eq!(b.as_ptr(), start);
        assert!(b.is_aligned());
        assert_eq!((b[5999], b[6000]), (1, 2));
    }

    #[test]
    fn writes_through_deref_mut_and_compares_by_content() {
        let mut z = IoBuf::zeroed(8);
        z[3] = 9;
        assert_eq!(z, IoBuf::copy_from(&[0, 0, 0, 9, 0, 0, 0, 0]));
        assert_eq!(z.clone(), z);
        assert_eq!(format!("{z:?}"), "IoBuf(8 bytes)");
        assert!(IoBuf::default().is_empty());
    }
}
