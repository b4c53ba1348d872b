//! The data buffer of a storage operation. Its start is 4 KiB-aligned, so a backend can
//! hand it to `O_DIRECT` I/O in place: a write's data is copied once, out of the receive
//! buffer, and a read's data lands where the answer is built from, with no bounce buffer
//! in between. Built in safe code from an over-allocated `Vec` (no custom allocator).
//!
//! Buffers of up to `POOLED_MAX` (1 MiB) are recycled through a process-wide pool of
//! size classes (`IoBufPool`): a fresh buffer per command cost a `malloc`, a `memset`
//! and, from 128 KiB up, an `mmap` whose every page faulted in and was zeroed again by
//! the kernel (15% of Quarry's samples in 128 KiB reads, 5% in 4 KiB reads;
//! tests/bench/nvme.md). A recycled buffer keeps its old bytes: [`IoBuf::for_overwrite`]
//! hands them out as they are, for a read that overwrites all of them, so the pool never
//! pays for zeroing either.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Alignment of every [`IoBuf`]'s start: what `O_DIRECT` needs on 512-byte and 4 KiB
/// logical-block devices.
pub const IO_BUF_ALIGN: usize = 4096;

/// Smallest size class: one 4 KiB block.
const SMALLEST_CLASS: usize = 4096;
/// Number of size classes: 4 KiB, 8 KiB, ... [`POOLED_MAX`].
const CLASSES: usize = 9;
/// Largest buffer the pool recycles: 1 MiB, the most data one NVMe command moves
/// ([`super::limits::MDTS`]). Larger buffers are allocated and freed as before.
const POOLED_MAX: usize = SMALLEST_CLASS << (CLASSES - 1);
/// Memory the pool keeps per size class (free buffers only; buffers in use are not
/// counted). Bounds the whole pool to about `CLASSES` x 8 MiB.
const POOL_BYTES_PER_CLASS: usize = 8 << 20;

/// The size class that holds `len` bytes, if any.
fn class_of(len: usize) -> Option<usize> {
    if len > POOLED_MAX {
        return None;
    }
    let blocks = len.div_ceil(SMALLEST_CLASS).max(1);
    Some(blocks.next_power_of_two().trailing_zeros() as usize)
}

/// Data bytes a buffer of `class` holds.
fn class_len(class: usize) -> usize {
    SMALLEST_CLASS << class
}

/// Free buffers, by size class. Each is a whole over-allocated `Vec` (initialised bytes,
/// contents left from its last use), kept at most [`POOL_BYTES_PER_CLASS`] per class.
struct IoBufPool {
    free: [Mutex<Vec<Vec<u8>>>; CLASSES],
}

/// The process's pool, shared by every queue: a buffer is often taken on one thread (a
/// blocking-pool worker reading) and given back on another (the queue that sent it).
static POOL: IoBufPool = IoBufPool::new();

impl IoBufPool {
    /// An empty pool.
    const fn new() -> IoBufPool {
        IoBufPool {
            free: [const { Mutex::new(Vec::new()) }; CLASSES],
        }
    }

    /// A buffer of `class` (from the free list, else new and zeroed once).
    fn take(&self, class: usize) -> Vec<u8> {
        let reused = self
            .free
            .get(class)
            .and_then(|f| f.lock().unwrap_or_else(|p| p.into_inner()).pop());
        reused.unwrap_or_else(|| vec![0; class_len(class) + IO_BUF_ALIGN])
    }

    /// Keeps `buf` for reuse unless its class already holds its share of memory.
    fn give(&self, class: usize, buf: Vec<u8>) {
        let Some(free) = self.free.get(class) else {
            return;
        };
        let keep = POOL_BYTES_PER_CLASS / (class_len(class) + IO_BUF_ALIGN);
        let mut free = free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < keep {
            free.push(buf);
        }
    }

