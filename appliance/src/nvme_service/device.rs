//! A volume file as an NVMe namespace's [`BlockDevice`]: positional reads and writes
//! (called on the blocking pool by the transport) through an `O_DIRECT` descriptor so
//! volume data does not pass through (and crowd) the page cache, holes punched for
//! deallocation. File systems without `O_DIRECT` (tmpfs) fall back to buffered I/O.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use quarry_nvmeof::target::{BlockDevice, IoBuf, IO_BUF_ALIGN};

/// Largest chunk written when zeroing without fallocate support.
const ZERO_CHUNK: usize = 1 << 20;
/// Alignment `O_DIRECT` needs for offsets, lengths and memory (covers 512 and 4 KiB
/// logical block file systems): the target's data buffers are aligned to it.
const DIRECT_ALIGN: usize = IO_BUF_ALIGN;

fn aligned(offset: u64, len: usize) -> bool {
    offset.is_multiple_of(DIRECT_ALIGN as u64) && len.is_multiple_of(DIRECT_ALIGN)
}

/// Whether `O_DIRECT` can use this memory in place.
pub(crate) fn memory_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
}

/// One open volume file.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    direct: Option<File>,
    size: AtomicU64,
}

impl FileDevice {
    /// Opens the volume file read-write; `size` is the volume's size from the DB.
    pub fn open(path: &Path, size: u64) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let direct = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::info!(path = %path.display(), error = %e, "O_DIRECT unavailable; buffered I/O");
                None
            }
        };
        Ok(FileDevice {
            file,
            direct,
            size: AtomicU64::new(size),
        })
    }

    /// The `O_DIRECT` descriptor, for the io_uring executor (4 KiB-aligned offsets,
    /// lengths and buffers only).
    pub fn direct_fd(&self) -> Option<std::os::fd::RawFd> {
        self.direct.as_ref().map(|f| f.as_raw_fd())
    }

    /// The buffered descriptor, for the io_uring executor's I/O that cannot go direct
    /// (file systems without `O_DIRECT`, unaligned requests): any offset and length.
    pub fn buffered_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    /// Whether reads and writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
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
            let chunk = zeros.get(..n).unwrap_or(&zeros);
            // Through write_at so the direct path stays coherent with other writes.
            self.write_at(offset + done, chunk, false)?;
            done += chunk.len() as u64;
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
        match &self.direct {
            // The target's buffers are aligned: read in place.
            Some(d) if aligned(offset, buf.len()) && memory_aligned(buf) => {
                d.read_exact_at(buf, offset)
            }
            Some(d) if aligned(offset, buf.len()) => {
                let mut bounce = IoBuf::for_overwrite(buf.len());
                d.read_exact_at(&mut bounce, offset)?;
                buf.copy_from_slice(&bounce);
                Ok(())
            }
            _ => self.file.read_exact_at(buf, offset),
        }
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        match &self.direct {
            Some(d) if aligned(offset, data.len()) && memory_aligned(data) => {
                d.write_all_at(data, offset)?
            }
            Some(d) if aligned(offset, data.len()) => {
                d.write_all_at(&IoBuf::copy_from(data), offset)?
            }
            _ => self.file.write_all_at(data, offset)?,
        }
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

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// A volume file of `size` bytes at `dir/v.vol`, opened (tests of this module and of
/// the io_uring executor); the path is returned too, for tests that change the file.
#[cfg(test)]
pub(crate) fn test_volume(dir: &Path, size: u64) -> (std::path::PathBuf, FileDevice) {
    let path = dir.join("v.vol");
    File::create(&path).unwrap().set_len(size).unwrap();
    let dev = FileDevice::open(&path, size).unwrap();
    (path, dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punch_and_zero_read_back_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        let (_, d) = test_volume(dir.path(), 1 << 20);
        // /tmp on this appliance's build hosts is ext4: the direct path is exercised.
        assert!(d.is_direct());
        d.write_at(4096, &[0xab; 8192], true).unwrap();
        let mut b = [0u8; 8192];
        d.read_at(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0xab));
        d.deallocate(4096, 4096).unwrap();
        d.write_zeroes(8192, 4096).unwrap();
        d.read_at(4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        d.flush().unwrap();
        // Unaligned access (not produced by 4 KiB namespaces) still works, buffered.
        d.write_at(100, b"hello", false).unwrap();
        let mut h = [0u8; 5];
        d.read_at(100, &mut h).unwrap();
        assert_eq!(&h, b"hello");
        // And the direct path sees it.
        let mut page = [0u8; 4096];
        d.read_at(0, &mut page).unwrap();
        assert_eq!(&page[100..105], b"hello");
    }

    #[test]
    fn direct_io_uses_aligned_buffers_in_place_and_bounces_unaligned_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (_, d) = test_volume(dir.path(), 1 << 20);
        assert!(d.is_direct(), "the test needs O_DIRECT (ext4 /tmp)");
        // The target's own buffers: aligned, so O_DIRECT takes them as they are.
        let data = IoBuf::copy_from(&[0x5a; 8192]);
        assert!(memory_aligned(&data));
        d.write_at(8192, &data, false).unwrap();
        let mut back = IoBuf::zeroed(8192);
        d.read_at(8192, &mut back).unwrap();
        assert_eq!(back, data);
        // Memory one byte off an alignment boundary (O_DIRECT would refuse it with
        // EINVAL): the device bounces it through an aligned buffer.
        let mut raw = IoBuf::zeroed(4096 + 1);
        raw[1..].fill(0xc3);
        assert!(!memory_aligned(&raw[1..]));
        d.write_at(16384, &raw[1..], true).unwrap();
        let mut odd = IoBuf::zeroed(4096 + 1);
        d.read_at(16384, &mut odd[1..]).unwrap();
        assert!(odd[1..].iter().all(|&x| x == 0xc3));
    }
}
