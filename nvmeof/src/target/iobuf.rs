//! The data buffer of a storage operation. Its start is 4 KiB-aligned, so a backend can
//! hand it to `O_DIRECT` I/O in place: a write's data is copied once, out of the receive
//! buffer, and a read's data lands where the answer is built from, with no bounce buffer
//! in between. Buffers are carved from their chunks in safe code (`split_at_mut`); only
//! the chunks' memory comes from a mapping of its own ([`quarry_hugemem::HugeBuf`]).
//!
//! Buffers of up to `POOLED_MAX` (1 MiB) are recycled through a process-wide pool of
//! size classes (`IoBufPool`): a fresh buffer per command cost a `malloc`, a `memset`
//! and, from 128 KiB up, an `mmap` whose every page faulted in and was zeroed again by
//! the kernel (15% of Quarry's samples in 128 KiB reads, 5% in 4 KiB reads;
//! tests/bench/nvme.md). A recycled buffer keeps its old bytes: [`IoBuf::for_overwrite`]
//! hands them out as they are, for a read that overwrites all of them, so the pool never
//! pays for zeroing either.
//!
//! The pool's buffers are carved from an arena of [`ARENA_CHUNK`]-byte chunks that are
//! mapped on demand, at most [`ARENA_CHUNKS`] of them, and never freed. A chunk of large
//! buffers is one 2 MiB transparent huge page where the kernel has one to give
//! ([`quarry_hugemem`]); a chunk of small buffers is advised against huge pages. Because
//! a chunk never moves or goes away, a backend may register it with the kernel once
//! (io_uring's fixed buffers: [`arena_chunks`], [`IoBuf::arena_chunk`]) and then run
//! `O_DIRECT` I/O on its buffers without the kernel pinning their pages for every
//! operation (7.5% of Quarry's samples in 128 KiB writes; tests/bench/nvme.md). A chunk,
//! once carved for a size class, serves that class only. When the arena is full, buffers
//! come from the heap and are freed when dropped.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use quarry_hugemem::HugeBuf;

/// Alignment of every [`IoBuf`]'s start: what `O_DIRECT` needs on 512-byte and 4 KiB
/// logical-block devices.
pub const IO_BUF_ALIGN: usize = 4096;

/// Smallest size class: one 4 KiB block.
const SMALLEST_CLASS: usize = 4096;
/// Number of size classes: 4 KiB, 8 KiB, ... [`POOLED_MAX`].
const CLASSES: usize = 9;
/// Largest buffer the pool recycles: 1 MiB, the most data one NVMe command moves
/// ([`super::limits::MDTS`]). Larger buffers come from the heap and are freed when dropped.
const POOLED_MAX: usize = SMALLEST_CLASS << (CLASSES - 1);
/// Bytes of one arena chunk: two of the largest buffers, 512 of the smallest.
pub const ARENA_CHUNK: usize = 2 * POOLED_MAX;
/// Smallest size class whose chunks are put on transparent huge pages: a
/// buffer of 32 or more 4 KiB pages, where huge pages saved 17-24% of the CPU per
/// 128 KiB NVMe/TCP read. Smaller buffers stay on 4 KiB pages, as 4 KiB I/O gained
/// nothing from huge ones (tests/bench/nvme.md, "Huge pages for the I/O buffer arena").
const HUGE_PAGE_CLASS_MIN: usize = 128 << 10;
/// Most chunks the process's arena holds (128 MiB): the bound on the memory the pool
/// keeps, and the size of the table a ring registers them in. 256 reads of 128 KiB in
/// flight at once (8 queues of 32) take 32 MiB.
pub const ARENA_CHUNKS: usize = 64;

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

