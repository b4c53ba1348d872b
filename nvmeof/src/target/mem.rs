//! An in-memory [`BlockDevice`]: a real, bounded implementation for tests, fuzzing and
//! the test initiator's loopback checks.

use std::io;
use std::sync::Mutex;

use super::config::BlockDevice;

/// A RAM disk of fixed size.
#[derive(Debug)]
pub struct MemDevice {
    data: Mutex<Vec<u8>>,
}

impl MemDevice {
    /// A zeroed device of `size` bytes.
    pub fn new(size: usize) -> Self {
        MemDevice {
            data: Mutex::new(vec![0; size]),
        }
    }

    /// The byte range of `n` bytes at `offset` (the caller's `get` turns a range past
    /// the end into [`io::ErrorKind::UnexpectedEof`]).
    fn range(offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let end = start.checked_add(n).ok_or(io::ErrorKind::InvalidInput)?;
        Ok(start..end)
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.data.lock().map(|d| d.len() as u64).unwrap_or(0)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        let src = d
            .get(Self::range(offset, buf.len())?)
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        let mut d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        d.get_mut(Self::range(offset, data.len())?)
            .ok_or(io::ErrorKind::UnexpectedEof)?
            .copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        let n = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        d.get_mut(Self::range(offset, n)?)
            .ok_or(io::ErrorKind::UnexpectedEof)?
            .fill(0);
        Ok(())
    }

    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_access_past_the_end_is_an_error() {
        let d = MemDevice::new(4096);
        d.write_at(4000, &[7; 96], false).unwrap();
        let mut b = [0u8; 96];
        d.read_at(4000, &mut b).unwrap();
        assert_eq!(b, [7; 96]);
        let eof = io::ErrorKind::UnexpectedEof;
        assert_eq!(d.read_at(4001, &mut b).unwrap_err().kind(), eof);
        assert_eq!(d.write_at(4096, &[1], false).unwrap_err().kind(), eof);
        assert_eq!(d.write_zeroes(0, 4097).unwrap_err().kind(), eof);
        let huge = io::ErrorKind::InvalidInput;
        assert_eq!(d.write_zeroes(u64::MAX, 2).unwrap_err().kind(), huge);
        d.write_zeroes(4000, 96).unwrap();
        d.read_at(4000, &mut b).unwrap();
        assert_eq!(b, [0; 96]);
    }
}