    /// Free buffers held, all classes together.
    #[cfg(test)]
    fn free_buffers(&self) -> usize {
        self.free
            .iter()
            .map(|f| f.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

/// A byte buffer whose start is [`IO_BUF_ALIGN`]-aligned (see [`IoBuf::is_aligned`] for
/// the one case where it is not), of fixed capacity: it never reallocates, so the
/// alignment holds for its whole life.
#[derive(Default)]
pub struct IoBuf {
    /// Padding up to the aligned start, then room for `cap` data bytes; every byte is
    /// initialised (bytes past `len` are left from the buffer's last use).
    buf: Vec<u8>,
    /// Where the data starts in `buf`.
    off: usize,
    /// Data bytes held.
    len: usize,
    /// Most data bytes it takes.
    cap: usize,
    /// The pool and size class the buffer goes back to when dropped.
    home: Option<(&'static IoBufPool, usize)>,
}

impl IoBuf {
    /// An empty buffer with room for `cap` bytes, from `pool` when it fits a size class.
    fn empty_in(pool: &'static IoBufPool, cap: usize) -> IoBuf {
        let (buf, home) = match class_of(cap) {
            Some(class) => (pool.take(class), Some((pool, class))),
            None => (vec![0; cap.saturating_add(IO_BUF_ALIGN)], None),
        };
        let off = buf.as_ptr().align_offset(IO_BUF_ALIGN);
        // `align_offset` on bytes is exact; should it ever not be, the buffer is simply
        // unaligned (correct, only slower: `is_aligned` tells users).
        let off = if off < IO_BUF_ALIGN { off } else { 0 };
        IoBuf {
            buf,
            off,
            len: 0,
            cap,
            home,
        }
    }

    /// An empty buffer that can take `cap` bytes through [`IoBuf::extend_from_slice`].
    pub fn with_capacity(cap: usize) -> IoBuf {
        IoBuf::empty_in(&POOL, cap)
    }

    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> IoBuf {
        let mut b = IoBuf::for_overwrite(len);
        b.fill(0);
        b
    }

    /// `len` bytes of unspecified content (left from the buffer's last use, possibly
    /// another volume's data), for a read that overwrites every one of them before the
    /// buffer is shown to anyone: a [`super::BlockDevice::read_at`] that succeeded, or a
    /// ring read that zeroes what end of file left unread.
    pub fn for_overwrite(len: usize) -> IoBuf {
        IoBuf::for_overwrite_in(&POOL, len)
    }

    fn for_overwrite_in(pool: &'static IoBufPool, len: usize) -> IoBuf {
        let mut b = IoBuf::empty_in(pool, len);
        b.len = len;
        b
    }

    /// A copy of `data`.
    pub fn copy_from(data: &[u8]) -> IoBuf {
        let mut b = IoBuf::with_capacity(data.len());
        b.extend_from_slice(data);
        b
    }

    /// Appends `data` if it fits the capacity; returns false (appending nothing) if not.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> bool {
        if self.len.saturating_add(data.len()) > self.cap {
            return false;
        }
        let at = self.off + self.len;
        match self.buf.get_mut(at..at + data.len()) {
            Some(room) => room.copy_from_slice(data),
            None => return false,
        }
        self.len += data.len();
        true
    }

    /// Most data bytes it takes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The room after the data, at most `max` bytes, for a reader to fill in place (a
    /// socket read); [`IoBuf::commit`] then counts what it wrote as data. Its bytes are
    /// unspecified until written.
    pub fn spare_mut(&mut self, max: usize) -> &mut [u8] {
        let at = self.off + self.len;
        let n = max.min(self.cap.saturating_sub(self.len));
        self.buf.get_mut(at..at + n).unwrap_or_default()
    }

    /// Counts `n` more bytes, written through [`IoBuf::spare_mut`], as data; false (and
    /// nothing counted) past the capacity.
    pub fn commit(&mut self, n: usize) -> bool {
        if self.len.saturating_add(n) > self.cap {
            return false;
        }
        self.len += n;
        true
    }

    /// Whether the data starts on an [`IO_BUF_ALIGN`] boundary (always, except for an
    /// empty default buffer).
    pub fn is_aligned(&self) -> bool {
        (self.as_ptr() as usize).is_multiple_of(IO_BUF_ALIGN)
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Some((pool, class)) = self.home.take() {
            pool.give(class, std::mem::take(&mut self.buf));
        }
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
            .get(self.off..self.off + self.len)
            .unwrap_or_default()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf
            .get_mut(self.off..self.off + self.len)
            .unwrap_or_default()
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

    /// A pool of its own, so that no other test takes or gives its buffers.
    fn private_pool() -> &'static IoBufPool {
        Box::leak(Box::new(IoBufPool::new()))
    }

    #[test]
    fn size_classes_hold_their_lengths() {
        assert_eq!(class_of(0), Some(0));
        assert_eq!(class_of(4096), Some(0));
        assert_eq!(class_of(4097), Some(1));
        assert_eq!(class_of(128 * 1024), Some(5));
        assert_eq!(class_of(128 * 1024 + 1), Some(6));
        assert_eq!(class_of(POOLED_MAX), Some(CLASSES - 1));
        assert_eq!(class_of(POOLED_MAX + 1), None);
        for len in [1, 4095, 4096, 4097, 65_536, 100_000, POOLED_MAX] {
            let class = class_of(len).unwrap_or(CLASSES);
            assert!(class_len(class) >= len && (class == 0 || class_len(class - 1) < len));
        }
    }

    #[test]
    fn a_dropped_buffer_is_reused_as_it_was_left_and_refilled_exactly() {
        let pool = private_pool();
        let mut first = IoBuf::for_overwrite_in(pool, 8192);
        first.fill(0xaa);
        let at = first.as_ptr();
        drop(first);
        assert_eq!(pool.free_buffers(), 1);
        // Reused, not zeroed: its old bytes are still there for a read to overwrite.
        let again = IoBuf::for_overwrite_in(pool, 6000);
        assert_eq!(again.as_ptr(), at, "same class, same memory");
        assert!(again.is_aligned());
        assert_eq!(again.len(), 6000);
        assert!(again.iter().all(|&x| x == 0xaa));
        drop(again);
        // Every other way in gives exactly its own contents over the old bytes.
        let mut ext = IoBuf::empty_in(pool, 7000);
        assert_eq!(ext.as_ptr(), at);
        assert!(ext.is_empty());
        assert!(ext.extend_from_slice(&[1; 10]));
        assert_eq!(&*ext, &[1; 10]);
        drop(ext);
        assert_eq!(pool.free_buffers(), 1);
    }

    #[test]
    fn zeroed_and_copied_buffers_never_show_old_bytes() {
        // The shared pool: whatever other tests left in it, the contents are exact.
        for _ in 0..4 {
            let mut junk = IoBuf::for_overwrite(12_000);
            junk.fill(0x5c);
            drop(junk);
            let z = IoBuf::zeroed(12_000);
            assert!(z.iter().all(|&x| x == 0));
            drop(z);
            let c = IoBuf::copy_from(&[7; 9000]);
            assert_eq!(&*c, &[7; 9000]);
        }
    }

    #[test]
    fn the_pool_keeps_a_bounded_amount_per_class_and_never_pools_huge_buffers() {
        let pool = private_pool();
        let bufs: Vec<IoBuf> = (0..20)
            .map(|_| IoBuf::for_overwrite_in(pool, POOLED_MAX))
            .collect();
        drop(bufs);
        let keep = POOL_BYTES_PER_CLASS / (POOLED_MAX + IO_BUF_ALIGN);
        assert_eq!(pool.free_buffers(), keep);
        let huge = IoBuf::for_overwrite_in(pool, POOLED_MAX + 1);
        assert!(huge.is_aligned());
        assert_eq!(huge.len(), POOLED_MAX + 1);
        drop(huge);
        assert_eq!(
            pool.free_buffers(),
            keep,
            "a huge buffer is freed, not kept"
        );
    }

    #[test]
    fn spare_room_is_filled_in_place_up_to_the_capacity() {
        let mut b = IoBuf::with_capacity(10);
        assert!(b.extend_from_slice(&[1, 2]));
        let room = b.spare_mut(100);
        assert_eq!(room.len(), 8, "bounded by the capacity");
        room[..3].copy_from_slice(&[3, 4, 5]);
        assert!(b.commit(3));
        assert_eq!(&*b, &[1, 2, 3, 4, 5]);
        assert_eq!(b.spare_mut(2).len(), 2, "bounded by the ask");
        assert!(!b.commit(6), "one past the capacity");
        assert_eq!(b.len(), 5);
        assert!(b.commit(5));
        assert!(b.spare_mut(1).is_empty());
        assert_eq!(b.capacity(), 10);
        assert!(IoBuf::default().spare_mut(4).is_empty());
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