/// A free arena buffer: its chunk's index and its memory (aligned, exactly its class's
/// length).
type Slot = (u16, &'static mut [u8]);

/// Free buffers, by size class, and the arena they are carved from.
struct IoBufPool {
    free: [Mutex<Vec<Slot>>; CLASSES],
    /// Start address and length of each chunk, in the order they were made (the index
    /// is the chunk's number).
    chunks: Mutex<Vec<(usize, usize)>>,
    /// Most chunks this pool makes.
    max_chunks: usize,
}

/// The process's pool, shared by every queue: a buffer is often taken on one thread (a
/// blocking-pool worker reading) and given back on another (the queue that sent it).
static POOL: IoBufPool = IoBufPool::new(ARENA_CHUNKS);

/// Start address and length of the process arena's chunks from number `from` on, in
/// order: what a ring registers as its fixed buffers `from`, `from + 1`, ... Chunks are
/// never freed, so a registration stays valid for the life of the process.
pub fn arena_chunks(from: usize) -> Vec<(usize, usize)> {
    POOL.chunks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(from..)
        .map(<[_]>::to_vec)
        .unwrap_or_default()
}

impl IoBufPool {
    /// An empty pool whose arena may grow to `max_chunks` chunks.
    const fn new(max_chunks: usize) -> IoBufPool {
        IoBufPool {
            free: [const { Mutex::new(Vec::new()) }; CLASSES],
            chunks: Mutex::new(Vec::new()),
            max_chunks,
        }
    }

    /// A buffer of `class`: a free one, else one carved from a new chunk (its siblings
    /// go to the free list), else `None` (the arena is full).
    fn take(&self, class: usize) -> Option<Slot> {
        let free = self.free.get(class)?;
        if let Some(slot) = free.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Some(slot);
        }
        let len = class_len(class);
        let (index, mut rest) = self.new_chunk(len >= HUGE_PAGE_CLASS_MIN)?;
        let mut carved = Vec::with_capacity(ARENA_CHUNK / len);
        while rest.len() >= len {
            let (piece, tail) = rest.split_at_mut(len);
            carved.push((index, piece));
            rest = tail;
        }
        let mine = carved.pop();
        free.lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&mut carved);
        mine
    }

    /// A new chunk (its number and memory, aligned to a huge page, on huge pages if
    /// `huge`), unless the arena is full or the kernel refuses the memory. Its pages are
    /// only touched when used.
    fn new_chunk(&self, huge: bool) -> Option<(u16, &'static mut [u8])> {
        let mut chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
        if chunks.len() >= self.max_chunks {
            return None;
        }
        let index = u16::try_from(chunks.len()).ok()?;
        let mem = if huge {
            HugeBuf::new(ARENA_CHUNK, 0)
        } else {
            HugeBuf::without_huge_pages(ARENA_CHUNK)
        }?
        .leak();
        chunks.push((mem.as_ptr() as usize, mem.len()));
        Some((index, mem))
    }

    /// Takes `slot` back for reuse.
    fn give(&self, class: usize, slot: Slot) {
        if let Some(free) = self.free.get(class) {
            free.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
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

/// Where a buffer's bytes live.
enum Mem {
    /// An over-allocated heap `Vec` (the arena was full, or more than [`POOLED_MAX`]).
    Heap(Vec<u8>),
    /// A buffer of the pool's arena, going back to `pool`'s `class` when dropped.
    Arena {
        pool: &'static IoBufPool,
        class: usize,
        slot: Option<Slot>,
    },
}

impl Mem {
    fn bytes(&self) -> &[u8] {
        match self {
            Mem::Heap(v) => v,
            Mem::Arena { slot, .. } => slot.as_ref().map_or(&[][..], |(_, m)| &**m),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Mem::Heap(v) => v,
            Mem::Arena { slot, .. } => slot.as_mut().map_or(&mut [][..], |(_, m)| &mut **m),
        }
    }
}

impl Default for Mem {
    fn default() -> Mem {
        Mem::Heap(Vec::new())
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Arena { pool, class, slot } = self {
            if let Some(slot) = slot.take() {
                pool.give(*class, slot);
            }
        }
    }
}

/// A byte buffer whose start is [`IO_BUF_ALIGN`]-aligned (see [`IoBuf::is_aligned`] for
/// the one case where it is not), of fixed capacity: it never reallocates, so the
/// alignment holds for its whole life.
#[derive(Default)]
pub struct IoBuf {
    /// Padding up to the aligned start, then room for `cap` data bytes; every byte is
    /// initialised (bytes past `len` are left from the buffer's last use).
    mem: Mem,
    /// Where the data starts in `mem`.
    off: usize,
    /// Data bytes held.
    len: usize,
    /// Most data bytes it takes.
    cap: usize,
}

impl IoBuf {
    /// An empty buffer with room for `cap` bytes, from `pool` when it fits a size class
    /// and the arena has room.
    fn empty_in(pool: &'static IoBufPool, cap: usize) -> IoBuf {
        let pooled = class_of(cap).and_then(|class| {
            pool.take(class).map(|slot| Mem::Arena {
                pool,
                class,
                slot: Some(slot),
            })
        });
        let mem = pooled.unwrap_or_else(|| Mem::Heap(vec![0; cap.saturating_add(IO_BUF_ALIGN)]));
        let off = mem.bytes().as_ptr().align_offset(IO_BUF_ALIGN);
        // `align_offset` on bytes is exact; should it ever not be, the buffer is simply
        // unaligned (correct, only slower: `is_aligned` tells users).
        let off = if off < IO_BUF_ALIGN { off } else { 0 };
        IoBuf {
            mem,
            off,
            len: 0,
            cap,
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
        match self.mem.bytes_mut().get_mut(at..at + data.len()) {
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
        self.mem.bytes_mut().get_mut(at..at + n).unwrap_or_default()
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

    /// The number of the process arena's chunk that holds this buffer (see
    /// [`arena_chunks`]), if it is one of the arena's: a ring that registered that chunk
    /// may run I/O on the buffer as a fixed buffer.
    pub fn arena_chunk(&self) -> Option<u16> {
        match &self.mem {
            Mem::Arena {
                pool,
                slot: Some((chunk, _)),
                ..
            } if std::ptr::eq(*pool, &POOL) => Some(*chunk),
            _ => None,
        }
    }
}

impl Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.mem
            .bytes()
            .get(self.off..self.off + self.len)
            .unwrap_or_default()
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.mem
            .bytes_mut()
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

    /// A pool of its own, so that no other test takes or gives its buffers, with an
    /// arena of `chunks` chunks.
    fn private_pool(chunks: usize) -> &'static IoBufPool {
        Box::leak(Box::new(IoBufPool::new(chunks)))
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
        let pool = private_pool(1);
        let mut first = IoBuf::for_overwrite_in(pool, 8192);
        first.fill(0xaa);
        let at = first.as_ptr();
        // The rest of the chunk was carved for the class at the same time.
        let siblings = ARENA_CHUNK / 8192 - 1;
        assert_eq!(pool.free_buffers(), siblings);
        drop(first);
        assert_eq!(pool.free_buffers(), siblings + 1);
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
        assert_eq!(pool.free_buffers(), siblings + 1);
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
    fn the_arena_is_bounded_then_the_heap_serves_and_huge_buffers_are_never_pooled() {
        let pool = private_pool(2);
        // Two chunks hold four of the largest buffers; the fifth comes from the heap.
        let bufs: Vec<IoBuf> = (0..5)
            .map(|_| IoBuf::for_overwrite_in(pool, POOLED_MAX))
            .collect();
        assert!(bufs.iter().all(IoBuf::is_aligned));
        let starts: std::collections::HashSet<usize> =
            bufs.iter().map(|b| b.as_ptr() as usize).collect();
        assert_eq!(starts.len(), 5, "no two buffers share memory");
        let chunks = pool.chunks.lock().unwrap().clone();
        assert_eq!(chunks.len(), 2);
        let in_arena = |b: &IoBuf| {
            let at = b.as_ptr() as usize;
            chunks
                .iter()
                .any(|&(start, len)| at >= start && at + b.len() <= start + len)
        };
        assert_eq!(bufs.iter().filter(|b| in_arena(b)).count(), 4);
        assert_eq!(pool.free_buffers(), 0);
        drop(bufs);
        assert_eq!(
            pool.free_buffers(),
            4,
            "arena buffers come back, heap ones go"
        );
        // A full arena still serves every class, from the heap.
        let small = IoBuf::for_overwrite_in(pool, 4096);
        assert!(small.is_aligned() && !in_arena(&small));
        let huge = IoBuf::for_overwrite_in(pool, POOLED_MAX + 1);
        assert!(huge.is_aligned());
        assert_eq!(huge.len(), POOLED_MAX + 1);
        drop((small, huge));
        assert_eq!(pool.free_buffers(), 4, "neither is kept");
        // Only the process pool's buffers name a chunk a ring may have registered.
        assert_eq!(IoBuf::for_overwrite_in(pool, 4096).arena_chunk(), None);
    }

    #[test]
    fn process_pool_buffers_name_their_registered_chunk() {
        let b = IoBuf::for_overwrite(128 * 1024);
        let chunk = b
            .arena_chunk()
            .expect("the process arena has room in tests");
        let (start, len) = arena_chunks(usize::from(chunk))[0];
        let at = b.as_ptr() as usize;
        assert!(at >= start && at + b.len() <= start + len);
        assert_eq!(start % IO_BUF_ALIGN, 0);
        assert_eq!(len, ARENA_CHUNK);
        assert_eq!(IoBuf::for_overwrite(POOLED_MAX + 1).arena_chunk(), None);
    }

    /// Chunks of buffers from [`HUGE_PAGE_CLASS_MIN`] up may be huge pages; chunks of
    /// smaller buffers may not.
    #[test]
    fn only_chunks_of_large_buffers_may_be_huge_pages() {
        let pool = private_pool(2);
        let large = IoBuf::for_overwrite_in(pool, HUGE_PAGE_CLASS_MIN);
        let small = IoBuf::for_overwrite_in(pool, HUGE_PAGE_CLASS_MIN / 2);
        assert_eq!(pool.chunks.lock().unwrap().len(), 2, "one chunk each");
        if quarry_hugemem::huge_pages_on() {
            let eligible = |b: &IoBuf| quarry_hugemem::thp_eligible(b.as_ptr() as usize);
            assert_eq!(eligible(&large), Some(true));
            assert_eq!(eligible(&small), Some(false));
        }
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
