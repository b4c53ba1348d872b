//! Large READs and WRITEs through `O_DIRECT` descriptors, so checkpoint-sized transfers
//! skip the page cache copy.
//!
//! A buffered `pwrite` copies every byte into page-cache folios, and on the benchmark
//! machine that copy cost 0.4-2.8 CPU seconds per GiB (the more memory pressure, the more),
//! more than all the SMB work around it; the same bytes written with `O_DIRECT` cost about
//! 0.07 s/GiB of kernel time (tests/bench/RESULTS.md, step 5). So a write of at least
//! `DIRECT_MIN` bytes sends its 4 KiB-aligned middle through a second descriptor of the
//! same open file opened with `O_DIRECT`: straight from the caller's memory when that is
//! aligned as the file offset is (the SMB server places large WRITEs so), else from a
//! pooled aligned bounce buffer (one user-space copy into a buffer that stays faulted in
//! is still far cheaper than the page-cache path). The unaligned head and tail go through
//! the ordinary descriptor. The kernel keeps the two coherent: a
//! direct write flushes and invalidates cached pages of its range.
//!
//! Reads are the same story in reverse: a cold buffered read has the device fill page
//! cache folios and then copies them out, and that copy was 38% of Quarry's CPU on a
//! cold checkpoint read (step 17). `DirectIo::read_some` reads the aligned middle of a
//! large read straight into the caller's buffer when the buffer's memory is aligned the
//! way the file offset is (the READ handler arranges that), with no bounce copy. Which
//! reads go direct is the open file's decision (`file.rs`): only large ones the page
//! cache does not hold, on a file no other handle has open. A direct read first writes
//! back dirty cached pages of its range, so it sees every earlier write.
//!
//! File systems without `O_DIRECT` (tmpfs) refuse the second descriptor or the transfer
//! with `EINVAL`; those fall back to buffered I/O and the descriptor is not tried again.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Writes shorter than this stay buffered: small files are read back soon and belong in
/// the page cache, and their copy is cheap.
pub(crate) const DIRECT_MIN: usize = 256 << 10;
/// Alignment of offsets, lengths and memory that `O_DIRECT` needs (covers 512-byte and
/// 4 KiB logical blocks).
const ALIGN: usize = 4096;
/// The largest piece written from one bounce buffer (the largest SMB WRITE is 8 MiB).
const CHUNK: usize = 8 << 20;
/// Bounce buffers kept for reuse; more concurrent writers allocate and drop their own.
const POOL_MAX: usize = 8;

/// Idle bounce buffers: a process-wide pool bounded at [`POOL_MAX`] buffers of
/// [`CHUNK`] + [`ALIGN`] bytes.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[cfg(test)]
thread_local! {
    /// Direct read calls made on this thread: lets a test tell which path its reads took.
    pub(crate) static DIRECT_READS_ON_THIS_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Direct writes made from the caller's memory, without a bounce copy, on this thread.
    static UNCOPIED_DIRECT_WRITES_ON_THIS_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The `O_DIRECT` side of one open: its descriptors, each opened on first use.
#[derive(Debug, Default)]
pub(crate) struct DirectIo {
    /// For writes. `None` once opening it failed (the file system has no `O_DIRECT`):
    /// every later write is buffered.
    write_fd: OnceLock<Option<File>>,
    /// For reads, the same way.
    read_fd: OnceLock<Option<File>>,
    /// Set when a direct read was refused (EINVAL): later reads stay buffered.
    reads_refused: AtomicBool,
}

impl DirectIo {
    /// Writes all of `data` at `offset` of `file`, the aligned middle of a large write
    /// through `O_DIRECT`.
    pub(crate) fn write_all_at(&self, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
        let head = (ALIGN - (offset % ALIGN as u64) as usize) % ALIGN;
        if data.len() < DIRECT_MIN || data.len() < head + ALIGN {
            return file.write_all_at(data, offset);
        }
        let Some(direct) = descriptor(&self.write_fd, file, false) else {
            return file.write_all_at(data, offset);
        };
        let (head_bytes, rest) = data.split_at(head);
        let (middle, tail) = rest.split_at(rest.len() / ALIGN * ALIGN);
        if !head_bytes.is_empty() {
            file.write_all_at(head_bytes, offset)?;
        }
        let mut at = offset + head as u64;
        for piece in middle.chunks(CHUNK) {
            match write_direct(direct, piece, at) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::debug!(error = %e, "O_DIRECT write refused; buffered");
                    file.write_all_at(piece, at)?;
                }
                Err(e) => return Err(e),
            }
            at += piece.len() as u64;
        }
        if !tail.is_empty() {
            file.write_all_at(tail, at)?;
        }
        Ok(())
    }

    /// Reads some of `buf.len()` bytes at `offset` of `file` (0 at end of file), as
    /// `pread` would: the aligned part straight into `buf` through `O_DIRECT` when `buf`'s
    /// memory is aligned as `offset` is, else the bytes up to the next aligned offset (or
    /// all of them) buffered. Called in a loop, an unaligned head is read buffered once
    /// and the rest goes direct; a tail shorter than a block is read buffered.
    pub(crate) fn read_some(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let misaligned = (offset % ALIGN as u64) as usize;
        if misaligned != 0 {
            let n = ALIGN - misaligned;
            return match buf.get_mut(..n) {
                Some(head) => file.read_at(head, offset),
                None => file.read_at(buf, offset),
            };
        }
        let whole = buf.len() / ALIGN * ALIGN;
        let co_aligned = (buf.as_ptr() as usize).is_multiple_of(ALIGN);
        if whole == 0 || !co_aligned || self.reads_refused.load(Ordering::Relaxed) {
            return file.read_at(buf, offset);
        }
        let Some(direct) = descriptor(&self.read_fd, file, true) else {
            return file.read_at(buf, offset);
        };
        let Some(piece) = buf.get_mut(..whole.min(CHUNK)) else {
            return file.read_at(buf, offset);
        };
        #[cfg(test)]
        DIRECT_READS_ON_THIS_THREAD.with(|c| c.set(c.get() + 1));
        match direct.read_at(piece, offset) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(error = %e, "O_DIRECT read refused; buffered");
                self.reads_refused.store(true, Ordering::Relaxed);
                file.read_at(buf, offset)
            }
            other => other,
        }
    }
}

