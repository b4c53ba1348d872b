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

    fn range(&self, len: usize, offset: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let end = start.checked_add(n).ok_or(io::ErrorKind::InvalidInput)?;
        if end > len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(start..end)
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.data.lock().map(|d| d.len() as u64).unwrap_or(0)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        let r = self.range(d.len(), offset, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        let mut d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        let r = self.range(d.len(), offset, data.len())?;
        d[r].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut d = self.data.lock().map_err(|_| io::Error::other("poisoned"))?;
        let n = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        let r = self.range(d.len(), offset, n)?;
        d[r].fill(0);
        Ok(())
    }

    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len)
    }
}
