//! A volume file as an NVMe namespace's [`BlockDevice`]: positional reads and writes
//! (called on the blocking pool by the transport), holes punched for deallocation.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use quarry_nvmeof::target::BlockDevice;

/// Largest chunk written when zeroing without fallocate support.
const ZERO_CHUNK: usize = 1 << 20;

/// One open volume file.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    size: AtomicU64,
}

impl FileDevice {
    /// Opens the volume file read-write; `size` is the volume's size from the DB.
    pub fn open(path: &Path, size: u64) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(FileDevice {
            file,
            size: AtomicU64::new(size),
        })
    }

    /// Records a resize done through the API.
    pub fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Relaxed);
    }

    fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
        let off = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let l = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, l) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn zero_by_writing(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; ZERO_CHUNK.min(usize::try_from(len).unwrap_or(ZERO_CHUNK))];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    )
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.fallocate(
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        ) {
            Err(e) if unsupported(&e) => self.zero_by_writing(offset, len),
            other => other,
        }
    }

    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.fallocate(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        ) {
            Err(e) if unsupported(&e) => self.zero_by_writing(offset, len),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punch_and_zero_read_back_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.vol");
        File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let d = FileDevice::open(&p, 1 << 20).unwrap();
        d.write_at(4096, &[0xab; 8192], true).unwrap();
        let mut b = [0u8; 8192];
        d.read_at(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xab));
        d.deallocate(4096, 4096).unwrap();
        d.write_zeroes(8192, 4096).unwrap();
        d.read_at(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        d.flush().unwrap();
    }
}