/// The `O_DIRECT` descriptor of `file`'s inode kept in `slot` (for reading or writing),
/// opened through `/proc/self/fd` on first use (the same inode even after a rename or a
/// pending delete).
fn descriptor<'a>(slot: &'a OnceLock<Option<File>>, file: &File, read: bool) -> Option<&'a File> {
    slot.get_or_init(|| {
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        match OpenOptions::new()
            .read(read)
            .write(!read)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
        {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::debug!(error = %e, read, "no O_DIRECT descriptor; buffered");
                None
            }
        }
    })
    .as_ref()
}

/// Writes `piece` (a multiple of [`ALIGN`] bytes, at most [`CHUNK`]) at the aligned
/// `offset` through `direct`: as it is when its memory is aligned (the SMB server places
/// a large WRITE's data so), else from a pooled aligned copy.
fn write_direct(direct: &File, piece: &[u8], offset: u64) -> io::Result<()> {
    if (piece.as_ptr() as usize).is_multiple_of(ALIGN) {
        #[cfg(test)]
        UNCOPIED_DIRECT_WRITES_ON_THIS_THREAD.with(|c| c.set(c.get() + 1));
        return direct.write_all_at(piece, offset);
    }
    let mut buf = POOL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop()
        .unwrap_or_else(|| vec![0u8; CHUNK + ALIGN]);
    let start = buf.as_ptr().align_offset(ALIGN);
    let range = start..start.saturating_add(piece.len());
    let result = match buf.get_mut(range) {
        Some(aligned) => {
            aligned.copy_from_slice(piece);
            direct.write_all_at(aligned, offset)
        }
        None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < POOL_MAX {
        pool.push(buf);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A new, empty file in `dir` opened for reading and writing.
    fn scratch_file(dir: &tempfile::TempDir) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
    }

    /// Unaligned and aligned large writes, over and past the end, read back exactly what a
    /// plain buffered file would hold (on the test machine's /tmp the middle goes direct;
    /// on a file system without O_DIRECT the same test covers the fallback).
    #[test]
    fn large_writes_read_back_like_buffered_ones() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = scratch_file(&dir)?;
        let direct = DirectIo::default();
        let mut expect = vec![0u8; 0];
        let writes: [(u64, usize, u8); 5] = [
            (0, 1 << 20, 1),
            (100, (1 << 20) + 777, 2),
            (4095, DIRECT_MIN + 1, 3),
            (3 << 20, CHUNK + 3 * ALIGN + 5, 4),
            (8192, 1000, 5),
        ];
        for (offset, len, seed) in writes {
            let data = pattern(len, seed);
            direct.write_all_at(&file, &data, offset)?;
            let end = offset as usize + len;
            if expect.len() < end {
                expect.resize(end, 0);
            }
            expect[offset as usize..end].copy_from_slice(&data);
            // Read through the ordinary descriptor after every write: no stale page cache.
            let mut got = vec![0u8; expect.len()];
            file.read_exact_at(&mut got, 0)?;
            assert!(
                got == expect,
                "content differs after write at {offset}+{len}"
            );
            assert_eq!(file.metadata()?.len(), expect.len() as u64);
        }
        Ok(())
    }

    /// Data whose memory is aligned as its file offset is goes to the `O_DIRECT`
    /// descriptor as it is, with no bounce copy, and reads back exactly; misaligned
    /// memory takes the bounce buffer.
    #[test]
    fn writes_from_aligned_memory_skip_the_bounce_copy() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = scratch_file(&dir)?;
        let Some(_) = descriptor(&DirectIo::default().write_fd, &file, false) else {
            eprintln!("no O_DIRECT on this file system; nothing to check");
            return Ok(());
        };
        let direct = DirectIo::default();
        let len = DIRECT_MIN + 3 * ALIGN + 11;
        let uncopied = || UNCOPIED_DIRECT_WRITES_ON_THIS_THREAD.with(|c| c.get());
        for (offset, shift, bounce_free) in [(0u64, 0, true), (100, 100, true), (0, 8, false)] {
            let mut backing = vec![0u8; len + 2 * ALIGN];
            let at = backing.as_ptr().align_offset(ALIGN) + shift;
            let data = &mut backing[at..at + len];
            data.copy_from_slice(&pattern(len, offset as u8 ^ shift as u8));
            let before = uncopied();
            direct.write_all_at(&file, data, offset)?;
            assert_eq!(
                uncopied() > before,
                bounce_free,
                "offset {offset} shift {shift}"
            );
            let mut got = vec![0u8; len];
            file.read_exact_at(&mut got, offset)?;
            assert!(got == *data, "content at {offset} from shift {shift}");
        }
        Ok(())
    }
}
